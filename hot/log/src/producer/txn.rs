//! Transaction tracking (KIP-98): the transactions a marker ended, and the unstable
//! ones (open, or ended by a marker not yet below the high-water mark) that hold the
//! last stable offset back.

use strata_proto::{Offset, ProducerId};

use super::ProducerState;

/// A transaction that a marker ended in this partition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    /// The offset of the transaction's first batch here; the marker's own offset for a
    /// transaction that wrote nothing here.
    pub first_offset: Offset,
    /// The marker's offset.
    pub last_offset: Offset,
    pub aborted: bool,
}

/// A transaction whose data a read_committed consumer may not see past yet: open, or
/// ended by a marker not yet below the high-water mark.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Unstable {
    pub(super) producer_id: ProducerId,
    pub(super) marker: Option<Offset>,
}

impl ProducerState {
    /// The first offset of the oldest transaction a read_committed consumer may not
    /// read past with the high-water mark at `high_watermark`: open, or ended by a
    /// marker at or above it. The last stable offset is this, or the high-water mark
    /// when there is none (or it is higher).
    pub fn first_unstable_offset(&self, high_watermark: Offset) -> Option<Offset> {
        self.unstable
            .iter()
            .find(|(_, u)| u.marker.is_none_or(|m| m >= high_watermark))
            .map(|(&first, _)| first)
    }

    /// Forgets ended transactions whose marker is below `high_watermark`: they are
    /// stable for good.
    pub fn prune_stable(&mut self, high_watermark: Offset) {
        self.unstable
            .retain(|_, u| u.marker.is_none_or(|m| m >= high_watermark));
    }

    /// The open transactions here: (first offset, producer id), oldest first.
    pub fn open_transactions(&self) -> impl Iterator<Item = (Offset, ProducerId)> + '_ {
        self.unstable
            .iter()
            .filter(|(_, u)| u.marker.is_none())
            .map(|(&first, u)| (first, u.producer_id))
    }

    /// The unstable set as the producers' open transactions have it (after a snapshot
    /// is decoded: ended transactions are not in it, as Kafka's snapshots do not keep
    /// them).
    pub(super) fn rebuild_unstable(&mut self) {
        self.unstable = self
            .producers
            .iter()
            .filter_map(|(&producer_id, e)| {
                e.current_txn_first_offset.map(|first| {
                    (
                        first,
                        Unstable {
                            producer_id,
                            marker: None,
                        },
                    )
                })
            })
            .collect();
    }
}
