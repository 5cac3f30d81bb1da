//! Leader and ISR changes: elections after a broker is fenced, unfenced or restarted,
//! the leader's AlterPartition requests, and ElectLeaders (preferred and unclean).

use std::sync::Arc;

use super::commands::{
    AlterPartitionRequest, CommandOutput, CommandResult, ElectionError, ElectionOutcome,
    ElectionType,
};
use super::reassignment::complete_reassignment;
use super::records::{ClusterMetadata, NO_LEADER, PartitionRecord};
use crate::error::Rejection;
use crate::types::BrokerId;

impl ClusterMetadata {
    /// Re-runs leader election on every partition that has `broker` as a replica.
    pub(super) fn reconcile_replicas_of(
        &mut self,
        broker: BrokerId,
        remove_from_isr: Option<BrokerId>,
        restarted: Option<BrokerId>,
    ) {
        let live = self.liveness();
        let is_live = |id: BrokerId| live.get(&id).copied().unwrap_or(false);
        for t in self.topics.values_mut() {
            if !t.partitions.iter().any(|p| p.replicas.contains(&broker)) {
                continue; // not copied
            }
            let t = Arc::make_mut(t);
            let unclean = t.unclean_leader_election();
            for p in t.partitions.iter_mut() {
                if p.replicas.contains(&broker) {
                    reconcile_partition(p, &is_live, unclean, remove_from_isr, restarted);
                    // A target replica that can lead again may be all a reassignment
                    // waited for.
                    complete_reassignment(p, &is_live);
                }
            }
        }
    }

    pub(super) fn alter_partition(&mut self, req: &AlterPartitionRequest) -> CommandResult {
        // Kafka's order of checks (ReplicationControlManager.alterPartition): broker
        // epoch, topic and partition, leader, leader epoch, partition epoch, new ISR.
        self.check_broker_epoch(req.broker, req.broker_epoch)?;
        let live = self.liveness();
        let t = self
            .topic_by_id_mut(req.topic_id)
            .ok_or(Rejection::UnknownTopicId { id: req.topic_id })?;
        let topic = t.name.clone();
        let p = usize::try_from(req.partition)
            .ok()
            .and_then(|i| t.partitions.get_mut(i))
            .ok_or_else(|| Rejection::UnknownPartition {
                topic: topic.clone(),
                partition: req.partition,
            })?;
        if p.leader != req.broker {
            return Err(Rejection::NotLeader {
                topic,
                partition: req.partition,
                broker: req.broker,
                leader: p.leader,
            });
        }
        if req.leader_epoch != p.leader_epoch {
            return Err(Rejection::FencedLeaderEpoch {
                topic,
                partition: req.partition,
                current: p.leader_epoch,
                requested: req.leader_epoch,
            });
        }
        if req.partition_epoch != p.partition_epoch {
            // A retry of a change that was applied but whose answer was lost asks for the
            // ISR that is already there: answer with the current state rather than make
            // the leader think it failed. Any other stale request is refused.
            if req.partition_epoch < p.partition_epoch && same_members(&req.new_isr, &p.isr) {
                return Ok(CommandOutput::Partition(p.clone()));
            }
            return Err(Rejection::InvalidUpdateVersion {
                topic,
                partition: req.partition,
                current: p.partition_epoch,
                requested: req.partition_epoch,
            });
        }
        if !req.new_isr.contains(&p.leader) {
            return Err(Rejection::InvalidRequest {
                reason: format!(
                    "the new ISR {:?} of {topic}-{} leaves out its leader {}",
                    req.new_isr, req.partition, p.leader
                ),
            });
        }
        for (i, r) in req.new_isr.iter().enumerate() {
            let reason = if req.new_isr[..i].contains(r) {
                Some("it is named twice")
            } else if !p.replicas.contains(r) {
                Some("it is not a replica")
            } else if !live.get(r).copied().unwrap_or(false) {
                Some("it is fenced or unregistered")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(Rejection::IneligibleReplica {
                    topic,
                    partition: req.partition,
                    replica: *r,
                    reason: reason.into(),
                });
            }
        }
        if !same_members(&req.new_isr, &p.isr) {
            p.isr = req.new_isr.clone();
            p.partition_epoch += 1;
            // The ISR grew: a reassignment whose target replicas are all in sync now ends.
            let is_live = |id: BrokerId| live.get(&id).copied().unwrap_or(false);
            complete_reassignment(p, &is_live);
        }
        Ok(CommandOutput::Partition(p.clone()))
    }

    pub(super) fn elect_leaders(
        &mut self,
        election: ElectionType,
        which: &[(String, i32)],
    ) -> CommandOutput {
        let live = self.liveness();
        let is_live = |id: BrokerId| live.get(&id).copied().unwrap_or(false);
        let mut outcomes = Vec::with_capacity(which.len());
        for (topic, partition) in which {
            let p = self.topics.get_mut(topic).map(Arc::make_mut).and_then(|t| {
                usize::try_from(*partition)
                    .ok()
                    .and_then(|i| t.partitions.get_mut(i))
            });
            let result = match p {
                None => Err(ElectionError::UnknownPartition),
                Some(p) => match election {
                    ElectionType::Preferred => {
                        let preferred = p.preferred_leader();
                        if p.leader == preferred {
                            Err(ElectionError::NotNeeded)
                        } else if p.isr.contains(&preferred) && is_live(preferred) {
                            p.leader = preferred;
                            p.leader_epoch += 1;
                            p.partition_epoch += 1;
                            Ok(p.clone())
                        } else {
                            Err(ElectionError::PreferredLeaderNotAvailable)
                        }
                    }
                    ElectionType::Unclean => {
                        if !p.is_offline() {
                            Err(ElectionError::NotNeeded)
                        } else {
                            reconcile_partition(p, &is_live, true, None, None);
                            if p.is_offline() {
                                Err(ElectionError::EligibleLeadersNotAvailable)
                            } else {
                                Ok(p.clone())
                            }
                        }
                    }
                },
            };
            outcomes.push(ElectionOutcome {
                topic: topic.clone(),
                partition: *partition,
                result,
            });
        }
        CommandOutput::Elections(outcomes)
    }
}

fn same_members(a: &[BrokerId], b: &[BrokerId]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// Brings one partition in line with the set of live brokers (KRaft's
/// PartitionChangeBuilder, without ELR). `remove_from_isr` leaves the ISR unless it is the
/// last member; a `restarted` leader must be elected anew (new leader epoch) even if it
/// is chosen again. Returns whether the partition changed.
pub(super) fn reconcile_partition(
    p: &mut PartitionRecord,
    is_live: &impl Fn(BrokerId) -> bool,
    unclean: bool,
    remove_from_isr: Option<BrokerId>,
    restarted: Option<BrokerId>,
) -> bool {
    let old_leader = p.leader;
    let mut isr = p.isr.clone();
    if let Some(b) = remove_from_isr
        && isr.contains(&b)
        && isr.len() > 1
    {
        isr.retain(|r| *r != b);
    }
    let leader_ok = old_leader != NO_LEADER
        && isr.contains(&old_leader)
        && is_live(old_leader)
        && restarted != Some(old_leader);
    let mut leader = old_leader;
    if !leader_ok {
        // Clean election: the first replica (preference order) in the ISR that is live.
        leader = p
            .replicas
            .iter()
            .copied()
            .find(|r| isr.contains(r) && is_live(*r))
            .unwrap_or(NO_LEADER);
        if leader == NO_LEADER
            && unclean
            && let Some(r) = p.replicas.iter().copied().find(|r| is_live(*r))
        {
            leader = r;
            isr = vec![r];
        }
    }
    // Staying offline is no change; any other outcome of an election is a new leader
    // (even the same broker again, when its previous incarnation led).
    let stays_offline = old_leader == NO_LEADER && leader == NO_LEADER;
    let leader_changed = !leader_ok && !stays_offline;
    let isr_changed = isr != p.isr;
    if leader_changed {
        p.leader = leader;
        p.leader_epoch += 1;
    }
    if leader_changed || isr_changed {
        p.isr = isr;
        p.partition_epoch += 1;
    }
    leader_changed || isr_changed
}
