//! Property test: any sequence of appends (as leader, in rising leader epochs, and as
//! follower, with the leader's offsets and epochs), rolls, retention passes, log-start
//! moves, truncations (to batch boundaries, refused elsewhere, and fully to another
//! offset) and reopenings keeps offsets dense, every read returns exactly the batches
//! appended at those offsets, and the leader-epoch cache is what Kafka's rules make of
//! those operations.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use strata_log::{IoMode, Log, LogConfig, LogError, ManualClock, RetentionLimits};
use strata_proto::batch::{self, RecordBatch};

#[derive(Clone, Debug)]
enum Op {
    /// A leader append, in a newer epoch when `bump`.
    Append {
        records: usize,
        size: usize,
        bump: bool,
    },
    /// A follower append of `batches` batches, the epoch rising after the first when
    /// `bump`.
    AppendReplicated {
        batches: usize,
        records: usize,
        size: usize,
        bump: bool,
    },
    /// Truncate to the batch boundary a fraction of the way from the start to the end
    /// (or, when `inside`, to an offset inside that batch, which is refused).
    TruncateTo {
        per_mille: u16,
        inside: bool,
    },
    /// Restart the log empty, `ahead` offsets past its end.
    TruncateFully {
        ahead: i64,
    },
    /// A new leader epoch assigned at the log end.
    AssignEpoch,
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
        6 => (1usize..6, 0usize..300, proptest::bool::weighted(0.15))
            .prop_map(|(records, size, bump)| Op::Append { records, size, bump }),
        3 => (1usize..4, 1usize..6, 0usize..300, proptest::bool::weighted(0.3))
            .prop_map(|(batches, records, size, bump)| Op::AppendReplicated { batches, records, size, bump }),
        2 => (0u16..1001, proptest::bool::weighted(0.2))
            .prop_map(|(per_mille, inside)| Op::TruncateTo { per_mille, inside }),
        1 => Just(Op::AssignEpoch),
        1 => Just(Op::Roll),
        1 => (0u64..6000, 0usize..4).prop_map(|(keep, allow)| Op::Retention { keep, allow }),
        1 => (0u16..1000).prop_map(|per_mille| Op::AdvanceStart { per_mille }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        3 => (0u16..1001, 1usize..3000).prop_map(|(per_mille, max_bytes)| Op::Read { per_mille, max_bytes }),
        1 => (0i64..120_000).prop_map(|ms| Op::Tick { ms }),
        1 => (0i64..3).prop_map(|ahead| Op::TruncateFully { ahead }),
    ]
}

/// The log as a list of (base offset, record count, bytes) batches, and its
/// leader-epoch cache, kept by Kafka's rules independently of the log's code.
#[derive(Default, Debug)]
struct Model {
    batches: Vec<(i64, i64, Vec<u8>)>,
    start: i64,
    /// (epoch, start offset)
    epochs: Vec<(i32, i64)>,
    /// The epoch the next leader append uses.
    epoch: i32,
}

impl Model {
    /// Kafka's `assign`, for the rising epochs this test uses: a newer epoch starting
    /// where the latest one started (assigned at the log end, nothing appended in it)
    /// replaces it.
    fn assign(&mut self, epoch: i32, offset: i64) {
        if self.epochs.last().is_none_or(|&(e, _)| epoch > e) {
            self.epochs.retain(|&(_, o)| o < offset);
            self.epochs.push((epoch, offset));
        }
    }
    /// Kafka's `truncateFromEnd`.
    fn truncate_epochs(&mut self, offset: i64) {
        self.epochs.retain(|&(_, o)| o < offset);
    }
    /// Kafka's `truncateFromStart`.
    fn move_start(&mut self, start: i64) {
        self.start = start;
        let n = self.epochs.iter().filter(|&&(_, o)| o <= start).count();
        if n > 0 {
            let e = self.epochs[n - 1].0;
            self.epochs.drain(..n);
            self.epochs.insert(0, (e, start));
        }
    }
    /// Kafka's `endOffsetFor`, written out again.
    fn end_offset_for(&self, requested: i32) -> Option<(i32, i64)> {
        let &(latest, _) = self.epochs.last()?;
        if requested < 0 || requested > latest {
            return None;
        }
        if requested == latest {
            return Some((latest, self.end()));
        }
        let (i, &(_, next_start)) = self
            .epochs
            .iter()
            .enumerate()
            .find(|(_, (e, _))| *e > requested)?;
        Some(match i {
            0 => (requested, next_start),
            _ => (self.epochs[i - 1].0, next_start),
        })
    }
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
    assert_eq!(epochs(log), m.epochs, "leader-epoch cache");
    assert_eq!(log.latest_epoch(), m.epochs.last().map(|e| e.0));
    for requested in -1..=m.epoch + 1 {
        assert_eq!(
            log.end_offset_for_epoch(requested),
            m.end_offset_for(requested),
            "end offset for epoch {requested} of {:?}",
            m.epochs
        );
    }
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
            Op::Append {
                records,
                size,
                bump,
            } => {
                m.epoch += bump as i32;
                let mut b = make_batch(records, size, i as u64, 1_000_000 + i as i64);
                let info = l.append(&mut b, m.epoch).unwrap();
                prop_assert_eq!(info.first_offset, m.end());
                m.assign(m.epoch, info.first_offset);
                m.batches.push((info.first_offset, records as i64, b));
            }
            Op::AppendReplicated {
                batches,
                records,
                size,
                bump,
            } => {
                let mut fetched = Vec::new();
                let first = m.end();
                for k in 0..batches {
                    m.epoch += (bump && k == 1) as i32;
                    let base = m.end();
                    let b = leader_batch(
                        base,
                        m.epoch,
                        records,
                        size,
                        (i * 10 + k) as u64,
                        1_000_000 + i as i64,
                    );
                    fetched.extend_from_slice(&b);
                    m.assign(m.epoch, base);
                    m.batches.push((base, records as i64, b));
                }
                let info = l.append_replicated(&mut fetched).unwrap();
                prop_assert_eq!((info.first_offset, info.log_end_offset), (first, m.end()));
            }
            Op::TruncateTo { per_mille, inside } => {
                // The start (even inside a batch: nothing visible stays), the batch
                // boundaries after it, and the end.
                let mut boundaries: Vec<i64> = vec![m.start];
                boundaries.extend(
                    m.batches
                        .iter()
                        .map(|&(b, _, _)| b)
                        .filter(|&b| b > m.start),
                );
                boundaries.push(m.end());
                boundaries.dedup();
                let k = (boundaries.len() - 1) * per_mille as usize / 1000;
                let target = boundaries[k];
                let batch = m.batches.iter().find(|&&(b, n, _)| b == target && n > 1);
                if let (true, Some(&(b, n, _))) = (inside, batch) {
                    let got = l.truncate_to(b + n - 1);
                    let refused = matches!(got, Err(LogError::NotBatchBoundary { .. }));
                    prop_assert!(refused, "truncate inside a batch: {:?}", got);
                } else {
                    let cut = target < m.end();
                    l.truncate_to(target).unwrap();
                    // At the start everything goes, a batch straddling it too.
                    m.batches
                        .retain(|&(b, _, _)| b < target && target > m.start);
                    m.truncate_epochs(target);
                    if cut {
                        prop_assert_eq!(l.recovery_point(), target, "durable");
                    }
                }
            }
            Op::TruncateFully { ahead } => {
                let target = m.end() + ahead;
                l.truncate_fully_and_start_at(target).unwrap();
                m.batches.clear();
                m.epochs.clear();
                m.start = target;
            }
            Op::AssignEpoch => {
                m.epoch += 1;
                prop_assert_eq!(l.assign_epoch_start(m.epoch).unwrap(), m.end());
                m.assign(m.epoch, m.end());
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
                m.move_start(expected);
            }
            Op::AdvanceStart { per_mille } => {
                let target = m.start + (m.end() - m.start) * per_mille as i64 / 1000;
                let got = l.advance_log_start(target).unwrap();
                prop_assert_eq!(got, target.max(m.start));
                m.move_start(got);
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
                prop_assert!(
                    !report.rebuilt_leader_epochs,
                    "a consistent epoch checkpoint was rebuilt: {:?}",
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
