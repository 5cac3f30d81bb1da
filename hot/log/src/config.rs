//! The log's own view of a topic's configuration.

use strata_proto::TopicConfig;
use strata_proto::config::MessageTimestampType;

use crate::producer::DEFAULT_PRODUCER_EXPIRATION_MS;

/// How the active segment is written, and how the log reads.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum IoMode {
    /// `pwrite` through the page cache, as Kafka does.
    Buffered,
    /// `O_DIRECT` writes of 4 KiB-aligned blocks from an in-memory tail buffer, which
    /// also serves tail reads, and `O_DIRECT` reads of everything else (see the crate
    /// docs, "IO modes"). Falls back to `Buffered` for the log if the filesystem
    /// refuses `O_DIRECT`.
    #[default]
    Direct,
}

/// Default for [`LogConfig::index_max_entries`]: Kafka's segment.index.bytes default
/// (10 MiB) in 8-byte offset-index entries.
pub const DEFAULT_INDEX_MAX_ENTRIES: usize = (10 << 20) / 8;

/// Default for [`LogConfig::tail_cache_bytes`].
pub const DEFAULT_TAIL_CACHE_BYTES: usize = 4 << 20;

/// How much of the log to keep locally. `None` is unbounded.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RetentionLimits {
    pub ms: Option<i64>,
    pub bytes: Option<u64>,
}

/// How a compacted topic's log is cleaned (cleanup.policy=compact or compact,delete):
/// Kafka's topic configs of the same names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CompactionConfig {
    /// Tombstones stay this long after the cleaner first passes them (KIP-534).
    pub delete_retention_ms: i64,
    /// Records younger than this are not cleaned.
    pub min_compaction_lag_ms: i64,
    /// Records are cleaned at the latest this long after they were written (KIP-354).
    pub max_compaction_lag_ms: i64,
    /// Clean once the uncleaned share of the log reaches this, in millionths.
    pub min_cleanable_dirty_ratio_ppm: u32,
}

impl CompactionConfig {
    pub fn min_cleanable_dirty_ratio(&self) -> f64 {
        self.min_cleanable_dirty_ratio_ppm as f64 / 1e6
    }
}

/// What the log needs to know of its topic's configuration.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LogConfig {
    /// Roll when the active segment would exceed this.
    pub segment_bytes: u64,
    /// Roll when the active segment's first append is this old.
    pub segment_ms: i64,
    /// Largest batch accepted (Kafka's max.message.bytes applies to the batch).
    pub max_message_bytes: u64,
    /// Bytes between sparse index entries.
    pub index_interval_bytes: u64,
    /// Roll once the active segment's offset index holds this many entries: Kafka's
    /// segment.index.bytes (10 MiB of 8-byte entries by default). It bounds what one
    /// active segment's in-memory indexes hold whatever index.interval.bytes says (0
    /// puts an entry after every batch).
    pub index_max_entries: usize,
    /// fsync after this many records since the last fsync.
    pub flush_messages: i64,
    /// fsync when unflushed data is this old.
    pub flush_ms: i64,
    /// Local retention (local.retention.* when tiering is on, retention.* otherwise;
    /// none for cleanup.policy=compact).
    pub retention: RetentionLimits,
    /// Compaction, for cleanup.policy=compact or compact,delete.
    pub compaction: Option<CompactionConfig>,
    /// Rewrite timestamps to the append time (message.timestamp.type=LogAppendTime).
    pub log_append_time: bool,
    /// Forget an idempotent producer this long after its last batch's timestamp
    /// (Kafka's broker setting producer.id.expiration.ms, not a topic config).
    pub producer_expiration_ms: i64,
    /// How the active segment is written and the log read (a broker setting, not a
    /// topic config). A change takes effect for writes when the next segment starts,
    /// for reads at once (except the active segment's, which are read the way it is
    /// written).
    pub io_mode: IoMode,
    /// Direct mode: the most memory the tail buffer of the active segment may hold (two
    /// windows of half this each, rounded down to 4 KiB, at least one 4 KiB block each).
    /// Appends are written through it and reads of the newest bytes are served from it.
    pub tail_cache_bytes: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig::from(&TopicConfig::default())
    }
}

impl From<&TopicConfig> for LogConfig {
    fn from(c: &TopicConfig) -> Self {
        let compaction = c.cleanup_policy.compacts().then_some(CompactionConfig {
            delete_retention_ms: c.delete_retention_ms,
            min_compaction_lag_ms: c.min_compaction_lag_ms,
            max_compaction_lag_ms: c.max_compaction_lag_ms,
            min_cleanable_dirty_ratio_ppm: c.min_cleanable_dirty_ratio_ppm,
        });
        LogConfig {
            segment_bytes: c.segment_bytes,
            // KIP-354: the active segment is never cleaned, so a compacted log rolls by
            // max.compaction.lag.ms at the latest for its records to become cleanable.
            segment_ms: match compaction {
                Some(k) => c.segment_ms.min(k.max_compaction_lag_ms),
                None => c.segment_ms,
            },
            max_message_bytes: c.max_message_bytes,
            index_interval_bytes: c.index_interval_bytes,
            index_max_entries: DEFAULT_INDEX_MAX_ENTRIES,
            flush_messages: c.flush_messages,
            flush_ms: c.flush_ms,
            retention: RetentionLimits {
                ms: c.effective_local_retention_ms(),
                bytes: c.effective_local_retention_bytes(),
            },
            compaction,
            log_append_time: c.message_timestamp_type == MessageTimestampType::LogAppendTime,
            // A broker setting: the broker overrides it if configured.
            producer_expiration_ms: DEFAULT_PRODUCER_EXPIRATION_MS,
            io_mode: IoMode::default(),
            tail_cache_bytes: DEFAULT_TAIL_CACHE_BYTES,
        }
    }
}
