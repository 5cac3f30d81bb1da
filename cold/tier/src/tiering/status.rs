//! The tier status report: per partition hosted here, what is local, what is in the
//! bucket, the offload lag and the Parquet progress (`strata tier status`,
//! `/v1/tier/status`).

use serde::Serialize;

use super::{HostedTopic, Tiering};

/// One partition's tiering state, for `strata tier status` and /v1/tier/status.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionTierStatus {
    pub topic: String,
    pub partition: i32,
    pub tiered: bool,
    pub local_start_offset: i64,
    pub local_end_offset: i64,
    pub local_bytes: u64,
    pub remote_start_offset: Option<i64>,
    pub remote_end_offset: Option<i64>,
    pub remote_bytes: u64,
    pub remote_segments: usize,
    /// remote.storage.format: `segments`, or `parquet` when the Parquet files are the
    /// bucket's only copy of the sealed log (then the offload lag counts what is not in
    /// a file yet, and `parquet_bytes` is the files' size).
    pub remote_format: &'static str,
    /// One-copy topics: the bytes of the partition's Parquet files.
    pub parquet_bytes: Option<u64>,
    /// Bytes of sealed local segments not yet offloaded.
    pub offload_lag_bytes: u64,
    /// How long the oldest sealed segment not yet offloaded has been waiting (by its
    /// newest record's timestamp), in seconds.
    pub offload_lag_seconds: f64,
    pub fenced: bool,
    /// Topics with parquet.enable: the first offset not yet in a Parquet file, as far as
    /// this broker knows (followers learn it from the bucket every 30 s); `None` when
    /// the topic writes no Parquet or nothing is known yet.
    pub parquet_next_offset: Option<i64>,
    /// Where the partition's Parquet files start (contiguous up to the next offset).
    pub parquet_start_offset: Option<i64>,
    /// A backfill below the start (`strata tier parquet backfill`): the first offset it
    /// has not converted yet.
    pub parquet_backfill_next: Option<i64>,
    /// Dead letters in the partition's Parquet manifest: offset ranges set aside because
    /// their batches cannot be converted (a bad CRC, records that do not decompress or
    /// parse, or decompress past --max-decompressed-batch-bytes).
    pub parquet_dead_letters: usize,
    /// The one recorded last: its offsets, reason and time.
    pub parquet_last_dead_letter: Option<crate::DeadLetter>,
    /// The Parquet conversion keeps failing (local retention waits for it, so the local
    /// log grows): its last error, since when (ms) and how many rounds; `None` when its
    /// last round succeeded.
    pub parquet_error: Option<String>,
    pub parquet_failing_since_ms: Option<i64>,
    pub parquet_failures: u64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct TierStatus {
    pub object_store: Option<String>,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_hit_ratio: f64,
    pub local_bytes_tiered_topics: u64,
    pub local_disk_cap_bytes: u64,
    /// Per parquet.enable topic hosted here, its Iceberg table's location (the directory
    /// holding `metadata/`), while tables are published (`--iceberg-commit-interval`).
    pub iceberg_tables: std::collections::BTreeMap<String, String>,
    pub partitions: Vec<PartitionTierStatus>,
}

impl Tiering {
    /// Every partition's tiering state.
    pub fn status(
        &self,
        topics: &[HostedTopic],
        local_bytes_tiered_topics: u64,
        now: i64,
    ) -> TierStatus {
        let mut partitions = Vec::new();
        let mut iceberg_tables = std::collections::BTreeMap::new();
        for t in topics {
            if t.config.parquet_enable
                && self.publishing()
                && !t.partitions.is_empty()
                && let Some(catalog) = self.table_catalog(&t.cluster_id)
            {
                iceberg_tables.insert(t.name.to_string(), catalog.table_location(&t.name));
            }
            for p in &t.partitions {
                let remote = p.log.remote();
                let config = p.config();
                let tiered = config.remote_storage_enable;
                let (lag_bytes, lag_secs) = if tiered {
                    p.log.offload_lag(now)
                } else {
                    (0, 0.0)
                };
                let coverage = p.log.parquet_coverage();
                let failure = p.log.parquet_failure();
                partitions.push(PartitionTierStatus {
                    topic: t.name.to_string(),
                    partition: p.index(),
                    tiered,
                    local_start_offset: p.log.local_start(),
                    local_end_offset: p.log.log_end(),
                    local_bytes: p.log.local_bytes(),
                    remote_start_offset: remote.as_ref().and_then(|r| r.log_start_offset()),
                    remote_end_offset: remote.as_ref().and_then(|r| r.end_offset()),
                    remote_bytes: remote.as_ref().map_or(0, |r| r.remote_bytes()),
                    remote_segments: remote.as_ref().map_or(0, |r| r.segment_count()),
                    remote_format: config.remote_storage_format.as_str(),
                    parquet_bytes: p
                        .log
                        .one_copy()
                        .then(|| p.log.parquet_reads().map(|r| r.bytes()))
                        .flatten(),
                    offload_lag_bytes: lag_bytes,
                    offload_lag_seconds: lag_secs,
                    fenced: remote.as_ref().is_some_and(|r| r.is_fenced()),
                    parquet_next_offset: {
                        let n = p.log.parquet_progress();
                        (config.parquet_enable && (0..i64::MAX).contains(&n)).then_some(n)
                    },
                    parquet_start_offset: coverage.as_ref().map(|c| c.start_offset),
                    parquet_backfill_next: coverage.as_ref().and_then(|c| c.backfill_next),
                    parquet_dead_letters: coverage.as_ref().map_or(0, |c| c.dead_letters),
                    parquet_last_dead_letter: coverage.and_then(|c| c.last_dead_letter),
                    parquet_error: failure.as_ref().map(|f| f.error.clone()),
                    parquet_failing_since_ms: failure.as_ref().map(|f| f.since_ms),
                    parquet_failures: failure.map_or(0, |f| f.failures),
                });
            }
        }
        let (hits, misses) = self.tier().map_or((0, 0), |t| {
            let s = t.cache_stats();
            (s.hits, s.misses)
        });
        TierStatus {
            // The store as the user named it, without the retry/timeout/metrics layers.
            object_store: self.tier().map(|t| format!("{:#}", t.store())),
            cache_hits: hits,
            cache_misses: misses,
            cache_hit_ratio: if hits + misses == 0 {
                0.0
            } else {
                hits as f64 / (hits + misses) as f64
            },
            local_bytes_tiered_topics,
            local_disk_cap_bytes: self.local_disk_cap(),
            iceberg_tables,
            partitions,
        }
    }
}
