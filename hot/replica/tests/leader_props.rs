//! Model test of one replica's leader side: random interleavings of local appends,
//! follower fetches, ticks, controller answers to AlterPartition (accepted, refused,
//! lost, retriable, stale), ISR changes the controller makes itself, and leadership
//! moving away and back. After every step (safety): the HWM never moves back, never
//! passes the log end of any member of the maximal ISR when it advances, stays within
//! the log; the committed ISR loses members only through changes the controller made
//! or confirmed; the maximal ISR contains the committed one and the leader; at most one
//! AlterPartition is in flight. Then (liveness) with every follower fetching and the
//! controller answering, the ISR grows back to every replica and the HWM reaches the
//! log end.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use proptest::prelude::*;
use strata_replica::{
    AlterPartitionError, AlterPartitionRequest, Command, CommittedIsr, EpochLog, FetchDecision,
    FollowerFetch, PartitionReplica, ReplicaConfig, Role,
};

const ME: i32 = 0;
const REPLICAS: [i32; 4] = [0, 1, 2, 3];
const LAG: i64 = 1_000;

#[derive(Clone, Debug)]
enum Op {
    Append(i64),
    /// Follower `r` fetches, `step` records further than last time (capped at the log
    /// end).
    Fetch {
        r: usize,
        step: i64,
    },
    Tick(i64),
    /// The controller answers the request in flight.
    Respond(Answer),
    /// The controller removes a follower from the ISR itself (it fenced the broker).
    ControllerRemoves {
        r: usize,
    },
    /// Leadership moves to another in-sync replica.
    LeaderMoves,
    /// Leadership comes back here.
    LeaderReturns,
    /// While following: a fetch response with the leader's HWM at `per_mille` of the
    /// local log end.
    FollowerHwm {
        per_mille: u16,
    },
}

#[derive(Clone, Copy, Debug)]
enum Answer {
    Apply,
    NotAttempted,
    Ineligible,
    Retriable,
    Lost,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..20).prop_map(Op::Append),
        8 => (1usize..4, 0i64..25).prop_map(|(r, step)| Op::Fetch { r, step }),
        3 => (1i64..700).prop_map(Op::Tick),
        3 => prop_oneof![
            5 => Just(Answer::Apply),
            1 => Just(Answer::NotAttempted),
            1 => Just(Answer::Ineligible),
            1 => Just(Answer::Retriable),
            1 => Just(Answer::Lost),
        ]
        .prop_map(Op::Respond),
        1 => (1usize..4).prop_map(|r| Op::ControllerRemoves { r }),
        1 => Just(Op::LeaderMoves),
        1 => Just(Op::LeaderReturns),
        1 => (0u16..1001).prop_map(|per_mille| Op::FollowerHwm { per_mille }),
    ]
}

/// The controller's view of the partition.
#[derive(Clone, Debug)]
struct Controller {
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: Vec<i32>,
    /// The AlterPartition it has received and not answered.
    inbox: Option<AlterPartitionRequest>,
}

impl Controller {
    fn state(&self) -> strata_replica::PartitionState {
        state(
            self.leader,
            self.leader_epoch,
            self.partition_epoch,
            &REPLICAS,
            &self.isr,
        )
    }

    /// KIP-497's validation of an AlterPartition.
    fn apply(&mut self, req: &AlterPartitionRequest) -> Result<CommittedIsr, AlterPartitionError> {
        if req.leader_epoch != self.leader_epoch {
            return Err(AlterPartitionError::FencedLeaderEpoch);
        }
        if req.partition_epoch != self.partition_epoch {
            return Err(AlterPartitionError::InvalidUpdateVersion);
        }
        self.isr = req.new_isr.clone();
        self.partition_epoch += 1;
        Ok(CommittedIsr {
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            isr: self.isr.clone(),
        })
    }
}

struct Sim {
    r: PartitionReplica,
    log: EpochLog,
    /// Where each follower's log ends (a prefix of the leader's).
    followers: [i64; 4],
    controller: Controller,
    now: i64,
    /// Every AlterPartition sent and not yet answered (or lost).
    last_hwm_command: i64,
}

impl Sim {
    fn new() -> Sim {
        let log = epoch_log(0, 0, &[]);
        let controller = Controller {
            leader: ME,
            leader_epoch: 1,
            partition_epoch: 1,
            isr: REPLICAS.to_vec(),
            inbox: None,
        };
        let mut sim = Sim {
            r: PartitionReplica::new(
                ME,
                ReplicaConfig {
                    replica_lag_time_max_ms: LAG,
                    alter_partition_retry_backoff_ms: 50,
                },
                0,
            ),
            log,
            followers: [0; 4],
            controller,
            now: 0,
            last_hwm_command: 0,
        };
        let cmds = sim.r.become_leader(0, &sim.controller.state(), &sim.log);
        sim.run(cmds);
        sim
    }

    /// Carries out commands: epoch assignments into the log, AlterPartition to the
    /// controller's inbox. Checks what the commands promise.
    fn run(&mut self, cmds: Vec<Command>) {
        for c in cmds {
            match c {
                Command::AssignEpochStart {
                    leader_epoch,
                    start_offset,
                } => {
                    assert_eq!(start_offset, self.log.log_end_offset);
                    self.log.epochs.assign(leader_epoch, start_offset);
                }
                Command::AlterPartition(req) => {
                    // At most one in flight: a resend is the same request.
                    if let Some(pending) = &self.controller.inbox {
                        assert_eq!(
                            pending, &req,
                            "a second AlterPartition while one is in flight"
                        );
                    }
                    assert!(req.new_isr.contains(&ME), "the leader proposes itself");
                    assert_eq!(Some(&req), self.r.pending_alter_partition());
                    self.controller.inbox = Some(req);
                }
                Command::HighWatermarkAdvanced(h) => {
                    assert!(
                        h > self.last_hwm_command,
                        "advanced to {h} after {}",
                        self.last_hwm_command
                    );
                    assert_eq!(h, self.r.high_watermark());
                    self.last_hwm_command = h;
                }
                Command::IsrChanged {
                    isr,
                    partition_epoch,
                } => {
                    assert_eq!(isr, self.r.isr());
                    assert_eq!(partition_epoch, self.r.partition_epoch());
                }
                c @ (Command::Truncate(_) | Command::TruncateFullyAndStartAt(_)) => {
                    panic!("no truncation in this model: {c:?}")
                }
            }
        }
    }

    fn fetch(&mut self, r: usize, step: i64) -> FetchDecision {
        self.followers[r] = (self.followers[r] + step).min(self.log.log_end_offset);
        let f = FollowerFetch {
            replica: r as i32,
            current_leader_epoch: Some(self.controller.leader_epoch),
            fetch_offset: self.followers[r],
            last_fetched_epoch: None,
        };
        let out = self.r.on_follower_fetch(self.now, &f, &self.log);
        self.run(out.commands);
        out.decision
    }

    fn respond(&mut self, answer: Answer) {
        let Some(req) = self.controller.inbox.take() else {
            return;
        };
        let result = match answer {
            Answer::Apply => self.controller.apply(&req),
            Answer::NotAttempted => Err(AlterPartitionError::OperationNotAttempted),
            Answer::Ineligible => Err(AlterPartitionError::IneligibleReplica),
            Answer::Retriable => Err(AlterPartitionError::Retriable),
            Answer::Lost => {
                // Lost: the leader keeps waiting for an answer that never comes, as
                // Kafka's does until new metadata arrives.
                return;
            }
        };
        let cmds = self.r.on_alter_partition_response(self.now, &req, result);
        self.run(cmds);
    }

    /// The controller changed the partition: the metadata reaches this broker.
    fn publish(&mut self) {
        self.controller.inbox = None;
        let st = self.controller.state();
        let cmds = if st.leader == ME {
            self.r.become_leader(self.now, &st, &self.log)
        } else {
            self.r.become_follower(self.now, &st, &self.log)
        };
        self.run(cmds);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_hwm_and_the_isr_follow_the_rules(ops in proptest::collection::vec(op(), 1..150)) {
        let mut sim = Sim::new();
        for (step, op) in ops.iter().enumerate() {
            let hwm_before = sim.r.high_watermark();
            let isr_before = sim.r.isr();
            let was_leader = sim.r.is_leader();
            let mut controller_changed_isr = false;
            match op.clone() {
                Op::Append(n) => {
                    if sim.r.is_leader() {
                        sim.log.log_end_offset += n;
                        let cmds = sim.r.on_local_append(sim.now, sim.log.log_end_offset);
                        sim.run(cmds);
                    }
                }
                Op::Fetch { r, step } => {
                    if sim.r.is_leader() {
                        let d = sim.fetch(r, step);
                        let read = matches!(d, FetchDecision::Read { .. });
                        prop_assert!(read, "a follower's fetch within the log: {:?}", d);
                    }
                }
                Op::Tick(dt) => {
                    sim.now += dt;
                    let cmds = sim.r.tick(sim.now);
                    sim.run(cmds);
                }
                Op::Respond(answer) => {
                    controller_changed_isr = matches!(answer, Answer::Apply);
                    sim.respond(answer);
                }
                Op::ControllerRemoves { r } => {
                    let c = &mut sim.controller;
                    if c.isr.contains(&(r as i32)) && c.leader != r as i32 {
                        c.isr.retain(|&x| x != r as i32);
                        c.partition_epoch += 1;
                        controller_changed_isr = true;
                        sim.publish();
                    }
                }
                Op::LeaderMoves => {
                    let c = &mut sim.controller;
                    if let Some(&next) = c.isr.iter().find(|&&x| x != c.leader) {
                        c.leader = next;
                        c.leader_epoch += 1;
                        c.partition_epoch += 1;
                        controller_changed_isr = true;
                        sim.publish();
                    }
                }
                Op::LeaderReturns => {
                    let c = &mut sim.controller;
                    if c.leader != ME && c.isr.contains(&ME) {
                        c.leader = ME;
                        c.leader_epoch += 1;
                        c.partition_epoch += 1;
                        controller_changed_isr = true;
                        // The followers truncate to this log (they have nothing more).
                        let end = sim.log.log_end_offset;
                        for f in &mut sim.followers {
                            *f = (*f).min(end);
                        }
                        sim.publish();
                    }
                }
                Op::FollowerHwm { per_mille } => {
                    if !sim.r.is_leader() {
                        let leo = sim.log.log_end_offset;
                        let cmds = sim.r.on_fetch_response(leo * per_mille as i64 / 1000, leo);
                        sim.run(cmds);
                    }
                }
            }
            let ctx = format!("step {step}: {op:?}");
            let hwm = sim.r.high_watermark();
            // The HWM never moves back, and stays within the log.
            prop_assert!(hwm >= hwm_before, "{}: HWM {} -> {}", ctx, hwm_before, hwm);
            prop_assert!(hwm <= sim.log.log_end_offset, "{}", ctx);
            if sim.r.is_leader() {
                let committed = sim.r.isr();
                // KIP-497's maximal ISR, from what the test knows: the committed ISR
                // and the ISR the request in flight proposes.
                let mut maximal = committed.clone();
                if let Some(req) = sim.r.pending_alter_partition() {
                    maximal.extend(req.new_isr.iter().filter(|r| !committed.contains(r)));
                }
                let mut theirs = sim.r.maximal_isr();
                theirs.sort_unstable();
                let mut ours = maximal.clone();
                ours.sort_unstable();
                prop_assert_eq!(theirs, ours, "{}: maximal ISR", ctx);
                prop_assert!(committed.contains(&ME), "{}: leader not in ISR {:?}", ctx, committed);
                prop_assert!(committed.iter().all(|r| maximal.contains(r)), "{}", ctx);
                // When it advances, every member of the maximal ISR has it.
                if hwm > hwm_before {
                    for &m in maximal.iter().filter(|&&m| m != ME) {
                        let end = sim.r.follower_progress(m).and_then(|p| p.log_end_offset);
                        prop_assert!(
                            end.is_some_and(|e| e >= hwm),
                            "{}: HWM {} passed member {} at {:?} (maximal ISR {:?})",
                            ctx, hwm, m, end, maximal
                        );
                    }
                }
                // The committed ISR loses members only by the controller's doing.
                if was_leader {
                    let lost: Vec<i32> = isr_before.iter().copied().filter(|r| !committed.contains(r)).collect();
                    prop_assert!(
                        lost.is_empty() || controller_changed_isr,
                        "{}: {:?} left the ISR without the controller", ctx, lost
                    );
                }
                // The leader's ISR is the controller's, or one change away in flight.
                if sim.r.pending_alter_partition().is_none() {
                    prop_assert_eq!(&committed, &sim.controller.isr, "{}", ctx);
                }
            }
        }

        // Liveness: leadership here, every follower fetching up to the end, the
        // controller answering every request.
        if sim.r.role() != Role::Leader {
            let c = &mut sim.controller;
            c.leader = ME;
            c.leader_epoch += 1;
            c.partition_epoch += 1;
            if !c.isr.contains(&ME) {
                c.isr.push(ME);
            }
            let end = sim.log.log_end_offset;
            for f in &mut sim.followers {
                *f = (*f).min(end);
            }
            sim.publish();
        }
        if sim.controller.inbox.is_none() && sim.r.pending_alter_partition().is_some() {
            // A lost answer: Kafka's leader waits for metadata; the controller sends it.
            sim.controller.partition_epoch += 1;
            sim.publish();
        }
        for _ in 0..20 {
            sim.now += 10;
            for r in 1..4 {
                sim.fetch(r, i64::MAX / 4);
                sim.respond(Answer::Apply);
            }
            let cmds = sim.r.tick(sim.now);
            sim.run(cmds);
            sim.respond(Answer::Apply);
        }
        let mut isr = sim.r.isr();
        isr.sort_unstable();
        prop_assert_eq!(isr, REPLICAS.to_vec(), "every follower back in the ISR");
        prop_assert_eq!(sim.r.high_watermark(), sim.log.log_end_offset);
    }
}
