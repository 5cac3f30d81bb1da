//! The controller's errors, and their one mapping to Kafka error codes.
//!
//! Two layers:
//! * [`Rejection`]: the replicated state said no (a topic exists, an epoch is stale, ...).
//!   Every voter computes the same rejection, so it travels over the wire as data, and
//!   sending the same request again gets the same answer: the caller must change
//!   something first (refresh its metadata, pick another name).
//! * [`ControllerError`]: a rejection, or why no answer came (no leader, unreachable,
//!   timed out, cancelled, storage failure). [`ControllerError::is_retriable`] says whether
//!   sending the same request again can help.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use strata_proto::{ErrorCode, TopicId};

use crate::types::{BrokerId, NodeId};

/// A request the metadata state refused. Deterministic: every voter refuses alike.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Rejection {
    #[error("topic '{name}' already exists")]
    TopicAlreadyExists { name: String },
    #[error("topic id {id} is already used by topic '{existing}'")]
    TopicIdInUse { id: TopicId, existing: String },
    #[error("topic '{name}' does not exist")]
    UnknownTopic { name: String },
    #[error("no topic has id {id}")]
    UnknownTopicId { id: TopicId },
    #[error("partition {partition} of topic '{topic}' does not exist")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("invalid topic name '{name}': {reason}")]
    InvalidTopicName { name: String, reason: String },
    #[error("invalid partition count {count}: {reason}")]
    InvalidPartitions { count: i32, reason: String },
    #[error("replication factor {factor} is invalid: {available} unfenced brokers")]
    InvalidReplicationFactor { factor: i32, available: usize },
    #[error("invalid replica assignment: {reason}")]
    InvalidReplicaAssignment { reason: String },
    #[error("{topic}-{partition} has no reassignment to cancel")]
    NoReassignmentInProgress { topic: String, partition: i32 },
    #[error("invalid topic config: {reason}")]
    InvalidConfig { reason: String },
    #[error("broker {broker} is not registered")]
    UnknownBroker { broker: BrokerId },
    #[error("broker {broker} has epoch {current}, the request carried {requested}")]
    StaleBrokerEpoch {
        broker: BrokerId,
        current: i64,
        requested: i64,
    },
    #[error("broker {broker} does not lead {topic}-{partition} (leader: {leader})")]
    NotLeader {
        topic: String,
        partition: i32,
        broker: BrokerId,
        leader: BrokerId,
    },
    #[error("{topic}-{partition} is at leader epoch {current}, the request carried {requested}")]
    FencedLeaderEpoch {
        topic: String,
        partition: i32,
        current: i32,
        requested: i32,
    },
    #[error("{topic}-{partition} is at partition epoch {current}, the request carried {requested}")]
    InvalidUpdateVersion {
        topic: String,
        partition: i32,
        current: i32,
        requested: i32,
    },
    #[error("replica {replica} cannot join the ISR of {topic}-{partition}: {reason}")]
    IneligibleReplica {
        topic: String,
        partition: i32,
        replica: BrokerId,
        reason: String,
    },
    #[error("invalid request: {reason}")]
    InvalidRequest { reason: String },
}

impl Rejection {
    /// The Kafka error code for this rejection.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Rejection::TopicAlreadyExists { .. } => ErrorCode::TopicAlreadyExists,
            // KIP-516: an id that names another topic is an inconsistent topic id.
            Rejection::TopicIdInUse { .. } => ErrorCode::InconsistentTopicId,
            Rejection::UnknownTopic { .. } | Rejection::UnknownPartition { .. } => {
                ErrorCode::UnknownTopicOrPartition
            }
            Rejection::UnknownTopicId { .. } => ErrorCode::UnknownTopicId,
            Rejection::InvalidTopicName { .. } => ErrorCode::InvalidTopicException,
            Rejection::InvalidPartitions { .. } => ErrorCode::InvalidPartitions,
            Rejection::InvalidReplicationFactor { .. } => ErrorCode::InvalidReplicationFactor,
            Rejection::InvalidReplicaAssignment { .. } => ErrorCode::InvalidReplicaAssignment,
            Rejection::NoReassignmentInProgress { .. } => ErrorCode::NoReassignmentInProgress,
            Rejection::InvalidConfig { .. } => ErrorCode::InvalidConfig,
            Rejection::UnknownBroker { .. } => ErrorCode::BrokerIdNotRegistered,
            Rejection::StaleBrokerEpoch { .. } => ErrorCode::StaleBrokerEpoch,
            Rejection::NotLeader { .. } => ErrorCode::NotLeaderOrFollower,
            Rejection::FencedLeaderEpoch { .. } => ErrorCode::FencedLeaderEpoch,
            Rejection::InvalidUpdateVersion { .. } => ErrorCode::InvalidUpdateVersion,
            Rejection::IneligibleReplica { .. } => ErrorCode::IneligibleReplica,
            Rejection::InvalidRequest { .. } => ErrorCode::InvalidRequest,
        }
    }
}

/// Why a controller call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The metadata state refused the request. Not retriable as is.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The node asked is not the raft leader. Retriable: the client follows the hint.
    #[error("controller {node} is not the leader (leader: {leader:?} at {leader_addr:?})")]
    NotLeader {
        node: NodeId,
        leader: Option<NodeId>,
        leader_addr: Option<String>,
    },
    /// The quorum could not serve the request now (no leader yet, quorum lost, the node
    /// is shutting down). Retriable.
    #[error("controller unavailable: {reason}")]
    Unavailable { reason: String },
    /// A network call failed. Retriable; the request may or may not have been applied.
    #[error("controller RPC to {addr} failed: {source}")]
    Transport {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The peer answered something this version cannot decode. Not retriable.
    #[error("controller protocol error with {addr}: {reason}")]
    Protocol { addr: String, reason: String },
    /// The call's deadline passed before an answer. The request may or may not have been
    /// applied. Retriable.
    #[error("controller call timed out after {after:?}{}", last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
    TimedOut {
        after: Duration,
        last_error: Option<Box<ControllerError>>,
    },
    /// The caller cancelled the call. Not retried by anyone.
    #[error("controller call cancelled")]
    Cancelled,
    /// This voter's local storage failed (the raft node stops on it). Not retriable here.
    #[error("controller storage failed: {0}")]
    Storage(#[from] crate::store::StoreError),
    /// The controller could not be started as configured.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Binding the controller listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// Openraft failed in a way none of the above describes.
    #[error("raft: {0}")]
    Raft(String),
}

impl ControllerError {
    /// Whether sending the same request again (to the leader, after a backoff) can help.
    ///
    /// Rejections are never retriable here even where Kafka's code is (for example
    /// FENCED_LEADER_EPOCH): the controller is the authority, so the same request gets the
    /// same answer until the caller refreshes its metadata and changes the request.
    pub fn is_retriable(&self) -> bool {
        match self {
            ControllerError::NotLeader { .. }
            | ControllerError::Unavailable { .. }
            | ControllerError::Transport { .. }
            | ControllerError::TimedOut { .. } => true,
            ControllerError::Rejected(_)
            | ControllerError::Protocol { .. }
            | ControllerError::Cancelled
            | ControllerError::Storage(_)
            | ControllerError::Config(_)
            | ControllerError::Listen { .. }
            | ControllerError::Raft(_) => false,
        }
    }

    /// The Kafka error code to answer a client with. The one place controller errors
    /// become Kafka codes.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ControllerError::Rejected(r) => r.error_code(),
            // What a KRaft broker answers admin requests with while the controller quorum
            // has no (reachable) leader: clients retry NOT_CONTROLLER.
            ControllerError::NotLeader { .. }
            | ControllerError::Unavailable { .. }
            | ControllerError::Transport { .. } => ErrorCode::NotController,
            ControllerError::TimedOut { .. } | ControllerError::Cancelled => {
                ErrorCode::RequestTimedOut
            }
            ControllerError::Storage(_) => ErrorCode::KafkaStorageError,
            ControllerError::Protocol { .. }
            | ControllerError::Config(_)
            | ControllerError::Listen { .. }
            | ControllerError::Raft(_) => ErrorCode::UnknownServerError,
        }
    }

    /// The rejection, if the state refused the request.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            ControllerError::Rejected(r) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alter_partition_refusals_map_to_kafka_codes() {
        let fenced = Rejection::FencedLeaderEpoch {
            topic: "t".into(),
            partition: 0,
            current: 3,
            requested: 2,
        };
        assert_eq!(fenced.error_code(), ErrorCode::FencedLeaderEpoch);
        let version = Rejection::InvalidUpdateVersion {
            topic: "t".into(),
            partition: 0,
            current: 3,
            requested: 2,
        };
        assert_eq!(version.error_code(), ErrorCode::InvalidUpdateVersion);
        let e = ControllerError::from(version);
        assert!(!e.is_retriable());
        assert_eq!(e.error_code(), ErrorCode::InvalidUpdateVersion);
        let not_leader = ControllerError::NotLeader {
            node: 1,
            leader: Some(2),
            leader_addr: None,
        };
        assert!(not_leader.is_retriable());
        assert_eq!(not_leader.error_code(), ErrorCode::NotController);
        assert!(!ControllerError::Cancelled.is_retriable());
    }

    #[test]
    fn rejections_travel_as_json() {
        let r = Rejection::InvalidReplicationFactor {
            factor: 3,
            available: 1,
        };
        let back: Rejection = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
