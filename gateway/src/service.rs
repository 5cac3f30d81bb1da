//! The one narrow interface between the gateway and a Kafka cluster. The HTTP layer
//! knows nothing else about the broker; `crate::kafka` implements it with librdkafka
//! against the broker's own Kafka listener, and the tests implement it in memory.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use strata_proto::ErrorCode;

/// Kafka error codes the gateway maps to HTTP statuses (positive: the broker's,
/// negative: librdkafka's local codes).
pub mod codes {
    pub const OFFSET_OUT_OF_RANGE: i32 = 1;
    pub const CORRUPT_MESSAGE: i32 = 2;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i32 = 3;
    pub const LEADER_NOT_AVAILABLE: i32 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i32 = 6;
    pub const REQUEST_TIMED_OUT: i32 = 7;
    pub const MESSAGE_TOO_LARGE: i32 = 10;
    pub const NETWORK_EXCEPTION: i32 = 13;
    pub const COORDINATOR_NOT_AVAILABLE: i32 = 15;
    pub const NOT_COORDINATOR: i32 = 16;
    pub const INVALID_TOPIC_EXCEPTION: i32 = 17;
    pub const RECORD_LIST_TOO_LARGE: i32 = 18;
    pub const NOT_ENOUGH_REPLICAS: i32 = 19;
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i32 = 20;
    pub const INVALID_TIMESTAMP: i32 = 32;
    pub const ILLEGAL_GENERATION: i32 = 22;
    pub const UNKNOWN_MEMBER_ID: i32 = 25;
    pub const REBALANCE_IN_PROGRESS: i32 = 27;
    pub const KAFKA_STORAGE_ERROR: i32 = 56;
    pub const INVALID_RECORD: i32 = 87;
    pub const THROTTLING_QUOTA_EXCEEDED: i32 = 89;
    pub const TOPIC_AUTHORIZATION_FAILED: i32 = 29;
    pub const CLUSTER_AUTHORIZATION_FAILED: i32 = 31;
    pub const TOPIC_ALREADY_EXISTS: i32 = 36;
    pub const INVALID_PARTITIONS: i32 = 37;
    pub const INVALID_REPLICATION_FACTOR: i32 = 38;
    pub const INVALID_REPLICA_ASSIGNMENT: i32 = 39;
    pub const INVALID_CONFIG: i32 = 40;
    pub const INVALID_REQUEST: i32 = 42;
    pub const POLICY_VIOLATION: i32 = 44;
    /// librdkafka: Local: Message timed out.
    pub const LOCAL_MSG_TIMED_OUT: i32 = -192;
    /// librdkafka: Local: Broker transport failure.
    pub const LOCAL_TRANSPORT: i32 = -195;
    /// librdkafka: Local: All broker connections are down.
    pub const LOCAL_ALL_BROKERS_DOWN: i32 = -187;
    /// librdkafka: Local: Queue full.
    pub const LOCAL_QUEUE_FULL: i32 = -184;
    /// librdkafka: Local: Timed out.
    pub const LOCAL_TIMED_OUT: i32 = -185;
    /// librdkafka: Local: Message size too large.
    pub const LOCAL_MSG_SIZE_TOO_LARGE: i32 = -141;
    /// librdkafka: Local: Unknown partition.
    pub const LOCAL_UNKNOWN_PARTITION: i32 = -190;
    /// librdkafka: Local: Unknown topic.
    pub const LOCAL_UNKNOWN_TOPIC: i32 = -188;
    /// librdkafka: Local: Erroneous state (for example seeking an unassigned partition).
    pub const LOCAL_STATE: i32 = -172;
    /// librdkafka: Local: Invalid argument or configuration.
    pub const LOCAL_INVALID_ARG: i32 = -186;
    /// librdkafka: Local: No offset to automatically reset to (auto.offset.reset none,
    /// and the group has no committed offset). librdkafka then stops reading the
    /// partition, and a seek of it is refused: the gateway answers that with it too.
    pub const LOCAL_AUTO_OFFSET_RESET: i32 = -140;
    /// No Kafka code: the gateway itself refused (its produce queue is full).
    pub const GATEWAY_QUEUE_FULL: i32 = -10_001;
    /// No Kafka code: the member is not assigned the partition (not yet, or no more).
    pub const NOT_ASSIGNED: i32 = -10_002;
}

/// An error from the cluster, with the Kafka error code the HTTP layer maps to a status
/// (`crate::error` does that in one place).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (kafka error {code})")]
pub struct ServiceError {
    pub code: i32,
    pub message: String,
}

impl ServiceError {
    pub fn new(code: i32, message: impl Into<String>) -> ServiceError {
        ServiceError {
            code,
            message: message.into(),
        }
    }

    pub fn unknown_topic(topic: &str) -> ServiceError {
        ServiceError::new(
            codes::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic '{topic}' not found"),
        )
    }

    /// Whether retrying the same call later can succeed: for a Kafka code, Kafka's
    /// answer ([`ErrorCode::is_retriable`], its RetriableException) except where the
    /// gateway answers otherwise (`gateway_retriable`, which says why); for any other
    /// code, whether it is one of the local transients (`local_transient`).
    pub fn retriable(&self) -> bool {
        match i16::try_from(self.code).ok().and_then(ErrorCode::from_code) {
            Some(code) => gateway_retriable(code).unwrap_or_else(|| code.is_retriable()),
            None => local_transient(self.code),
        }
    }
}

/// The Kafka codes whose retriability the gateway answers otherwise than Kafka, and
/// what it answers; `None` for the rest, where Kafka's answer holds.
fn gateway_retriable(code: ErrorCode) -> Option<bool> {
    match code {
        // Kafka retries it (a corrupted copy on the wire). The gateway built the batch
        // itself from the HTTP request, so a refusal (a batch over the broker's
        // decompressed bound, a null key on a compacted topic) refuses the same bytes
        // again: the client hears 422 at once, not after the delivery timeout.
        ErrorCode::CorruptMessage => Some(false),
        // Kafka retries it (metadata may lag behind a topic's creation). The gateway
        // answers a topic or partition that does not exist with 404 at once: its
        // producer fails the records instead of retrying for the delivery timeout, and
        // an SSE stream on it ends instead of polling forever.
        ErrorCode::UnknownTopicOrPartition => Some(false),
        // Kafka does not (its client must rejoin the group first). The gateway's
        // members are librdkafka consumers, which rejoin by themselves, so the same
        // call later succeeds: an SSE stream keeps going through a rebalance, and an
        // HTTP client hears 503.
        ErrorCode::RebalanceInProgress => Some(true),
        // Retriable in Kafka, but never in the gateway's own list of retriable codes
        // that this function replaced; answered as before (not retriable). Most come
        // only from requests the gateway does not make itself (replica fetches, fetch
        // sessions, leader epochs, topic ids, elections, the controller: librdkafka
        // handles them inside its consumers). Retrying any of them would be a
        // behaviour change, for a commit of its own.
        ErrorCode::ReplicaNotAvailable
        | ErrorCode::CoordinatorLoadInProgress
        | ErrorCode::NotController
        | ErrorCode::FetchSessionIdNotFound
        | ErrorCode::InvalidFetchSessionEpoch
        | ErrorCode::ListenerNotFound
        | ErrorCode::FencedLeaderEpoch
        | ErrorCode::UnknownLeaderEpoch
        | ErrorCode::OffsetNotAvailable
        | ErrorCode::PreferredLeaderNotAvailable
        | ErrorCode::EligibleLeadersNotAvailable
        | ErrorCode::ElectionNotNeeded
        | ErrorCode::UnstableOffsetCommit
        | ErrorCode::UnknownTopicId
        | ErrorCode::InconsistentTopicId
        | ErrorCode::FetchSessionTopicIdError => Some(false),
        _ => None,
    }
}

/// Whether a code that is not Kafka's (librdkafka's local ones, the gateway's own) is
/// transient: a timeout, a lost or missing connection, a full queue.
fn local_transient(code: i32) -> bool {
    use codes::*;
    matches!(
        code,
        LOCAL_MSG_TIMED_OUT
            | LOCAL_TRANSPORT
            | LOCAL_ALL_BROKERS_DOWN
            | LOCAL_QUEUE_FULL
            | LOCAL_TIMED_OUT
            | GATEWAY_QUEUE_FULL
    )
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopicSpec {
    pub name: String,
    /// -1: the broker's default (num.partitions).
    pub partitions: i32,
    /// -1: the broker's default (default.replication.factor).
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
    pub validate_only: bool,
}

impl NewTopicSpec {
    /// `name` with the broker's defaults.
    pub fn defaults(name: &str) -> NewTopicSpec {
        NewTopicSpec {
            name: name.to_string(),
            partitions: -1,
            replication_factor: -1,
            configs: Vec::new(),
            validate_only: false,
        }
    }
}

/// One change to a config: a value to set, or `None` to remove the topic's own value
/// (the default applies again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigChange {
    pub name: String,
    pub value: Option<String>,
}

/// A header of a record; the value may be null.
pub type Header = (String, Option<Vec<u8>>);

/// One record to append.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProduceRecord {
    /// None: the producer's partitioner chooses (murmur2 of the key, as Kafka's).
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
    /// Milliseconds since the epoch (CreateTime); None: now.
    pub timestamp: Option<i64>,
}

/// Where a record was appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
}

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
    pub timestamp: Option<i64>,
}

impl Record {
    /// Bytes counted against a read's max_bytes.
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
    }
}

/// One partition of a topic as metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A topic as metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    pub configs: BTreeMap<String, String>,
}

/// A broker as metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: i32,
}

/// A consumer group as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupInfo {
    pub group: String,
    pub state: String,
    pub protocol_type: String,
    /// The assignor the members agreed on ("range", "cooperative-sticky", ...).
    pub protocol: String,
    pub members: Vec<MemberInfo>,
}

/// A member of a consumer group, with its assignment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberInfo {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
    pub assignment: Vec<TopicPartition>,
}

/// A partition a group has committed an offset for, with the partition's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    /// The high watermark.
    pub end: i64,
}

/// A stateless read's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    pub records: Vec<Record>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// `auto.offset.reset` of a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetReset {
    Earliest,
    #[default]
    Latest,
    /// Fail when there is no committed offset.
    None,
}

/// How a new group member is set up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerSettings {
    pub offset_reset: OffsetReset,
    pub auto_commit: bool,
}

/// A topic-partition and an offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A topic-partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// Seek to one end of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Beginning,
    End,
}

/// The cluster, as the gateway sees it.
#[async_trait]
pub trait Service: Send + Sync + 'static {
    /// Whether the cluster answers (for /readyz).
    async fn ready(&self) -> bool;
    async fn list_topics(&self) -> Result<Vec<String>, ServiceError>;
    /// UNKNOWN_TOPIC_OR_PARTITION when the topic does not exist.
    async fn describe_topic(&self, topic: &str) -> Result<TopicInfo, ServiceError>;
    /// The topic's partition count, for validating a produce before it starts; may be
    /// cached briefly (a produce to a partition that vanished still fails cleanly).
    async fn partition_count(&self, topic: &str) -> Result<i32, ServiceError> {
        Ok(self.describe_topic(topic).await?.partitions.len() as i32)
    }
    /// Appends records (acks=all) and answers each in order. The outer error is for
    /// failures before anything was appended.
    async fn produce(
        &self,
        topic: &str,
        records: Vec<ProduceRecord>,
    ) -> Result<Vec<Result<Produced, ServiceError>>, ServiceError>;
    /// Reads from `offset` (None: the log start) without a group: whole records up to about `max_bytes` (at
    /// least one), waiting up to `max_wait` when there is nothing yet.
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: Option<i64>,
        max_bytes: usize,
        max_wait: Duration,
    ) -> Result<ReadResult, ServiceError>;
    /// The brokers, by id.
    async fn list_brokers(&self) -> Result<Vec<BrokerInfo>, ServiceError>;
    /// Every consumer group with its members and their assignments.
    async fn list_groups(&self) -> Result<Vec<GroupInfo>, ServiceError>;
    /// The partitions `group` has committed offsets for, with their ends.
    async fn group_offsets(&self, group: &str) -> Result<Vec<GroupOffset>, ServiceError>;
    /// Creates a topic as `spec` says (TOPIC_ALREADY_EXISTS for one that exists); with
    /// `validate_only` the broker only checks it could.
    async fn create_topic_with(&self, spec: &NewTopicSpec) -> Result<(), ServiceError>;
    /// Creates `topic` with the cluster's default partitions and replication factor;
    /// one that exists already is fine (the dead-letter topics, made on first use).
    async fn create_topic(&self, topic: &str) -> Result<(), ServiceError> {
        match self.create_topic_with(&NewTopicSpec::defaults(topic)).await {
            Err(e) if e.code == codes::TOPIC_ALREADY_EXISTS => Ok(()),
            r => r,
        }
    }
    /// Deletes a topic and its records.
    async fn delete_topic(&self, topic: &str) -> Result<(), ServiceError>;
    /// Sets or removes (back to the default) a topic's configs in one incremental change
    /// (IncrementalAlterConfigs); with `validate_only` the broker only checks them.
    async fn alter_topic_configs(
        &self,
        topic: &str,
        changes: &[ConfigChange],
        validate_only: bool,
    ) -> Result<(), ServiceError>;
    /// A new member of consumer group `group`.
    async fn consumer(
        &self,
        group: &str,
        settings: ConsumerSettings,
    ) -> Result<Box<dyn GroupConsumer>, ServiceError>;
}

/// One member of a consumer group.
#[async_trait]
pub trait GroupConsumer: Send + Sync + 'static {
    async fn subscribe(&self, topics: Vec<String>) -> Result<(), ServiceError>;
    /// Subscribes to every topic whose whole name matches `pattern` (a regular
    /// expression), including topics created later (at the next metadata refresh).
    async fn subscribe_pattern(&self, pattern: &str) -> Result<(), ServiceError>;
    /// The subscribed topics (for a pattern: the matching topics assigned to this
    /// member).
    async fn unsubscribe(&self) -> Result<(), ServiceError>;
    async fn subscription(&self) -> Result<Vec<String>, ServiceError>;
    /// Records up to about `max_bytes` (at least one when any arrives), waiting up to
    /// `timeout`; returns early once records came and no more are ready.
    async fn poll(&self, timeout: Duration, max_bytes: usize) -> Result<Vec<Record>, ServiceError>;
    /// Commits the given next-offsets to read, or (None) the current positions.
    async fn commit(&self, offsets: Option<Vec<PartitionOffset>>) -> Result<(), ServiceError>;
    /// Committed next-offsets (-1 when none).
    async fn committed(
        &self,
        partitions: Vec<TopicPartition>,
    ) -> Result<Vec<PartitionOffset>, ServiceError>;
    /// The next poll returns these offsets (a held partition is read again). Each
    /// partition must be assigned to the member (NOT_ASSIGNED otherwise, and nothing
    /// moves).
    async fn seek(&self, offsets: Vec<PartitionOffset>) -> Result<(), ServiceError>;
    async fn seek_to(&self, partitions: Vec<TopicPartition>, end: End) -> Result<(), ServiceError>;
    /// Moves the member past `record` (its next poll of the partition starts after it)
    /// unless it is past it already, and reads a held partition again: after a nack,
    /// the member itself moves on, not only its group's committed offset (which a
    /// member reads only when it is assigned the partition). A partition assigned to
    /// another member is left to it.
    async fn move_past(&self, record: &PartitionOffset) -> Result<(), ServiceError>;
    /// Stops at `record`: its partition is read from it again, and not before a
    /// [`GroupConsumer::move_past`] or a seek (a stream waiting for the client's nack of
    /// a record it cannot show does not read the same record over and over).
    async fn hold(&self, record: &PartitionOffset) -> Result<(), ServiceError>;
    async fn assignment(&self) -> Result<Vec<TopicPartition>, ServiceError>;
    /// Leaves the group.
    async fn close(&self);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gateway's list of retriable codes before [`ServiceError::retriable`] followed
    /// Kafka's answer: every other code was not retriable.
    const OLD_RETRIABLE: &[i32] = &[
        5,       // LEADER_NOT_AVAILABLE
        6,       // NOT_LEADER_OR_FOLLOWER
        7,       // REQUEST_TIMED_OUT
        13,      // NETWORK_EXCEPTION
        15,      // COORDINATOR_NOT_AVAILABLE
        16,      // NOT_COORDINATOR
        19,      // NOT_ENOUGH_REPLICAS
        20,      // NOT_ENOUGH_REPLICAS_AFTER_APPEND
        27,      // REBALANCE_IN_PROGRESS
        56,      // KAFKA_STORAGE_ERROR
        89,      // THROTTLING_QUOTA_EXCEEDED
        -192,    // LOCAL_MSG_TIMED_OUT
        -195,    // LOCAL_TRANSPORT
        -187,    // LOCAL_ALL_BROKERS_DOWN
        -184,    // LOCAL_QUEUE_FULL
        -185,    // LOCAL_TIMED_OUT
        -10_001, // GATEWAY_QUEUE_FULL
    ];

    #[test]
    fn retriable_answers_as_the_old_list_for_every_code() {
        use codes::*;
        let named = [
            LOCAL_MSG_TIMED_OUT,
            LOCAL_TRANSPORT,
            LOCAL_ALL_BROKERS_DOWN,
            LOCAL_QUEUE_FULL,
            LOCAL_TIMED_OUT,
            LOCAL_MSG_SIZE_TOO_LARGE,
            LOCAL_UNKNOWN_PARTITION,
            LOCAL_UNKNOWN_TOPIC,
            LOCAL_STATE,
            LOCAL_INVALID_ARG,
            GATEWAY_QUEUE_FULL,
        ];
        // Kafka's codes, librdkafka's local range, the named codes, and codes outside
        // an i16.
        let all = (-1..=120).chain(-200..=-100).chain(named).chain([
            i32::from(i16::MIN),
            i32::from(i16::MAX),
            -40_000,
            40_000,
        ]);
        for code in all {
            assert_eq!(
                ServiceError::new(code, "").retriable(),
                OLD_RETRIABLE.contains(&code),
                "code {code}"
            );
        }
    }
}
