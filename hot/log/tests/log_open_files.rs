//! Segment descriptors are bounded by the process-wide cache (`strata_log::files`),
//! not by the number of logs or segments: many logs written and read in turn, in both
//! IO modes, never hold more descriptors than the cache's capacity, return exactly
//! what was appended, and recover intact after a crash (a log dropped without close,
//! its active segment padded by direct writes) and after a clean close.
//!
//! One test per binary: the capacity is process-wide.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use common::*;
use strata_log::{IoMode, Log, LogConfig, ManualClock, files};

const CAPACITY: usize = 6;
const LOGS: usize = 12;

/// How many of this process's fds are open on files under `dir`.
fn fds_under(dir: &Path) -> usize {
    let dir = dir.canonicalize().unwrap();
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&dir)))
        .count()
}

fn config(mode: IoMode) -> LogConfig {
    LogConfig {
        segment_bytes: 8 * 1024,
        ..small_config(mode)
    }
}

fn read_all(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let r = log.read(offset, 1 << 20, None).unwrap();
        assert!(r.next_offset > offset, "read at {offset} made no progress");
        out.extend_from_slice(&r.data);
        offset = r.next_offset;
    }
    out
}

fn round(mode: IoMode, root: &Path) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let dirs: Vec<_> = (0..LOGS).map(|i| root.join(format!("p-{i}"))).collect();
    let mut logs: Vec<Log> = dirs
        .iter()
        .map(|d| open(d, config(mode), &clock).0)
        .collect();
    let mut written: Vec<Vec<u8>> = vec![Vec::new(); LOGS];
    // Appends to every log in turn: each append needs a descriptor another log's
    // append evicted a moment before.
    for round in 0..40u64 {
        for (i, log) in logs.iter().enumerate() {
            let mut b = make_batch(3, 200, round * 100 + i as u64, round as i64);
            log.append(&mut b, 0).unwrap();
            written[i].extend_from_slice(&b);
            assert!(
                fds_under(root) <= CAPACITY,
                "{} fds open under {} (capacity {CAPACITY})",
                fds_under(root),
                root.display()
            );
        }
    }
    assert!(
        logs.iter().all(|l| l.segments().len() > 2),
        "segments rolled"
    );
    for (log, w) in logs.iter().zip(&written) {
        assert!(read_all(log) == *w, "a log reads back what it appended");
        assert!(fds_under(root) <= CAPACITY);
    }
    // A crash: the logs are dropped without close (direct-write padding stays).
    let half = LOGS / 2;
    for log in logs.drain(..half) {
        drop(log);
    }
    for log in logs.drain(..) {
        log.close().unwrap();
    }
    assert_eq!(fds_under(root), 0, "closed logs hold no descriptors");
    for (d, w) in dirs.iter().zip(&written) {
        let (log, report) = open(d, config(mode), &clock);
        assert!(!report.lost_data(), "{report:?}");
        assert!(read_all(&log) == *w);
        assert!(fds_under(root) <= CAPACITY);
        logs.push(log);
    }
}

#[test]
fn descriptors_stay_within_the_cache_capacity_in_both_modes() {
    files::set_capacity(CAPACITY);
    assert_eq!(files::capacity(), CAPACITY);
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let opens = files::opens();
        round(mode, root.path());
        assert!(
            files::opens() - opens > (LOGS * 40) as u64 / 2,
            "{mode:?}: the logs took turns with the descriptors"
        );
    }
}
