//! The records the metadata is made of (brokers, listeners, topics, partitions) and
//! [`ClusterMetadata`] itself, with the reads every caller makes of it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use strata_proto::{TopicConfig, TopicId};

use super::apply::FIRST_PRODUCER_ID;
use crate::security::SecurityMetadata;
use crate::types::{BrokerId, NodeId};

/// The leader of a partition that has none (offline).
pub const NO_LEADER: BrokerId = -1;

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub id: BrokerId,
    /// The inter-broker listener's address: where other brokers fetch from it.
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Every listener's advertised address. A client is told the addresses of the
    /// listener it connected to (Kafka's advertised.listeners). Empty in records
    /// written before listeners existed: then `host:port` serves every client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<Endpoint>,
    /// Changes on every registration (the raft log index of the registration, as KRaft's
    /// broker epoch is the offset of the registration record). Heartbeats and
    /// AlterPartition carry it, so a restarted broker's old incarnation is recognised.
    pub epoch: i64,
    /// A fenced broker leads nothing and is in no ISR (but the last member of one).
    pub fenced: bool,
}

/// One advertised listener of a broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The listener's name (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL).
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl BrokerRecord {
    /// Where a client of listener `name` reaches this broker: `None` if the broker has
    /// no such listener (Kafka leaves it out of that listener's metadata).
    pub fn endpoint(&self, name: &str) -> Option<(&str, u16)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.host.as_str(), e.port))
    }
}

/// A partition's replicas, leader and ISR.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub partition: i32,
    /// The assigned replicas; the first is the preferred leader.
    pub replicas: Vec<BrokerId>,
    /// The in-sync replicas.
    pub isr: Vec<BrokerId>,
    /// The leader, or [`NO_LEADER`].
    pub leader: BrokerId,
    pub leader_epoch: i32,
    /// Bumped on every change of leader, ISR or replicas (KIP-497).
    pub partition_epoch: i32,
    /// Replicas a reassignment is adding (KIP-455): already in `replicas`, catching up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<BrokerId>,
    /// Replicas a reassignment removes once every target replica is in sync: still in
    /// `replicas` until then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<BrokerId>,
}

impl PartitionRecord {
    /// The preferred leader: the first replica.
    pub fn preferred_leader(&self) -> BrokerId {
        self.replicas.first().copied().unwrap_or(NO_LEADER)
    }

    pub fn is_offline(&self) -> bool {
        self.leader == NO_LEADER
    }

    pub fn is_under_replicated(&self) -> bool {
        self.isr.len() < self.replicas.len()
    }

    /// Whether a reassignment is under way.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas the partition is moving to (all of them when none is moving).
    pub fn target_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }

    /// The replicas it had before the reassignment began.
    pub fn original_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.adding_replicas.contains(r))
            .collect()
    }
}

/// A topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub id: TopicId,
    pub name: String,
    /// Only the keys set on the topic; defaults are not stored.
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionRecord>,
    /// The cluster id under which the topic's objects live in the bucket, when it is not
    /// this cluster's (a topic restored from another cluster's bucket).
    #[serde(default)]
    pub storage_cluster_id: Option<String>,
}

impl TopicRecord {
    pub fn partition(&self, index: i32) -> Option<&PartitionRecord> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }

    /// The topic's resolved configuration. Stored configs were validated when set.
    pub fn config(&self) -> TopicConfig {
        TopicConfig::resolve(&self.configs).unwrap_or_default()
    }

    pub fn unclean_leader_election(&self) -> bool {
        self.config().unclean_leader_election_enable
    }
}

/// The whole cluster metadata: what voters replicate, and what brokers long-poll.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMetadata {
    /// Generated when the quorum is first bootstrapped, then never changes.
    pub cluster_id: String,
    /// Increases with every applied command that succeeded.
    pub version: u64,
    /// The raft leader when this copy was served (not replicated; `None` in the state
    /// machine itself).
    #[serde(default)]
    pub controller_leader: Option<NodeId>,
    pub brokers: BTreeMap<BrokerId, BrokerRecord>,
    /// Topics by name. Shared between copies: a change copies the topics it touches
    /// (`Arc::make_mut`), not every partition of the cluster.
    pub topics: BTreeMap<String, Arc<TopicRecord>>,
    /// The next producer id AllocateProducerIds hands out. Ids are never reused.
    pub next_producer_id: i64,
    /// SCRAM credentials (and, as they are built, ACLs and quotas).
    #[serde(default, skip_serializing_if = "SecurityMetadata::is_empty")]
    pub security: SecurityMetadata,
    /// Dynamic broker configs (Kafka's DYNAMIC_BROKER_CONFIG and
    /// DYNAMIC_DEFAULT_BROKER_CONFIG): by broker id as text, `""` for the cluster-wide
    /// default. Only the keys of [`DYNAMIC_BROKER_CONFIGS`](super::DYNAMIC_BROKER_CONFIGS).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Topic names by id, derived from `topics`.
    #[serde(skip)]
    pub(super) topic_ids: TopicIds,
}

/// Topic names by id: built on first use, dropped by every command that adds or removes
/// a topic. Derived data: neither serialized nor compared.
#[derive(Clone, Debug, Default)]
pub(super) struct TopicIds(OnceLock<HashMap<TopicId, String>>);

impl PartialEq for TopicIds {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TopicIds {}

impl Default for ClusterMetadata {
    fn default() -> Self {
        ClusterMetadata {
            cluster_id: String::new(),
            version: 0,
            controller_leader: None,
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            next_producer_id: FIRST_PRODUCER_ID,
            security: SecurityMetadata::default(),
            broker_configs: BTreeMap::new(),
            topic_ids: TopicIds::default(),
        }
    }
}

impl ClusterMetadata {
    pub fn topic(&self, name: &str) -> Option<&TopicRecord> {
        self.topics.get(name).map(Arc::as_ref)
    }

    /// The topic with id `id` (through an index built on first use).
    pub fn topic_by_id(&self, id: TopicId) -> Option<&TopicRecord> {
        let ids = self.topic_ids.0.get_or_init(|| {
            self.topics
                .values()
                .map(|t| (t.id, t.name.clone()))
                .collect()
        });
        let t = self.topics.get(ids.get(&id)?)?;
        (t.id == id).then_some(&**t)
    }

    pub(super) fn topic_by_id_mut(&mut self, id: TopicId) -> Option<&mut TopicRecord> {
        let name = self.topic_by_id(id)?.name.clone();
        self.topics.get_mut(&name).map(Arc::make_mut)
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRecord> {
        self.topic(topic).and_then(|t| t.partition(partition))
    }

    pub fn broker(&self, id: BrokerId) -> Option<&BrokerRecord> {
        self.brokers.get(&id)
    }

    /// A dynamic broker config of broker `id`: its own value, else the cluster-wide one.
    pub fn broker_config(&self, id: BrokerId, key: &str) -> Option<&str> {
        self.broker_configs
            .get(&id.to_string())
            .and_then(|c| c.get(key))
            .or_else(|| self.broker_configs.get("").and_then(|c| c.get(key)))
            .map(String::as_str)
    }

    /// Whether the broker is registered and unfenced.
    pub fn is_live(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// Every registered broker and whether it is unfenced: a copy the partition changes
    /// below consult while they hold `&mut` on a topic.
    pub(super) fn liveness(&self) -> BTreeMap<BrokerId, bool> {
        self.brokers
            .iter()
            .map(|(id, b)| (*id, !b.fenced))
            .collect()
    }

    /// Registered, unfenced brokers, by id.
    pub fn live_brokers(&self) -> Vec<BrokerId> {
        self.brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| b.id)
            .collect()
    }

    /// Partitions without a leader.
    pub fn offline_partitions(&self) -> Vec<(String, i32)> {
        self.partitions()
            .filter(|(_, p)| p.is_offline())
            .map(|(t, p)| (t.name.clone(), p.partition))
            .collect()
    }

    /// Every partition with its topic.
    pub fn partitions(&self) -> impl Iterator<Item = (&TopicRecord, &PartitionRecord)> {
        self.topics
            .values()
            .flat_map(|t| t.partitions.iter().map(move |p| (&**t, p)))
    }
}
