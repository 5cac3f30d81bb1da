//! A log whose recovery point its owner keeps in one shared file
//! (`RecoveryCheckpoint::Shared`, Kafka's `recovery-point-offset-checkpoint`): it writes
//! no file of its own in steady state, the hint it is opened with saves the scan of
//! sealed segments, and a truncation's lower point survives a shared value taken before
//! it.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use strata_log::{IoMode, Log, ManualClock, RecoveryCheckpoint, RecoveryReport};

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_000))
}

fn open_shared(dir: &Path, mode: IoMode, hint: Option<i64>) -> (Log, RecoveryReport) {
    Log::open_with(
        dir,
        small_config(mode),
        clock(),
        RecoveryCheckpoint::Shared { hint },
    )
    .unwrap()
}

fn own_file(dir: &Path) -> bool {
    dir.join("recovery-point").exists()
}

fn shared_log_keeps_no_file_of_its_own(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open_shared(dir.path(), mode, None);
    // A new log's open wrote its own file (the shared one does not know it yet).
    assert!(own_file(dir.path()));
    let mut stored = Vec::new();
    for i in 0..20 {
        let mut b = make_batch(2, 60, i, 1000);
        log.append(&mut b, 1).unwrap();
        stored.push(b);
    }
    let taken = log.recovery_checkpoint();
    assert!(taken.offset > 0, "rolls moved the point: {taken:?}");
    log.recovery_checkpoint_saved(taken).unwrap();
    assert!(!own_file(dir.path()), "the shared file holds the point now");
    // Rolls, flushes and checkpoints write no file of its own from here on.
    for i in 20..40 {
        let mut b = make_batch(2, 60, i, 1000);
        log.append(&mut b, 1).unwrap();
        stored.push(b);
    }
    log.flush().unwrap();
    log.checkpoint().unwrap();
    assert!(!own_file(dir.path()));
    let nsegs = log.segments().len();
    assert!(nsegs >= 3, "{nsegs} segments");
    let leo = log.log_end_offset();
    let at_close = log.recovery_checkpoint();
    assert_eq!(at_close.offset, leo);
    log.close().unwrap();
    assert!(!own_file(dir.path()), "close leaves the point to the owner");

    // With the shared value: a clean open, only the last segment read.
    let (log, report) = open_shared(dir.path(), mode, Some(at_close.offset));
    assert!(report.clean, "{report:?}");
    assert_eq!(report.scanned_segments.len(), 1, "{report:?}");
    assert!(!own_file(dir.path()));
    assert_eq!(read_all(&log, 0), stored);
    drop(log);
    // Without it (the shared file lost): every segment scanned, nothing lost.
    let (log, report) = open_shared(dir.path(), mode, None);
    assert_eq!(report.scanned_segments.len(), nsegs, "{report:?}");
    assert_eq!(read_all(&log, 0), stored);
}

fn a_truncation_outlives_a_shared_point_taken_before_it(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open_shared(dir.path(), mode, None);
    let mut stored = Vec::new();
    for i in 0..40 {
        let mut b = make_batch(2, 60, i, 1000);
        log.append(&mut b, 1).unwrap();
        stored.push(b);
    }
    log.flush().unwrap();
    let before = log.recovery_checkpoint();
    assert_eq!(before.offset, 80);
    // A follower cuts its log back; the owner then saves the point it took before.
    log.truncate_to(30).unwrap();
    log.recovery_checkpoint_saved(before).unwrap();
    assert!(
        own_file(dir.path()),
        "the truncation's lower point must not be removed by an older shared value"
    );
    // Appends past the old point, not flushed, then a crash (dropped, not closed).
    let mut after = stored[..15].to_vec();
    for i in 100..130 {
        let mut b = make_batch(2, 60, i, 1000);
        log.append(&mut b, 1).unwrap();
        after.push(b);
    }
    drop(log);
    // The stale shared value (80) would trust segments the truncation replaced; the
    // log's own file wins: every segment from the cut on is scanned.
    let (log, report) = open_shared(dir.path(), mode, Some(before.offset));
    assert!(!report.clean, "{report:?}");
    let segs = log.segments();
    let rescanned: Vec<i64> = segs
        .iter()
        .filter(|s| s.next_offset > 30)
        .map(|s| s.base_offset)
        .collect();
    for base in &rescanned {
        assert!(report.scanned_segments.contains(base), "{base}: {report:?}");
    }
    assert_eq!(log.log_end_offset(), 90);
    assert_eq!(read_all(&log, 0), after);
    // A shared value taken after the truncation does remove the file.
    let now = log.recovery_checkpoint();
    log.recovery_checkpoint_saved(now).unwrap();
    assert!(!own_file(dir.path()));
}

both_modes!(
    shared_log_keeps_no_file_of_its_own,
    a_truncation_outlives_a_shared_point_taken_before_it
);
