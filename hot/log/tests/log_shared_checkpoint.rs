//! A log whose recovery point its owner keeps in one shared file
//! (`RecoveryCheckpoint::Shared`, Kafka's `recovery-point-offset-checkpoint`): it writes
//! no file of its own in steady state, the hint it is opened with saves the scan of
//! sealed segments, and a truncation's lower point survives a shared value taken before
//! it. After a clean stop the active segment is scanned only from its last index entry.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use strata_log::{IoMode, Log, LogConfig, ManualClock, RecoveryCheckpoint, RecoveryReport};

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_000))
}

fn open_shared(dir: &Path, mode: IoMode, hint: Option<i64>) -> (Log, RecoveryReport) {
    open_with(dir, small_config(mode), hint, false)
}

fn open_with(
    dir: &Path,
    config: LogConfig,
    hint: Option<i64>,
    clean: bool,
) -> (Log, RecoveryReport) {
    Log::open_with(
        dir,
        config,
        clock(),
        RecoveryCheckpoint::Shared { hint, clean },
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

/// One active segment of many index intervals (256 bytes), batches of varying size
/// and timestamps (some going back), readied for a clean stop.
fn stopped_cleanly(dir: &Path, mode: IoMode) -> (LogConfig, Vec<Vec<u8>>, i64) {
    let config = LogConfig {
        segment_bytes: 1 << 20,
        ..small_config(mode)
    };
    let (log, _) = open_with(dir, config.clone(), None, false);
    let mut stored = Vec::new();
    for i in 0..120u64 {
        let ts = if i % 9 == 4 { 500 } else { 1000 + i as i64 * 3 };
        let mut b = make_batch(1 + (i % 3) as usize, 40 + (i * 13 % 90) as usize, i, ts);
        log.append(&mut b, 1).unwrap();
        stored.push(b);
    }
    assert_eq!(log.segments().len(), 1);
    let leo = log.prepare_shutdown().unwrap();
    // The owner saves the point in its file (which lets the log drop its own).
    let point = log.recovery_checkpoint();
    assert_eq!(point.offset, leo);
    log.recovery_checkpoint_saved(point).unwrap();
    // The owner stops; the log is not closed (the broker does not close its logs).
    drop(log);
    (config, stored, leo)
}

fn index_files(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let stem = format!("{:020}", 0);
    (
        std::fs::read(dir.join(format!("{stem}.index"))).unwrap(),
        std::fs::read(dir.join(format!("{stem}.timeindex"))).unwrap(),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn a_clean_stop_scans_only_the_last_index_interval(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let (config, stored, leo) = stopped_cleanly(dir.path(), mode);
    let size = std::fs::metadata(dir.path().join(format!("{:020}.log", 0)))
        .unwrap()
        .len();
    // What a whole scan makes of the same files, to compare with.
    let full_dir = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), full_dir.path());
    let (full, full_report) = open_with(full_dir.path(), config.clone(), Some(leo), false);
    assert!(full_report.resumed_scans.is_empty());

    let (log, report) = open_with(dir.path(), config.clone(), Some(leo), true);
    assert!(report.clean, "{report:?}");
    assert!(!report.lost_data());
    let [(base, pos)] = report.resumed_scans[..] else {
        panic!("not resumed: {report:?}");
    };
    assert_eq!(base, 0);
    // At most an interval and a batch before the end (direct mode: and the padding).
    assert!(
        pos > 0 && size - pos < 256 + 300 + 4096,
        "resumed at {pos} of {size}"
    );
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(read_all(&log, 0), stored);
    assert!(report.scanned_bytes < 600, "{report:?}");
    assert_eq!(full_report.scanned_bytes, full.segments()[0].size_bytes);
    // Everything a whole scan rebuilds is the same: the segment, the index files, every
    // offset's and timestamp's lookup.
    assert_eq!(
        log.segments()[0].max_timestamp,
        full.segments()[0].max_timestamp
    );
    assert_eq!(log.segments()[0].size_bytes, full.segments()[0].size_bytes);
    assert_eq!(index_files(dir.path()), index_files(full_dir.path()));
    for offset in 0..leo {
        let (a, b) = (
            log.read(offset, 1, None).unwrap(),
            full.read(offset, 1, None).unwrap(),
        );
        assert_eq!(a.data, b.data, "offset {offset}");
    }
    for ts in [0, 499, 500, 501, 1000, 1100, 1200, 1356, 1357, 5000] {
        assert_eq!(
            log.offset_for_timestamp(ts).unwrap(),
            full.offset_for_timestamp(ts).unwrap(),
            "timestamp {ts}"
        );
    }
    // Appends carry on from there, and a whole scan agrees with what they built.
    let mut more = stored.clone();
    for i in 200..230u64 {
        let mut b = make_batch(2, 70, i, 2000 + i as i64);
        log.append(&mut b, 1).unwrap();
        more.push(b);
    }
    log.flush().unwrap();
    let leo = log.log_end_offset();
    let built = {
        log.prepare_shutdown().unwrap();
        log.recovery_checkpoint_saved(log.recovery_checkpoint())
            .unwrap();
        index_files(dir.path())
    };
    drop(log);
    let (log, report) = open_with(dir.path(), config, Some(leo), false);
    assert!(report.resumed_scans.is_empty());
    assert_eq!(
        index_files(dir.path()),
        built,
        "the index built after a resumed scan"
    );
    assert_eq!(read_all(&log, 0), more);
}

/// Rewrites the offset index of the segment at 0 in `dir` as `edit` changes its bytes.
fn edit_index(dir: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let p = dir.join(format!("{:020}.index", 0));
    let mut idx = std::fs::read(&p).unwrap();
    edit(&mut idx);
    std::fs::write(&p, idx).unwrap();
}

fn a_clean_open_scans_whole_where_the_index_or_point_disagrees(mode: IoMode) {
    let stem = format!("{:020}", 0);
    // Each way the clean state can be wrong, and the whole scan that follows.
    type Damage = fn(&Path, i64) -> Option<i64>;
    let damages: [(&str, Damage); 5] = [
        ("last entry moved by a byte", |d, leo| {
            edit_index(d, |idx| {
                let n = idx.len();
                idx[n - 1] = idx[n - 1].wrapping_add(1);
            });
            Some(leo)
        }),
        ("last entry names the wrong offset", |d, leo| {
            edit_index(d, |idx| {
                let n = idx.len();
                idx[n - 5] = idx[n - 5].wrapping_sub(1);
            });
            Some(leo)
        }),
        ("a torn index file", |d, leo| {
            edit_index(d, |idx| idx.truncate(idx.len() - 3));
            Some(leo)
        }),
        ("a point below the log end", |_, leo| Some(leo - 5)),
        ("no point", |_, _| None),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        let (config, stored, leo) = stopped_cleanly(dir.path(), mode);
        assert!(
            std::fs::metadata(dir.path().join(format!("{stem}.index")))
                .unwrap()
                .len()
                > 8
        );
        let hint = damage(dir.path(), leo);
        let (log, report) = open_with(dir.path(), config, hint, true);
        assert!(report.resumed_scans.is_empty(), "{what}: {report:?}");
        assert_eq!(report.scanned_segments, vec![0], "{what}");
        assert!(!report.lost_data(), "{what}: {report:?}");
        assert_eq!(log.log_end_offset(), leo, "{what}");
        assert_eq!(read_all(&log, 0), stored, "{what}");
    }
}

both_modes!(
    shared_log_keeps_no_file_of_its_own,
    a_truncation_outlives_a_shared_point_taken_before_it,
    a_clean_stop_scans_only_the_last_index_interval,
    a_clean_open_scans_whole_where_the_index_or_point_disagrees
);
