//! The raft log's entries ([`Command`]), what they carry and what applying them
//! returns, and the deltas (runs of accepted commands) brokers apply to their copy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_proto::TopicId;

use super::records::{BrokerRecord, ClusterMetadata, Endpoint, PartitionRecord, TopicRecord};
use crate::error::Rejection;
use crate::security::{SecurityChange, SecurityOutcome};
use crate::types::{BrokerId, NodeId};

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
