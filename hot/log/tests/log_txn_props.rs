//! The partition log's transaction invariants under random histories (proptest): three
//! producers write transactional and plain batches, end transactions with COMMIT and
//! ABORT markers, the high-water mark moves, segments roll, and the log is reopened as
//! after a crash. After every step:
//!
//! * the last stable offset never passes the first offset of a transaction that is
//!   open, nor the high-water mark; with no reopen in between it is exactly the model's
//!   (the oldest transaction open or ended by a marker not yet below the mark);
//! * the aborted transactions of the whole log are exactly the model's (producer, first
//!   offset, marker), before and after reopens;
//! * a plain batch from a producer with an open transaction is refused and appends
//!   nothing.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use strata_log::{IoMode, Log, LogConfig, LogError, ManualClock, ProducerError};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::control::{Marker, MarkerKind};

#[derive(Clone, Debug)]
enum Op {
    Data { pid: i64, txn: bool, n: usize },
    End { pid: i64, commit: bool },
    Hwm(u8),
    Roll,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3i64, any::<bool>(), 1..4usize).prop_map(|(pid, txn, n)| Op::Data { pid, txn, n }),
        3 => (0..3i64, any::<bool>()).prop_map(|(pid, commit)| Op::End { pid, commit }),
        2 => any::<u8>().prop_map(Op::Hwm),
        1 => Just(Op::Roll),
        1 => Just(Op::Reopen),
    ]
}

fn data(pid: i64, seq: i32, n: usize, txn: bool) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            key: Some(Bytes::from(format!("k{i}"))),
            ..NewRecord::value(vec![b'v'; 120], 1_000)
        })
        .collect();
    let mut b = batch(
        &records,
        Compression::None,
        Some(ProducerFields {
            producer_id: pid + 1,
            producer_epoch: 0,
            base_sequence: seq,
        }),
    )
    .to_vec();
    if txn {
        strata_proto::batch::set_transactional(&mut b);
    }
    b
}

/// What the log must say.
#[derive(Default, Debug)]
struct Model {
    /// producer -> first offset of its open transaction.
    open: BTreeMap<i64, i64>,
    /// (first offset, marker offset) of every ended transaction.
    ended: Vec<(i64, i64)>,
    /// (producer id, first offset, marker offset) of every aborted one.
    aborted: Vec<(i64, i64, i64)>,
    seq: [i32; 3],
}

impl Model {
    fn lso(&self, hwm: i64) -> i64 {
        let open = self.open.values().copied();
        let unstable = self
            .ended
            .iter()
            .filter(|&&(_, m)| m >= hwm)
            .map(|&(f, _)| f);
        open.chain(unstable).min().map_or(hwm, |f| f.min(hwm))
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1500,
        index_interval_bytes: 256,
        io_mode: IoMode::Buffered,
        ..LogConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn the_last_stable_offset_and_the_aborted_index_follow_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(1_000));
        let mut log = Log::open(dir.path(), config(), clock.clone()).unwrap().0;
        let mut m = Model::default();
        let mut hwm = 0i64;
        let mut reopened = false;
        for op in ops {
            match op {
                Op::Data { pid, txn, n } => {
                    let i = pid as usize;
                    let r = log.append(&mut data(pid, m.seq[i], n, txn), 0);
                    if !txn && m.open.contains_key(&pid) {
                        let refused = matches!(r, Err(LogError::Producer(ProducerError::ExpectedTransactional { .. })));
                        prop_assert!(refused, "{r:?}");
                        continue;
                    }
                    let info = r.unwrap();
                    m.seq[i] += n as i32;
                    if txn {
                        m.open.entry(pid).or_insert(info.first_offset);
                    }
                }
                Op::End { pid, commit } => {
                    let kind = if commit { MarkerKind::Commit } else { MarkerKind::Abort };
                    let marker = Marker {
                        kind,
                        producer_id: pid + 1,
                        producer_epoch: 0,
                        coordinator_epoch: 0,
                        timestamp: 1_000,
                    };
                    let at = log.append_marker(&marker, 0).unwrap().first_offset;
                    let first = m.open.remove(&pid).unwrap_or(at);
                    m.ended.push((first, at));
                    if !commit {
                        m.aborted.push((pid + 1, first, at));
                    }
                }
                Op::Hwm(x) => {
                    let leo = log.log_end_offset();
                    hwm = hwm + (leo - hwm) * i64::from(x) / 255;
                }
                Op::Roll => log.force_roll().unwrap(),
                Op::Reopen => {
                    drop(log);
                    log = Log::open(dir.path(), config(), clock.clone()).unwrap().0;
                    reopened = true;
                }
            }
            let lso = log.last_stable_offset(hwm);
            prop_assert!(lso <= hwm);
            if let Some(&first) = m.open.values().min() {
                prop_assert!(lso <= first, "the LSO {lso} passed an open transaction at {first}");
            }
            if !reopened {
                prop_assert_eq!(lso, m.lso(hwm));
            }
            let got: Vec<(i64, i64, i64)> = log
                .aborted_transactions(0, log.log_end_offset())
                .iter()
                .map(|a| (a.producer_id, a.first_offset, a.last_offset))
                .collect();
            prop_assert_eq!(&got, &m.aborted);
        }
    }
}
