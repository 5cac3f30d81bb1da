//! Recently appended and recently read bytes share one budget: the read cache
//! (`strata_log::read_cache`) holds at most what the tail windows
//! (`strata_log::tail_budget`) leave of it, and a window that needs the room takes it
//! from the cache (full size, not halved) rather than passing the budget.
//!
//! One test per binary: the budget and the cache are process-wide. Writes under
//! `CARGO_TARGET_TMPDIR` (a disk filesystem that takes `O_DIRECT`).

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use strata_log::{IoMode, Log, LogConfig, ManualClock, read_cache, tail_budget};

const KIB: usize = 1024;
const BUDGET: usize = 256 * KIB;

fn read_back(log: &Log) -> Vec<Vec<u8>> {
    read_all(log, log.log_start_offset())
}

#[test]
fn appended_and_read_bytes_share_one_budget() {
    tail_budget::set_limit(BUDGET);
    read_cache::set_chunk_bytes(4096);
    // More than the whole budget: the tail windows' share bounds it.
    read_cache::set_limit(4 * BUDGET);
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let reader_config = LogConfig {
        tail_cache_bytes: 8 * KIB,
        ..base_config(IoMode::Direct)
    };
    let (read_log, _) = open(&root.path().join("read"), reader_config, &clock);
    assert_eq!(
        read_log.io_mode(),
        IoMode::Direct,
        "this filesystem takes O_DIRECT"
    );
    let mut wrote = Vec::new();
    for i in 0..60 {
        let mut b = make_batch(4, 1000, i, 1_000_000);
        read_log.append(&mut b, 0).unwrap();
        wrote.push(b);
    }
    read_log.force_roll().unwrap();
    // Read twice: the first fills the cache, the second is served from it.
    assert_eq!(read_back(&read_log), wrote);
    let held = read_cache::used();
    let windows = tail_budget::used();
    assert!(held >= 128 * KIB, "the cache holds what was read: {held}");
    assert!(
        held + windows <= BUDGET,
        "{held} cached + {windows} in windows"
    );
    let misses = read_cache::misses();
    assert_eq!(read_back(&read_log), wrote);
    assert_eq!(
        read_cache::misses(),
        misses,
        "the second read came from memory"
    );

    // A log whose windows are 128 KiB each: its first append needs a window the cache's
    // chunks are holding the room of.
    let writer_config = LogConfig {
        tail_cache_bytes: 256 * KIB,
        ..base_config(IoMode::Direct)
    };
    let (write_log, _) = open(&root.path().join("write"), writer_config, &clock);
    let before = tail_budget::used();
    let mut appended = Vec::new();
    let mut b = make_batch(1, 1000, 99, 1_000_000);
    write_log.append(&mut b, 0).unwrap();
    appended.push(b);
    let window = tail_budget::used() - before;
    assert_eq!(window, 128 * KIB, "a full window, not a halved one");
    let (held, windows) = (read_cache::used(), tail_budget::used());
    assert!(held < 128 * KIB, "the cache gave room back: {held}");
    assert!(
        held + windows <= BUDGET,
        "{held} cached + {windows} in windows"
    );

    // Reading on caches only what the windows leave, and reads stay exact.
    assert_eq!(read_back(&read_log), wrote);
    let (held, windows) = (read_cache::used(), tail_budget::used());
    assert!(
        held + windows <= BUDGET,
        "{held} cached + {windows} in windows"
    );
    assert_eq!(read_back(&write_log), appended);
}
