//! The leader-epoch cache: Kafka's `LeaderEpochFileCache` (KIP-101, KIP-279).
//!
//! Every batch carries the epoch of the leader that appended it (`partitionLeaderEpoch`).
//! The cache keeps, for each epoch, the first offset appended in it: entries
//! `(epoch, start_offset)`, strictly increasing in both. It answers OffsetsForLeaderEpoch
//! ("where does my epoch end in your log?"), which is how a follower finds the point
//! where its log and the leader's part: truncating to the high-water mark instead loses
//! acknowledged records when leaders change twice quickly (KIP-101), and comparing
//! only the follower's latest epoch misses a divergence several epochs back (KIP-279).
//!
//! This module is sans-IO: [`LeaderEpochCache`] is the in-memory map with Kafka's
//! operations, and [`encode`] / [`decode`] its checkpoint file, which the log writes to
//! `leader-epoch-checkpoint` in Kafka's format:
//!
//! ```text
//! 0                 version
//! 2                 number of entries
//! 0 0               epoch start-offset
//! 3 1500
//! ```
//!
//! The log keeps the cache consistent with its batches: appends add entries, truncation
//! removes the entries at and above the cut ([`LeaderEpochCache::truncate_from_end`]),
//! a moved log start moves the first entry ([`LeaderEpochCache::truncate_from_start`]),
//! and recovery checks the file against the batches it scans and rebuilds it from the
//! batch headers when it is missing or disagrees.

use strata_proto::{LeaderEpoch, Offset};

/// Kafka's `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`, as OffsetsForLeaderEpoch
/// puts them on the wire for "unknown".
pub const UNDEFINED_EPOCH: LeaderEpoch = -1;
pub const UNDEFINED_EPOCH_OFFSET: Offset = -1;

/// The first offset appended in a leader epoch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EpochEntry {
    pub epoch: LeaderEpoch,
    pub start_offset: Offset,
}

/// The leader-epoch cache of one partition (see the module docs).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LeaderEpochCache {
    /// Strictly increasing in epoch and in start offset.
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache holding `entries`, if they are strictly increasing in epoch and start
    /// offset and have no negative values (what a checkpoint file must hold).
    pub fn from_entries(entries: Vec<EpochEntry>) -> Option<Self> {
        let monotonic = entries
            .windows(2)
            .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset);
        let non_negative = entries.iter().all(|e| e.epoch >= 0 && e.start_offset >= 0);
        (monotonic && non_negative).then_some(LeaderEpochCache { entries })
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.latest().map(|e| e.epoch)
    }

    /// The entry in force at `offset`: the last one starting at or before it.
    pub fn entry_at(&self, offset: Offset) -> Option<EpochEntry> {
        let i = self.entries.partition_point(|e| e.start_offset <= offset);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// Whether [`Self::assign`] would change the cache (Kafka's `isUpdateNeeded`):
    /// the epoch differs from the latest, or starts before it.
    pub fn would_change(&self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        epoch >= 0
            && start_offset >= 0
            && self
                .latest()
                .is_none_or(|l| l.epoch != epoch || start_offset < l.start_offset)
    }

    /// Records that `epoch` starts at `start_offset` (Kafka's `assign`). Nothing changes
    /// unless the epoch differs from the latest one or starts before it; negative
    /// values are ignored (batches of old clients carry epoch -1). Entries that the new
    /// one contradicts (an epoch at or above it, or a start at or after it) are removed
    /// first, as Kafka's `maybeTruncateNonMonotonicEntries` does: a leader is fenced
    /// before it could append with a stale epoch, so that happens only after damage.
    /// Returns whether the cache changed.
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        if !self.would_change(epoch, start_offset) {
            return false;
        }
        let mut removed = Vec::new();
        while let Some(&e) = self.entries.last() {
            if e.epoch < epoch && e.start_offset < start_offset {
                break;
            }
            removed.push(e);
            self.entries.pop();
        }
        // One removed entry at the same start is the expected case: an epoch assigned
        // at become-leader, superseded before anything was appended in it.
        if removed.len() > 1
            || removed
                .first()
                .is_some_and(|e| e.start_offset != start_offset)
        {
            tracing::warn!(
                epoch,
                start_offset,
                ?removed,
                "leader epoch entry truncated conflicting entries"
            );
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Removes every entry starting at or after `end_offset` (Kafka's `truncateFromEnd`):
    /// the log was truncated there. Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: Offset) -> bool {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// The log now starts at `start_offset` (Kafka's `truncateFromStart`): entries
    /// starting at or before it are removed, and the last of them comes back starting at
    /// `start_offset`, since its epoch is the one in force there. Returns whether the
    /// cache changed.
    pub fn truncate_from_start(&mut self, start_offset: Offset) -> bool {
        let n = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if n == 0 {
            return false;
        }
        let last = self.entries[n - 1];
        if n == 1 && last.start_offset == start_offset {
            return false;
        }
        self.entries.drain(..n - 1);
        self.entries[0].start_offset = start_offset;
        true
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// Kafka's `endOffsetFor`: the end of `requested` in a log ending at
    /// `log_end_offset`, as `(epoch, end_offset)`, where `epoch` is the largest known
    /// epoch at or below `requested` and `end_offset` the start of the next larger
    /// epoch, or the log end when `requested` is the latest epoch. When `requested` is
    /// below every known epoch, Kafka answers `(requested, start of the first epoch)`:
    /// the older data is gone, and the follower must not keep anything past where the
    /// known epochs begin. `None` (Kafka's `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`)
    /// when `requested` is undefined (negative), above the latest epoch, or the cache
    /// is empty.
    pub fn end_offset_for(
        &self,
        requested: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        if requested < 0 {
            return None;
        }
        let latest = self.latest()?;
        if latest.epoch == requested {
            // The leader's current epoch ends at the log end.
            return Some((requested, log_end_offset));
        }
        // The first entry with an epoch above `requested`.
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let next = self.entries.get(higher)?;
        match higher.checked_sub(1) {
            Some(floor) => Some((self.entries[floor].epoch, next.start_offset)),
            None => Some((requested, next.start_offset)),
        }
    }
}

/// The checkpoint file's bytes for `cache` (Kafka's `leader-epoch-checkpoint` format).
pub fn encode(cache: &LeaderEpochCache) -> Vec<u8> {
    let mut out = format!("0\n{}\n", cache.entries.len());
    for e in &cache.entries {
        out.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
    }
    out.into_bytes()
}

/// Parses a checkpoint file. `None` if it is torn (fewer entries than it announces),
/// of another version, or not a valid cache: the caller rebuilds from the log.
pub fn decode(bytes: &[u8]) -> Option<LeaderEpochCache> {
    let text = std::str::from_utf8(bytes).ok()?;
    // The writer ends every line with a newline: a missing one means a torn file.
    if !text.ends_with('\n') {
        return None;
    }
    let mut lines = text.lines();
    if lines.next()?.trim() != "0" {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    let mut entries = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let line = lines.next()?;
        let mut parts = line.split_whitespace();
        let epoch = parts.next()?.parse().ok()?;
        let start_offset = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        entries.push(EpochEntry {
            epoch,
            start_offset,
        });
    }
    if lines.any(|l| !l.trim().is_empty()) {
        return None;
    }
    LeaderEpochCache::from_entries(entries)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        LeaderEpochCache::from_entries(
            entries
                .iter()
                .map(|&(epoch, start_offset)| EpochEntry {
                    epoch,
                    start_offset,
                })
                .collect(),
        )
        .unwrap()
    }

    fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    /// The examples of Kafka's `LeaderEpochFileCacheTest`.
    #[test]
    fn end_offset_for_matches_kafka() {
        // shouldReturnLogEndOffsetIfLatestEpochRequested
        let c = cache(&[(2, 6), (3, 8), (4, 9)]);
        assert_eq!(c.end_offset_for(4, 11), Some((4, 11)));
        // shouldReturnUndefinedOffsetIfUndefinedEpochRequested
        assert_eq!(c.end_offset_for(UNDEFINED_EPOCH, 11), None);
        // shouldReturnUndefinedOffsetIfRequestedEpochIsGreaterThanLatest
        assert_eq!(c.end_offset_for(5, 11), None);
        // shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested
        let c = cache(&[(0, 10), (2, 13), (4, 17)]);
        assert_eq!(c.end_offset_for(1, 20), Some((0, 13)));
        assert_eq!(c.end_offset_for(2, 20), Some((2, 17)));
        assert_eq!(c.end_offset_for(3, 20), Some((2, 17)));
        // shouldReturnFirstEpochStartOffsetIfRequestedEpochLessThanFirstEpoch
        let c = cache(&[(5, 11), (6, 12), (7, 13)]);
        assert_eq!(c.end_offset_for(4, 14), Some((4, 11)));
        // shouldNotUpdateEpochAndStartOffsetIfItDidNotChange + the empty cache
        assert_eq!(LeaderEpochCache::new().end_offset_for(0, 5), None);
        // shouldReturnUnsupportedIfNoEpochRecordedAndUndefinedEpochRequested
        assert_eq!(LeaderEpochCache::new().end_offset_for(-1, 0), None);
        // An epoch between two known ones ends where the next known one starts.
        let c = cache(&[(1, 0), (3, 100), (5, 200)]);
        assert_eq!(c.end_offset_for(1, 300), Some((1, 100)));
        assert_eq!(c.end_offset_for(2, 300), Some((1, 100)));
        assert_eq!(c.end_offset_for(4, 300), Some((3, 200)));
        assert_eq!(c.end_offset_for(5, 300), Some((5, 300)));
    }

    #[test]
    fn assign_keeps_the_first_offset_of_each_epoch() {
        let mut c = LeaderEpochCache::new();
        assert!(c.assign(2, 6));
        assert!(!c.assign(2, 7), "same epoch, later offset");
        assert!(c.assign(3, 8));
        assert!(!c.assign(-1, 9), "undefined epochs are not recorded");
        assert_eq!(pairs(&c), vec![(2, 6), (3, 8)]);
        // The same epoch at an earlier offset replaces the entry (Kafka's isUpdateNeeded).
        assert!(c.assign(3, 7));
        assert_eq!(pairs(&c), vec![(2, 6), (3, 7)]);
        // An older epoch removes the entries it contradicts.
        assert!(c.assign(1, 20));
        assert_eq!(pairs(&c), vec![(1, 20)]);
        // A newer epoch at an offset before the latest start removes that entry.
        let mut c = cache(&[(1, 0), (2, 10), (3, 20)]);
        assert!(c.assign(4, 15));
        assert_eq!(pairs(&c), vec![(1, 0), (2, 10), (4, 15)]);
    }

    #[test]
    fn truncation_from_either_end() {
        // shouldTruncateFromEnd... : entries at and after the offset go.
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(c.truncate_from_end(9));
        assert_eq!(pairs(&c), vec![(2, 6), (3, 8)]);
        assert!(!c.truncate_from_end(9));
        assert!(c.truncate_from_end(8));
        assert_eq!(pairs(&c), vec![(2, 6)]);
        // shouldUpdateSavedOffsetWhenOffsetToClearToIsBetweenEpochs
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(c.truncate_from_start(9));
        assert_eq!(pairs(&c), vec![(3, 9), (4, 11)]);
        // shouldNotClearAnythingIfOffsetToFirstOffset
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(!c.truncate_from_start(6));
        assert!(!c.truncate_from_start(5));
        assert_eq!(pairs(&c), vec![(2, 6), (3, 8), (4, 11)]);
        // shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset
        assert!(c.truncate_from_start(15));
        assert_eq!(pairs(&c), vec![(4, 15)]);
        // At an entry's own start: the entries before it go, it stays.
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(c.truncate_from_start(8));
        assert_eq!(pairs(&c), vec![(3, 8), (4, 11)]);
    }

    #[test]
    fn checkpoint_round_trips_and_refuses_damage() {
        let c = cache(&[(0, 0), (3, 1500), (7, 2000)]);
        let bytes = encode(&c);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            "0\n3\n0 0\n3 1500\n7 2000\n"
        );
        assert_eq!(decode(&bytes), Some(c.clone()));
        assert_eq!(
            decode(&encode(&LeaderEpochCache::new())),
            Some(LeaderEpochCache::new())
        );
        for len in 0..bytes.len() {
            if let Some(d) = decode(&bytes[..len]) {
                panic!("torn at {len} decoded as {d:?}");
            }
        }
        assert_eq!(decode(b"1\n0\n"), None, "unknown version");
        assert_eq!(decode(b"0\n2\n3 10\n2 20\n"), None, "not monotonic");
        assert_eq!(decode(b"0\n1\n3 10\n4 20\n"), None, "more than announced");
        assert_eq!(decode(b"0\n1\n3 10 9\n"), None);
    }
}
