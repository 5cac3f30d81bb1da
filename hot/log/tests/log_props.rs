//! Property test: any sequence of appends, rolls, retention passes, log-start moves and
//! reopenings keeps offsets dense, and every read returns exactly the batches appended
//! at those offsets.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use strata_log::{IoMode, Log, LogConfig, ManualClock, RetentionLimits};
use strata_proto::batch::{self, RecordBatch};

#[derive(Clone, Debug)]
enum Op {
    Append {
        records: usize,
        size: usize,
    },
    Roll,
    /// Size retention at `keep` bytes; the predicate lets at most `allow` segments go.
    Retention {
        keep: u64,
        allow: usize,
    },
    /// Move the log start to a fraction of the way from the start to the end.
    AdvanceStart {
        per_mille: u16,
    },
    Reopen {
        clean: bool,
    },
    Read {
        per_mille: u16,
        max_bytes: usize,
    },
    Tick {
        ms: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..6, 0usize..300).prop_map(|(records, size)| Op::Append { records, size }),
        1 => Just(Op::Roll),
        1 => (0u64..6000, 0usize..4).prop_map(|(keep, allow)| Op::Retention { keep, allow }),
        1 => (0u16..1000).prop_map(|per_mille| Op::AdvanceStart { per_mille }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        3 => (0u16..1001, 1usize..3000).prop_map(|(per_mille, max_bytes)| Op::Read { per_mille, max_bytes }),
        1 => (0i64..120_000).prop_map(|ms| Op::Tick { ms }),
    ]
}

/// The log as a list of (base offset, record count, bytes) batches.
#[derive(Default, Debug)]
struct Model {
    batches: Vec<(i64, i64, Vec<u8>)>,
    start: i64,
}

impl Model {
    fn end(&self) -> i64 {
        self.batches.last().map_or(self.start, |(b, n, _)| b + n)
    }
    /// Batches from the one containing `offset`.
    fn from(&self, offset: i64) -> Vec<Vec<u8>> {
        self.batches
            .iter()
            .filter(|(b, n, _)| b + n > offset)
            .map(|(_, _, v)| v.clone())
            .collect()
    }
}

/// In direct mode the tail cache is two 4 KiB windows: every segment's bytes pass
/// through a window switch or a roll, and an unclean reopen finds padding to cut.
fn config(mode: IoMode) -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        segment_ms: 60_000,
        index_interval_bytes: 200,
        tail_cache_bytes: 8 * 1024,
        ..base_config(mode)
    }
}

fn check(log: &Log, m: &Model) {
    assert_eq!(log.log_end_offset(), m.end());
    assert_eq!(log.log_start_offset(), m.start);
    let got = read_all(log, m.start);
    let want = m.from(m.start);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "log content differs from the model");
    // Dense: each batch starts where the previous ended.
    let mut next = None;
    for b in &got {
        let (rb, _) = RecordBatch::parse(b).unwrap();
        if let Some(n) = next {
            assert_eq!(rb.base_offset(), n);
        }
        next = Some(rb.next_offset());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_log_behaves_like_a_list_of_batches_direct(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, IoMode::Direct)?;
    }

    #[test]
    fn the_log_behaves_like_a_list_of_batches_buffered(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, IoMode::Buffered)?;
    }
}

fn run(ops: Vec<Op>, mode: IoMode) -> Result<(), TestCaseError> {
    let config = || config(mode);
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut log = Some(open(dir.path(), config(), &clock).0);
    let mut m = Model::default();
    for (i, op) in ops.into_iter().enumerate() {
        let l = log.as_ref().unwrap();
        match op {
            Op::Append { records, size } => {
                let mut b = make_batch(records, size, i as u64, 1_000_000 + i as i64);
                let info = l.append(&mut b, 0).unwrap();
                prop_assert_eq!(info.first_offset, m.end());
                m.batches.push((info.first_offset, records as i64, b));
            }
            Op::Roll => l.force_roll().unwrap(),
            Op::Retention { keep, allow } => {
                l.set_config(LogConfig {
                    retention: RetentionLimits {
                        ms: None,
                        bytes: Some(keep),
                    },
                    ..config()
                });
                let mut left = allow;
                let out = l
                    .apply_retention(&mut |_| {
                        if left > 0 {
                            left -= 1;
                            true
                        } else {
                            false
                        }
                    })
                    .unwrap();
                l.set_config(config());
                prop_assert!(out.deleted.len() <= allow);
                // Retention deletes whole segments: the start moves to the end of the
                // last deleted one (or stays, if it was already further).
                let expected = out
                    .deleted
                    .last()
                    .map_or(m.start, |s| s.next_offset.max(m.start));
                prop_assert_eq!(out.log_start_offset, expected);
                m.start = expected;
            }
            Op::AdvanceStart { per_mille } => {
                let target = m.start + (m.end() - m.start) * per_mille as i64 / 1000;
                let got = l.advance_log_start(target).unwrap();
                prop_assert_eq!(got, target.max(m.start));
                m.start = got;
            }
            Op::Reopen { clean } => {
                let old = log.take().unwrap();
                if clean {
                    old.close().unwrap();
                } else {
                    drop(old);
                }
                let (l, report) = open(dir.path(), config(), &clock);
                prop_assert!(
                    report.truncations.is_empty(),
                    "clean data was truncated: {:?}",
                    report
                );
                log = Some(l);
            }
            Op::Read {
                per_mille,
                max_bytes,
            } => {
                let o = m.start + (m.end() - m.start) * per_mille as i64 / 1000;
                let r = l.read(o, max_bytes, None).unwrap();
                let want = m.from(o);
                let got: Vec<Vec<u8>> = batch::batches(&r.data)
                    .map(|b| b.unwrap().as_bytes().to_vec())
                    .collect();
                if o == m.end() {
                    prop_assert!(got.is_empty());
                } else {
                    prop_assert!(!got.is_empty(), "a read inside the log returns a batch");
                    prop_assert!(got.len() <= want.len());
                    prop_assert!(
                        got[..] == want[..got.len()],
                        "read at {} returned other batches",
                        o
                    );
                    let total: usize = got.iter().map(Vec::len).sum();
                    prop_assert!(got.len() == 1 || total <= max_bytes);
                }
                // Below the start: out of range.
                if m.start > 0 {
                    prop_assert!(l.read(m.start - 1, 100, None).is_err());
                }
            }
            Op::Tick { ms } => {
                clock.advance(ms);
                l.maybe_roll().unwrap();
                l.maybe_flush().unwrap();
            }
        }
        check(log.as_ref().unwrap(), &m);
    }
    Ok(())
}
