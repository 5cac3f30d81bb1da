//! The replicated metadata state and the commands that change it.
//!
//! Everything here is pure: [`ClusterMetadata::apply`] is a function of the state, the
//! command and the command's raft log index, so every voter that applies the same log
//! holds the same state. Randomness (topic ids, the cluster id) and time (liveness) are
//! decided by the leader before it proposes a command, and travel inside it.
//!
//! Partition changes follow Kafka's KRaft controller (ReplicationControlManager and
//! PartitionChangeBuilder):
//! * every leadership change bumps the leader epoch; every change of leader or ISR bumps
//!   the partition epoch (KIP-497's version of the partition state);
//! * a fenced broker leaves every ISR, except that the last ISR member stays (it holds
//!   every acknowledged record, so it is the one to elect when it returns), and loses
//!   every leadership;
//! * leaders are elected from the ISR, in replica order, among unfenced brokers; with
//!   unclean.leader.election.enable=true and no such member, from any unfenced replica
//!   (whose ISR becomes itself alone); otherwise the partition has no leader (offline).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use strata_proto::{TopicConfig, TopicId};

use crate::error::Rejection;
use crate::security::{SecurityChange, SecurityMetadata, SecurityOutcome};
use crate::types::{BrokerId, NodeId};

/// The leader of a partition that has none (offline).
pub const NO_LEADER: BrokerId = -1;

/// The first producer id handed out. Above the ids of the file metadata store this
/// replaces, which also started at 1000.
const FIRST_PRODUCER_ID: i64 = 1000;

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
    /// default. Only the keys of [`DYNAMIC_BROKER_CONFIGS`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Topic names by id, derived from `topics`.
    #[serde(skip)]
    topic_ids: TopicIds,
}

/// Topic names by id: built on first use, dropped by every command that adds or removes
/// a topic. Derived data: neither serialized nor compared.
#[derive(Clone, Debug, Default)]
struct TopicIds(OnceLock<HashMap<TopicId, String>>);

impl PartialEq for TopicIds {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TopicIds {}

/// The metadata changes between two versions: the commands that were accepted, in log
/// order, with their raft log indexes. What a broker that has version `from_version`
/// applies (with [`ClusterMetadata::apply_delta`]) to reach `to_version`, instead of
/// receiving the whole metadata again (KRaft's metadata records play this part).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataDelta {
    pub from_version: u64,
    pub to_version: u64,
    /// The raft leader when this delta was served.
    pub controller_leader: Option<NodeId>,
    /// `(log index, command)`: one per version in `from_version + 1 ..= to_version`.
    pub commands: Vec<(u64, Command)>,
}

/// What a long poll for metadata brings: the whole metadata, or the changes since the
/// asker's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataUpdate {
    Full(Box<ClusterMetadata>),
    Delta(MetadataDelta),
}

/// Why a delta could not be applied: the copy it was applied to is not the one it was
/// made for. The broker then asks for the whole metadata.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    #[error("the delta starts at version {delta} but this copy is at version {have}")]
    WrongBase { have: u64, delta: u64 },
    #[error(
        "the command at log index {index} was rejected here ({rejection}) but accepted by the controller"
    )]
    Diverged { index: u64, rejection: Rejection },
    #[error("the delta ends at version {delta} but applying it reached {reached}")]
    WrongEnd { reached: u64, delta: u64 },
}

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

/// A topic as a command carries it: the leader has chosen its id and replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTopic {
    pub id: TopicId,
    pub name: String,
    pub configs: BTreeMap<String, String>,
    /// One replica list per partition; the first replica of each is its preferred leader.
    pub assignment: Vec<Vec<BrokerId>>,
    pub storage_cluster_id: Option<String>,
    /// The partitions' first leader epoch (restored topics start above their history).
    #[serde(default)]
    pub initial_leader_epoch: i32,
}

/// Kafka's AlterPartition (KIP-497): the partition leader asks to change the ISR.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartitionRequest {
    /// The requesting broker (must be the partition leader).
    pub broker: BrokerId,
    pub broker_epoch: i64,
    pub topic_id: TopicId,
    pub partition: i32,
    /// The leader epoch the leader believes current.
    pub leader_epoch: i32,
    /// The partition epoch the leader last saw.
    pub partition_epoch: i32,
    pub new_isr: Vec<BrokerId>,
}

/// The kinds of Kafka's ElectLeaders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionType {
    /// Move leadership to the first replica, if it is in the ISR and unfenced.
    Preferred,
    /// Elect a leader for a partition that has none, from any unfenced replica if the
    /// ISR has no live member (may lose acknowledged records).
    Unclean,
}

/// Why an election did not happen, with Kafka's code for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionError {
    UnknownPartition,
    /// ELECTION_NOT_NEEDED.
    NotNeeded,
    /// PREFERRED_LEADER_NOT_AVAILABLE.
    PreferredLeaderNotAvailable,
    /// ELIGIBLE_LEADERS_NOT_AVAILABLE.
    EligibleLeadersNotAvailable,
}

impl ElectionError {
    pub fn error_code(&self) -> strata_proto::ErrorCode {
        use strata_proto::ErrorCode;
        match self {
            ElectionError::UnknownPartition => ErrorCode::UnknownTopicOrPartition,
            ElectionError::NotNeeded => ErrorCode::ElectionNotNeeded,
            ElectionError::PreferredLeaderNotAvailable => ErrorCode::PreferredLeaderNotAvailable,
            ElectionError::EligibleLeadersNotAvailable => ErrorCode::EligibleLeadersNotAvailable,
        }
    }
}

/// The result of an election for one partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionOutcome {
    pub topic: String,
    pub partition: i32,
    pub result: Result<PartitionRecord, ElectionError>,
}

/// A change to the metadata: the raft log's entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Sets the cluster id if none is set (the first leader proposes it).
    InitCluster {
        cluster_id: String,
    },
    /// Registers a broker, or re-registers a restarted one, with a new broker epoch.
    RegisterBroker {
        broker: BrokerId,
        host: String,
        port: u16,
        rack: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        listeners: Vec<Endpoint>,
    },
    FenceBroker {
        broker: BrokerId,
        epoch: i64,
    },
    UnfenceBroker {
        broker: BrokerId,
        epoch: i64,
    },
    CreateTopic(NewTopic),
    /// A topic with a given id (recovery from object storage).
    RestoreTopic(NewTopic),
    DeleteTopic {
        name: String,
    },
    /// Grows a topic to `count` partitions; `assignment` lists the new partitions' replicas.
    CreatePartitions {
        name: String,
        count: i32,
        assignment: Vec<Vec<BrokerId>>,
    },
    /// Replaces a topic's config overrides.
    SetTopicConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    AlterPartition(AlterPartitionRequest),
    ElectLeaders {
        election: ElectionType,
        partitions: Vec<(String, i32)>,
    },
    AllocateProducerIds {
        count: i64,
    },
    /// Credentials (KIP-554), and as they are built ACLs and quotas.
    AlterSecurity(SecurityChange),
    /// KIP-455's AlterPartitionReassignments: each partition moves to the target replicas
    /// (`Some`), or its reassignment is cancelled (`None`).
    AlterReassignments {
        reassignments: Vec<Reassignment>,
    },
    /// Removes a broker's registration for good (Kafka's UnregisterBroker, KIP-500): only
    /// a fenced broker (its process stopped) that holds no replica. A process started
    /// again with the id registers afresh, as a new and empty broker.
    UnregisterBroker {
        broker: BrokerId,
    },
    /// Replaces the dynamic configs of one broker (`resource` its id as text) or, with
    /// `""`, the cluster-wide default.
    SetBrokerConfigs {
        resource: String,
        configs: BTreeMap<String, String>,
    },
}

/// The broker configs that can change while brokers run (the rest are `strata serve`
/// flags): the replication throttle rates in bytes per second, as Kafka's.
pub const DYNAMIC_BROKER_CONFIGS: &[&str] = &[
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
];

/// Checks dynamic broker configs: known keys, and rates that are whole numbers of bytes
/// per second.
pub fn validate_broker_configs(
    resource: &str,
    configs: &BTreeMap<String, String>,
) -> Result<(), Rejection> {
    if !resource.is_empty() && !resource.parse::<BrokerId>().is_ok_and(|id| id >= 0) {
        return Err(Rejection::InvalidConfig {
            reason: format!("'{resource}' is not a broker id (or \"\" for every broker)"),
        });
    }
    for (k, v) in configs {
        if !DYNAMIC_BROKER_CONFIGS.contains(&k.as_str()) {
            return Err(Rejection::InvalidConfig {
                reason: format!(
                    "broker config '{k}' cannot change while the broker runs (the dynamic ones \
                     are {}); pass it to `strata serve`",
                    DYNAMIC_BROKER_CONFIGS.join(", ")
                ),
            });
        }
        if v.parse::<u64>().is_err() {
            return Err(Rejection::InvalidConfig {
                reason: format!("{k} is a rate in bytes per second, not '{v}'"),
            });
        }
    }
    Ok(())
}

/// One partition's entry in [`Command::AlterReassignments`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    /// The replicas to move to, the first the preferred leader; `None` cancels.
    pub target: Option<Vec<BrokerId>>,
}

/// What became of one partition's entry in [`Command::AlterReassignments`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReassignmentOutcome {
    pub topic: String,
    pub partition: i32,
    /// The partition after the change.
    pub result: Result<PartitionRecord, Rejection>,
}

/// What an applied command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandOutput {
    /// Nothing to report (also the result of raft's own blank and membership entries).
    Done,
    Broker(BrokerRecord),
    Topic(TopicRecord),
    Partition(PartitionRecord),
    ProducerIds {
        first: i64,
        count: i64,
    },
    Elections(Vec<ElectionOutcome>),
    Security(SecurityOutcome),
    Reassignments(Vec<ReassignmentOutcome>),
}

/// The state machine's answer to one log entry.
pub type CommandResult = Result<CommandOutput, Rejection>;

/// Kafka's rules for topic names (Topic.validate): 1..=249 characters of
/// `[a-zA-Z0-9._-]`, and not "." or "..". The same rules as the broker's metadata module.
pub fn validate_topic_name(name: &str) -> Result<(), Rejection> {
    let bad = |reason: &str| {
        Err(Rejection::InvalidTopicName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > 249 {
        return bad("it is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Validates topic config overrides with strata-proto's rules.
pub fn validate_configs(configs: &BTreeMap<String, String>) -> Result<TopicConfig, Rejection> {
    TopicConfig::resolve(configs).map_err(|e| Rejection::InvalidConfig {
        reason: e.to_string(),
    })
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

    fn topic_by_id_mut(&mut self, id: TopicId) -> Option<&mut TopicRecord> {
        let name = self.topic_by_id(id)?.name.clone();
        self.topics.get_mut(&name).map(Arc::make_mut)
    }

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
    fn liveness(&self) -> BTreeMap<BrokerId, bool> {
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

    fn check_broker_epoch(&self, id: BrokerId, epoch: i64) -> Result<&BrokerRecord, Rejection> {
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

    /// Re-runs leader election on every partition that has `broker` as a replica.
    fn reconcile_replicas_of(
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

    fn validate_assignment(&self, assignment: &[Vec<BrokerId>]) -> Result<(), Rejection> {
        let bad = |reason: String| Err(Rejection::InvalidReplicaAssignment { reason });
        let Some(first) = assignment.first() else {
            return bad("no partitions".into());
        };
        for (i, replicas) in assignment.iter().enumerate() {
            if replicas.is_empty() {
                return bad(format!("partition {i} has no replicas"));
            }
            if replicas.len() != first.len() {
                return bad(format!(
                    "partition {i} has {} replicas, partition 0 has {}",
                    replicas.len(),
                    first.len()
                ));
            }
            for (j, r) in replicas.iter().enumerate() {
                if replicas[..j].contains(r) {
                    return bad(format!("partition {i} names broker {r} twice"));
                }
                if !self.brokers.contains_key(r) {
                    return bad(format!("partition {i} names unregistered broker {r}"));
                }
            }
        }
        Ok(())
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

    fn alter_partition(&mut self, req: &AlterPartitionRequest) -> CommandResult {
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

    /// KIP-455, as KRaft's ReplicationControlManager carries it out: a new target makes
    /// `replicas` the target followed by the current replicas it drops (`removing`), with
    /// the ones it adds in `adding`; the leader adds those to the ISR as they catch up,
    /// and the reassignment completes (replicas = target, leadership moved if the leader
    /// leaves) once every target replica is in sync. A new target for a partition already
    /// moving starts from its replicas as they are. Cancelling goes back to the replicas
    /// it had (the adding ones leave), as long as one of those is still in sync.
    fn alter_reassignments(&mut self, reassignments: &[Reassignment]) -> CommandOutput {
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

    fn elect_leaders(&mut self, election: ElectionType, which: &[(String, i32)]) -> CommandOutput {
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

/// A reassignment's target: replicas named once each, every one registered.
fn validate_target(
    target: &[BrokerId],
    registered: &impl Fn(BrokerId) -> bool,
) -> Result<(), Rejection> {
    let bad = |reason: String| Err(Rejection::InvalidReplicaAssignment { reason });
    if target.is_empty() {
        return bad("the target replica list is empty".into());
    }
    for (i, r) in target.iter().enumerate() {
        if target[..i].contains(r) {
            return bad(format!("the target names broker {r} twice"));
        }
        if !registered(*r) {
            return bad(format!(
                "the target names broker {r}, which is not registered"
            ));
        }
    }
    Ok(())
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
fn complete_reassignment(p: &mut PartitionRecord, is_live: &impl Fn(BrokerId) -> bool) -> bool {
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
fn reconcile_partition(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn register(m: &mut ClusterMetadata, id: BrokerId, index: u64) -> i64 {
        match m
            .apply(
                &Command::RegisterBroker {
                    broker: id,
                    host: "127.0.0.1".into(),
                    port: 9092,
                    rack: None,
                    listeners: vec![],
                },
                index,
            )
            .unwrap()
        {
            CommandOutput::Broker(b) => b.epoch,
            o => panic!("{o:?}"),
        }
    }

    fn topic(
        m: &mut ClusterMetadata,
        name: &str,
        assignment: Vec<Vec<BrokerId>>,
        configs: &[(&str, &str)],
    ) -> TopicRecord {
        let cmd = Command::CreateTopic(NewTopic {
            id: TopicId::random(),
            name: name.into(),
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            assignment,
            storage_cluster_id: None,
            initial_leader_epoch: 0,
        });
        match m.apply(&cmd, 0).unwrap() {
            CommandOutput::Topic(t) => t,
            o => panic!("{o:?}"),
        }
    }

    fn three_brokers() -> (ClusterMetadata, [i64; 3]) {
        let mut m = ClusterMetadata::default();
        let e = [
            register(&mut m, 1, 1),
            register(&mut m, 2, 2),
            register(&mut m, 3, 3),
        ];
        (m, e)
    }

    #[test]
    fn fencing_the_leader_elects_from_the_isr_and_shrinks_it() {
        let (mut m, e) = three_brokers();
        topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
        let v = m.version;
        m.apply(
            &Command::FenceBroker {
                broker: 1,
                epoch: e[0],
            },
            10,
        )
        .unwrap();
        assert_eq!(m.version, v + 1);
        let p = m.partition("t", 0).unwrap();
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1));
        // Fencing a follower shrinks the ISR without a leader change.
        m.apply(
            &Command::FenceBroker {
                broker: 3,
                epoch: e[2],
            },
            11,
        )
        .unwrap();
        let p = m.partition("t", 0).unwrap();
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
        // The last ISR member stays in the ISR; the partition goes offline.
        m.apply(
            &Command::FenceBroker {
                broker: 2,
                epoch: e[1],
            },
            12,
        )
        .unwrap();
        let p = m.partition("t", 0).unwrap();
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![2]));
        assert_eq!(p.leader_epoch, 2);
        // An out-of-sync replica coming back does not make it a leader (clean only)...
        m.apply(
            &Command::UnfenceBroker {
                broker: 1,
                epoch: e[0],
            },
            13,
        )
        .unwrap();
        assert!(m.partition("t", 0).unwrap().is_offline());
        // ...the last ISR member does.
        m.apply(
            &Command::UnfenceBroker {
                broker: 2,
                epoch: e[1],
            },
            14,
        )
        .unwrap();
        let p = m.partition("t", 0).unwrap();
        assert_eq!((p.leader, p.isr.clone(), p.leader_epoch), (2, vec![2], 3));
    }

    #[test]
    fn unclean_election_only_when_the_topic_enables_it() {
        let (mut m, e) = three_brokers();
        topic(&mut m, "clean", vec![vec![1, 2]], &[]);
        topic(
            &mut m,
            "dirty",
            vec![vec![1, 2]],
            &[("unclean.leader.election.enable", "true")],
        );
        for t in ["clean", "dirty"] {
            let p = m.partition(t, 0).unwrap().clone();
            let id = m.topic(t).unwrap().id;
            // The leader drops 2 from the ISR (it lags).
            m.apply(
                &Command::AlterPartition(AlterPartitionRequest {
                    broker: 1,
                    broker_epoch: e[0],
                    topic_id: id,
                    partition: 0,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    new_isr: vec![1],
                }),
                20,
            )
            .unwrap();
        }
        m.apply(
            &Command::FenceBroker {
                broker: 1,
                epoch: e[0],
            },
            21,
        )
        .unwrap();
        assert!(m.partition("clean", 0).unwrap().is_offline());
        let dirty = m.partition("dirty", 0).unwrap();
        assert_eq!((dirty.leader, dirty.isr.clone()), (2, vec![2]));
        // Enabling it later elects at once.
        m.apply(
            &Command::SetTopicConfigs {
                name: "clean".into(),
                configs: BTreeMap::from([("unclean.leader.election.enable".into(), "true".into())]),
            },
            22,
        )
        .unwrap();
        assert_eq!(m.partition("clean", 0).unwrap().leader, 2);
    }

    fn reassign(
        m: &mut ClusterMetadata,
        partition: i32,
        target: Option<Vec<BrokerId>>,
    ) -> Result<PartitionRecord, Rejection> {
        let cmd = Command::AlterReassignments {
            reassignments: vec![Reassignment {
                topic: "t".into(),
                partition,
                target,
            }],
        };
        match m.apply(&cmd, 50).unwrap() {
            CommandOutput::Reassignments(mut o) => o.remove(0).result,
            o => panic!("{o:?}"),
        }
    }

    /// The leader of t-0 asks for `isr` (with the epochs it last saw).
    fn grow_isr(m: &mut ClusterMetadata, epochs: &[i64], isr: Vec<BrokerId>) -> PartitionRecord {
        let p = m.partition("t", 0).unwrap().clone();
        let cmd = Command::AlterPartition(AlterPartitionRequest {
            broker: p.leader,
            broker_epoch: epochs[(p.leader - 1) as usize],
            topic_id: m.topic("t").unwrap().id,
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: isr,
        });
        match m.apply(&cmd, 60).unwrap() {
            CommandOutput::Partition(p) => p,
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn a_reassignment_adds_then_completes_when_the_target_is_in_sync() {
        let (mut m, e) = three_brokers();
        let e4 = register(&mut m, 4, 4);
        let epochs = [e[0], e[1], e[2], e4];
        topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
        // Move 1's replica to 4: 4 joins, 1 is removing, 1 still leads.
        let p = reassign(&mut m, 0, Some(vec![4, 2, 3])).unwrap();
        assert_eq!(p.replicas, [4, 2, 3, 1]);
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (vec![4], vec![1])
        );
        assert_eq!(
            (p.leader, p.isr.clone(), p.partition_epoch),
            (1, vec![1, 2, 3], 1)
        );
        assert!(p.is_reassigning());
        // 4 catches up: the leader adds it, and the reassignment completes. 1 leaves and
        // gives up leadership to the first target replica in sync.
        let p = grow_isr(&mut m, &epochs, vec![1, 2, 3, 4]);
        assert_eq!(p.replicas, [4, 2, 3]);
        assert!(!p.is_reassigning());
        assert_eq!((p.leader, p.leader_epoch), (4, 1));
        let mut isr = p.isr.clone();
        isr.sort();
        assert_eq!(isr, [2, 3, 4]);
        // Cancelling now: nothing to cancel.
        assert!(matches!(
            reassign(&mut m, 0, None),
            Err(Rejection::NoReassignmentInProgress { .. })
        ));
    }

    #[test]
    fn a_reassignment_within_the_isr_completes_at_once_and_one_can_be_cancelled() {
        let (mut m, e) = three_brokers();
        let e4 = register(&mut m, 4, 4);
        topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
        // Dropping a replica (all the target in sync): done at once, leader kept.
        let p = reassign(&mut m, 0, Some(vec![2, 1])).unwrap();
        assert_eq!(
            (p.replicas.clone(), p.leader, p.leader_epoch),
            (vec![2, 1], 1, 0)
        );
        assert!(!p.is_reassigning());
        // Moving to 4 and 3 (not a replica now) then cancelling: back to [2, 1], the ISR
        // without the adding replicas, the leader kept.
        let p = reassign(&mut m, 0, Some(vec![4, 3])).unwrap();
        assert_eq!(p.replicas, [4, 3, 2, 1]);
        assert_eq!(p.adding_replicas, [4, 3]);
        let p = reassign(&mut m, 0, None).unwrap();
        assert_eq!((p.replicas.clone(), p.leader), (vec![2, 1], 1));
        assert!(!p.is_reassigning());
        // A target naming an unknown broker, or one twice, is refused and changes nothing.
        let before = m.partition("t", 0).unwrap().clone();
        for bad in [vec![1, 9], vec![2, 2], vec![]] {
            assert!(matches!(
                reassign(&mut m, 0, Some(bad)),
                Err(Rejection::InvalidReplicaAssignment { .. })
            ));
        }
        assert!(matches!(
            reassign(&mut m, 7, Some(vec![1])),
            Err(Rejection::UnknownPartition { .. })
        ));
        assert_eq!(m.partition("t", 0).unwrap(), &before);
        let _ = (e, e4);
    }

    #[test]
    fn a_new_target_replaces_a_reassignment_under_way() {
        let (mut m, e) = three_brokers();
        let e4 = register(&mut m, 4, 4);
        let e5 = register(&mut m, 5, 5);
        let epochs = [e[0], e[1], e[2], e4, e5];
        topic(&mut m, "t", vec![vec![1, 2]], &[]);
        reassign(&mut m, 0, Some(vec![1, 4])).unwrap();
        // Before 4 catches up, the operator asks for [1, 5]: 4 goes, 5 comes.
        let p = reassign(&mut m, 0, Some(vec![1, 5])).unwrap();
        assert_eq!(p.replicas, [1, 5, 4, 2]);
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (vec![5], vec![4, 2])
        );
        let p = grow_isr(&mut m, &epochs, vec![1, 2, 5]);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![1, 5], vec![1, 5], 1)
        );
    }

    #[test]
    fn only_a_fenced_broker_without_replicas_is_unregistered() {
        let (mut m, e) = three_brokers();
        let e4 = register(&mut m, 4, 4);
        topic(&mut m, "t", vec![vec![1, 2, 4]], &[]);
        let unregister =
            |m: &mut ClusterMetadata| m.apply(&Command::UnregisterBroker { broker: 4 }, 70);
        // Running: refused.
        assert!(matches!(
            unregister(&mut m),
            Err(Rejection::InvalidRequest { .. })
        ));
        m.apply(
            &Command::FenceBroker {
                broker: 4,
                epoch: e4,
            },
            71,
        )
        .unwrap();
        // Fenced but holding a replica of t-0: refused.
        assert!(matches!(
            unregister(&mut m),
            Err(Rejection::InvalidRequest { .. })
        ));
        reassign(&mut m, 0, Some(vec![1, 2, 3])).unwrap();
        let p = m.partition("t", 0).unwrap();
        assert!(!p.replicas.contains(&4) || p.removing_replicas.contains(&4));
        // 3 catches up: the move completes and 4 holds nothing.
        grow_isr(&mut m, &[e[0], e[1], e[2], e4], vec![1, 2, 3]);
        unregister(&mut m).unwrap();
        assert!(m.broker(4).is_none());
        assert!(matches!(
            unregister(&mut m),
            Err(Rejection::UnknownBroker { .. })
        ));
    }

    #[test]
    fn alter_partition_checks_epochs_leader_and_isr() {
        let (mut m, e) = three_brokers();
        let t = topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
        let req = |isr: Vec<BrokerId>, le: i32, pe: i32| {
            Command::AlterPartition(AlterPartitionRequest {
                broker: 1,
                broker_epoch: e[0],
                topic_id: t.id,
                partition: 0,
                leader_epoch: le,
                partition_epoch: pe,
                new_isr: isr,
            })
        };
        let out = m.apply(&req(vec![1, 2], 0, 0), 30).unwrap();
        let CommandOutput::Partition(p) = out else {
            panic!()
        };
        assert_eq!((p.isr.clone(), p.partition_epoch), (vec![1, 2], 1));
        // The same change again with the old epoch: already applied, answered as done.
        assert_eq!(
            m.apply(&req(vec![2, 1], 0, 0), 31).unwrap(),
            CommandOutput::Partition(p.clone())
        );
        // A different change with a stale partition epoch is refused.
        assert!(matches!(
            m.apply(&req(vec![1, 2, 3], 0, 0), 32),
            Err(Rejection::InvalidUpdateVersion {
                current: 1,
                requested: 0,
                ..
            })
        ));
        assert!(matches!(
            m.apply(&req(vec![1, 2, 3], 1, 1), 33),
            Err(Rejection::FencedLeaderEpoch {
                current: 0,
                requested: 1,
                ..
            })
        ));
        assert!(matches!(
            m.apply(&req(vec![2, 3], 0, 1), 34),
            Err(Rejection::InvalidRequest { .. })
        ));
        assert!(matches!(
            m.apply(&req(vec![1, 4], 0, 1), 35),
            Err(Rejection::IneligibleReplica { replica: 4, .. })
        ));
        m.apply(
            &Command::FenceBroker {
                broker: 3,
                epoch: e[2],
            },
            36,
        )
        .unwrap();
        let pe = m.partition("t", 0).unwrap().partition_epoch;
        assert!(matches!(
            m.apply(&req(vec![1, 2, 3], 0, pe), 37),
            Err(Rejection::IneligibleReplica { replica: 3, .. })
        ));
        // From a broker that is not the leader, or with an old broker epoch.
        let mut not_leader = req(vec![1, 2], 0, pe);
        if let Command::AlterPartition(r) = &mut not_leader {
            r.broker = 2;
            r.broker_epoch = e[1];
        }
        assert!(matches!(
            m.apply(&not_leader, 38),
            Err(Rejection::NotLeader { leader: 1, .. })
        ));
        let mut stale = req(vec![1, 2], 0, pe);
        if let Command::AlterPartition(r) = &mut stale {
            r.broker_epoch = 0;
        }
        assert!(matches!(
            m.apply(&stale, 39),
            Err(Rejection::StaleBrokerEpoch { .. })
        ));
        // Refusals change nothing.
        let v = m.version;
        let _ = m.apply(&stale, 40);
        assert_eq!(m.version, v);
    }

    #[test]
    fn reregistration_leaves_isrs_and_reelects() {
        let (mut m, _) = three_brokers();
        topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
        topic(&mut m, "solo", vec![vec![1]], &[]);
        let epoch = register(&mut m, 1, 50);
        assert_eq!(epoch, 50);
        let p = m.partition("t", 0).unwrap();
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (2, vec![2, 3], 1)
        );
        // A single-replica partition keeps its only replica, under a new leader epoch.
        let p = m.partition("solo", 0).unwrap();
        assert_eq!((p.leader, p.isr.clone(), p.leader_epoch), (1, vec![1], 1));
    }

    #[test]
    fn preferred_election_moves_leadership_back() {
        let (mut m, e) = three_brokers();
        topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
        m.apply(
            &Command::FenceBroker {
                broker: 1,
                epoch: e[0],
            },
            5,
        )
        .unwrap();
        m.apply(
            &Command::UnfenceBroker {
                broker: 1,
                epoch: e[0],
            },
            6,
        )
        .unwrap();
        let which = vec![("t".to_string(), 0)];
        let elect = Command::ElectLeaders {
            election: ElectionType::Preferred,
            partitions: which.clone(),
        };
        let CommandOutput::Elections(o) = m.apply(&elect, 7).unwrap() else {
            panic!()
        };
        assert_eq!(o[0].result, Err(ElectionError::PreferredLeaderNotAvailable));
        let p = m.partition("t", 0).unwrap().clone();
        let id = m.topic("t").unwrap().id;
        m.apply(
            &Command::AlterPartition(AlterPartitionRequest {
                broker: 2,
                broker_epoch: e[1],
                topic_id: id,
                partition: 0,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![2, 3, 1],
            }),
            8,
        )
        .unwrap();
        let CommandOutput::Elections(o) = m.apply(&elect, 9).unwrap() else {
            panic!()
        };
        let p = o[0].result.clone().unwrap();
        assert_eq!((p.leader, p.leader_epoch), (1, 2));
        let CommandOutput::Elections(o) = m.apply(&elect, 10).unwrap() else {
            panic!()
        };
        assert_eq!(o[0].result, Err(ElectionError::NotNeeded));
    }

    #[test]
    fn topics_are_created_once() {
        let (mut m, _) = three_brokers();
        let t = NewTopic {
            id: TopicId::random(),
            name: "t".into(),
            configs: BTreeMap::new(),
            assignment: vec![vec![1, 2]],
            storage_cluster_id: None,
            initial_leader_epoch: 0,
        };
        let first = m.apply(&Command::CreateTopic(t.clone()), 1).unwrap();
        assert_eq!(m.apply(&Command::CreateTopic(t.clone()), 2).unwrap(), first);
        let other = NewTopic {
            id: TopicId::random(),
            ..t.clone()
        };
        assert!(matches!(
            m.apply(&Command::CreateTopic(other), 3),
            Err(Rejection::TopicAlreadyExists { .. })
        ));
        let same_id = NewTopic {
            name: "u".into(),
            ..t.clone()
        };
        assert!(matches!(
            m.apply(&Command::CreateTopic(same_id), 4),
            Err(Rejection::TopicIdInUse { .. })
        ));
        for (bad, want) in [
            (vec![vec![1, 1]], "twice"),
            (vec![vec![9]], "unregistered"),
            (vec![vec![1], vec![1, 2]], "replicas"),
            (vec![], "no partitions"),
        ] {
            let cmd = Command::CreateTopic(NewTopic {
                id: TopicId::random(),
                name: "v".into(),
                configs: BTreeMap::new(),
                assignment: bad,
                storage_cluster_id: None,
                initial_leader_epoch: 0,
            });
            match m.apply(&cmd, 5) {
                Err(Rejection::InvalidReplicaAssignment { reason }) => {
                    assert!(reason.contains(want), "{reason}")
                }
                o => panic!("{o:?}"),
            }
        }
        let bad_config = Command::CreateTopic(NewTopic {
            id: TopicId::random(),
            name: "w".into(),
            configs: BTreeMap::from([("nope".into(), "1".into())]),
            assignment: vec![vec![1]],
            storage_cluster_id: None,
            initial_leader_epoch: 0,
        });
        assert!(matches!(
            m.apply(&bad_config, 6),
            Err(Rejection::InvalidConfig { .. })
        ));
        assert_eq!(m.topics.len(), 1);
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        for ok in ["a", "orders.v2", "A_b-c", &"x".repeat(249)] {
            validate_topic_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "has space", "ünï", "a/b", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn producer_ids_are_never_reused() {
        let mut m = ClusterMetadata::default();
        let a = m
            .apply(&Command::AllocateProducerIds { count: 10 }, 1)
            .unwrap();
        let b = m
            .apply(&Command::AllocateProducerIds { count: 5 }, 2)
            .unwrap();
        assert_eq!(
            (a, b),
            (
                CommandOutput::ProducerIds {
                    first: 1000,
                    count: 10
                },
                CommandOutput::ProducerIds {
                    first: 1010,
                    count: 5
                }
            )
        );
        assert!(
            m.apply(&Command::AllocateProducerIds { count: 0 }, 3)
                .is_err()
        );
    }

    /// Two clusters hand out producer ids from different points (a topic recovered from
    /// the bucket into a new cluster keeps its producers' state), each the same on every
    /// voter, far apart.
    #[test]
    fn a_new_cluster_starts_its_producer_ids_at_a_point_of_its_own() {
        let first_id = |cluster: &str| {
            let mut m = ClusterMetadata::default();
            m.apply(
                &Command::InitCluster {
                    cluster_id: cluster.into(),
                },
                1,
            )
            .unwrap();
            match m
                .apply(&Command::AllocateProducerIds { count: 1 }, 2)
                .unwrap()
            {
                CommandOutput::ProducerIds { first, .. } => first,
                other => panic!("{other:?}"),
            }
        };
        let (a, b) = (first_id("cluster-a"), first_id("cluster-b"));
        assert_eq!(a, first_id("cluster-a"));
        assert!(
            a >= 1000 && b >= 1000 && (a - b).abs() >= 1 << 16,
            "{a} {b}"
        );
        assert!(a < 1 << 57 && b < 1 << 57);
    }
}
