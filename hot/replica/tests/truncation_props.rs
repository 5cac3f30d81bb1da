//! KIP-101/KIP-279 on random divergent logs. A random leader-epoch history: a committed
//! prefix, then epochs whose leaders each start from a prefix (at least the committed
//! part) of an earlier leader's log, as a clean election and truncation leave it, and
//! append their own records (or none). The leader is the last epoch's; the follower
//! holds a prefix of any epoch leader's log (what a replica can hold), and remembers an
//! epoch it led without appending. Asking the leader about its latest epoch and
//! truncating as `truncation_decision` says, round after round, the follower ends with
//! a prefix of the leader's log that keeps every committed record; and the leader's
//! fetch-path check then finds no divergence.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use proptest::prelude::*;
use strata_log::LeaderEpochCache;
use strata_replica::{
    FetchDecision, FollowerFetch, LocalLog, PartitionReplica, ReplicaConfig, TruncationDecision,
    truncation_decision,
};

/// A log of records (epoch, id) and its epoch cache.
#[derive(Clone, Debug)]
struct Log {
    recs: Vec<(i32, u64)>,
    epochs: LeaderEpochCache,
}

impl Log {
    fn from_records(recs: &[(i32, u64)]) -> Log {
        let mut epochs = LeaderEpochCache::new();
        for (o, &(e, _)) in recs.iter().enumerate() {
            epochs.assign(e, o as i64);
        }
        Log {
            recs: recs.to_vec(),
            epochs,
        }
    }
    fn truncate(&mut self, offset: i64) {
        self.recs.truncate(offset as usize);
        self.epochs.truncate_from_end(offset);
    }
}

impl LocalLog for Log {
    fn log_start_offset(&self) -> i64 {
        0
    }
    fn log_end_offset(&self) -> i64 {
        self.recs.len() as i64
    }
    fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }
    fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }
}

/// An epoch leader: its epoch, its log when the next election came, and where its
/// epoch started in that log.
type EpochLeader = (i32, Vec<(i32, u64)>, usize);

/// One epoch of the history: its leader starts from `keep` per-mille of the way from
/// the committed prefix to the end of the log of the `from`-th earlier epoch leader,
/// and appends `records` records.
#[derive(Clone, Debug)]
struct EpochStep {
    from: usize,
    keep: u16,
    records: usize,
    /// Skip this many epoch numbers (epochs whose elections left no trace).
    gap: i32,
}

fn step() -> impl Strategy<Value = EpochStep> {
    (any::<usize>(), 0u16..=1000, 0usize..6, 0i32..3).prop_map(|(from, keep, records, gap)| {
        EpochStep {
            from,
            keep,
            records,
            gap,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn truncation_makes_the_follower_a_prefix_of_the_leader(
        committed_runs in proptest::collection::vec(1usize..5, 0..4),
        history in proptest::collection::vec(step(), 1..12),
        follower_from in any::<usize>(),
        follower_keep in 0u16..=1000,
        via_fetch in any::<bool>(),
    ) {
        let mut id = 0u64;
        let mut next = || { id += 1; id };
        // The committed prefix: a few epochs' worth of records.
        let mut committed = Vec::new();
        for (e, &n) in committed_runs.iter().enumerate() {
            for _ in 0..n {
                committed.push((e as i32, next()));
            }
        }
        let c = committed.len();
        // Epoch leaders' logs (and the epoch each led), the first one the committed log.
        let mut epoch = committed_runs.len() as i32;
        let mut leaders: Vec<EpochLeader> = vec![(epoch - 1, committed.clone(), c)];
        for s in &history {
            epoch += 1 + s.gap;
            let (_, base, _) = &leaders[s.from % leaders.len()];
            let p = c + (base.len() - c) * s.keep as usize / 1000;
            let mut log = base[..p].to_vec();
            for _ in 0..s.records {
                log.push((epoch, next()));
            }
            leaders.push((epoch, log, p));
        }
        // The leader: the last epoch's, which assigned its epoch where it started.
        let (leader_epoch, leader_recs, leader_start) = leaders.last().unwrap().clone();
        let mut leader = Log::from_records(&leader_recs);
        leader.epochs.assign(leader_epoch, leader_start as i64);
        // The follower: a prefix of some epoch leader's log; if the whole of it, it
        // may be that leader itself, remembering an epoch it appended nothing in.
        let (f_epoch, f_recs, f_start) = &leaders[follower_from % leaders.len()];
        let q = c + (f_recs.len() - c) * follower_keep as usize / 1000;
        let mut follower = Log::from_records(&f_recs[..q]);
        if q == f_recs.len() && *f_epoch < leader_epoch {
            follower.epochs.assign(*f_epoch, *f_start as i64);
        }
        let original = follower.clone();

        let mut leader_replica = PartitionReplica::new(0, ReplicaConfig::default(), c as i64);
        leader_replica.become_leader(0, &state(0, leader_epoch, 1, &[0, 1], &[0]), &leader);
        let mut rounds = 0;
        loop {
            rounds += 1;
            prop_assert!(rounds <= 2 + history.len() + committed_runs.len(), "does not converge");
            let Some(asked) = follower.latest_epoch() else { break };
            // The leader's answer: OffsetsForLeaderEpoch, or the fetch path's
            // DivergingEpoch (which says nothing when there is no divergence).
            let answer = if via_fetch {
                let fetch = FollowerFetch {
                    replica: 1,
                    current_leader_epoch: Some(leader_epoch),
                    fetch_offset: follower.log_end_offset(),
                    last_fetched_epoch: Some(asked),
                };
                match leader_replica.on_follower_fetch(0, &fetch, &leader).decision {
                    FetchDecision::DivergingEpoch { epoch, end_offset, .. } => Some((epoch, end_offset)),
                    FetchDecision::Read { .. } => break,
                    other => {
                        prop_assert!(false, "fetch answered {:?}", other);
                        unreachable!()
                    }
                }
            } else {
                leader.end_offset_for_epoch(asked)
            };
            prop_assert!(answer.is_some(), "the leader knows an epoch at or below {}", asked);
            match truncation_decision(&follower, answer) {
                TruncationDecision::Truncate { offset } => {
                    follower.truncate(offset);
                    break;
                }
                TruncationDecision::TruncateAndAskAgain { offset } => follower.truncate(offset),
                other => {
                    prop_assert!(false, "decision {:?}", other);
                }
            }
        }
        let n = follower.recs.len();
        prop_assert!(
            n <= leader.recs.len() && follower.recs[..] == leader.recs[..n],
            "follower {:?} (was {:?}) is no prefix of leader {:?}",
            follower.recs, original.recs, leader.recs
        );
        prop_assert!(n >= c, "committed records were truncated: kept {} of {}", n, c);
        // And it cut exactly where the logs part: nothing they had in common goes.
        let common = original
            .recs
            .iter()
            .zip(&leader.recs)
            .take_while(|(a, b)| a == b)
            .count();
        prop_assert_eq!(n, common, "cut at {} where the logs part at {}", n, common);
        // Fetching from there, the leader sees no divergence.
        let fetch = FollowerFetch {
            replica: 1,
            current_leader_epoch: Some(leader_epoch),
            fetch_offset: follower.log_end_offset(),
            last_fetched_epoch: follower.latest_epoch(),
        };
        let d = leader_replica.on_follower_fetch(0, &fetch, &leader).decision;
        prop_assert!(matches!(d, FetchDecision::Read { .. }), "after truncation: {:?}", d);
    }
}
