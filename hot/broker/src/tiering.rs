//! The archivers' scheduler (each partition's offload, remote retention and Parquet
//! are strata-tier's [`Archiver`]) and the tier status report.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use strata_proto::{TopicConfig, TopicId};
use strata_tier::{Archiver, Leadership};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::partition::Partition;
use crate::replicas::{ReplicaManager, TopicState};

/// The tier scheduler (the broker's half of Kafka's `RemoteLogManager`): which hosted
/// partitions tier or write Parquet, their archivers run on a schedule, the Iceberg
/// tables published, and the tier's status.
#[derive(Debug)]
pub struct TierScheduler {
    replicas: Arc<ReplicaManager>,
    /// Tiered storage, when an object store is configured.
    tier: Option<Arc<strata_tier::Tier>>,
    clock: Arc<dyn strata_log::Clock>,
    config: Arc<BrokerConfig>,
    /// Partitions asked to compact their small Parquet files at their next round
    /// (`strata tier iceberg compact`).
    compaction_requests: std::sync::Mutex<std::collections::HashSet<(TopicId, i32)>>,
}

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
    pub parquet_last_dead_letter: Option<strata_tier::DeadLetter>,
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

/// Why an Iceberg or Parquet admin call (`strata tier iceberg`) failed.
#[derive(Debug, thiserror::Error)]
pub enum TableAdminError {
    /// No such topic here, or not a parquet.enable topic: HTTP 404.
    #[error("{0}")]
    NotFound(String),
    /// This broker cannot do it (no object store, no Iceberg tables): HTTP 409.
    #[error("{0}")]
    Unavailable(String),
    /// The store or the table failed: HTTP 502.
    #[error("{0}")]
    Failed(String),
}

/// What [`TierScheduler::request_compaction`] asked for.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CompactionRequest {
    pub topic: String,
    /// Partitions this broker leads: each compacts at its next Parquet round.
    pub partitions: Vec<i32>,
    /// The topic's other partitions, led by other brokers: ask those.
    pub elsewhere: Vec<i32>,
}

/// [`strata_tier::iceberg::TableStatus`], with what only this broker knows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IcebergStatus {
    #[serde(flatten)]
    pub table: strata_tier::iceberg::TableStatus,
    /// This broker publishes parquet.enable topics as tables (`--iceberg-commit-interval`).
    pub publishing: bool,
    /// Partitions whose requested compaction has not finished yet.
    pub compaction_pending: Vec<i32>,
}

impl TierScheduler {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        tier: Option<Arc<strata_tier::Tier>>,
        clock: Arc<dyn strata_log::Clock>,
        config: Arc<BrokerConfig>,
    ) -> TierScheduler {
        TierScheduler {
            replicas,
            tier,
            clock,
            config,
            compaction_requests: Default::default(),
        }
    }

    pub fn tier(&self) -> Option<&Arc<strata_tier::Tier>> {
        self.tier.as_ref()
    }

    /// The topic hosted here with parquet.enable, the tier, and the cluster id its
    /// objects are stored under.
    fn parquet_topic(
        &self,
        topic: &str,
    ) -> Result<(Arc<TopicState>, Arc<strata_tier::Tier>, String), TableAdminError> {
        let t = self.replicas.topic(topic).ok_or_else(|| {
            TableAdminError::NotFound(format!(
                "topic '{topic}' has no replica on this broker; ask a broker that hosts it"
            ))
        })?;
        if !t.config.parquet_enable {
            return Err(TableAdminError::NotFound(format!(
                "topic '{topic}' does not have parquet.enable=true: it has no Parquet files or Iceberg table"
            )));
        }
        let tier = self.tier().cloned().ok_or_else(|| {
            TableAdminError::Unavailable("this broker has no object store (--object-store)".into())
        })?;
        let cluster = t
            .storage_cluster_id
            .clone()
            .unwrap_or_else(|| self.replicas.cluster_id());
        Ok((t, tier, cluster))
    }

    fn iceberg_catalog(
        &self,
        tier: &strata_tier::Tier,
        cluster: &str,
    ) -> Result<strata_tier::iceberg::Catalog, TableAdminError> {
        self.table_catalog(tier, cluster).ok_or_else(|| {
            TableAdminError::Unavailable(
                "this broker's object store is not one an engine can read (memory://): no Iceberg tables".into(),
            )
        })
    }

    /// Where the Iceberg tables of the topics stored under `cluster` are: their files
    /// in the tier's store, their metadata pointers there or in the REST catalog.
    /// `None` for a store no engine can read.
    pub fn table_catalog(
        &self,
        tier: &strata_tier::Tier,
        cluster: &str,
    ) -> Option<strata_tier::iceberg::Catalog> {
        let uri = self.config.iceberg_store_uri.as_deref()?;
        Some(
            strata_tier::iceberg::Catalog::new(tier.store().clone(), uri, cluster)
                .with_rest(self.config.iceberg_rest.clone()),
        )
    }

    /// `topic`'s Iceberg table and Parquet files.
    pub async fn iceberg_status(&self, topic: &str) -> Result<IcebergStatus, TableAdminError> {
        let (t, tier, cluster) = self.parquet_topic(topic)?;
        let catalog = self.iceberg_catalog(&tier, &cluster)?;
        let table = strata_tier::iceberg::status(&catalog, topic, t.partition_count, &t.config)
            .await
            .map_err(|e| TableAdminError::Failed(e.to_string()))?;
        let pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut compaction_pending: Vec<i32> = pending
            .iter()
            .filter(|(id, _)| *id == t.id)
            .map(|(_, p)| *p)
            .collect();
        compaction_pending.sort_unstable();
        Ok(IcebergStatus {
            table,
            publishing: self.iceberg_publishing(),
            compaction_pending,
        })
    }

    /// Asks the partitions of `topic` this broker leads to rewrite all their small
    /// Parquet files at their next round (the tier scheduler's, so that the partition's
    /// manifest keeps one writer), rather than only full groups and past days.
    pub fn request_compaction(&self, topic: &str) -> Result<CompactionRequest, TableAdminError> {
        let (t, _, _) = self.parquet_topic(topic)?;
        let partitions: Vec<i32> = t
            .partitions
            .iter()
            .filter(|p| p.is_leader())
            .map(|p| p.index)
            .collect();
        let elsewhere = (0..t.partition_count)
            .filter(|i| !partitions.contains(i))
            .collect();
        let mut pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.extend(partitions.iter().map(|p| (t.id, *p)));
        Ok(CompactionRequest {
            topic: topic.to_string(),
            partitions,
            elsewhere,
        })
    }

    /// Whether a compaction of this partition was requested: it stays pending until
    /// [`Self::compaction_finished`].
    pub(crate) fn compaction_requested(&self, topic: TopicId, partition: i32) -> bool {
        let pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.contains(&(topic, partition))
    }

    pub(crate) fn compaction_finished(&self, topic: TopicId, partition: i32) {
        let mut pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.remove(&(topic, partition));
    }

    /// Expires `topic`'s table snapshots older than `max_age_ms` beyond the newest
    /// `retain_last`, deletes the data files no kept snapshot holds, and sweeps the
    /// topic's orphaned Parquet objects.
    pub async fn iceberg_expire(
        &self,
        topic: &str,
        max_age_ms: i64,
        retain_last: usize,
    ) -> Result<strata_tier::iceberg::ExpireReport, TableAdminError> {
        let (t, tier, cluster) = self.parquet_topic(topic)?;
        let catalog = self.iceberg_catalog(&tier, &cluster)?;
        let now_ms = self.clock.now_ms();
        strata_tier::iceberg::expire_table(
            &catalog,
            topic,
            t.partition_count,
            now_ms.saturating_sub(max_age_ms),
            retain_last,
            now_ms,
        )
        .await
        .map_err(|e| TableAdminError::Failed(e.to_string()))?
        .ok_or_else(|| {
            TableAdminError::NotFound(format!(
                "topic '{topic}' has no Iceberg table yet: it is created at the first commit of its Parquet files"
            ))
        })
    }

    /// Whether parquet.enable topics are published as Iceberg tables
    /// (`--iceberg-commit-interval` is not 0 and the store is one engines can read).
    pub fn iceberg_publishing(&self) -> bool {
        !self.config.iceberg_commit_interval.is_zero() && self.config.iceberg_store_uri.is_some()
    }

    /// Every partition's tiering state.
    pub fn tier_status(&self) -> TierStatus {
        let now = self.clock.now_ms();
        let mut partitions = Vec::new();
        let mut iceberg_tables = std::collections::BTreeMap::new();
        for t in self.replicas.topics() {
            if let (true, Some(p), Some(tier)) = (
                t.config.parquet_enable && self.iceberg_publishing(),
                t.partitions.first(),
                self.tier(),
            ) && let Some(catalog) =
                self.table_catalog(tier, &self.replicas.partition_key(p).cluster_id)
            {
                iceberg_tables.insert(t.name.to_string(), catalog.table_location(&t.name));
            }
            for p in &t.partitions {
                let remote = p.remote();
                let (lag_bytes, lag_secs) = if p.tiered() {
                    p.log().offload_lag(now)
                } else {
                    (0, 0.0)
                };
                let coverage = p.parquet_coverage();
                partitions.push(PartitionTierStatus {
                    topic: t.name.to_string(),
                    partition: p.index,
                    tiered: p.tiered(),
                    local_start_offset: p.log().local_start(),
                    local_end_offset: p.log().log_end(),
                    local_bytes: p.log().local_bytes(),
                    remote_start_offset: remote.as_ref().and_then(|r| r.log_start_offset()),
                    remote_end_offset: remote.as_ref().and_then(|r| r.end_offset()),
                    remote_bytes: remote.as_ref().map_or(0, |r| r.remote_bytes()),
                    remote_segments: remote.as_ref().map_or(0, |r| r.segment_count()),
                    remote_format: p.config().remote_storage_format.as_str(),
                    parquet_bytes: p
                        .log()
                        .one_copy()
                        .then(|| p.log().parquet_reads().map(|r| r.bytes()))
                        .flatten(),
                    offload_lag_bytes: lag_bytes,
                    offload_lag_seconds: lag_secs,
                    fenced: remote.as_ref().is_some_and(|r| r.is_fenced()),
                    parquet_next_offset: {
                        let n = p.parquet_progress();
                        (p.config().parquet_enable && (0..i64::MAX).contains(&n)).then_some(n)
                    },
                    parquet_start_offset: coverage.as_ref().map(|c| c.start_offset),
                    parquet_backfill_next: coverage.as_ref().and_then(|c| c.backfill_next),
                    parquet_dead_letters: coverage.as_ref().map_or(0, |c| c.dead_letters),
                    parquet_last_dead_letter: coverage.and_then(|c| c.last_dead_letter),
                });
            }
        }
        let (hits, misses) = self.tier().map_or((0, 0), |t| {
            let s = t.cache_stats();
            (s.hits, s.misses)
        });
        TierStatus {
            object_store: self.tier().map(|t| t.store().to_string()),
            cache_hits: hits,
            cache_misses: misses,
            cache_hit_ratio: if hits + misses == 0 {
                0.0
            } else {
                hits as f64 / (hits + misses) as f64
            },
            local_bytes_tiered_topics: self.replicas.tiered_local_bytes(),
            local_disk_cap_bytes: self.tier().map_or(0, |t| t.config().local_disk_cap_bytes),
            iceberg_tables,
            partitions,
        }
    }
}

/// The archivers' scheduler, until shutdown. Every offload interval: attach remote
/// tiers, keep topic descriptors current, start an archiver for each tiered or Parquet
/// partition hosted here (and drop those of partitions gone), and run their steps:
/// manifest reloads, offloads (concurrently across partitions, on the tier's upload
/// pool), Parquet, lag metrics; remote retention and the orphan sweep on their own
/// intervals. What each step does is [`strata_tier::Archiver`]'s.
pub(crate) async fn offloader(broker: Arc<TierScheduler>, shutdown: CancellationToken) {
    let Some(tier) = broker.replicas.tier().cloned() else {
        return;
    };
    let config = tier.config().clone();
    let mut tick = tokio::time::interval(config.offload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut described: HashMap<TopicId, strata_tier::catalog::TopicDescriptor> = HashMap::new();
    let mut archivers: HashMap<(TopicId, i32), Archiver> = HashMap::new();
    let mut last_retention = Instant::now();
    let mut last_sweep = Instant::now();
    let mut publishing = Publishing::default();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        broker.replicas.attach_remotes().await;
        write_descriptors(&broker, &tier, &mut described).await;
        // One archiver per partition that tiers or writes Parquet; a partition moved
        // away or deleted takes its archiver with it.
        let hosted: Vec<(Arc<Partition>, TopicConfig)> = broker
            .replicas
            .topics()
            .into_iter()
            .filter(|t| t.config.remote_storage_enable || t.config.parquet_enable)
            .flat_map(|t| {
                let config = t.config.clone();
                t.partitions
                    .iter()
                    .map(move |p| (p.clone(), config.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        archivers.retain(|k, _| hosted.iter().any(|(p, _)| (p.topic_id, p.index) == *k));
        for (p, _) in &hosted {
            archivers.entry((p.topic_id, p.index)).or_default();
        }
        let tiered: Vec<&(Arc<Partition>, TopicConfig)> = hosted
            .iter()
            .filter(|(_, c)| c.remote_storage_enable)
            .collect();
        for (p, _) in &tiered {
            let lead = p.leadership();
            let a = archivers.entry((p.topic_id, p.index)).or_default();
            if let Err(e) = a.reload_manifest(p.log(), lead).await {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot reload the remote manifest after becoming leader; will retry")
            }
        }
        // Only the leader offloads and applies remote retention; it does so once it has
        // read the manifest as of its own epoch.
        let now = Instant::now();
        let leading: Vec<Arc<Partition>> = tiered
            .iter()
            .filter(|(p, _)| archivers[&(p.topic_id, p.index)].leads(p.leadership()))
            .map(|(p, _)| p.clone())
            .collect();
        let ready: Vec<(Arc<Partition>, Leadership)> = leading
            .iter()
            .map(|p| (p.clone(), p.leadership()))
            .filter(|(p, lead)| archivers[&(p.topic_id, p.index)].offload_due(p.log(), *lead, now))
            .collect();
        let results = futures::future::join_all(ready.iter().map(|(p, lead)| {
            let a = &archivers[&(p.topic_id, p.index)];
            a.offload(&tier, p.log(), *lead)
        }))
        .await;
        for ((p, _), r) in ready.iter().zip(results) {
            let a = archivers.entry((p.topic_id, p.index)).or_default();
            if let (Some(delay), Err(e)) = (a.offload_finished(p.log(), &r), &r) {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, retry_in = ?delay, "offload failed; local segments are kept until it succeeds");
            }
        }
        metrics::gauge!("strata_tier_partitions_in_backoff")
            .set(archivers.values().filter(|a| a.in_backoff()).count() as f64);
        // Parquet for warehouse loaders: leaders convert their sealed segments in order;
        // followers read how far that got (local retention waits for it).
        for (p, _) in hosted.iter().filter(|(_, c)| c.parquet_enable) {
            let key = broker.replicas.partition_key(p);
            let published = broker
                .iceberg_publishing()
                .then(|| broker.table_catalog(&tier, &key.cluster_id))
                .flatten();
            let a = archivers.entry((p.topic_id, p.index)).or_default();
            let compact_now = broker.compaction_requested(p.topic_id, p.index);
            let done = a
                .parquet(
                    &tier,
                    &key,
                    p.log(),
                    p.leadership(),
                    &p.config(),
                    published.as_ref(),
                    compact_now,
                )
                .await;
            if compact_now {
                broker.compaction_finished(p.topic_id, p.index);
            }
            if let Err(e) = done {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "parquet conversion failed; local segments are kept until it succeeds");
                metrics::counter!("strata_parquet_failures_total", "topic" => p.topic.to_string())
                    .increment(1);
            }
        }
        publish_tables(&broker, &tier, &mut publishing);
        let now_ms = broker.clock.now_ms();
        for p in &leading {
            archivers[&(p.topic_id, p.index)].publish_lag(p.log(), now_ms);
        }
        if last_retention.elapsed() >= broker.config.retention_check_interval {
            last_retention = Instant::now();
            for p in &leading {
                let a = &archivers[&(p.topic_id, p.index)];
                if let Err(e) = a.apply_retention(p.log(), &p.config(), now_ms).await {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "remote retention failed");
                }
            }
        }
        // Compacted topics: the remote tier's cleaner, after the local one has moved
        // (each pass in its own task, one at a time per partition).
        let map_bytes = broker.config.log_cleaner_dedupe_buffer_bytes
            / broker.config.log_cleaner_threads.max(1);
        for p in &leading {
            let config = p.config();
            if config.cleanup_policy.compacts() {
                archivers[&(p.topic_id, p.index)]
                    .delete_retired(p.log(), tier.config().orphan_grace)
                    .await;
                archivers[&(p.topic_id, p.index)].compact_remote(
                    p.log(),
                    p.leadership(),
                    &config,
                    map_bytes,
                    now_ms,
                );
            }
        }
        if last_sweep.elapsed() >= config.orphan_sweep_interval {
            last_sweep = Instant::now();
            strata_tier::archiver::sweep_staging(&tier, config.orphan_grace).await;
            for p in &leading {
                let a = &archivers[&(p.topic_id, p.index)];
                if let Err(e) = a.sweep_orphans(p.log(), config.orphan_grace).await {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "orphan sweep failed");
                }
            }
        }
    }
}

/// Keeps each tiered topic's descriptor in the bucket current (recovery reads it).
/// (Written by the leader of partition 0, so one broker writes it.)
async fn write_descriptors(
    broker: &TierScheduler,
    tier: &strata_tier::Tier,
    described: &mut HashMap<TopicId, strata_tier::catalog::TopicDescriptor>,
) {
    for t in broker
        .replicas
        .topics()
        .into_iter()
        .filter(|t| t.config.remote_storage_enable)
        .filter(|t| t.partition(0).is_some_and(|p| p.is_leader()))
    {
        let d = strata_tier::catalog::TopicDescriptor {
            version: 1,
            cluster_id: t
                .storage_cluster_id
                .clone()
                .unwrap_or_else(|| broker.replicas.cluster_id()),
            topic: t.name.to_string(),
            topic_id: t.id,
            partitions: t.partitions.len() as i32,
            configs: t.overrides.clone(),
        };
        if described.get(&t.id) != Some(&d) {
            match strata_tier::catalog::write(tier.store(), &d).await {
                Ok(()) => {
                    described.insert(t.id, d);
                }
                Err(e) => {
                    tracing::warn!(topic = %t.name, error = %e, "cannot write the topic's descriptor to the object store")
                }
            }
        }
    }
}

/// When each topic's table was last published, and the publishing task in flight.
#[derive(Default)]
struct Publishing {
    last: HashMap<TopicId, Instant>,
    /// When each topic's orphaned Parquet objects were last swept
    /// (`strata_tier::iceberg::remove_orphans`, hourly: a LIST of the topic's files).
    swept: HashMap<TopicId, Instant>,
    running: HashMap<TopicId, tokio::task::JoinHandle<()>>,
}

/// How often a publisher sweeps its topic's orphaned Parquet objects.
const ORPHAN_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Iceberg: the leader of partition 0 of each parquet.enable topic commits the topic's
/// new Parquet files (every partition's) to its table, one snapshot per
/// `iceberg_commit_interval` (`strata_tier::iceberg::publish`). Each topic's round runs
/// as a task of its own, one at a time per topic, so a slow bucket (a round reads every
/// partition's manifest) does not hold up this scheduler's offloads and conversions. A
/// failure is logged and retried at the next interval.
fn publish_tables(
    broker: &Arc<TierScheduler>,
    tier: &Arc<strata_tier::Tier>,
    state: &mut Publishing,
) {
    let interval = broker.config.iceberg_commit_interval;
    if interval.is_zero() {
        return;
    }
    let topics = broker.replicas.topics();
    state
        .last
        .retain(|id, _| topics.iter().any(|t| t.id == *id));
    state
        .swept
        .retain(|id, _| topics.iter().any(|t| t.id == *id));
    state.running.retain(|_, task| !task.is_finished());
    for t in topics.iter().filter(|t| t.config.parquet_enable) {
        let Some(p0) = t.partition(0).filter(|p| p.is_leader()) else {
            continue;
        };
        if state.running.contains_key(&t.id)
            || state
                .last
                .get(&t.id)
                .is_some_and(|at| at.elapsed() < interval)
        {
            continue;
        }
        state.last.insert(t.id, Instant::now());
        let sweep = state
            .swept
            .get(&t.id)
            .is_none_or(|at| at.elapsed() >= ORPHAN_SWEEP_INTERVAL);
        if sweep {
            state.swept.insert(t.id, Instant::now());
        }
        let now_ms = broker.clock.now_ms();
        let Some(catalog) =
            broker.table_catalog(tier, &broker.replicas.partition_key(p0).cluster_id)
        else {
            return;
        };
        let (id, t) = (t.id, t.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let name = t.name.to_string();
            match strata_tier::iceberg::publish(&catalog, &name, t.partition_count, &t.config).await
            {
                Ok(Some(done)) => {
                    metrics::counter!("strata_iceberg_commits_total", "topic" => name.clone())
                        .increment(1);
                    metrics::counter!("strata_iceberg_files_added_total", "topic" => name.clone())
                        .increment(done.added_files as u64);
                    metrics::histogram!("strata_iceberg_commit_seconds")
                        .record(started.elapsed().as_secs_f64());
                    tracing::debug!(topic = %name, version = done.version, added = done.added_files, removed = done.removed_files, "committed to the Iceberg table");
                }
                Ok(None) => {}
                Err(e) => {
                    metrics::counter!("strata_iceberg_failures_total", "topic" => name.clone())
                        .increment(1);
                    tracing::warn!(topic = %name, error = %e, "Iceberg commit failed; the next interval retries");
                }
            }
            if sweep
                && let Err(e) = strata_tier::iceberg::remove_orphans(
                    &catalog,
                    &name,
                    t.partition_count,
                    now_ms - strata_tier::iceberg::ORPHAN_GRACE_MS,
                )
                .await
            {
                tracing::warn!(topic = %name, error = %e, "sweeping orphaned Parquet objects failed; the next sweep retries");
            }
        });
        state.running.insert(id, task);
    }
}
