//! Strata's wire-level model, shared by every other crate.
//!
//! * [`ids`]: topic ids, partitions, offsets, leader epochs, producer ids.
//! * [`api`]: the Kafka APIs and versions the broker serves.
//! * [`batch`]: a zero-copy view over Kafka RecordBatch v2 bytes: header fields,
//!   CRC-32C validation, the offset/epoch rewrites a broker makes, and record
//!   iteration.
//! * [`compression`]: bounded decompression of records for every Kafka codec.
//! * [`control`]: transaction markers (control batches): encode one, read its kind.
//! * [`config`]: the topic-config keys Strata understands, with Kafka's defaults and
//!   validation.
//! * [`error`]: the Kafka error codes the broker answers with.
//! * [`partitioner`]: Kafka's murmur2 partitioner for keyed records.
//!
//! Nothing here does IO or depends on an async runtime.

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

pub use batch::{
    BatchError, BatchHeader, Compression, Record, RecordBatch, TimestampType,
    UnknownCompressionName,
};
pub use config::{CleanupPolicy, ConfigError, RemoteStorageFormat, ThrottledReplicas, TopicConfig};
pub use error::ErrorCode;
pub use ids::{
    LeaderEpoch, Offset, PartitionId, ProducerEpoch, ProducerId, TopicId, TopicPartition,
};
