//! The log's leader-epoch cache (KIP-101): assignments made durable before the batches
//! they describe, the queries OffsetsForLeaderEpoch needs, and the fsync of the
//! checkpoint before the recovery point passes it.

use std::path::Path;

use strata_proto::{LeaderEpoch, Offset};

use super::{Inner, LEADER_EPOCH_FILE, Log};
use crate::checkpoint;
use crate::epoch::{EpochEntry, LeaderEpochCache};
use crate::error::LogError;

impl Log {
    /// Assigns leader epochs (epoch, first offset) in log order to the epoch cache,
    /// and writes the change (without fsync: see `epochs_unsynced`) before returning.
    /// Nothing changes (and nothing is
    /// written) in the common case of an epoch the cache already has as its latest.
    /// On error the cache is as it was.
    pub(super) fn assign_epochs(
        &self,
        g: &mut Inner,
        epochs: impl IntoIterator<Item = (LeaderEpoch, Offset)>,
    ) -> Result<(), LogError> {
        let mut changed: Option<LeaderEpochCache> = None;
        for (epoch, offset) in epochs {
            let current = changed.as_ref().unwrap_or(&g.epochs);
            if !current.would_change(epoch, offset) {
                continue;
            }
            changed
                .get_or_insert_with(|| g.epochs.clone())
                .assign(epoch, offset);
        }
        if let Some(cache) = changed {
            checkpoint::write_epochs_unsynced(&self.dir.join(LEADER_EPOCH_FILE), &cache)?;
            g.epochs = cache;
            g.epochs_unsynced = true;
        }
        Ok(())
    }

    /// Writes the epoch cache if `change` changed it. The in-memory cache changes
    /// either way: a checkpoint left behind is repaired by recovery, which clips the
    /// cache to the log's offsets.
    pub(super) fn update_epochs(
        &self,
        g: &mut Inner,
        change: impl FnOnce(&mut LeaderEpochCache) -> bool,
    ) -> Result<(), LogError> {
        if change(&mut g.epochs) {
            checkpoint::write_epochs(&self.dir.join(LEADER_EPOCH_FILE), &g.epochs)?;
            g.epochs_unsynced = false;
        }
        Ok(())
    }

    /// The newest leader epoch the log knows (Kafka's `latestEpoch`): the epoch of its
    /// last batches, or the one assigned by [`Self::assign_epoch_start`] after them.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.read_lock().epochs.latest_epoch()
    }

    /// Where leader epoch `requested` ends in this log, for OffsetsForLeaderEpoch and
    /// the fetch-path divergence check (Kafka's `endOffsetForEpoch`, KIP-279): `(the
    /// largest known epoch <= requested, the start offset of the next larger epoch)`,
    /// or the log end offset when that epoch is the latest. Below the first known
    /// epoch: `(requested, start of the first one)`, as Kafka answers. `None` (Kafka's
    /// `UNDEFINED_EPOCH_OFFSET`) when `requested` is negative or above every known
    /// epoch, or no epoch is known. See [`crate::epoch::LeaderEpochCache::end_offset_for`].
    pub fn end_offset_for_epoch(&self, requested: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        let g = self.read_lock();
        g.epochs.end_offset_for(requested, g.log_end_offset())
    }

    /// The leader-epoch cache: the first offset of every known epoch, oldest first.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.read_lock().epochs.entries().to_vec()
    }

    pub(crate) fn epoch_cache(&self) -> LeaderEpochCache {
        self.read_lock().epochs.clone()
    }

    /// Records that leader epoch `epoch` starts at the log end, durably (Kafka's
    /// `maybeAssignEpochStartOffset`, called when this replica becomes leader). Without
    /// it a new leader that has not appended yet would not know its own epoch, and
    /// would answer a follower asking about a newer epoch of its own log "undefined"
    /// instead of where their logs part. Returns the start offset (the log end).
    /// Assigning the latest epoch again changes nothing.
    pub fn assign_epoch_start(&self, epoch: LeaderEpoch) -> Result<Offset, LogError> {
        let mut g = self.write_lock();
        let g = &mut *g;
        let leo = g.log_end_offset();
        self.assign_epochs(g, [(epoch, leo)])?;
        Ok(leo)
    }
}

/// fsyncs the leader-epoch checkpoint if an assignment wrote it without: called
/// before the recovery point moves up, so that no batch below it has an epoch the
/// checkpoint on the device lacks.
pub(super) fn sync_epochs(dir: &Path, g: &mut Inner) -> Result<(), LogError> {
    if g.epochs_unsynced {
        // The file holds the cache already: fsync it and its rename, not a rewrite.
        checkpoint::sync_file(&dir.join(LEADER_EPOCH_FILE))?;
        checkpoint::sync_directory(dir)?;
        g.epochs_unsynced = false;
    }
    Ok(())
}
