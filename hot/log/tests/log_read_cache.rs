//! The read cache (`strata_log::read_cache`) never serves bytes the log no longer
//! holds: a model test of direct-mode logs with 4 KiB chunks and a budget of a few
//! chunks, where appends, rolls, truncations (a follower's, and a reset to an empty log
//! at another offset) and reads interleave; every read, first and repeated (the repeat
//! served by the cache), returns exactly the model's batches.
//!
//! These tests write under `CARGO_TARGET_TMPDIR` (a disk filesystem that takes
//! `O_DIRECT`), not the system temp dir.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use strata_log::{IoMode, Log, LogConfig, ManualClock, read_cache};
use strata_proto::batch;

#[derive(Clone, Debug)]
enum Op {
    Append { records: usize, size: usize },
    Roll,
    TruncateTo { per_mille: u16 },
    TruncateFully { ahead: i64 },
    Read { per_mille: u16, max_bytes: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (1usize..8, 0usize..1500).prop_map(|(records, size)| Op::Append { records, size }),
        1 => Just(Op::Roll),
        2 => (0u16..1001).prop_map(|per_mille| Op::TruncateTo { per_mille }),
        1 => (0i64..3).prop_map(|ahead| Op::TruncateFully { ahead }),
        6 => (0u16..1001, 1usize..40_000).prop_map(|(per_mille, max_bytes)| Op::Read { per_mille, max_bytes }),
    ]
}

/// The cache, its settings and its counters are the process's: one test at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 48 * 1024,
        index_interval_bytes: 1024,
        // Two 4 KiB windows: most of the active segment is read from the file.
        tail_cache_bytes: 8 * 1024,
        ..base_config(IoMode::Direct)
    }
}

/// Batches by base offset: (base, records, bytes).
#[derive(Default)]
struct Model {
    batches: Vec<(i64, i64, Vec<u8>)>,
    start: i64,
}

impl Model {
    fn end(&self) -> i64 {
        self.batches.last().map_or(self.start, |(b, n, _)| b + n)
    }
}

/// Reads from `offset` up to `max_bytes` and checks the answer against the model: whole
/// batches, in order, starting with the one holding `offset`, each exactly as appended.
fn check_read(log: &Log, m: &Model, offset: i64, max_bytes: usize) -> Result<(), TestCaseError> {
    let r = log.read(offset, max_bytes, None).unwrap();
    let want: Vec<&Vec<u8>> = m
        .batches
        .iter()
        .filter(|(b, n, _)| b + n > offset)
        .map(|(_, _, v)| v)
        .collect();
    let got: Vec<&[u8]> = batch::batches(&r.data)
        .map(|b| b.unwrap().as_bytes())
        .collect();
    prop_assert!(got.len() <= want.len(), "more batches than the log holds");
    if want.is_empty() {
        prop_assert!(got.is_empty());
        return Ok(());
    }
    prop_assert!(
        !got.is_empty(),
        "nothing read at {offset} below the end {}",
        m.end()
    );
    for (i, g) in got.iter().enumerate() {
        prop_assert!(
            *g == want[i].as_slice(),
            "batch {i} read at {offset} differs"
        );
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let (log, _) = Log::open(dir.path(), config(), clock).unwrap();
    prop_assert_eq!(
        log.io_mode(),
        IoMode::Direct,
        "this filesystem takes O_DIRECT"
    );
    let mut m = Model::default();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append { records, size } => {
                let mut b = make_batch(records, size, i as u64, 1_000_000 + i as i64);
                let info = log.append(&mut b, 0).unwrap();
                prop_assert_eq!(info.first_offset, m.end());
                m.batches.push((info.first_offset, records as i64, b));
            }
            Op::Roll => log.force_roll().unwrap(),
            Op::TruncateTo { per_mille } => {
                let mut boundaries: Vec<i64> = m.batches.iter().map(|&(b, _, _)| b).collect();
                boundaries.push(m.end());
                let target = boundaries[(boundaries.len() - 1) * per_mille as usize / 1000];
                log.truncate_to(target).unwrap();
                m.batches.retain(|&(b, _, _)| b < target);
            }
            Op::TruncateFully { ahead } => {
                let target = m.end() + ahead;
                log.truncate_fully_and_start_at(target).unwrap();
                m.batches.clear();
                m.start = target;
            }
            Op::Read {
                per_mille,
                max_bytes,
            } => {
                let span = (m.end() - m.start).max(0);
                let offset = m.start + span * per_mille as i64 / 1000;
                check_read(&log, &m, offset, max_bytes)?;
                // Again: now (partly) from the cache.
                check_read(&log, &m, offset, max_bytes)?;
            }
        }
    }
    // Everything, from the start, twice.
    check_read(&log, &m, m.start, usize::MAX / 2)?;
    check_read(&log, &m, m.start, usize::MAX / 2)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_read_cache_never_serves_what_the_log_no_longer_holds(ops in proptest::collection::vec(op(), 1..120)) {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        read_cache::set_chunk_bytes(4096);
        read_cache::set_limit(6 * 4096);
        run(ops)?;
    }
}

/// The cache serves repeated reads: a second read of a sealed segment reads no chunk
/// from the device.
#[test]
fn a_second_reader_is_served_from_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    read_cache::set_chunk_bytes(4096);
    read_cache::set_limit(1 << 20);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let (log, _) = Log::open(dir.path(), config(), clock).unwrap();
    let mut m = Model::default();
    for i in 0..60 {
        let mut b = make_batch(4, 1000, i, 1_000_000);
        let info = log.append(&mut b, 0).unwrap();
        m.batches.push((info.first_offset, 4, b));
    }
    log.force_roll().unwrap();
    check_read(&log, &m, 0, 1 << 20).unwrap();
    let (hits, misses) = (read_cache::hits(), read_cache::misses());
    assert!(misses > 0, "the first read went to the device");
    check_read(&log, &m, 0, 1 << 20).unwrap();
    assert_eq!(read_cache::misses(), misses, "the second read did not");
    assert!(read_cache::hits() > hits);
}
