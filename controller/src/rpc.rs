//! The messages voters and clients exchange (JSON in length-prefixed frames, see
//! [`crate::net`]).

use std::collections::BTreeMap;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use strata_proto::TopicId;

use crate::error::{ControllerError, Rejection};
use crate::security::{SecurityChange, SecurityOutcome};
use crate::state::{
    AlterPartitionRequest, BrokerRecord, ClusterMetadata, ElectionOutcome, ElectionType, Endpoint,
    MetadataDelta, PartitionRecord, Reassignment, ReassignmentOutcome, TopicRecord,
};
use crate::types::{BrokerId, NodeId, TypeConfig};

/// A broker introducing itself (Kafka's BrokerRegistration).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub broker_id: BrokerId,
    /// The inter-broker listener's advertised address.
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Every listener's advertised address.
    #[serde(default)]
    pub listeners: Vec<Endpoint>,
}

/// The answer to a broker heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// Whether the broker is fenced after this heartbeat (a fenced broker that
    /// heartbeats is unfenced, so this is false unless the unfencing failed).
    pub fenced: bool,
    /// The controller's metadata version; a broker whose copy is older should poll.
    pub metadata_version: u64,
}

/// A topic to create or restore. The id is chosen by the client once per call, so a
/// retried call finds the topic it created instead of creating it twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTopicRequest {
    pub id: TopicId,
    pub name: String,
    pub partitions: i32,
    /// -1 for the controller's default.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// For a restored topic: the cluster id its objects are stored under.
    pub storage_cluster_id: Option<String>,
    /// For a restored topic: the first leader epoch, above every epoch its object-store
    /// manifests hold (an upload under a lower epoch would be refused there as fenced).
    #[serde(default)]
    pub initial_leader_epoch: i32,
    /// Replicas chosen by the client (CreateTopics' assignments), one list per
    /// partition, the first replica the preferred leader; `None`: the controller
    /// assigns `partitions` × `replication_factor` itself.
    #[serde(default)]
    pub assignment: Option<Vec<Vec<BrokerId>>>,
}

/// A request a client sends to the controller leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum ClientRequest {
    RegisterBroker(BrokerRegistration),
    Heartbeat {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    CreateTopic(NewTopicRequest),
    RestoreTopic(NewTopicRequest),
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
        /// The new partitions' replicas, chosen by the client; `None`: the controller's.
        #[serde(default)]
        assignment: Option<Vec<Vec<BrokerId>>>,
    },
    SetConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    AlterPartition(AlterPartitionRequest),
    ElectLeaders {
        election: ElectionType,
        /// `None`: every partition.
        partitions: Option<Vec<(String, i32)>>,
    },
    AllocateProducerIds {
        count: i64,
    },
    AlterSecurity(SecurityChange),
    AlterReassignments(Vec<Reassignment>),
    UnregisterBroker {
        broker: BrokerId,
    },
    SetBrokerConfigs {
        resource: String,
        configs: BTreeMap<String, String>,
    },
    /// Long poll: answer once the version exceeds `since_version`, or `None` after
    /// `wait_ms`.
    Metadata {
        since_version: u64,
        wait_ms: u64,
        /// The asker can apply a [`ClientReply::MetadataDelta`] (older brokers leave it
        /// out and get the whole metadata).
        #[serde(default)]
        deltas: bool,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum ClientReply {
    Broker(BrokerRecord),
    Heartbeat(HeartbeatReply),
    Topic(TopicRecord),
    Partition(PartitionRecord),
    ProducerIds {
        first: i64,
    },
    Elections(Vec<ElectionOutcome>),
    Security(SecurityOutcome),
    Reassignments(Vec<ReassignmentOutcome>),
    /// Accepted, nothing to report.
    Done,
    Metadata(Option<Box<ClusterMetadata>>),
    /// The commands since the asker's version, when the controller still has them all.
    MetadataDelta(Box<MetadataDelta>),
}

/// A failure as it travels back to a client.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum WireError {
    Rejected(Rejection),
    NotLeader {
        node: NodeId,
        leader: Option<NodeId>,
        leader_addr: Option<String>,
    },
    Unavailable {
        reason: String,
    },
}

impl From<WireError> for ControllerError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Rejected(r) => ControllerError::Rejected(r),
            WireError::NotLeader {
                node,
                leader,
                leader_addr,
            } => ControllerError::NotLeader {
                node,
                leader,
                leader_addr,
            },
            WireError::Unavailable { reason } => ControllerError::Unavailable { reason },
        }
    }
}

impl From<Rejection> for WireError {
    fn from(r: Rejection) -> Self {
        WireError::Rejected(r)
    }
}

/// Every request on the controller port.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Client(ClientRequest),
}

/// Every response on the controller port.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Client(Result<ClientReply, WireError>),
}
