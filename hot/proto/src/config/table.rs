//! The topic-config key table: every key Strata understands, with its Kafka default, its
//! type and a one-line description (what DescribeConfigs reports). Parsing and validation
//! are in [`super`].

/// Keys and their Kafka defaults, as strings (what DescribeConfigs reports).
pub mod keys {
    pub const SEGMENT_BYTES: &str = "segment.bytes";
    pub const SEGMENT_MS: &str = "segment.ms";
    pub const RETENTION_MS: &str = "retention.ms";
    pub const RETENTION_BYTES: &str = "retention.bytes";
    pub const LOCAL_RETENTION_MS: &str = "local.retention.ms";
    pub const LOCAL_RETENTION_BYTES: &str = "local.retention.bytes";
    pub const REMOTE_STORAGE_ENABLE: &str = "remote.storage.enable";
    pub const REMOTE_STORAGE_FORMAT: &str = "remote.storage.format";
    pub const CLEANUP_POLICY: &str = "cleanup.policy";
    pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";
    pub const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
    pub const MAX_COMPACTION_LAG_MS: &str = "max.compaction.lag.ms";
    pub const MIN_CLEANABLE_DIRTY_RATIO: &str = "min.cleanable.dirty.ratio";
    pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
    pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
    pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
    pub const FLUSH_MESSAGES: &str = "flush.messages";
    pub const FLUSH_MS: &str = "flush.ms";
    pub const INDEX_INTERVAL_BYTES: &str = "index.interval.bytes";
    pub const MESSAGE_TIMESTAMP_TYPE: &str = "message.timestamp.type";
    pub const MESSAGE_TIMESTAMP_BEFORE_MAX_MS: &str = "message.timestamp.before.max.ms";
    pub const MESSAGE_TIMESTAMP_AFTER_MAX_MS: &str = "message.timestamp.after.max.ms";
    pub const MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS: &str = "message.timestamp.difference.max.ms";
    pub const COMPRESSION_TYPE: &str = "compression.type";
    pub const PARQUET_BACKFILL: &str = "parquet.backfill";
    pub const PARQUET_ENABLE: &str = "parquet.enable";
    pub const PARQUET_VALUE_FORMAT: &str = "parquet.value.format";
    pub const PARQUET_VALUE_SCHEMA: &str = "parquet.value.schema";
    pub const PARQUET_TARGET_FILE_BYTES: &str = "parquet.target.file.bytes";
    pub const LEADER_REPLICATION_THROTTLED_REPLICAS: &str = "leader.replication.throttled.replicas";
    pub const WRITES_CLOSED: &str = "writes.closed";
    pub const REPARTITIONED_TO: &str = "repartitioned.to";
    /// Confluent Server's broker-side schema validation (the registry's subject
    /// `TOPIC-value` / `TOPIC-key`, TopicNameStrategy).
    pub const VALUE_SCHEMA_VALIDATION: &str = "confluent.value.schema.validation";
    pub const KEY_SCHEMA_VALIDATION: &str = "confluent.key.schema.validation";
    pub const FOLLOWER_REPLICATION_THROTTLED_REPLICAS: &str =
        "follower.replication.throttled.replicas";
    /// Deprecated in Kafka 3.x, removed in 4.0: accepted (Kafka 3.x clients and tools
    /// still set them) and without effect.
    pub const MESSAGE_FORMAT_VERSION: &str = "message.format.version";
    pub const MESSAGE_DOWNCONVERSION_ENABLE: &str = "message.downconversion.enable";
}

/// The keys Kafka 3.x deprecated and 4.0 removed that Strata accepts without effect.
pub const DEPRECATED_NO_OPS: &[&str] = &[
    keys::MESSAGE_DOWNCONVERSION_ENABLE,
    keys::MESSAGE_FORMAT_VERSION,
];

/// Every key with its default, in the order DescribeConfigs lists them.
pub const DEFAULTS: &[(&str, &str)] = &[
    (keys::CLEANUP_POLICY, "delete"),
    (keys::COMPRESSION_TYPE, "producer"),
    (keys::KEY_SCHEMA_VALIDATION, "false"),
    (keys::VALUE_SCHEMA_VALIDATION, "false"),
    (keys::DELETE_RETENTION_MS, "86400000"),
    (keys::FLUSH_MESSAGES, "9223372036854775807"),
    (keys::FLUSH_MS, "9223372036854775807"),
    (keys::FOLLOWER_REPLICATION_THROTTLED_REPLICAS, ""),
    (keys::INDEX_INTERVAL_BYTES, "4096"),
    (keys::LEADER_REPLICATION_THROTTLED_REPLICAS, ""),
    (keys::LOCAL_RETENTION_BYTES, "-2"),
    (keys::LOCAL_RETENTION_MS, "-2"),
    (keys::MAX_COMPACTION_LAG_MS, "9223372036854775807"),
    (keys::MAX_MESSAGE_BYTES, "1048588"),
    (keys::MIN_CLEANABLE_DIRTY_RATIO, "0.5"),
    (keys::MIN_COMPACTION_LAG_MS, "0"),
    (keys::MESSAGE_TIMESTAMP_AFTER_MAX_MS, "9223372036854775807"),
    (keys::MESSAGE_TIMESTAMP_BEFORE_MAX_MS, "9223372036854775807"),
    (
        keys::MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS,
        "9223372036854775807",
    ),
    (keys::MESSAGE_TIMESTAMP_TYPE, "CreateTime"),
    (keys::MESSAGE_DOWNCONVERSION_ENABLE, "true"),
    (keys::MESSAGE_FORMAT_VERSION, "3.0-IV1"),
    (keys::MIN_INSYNC_REPLICAS, "1"),
    (keys::PARQUET_BACKFILL, "false"),
    (keys::PARQUET_ENABLE, "false"),
    (keys::PARQUET_TARGET_FILE_BYTES, "134217728"),
    (keys::PARQUET_VALUE_FORMAT, "binary"),
    (keys::PARQUET_VALUE_SCHEMA, ""),
    (keys::REMOTE_STORAGE_ENABLE, "false"),
    (keys::REPARTITIONED_TO, ""),
    (keys::REMOTE_STORAGE_FORMAT, "segments"),
    (keys::RETENTION_BYTES, "-1"),
    (keys::RETENTION_MS, "604800000"),
    (keys::SEGMENT_BYTES, "1073741824"),
    (keys::SEGMENT_MS, "604800000"),
    (keys::UNCLEAN_LEADER_ELECTION_ENABLE, "false"),
    (keys::WRITES_CLOSED, "false"),
];

/// A config value's type, as DescribeConfigs v3+ reports it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ConfigType {
    Boolean,
    String,
    Int,
    Long,
    Double,
    List,
}

impl ConfigType {
    /// The type id on the wire (Kafka's DescribeConfigsResponse ConfigType).
    pub fn wire_id(self) -> i8 {
        match self {
            ConfigType::Boolean => 1,
            ConfigType::String => 2,
            ConfigType::Int => 3,
            ConfigType::Long => 5,
            ConfigType::Double => 6,
            ConfigType::List => 7,
        }
    }
}

/// The type and a one-line description of each key.
pub fn key_info(key: &str) -> Option<(ConfigType, &'static str)> {
    use ConfigType::*;
    Some(match key {
        keys::SEGMENT_BYTES => (
            Int,
            "Roll the active segment when it would exceed this many bytes.",
        ),
        keys::SEGMENT_MS => (
            Long,
            "Roll the active segment when its first record is this old.",
        ),
        keys::RETENTION_MS => (
            Long,
            "Keep the log (local plus remote) this long; -1 keeps forever.",
        ),
        keys::RETENTION_BYTES => (
            Long,
            "Keep at most this many bytes per partition (local plus remote); -1 is unbounded.",
        ),
        keys::LOCAL_RETENTION_MS => (
            Long,
            "Keep the local copy this long when tiering is on; -2 means retention.ms.",
        ),
        keys::LOCAL_RETENTION_BYTES => (
            Long,
            "Keep at most this many local bytes per partition when tiering is on; -2 means retention.bytes.",
        ),
        keys::REMOTE_STORAGE_ENABLE => (Boolean, "Offload sealed segments to object storage."),
        keys::CLEANUP_POLICY => (
            List,
            "delete expires old segments by retention.ms/bytes; compact keeps the latest record per key; compact,delete does both.",
        ),
        keys::DELETE_RETENTION_MS => (
            Long,
            "Compacted topics: keep a tombstone this long after the cleaner first passes it.",
        ),
        keys::MIN_COMPACTION_LAG_MS => (
            Long,
            "Compacted topics: never clean a record younger than this.",
        ),
        keys::MAX_COMPACTION_LAG_MS => (
            Long,
            "Compacted topics: clean a record at the latest this long after it was written, whatever the dirty ratio.",
        ),
        keys::MIN_CLEANABLE_DIRTY_RATIO => (
            Double,
            "Compacted topics: clean once this share of the log is uncleaned.",
        ),
        keys::MIN_INSYNC_REPLICAS => (Int, "acks=all writes need this many in-sync replicas."),
        keys::MAX_MESSAGE_BYTES => (Int, "The largest record batch accepted."),
        keys::UNCLEAN_LEADER_ELECTION_ENABLE => (
            Boolean,
            "Allow an out-of-sync replica to become leader (may lose data).",
        ),
        keys::FLUSH_MESSAGES => (Long, "fsync after this many records."),
        keys::FLUSH_MS => (Long, "fsync when unflushed data is this old."),
        keys::INDEX_INTERVAL_BYTES => (Int, "Bytes between sparse offset-index entries."),
        keys::MESSAGE_TIMESTAMP_TYPE => (
            String,
            "CreateTime keeps the producer's timestamps; LogAppendTime uses the broker's.",
        ),
        keys::MESSAGE_TIMESTAMP_BEFORE_MAX_MS => (
            Long,
            "CreateTime topics: refuse a record whose timestamp is more than this far before the broker's clock (INVALID_TIMESTAMP).",
        ),
        keys::MESSAGE_TIMESTAMP_AFTER_MAX_MS => (
            Long,
            "CreateTime topics: refuse a record whose timestamp is more than this far after the broker's clock (INVALID_TIMESTAMP).",
        ),
        keys::MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS => (
            Long,
            "Deprecated: both bounds at once, where message.timestamp.before.max.ms or .after.max.ms is not set.",
        ),
        keys::COMPRESSION_TYPE => (
            String,
            "producer keeps each batch's codec; uncompressed, gzip, snappy, lz4 or zstd has the broker recompress batches that arrive in another codec.",
        ),
        keys::PARQUET_BACKFILL => (
            Boolean,
            "Parquet files start at the log start, converting segments already offloaded before parquet.enable was set; false starts where conversion was turned on (Strata).",
        ),
        keys::PARQUET_ENABLE => (
            Boolean,
            "Also write offloaded segments as Parquet (Strata).",
        ),
        keys::REMOTE_STORAGE_FORMAT => (
            String,
            "segments offloads raw segments; parquet keeps only the Parquet files in the bucket and answers fetches below the local start from them (needs parquet.enable and binary values; Strata).",
        ),
        keys::PARQUET_TARGET_FILE_BYTES => (
            Long,
            "Small Parquet files of a partition and UTC day are rewritten into files of about this size (Strata).",
        ),
        keys::PARQUET_VALUE_FORMAT => (
            String,
            "binary keeps Parquet's value column as bytes; json with parquet.value.schema writes typed columns (Strata).",
        ),
        keys::LEADER_REPLICATION_THROTTLED_REPLICAS => (
            List,
            "Replicas whose leader-side replication is throttled to the broker's leader.replication.throttled.rate while out of sync: PARTITION:BROKER,... or * (reassignment's adding replicas always are).",
        ),
        keys::FOLLOWER_REPLICATION_THROTTLED_REPLICAS => (
            List,
            "Replicas whose follower-side replication is throttled to the broker's follower.replication.throttled.rate while out of sync: PARTITION:BROKER,... or * (reassignment's adding replicas always are).",
        ),
        keys::MESSAGE_FORMAT_VERSION => (
            String,
            "Deprecated (Kafka 3.x; removed in 4.0): accepted, no effect. Batches are stored as the producer sent them (RecordBatch v2).",
        ),
        keys::MESSAGE_DOWNCONVERSION_ENABLE => (
            Boolean,
            "Deprecated (Kafka 3.x; removed in 4.0): accepted, no effect. Fetches below v4 are not served, so nothing is down-converted.",
        ),
        keys::WRITES_CLOSED => (
            Boolean,
            "Refuse every produce with POLICY_VIOLATION (a topic closed by `strata topic repartition`, or one not open yet) (Strata).",
        ),
        keys::REPARTITIONED_TO => (
            String,
            "The topic this one was repartitioned into, named in the error producers get (Strata).",
        ),
        keys::PARQUET_VALUE_SCHEMA => (
            String,
            "The Arrow schema of JSON values, as JSON: {\"fields\":[{\"name\":..,\"type\":..}]}; empty for none (Strata).",
        ),
        keys::VALUE_SCHEMA_VALIDATION => (
            Boolean,
            "Refuse a batch with a record whose value does not carry, in Confluent's wire format, the id of a schema registered under the subject TOPIC-value (INVALID_RECORD; Confluent Server).",
        ),
        keys::KEY_SCHEMA_VALIDATION => (
            Boolean,
            "The same for record keys and the subject TOPIC-key (Confluent Server).",
        ),
        _ => return None,
    })
}
