//! Random sequences of InitProducerId / AddPartitions / AddOffsets / EndTxn from a few
//! producer instances per transactional id, ticks, record writes that succeed or fail,
//! markers completing in pieces, and failovers that reload the coordinator from the
//! records written, checking what clients and partition leaders rely on:
//!
//! - once a newer epoch was handed out for a transactional id, an EndTxn(commit) of an
//!   older one never succeeds (no two producers commit overlapping transactions), and
//!   no (producer id, epoch) is handed to two producer instances;
//! - a producer whose transaction the coordinator aborted (for a new producer or a
//!   timeout) stays fenced: its markers carry a higher epoch, and none of its later
//!   requests succeeds, nor can it recover (KIP-360) with its old epoch;
//! - a Prepare record holds exactly the partitions whose AddPartitions succeeded, every
//!   markers batch goes to exactly those (also when re-emitted after a reload), and every
//!   prepared transaction is eventually completed;
//! - after a reload the persisted state is what it was;
//! - a failed write leaves the metadata as it was before the request.

mod common;
use std::collections::{BTreeMap, BTreeSet};

use common::*;
use proptest::prelude::*;
use proptest::sample::Index;
use strata_proto::{ErrorCode, ProducerId};
use strata_txn::*;

const IDS: [&str; 3] = ["t0", "t1", "t2"];
const CLIENTS: usize = 2;
const PARTS: [(&str, i32); 4] = [("a", 0), ("a", 1), ("b", 0), ("c", 7)];
const MODEL_TIMEOUT: i32 = 5_000;

#[derive(Clone, Debug)]
enum Op {
    Init {
        txn: usize,
        client: usize,
        recover: bool,
    },
    Add {
        txn: usize,
        /// `None`: the newest producer of the id.
        client: Option<usize>,
        parts: Vec<usize>,
    },
    AddOffsets {
        txn: usize,
        /// `None`: the newest producer of the id.
        client: Option<usize>,
        group: usize,
    },
    End {
        txn: usize,
        /// `None`: the newest producer of the id.
        client: Option<usize>,
        commit: bool,
    },
    Verify {
        txn: usize,
        /// `None`: the newest producer of the id.
        client: Option<usize>,
        part: usize,
    },
    Tick {
        advance: i64,
    },
    Write {
        pick: Index,
        ok: bool,
    },
    Markers {
        pick: Index,
        all: bool,
        part: Index,
    },
    Reload,
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0..IDS.len();
    let c = 0..CLIENTS;
    // `None`: the newest producer of the id (so that transactions get somewhere).
    let who = prop::option::weighted(0.4, 0..CLIENTS);
    prop_oneof![
        2 => (t.clone(), c, prop::bool::weighted(0.3))
            .prop_map(|(txn, client, recover)| Op::Init { txn, client, recover }),
        4 => (t.clone(), who.clone(), prop::collection::vec(0..PARTS.len(), 0..3))
            .prop_map(|(txn, client, parts)| Op::Add { txn, client, parts }),
        1 => (t.clone(), who.clone(), 0..3usize)
            .prop_map(|(txn, client, group)| Op::AddOffsets { txn, client, group }),
        3 => (t.clone(), who.clone(), prop::bool::weighted(0.7))
            .prop_map(|(txn, client, commit)| Op::End { txn, client, commit }),
        1 => (t, who, 0..PARTS.len()).prop_map(|(txn, client, part)| Op::Verify { txn, client, part }),
        // Mostly within a transaction timeout; sometimes past the id expiry.
        2 => prop_oneof![4 => 0i64..4_000, 1 => 15_000i64..30_000]
            .prop_map(|advance| Op::Tick { advance }),
        12 => (any::<Index>(), prop::bool::weighted(0.85)).prop_map(|(pick, ok)| Op::Write { pick, ok }),
        5 => (any::<Index>(), any::<bool>(), any::<Index>())
            .prop_map(|(pick, all, part)| Op::Markers { pick, all, part }),
        1 => Just(Op::Reload),
    ]
}

/// Who waits for a write.
#[derive(Clone, Debug)]
enum Req {
    Init {
        txn: usize,
        client: usize,
        /// Recovering with a producer epoch another InitProducerId superseded.
        stale: bool,
    },
    Add {
        txn: usize,
        pair: ProducerIdAndEpoch,
        parts: Vec<(String, i32)>,
        offsets: bool,
    },
    End {
        txn: usize,
        pair: ProducerIdAndEpoch,
        commit: bool,
        stale: bool,
    },
    Internal,
}

#[derive(Debug)]
struct InFlight {
    w: TxnWrite,
    req: Req,
    /// What the metadata must be if the write fails.
    before: Option<TransactionMetadata>,
}

type Snapshot = BTreeMap<String, TransactionMetadata>;
type Partitions = BTreeSet<(String, i32)>;

struct World {
    h: H,
    writes: Vec<InFlight>,
    /// Markers out, with the partitions not reported yet.
    markers: Vec<(SendMarkers, Partitions)>,
    clients: Vec<Vec<Option<ProducerIdAndEpoch>>>,
    /// The pairs InitProducerId handed out, per id, in order.
    handed: Vec<Vec<ProducerIdAndEpoch>>,
    /// Partitions whose AddPartitions succeeded since the last transaction ended.
    acked: Vec<Partitions>,
    /// The transaction whose Prepare record is written: (commit, partitions).
    prepared: Vec<Option<(bool, Partitions)>>,
    /// Producers whose transaction the coordinator aborted.
    fenced: Vec<BTreeSet<ProducerIdAndEpoch>>,
}

fn idx(id: &str) -> usize {
    IDS.iter().position(|x| *x == id).expect("a model id")
}

impl World {
    fn new() -> Self {
        let mut h = H::with_config(TxnConfig {
            transactional_id_expiration_ms: 20_000,
            txn_state_partitions: PARTITIONS,
            ..TxnConfig::default()
        });
        h.now = 0;
        World {
            h,
            writes: Vec::new(),
            markers: Vec::new(),
            clients: vec![vec![None; CLIENTS]; IDS.len()],
            handed: vec![Vec::new(); IDS.len()],
            acked: vec![BTreeSet::new(); IDS.len()],
            prepared: vec![None; IDS.len()],
            fenced: vec![BTreeSet::new(); IDS.len()],
        }
    }

    fn snapshot(&self) -> Snapshot {
        self.h
            .c
            .transactions()
            .map(|m| (m.transactional_id.clone(), m.clone()))
            .collect()
    }

    /// The producer id and epoch a client sends (a made-up one before it has any).
    fn pair(&self, txn: usize, client: Option<usize>) -> ProducerIdAndEpoch {
        match client {
            Some(c) => self.clients[txn][c],
            None => self.handed[txn].last().copied(),
        }
        .unwrap_or(pe(1, 0))
    }

    /// Keeps a write the coordinator asked for. A failed Complete record stays pending
    /// (retried by tick), so its "before" is the state once it was issued.
    fn track(&mut self, w: TxnWrite, req: Req, before: &Snapshot) {
        let completing = value_of(&w)
            .is_some_and(|v| matches!(v.state, TxnState::CompleteCommit | TxnState::CompleteAbort));
        let before = if completing {
            self.h.c.metadata(&w.transactional_id).cloned()
        } else {
            before.get(&w.transactional_id).cloned()
        };
        self.writes.push(InFlight { w, req, before });
    }

    fn actions(&mut self, actions: Vec<Action>, before: &Snapshot) {
        for a in actions {
            match a {
                Action::Write(w) => self.track(w, Req::Internal, before),
                Action::SendMarkers(m) => {
                    let t = idx(&m.transactional_id);
                    let Some((commit, parts)) = &self.prepared[t] else {
                        panic!(
                            "markers for {} without a Prepare record",
                            m.transactional_id
                        );
                    };
                    assert_eq!(m.commit, *commit);
                    let sent: BTreeSet<_> = m.partitions.iter().cloned().collect();
                    assert_eq!(
                        &sent, parts,
                        "markers must go to exactly the added partitions"
                    );
                    assert!(!parts.is_empty());
                    self.markers.push((m, sent));
                }
            }
        }
    }

    /// A record reached the log.
    fn logged(&mut self, w: &TxnWrite) {
        let t = idx(&w.transactional_id);
        let Some(v) = value_of(w) else {
            assert!(self.prepared[t].is_none() && self.acked[t].is_empty());
            return;
        };
        match v.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                assert!(self.prepared[t].is_none());
                assert_eq!(
                    v.partitions, self.acked[t],
                    "Prepare must hold the added partitions"
                );
                self.prepared[t] = Some((v.state == TxnState::PrepareCommit, v.partitions));
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let (commit, _) = self.prepared[t].take().expect("Complete after Prepare");
                assert_eq!(commit, v.state == TxnState::CompleteCommit);
                self.acked[t].clear();
            }
            TxnState::Empty => {
                assert!(self.prepared[t].is_none() && self.acked[t].is_empty());
            }
            TxnState::Ongoing => assert!(self.prepared[t].is_none()),
            s => panic!("unexpected record state {s:?}"),
        }
    }

    fn reply(&mut self, req: &Req, reply: Option<Reply>) {
        use ErrorCode as E;
        let unavailable = [E::NotCoordinator, E::CoordinatorNotAvailable];
        match (req, reply) {
            (Req::Init { txn, client, stale }, Some(Reply::InitProducerId(r))) => match r {
                Ok(p) => {
                    assert!(!stale, "a superseded producer recovered");
                    for (c, held) in self.clients[*txn].iter().enumerate() {
                        assert!(c == *client || *held != Some(p), "{p:?} handed twice");
                    }
                    if let Some(last) = self.handed[*txn].last() {
                        assert!(
                            p.producer_id != last.producer_id
                                || p.producer_epoch >= last.producer_epoch
                        );
                    }
                    self.clients[*txn][*client] = Some(p);
                    self.handed[*txn].push(p);
                }
                Err(e) => assert!(
                    [E::ConcurrentTransactions, E::ProducerFenced].contains(&e)
                        || unavailable.contains(&e),
                    "init: {e:?}"
                ),
            },
            (
                Req::Add {
                    txn,
                    pair,
                    parts,
                    offsets,
                },
                Some(r),
            ) => {
                let e = match r {
                    Reply::AddPartitions(e) if !offsets => e,
                    Reply::AddOffsets(e) if *offsets => e,
                    r => panic!("{r:?} for {req:?}"),
                };
                if e == ErrorCode::None {
                    assert!(!self.fenced[*txn].contains(pair), "a fenced producer added");
                }
                self.add_reply(*txn, parts, e);
            }
            (
                Req::End {
                    txn,
                    pair,
                    commit,
                    stale,
                },
                Some(Reply::EndTxn(e)),
            ) => self.end_reply(*txn, *pair, *commit, *stale, e),
            (Req::Internal, None) => {}
            (req, r) => panic!("{r:?} for {req:?}"),
        }
    }

    fn add_reply(&mut self, txn: usize, parts: &[(String, i32)], e: ErrorCode) {
        use ErrorCode as E;
        let allowed = [
            E::None,
            E::InvalidProducerIdMapping,
            E::ProducerFenced,
            E::ConcurrentTransactions,
            E::NotCoordinator,
            E::CoordinatorNotAvailable,
        ];
        assert!(allowed.contains(&e), "add: {e:?}");
        if e == E::None {
            self.acked[txn].extend(parts.iter().cloned());
            assert_eq!(self.h.meta(IDS[txn]).state, TxnState::Ongoing);
        }
    }

    fn end_reply(
        &mut self,
        txn: usize,
        pair: ProducerIdAndEpoch,
        commit: bool,
        stale: bool,
        e: ErrorCode,
    ) {
        use ErrorCode as E;
        let allowed = [
            E::None,
            E::InvalidProducerIdMapping,
            E::ProducerFenced,
            E::ConcurrentTransactions,
            E::InvalidTxnState,
            E::NotCoordinator,
            E::CoordinatorNotAvailable,
        ];
        assert!(allowed.contains(&e), "end: {e:?}");
        if e == E::None {
            assert!(
                !self.fenced[txn].contains(&pair),
                "a fenced producer ended a txn"
            );
        }
        if e == E::None && commit {
            assert!(!stale, "a fenced producer's commit succeeded");
            assert_eq!(self.handed[txn].last(), Some(&pair));
        }
    }

    /// Runs a request that answers now or after a write.
    fn request(&mut self, req: Req, out: Outcome<Option<Reply>>, before: &Snapshot) {
        match out {
            Outcome::Reply(r) => self.reply(&req, r),
            Outcome::Write(w) => self.track(w, req, before),
        }
        self.h.c.check_invariants().expect("coordinator invariants");
    }

    fn complete_write(&mut self, i: usize, ok: bool) {
        let f = self.writes.remove(i);
        let before = self.snapshot();
        let result = if ok {
            self.h
                .log
                .push((f.w.partition, f.w.key.clone(), f.w.value.clone()));
            self.logged(&f.w);
            self.coordinator_abort(&f);
            Ok(())
        } else {
            Err([ErrorCode::NotEnoughReplicas, ErrorCode::NotLeaderOrFollower][i % 2])
        };
        let r = self.h.c.on_write_complete(f.w.ticket, result, self.h.now);
        self.h.c.check_invariants().expect("coordinator invariants");
        if !ok {
            assert_eq!(self.h.c.metadata(&f.w.transactional_id), f.before.as_ref());
            assert!(r.actions.is_empty());
        }
        self.reply(&f.req, r.reply);
        self.actions(r.actions, &before);
    }

    /// An abort the producer did not ask for fences every producer handed out so far:
    /// the abort's epoch is above theirs.
    fn coordinator_abort(&mut self, f: &InFlight) {
        let Some(v) = value_of(&f.w) else { return };
        if v.state != TxnState::PrepareAbort || matches!(f.req, Req::End { .. }) {
            return;
        }
        let t = idx(&f.w.transactional_id);
        for p in &self.handed[t] {
            if p.producer_id == v.producer_id {
                assert!(
                    p.producer_epoch < v.producer_epoch,
                    "abort at {v:?} fences no {p:?}"
                );
            }
        }
        self.fenced[t].extend(self.handed[t].iter().copied());
    }

    fn complete_markers(&mut self, i: usize, done: Vec<(String, i32)>) {
        let before = self.snapshot();
        let (m, left) = &mut self.markers[i];
        for p in &done {
            left.remove(p);
        }
        let finished = left.is_empty();
        let m = m.clone();
        let w = self.h.c.on_markers_complete(&m, &done, self.h.now);
        assert_eq!(w.is_some(), finished);
        if let Some(w) = w {
            self.markers.remove(i);
            self.track(w, Req::Internal, &before);
        }
        self.h.c.check_invariants().expect("coordinator invariants");
    }

    fn reload(&mut self) {
        // Leadership moves: appends in flight fail.
        while !self.writes.is_empty() {
            self.complete_write(0, false);
        }
        let persisted: BTreeMap<String, TxnLogValue> = self
            .snapshot()
            .into_iter()
            .map(|(id, m)| (id, m.log_value()))
            .collect();
        let stale = std::mem::take(&mut self.markers);
        let actions = self.h.reload();
        let reloaded: BTreeMap<String, TxnLogValue> = self
            .snapshot()
            .into_iter()
            .map(|(id, m)| (id, m.log_value()))
            .collect();
        assert_eq!(persisted, reloaded, "state after reload differs");
        for (m, _) in &stale {
            assert!(
                self.h
                    .c
                    .on_markers_complete(m, &m.partitions, self.h.now)
                    .is_none()
            );
        }
        self.actions(actions, &BTreeMap::new());
    }

    fn apply(&mut self, op: Op) {
        let before = self.snapshot();
        let now = self.h.now;
        match op {
            Op::Init {
                txn,
                client,
                recover,
            } => {
                let expected = if recover {
                    self.clients[txn][client]
                } else {
                    None
                };
                let stale = expected.is_some_and(|e| {
                    self.handed[txn].last() != Some(&e) && self.h.c.metadata(IDS[txn]).is_some()
                });
                let next: &mut ProducerId = &mut self.h.next_pid;
                let mut alloc = || {
                    *next += 1;
                    Ok(*next)
                };
                let out =
                    self.h
                        .c
                        .init_producer_id(IDS[txn], MODEL_TIMEOUT, expected, now, &mut alloc);
                let out = map(out, |r| Some(Reply::InitProducerId(r)));
                self.request(Req::Init { txn, client, stale }, out, &before);
            }
            Op::Add { txn, client, parts } => {
                let p = self.pair(txn, client);
                let parts: Vec<_> = parts.iter().map(|i| tp(PARTS[*i].0, PARTS[*i].1)).collect();
                let out = self.h.add(IDS[txn], p, &parts);
                let out = map(out, |e| Some(Reply::AddPartitions(e)));
                let req = Req::Add {
                    txn,
                    pair: p,
                    parts,
                    offsets: false,
                };
                self.request(req, out, &before);
            }
            Op::AddOffsets { txn, client, group } => {
                let p = self.pair(txn, client);
                let g = format!("group-{group}");
                let out =
                    (self.h.c).add_offsets(IDS[txn], p.producer_id, p.producer_epoch, &g, 50, now);
                let out = map(out, |e| Some(Reply::AddOffsets(e)));
                let req = Req::Add {
                    txn,
                    pair: p,
                    parts: vec![offsets_partition(&g, 50)],
                    offsets: true,
                };
                self.request(req, out, &before);
            }
            Op::End {
                txn,
                client,
                commit,
            } => {
                let pair = self.pair(txn, client);
                let stale = self.handed[txn].last() != Some(&pair);
                let out = self.h.end(IDS[txn], pair, commit);
                let out = map(out, |e| Some(Reply::EndTxn(e)));
                let req = Req::End {
                    txn,
                    pair,
                    commit,
                    stale,
                };
                self.request(req, out, &before);
            }
            Op::Verify { txn, client, part } => {
                let p = self.pair(txn, client);
                let (topic, partition) = PARTS[part];
                let r = (self.h.c).verify_partition(
                    IDS[txn],
                    p.producer_id,
                    p.producer_epoch,
                    topic,
                    partition,
                );
                if r == Ok(true) {
                    assert!(self.acked[txn].contains(&tp(topic, partition)));
                }
            }
            Op::Tick { advance } => {
                self.h.now += advance;
                let actions = self.h.c.tick(self.h.now);
                self.actions(actions, &before);
                self.h.c.check_invariants().expect("coordinator invariants");
                for m in self.h.c.transactions() {
                    let timed_out = m.state == TxnState::Ongoing
                        && m.txn_start_ms + i64::from(m.txn_timeout_ms) < self.h.now;
                    assert!(!timed_out || m.pending.is_some(), "{m:?} not aborted");
                }
            }
            Op::Write { pick, ok } => {
                if !self.writes.is_empty() {
                    let i = pick.index(self.writes.len());
                    self.complete_write(i, ok);
                }
            }
            Op::Markers { pick, all, part } => {
                if !self.markers.is_empty() {
                    let i = pick.index(self.markers.len());
                    let m = &self.markers[i].0;
                    let done = if all {
                        m.partitions.clone()
                    } else {
                        vec![m.partitions[part.index(m.partitions.len())].clone()]
                    };
                    self.complete_markers(i, done);
                }
            }
            Op::Reload => self.reload(),
        }
    }

    /// Lets every write succeed and every marker land until nothing is left to do.
    fn settle(&mut self) {
        for _ in 0..50 {
            if self.writes.is_empty() && self.markers.is_empty() {
                let before = self.snapshot();
                let actions = self.h.c.tick(self.h.now);
                if actions.is_empty() {
                    break;
                }
                self.actions(actions, &before);
            }
            while !self.writes.is_empty() {
                self.complete_write(0, true);
            }
            while !self.markers.is_empty() {
                let done = self.markers[0].0.partitions.clone();
                self.complete_markers(0, done);
            }
        }
        assert!(self.writes.is_empty() && self.markers.is_empty());
        for (t, p) in self.prepared.iter().enumerate() {
            assert!(p.is_none(), "{} prepared but never completed", IDS[t]);
        }
        for m in self.h.c.transactions() {
            assert_eq!(m.pending, None, "{m:?}");
        }
    }
}

fn map<T>(o: Outcome<T>, f: impl FnOnce(T) -> Option<Reply>) -> Outcome<Option<Reply>> {
    match o {
        Outcome::Reply(r) => Outcome::Reply(f(r)),
        Outcome::Write(w) => Outcome::Write(w),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn transactions_stay_consistent(ops in prop::collection::vec(op(), 1..120)) {
        let mut w = World::new();
        for op in ops {
            w.apply(op);
        }
        w.settle();
        // Reloading a settled log changes nothing and resumes nothing.
        let before: Vec<TxnLogValue> = w.h.c.transactions().map(|m| m.log_value()).collect();
        prop_assert!(w.h.reload().is_empty());
        let after: Vec<TxnLogValue> = w.h.c.transactions().map(|m| m.log_value()).collect();
        prop_assert_eq!(before, after);
    }
}
