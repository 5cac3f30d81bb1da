//! Model test of replication between three brokers, each running the real
//! `PartitionReplica` over a model log (records with their leader epochs, and the real
//! leader-epoch cache), with a model controller (KIP-497's AlterPartition validation,
//! elections from the ISR only). Random interleavings of produces (acks=1 and acks=all,
//! also to a leader cut off from everyone), follower fetches (reads, diverging epochs,
//! truncation), ticks, controller work, elections (fencing the old leader or not), and
//! network partitions of one broker.
//!
//! After every step: no record acknowledged with acks=all is missing from the current
//! leader's log or from any replica whose HWM covers it, and no offset was acknowledged
//! for two records; any two replicas agree on every offset below both their HWMs; no
//! HWM moves back or passes its log end; and a follower whose truncation completed
//! holds a prefix of its leader's log (KIP-101/279: logs never diverge below the cut,
//! whatever the leader-epoch histories that made them). Then, healed and left to
//! fetch, every log equals the leader's, the ISR is every replica, and the HWM is the
//! log end.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use strata_log::LeaderEpochCache;
use strata_replica::{
    AckStatus, AlterPartitionError, AlterPartitionRequest, Command, CommittedIsr, FetchDecision,
    FollowerFetch, LocalLog, PartitionReplica, PartitionState, ReplicaConfig, Role,
    TruncationDecision,
};

const N: usize = 3;
const MIN_ISR: usize = 2;
const LAG: i64 = 1_000;

/// A log: one record per offset, with the leader epoch it was appended in.
#[derive(Clone, Debug, Default)]
struct ModelLog {
    recs: Vec<(i32, u64)>,
    epochs: LeaderEpochCache,
}

impl ModelLog {
    fn leo(&self) -> i64 {
        self.recs.len() as i64
    }
    fn append(&mut self, recs: &[(i32, u64)]) {
        for &(epoch, id) in recs {
            self.epochs.assign(epoch, self.leo());
            self.recs.push((epoch, id));
        }
    }
    fn truncate(&mut self, offset: i64) {
        self.recs.truncate(offset as usize);
        self.epochs.truncate_from_end(offset);
    }
}

impl LocalLog for ModelLog {
    fn log_start_offset(&self) -> i64 {
        0
    }
    fn log_end_offset(&self) -> i64 {
        self.leo()
    }
    fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }
    fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.leo())
    }
}

#[derive(Clone, Debug)]
struct PendingAck {
    epoch: i32,
    /// (offset, id) of each record of the produce.
    records: Vec<(i64, u64)>,
}

#[derive(Debug)]
struct Broker {
    replica: PartitionReplica,
    log: ModelLog,
    connected: bool,
    acks: Vec<PendingAck>,
    last_hwm: i64,
}

#[derive(Debug)]
struct Controller {
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: Vec<i32>,
    inbox: Vec<(usize, AlterPartitionRequest)>,
}

impl Controller {
    fn state(&self) -> PartitionState {
        PartitionState {
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            replicas: (0..N as i32).collect(),
            isr: self.isr.clone(),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Broker `who` (of those that believe they lead) appends `n` records.
    Produce {
        who: usize,
        n: usize,
        acks_all: bool,
    },
    /// Broker `f` fetches up to `max` records from the leader it knows.
    Fetch {
        f: usize,
        max: usize,
    },
    Tick(i64),
    /// The controller handles the AlterPartitions it has received.
    Controller,
    /// The controller elects the `pick`-th other ISR member, fencing the old leader
    /// (out of the ISR) or not (a preferred-leader move).
    Elect {
        pick: usize,
        fence: bool,
    },
    /// Broker `b` is cut off from everyone (one at a time).
    Disconnect {
        b: usize,
    },
    Reconnect,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0usize..2, 1usize..5, any::<bool>()).prop_map(|(who, n, acks_all)| Op::Produce { who, n, acks_all }),
        8 => (0usize..N, 1usize..8).prop_map(|(f, max)| Op::Fetch { f, max }),
        2 => (1i64..600).prop_map(Op::Tick),
        3 => Just(Op::Controller),
        1 => (0usize..2, any::<bool>()).prop_map(|(pick, fence)| Op::Elect { pick, fence }),
        1 => (0usize..N).prop_map(|b| Op::Disconnect { b }),
        1 => Just(Op::Reconnect),
    ]
}

struct Cluster {
    b: Vec<Broker>,
    c: Controller,
    now: i64,
    next_id: u64,
    /// Offset -> the record acknowledged there.
    acked: BTreeMap<i64, u64>,
}

impl Cluster {
    fn new() -> Cluster {
        let config = ReplicaConfig {
            replica_lag_time_max_ms: LAG,
            alter_partition_retry_backoff_ms: 50,
        };
        let mut cl = Cluster {
            b: (0..N as i32)
                .map(|id| Broker {
                    replica: PartitionReplica::new(id, config, 0),
                    log: ModelLog::default(),
                    connected: true,
                    acks: Vec::new(),
                    last_hwm: 0,
                })
                .collect(),
            c: Controller {
                leader: 0,
                leader_epoch: 1,
                partition_epoch: 1,
                isr: (0..N as i32).collect(),
                inbox: Vec::new(),
            },
            now: 0,
            next_id: 1,
            acked: BTreeMap::new(),
        };
        for i in 0..N {
            cl.publish(i);
        }
        cl
    }

    /// The controller's state reaches broker `i`.
    fn publish(&mut self, i: usize) {
        let st = self.c.state();
        let b = &mut self.b[i];
        let cmds = if st.leader == i as i32 {
            b.replica.become_leader(self.now, &st, &b.log)
        } else {
            b.replica.become_follower(self.now, &st, &b.log)
        };
        self.run(i, cmds);
    }

    fn run(&mut self, i: usize, cmds: Vec<Command>) {
        let mut cmds: std::collections::VecDeque<Command> = cmds.into();
        while let Some(c) = cmds.pop_front() {
            let b = &mut self.b[i];
            match c {
                Command::AssignEpochStart {
                    leader_epoch,
                    start_offset,
                } => {
                    assert_eq!(start_offset, b.log.leo());
                    b.log.epochs.assign(leader_epoch, start_offset);
                }
                Command::AlterPartition(req) => {
                    if b.connected {
                        self.c.inbox.push((i, req));
                    } else {
                        // The broker's channel to the controller reports a failed send,
                        // as Kafka's AlterPartitionManager does: retry later.
                        let more = b.replica.on_alter_partition_response(
                            self.now,
                            &req,
                            Err(AlterPartitionError::Retriable),
                        );
                        cmds.extend(more);
                    }
                }
                Command::HighWatermarkAdvanced(h) => assert_eq!(h, b.replica.high_watermark()),
                Command::IsrChanged { .. } => {}
                Command::Truncate(o) => b.log.truncate(o),
                Command::TruncateFullyAndStartAt(o) => {
                    panic!("broker {i}: no log start moves in this model, asked to restart at {o}")
                }
            }
        }
    }

    fn leaders(&self) -> Vec<usize> {
        (0..N).filter(|&i| self.b[i].replica.is_leader()).collect()
    }

    fn produce(&mut self, who: usize, n: usize, acks_all: bool) {
        let leaders = self.leaders();
        let Some(&i) = leaders.get(who % leaders.len().max(1)) else {
            return;
        };
        if acks_all && !self.b[i].replica.acks_all_allowed(MIN_ISR) {
            return; // NOT_ENOUGH_REPLICAS: nothing written
        }
        let b = &mut self.b[i];
        let epoch = b.replica.leader_epoch();
        let first = b.log.leo();
        let recs: Vec<(i32, u64)> = (0..n as u64).map(|k| (epoch, self.next_id + k)).collect();
        self.next_id += n as u64;
        b.log.append(&recs);
        let cmds = b.replica.on_local_append(self.now, b.log.leo());
        if acks_all {
            b.acks.push(PendingAck {
                epoch,
                records: recs
                    .iter()
                    .enumerate()
                    .map(|(k, &(_, id))| (first + k as i64, id))
                    .collect(),
            });
        }
        self.run(i, cmds);
    }

    /// Returns a truncation that completed: (follower, leader).
    fn fetch(&mut self, f: usize, max: usize) -> Option<(usize, usize)> {
        let Role::Follower { leader } = self.b[f].replica.role() else {
            return None;
        };
        let l = leader as usize;
        if !self.b[f].connected || !self.b[l].connected {
            return None;
        }
        let req = FollowerFetch {
            replica: f as i32,
            current_leader_epoch: Some(self.b[f].replica.leader_epoch()),
            fetch_offset: self.b[f].log.leo(),
            last_fetched_epoch: self.b[f].log.latest_epoch(),
        };
        let out = {
            let lb = &mut self.b[l];
            lb.replica.on_follower_fetch(self.now, &req, &lb.log)
        };
        self.run(l, out.commands);
        match out.decision {
            FetchDecision::Read { high_watermark } => {
                let from = req.fetch_offset as usize;
                let to = (from + max).min(self.b[l].log.recs.len());
                let recs = self.b[l].log.recs[from..to].to_vec();
                let fb = &mut self.b[f];
                fb.log.append(&recs);
                let cmds = fb.replica.on_fetch_response(high_watermark, fb.log.leo());
                self.run(f, cmds);
                None
            }
            FetchDecision::DivergingEpoch {
                epoch, end_offset, ..
            } => {
                let fb = &mut self.b[f];
                let out = fb
                    .replica
                    .on_epoch_end_offset(Some((epoch, end_offset)), &fb.log);
                let complete = matches!(out.decision, TruncationDecision::Truncate { .. });
                assert!(
                    !matches!(
                        out.decision,
                        TruncationDecision::Undefined | TruncationDecision::TruncateFully { .. }
                    ),
                    "{:?}",
                    out.decision
                );
                self.run(f, out.commands);
                complete.then_some((f, l))
            }
            FetchDecision::OffsetOutOfRange => {
                let leader_leo = self.b[l].log.leo();
                let fb = &mut self.b[f];
                let cmds = fb.replica.on_fetch_out_of_range(0, leader_leo, &fb.log);
                self.run(f, cmds);
                None
            }
            // Metadata not there yet on one side.
            FetchDecision::FencedLeaderEpoch
            | FetchDecision::UnknownLeaderEpoch
            | FetchDecision::NotLeaderOrFollower => None,
        }
    }

    fn tick(&mut self, dt: i64) {
        self.now += dt;
        for i in 0..N {
            let cmds = self.b[i].replica.tick(self.now);
            self.run(i, cmds);
        }
    }

    fn controller(&mut self) {
        for (i, req) in std::mem::take(&mut self.c.inbox) {
            let result = if req.leader_epoch != self.c.leader_epoch {
                Err(AlterPartitionError::FencedLeaderEpoch)
            } else if req.partition_epoch != self.c.partition_epoch {
                Err(AlterPartitionError::InvalidUpdateVersion)
            } else {
                assert!(req.new_isr.contains(&self.c.leader));
                self.c.isr = req.new_isr.clone();
                self.c.partition_epoch += 1;
                Ok(CommittedIsr {
                    leader_epoch: self.c.leader_epoch,
                    partition_epoch: self.c.partition_epoch,
                    isr: self.c.isr.clone(),
                })
            };
            // A broker cut off meanwhile gets a failed send instead of the answer (and
            // retries; the controller answers a retry of an applied request with
            // INVALID_UPDATE_VERSION, and the metadata brings the new state).
            let answer = if self.b[i].connected {
                result.clone()
            } else {
                Err(AlterPartitionError::Retriable)
            };
            let cmds = self.b[i]
                .replica
                .on_alter_partition_response(self.now, &req, answer);
            self.run(i, cmds);
            if result.is_ok() {
                for j in 0..N {
                    if j != i && self.b[j].connected {
                        self.publish(j);
                    }
                }
            }
        }
    }

    fn elect(&mut self, pick: usize, fence: bool) {
        let old = self.c.leader;
        let candidates: Vec<i32> = self.c.isr.iter().copied().filter(|&r| r != old).collect();
        if candidates.is_empty() {
            return;
        }
        self.c.leader = candidates[pick % candidates.len()];
        self.c.leader_epoch += 1;
        self.c.partition_epoch += 1;
        if fence {
            self.c.isr.retain(|&r| r != old);
        }
        self.c.inbox.clear();
        for i in 0..N {
            if self.b[i].connected {
                self.publish(i);
            }
        }
    }

    /// Settles parked acks=all produces.
    fn settle_acks(&mut self) {
        for i in 0..N {
            let b = &mut self.b[i];
            let mut keep = Vec::new();
            for ack in std::mem::take(&mut b.acks) {
                if b.replica.leader_epoch() != ack.epoch {
                    continue; // NOT_LEADER_OR_FOLLOWER
                }
                let required = ack.records.last().unwrap().0 + 1;
                match b
                    .replica
                    .check_enough_replicas_reach_offset(required, MIN_ISR)
                {
                    AckStatus::Waiting => keep.push(ack),
                    AckStatus::Done => {
                        for &(o, id) in &ack.records {
                            let prev = self.acked.insert(o, id);
                            assert!(
                                prev.is_none_or(|p| p == id),
                                "offset {o} acknowledged for two records: {prev:?} and {id}"
                            );
                        }
                    }
                    AckStatus::NotEnoughReplicasAfterAppend | AckStatus::NotLeaderOrFollower => {}
                }
            }
            b.acks = keep;
        }
    }

    fn check(&mut self, ctx: &str) {
        // Acknowledged records are in the leader's log, and in every replica whose HWM
        // covers them.
        let leader = &self.b[self.c.leader as usize];
        for (&o, &id) in &self.acked {
            assert_eq!(
                leader.log.recs.get(o as usize).map(|r| r.1),
                Some(id),
                "{ctx}: acknowledged record {id} at {o} missing from the leader {}",
                self.c.leader
            );
            for (i, b) in self.b.iter().enumerate() {
                if o < b.replica.high_watermark() {
                    assert_eq!(
                        b.log.recs[o as usize].1, id,
                        "{ctx}: broker {i}, offset {o}"
                    );
                }
            }
        }
        for (i, b) in self.b.iter_mut().enumerate() {
            let h = b.replica.high_watermark();
            assert!(
                h >= b.last_hwm,
                "{ctx}: broker {i}'s HWM moved back {} -> {h}",
                b.last_hwm
            );
            assert!(
                h <= b.log.leo(),
                "{ctx}: broker {i}'s HWM {h} past its log end"
            );
            b.last_hwm = h;
        }
        // Any two replicas agree below both their HWMs.
        for i in 0..N {
            for j in i + 1..N {
                let below = self.b[i]
                    .replica
                    .high_watermark()
                    .min(self.b[j].replica.high_watermark()) as usize;
                assert!(
                    self.b[i].log.recs[..below] == self.b[j].log.recs[..below],
                    "{ctx}: brokers {i} and {j} disagree below {below}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, max_shrink_iters: 4000, ..ProptestConfig::default() })]

    #[test]
    fn replicas_agree_below_the_hwm_and_keep_every_acknowledged_record(
        ops in proptest::collection::vec(op(), 1..200)
    ) {
        let mut cl = Cluster::new();
        for (step, op) in ops.iter().enumerate() {
            let ctx = format!("step {step}: {op:?}");
            match op.clone() {
                Op::Produce { who, n, acks_all } => cl.produce(who, n, acks_all),
                Op::Fetch { f, max } => {
                    if let Some((f, l)) = cl.fetch(f, max) {
                        // KIP-279: once the truncation completes, the follower's log is a
                        // prefix of the leader's.
                        let (fl, ll) = (&cl.b[f].log.recs, &cl.b[l].log.recs);
                        prop_assert!(
                            fl.len() <= ll.len() && fl[..] == ll[..fl.len()],
                            "{}: follower {} after truncation {:?} is no prefix of leader {} {:?}",
                            ctx, f, fl, l, ll
                        );
                    }
                }
                Op::Tick(dt) => cl.tick(dt),
                Op::Controller => cl.controller(),
                Op::Elect { pick, fence } => cl.elect(pick, fence),
                Op::Disconnect { b } => {
                    if cl.b.iter().all(|x| x.connected) {
                        cl.b[b].connected = false;
                    }
                }
                Op::Reconnect => {
                    for i in 0..N {
                        if !cl.b[i].connected {
                            cl.b[i].connected = true;
                            cl.publish(i);
                        }
                    }
                }
            }
            cl.settle_acks();
            cl.check(&ctx);
        }

        // Liveness: healed, the followers fetch, the controller works, time passes.
        for i in 0..N {
            if !cl.b[i].connected {
                cl.b[i].connected = true;
                cl.publish(i);
            }
        }
        for round in 0..40 {
            for f in 0..N {
                cl.fetch(f, 1000);
            }
            cl.controller();
            cl.tick(10);
            cl.settle_acks();
            cl.check(&format!("liveness round {round}"));
        }
        let l = cl.c.leader as usize;
        prop_assert!(cl.b[l].replica.is_leader());
        for i in 0..N {
            prop_assert_eq!(&cl.b[i].log.recs, &cl.b[l].log.recs, "broker {} caught up", i);
        }
        let mut isr = cl.b[l].replica.isr();
        isr.sort_unstable();
        prop_assert_eq!(isr, vec![0, 1, 2]);
        prop_assert_eq!(cl.b[l].replica.high_watermark(), cl.b[l].log.leo());
    }
}
