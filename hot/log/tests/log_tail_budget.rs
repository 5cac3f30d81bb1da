//! The tail buffers of every log share one budget (`strata_log::tail_budget`): a log
//! that finds the budget spent gets smaller windows (down to the minimum, always
//! granted) and still appends and reads back exactly what it wrote, an idle log gives
//! its memory back, and a closed one too.
//!
//! One test per binary: the budget is process-wide.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use strata_log::tail_budget::{self, MIN_WINDOW};
use strata_log::{IoMode, Log, LogConfig, ManualClock};

const MIB: usize = 1 << 20;

fn read_all(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let r = log.read(offset, 4 << 20, None).unwrap();
        assert!(r.next_offset > offset);
        out.extend_from_slice(&r.data);
        offset = r.next_offset;
    }
    out
}

#[test]
fn logs_share_one_tail_budget_and_give_it_back() {
    tail_budget::set_limit(MIB);
    assert_eq!(tail_budget::used(), 0);
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    // Windows of 512 KiB each: two of them spend the whole budget.
    let config = LogConfig {
        tail_cache_bytes: MIB,
        ..base_config(IoMode::Direct)
    };
    let a = open(&root.path().join("a"), config.clone(), &clock).0;
    let b = open(&root.path().join("b"), config.clone(), &clock).0;
    assert_eq!(
        a.io_mode(),
        IoMode::Direct,
        "this filesystem takes O_DIRECT"
    );
    let mut wrote_a = Vec::new();
    let mut wrote_b = Vec::new();

    let mut batch = make_batch(1, 1000, 1, 0);
    a.append(&mut batch, 0).unwrap();
    wrote_a.extend_from_slice(&batch);
    assert_eq!(tail_budget::used(), MIB / 2, "one full window");
    // Past the first window: the second one takes the rest of the budget.
    for i in 0..6 {
        let mut batch = make_batch(100, 1000, 10 + i, 0);
        a.append(&mut batch, 0).unwrap();
        wrote_a.extend_from_slice(&batch);
    }
    assert_eq!(tail_budget::used(), MIB);

    // The budget is spent: b gets the minimum, and writes and reads all the same,
    // including appends larger than its window.
    for i in 0..8 {
        let mut batch = make_batch(20 * (i + 1), 1000, 100 + i as u64, 0);
        b.append(&mut batch, 0).unwrap();
        wrote_b.extend_from_slice(&batch);
        assert!(
            tail_budget::used() <= MIB + 2 * MIN_WINDOW,
            "{} bytes used",
            tail_budget::used()
        );
    }
    assert!(tail_budget::used() > MIB, "b holds minimum windows");
    assert!(read_all(&a) == wrote_a);
    assert!(read_all(&b) == wrote_b);

    // Idle logs give their memory back; the next append takes a window again.
    assert!(!a.release_idle_tail(30_000), "a appended just now");
    clock.advance(30_000);
    assert!(a.release_idle_tail(30_000));
    assert!(tail_budget::used() <= 2 * MIN_WINDOW, "only b's windows");
    let mut batch = make_batch(3, 1000, 999, 0);
    a.append(&mut batch, 0).unwrap();
    wrote_a.extend_from_slice(&batch);
    assert!(read_all(&a) == wrote_a, "the partial block was reloaded");
    clock.advance(30_000);
    assert!(b.release_idle_tail(30_000));
    assert!(a.release_idle_tail(30_000));
    assert_eq!(tail_budget::used(), 0);

    // And a closed log holds none.
    let mut batch = make_batch(3, 1000, 1000, 0);
    b.append(&mut batch, 0).unwrap();
    wrote_b.extend_from_slice(&batch);
    assert!(tail_budget::used() > 0);
    b.close().unwrap();
    a.close().unwrap();
    assert_eq!(tail_budget::used(), 0);
    let b = open(&root.path().join("b"), config, &clock).0;
    assert!(read_all(&b) == wrote_b);
}
