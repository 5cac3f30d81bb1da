//! What the state machine reads of the local log.

use strata_proto::{LeaderEpoch, Offset};

/// A read-only view of the local log: its offsets and its leader-epoch cache. The
/// state machine reads it, never changes it (it asks for changes with
/// [`crate::Command`]s). Implemented for [`strata_log::Log`], whose answers come from
/// memory (no IO), and by test models.
pub trait LocalLog {
    fn log_start_offset(&self) -> Offset;
    fn log_end_offset(&self) -> Offset;
    /// The newest leader epoch of the log (Kafka's `latestEpoch`): what a follower sends
    /// as `lastFetchedEpoch` / asks OffsetsForLeaderEpoch about.
    fn latest_epoch(&self) -> Option<LeaderEpoch>;
    /// Kafka's `endOffsetForEpoch` (KIP-279): `(largest known epoch <= epoch, start of
    /// the next larger one, or the log end for the latest)`; `None` when undefined. See
    /// [`strata_log::LeaderEpochCache::end_offset_for`].
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)>;
}

impl LocalLog for strata_log::Log {
    fn log_start_offset(&self) -> Offset {
        strata_log::Log::log_start_offset(self)
    }
    fn log_end_offset(&self) -> Offset {
        strata_log::Log::log_end_offset(self)
    }
    fn latest_epoch(&self) -> Option<LeaderEpoch> {
        strata_log::Log::latest_epoch(self)
    }
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        strata_log::Log::end_offset_for_epoch(self, epoch)
    }
}

/// A log as the tests (and simulations) model it: offsets and a leader-epoch cache,
/// no records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochLog {
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    pub epochs: strata_log::LeaderEpochCache,
}

impl LocalLog for EpochLog {
    fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }
    fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }
    fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest_epoch()
    }
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset)
    }
}
