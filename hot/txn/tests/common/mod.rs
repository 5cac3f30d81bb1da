//! A test harness around the coordinator: plays the broker's part (a producer id
//! allocator, the `__transaction_state` log the writes go to) so tests can drive
//! requests to their answers in a line.

#![allow(dead_code)]

use bytes::Bytes;
use strata_proto::{ErrorCode, ProducerEpoch, ProducerId};
use strata_txn::*;

/// Transaction state partitions in tests (every one led by the coordinator).
pub const PARTITIONS: i32 = 4;
pub const TIMEOUT: i32 = 60_000;

pub fn tp(topic: &str, partition: i32) -> (String, i32) {
    (topic.to_string(), partition)
}

#[derive(Debug)]
pub struct H {
    pub c: TransactionCoordinator,
    pub now: i64,
    pub next_pid: ProducerId,
    /// Records written successfully: (partition, key, value).
    pub log: Vec<(i32, Bytes, Option<Bytes>)>,
    pub coordinator_epoch: i32,
}

impl H {
    pub fn new() -> Self {
        Self::with_config(TxnConfig {
            txn_state_partitions: PARTITIONS,
            ..TxnConfig::default()
        })
    }

    pub fn with_config(config: TxnConfig) -> Self {
        let n = config.txn_state_partitions;
        let mut h = H {
            c: TransactionCoordinator::new(config),
            now: 1_000_000,
            next_pid: 1000,
            log: Vec::new(),
            coordinator_epoch: 0,
        };
        for p in 0..n {
            let actions =
                h.c.load_partition(p, 0, Vec::<(Bytes, Option<Bytes>)>::new(), h.now)
                    .expect("an empty partition loads");
            assert!(actions.is_empty());
        }
        h
    }

    pub fn init(
        &mut self,
        id: &str,
        expected: Option<ProducerIdAndEpoch>,
    ) -> Outcome<InitProducerIdResult> {
        let next = &mut self.next_pid;
        let mut alloc = || {
            *next += 1;
            Ok(*next)
        };
        self.c
            .init_producer_id(id, TIMEOUT, expected, self.now, &mut alloc)
    }

    /// Completes a write successfully, appending it to the log.
    pub fn write_ok(&mut self, w: TxnWrite) -> WriteResult {
        self.log.push((w.partition, w.key.clone(), w.value.clone()));
        let r = self.c.on_write_complete(w.ticket, Ok(()), self.now);
        self.c.check_invariants().expect("coordinator invariants");
        r
    }

    pub fn write_err(&mut self, w: TxnWrite, e: ErrorCode) -> WriteResult {
        let r = self.c.on_write_complete(w.ticket, Err(e), self.now);
        self.c.check_invariants().expect("coordinator invariants");
        r
    }

    /// InitProducerId that is expected to succeed after one write.
    pub fn init_ok(&mut self, id: &str) -> ProducerIdAndEpoch {
        let w = self.init(id, None).write().expect("a write");
        match self.write_ok(w).reply {
            Some(Reply::InitProducerId(Ok(pe))) => pe,
            other => panic!("init of {id}: {other:?}"),
        }
    }

    pub fn add(
        &mut self,
        id: &str,
        pe: ProducerIdAndEpoch,
        parts: &[(String, i32)],
    ) -> Outcome<ErrorCode> {
        self.c
            .add_partitions(id, pe.producer_id, pe.producer_epoch, parts, self.now)
    }

    /// AddPartitions that is expected to succeed (at once or after its write).
    pub fn add_ok(&mut self, id: &str, pe: ProducerIdAndEpoch, parts: &[(String, i32)]) {
        match self.add(id, pe, parts) {
            Outcome::Reply(e) => assert_eq!(e, ErrorCode::None),
            Outcome::Write(w) => {
                let r = self.write_ok(w);
                assert_eq!(r.reply, Some(Reply::AddPartitions(ErrorCode::None)));
                assert!(r.actions.is_empty());
            }
        }
    }

    pub fn end(&mut self, id: &str, pe: ProducerIdAndEpoch, commit: bool) -> Outcome<ErrorCode> {
        self.c
            .end_txn(id, pe.producer_id, pe.producer_epoch, commit, self.now)
    }

    /// EndTxn that writes its Prepare record; returns the markers to send.
    pub fn end_prepared(&mut self, id: &str, pe: ProducerIdAndEpoch, commit: bool) -> SendMarkers {
        let w = self.end(id, pe, commit).write().expect("a Prepare write");
        let r = self.write_ok(w);
        assert_eq!(r.reply, Some(Reply::EndTxn(ErrorCode::None)));
        single_markers(r.actions)
    }

    /// Reports every marker done and writes the Complete record.
    pub fn finish(&mut self, m: &SendMarkers) {
        let w = self
            .c
            .on_markers_complete(m, &m.partitions, self.now)
            .expect("the Complete write");
        let r = self.write_ok(w);
        assert_eq!(r, WriteResult::default());
    }

    /// A full transaction.
    pub fn commit_txn(&mut self, id: &str, pe: ProducerIdAndEpoch, parts: &[(String, i32)]) {
        self.add_ok(id, pe, parts);
        let m = self.end_prepared(id, pe, true);
        self.finish(&m);
    }

    pub fn meta(&self, id: &str) -> TransactionMetadata {
        self.c.metadata(id).cloned().expect("metadata")
    }

    /// The records of one partition.
    pub fn records_of(&self, partition: i32) -> Vec<(Bytes, Option<Bytes>)> {
        self.log
            .iter()
            .filter(|(p, _, _)| *p == partition)
            .map(|(_, k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Leadership moves away and back: every partition is reloaded from the log at a
    /// new coordinator epoch. Returns what `resume` asked for.
    pub fn reload(&mut self) -> Vec<Action> {
        self.coordinator_epoch += 1;
        let mut out = Vec::new();
        for (p, _, _) in self.c.partitions() {
            assert!(self.c.unload_partition(p));
            let records = self.records_of(p);
            out.extend(
                self.c
                    .load_partition(p, self.coordinator_epoch, records, self.now)
                    .expect("the log loads"),
            );
        }
        self.c.check_invariants().expect("coordinator invariants");
        out
    }
}

pub fn single_markers(actions: Vec<Action>) -> SendMarkers {
    match <[Action; 1]>::try_from(actions) {
        Ok([Action::SendMarkers(m)]) => m,
        other => panic!("expected one SendMarkers, got {other:?}"),
    }
}

pub fn single_write(actions: Vec<Action>) -> TxnWrite {
    match <[Action; 1]>::try_from(actions) {
        Ok([Action::Write(w)]) => w,
        other => panic!("expected one write, got {other:?}"),
    }
}

pub fn pe(producer_id: ProducerId, producer_epoch: ProducerEpoch) -> ProducerIdAndEpoch {
    ProducerIdAndEpoch {
        producer_id,
        producer_epoch,
    }
}

/// The value a write carries, decoded.
pub fn value_of(w: &TxnWrite) -> Option<TxnLogValue> {
    w.value
        .as_ref()
        .map(|v| decode_value(v).expect("the coordinator writes valid records"))
}
