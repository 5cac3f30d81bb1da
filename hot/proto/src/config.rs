//! Topic configuration: the keys Strata understands, Kafka's defaults, validation.
//!
//! Names are Kafka's wherever Kafka has one, so Kafka's tools and clients configure
//! Strata unchanged. A topic stores only the keys it overrides; [`TopicConfig`] is the
//! resolved view with defaults filled in.
//! Unknown keys and bad values are refused with INVALID_CONFIG, as Kafka does.

use std::collections::BTreeMap;
use std::fmt;

use crate::batch::Compression;
use crate::error::ErrorCode;

mod table;

pub use table::{ConfigType, DEFAULTS, DEPRECATED_NO_OPS, key_info, keys};

/// What to do with old data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CleanupPolicy {
    Delete,
    Compact,
    CompactDelete,
}

impl CleanupPolicy {
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        })
    }
}

/// Whether record timestamps are the producer's or the broker's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MessageTimestampType {
    CreateTime,
    LogAppendTime,
}

/// How `parquet.value.format` says record values are written to Parquet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ParquetValueFormat {
    /// The value column holds the record value's bytes as they are.
    Binary,
    /// Values are JSON: with a `parquet.value.schema` they become typed columns (see the
    /// strata-parquet crate); without one the value column stays binary.
    Json,
}

impl fmt::Display for ParquetValueFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParquetValueFormat::Binary => "binary",
            ParquetValueFormat::Json => "json",
        })
    }
}

/// A config key or value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown topic config '{0}'")]
    UnknownKey(String),
    #[error("invalid value '{value}' for topic config '{key}': {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error("inconsistent topic configs: {0}")]
    Inconsistent(String),
}

impl ConfigError {
    pub fn error_code(&self) -> ErrorCode {
        ErrorCode::InvalidConfig
    }
}

/// A topic's resolved configuration.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TopicConfig {
    /// Roll the active segment when it would exceed this many bytes.
    pub segment_bytes: u64,
    /// Roll the active segment when its first batch is this old.
    pub segment_ms: i64,
    /// Total retention by time (local plus remote); -1 keeps forever.
    pub retention_ms: i64,
    /// Total retention by size per partition; -1 is unbounded.
    pub retention_bytes: i64,
    /// Local retention by time; -2 means "same as retention.ms" (KIP-405).
    pub local_retention_ms: i64,
    /// Local retention by size; -2 means "same as retention.bytes" (KIP-405).
    pub local_retention_bytes: i64,
    pub remote_storage_enable: bool,
    pub cleanup_policy: CleanupPolicy,
    /// Compacted topics: tombstones stay this long after the cleaner first passes them.
    pub delete_retention_ms: i64,
    /// Compacted topics: records younger than this are not cleaned.
    pub min_compaction_lag_ms: i64,
    /// Compacted topics: records are cleaned at the latest this long after they were
    /// written (KIP-354).
    pub max_compaction_lag_ms: i64,
    /// Compacted topics: clean once the uncleaned share of the log reaches this, in
    /// millionths (0.5 is 500 000), so that the config stays `Eq`.
    pub min_cleanable_dirty_ratio_ppm: u32,
    pub min_insync_replicas: i32,
    /// Largest batch a producer may send (Kafka's max.message.bytes counts the batch).
    pub max_message_bytes: u64,
    pub unclean_leader_election_enable: bool,
    /// fsync after this many messages (records) since the last fsync.
    pub flush_messages: i64,
    /// fsync when the oldest unflushed data is this old.
    pub flush_ms: i64,
    /// Bytes between sparse offset/time index entries.
    pub index_interval_bytes: u64,
    pub message_timestamp_type: MessageTimestampType,
    /// CreateTime topics: how far before the broker's clock a record's timestamp may be;
    /// `i64::MAX`, the default, means message.timestamp.difference.max.ms applies (as
    /// Kafka's LogConfig reads it).
    pub message_timestamp_before_max_ms: i64,
    /// The same after the broker's clock.
    pub message_timestamp_after_max_ms: i64,
    /// The deprecated bound for both directions.
    pub message_timestamp_difference_max_ms: i64,
    /// The codec batches are stored in; `None`: the producer's (compression.type=producer).
    pub compression_type: Option<Compression>,
    /// Strata: also write offloaded segments as Parquet.
    pub parquet_enable: bool,
    /// Strata: Parquet files start at the log start (remote segments included).
    pub parquet_backfill: bool,
    /// Strata: how record values are written to Parquet.
    pub parquet_value_format: ParquetValueFormat,
    /// Strata: the schema of JSON values (JSON text, checked in full by the strata-parquet
    /// crate, which owns the format); `None` when unset.
    pub parquet_value_schema: Option<String>,
    /// Strata: the size small Parquet files are compacted into.
    pub parquet_target_file_bytes: u64,
    /// Strata: what the bucket keeps of the sealed log.
    pub remote_storage_format: RemoteStorageFormat,
    /// leader.replication.throttled.replicas.
    pub leader_throttled_replicas: ThrottledReplicas,
    /// follower.replication.throttled.replicas.
    pub follower_throttled_replicas: ThrottledReplicas,
    /// Strata: produce is refused (POLICY_VIOLATION).
    pub writes_closed: bool,
    /// Strata: where the topic was repartitioned into; `None` when unset.
    pub repartitioned_to: Option<String>,
    /// confluent.value.schema.validation: values must name a schema id registered
    /// under the subject `TOPIC-value`.
    pub value_schema_validation: bool,
    /// confluent.key.schema.validation: the same for keys and `TOPIC-key`.
    pub key_schema_validation: bool,
}

/// Kafka's `*.replication.throttled.replicas`: which replicas' replication the broker's
/// throttle rate applies to.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub enum ThrottledReplicas {
    #[default]
    None,
    /// `*`: every replica of the topic.
    All,
    /// `PARTITION:BROKER` pairs.
    Listed(Vec<(i32, i32)>),
}

impl ThrottledReplicas {
    pub fn contains(&self, partition: i32, broker: i32) -> bool {
        match self {
            ThrottledReplicas::None => false,
            ThrottledReplicas::All => true,
            ThrottledReplicas::Listed(l) => l.contains(&(partition, broker)),
        }
    }

    fn parse(key: &str, value: &str) -> Result<ThrottledReplicas, ConfigError> {
        let v = value.trim();
        if v.is_empty() {
            return Ok(ThrottledReplicas::None);
        }
        if v == "*" {
            return Ok(ThrottledReplicas::All);
        }
        let mut out = Vec::new();
        for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let pair = item.split_once(':').and_then(|(p, b)| {
                Some((p.trim().parse::<i32>().ok()?, b.trim().parse::<i32>().ok()?))
            });
            match pair {
                Some((p, b)) if p >= 0 && b >= 0 => out.push((p, b)),
                _ => {
                    return Err(invalid(
                        key,
                        value,
                        format!("'{item}' is not PARTITION:BROKER (or use * for every replica)"),
                    ));
                }
            }
        }
        Ok(ThrottledReplicas::Listed(out))
    }
}

/// `remote.storage.format`: what the bucket keeps of a tiered topic's sealed log.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum RemoteStorageFormat {
    /// Raw segments (Kafka's tiered storage), and Parquet beside them with
    /// parquet.enable.
    #[default]
    Segments,
    /// Only the Parquet files (one copy): fetches below the local start are re-encoded
    /// from them. Needs parquet.enable=true and binary values.
    Parquet,
}

impl RemoteStorageFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            RemoteStorageFormat::Segments => "segments",
            RemoteStorageFormat::Parquet => "parquet",
        }
    }
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig::resolve(&BTreeMap::new()).expect("the built-in defaults are valid")
    }
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

fn parse_long(key: &str, value: &str, min: i64) -> Result<i64, ConfigError> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, "not an integer"))?;
    if v < min {
        return Err(invalid(key, value, format!("must be at least {min}")));
    }
    Ok(v)
}

fn parse_int(key: &str, value: &str, min: i32) -> Result<i32, ConfigError> {
    let v = parse_long(key, value, min as i64)?;
    i32::try_from(v).map_err(|_| invalid(key, value, "must fit in a 32-bit integer"))
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, value, "must be true or false")),
    }
}

impl TopicConfig {
    /// How far before and after the broker's clock a CreateTime record's timestamp may
    /// be (Kafka's message.timestamp.before.max.ms and .after.max.ms, each falling back
    /// to the deprecated message.timestamp.difference.max.ms); `None` for LogAppendTime
    /// topics, whose records take the broker's time.
    pub fn timestamp_bounds(&self) -> Option<(i64, i64)> {
        if self.message_timestamp_type == MessageTimestampType::LogAppendTime {
            return None;
        }
        let d = self.message_timestamp_difference_max_ms;
        let or_difference = |v: i64| if v == i64::MAX { d } else { v };
        Some((
            or_difference(self.message_timestamp_before_max_ms),
            or_difference(self.message_timestamp_after_max_ms),
        ))
    }

    /// Checks one key/value pair in isolation.
    pub fn validate_entry(key: &str, value: &str) -> Result<(), ConfigError> {
        let mut probe = TopicConfig::resolve(&BTreeMap::new()).expect("defaults are valid");
        probe.apply(key, value)
    }

    /// The default value of a key, if the key is known.
    pub fn default_value(key: &str) -> Option<&'static str> {
        DEFAULTS.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn apply(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            keys::SEGMENT_BYTES => {
                // Kafka 3.x's minimum is 14 bytes (one legacy record's overhead); we keep
                // it so tests can roll small segments.
                self.segment_bytes = parse_int(key, value, 14)? as u64;
            }
            keys::SEGMENT_MS => self.segment_ms = parse_long(key, value, 1)?,
            keys::RETENTION_MS => self.retention_ms = parse_long(key, value, -1)?,
            keys::RETENTION_BYTES => self.retention_bytes = parse_long(key, value, -1)?,
            keys::LOCAL_RETENTION_MS => self.local_retention_ms = parse_long(key, value, -2)?,
            keys::LOCAL_RETENTION_BYTES => self.local_retention_bytes = parse_long(key, value, -2)?,
            keys::REMOTE_STORAGE_ENABLE => self.remote_storage_enable = parse_bool(key, value)?,
            keys::REMOTE_STORAGE_FORMAT => {
                self.remote_storage_format = match value.trim().to_ascii_lowercase().as_str() {
                    "segments" => RemoteStorageFormat::Segments,
                    "parquet" => RemoteStorageFormat::Parquet,
                    _ => return Err(invalid(key, value, "must be segments or parquet")),
                }
            }
            keys::CLEANUP_POLICY => {
                let mut parts: Vec<String> = value
                    .split(',')
                    .map(|p| p.trim().to_ascii_lowercase())
                    .filter(|p| !p.is_empty())
                    .collect();
                parts.sort();
                parts.dedup();
                self.cleanup_policy = match parts.iter().map(String::as_str).collect::<Vec<_>>()[..]
                {
                    ["delete"] => CleanupPolicy::Delete,
                    ["compact"] => CleanupPolicy::Compact,
                    ["compact", "delete"] => CleanupPolicy::CompactDelete,
                    _ => {
                        return Err(invalid(
                            key,
                            value,
                            "must be delete, compact or compact,delete",
                        ));
                    }
                };
            }
            keys::DELETE_RETENTION_MS => self.delete_retention_ms = parse_long(key, value, 0)?,
            keys::MIN_COMPACTION_LAG_MS => self.min_compaction_lag_ms = parse_long(key, value, 0)?,
            keys::MAX_COMPACTION_LAG_MS => self.max_compaction_lag_ms = parse_long(key, value, 1)?,
            keys::MIN_CLEANABLE_DIRTY_RATIO => {
                let v: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid(key, value, "not a number"))?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(invalid(key, value, "must be between 0 and 1"));
                }
                self.min_cleanable_dirty_ratio_ppm = (v * 1e6).round() as u32;
            }
            keys::MIN_INSYNC_REPLICAS => self.min_insync_replicas = parse_int(key, value, 1)?,
            keys::MAX_MESSAGE_BYTES => self.max_message_bytes = parse_int(key, value, 0)? as u64,
            keys::UNCLEAN_LEADER_ELECTION_ENABLE => {
                self.unclean_leader_election_enable = parse_bool(key, value)?
            }
            keys::FLUSH_MESSAGES => self.flush_messages = parse_long(key, value, 1)?,
            keys::FLUSH_MS => self.flush_ms = parse_long(key, value, 0)?,
            keys::INDEX_INTERVAL_BYTES => {
                self.index_interval_bytes = parse_int(key, value, 0)? as u64
            }
            keys::MESSAGE_TIMESTAMP_TYPE => {
                self.message_timestamp_type = match value.trim() {
                    "CreateTime" => MessageTimestampType::CreateTime,
                    "LogAppendTime" => MessageTimestampType::LogAppendTime,
                    _ => return Err(invalid(key, value, "must be CreateTime or LogAppendTime")),
                }
            }
            keys::MESSAGE_TIMESTAMP_BEFORE_MAX_MS => {
                self.message_timestamp_before_max_ms = parse_long(key, value, 0)?
            }
            keys::MESSAGE_TIMESTAMP_AFTER_MAX_MS => {
                self.message_timestamp_after_max_ms = parse_long(key, value, 0)?
            }
            keys::MESSAGE_TIMESTAMP_DIFFERENCE_MAX_MS => {
                self.message_timestamp_difference_max_ms = parse_long(key, value, 0)?
            }
            keys::COMPRESSION_TYPE => {
                self.compression_type = match value.trim().to_ascii_lowercase().as_str() {
                    "producer" => None,
                    "uncompressed" | "none" => Some(Compression::None),
                    other => Some(other.parse().map_err(|_| {
                        invalid(
                            key,
                            value,
                            "must be producer, uncompressed, gzip, snappy, lz4 or zstd",
                        )
                    })?),
                }
            }
            keys::PARQUET_ENABLE => self.parquet_enable = parse_bool(key, value)?,
            keys::PARQUET_BACKFILL => self.parquet_backfill = parse_bool(key, value)?,
            keys::PARQUET_TARGET_FILE_BYTES => {
                self.parquet_target_file_bytes = parse_long(key, value, 1)? as u64
            }
            keys::PARQUET_VALUE_FORMAT => {
                self.parquet_value_format = match value.trim().to_ascii_lowercase().as_str() {
                    "binary" => ParquetValueFormat::Binary,
                    "json" => ParquetValueFormat::Json,
                    _ => return Err(invalid(key, value, "must be binary or json")),
                }
            }
            keys::PARQUET_VALUE_SCHEMA => {
                let v = value.trim();
                // Only the outline is checked here: this crate has no JSON parser, and the
                // format belongs to strata-parquet (`ValueSchema::parse`); the broker
                // checks the whole schema when the config is set (strata-tier's
                // `Tiering::check_config`). An empty value unsets the schema, so the
                // default ("") round-trips through DescribeConfigs.
                self.parquet_value_schema = if v.is_empty() {
                    None
                } else if v.starts_with('{') && v.ends_with('}') {
                    Some(v.to_string())
                } else {
                    return Err(invalid(key, value, "must be a JSON object"));
                };
            }
            keys::WRITES_CLOSED => self.writes_closed = parse_bool(key, value)?,
            keys::VALUE_SCHEMA_VALIDATION => self.value_schema_validation = parse_bool(key, value)?,
            keys::KEY_SCHEMA_VALIDATION => self.key_schema_validation = parse_bool(key, value)?,
            // Kafka 3.x's deprecated keys: taken (old clients and tools set them), checked
            // for their type, and without effect (`table::DEPRECATED_NO_OPS`).
            keys::MESSAGE_DOWNCONVERSION_ENABLE => {
                parse_bool(key, value)?;
            }
            keys::MESSAGE_FORMAT_VERSION => {
                if value.trim().is_empty() {
                    return Err(invalid(
                        key,
                        value,
                        "must be a Kafka version such as 3.0-IV1",
                    ));
                }
            }
            keys::REPARTITIONED_TO => {
                let v = value.trim();
                self.repartitioned_to = (!v.is_empty()).then(|| v.to_string());
            }
            keys::LEADER_REPLICATION_THROTTLED_REPLICAS => {
                self.leader_throttled_replicas = ThrottledReplicas::parse(key, value)?
            }
            keys::FOLLOWER_REPLICATION_THROTTLED_REPLICAS => {
                self.follower_throttled_replicas = ThrottledReplicas::parse(key, value)?
            }
            _ => return Err(ConfigError::UnknownKey(key.to_string())),
        }
        Ok(())
    }

    /// Resolves a topic's overrides against the defaults, validating each key and the
    /// combination (KIP-405: local retention may not exceed total retention).
    pub fn resolve(overrides: &BTreeMap<String, String>) -> Result<TopicConfig, ConfigError> {
        let mut c = TopicConfig {
            segment_bytes: 1 << 30,
            segment_ms: 604_800_000,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            local_retention_ms: -2,
            local_retention_bytes: -2,
            remote_storage_enable: false,
            cleanup_policy: CleanupPolicy::Delete,
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio_ppm: 500_000,
            min_insync_replicas: 1,
            max_message_bytes: 1_048_588,
            unclean_leader_election_enable: false,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            index_interval_bytes: 4096,
            message_timestamp_type: MessageTimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: i64::MAX,
            message_timestamp_difference_max_ms: i64::MAX,
            compression_type: None,
            parquet_enable: false,
            parquet_backfill: false,
            parquet_value_format: ParquetValueFormat::Binary,
            parquet_value_schema: None,
            parquet_target_file_bytes: 128 << 20,
            remote_storage_format: RemoteStorageFormat::Segments,
            leader_throttled_replicas: ThrottledReplicas::None,
            follower_throttled_replicas: ThrottledReplicas::None,
            writes_closed: false,
            repartitioned_to: None,
            value_schema_validation: false,
            key_schema_validation: false,
        };
        for (k, v) in overrides {
            c.apply(k, v)?;
        }
        c.check_consistency()?;
        Ok(c)
    }

    fn check_consistency(&self) -> Result<(), ConfigError> {
        if self.retention_ms >= 0
            && self.local_retention_ms >= 0
            && self.local_retention_ms > self.retention_ms
        {
            return Err(ConfigError::Inconsistent(format!(
                "local.retention.ms ({}) must not exceed retention.ms ({})",
                self.local_retention_ms, self.retention_ms
            )));
        }
        if self.retention_bytes >= 0
            && self.local_retention_bytes >= 0
            && self.local_retention_bytes > self.retention_bytes
        {
            return Err(ConfigError::Inconsistent(format!(
                "local.retention.bytes ({}) must not exceed retention.bytes ({})",
                self.local_retention_bytes, self.retention_bytes
            )));
        }
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(ConfigError::Inconsistent(format!(
                "min.compaction.lag.ms ({}) must not exceed max.compaction.lag.ms ({})",
                self.min_compaction_lag_ms, self.max_compaction_lag_ms
            )));
        }
        // Parquet files are immutable: compaction could not remove what they hold.
        if self.cleanup_policy.compacts() && self.parquet_enable {
            return Err(ConfigError::Inconsistent(
                "parquet.enable=true with cleanup.policy=compact is not supported: Parquet files would keep every overwritten value".into(),
            ));
        }
        if self.parquet_enable && !self.remote_storage_enable {
            return Err(ConfigError::Inconsistent(
                "parquet.enable=true needs remote.storage.enable=true".into(),
            ));
        }
        // One copy: the Parquet files are the only copy of the sealed log, and Kafka
        // batches are re-encoded from them, which takes the bytes producers sent.
        if self.remote_storage_format == RemoteStorageFormat::Parquet {
            if !self.remote_storage_enable || !self.parquet_enable {
                return Err(ConfigError::Inconsistent(
                    "remote.storage.format=parquet needs remote.storage.enable=true and parquet.enable=true".into(),
                ));
            }
            if self.parquet_value_format != ParquetValueFormat::Binary {
                return Err(ConfigError::Inconsistent(
                    "remote.storage.format=parquet needs parquet.value.format=binary: typed JSON columns do not keep the bytes producers sent, which fetches must return".into(),
                ));
            }
        }
        // A schema with the binary format would be silently ignored; refuse it so a
        // forgotten parquet.value.format=json shows up when the topic is configured.
        if self.parquet_value_schema.is_some()
            && self.parquet_value_format != ParquetValueFormat::Json
        {
            return Err(ConfigError::Inconsistent(
                "parquet.value.schema needs parquet.value.format=json".into(),
            ));
        }
        Ok(())
    }

    /// The time bound for the local copy: local.retention.ms when tiering is on (with -2
    /// meaning retention.ms), otherwise retention.ms. `None` keeps forever.
    pub fn effective_local_retention_ms(&self) -> Option<i64> {
        if !self.cleanup_policy.deletes() {
            // cleanup.policy=compact: nothing expires by time or size, except that a
            // tiered topic's local copy may be bounded (the bucket holds all of it).
            let local = self.remote_storage_enable && self.local_retention_ms >= 0;
            return local.then_some(self.local_retention_ms);
        }
        let v = if self.remote_storage_enable && self.local_retention_ms != -2 {
            self.local_retention_ms
        } else {
            self.retention_ms
        };
        (v >= 0).then_some(v)
    }

    /// The size bound for the local copy, as [`Self::effective_local_retention_ms`].
    pub fn effective_local_retention_bytes(&self) -> Option<u64> {
        if !self.cleanup_policy.deletes() {
            let local = self.remote_storage_enable && self.local_retention_bytes >= 0;
            return local.then_some(self.local_retention_bytes as u64);
        }
        let v = if self.remote_storage_enable && self.local_retention_bytes != -2 {
            self.local_retention_bytes
        } else {
            self.retention_bytes
        };
        (v >= 0).then_some(v as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_match_kafka() {
        let c = TopicConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.retention_ms, 7 * 24 * 3600 * 1000);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
        assert_eq!(c.effective_local_retention_ms(), Some(604_800_000));
        assert_eq!(c.effective_local_retention_bytes(), None);
        // The string table agrees with the typed defaults.
        for (k, v) in DEFAULTS {
            assert_eq!(TopicConfig::resolve(&map(&[(k, v)])).unwrap(), c, "{k}");
        }
    }

    #[test]
    fn compression_type_and_timestamp_bounds() {
        let c = |pairs: &[(&str, &str)]| TopicConfig::resolve(&map(pairs));
        assert_eq!(c(&[]).unwrap().compression_type, None);
        assert_eq!(
            c(&[("compression.type", "zstd")]).unwrap().compression_type,
            Some(Compression::Zstd)
        );
        assert_eq!(
            c(&[("compression.type", "uncompressed")])
                .unwrap()
                .compression_type,
            Some(Compression::None)
        );
        let e = c(&[("compression.type", "brotli")]).unwrap_err();
        assert!(e.to_string().contains("producer, uncompressed"), "{e}");

        assert_eq!(
            c(&[]).unwrap().timestamp_bounds(),
            Some((i64::MAX, i64::MAX))
        );
        // The deprecated difference applies where a bound is not set.
        let t = c(&[
            ("message.timestamp.difference.max.ms", "5000"),
            ("message.timestamp.after.max.ms", "1000"),
        ])
        .unwrap();
        assert_eq!(t.timestamp_bounds(), Some((5000, 1000)));
        let t = c(&[
            ("message.timestamp.before.max.ms", "1000"),
            ("message.timestamp.type", "LogAppendTime"),
        ])
        .unwrap();
        assert_eq!(t.timestamp_bounds(), None);
    }

    #[test]
    fn one_copy_needs_tiering_parquet_and_binary_values() {
        let one_copy = [
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("remote.storage.format", "parquet"),
        ];
        let c = TopicConfig::resolve(&map(&one_copy)).unwrap();
        assert_eq!(c.remote_storage_format, RemoteStorageFormat::Parquet);
        for leave_out in 0..2 {
            let mut pairs = one_copy.to_vec();
            pairs.remove(leave_out);
            let e = TopicConfig::resolve(&map(&pairs)).unwrap_err();
            assert!(
                e.to_string().contains("needs remote.storage.enable=true"),
                "{e}"
            );
        }
        let mut json = one_copy.to_vec();
        json.push(("parquet.value.format", "json"));
        let e = TopicConfig::resolve(&map(&json)).unwrap_err();
        assert!(
            e.to_string().contains("needs parquet.value.format=binary"),
            "{e}"
        );
        assert!(key_info(keys::REMOTE_STORAGE_FORMAT).is_some());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert_eq!(
            TopicConfig::resolve(&map(&[("segment.byte", "1")])).unwrap_err(),
            ConfigError::UnknownKey("segment.byte".into())
        );
        for (k, v) in [
            ("segment.bytes", "13"),
            ("segment.bytes", "abc"),
            ("segment.bytes", "99999999999"),
            ("retention.ms", "-3"),
            ("min.insync.replicas", "0"),
            ("remote.storage.enable", "yes"),
            ("cleanup.policy", "archive"),
            ("message.timestamp.type", "Now"),
            ("parquet.value.format", "avro"),
            ("parquet.value.schema", "user:utf8"),
            ("remote.storage.format", "columns"),
        ] {
            let e = TopicConfig::validate_entry(k, v).unwrap_err();
            assert_eq!(e.error_code(), ErrorCode::InvalidConfig);
            assert!(e.to_string().contains(k), "{e}");
        }
    }

    #[test]
    fn compaction_configs_and_what_they_turn_off() {
        let c = TopicConfig::resolve(&map(&[
            ("cleanup.policy", "compact"),
            ("min.cleanable.dirty.ratio", "0.25"),
            ("delete.retention.ms", "1000"),
            ("min.compaction.lag.ms", "5"),
        ]))
        .unwrap();
        assert_eq!(c.min_cleanable_dirty_ratio_ppm, 250_000);
        assert_eq!((c.delete_retention_ms, c.min_compaction_lag_ms), (1000, 5));
        // compact alone: nothing expires by time or size.
        assert_eq!(c.effective_local_retention_ms(), None);
        assert_eq!(c.effective_local_retention_bytes(), None);
        // Tiered and compacted: the local copy may be bounded, the whole log is not.
        let t = TopicConfig::resolve(&map(&[
            ("cleanup.policy", "compact"),
            ("remote.storage.enable", "true"),
            ("local.retention.bytes", "1000"),
        ]))
        .unwrap();
        assert_eq!(t.effective_local_retention_bytes(), Some(1000));
        assert_eq!(t.effective_local_retention_ms(), None);
        // compact,delete still expires.
        let cd = TopicConfig::resolve(&map(&[("cleanup.policy", "compact,delete")])).unwrap();
        assert_eq!(cd.effective_local_retention_ms(), Some(604_800_000));
        // Refused: a ratio out of range, a min lag above the max, Parquet of a compacted
        // topic.
        for bad in [
            &[("min.cleanable.dirty.ratio", "1.5")][..],
            &[
                ("min.compaction.lag.ms", "10"),
                ("max.compaction.lag.ms", "5"),
            ][..],
            &[
                ("cleanup.policy", "compact"),
                ("remote.storage.enable", "true"),
                ("parquet.enable", "true"),
            ][..],
        ] {
            assert!(TopicConfig::resolve(&map(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn local_retention_follows_kip_405() {
        let c = TopicConfig::resolve(&map(&[
            ("remote.storage.enable", "true"),
            ("retention.ms", "86400000"),
            ("local.retention.ms", "3600000"),
            ("local.retention.bytes", "1048576"),
        ]))
        .unwrap();
        assert_eq!(c.effective_local_retention_ms(), Some(3_600_000));
        assert_eq!(c.effective_local_retention_bytes(), Some(1_048_576));
        // Without tiering, local retention is total retention.
        let c = TopicConfig::resolve(&map(&[("local.retention.ms", "1000")])).unwrap();
        assert_eq!(c.effective_local_retention_ms(), Some(604_800_000));
        // Local may not exceed total.
        assert!(matches!(
            TopicConfig::resolve(&map(&[
                ("retention.ms", "1000"),
                ("local.retention.ms", "2000")
            ])),
            Err(ConfigError::Inconsistent(_))
        ));
        assert_eq!(
            TopicConfig::resolve(&map(&[("cleanup.policy", "delete, compact")]))
                .unwrap()
                .cleanup_policy,
            CleanupPolicy::CompactDelete
        );
    }

    #[test]
    fn parquet_value_format_and_schema() {
        let c = TopicConfig::default();
        assert_eq!(c.parquet_value_format, ParquetValueFormat::Binary);
        assert_eq!(c.parquet_value_schema, None);
        let schema = r#"{"fields":[{"name":"user","type":"utf8"}]}"#;
        let c = TopicConfig::resolve(&map(&[
            ("parquet.value.format", "JSON"),
            ("parquet.value.schema", schema),
        ]))
        .unwrap();
        assert_eq!(c.parquet_value_format, ParquetValueFormat::Json);
        assert_eq!(c.parquet_value_schema.as_deref(), Some(schema));
        assert_eq!(c.parquet_value_format.to_string(), "json");
        // JSON without a schema is allowed (the value stays binary); a schema without
        // JSON is refused.
        TopicConfig::resolve(&map(&[("parquet.value.format", "json")])).unwrap();
        assert!(matches!(
            TopicConfig::resolve(&map(&[("parquet.value.schema", schema)])),
            Err(ConfigError::Inconsistent(_))
        ));
        for k in [keys::PARQUET_VALUE_FORMAT, keys::PARQUET_VALUE_SCHEMA] {
            assert_eq!(key_info(k).map(|i| i.0), Some(ConfigType::String));
            assert!(TopicConfig::default_value(k).is_some());
        }
    }
}
