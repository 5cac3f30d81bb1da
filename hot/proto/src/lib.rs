//! Strata's wire-level model, shared by every other crate. It owns the Kafka formats the
//! broker stores and serves: ids, record batches, codecs, topic configs and error codes.
//! Nothing here does IO or depends on an async runtime.
//!
//! * [`api`]: the Kafka APIs and versions the broker serves.
//! * [`batch`]: a zero-copy view over RecordBatch v2 bytes, and a builder of batches.
//! * [`compression`]: bounded decompression of records for every Kafka codec.
//! * [`config`]: the topic-config keys Strata understands, Kafka's defaults, validation.
//! * [`consumer_protocol`]: the consumer protocol inside JoinGroup and SyncGroup payloads.
//! * [`control`]: transaction markers (control batches): encode one, read its kind.
//! * [`error`]: the Kafka error codes the broker answers with.
//! * [`ids`]: topic ids, partitions, offsets, leader epochs, producer ids.
//! * [`partitioner`]: Kafka's murmur2 partitioner for keyed records.
//! * [`rewrite`]: a stored batch rewritten with some of its records, as the log cleaner does.
//! * [`schema_codec`]: the versioned key/value fields of the coordinators' internal topics.
//! * [`topic_name`]: Kafka's rules for topic names.

pub mod api;
pub mod batch;
pub mod compression;
pub mod config;
pub mod consumer_protocol;
pub mod control;
pub mod error;
pub mod ids;
pub mod partitioner;
pub mod rewrite;
pub mod schema_codec;
pub mod topic_name;

pub use batch::{
    BatchError, BatchHeader, Compression, Record, RecordBatch, TimestampType,
    UnknownCompressionName,
};
pub use config::{CleanupPolicy, ConfigError, RemoteStorageFormat, ThrottledReplicas, TopicConfig};
pub use error::ErrorCode;
pub use ids::{
    LeaderEpoch, Offset, PartitionId, ProducerEpoch, ProducerId, TopicId, TopicPartition,
};
pub use topic_name::{InvalidTopicName, validate_topic_name};
