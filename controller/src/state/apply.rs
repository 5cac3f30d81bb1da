//! [`ClusterMetadata::apply`]: one command applied as one log entry, and what it does to
//! brokers, topics and producer ids; [`ClusterMetadata::apply_delta`] for a run of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::commands::{Command, CommandOutput, CommandResult, DeltaError, MetadataDelta, NewTopic};
use super::leadership::reconcile_partition;
use super::records::{
    BrokerRecord, ClusterMetadata, Endpoint, PartitionRecord, TopicIds, TopicRecord,
};
use super::validation::{validate_broker_configs, validate_configs, validate_topic_name};
use crate::error::Rejection;
use crate::types::BrokerId;

/// The first producer id handed out. Above the ids of the file metadata store this
/// replaces, which also started at 1000.
pub(super) const FIRST_PRODUCER_ID: i64 = 1000;

/// Where a cluster named `cluster_id` starts handing out producer ids: FNV-1a of the id,
/// 40 bits of it in steps of 2^16 above [`FIRST_PRODUCER_ID`] (below 2^57: room for 2^62
/// ids after it), the same on every voter.
fn producer_id_base(cluster_id: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in cluster_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    FIRST_PRODUCER_ID + (((h & ((1 << 40) - 1)) as i64) << 16)
}

/// Largest producer-id block one command may reserve.
const MAX_PRODUCER_ID_BLOCK: i64 = 1_000_000;

impl ClusterMetadata {
    /// Applies the commands of `delta` to this copy, which must be at its
    /// `from_version`. On an error this copy is left part way: the caller drops it.
    pub fn apply_delta(&mut self, delta: &MetadataDelta) -> Result<(), DeltaError> {
        if self.version != delta.from_version {
            return Err(DeltaError::WrongBase {
                have: self.version,
                delta: delta.from_version,
            });
        }
        for (index, command) in &delta.commands {
            if let Err(rejection) = self.apply(command, *index) {
                return Err(DeltaError::Diverged {
                    index: *index,
                    rejection,
                });
            }
        }
        if self.version != delta.to_version {
            return Err(DeltaError::WrongEnd {
                reached: self.version,
                delta: delta.to_version,
            });
        }
        self.controller_leader = delta.controller_leader;
        Ok(())
    }

    /// Applies a command as the log entry at `index`. A rejected command changes
    /// nothing; an accepted one bumps [`ClusterMetadata::version`].
    pub fn apply(&mut self, command: &Command, index: u64) -> CommandResult {
        let out = match command {
            Command::InitCluster { cluster_id } => {
                if self.cluster_id.is_empty() {
                    self.cluster_id = cluster_id.clone();
                    // A new cluster's producer ids start at a point of its own, derived
                    // from its (random) id: a topic recovered from the bucket into
                    // another cluster brings its producers' state with it, and a new
                    // producer there must not get the id of one of them.
                    if self.next_producer_id == FIRST_PRODUCER_ID {
                        self.next_producer_id = producer_id_base(cluster_id);
                    }
                }
                Ok(CommandOutput::Done)
            }
            Command::RegisterBroker {
                broker,
                host,
                port,
                rack,
                listeners,
            } => self.register_broker(*broker, host, *port, rack.clone(), listeners, index),
            Command::FenceBroker { broker, epoch } => self.fence_broker(*broker, *epoch),
            Command::UnfenceBroker { broker, epoch } => self.unfence_broker(*broker, *epoch),
            Command::CreateTopic(t) | Command::RestoreTopic(t) => self.create_topic(t),
            Command::DeleteTopic { name } => self
                .topics
                .remove(name)
                .map(|t| CommandOutput::Topic(Arc::unwrap_or_clone(t)))
                .ok_or_else(|| Rejection::UnknownTopic { name: name.clone() }),
            Command::CreatePartitions {
                name,
                count,
                assignment,
            } => self.create_partitions(name, *count, assignment),
            Command::SetTopicConfigs { name, configs } => self.set_configs(name, configs),
            Command::AlterPartition(req) => self.alter_partition(req),
            Command::ElectLeaders {
                election,
                partitions,
            } => Ok(self.elect_leaders(*election, partitions)),
            Command::AllocateProducerIds { count } => {
                if !(1..=MAX_PRODUCER_ID_BLOCK).contains(count) {
                    return Err(Rejection::InvalidRequest {
                        reason: format!(
                            "a producer id block holds 1..={MAX_PRODUCER_ID_BLOCK} ids, not {count}"
                        ),
                    });
                }
                let first = self.next_producer_id;
                self.next_producer_id += count;
                Ok(CommandOutput::ProducerIds {
                    first,
                    count: *count,
                })
            }
            Command::AlterSecurity(change) => {
                Ok(CommandOutput::Security(self.security.apply(change)))
            }
            Command::AlterReassignments { reassignments } => {
                Ok(self.alter_reassignments(reassignments))
            }
            Command::UnregisterBroker { broker } => self.unregister_broker(*broker),
            Command::SetBrokerConfigs { resource, configs } => {
                validate_broker_configs(resource, configs)?;
                if configs.is_empty() {
                    self.broker_configs.remove(resource);
                } else {
                    self.broker_configs
                        .insert(resource.clone(), configs.clone());
                }
                Ok(CommandOutput::Done)
            }
        };
        if out.is_ok() {
            self.version += 1;
            if matches!(
                command,
                Command::CreateTopic(_) | Command::RestoreTopic(_) | Command::DeleteTopic { .. }
            ) {
                // After the change: creating a topic looks its id up first.
                self.topic_ids = TopicIds::default();
            }
        }
        out
    }

    fn register_broker(
        &mut self,
        id: BrokerId,
        host: &str,
        port: u16,
        rack: Option<String>,
        listeners: &[Endpoint],
        index: u64,
    ) -> CommandResult {
        if id < 0 {
            return Err(Rejection::InvalidRequest {
                reason: format!("broker id {id} is negative"),
            });
        }
        let restarted = self.brokers.contains_key(&id);
        let record = BrokerRecord {
            id,
            host: host.to_string(),
            port,
            rack,
            listeners: listeners.to_vec(),
            epoch: i64::try_from(index).unwrap_or(i64::MAX),
            fenced: false,
        };
        self.brokers.insert(id, record.clone());
        // A new incarnation of a known broker may have lost unflushed records (lazy
        // fsync), so it leaves every ISR it was in (but the last member stays) and gives
        // up its leaderships, as a fenced broker would; its leaders add it back once it
        // has caught up (AlterPartition). A partition that was offline for want of it gets
        // a leader again.
        let (remove, restart) = if restarted {
            (Some(id), Some(id))
        } else {
            (None, None)
        };
        self.reconcile_replicas_of(id, remove, restart);
        Ok(CommandOutput::Broker(record))
    }

    fn unregister_broker(&mut self, id: BrokerId) -> CommandResult {
        let b = self
            .brokers
            .get(&id)
            .ok_or(Rejection::UnknownBroker { broker: id })?;
        if !b.fenced {
            return Err(Rejection::InvalidRequest {
                reason: format!(
                    "broker {id} is running (not fenced): stop its process first, and \
                     unregister it once its session has expired"
                ),
            });
        }
        let held: Vec<String> = self
            .partitions()
            .filter(|(_, p)| p.replicas.contains(&id))
            .take(3)
            .map(|(t, p)| format!("{}-{}", t.name, p.partition))
            .collect();
        if !held.is_empty() {
            return Err(Rejection::InvalidRequest {
                reason: format!(
                    "broker {id} still holds replicas (of {} and maybe more): move them off \
                     first (`strata cluster decommission {id}`)",
                    held.join(", ")
                ),
            });
        }
        let record = self.brokers.remove(&id).expect("checked above");
        self.broker_configs.remove(&id.to_string());
        Ok(CommandOutput::Broker(record))
    }

    pub(super) fn check_broker_epoch(
        &self,
        id: BrokerId,
        epoch: i64,
    ) -> Result<&BrokerRecord, Rejection> {
        let b = self
            .brokers
            .get(&id)
            .ok_or(Rejection::UnknownBroker { broker: id })?;
        if b.epoch != epoch {
            return Err(Rejection::StaleBrokerEpoch {
                broker: id,
                current: b.epoch,
                requested: epoch,
            });
        }
        Ok(b)
    }

    fn fence_broker(&mut self, id: BrokerId, epoch: i64) -> CommandResult {
        self.check_broker_epoch(id, epoch)?;
        if let Some(b) = self.brokers.get_mut(&id) {
            b.fenced = true;
        }
        self.reconcile_replicas_of(id, Some(id), None);
        Ok(CommandOutput::Broker(self.brokers[&id].clone()))
    }

    fn unfence_broker(&mut self, id: BrokerId, epoch: i64) -> CommandResult {
        self.check_broker_epoch(id, epoch)?;
        if let Some(b) = self.brokers.get_mut(&id) {
            b.fenced = false;
        }
        self.reconcile_replicas_of(id, None, None);
        Ok(CommandOutput::Broker(self.brokers[&id].clone()))
    }

    /// New partitions: the ISR is every unfenced replica (all are empty, so all are in
    /// sync), the leader its first.
    fn new_partitions(
        &self,
        first_index: usize,
        assignment: &[Vec<BrokerId>],
    ) -> Result<Vec<PartitionRecord>, Rejection> {
        assignment
            .iter()
            .enumerate()
            .map(|(i, replicas)| {
                let isr: Vec<BrokerId> = replicas
                    .iter()
                    .copied()
                    .filter(|r| self.is_live(*r))
                    .collect();
                let Some(&leader) = isr.first() else {
                    return Err(Rejection::InvalidReplicationFactor {
                        factor: i32::try_from(replicas.len()).unwrap_or(i32::MAX),
                        available: 0,
                    });
                };
                Ok(PartitionRecord {
                    partition: i32::try_from(first_index + i).unwrap_or(i32::MAX),
                    replicas: replicas.clone(),
                    isr,
                    leader,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                })
            })
            .collect()
    }

    fn create_topic(&mut self, t: &NewTopic) -> CommandResult {
        if let Some(existing) = self.topics.get(&t.name) {
            // The same request again (a client retrying after a lost answer or a leader
            // change) finds its own topic: the topic exists once.
            if existing.id == t.id {
                return Ok(CommandOutput::Topic(TopicRecord::clone(existing)));
            }
            return Err(Rejection::TopicAlreadyExists {
                name: t.name.clone(),
            });
        }
        validate_topic_name(&t.name)?;
        if t.id.is_zero() {
            return Err(Rejection::InvalidRequest {
                reason: "the topic id is zero".into(),
            });
        }
        if let Some(other) = self.topic_by_id(t.id) {
            return Err(Rejection::TopicIdInUse {
                id: t.id,
                existing: other.name.clone(),
            });
        }
        validate_configs(&t.configs)?;
        self.validate_assignment(&t.assignment)?;
        let mut partitions = self.new_partitions(0, &t.assignment)?;
        for p in &mut partitions {
            p.leader_epoch = p.leader_epoch.max(t.initial_leader_epoch);
        }
        let record = TopicRecord {
            id: t.id,
            name: t.name.clone(),
            configs: t.configs.clone(),
            partitions,
            storage_cluster_id: t.storage_cluster_id.clone(),
        };
        self.topics.insert(t.name.clone(), Arc::new(record.clone()));
        Ok(CommandOutput::Topic(record))
    }

    fn create_partitions(
        &mut self,
        name: &str,
        count: i32,
        assignment: &[Vec<BrokerId>],
    ) -> CommandResult {
        let t = self
            .topics
            .get(name)
            .ok_or_else(|| Rejection::UnknownTopic {
                name: name.to_string(),
            })?;
        let current = t.partitions.len();
        let wanted = usize::try_from(count).unwrap_or(0);
        if wanted <= current {
            return Err(Rejection::InvalidPartitions {
                count,
                reason: format!("topic '{name}' has {current} partitions; the count can only grow"),
            });
        }
        if current + assignment.len() != wanted {
            return Err(Rejection::InvalidReplicaAssignment {
                reason: format!(
                    "{} replica lists for {} new partitions",
                    assignment.len(),
                    wanted - current
                ),
            });
        }
        self.validate_assignment(assignment)?;
        let new = self.new_partitions(current, assignment)?;
        let t = Arc::make_mut(
            self.topics
                .get_mut(name)
                .expect("checked above, under the same &mut"),
        );
        t.partitions.extend(new);
        Ok(CommandOutput::Topic(t.clone()))
    }

    fn set_configs(&mut self, name: &str, configs: &BTreeMap<String, String>) -> CommandResult {
        validate_configs(configs)?;
        let live = self.liveness();
        let t = self
            .topics
            .get_mut(name)
            .map(Arc::make_mut)
            .ok_or_else(|| Rejection::UnknownTopic {
                name: name.to_string(),
            })?;
        t.configs = configs.clone();
        // Turning unclean election on elects leaders for offline partitions at once, as
        // Kafka does when the config changes.
        if t.unclean_leader_election() {
            let is_live = |id: BrokerId| live.get(&id).copied().unwrap_or(false);
            for p in t.partitions.iter_mut().filter(|p| p.is_offline()) {
                reconcile_partition(p, &is_live, true, None, None);
            }
        }
        Ok(CommandOutput::Topic(t.clone()))
    }
}
