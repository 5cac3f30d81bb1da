//! The Kafka error codes Strata answers with.
//!
//! Codes and retriability follow Apache Kafka's `org.apache.kafka.common.protocol.Errors`:
//! a client retries a retriable error by itself (after refreshing metadata where that
//! helps), and surfaces a non-retriable one to the application. Every layer maps its own
//! typed error to one of these in exactly one place.

use std::fmt;

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, $retriable:literal, $msg:literal; )*) => {
        /// A Kafka protocol error code.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr(i16)]
        pub enum ErrorCode {
            $( $(#[$doc])* $name = $code, )*
        }

        impl ErrorCode {
            /// Every code this enum knows, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The code as sent on the wire.
            pub fn code(self) -> i16 {
                self as i16
            }

            /// The code for a wire value, if Strata knows it.
            pub fn from_code(code: i16) -> Option<ErrorCode> {
                match code {
                    $( $code => Some(ErrorCode::$name), )*
                    _ => None,
                }
            }

            /// Whether a client may retry the request that got this error (Kafka's
            /// `RetriableException` subclasses).
            pub fn is_retriable(self) -> bool {
                match self {
                    $( ErrorCode::$name => $retriable, )*
                }
            }

            /// Kafka's description of the error.
            pub fn message(self) -> &'static str {
                match self {
                    $( ErrorCode::$name => $msg, )*
                }
            }
        }
    };
}

error_codes! {
    /// The server experienced an unexpected error.
    UnknownServerError = -1, false, "The server experienced an unexpected error when processing the request.";
    None = 0, false, "";
    OffsetOutOfRange = 1, false, "The requested offset is not within the range of offsets maintained by the server.";
    CorruptMessage = 2, true, "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt.";
    UnknownTopicOrPartition = 3, true, "This server does not host this topic-partition.";
    InvalidFetchSize = 4, false, "The requested fetch size is invalid.";
    LeaderNotAvailable = 5, true, "There is no leader for this topic-partition as we are in the middle of a leadership election.";
    NotLeaderOrFollower = 6, true, "For requests intended only for the leader, this error indicates that the broker is not the current leader.";
    RequestTimedOut = 7, true, "The request timed out.";
    BrokerNotAvailable = 8, false, "The broker is not available.";
    ReplicaNotAvailable = 9, true, "The replica is not available for the requested topic-partition.";
    MessageTooLarge = 10, false, "The request included a message larger than the max message size the server will accept.";
    OffsetMetadataTooLarge = 12, false, "The metadata field of the offset request was too large.";
    NetworkException = 13, true, "The server disconnected before a response was received.";
    CoordinatorLoadInProgress = 14, true, "The coordinator is loading and hence can't process requests.";
    CoordinatorNotAvailable = 15, true, "The coordinator is not available.";
    NotCoordinator = 16, true, "This is not the correct coordinator.";
    InvalidTopicException = 17, false, "The request attempted to perform an operation on an invalid topic.";
    RecordListTooLarge = 18, false, "The request included message batch larger than the configured segment size on the server.";
    NotEnoughReplicas = 19, true, "Messages are rejected since there are fewer in-sync replicas than required.";
    NotEnoughReplicasAfterAppend = 20, true, "Messages are written to the log, but to fewer in-sync replicas than required.";
    InvalidRequiredAcks = 21, false, "Produce request specified an invalid value for required acks.";
    IllegalGeneration = 22, false, "Specified group generation id is not valid.";
    InconsistentGroupProtocol = 23, false, "The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list.";
    InvalidGroupId = 24, false, "The configured groupId is invalid.";
    UnknownMemberId = 25, false, "The coordinator is not aware of this member.";
    InvalidSessionTimeout = 26, false, "The session timeout is not within the range allowed by the broker.";
    RebalanceInProgress = 27, false, "The group is rebalancing, so a rejoin is needed.";
    InvalidCommitOffsetSize = 28, false, "The committing offset data size is not valid.";
    TopicAuthorizationFailed = 29, false, "Topic authorization failed.";
    GroupAuthorizationFailed = 30, false, "Group authorization failed.";
    ClusterAuthorizationFailed = 31, false, "Cluster authorization failed.";
    InvalidTimestamp = 32, false, "The timestamp of the message is out of acceptable range.";
    UnsupportedSaslMechanism = 33, false, "The broker does not support the requested SASL mechanism.";
    IllegalSaslState = 34, false, "Request is not valid given the current SASL state.";
    UnsupportedVersion = 35, false, "The version of API is not supported.";
    TopicAlreadyExists = 36, false, "Topic with this name already exists.";
    InvalidPartitions = 37, false, "Number of partitions is below 1.";
    InvalidReplicationFactor = 38, false, "Replication factor is below 1 or larger than the number of available brokers.";
    InvalidReplicaAssignment = 39, false, "Replica assignment is invalid.";
    InvalidConfig = 40, false, "Configuration is invalid.";
    NotController = 41, true, "This is not the correct controller for this cluster.";
    InvalidRequest = 42, false, "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.";
    UnsupportedForMessageFormat = 43, false, "The message format version on the broker does not support the request.";
    PolicyViolation = 44, false, "Request parameters do not satisfy the configured policy.";
    OutOfOrderSequenceNumber = 45, false, "The broker received an out of order sequence number.";
    DuplicateSequenceNumber = 46, false, "The broker received a duplicate sequence number.";
    InvalidProducerEpoch = 47, false, "Producer attempted to produce with an old epoch.";
    InvalidTxnState = 48, false, "The producer attempted a transactional operation in an invalid state.";
    InvalidProducerIdMapping = 49, false, "The producer attempted to use a producer id which is not currently assigned to its transactional id.";
    InvalidTransactionTimeout = 50, false, "The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms).";
    ConcurrentTransactions = 51, false, "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.";
    TransactionCoordinatorFenced = 52, false, "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer.";
    TransactionalIdAuthorizationFailed = 53, false, "Transactional Id authorization failed.";
    SecurityDisabled = 54, false, "Security features are disabled.";
    OperationNotAttempted = 55, false, "The broker did not attempt to execute this operation.";
    KafkaStorageError = 56, true, "Disk error when trying to access log file on the disk.";
    LogDirNotFound = 57, false, "The user-specified log directory is not found in the broker config.";
    SaslAuthenticationFailed = 58, false, "SASL Authentication failed.";
    UnknownProducerId = 59, false, "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question.";
    ReassignmentInProgress = 60, false, "A partition reassignment is in progress.";
    InvalidRecordBatchSizes = 61, false, "Record batch sizes are invalid.";
    NonEmptyGroup = 68, false, "The group is not empty.";
    GroupIdNotFound = 69, false, "The group id does not exist.";
    FetchSessionIdNotFound = 70, true, "The fetch session ID was not found.";
    InvalidFetchSessionEpoch = 71, true, "The fetch session epoch is invalid.";
    ListenerNotFound = 72, true, "There is no listener on the leader broker that matches the listener on which metadata request was processed.";
    TopicDeletionDisabled = 73, false, "Topic deletion is disabled.";
    FencedLeaderEpoch = 74, true, "The leader epoch in the request is older than the epoch on the broker.";
    UnknownLeaderEpoch = 75, true, "The leader epoch in the request is newer than the epoch on the broker.";
    UnsupportedCompressionType = 76, false, "The requesting client does not support the compression type of given partition.";
    StaleBrokerEpoch = 77, false, "Broker epoch has changed.";
    OffsetNotAvailable = 78, true, "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing.";
    MemberIdRequired = 79, false, "The group member needs to have a valid member id before actually entering a consumer group.";
    PreferredLeaderNotAvailable = 80, true, "The preferred leader was not available.";
    GroupMaxSizeReached = 81, false, "The consumer group has reached its max size.";
    FencedInstanceId = 82, false, "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.";
    EligibleLeadersNotAvailable = 83, true, "Eligible topic partition leaders are not available.";
    ElectionNotNeeded = 84, true, "Leader election not needed for topic partition.";
    NoReassignmentInProgress = 85, false, "No partition reassignment is in progress.";
    GroupSubscribedToTopic = 86, false, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.";
    InvalidRecord = 87, false, "This record has failed the validation on broker and hence will be rejected.";
    UnstableOffsetCommit = 88, true, "There are unstable offsets that need to be cleared.";
    ThrottlingQuotaExceeded = 89, true, "The throttling quota has been exceeded.";
    ProducerFenced = 90, false, "There is a newer producer with the same transactionalId which fences the current one.";
    ResourceNotFound = 91, false, "A request illegally referred to a resource that does not exist.";
    DuplicateResource = 92, false, "A request illegally referred to the same resource twice.";
    UnacceptableCredential = 93, false, "Requested credential would not meet criteria for acceptability.";
    InvalidUpdateVersion = 95, false, "The given update version was invalid.";
    FeatureUpdateFailed = 96, false, "Unable to update finalized features due to an unexpected server error.";
    UnknownTopicId = 100, true, "This server does not host this topic ID.";
    BrokerIdNotRegistered = 102, false, "The given broker ID was not registered.";
    InconsistentTopicId = 103, true, "The log's topic ID did not match the topic ID in the request.";
    InconsistentClusterId = 104, false, "The clusterId in the request does not match that found on the server.";
    TransactionalIdNotFound = 105, false, "The transactionalId could not be found.";
    FetchSessionTopicIdError = 106, true, "The fetch session encountered inconsistent topic ID usage.";
    IneligibleReplica = 107, false, "The new ISR contains at least one ineligible replica.";
    NewLeaderElected = 108, false, "The AlterPartition request successfully updated the partition state but the leader has changed.";
    OffsetMovedToTieredStorage = 109, false, "The requested offset is moved to tiered storage.";
}

impl ErrorCode {
    /// Whether this is the "no error" code.
    pub fn is_ok(self) -> bool {
        self == ErrorCode::None
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({})", self, self.code())
    }
}

impl From<ErrorCode> for i16 {
    fn from(code: ErrorCode) -> i16 {
        code.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &code in ErrorCode::ALL {
            assert!(seen.insert(code.code()), "duplicate code {}", code.code());
            assert_eq!(ErrorCode::from_code(code.code()), Some(code));
        }
        assert_eq!(ErrorCode::from_code(12345), None);
    }

    #[test]
    fn codes_agree_with_the_kafka_protocol_crate() {
        // An independent table of the same codes: the kafka-protocol crate's.
        use kafka_protocol::error::ResponseError;
        for &code in ErrorCode::ALL {
            if code == ErrorCode::None {
                continue;
            }
            let theirs = ResponseError::try_from_code(code.code())
                .unwrap_or_else(|| panic!("{code:?} unknown to kafka-protocol"));
            assert_eq!(theirs.code(), code.code());
            assert_eq!(
                theirs.is_retriable(),
                code.is_retriable(),
                "retriability of {code:?} differs from Kafka's"
            );
        }
    }
}
