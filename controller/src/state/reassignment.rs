//! Partition reassignment (KIP-455): starting, completing and cancelling a move of a
//! partition's replicas.

use std::sync::Arc;

use super::commands::{CommandOutput, Reassignment, ReassignmentOutcome};
use super::records::{ClusterMetadata, NO_LEADER, PartitionRecord};
use super::validation::validate_target;
use crate::error::Rejection;
use crate::types::BrokerId;

impl ClusterMetadata {
    /// KIP-455, as KRaft's ReplicationControlManager carries it out: a new target makes
    /// `replicas` the target followed by the current replicas it drops (`removing`), with
    /// the ones it adds in `adding`; the leader adds those to the ISR as they catch up,
    /// and the reassignment completes (replicas = target, leadership moved if the leader
    /// leaves) once every target replica is in sync. A new target for a partition already
    /// moving starts from its replicas as they are. Cancelling goes back to the replicas
    /// it had (the adding ones leave), as long as one of those is still in sync.
    pub(super) fn alter_reassignments(&mut self, reassignments: &[Reassignment]) -> CommandOutput {
        let live = self.liveness();
        let is_live = |id: BrokerId| live.get(&id).copied().unwrap_or(false);
        let registered = |id: BrokerId| live.contains_key(&id);
        let mut outcomes = Vec::with_capacity(reassignments.len());
        for r in reassignments {
            let result = (|| {
                let t = self
                    .topics
                    .get_mut(&r.topic)
                    .ok_or_else(|| Rejection::UnknownTopic {
                        name: r.topic.clone(),
                    })?;
                let unknown = || Rejection::UnknownPartition {
                    topic: r.topic.clone(),
                    partition: r.partition,
                };
                let index = usize::try_from(r.partition).map_err(|_| unknown())?;
                if index >= t.partitions.len() {
                    return Err(unknown());
                }
                let p = &mut Arc::make_mut(t).partitions[index];
                match &r.target {
                    Some(target) => {
                        validate_target(target, &registered)?;
                        start_reassignment(p, target, &is_live);
                    }
                    None => cancel_reassignment(p, &r.topic, &is_live)?,
                }
                Ok(p.clone())
            })();
            outcomes.push(ReassignmentOutcome {
                topic: r.topic.clone(),
                partition: r.partition,
                result,
            });
        }
        CommandOutput::Reassignments(outcomes)
    }
}

/// Sets `p` moving to `target` (from its replicas as they are), and completes at once
/// when every target replica is already in sync.
fn start_reassignment(
    p: &mut PartitionRecord,
    target: &[BrokerId],
    is_live: &impl Fn(BrokerId) -> bool,
) {
    let current = p.replicas.clone();
    let adding: Vec<BrokerId> = target
        .iter()
        .copied()
        .filter(|r| !current.contains(r))
        .collect();
    let removing: Vec<BrokerId> = current
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(removing.iter().copied());
    // Adding replicas that a previous target brought in and this one drops were never
    // counted on: they leave with the rest of `removing`.
    let changed =
        replicas != p.replicas || adding != p.adding_replicas || removing != p.removing_replicas;
    p.replicas = replicas;
    p.adding_replicas = adding;
    p.removing_replicas = removing;
    if changed {
        p.partition_epoch += 1;
    }
    complete_reassignment(p, is_live);
}

/// Ends `p`'s reassignment if every target replica is in the ISR and one of them can
/// lead: replicas become the target, the ISR loses the removed ones, and leadership
/// moves to the first live target replica in sync if the leader is being removed.
/// Returns whether it completed.
pub(super) fn complete_reassignment(
    p: &mut PartitionRecord,
    is_live: &impl Fn(BrokerId) -> bool,
) -> bool {
    if !p.is_reassigning() {
        return false;
    }
    let target = p.target_replicas();
    if !target.iter().all(|r| p.isr.contains(r)) {
        return false;
    }
    let leader_stays = target.contains(&p.leader);
    let new_leader = if leader_stays {
        p.leader
    } else {
        match target.iter().copied().find(|r| is_live(*r)) {
            Some(l) => l,
            None => return false,
        }
    };
    p.isr.retain(|r| target.contains(r));
    p.replicas = target;
    p.adding_replicas.clear();
    p.removing_replicas.clear();
    if !leader_stays {
        p.leader = new_leader;
        p.leader_epoch += 1;
    }
    p.partition_epoch += 1;
    true
}

/// Puts `p` back on the replicas it had before its reassignment.
fn cancel_reassignment(
    p: &mut PartitionRecord,
    topic: &str,
    is_live: &impl Fn(BrokerId) -> bool,
) -> Result<(), Rejection> {
    if !p.is_reassigning() {
        return Err(Rejection::NoReassignmentInProgress {
            topic: topic.to_string(),
            partition: p.partition,
        });
    }
    let original = p.original_replicas();
    let isr: Vec<BrokerId> = p
        .isr
        .iter()
        .copied()
        .filter(|r| original.contains(r))
        .collect();
    if isr.is_empty() {
        return Err(Rejection::InvalidReplicaAssignment {
            reason: format!(
                "none of {topic}-{}'s original replicas {original:?} is in sync any more:                  cancelling would lose records; move it to a target instead",
                p.partition
            ),
        });
    }
    let leader_stays = original.contains(&p.leader);
    p.replicas = original;
    p.isr = isr;
    p.adding_replicas.clear();
    p.removing_replicas.clear();
    p.partition_epoch += 1;
    if !leader_stays {
        p.leader = p
            .replicas
            .iter()
            .copied()
            .find(|r| p.isr.contains(r) && is_live(*r))
            .unwrap_or(NO_LEADER);
        p.leader_epoch += 1;
    }
    Ok(())
}
