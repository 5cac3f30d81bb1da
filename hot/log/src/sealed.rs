//! What the log offers the offloader (strata-tier), which neither opens a [`Log`] nor
//! names a log file: the description of a sealed segment, with every file an upload
//! takes and the leader epochs of its batches ([`Log::sealed_segment`]), the re-cut of
//! one into a standalone sealed segment outside the partition directory
//! ([`Log::recut`]), and the restart of an empty log at the end of what the bucket
//! holds, with the state the last remote segment carries ([`Log::restore_at`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_proto::Offset;

use crate::clock::SystemClock;
use crate::epoch::LeaderEpochCache;
use crate::error::LogError;
use crate::log::{Log, SegmentInfo};
use crate::snapshot;
use crate::txn_index::AbortedTxn;

/// A sealed segment, as an upload takes it: its files (in [`Self::info`]: `log_path`,
/// `index_path`, `time_index_path`), the producer-state snapshot the log wrote when
/// it rolled, which holds the state of every batch below its end, and the slice of the
/// leader-epoch cache covering its offsets (Kafka's `LogSegmentData.leaderEpochIndex`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SealedSegment {
    pub info: SegmentInfo,
    /// `None` when the log has no snapshot at the segment's end (a failed snapshot
    /// write, or retention deleted it).
    pub producer_snapshot: Option<PathBuf>,
    /// The epochs of the segment's batches: the one in force at its base (starting
    /// there) and every one starting inside it. Empty when the log knows no epoch
    /// there (batches written without one).
    pub leader_epochs: LeaderEpochCache,
    /// The aborted transactions whose ABORT marker is in the segment (its
    /// `.txnindex`), in marker order.
    pub aborted: Vec<AbortedTxn>,
}

/// What a log restarting empty at the end of the remote tier takes from the last remote
/// segment ([`Log::restore_at`]), so that it goes on as the log that offloaded it would
/// have: the producer state of every batch below that end (idempotent retries of
/// batches only in the bucket are still recognised) and the leader epochs (a follower
/// asking where an epoch ends gets the right answer).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RemoteEndState {
    /// The segment's producer snapshot (`{offset}.snapshot` bytes, CRC-checked).
    pub producer_snapshot: Option<Vec<u8>>,
    /// The segment's leader-epoch slice.
    pub leader_epochs: Option<LeaderEpochCache>,
}

/// A re-cut segment ([`Log::recut`]): a sealed segment alone in its own directory,
/// which is deleted with everything in it when this is dropped.
#[derive(Debug)]
pub struct RecutSegment {
    segment: SealedSegment,
    dir: RemoveOnDrop,
}

impl RecutSegment {
    /// The segment: its files are in [`Self::dir`]; its producer snapshot is the
    /// source log's (the state of every batch below the segment's end).
    pub fn segment(&self) -> &SealedSegment {
        &self.segment
    }

    pub fn dir(&self) -> &Path {
        &self.dir.0
    }
}

/// A directory deleted, with what it holds, on drop.
#[derive(Debug)]
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Log {
    /// The sealed segment based at `base_offset`, described for an upload; `None` if
    /// the log has no such segment, or it is the active one.
    pub fn sealed_segment(&self, base_offset: Offset) -> Option<SealedSegment> {
        let info = self
            .segments()
            .into_iter()
            .find(|s| s.base_offset == base_offset && s.sealed)?;
        Some(SealedSegment {
            producer_snapshot: self.producer_snapshot_at(info.next_offset),
            leader_epochs: self.epoch_slice(info.base_offset, info.next_offset),
            aborted: self.aborted_in(info.base_offset, info.next_offset),
            info,
        })
    }

    /// The leader-epoch cache cut to `[from, to)`: the entry in force at `from`, moved
    /// to start there, and every entry starting before `to`.
    fn epoch_slice(&self, from: Offset, to: Offset) -> LeaderEpochCache {
        let mut slice = self.epoch_cache();
        slice.truncate_from_end(to);
        slice.truncate_from_start(from);
        slice
    }

    /// The producer snapshot the log wrote at `offset` (when the segment ending there
    /// rolled), if it is still there.
    fn producer_snapshot_at(&self, offset: Offset) -> Option<PathBuf> {
        let p = snapshot::path(self.dir(), offset);
        p.exists().then_some(p)
    }

    /// Copies the batches of the sealed segment `seg` from offset `from` on into a new
    /// sealed segment in `dir` (a directory of its own, outside this log's: whatever
    /// it holds is deleted first), with indexes built as this log builds them. `from`
    /// must be a batch boundary of `seg` (an offloader re-cuts at the remote end, a
    /// batch boundary in every in-sync replica's log: they hold the same batches below
    /// the high-water mark); if it is not, the copy fails
    /// ([`LogError::UnexpectedAppendOffset`]) and `dir` is deleted, as it is on any
    /// error. The segment's producer snapshot is this log's at the end of `seg`.
    pub fn recut(
        &self,
        seg: &SegmentInfo,
        from: Offset,
        dir: &Path,
    ) -> Result<RecutSegment, LogError> {
        let _ = std::fs::remove_dir_all(dir);
        // Deletes `dir` on an error from here on (after `out`, declared later, is
        // closed), and once the re-cut segment is dropped.
        let guard = RemoveOnDrop(dir.to_path_buf());
        // One segment, whatever its size or age: it is sealed by hand below.
        let mut config = self.config();
        config.segment_bytes = u64::MAX / 2;
        config.segment_ms = i64::MAX / 2;
        let (out, _) = Log::open(dir, config, Arc::new(SystemClock))?;
        out.truncate_fully_and_start_at(from)?;
        self.read_range_chunks(from, seg.next_offset, &mut |chunk| {
            out.append_replicated(&mut chunk.to_vec()).map(|_| ())
        })?;
        out.force_roll()?;
        let info = out
            .segments()
            .into_iter()
            .find(|s| s.sealed && s.base_offset == from)
            .ok_or_else(|| LogError::Corrupt {
                path: dir.to_path_buf(),
                position: 0,
                reason: "the re-cut segment is missing".into(),
            })?;
        Ok(RecutSegment {
            segment: SealedSegment {
                info,
                producer_snapshot: self.producer_snapshot_at(seg.next_offset),
                leader_epochs: self.epoch_slice(from, seg.next_offset),
                aborted: self.aborted_in(from, seg.next_offset),
            },
            dir: guard,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::Bytes;
    use strata_proto::Compression;
    use strata_proto::batch::build::{NewRecord, batch};

    use super::*;
    use crate::clock::ManualClock;
    use crate::config::LogConfig;

    fn log_with_segments(dir: &Path) -> Log {
        let config = LogConfig {
            segment_bytes: 16 * 1024,
            index_interval_bytes: 1024,
            ..LogConfig::default()
        };
        let (log, _) = Log::open(dir, config, Arc::new(ManualClock::new(1_000))).unwrap();
        for i in 0..60u8 {
            let recs: Vec<NewRecord> = (0..3)
                .map(|j| NewRecord {
                    key: Some(Bytes::from(vec![i, j])),
                    ..NewRecord::value(vec![i; 300], 1_000 + i as i64)
                })
                .collect();
            let mut b = batch(&recs, Compression::None, None).to_vec();
            log.append(&mut b, 2).unwrap();
        }
        assert!(log.segments().len() > 3);
        log
    }

    #[test]
    fn a_sealed_segment_names_its_files_and_the_snapshot_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_segments(&dir.path().join("p"));
        let segs = log.segments();
        let (first, active) = (&segs[0], segs.last().unwrap());
        let s = log.sealed_segment(first.base_offset).unwrap();
        assert_eq!(&s.info, first);
        let snap = s.producer_snapshot.unwrap();
        assert_eq!(snap, snapshot::path(log.dir(), first.next_offset));
        assert!(snap.exists());
        assert!(log.sealed_segment(active.base_offset).is_none());
        assert!(log.sealed_segment(first.base_offset + 1).is_none());
        std::fs::remove_file(&snap).unwrap();
        let s = log.sealed_segment(first.base_offset).unwrap();
        assert_eq!(s.producer_snapshot, None);
    }

    #[test]
    fn a_sealed_segment_carries_the_epochs_of_its_batches() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_segments(&dir.path().join("p"));
        // Epoch 4 from here on, starting inside the new active segment.
        log.force_roll().unwrap();
        let mut b = batch(
            &[NewRecord::value(vec![1; 300], 1)],
            Compression::None,
            None,
        )
        .to_vec();
        log.append(&mut b, 2).unwrap();
        let switch = log.log_end_offset();
        for _ in 0..70 {
            let mut b = batch(
                &[NewRecord::value(vec![4; 900], 1)],
                Compression::None,
                None,
            )
            .to_vec();
            log.append(&mut b, 4).unwrap();
        }
        let segs: Vec<SegmentInfo> = log.segments().into_iter().filter(|s| s.sealed).collect();
        let entries = |s: &SegmentInfo| -> Vec<(i32, Offset)> {
            log.sealed_segment(s.base_offset)
                .unwrap()
                .leader_epochs
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect()
        };
        let first = &segs[0];
        assert_eq!(entries(first), vec![(2, first.base_offset)]);
        let mixed = segs
            .iter()
            .find(|s| s.base_offset < switch && switch < s.next_offset)
            .unwrap();
        assert_eq!(entries(mixed), vec![(2, mixed.base_offset), (4, switch)]);
        let later = segs.iter().find(|s| s.base_offset > switch).unwrap();
        assert_eq!(entries(later), vec![(4, later.base_offset)]);
        // A re-cut from inside the mixed segment starts in the epoch in force there.
        let cut = log
            .recut(mixed, switch, &dir.path().join(".recut"))
            .unwrap();
        let e = cut.segment().leader_epochs.entries();
        assert_eq!((e.len(), e[0].epoch, e[0].start_offset), (1, 4, switch));
    }

    #[test]
    fn a_recut_holds_the_batches_from_the_cut_and_its_dir_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_segments(&dir.path().join("p"));
        let seg = log.segments()[1].clone();
        // A batch boundary inside the segment: the second batch's base.
        let second = log.read(seg.base_offset, 1, None).unwrap().next_offset;
        let cut_dir = dir.path().join(".recut");
        let cut = log.recut(&seg, second, &cut_dir).unwrap();
        let info = &cut.segment().info;
        assert_eq!(
            (info.base_offset, info.next_offset),
            (second, seg.next_offset)
        );
        assert!(info.sealed && info.log_path.starts_with(&cut_dir));
        assert_eq!(
            std::fs::read(&info.log_path).unwrap(),
            log.read_range(second, seg.next_offset).unwrap()
        );
        assert_eq!(
            cut.segment().producer_snapshot,
            Some(snapshot::path(log.dir(), seg.next_offset))
        );
        drop(cut);
        assert!(!cut_dir.exists());

        // Not at a batch boundary: an error, and nothing is left.
        let e = log.recut(&seg, second + 1, &cut_dir).unwrap_err();
        assert!(matches!(e, LogError::UnexpectedAppendOffset { .. }), "{e}");
        assert!(!cut_dir.exists());
    }

    #[test]
    fn a_range_read_is_the_reads_up_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_segments(&dir.path().join("p"));
        let seg = log.segments()[2].clone();
        let mut want = Vec::new();
        let mut at = seg.base_offset;
        while at < seg.next_offset {
            let r = log.read(at, 1, Some(seg.next_offset)).unwrap();
            want.extend_from_slice(&r.data);
            at = r.next_offset;
        }
        assert_eq!(std::fs::read(&seg.log_path).unwrap(), want);
        assert_eq!(
            log.read_range(seg.base_offset, seg.next_offset).unwrap(),
            want
        );
        assert!(
            log.read_range(seg.next_offset, seg.next_offset)
                .unwrap()
                .is_empty()
        );
        // An end inside a batch.
        assert!(matches!(
            log.read_range(seg.base_offset, seg.base_offset + 1),
            Err(LogError::NoBatch { offset, end }) if offset == seg.base_offset && end == seg.base_offset + 1
        ));
    }
}
