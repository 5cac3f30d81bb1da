//! The one narrow interface between the gateway and a Kafka cluster. The HTTP layer
//! knows nothing else about the broker; `crate::kafka` implements it with librdkafka
//! against the broker's own Kafka listener, and the tests implement it in memory.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

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
    /// No Kafka code: the gateway itself refused (its produce queue is full).
    pub const GATEWAY_QUEUE_FULL: i32 = -10_001;
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

    /// Whether retrying the same call later can succeed (Kafka's RetriableException).
    pub fn retriable(&self) -> bool {
        use codes::*;
        matches!(
            self.code,
            LEADER_NOT_AVAILABLE
                | NOT_LEADER_OR_FOLLOWER
                | REQUEST_TIMED_OUT
                | NETWORK_EXCEPTION
                | COORDINATOR_NOT_AVAILABLE
                | NOT_COORDINATOR
                | NOT_ENOUGH_REPLICAS
                | NOT_ENOUGH_REPLICAS_AFTER_APPEND
                | REBALANCE_IN_PROGRESS
                | KAFKA_STORAGE_ERROR
                | THROTTLING_QUOTA_EXCEEDED
                | LOCAL_MSG_TIMED_OUT
                | LOCAL_TRANSPORT
                | LOCAL_ALL_BROKERS_DOWN
                | LOCAL_QUEUE_FULL
                | LOCAL_TIMED_OUT
                | GATEWAY_QUEUE_FULL
        )
    }
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
    /// The next poll returns these offsets.
    async fn seek(&self, offsets: Vec<PartitionOffset>) -> Result<(), ServiceError>;
    async fn seek_to(&self, partitions: Vec<TopicPartition>, end: End) -> Result<(), ServiceError>;
    async fn assignment(&self) -> Result<Vec<TopicPartition>, ServiceError>;
    /// Leaves the group.
    async fn close(&self);
}
