//! The broker's tiering loop: attach remote tiers, offload sealed segments, apply
//! remote retention, sweep orphans; and the tier status report.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use strata_proto::TopicId;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::partition::{ParquetCoverage, Partition};

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
    pub parquet_last_dead_letter: Option<strata_parquet::DeadLetter>,
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
    pub partitions: Vec<PartitionTierStatus>,
}

fn lag(p: &Partition, now_ms: i64) -> (u64, f64) {
    let remote_end = p.remote().and_then(|r| r.end_offset());
    let pending: Vec<_> = p
        .local_log()
        .segments()
        .into_iter()
        .filter(|s| s.sealed && remote_end.is_none_or(|e| s.next_offset > e))
        .collect();
    let bytes = pending.iter().map(|s| s.size_bytes).sum();
    let secs = pending
        .first()
        .map_or(0.0, |s| ((now_ms - s.max_timestamp).max(0) as f64) / 1000.0);
    (bytes, secs)
}

impl Broker {
    /// Every partition's tiering state.
    pub fn tier_status(&self) -> TierStatus {
        let now = self.clock.now_ms();
        let mut partitions = Vec::new();
        for t in self.topics() {
            for p in &t.partitions {
                let remote = p.remote();
                let (lag_bytes, lag_secs) = if p.tiered() { lag(p, now) } else { (0, 0.0) };
                let coverage = p.parquet_coverage();
                partitions.push(PartitionTierStatus {
                    topic: t.name.to_string(),
                    partition: p.index,
                    tiered: p.tiered(),
                    local_start_offset: p.local_log().log_start_offset(),
                    local_end_offset: p.local_log().log_end_offset(),
                    local_bytes: p.local_log().size_bytes(),
                    remote_start_offset: remote.as_ref().and_then(|r| r.log_start_offset()),
                    remote_end_offset: remote.as_ref().and_then(|r| r.end_offset()),
                    remote_bytes: remote.as_ref().map_or(0, |r| r.remote_bytes()),
                    remote_segments: remote.as_ref().map_or(0, |r| r.segment_count()),
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
            local_bytes_tiered_topics: self.tiered_local_bytes(),
            local_disk_cap_bytes: self.tier().map_or(0, |t| t.config().local_disk_cap_bytes),
            partitions,
        }
    }
}

/// Runs until shutdown: every offload interval, attach remote tiers, offload what is
/// ready, publish lag; remote retention and the orphan sweep on their own intervals.
/// A partition whose upload fails is retried with exponential backoff (up to a
/// 15 s) forever, with a warning each time and the failure counted in metrics; its
/// local segments stay (local retention waits for the offload).
/// What a leader's Parquet conversion last caught up with: leader epoch, log start, last
/// sealed offset below the high-water mark, and parquet.backfill.
type ParquetState = (i32, i64, Option<i64>, bool);

/// How often a follower re-reads a tiered partition's manifest.
const FOLLOWER_RELOAD_INTERVAL: Duration = Duration::from_secs(30);

pub(crate) async fn offloader(broker: Arc<Broker>, shutdown: CancellationToken) {
    let Some(tier) = broker.tier().cloned() else {
        return;
    };
    let config = tier.config().clone();
    let mut tick = tokio::time::interval(config.offload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut backoff: HashMap<(TopicId, i32), (Instant, Duration)> = HashMap::new();
    let mut described: HashMap<TopicId, strata_tier::catalog::TopicDescriptor> = HashMap::new();
    let mut last_retention = Instant::now();
    let mut last_sweep = Instant::now();
    // Per partition: the leader epoch in which this broker, as leader, last reloaded the
    // manifest (the previous leader may have committed to it since we last read it), and
    // when a follower last reloaded it (followers delete local segments the leader has
    // offloaded, so they need a recent view).
    let mut leading_since: HashMap<(TopicId, i32), i32> = HashMap::new();
    let mut follower_reloaded: HashMap<(TopicId, i32), Instant> = HashMap::new();
    let mut parquet_checked: HashMap<(TopicId, i32), Instant> = HashMap::new();
    // Leaders: the (epoch, log start, last sealed offset) Parquet last caught up with.
    let mut parquet_done: HashMap<(TopicId, i32), ParquetState> = HashMap::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        broker.attach_remotes().await;
        // Keep each tiered topic's descriptor in the bucket current (recovery reads it).
        // (Written by the leader of partition 0, so one broker writes it.)
        for t in broker
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
                    .unwrap_or_else(|| broker.cluster_id()),
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
        let now = Instant::now();
        let tiered: Vec<Arc<Partition>> = broker
            .topics()
            .into_iter()
            .filter(|t| t.config.remote_storage_enable)
            .flat_map(|t| t.partitions.clone())
            .collect();
        for p in &tiered {
            let Some(r) = p.remote() else { continue };
            let k = (p.topic_id, p.index);
            if p.is_leader() {
                follower_reloaded.remove(&k);
                let epoch = p.leader_epoch();
                if leading_since.get(&k) == Some(&epoch) && !r.is_fenced() {
                    continue;
                }
                match r.reload().await {
                    Ok(()) => {
                        leading_since.insert(k, epoch);
                    }
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot reload the remote manifest after becoming leader; will retry")
                    }
                }
            } else {
                leading_since.remove(&k);
                if follower_reloaded
                    .get(&k)
                    .is_some_and(|at| at.elapsed() < FOLLOWER_RELOAD_INTERVAL)
                {
                    continue;
                }
                follower_reloaded.insert(k, Instant::now());
                if let Err(e) = r.reload().await {
                    tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "follower cannot reload the remote manifest");
                }
            }
        }
        // Only the leader offloads and applies remote retention; it does so once it has
        // read the manifest as of its own epoch.
        let leading: Vec<Arc<Partition>> = tiered
            .iter()
            .filter(|p| {
                p.is_leader()
                    && leading_since.get(&(p.topic_id, p.index)) == Some(&p.leader_epoch())
            })
            .cloned()
            .collect();
        let ready: Vec<Arc<Partition>> = leading
            .iter()
            .filter(|p| p.remote().is_some_and(|r| !r.is_fenced()))
            .filter(|p| {
                backoff
                    .get(&(p.topic_id, p.index))
                    .is_none_or(|(at, _)| *at <= now)
            })
            .cloned()
            .collect();
        let results = futures::future::join_all(ready.iter().map(|p| {
            let tier = tier.clone();
            let p = p.clone();
            async move {
                let Some(remote) = p.remote() else {
                    return Ok(0);
                };
                tier.offload_ready(p.local_log(), &remote, p.high_watermark(), p.leader_epoch())
                    .await
            }
        }))
        .await;
        for (p, r) in ready.iter().zip(results) {
            let k = (p.topic_id, p.index);
            match r {
                Ok(_) => {
                    backoff.remove(&k);
                }
                Err(e) => {
                    let delay = backoff.get(&k).map_or(Duration::from_secs(1), |(_, d)| {
                        (*d * 2).min(Duration::from_secs(15))
                    });
                    backoff.insert(k, (Instant::now() + delay, delay));
                    metrics::counter!("strata_tier_upload_failures_total", "topic" => p.topic.to_string()).increment(1);
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, retry_in = ?delay, "offload failed; local segments are kept until it succeeds");
                }
            }
        }
        metrics::gauge!("strata_tier_partitions_in_backoff").set(backoff.len() as f64);
        // Parquet for warehouse loaders: leaders convert their sealed segments in order;
        // followers read how far that got (local retention waits for it).
        for p in broker
            .topics()
            .into_iter()
            .filter(|t| t.config.parquet_enable)
            .flat_map(|t| t.partitions.clone())
        {
            let k = (p.topic_id, p.index);
            // Leaders read the manifest (an object-store GET) only when something
            // changed: a new leadership, a newly sealed segment, or a new log start.
            let leader_state = p.is_leader().then(|| {
                let hwm = p.high_watermark();
                let sealed = p
                    .local_log()
                    .segments()
                    .iter()
                    .filter(|s| s.sealed && s.next_offset <= hwm)
                    .map(|s| s.next_offset)
                    .max();
                (
                    p.leader_epoch(),
                    p.log_start_offset(),
                    sealed,
                    p.config().parquet_backfill,
                )
            });
            match leader_state {
                Some(state) if parquet_done.get(&k) == Some(&state) => continue,
                Some(_) => {}
                None => {
                    if parquet_checked
                        .get(&k)
                        .is_some_and(|at| at.elapsed() < FOLLOWER_RELOAD_INTERVAL)
                    {
                        continue;
                    }
                    parquet_checked.insert(k, Instant::now());
                }
            }
            match parquet_step(&broker, &tier, &p).await {
                Ok(caught_up) => {
                    if let Some(state) = leader_state
                        && caught_up
                    {
                        parquet_done.insert(k, state);
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "parquet conversion failed; local segments are kept until it succeeds");
                    metrics::counter!("strata_parquet_failures_total", "topic" => p.topic.to_string()).increment(1);
                }
            }
        }
        let now_ms = broker.clock.now_ms();
        for p in &leading {
            let (bytes, secs) = lag(p, now_ms);
            let labels = [
                ("topic", p.topic.to_string()),
                ("partition", p.index.to_string()),
            ];
            metrics::gauge!("strata_tier_offload_lag_bytes", &labels).set(bytes as f64);
            metrics::gauge!("strata_tier_offload_lag_seconds", &labels).set(secs);
            if let Some(r) = p.remote() {
                metrics::gauge!("strata_tier_remote_bytes", &labels).set(r.remote_bytes() as f64);
            }
        }
        if last_retention.elapsed() >= broker.config.retention_check_interval {
            last_retention = Instant::now();
            for p in &leading {
                let Some(r) = p.remote() else { continue };
                if r.is_fenced() {
                    continue;
                }
                let c = p.config();
                let ms = (c.retention_ms >= 0).then_some(c.retention_ms);
                let bytes = (c.retention_bytes >= 0).then_some(c.retention_bytes as u64);
                let beyond: u64 = p
                    .local_log()
                    .segments()
                    .iter()
                    .filter(|s| {
                        s.next_offset > r.start_bound()
                            && r.end_offset().is_none_or(|e| s.next_offset > e)
                    })
                    .map(|s| s.size_bytes)
                    .sum();
                match r.apply_retention(now_ms, ms, bytes, beyond).await {
                    Ok(gone) if !gone.is_empty() => {
                        tracing::info!(topic = %p.topic, partition = p.index, segments = gone.len(), start = ?r.log_start_offset(), "remote retention deleted segments");
                        // Retention bounds the whole log: local data below the new start
                        // is expired too (Kafka deletes segments below the log start).
                        // (The bound, not log_start_offset(): that is None once every
                        // remote segment expired, and the local copies must go too.)
                        let start = r.start_bound();
                        if p.local_log().log_start_offset() < start
                            && start <= p.local_log().log_end_offset()
                            && let Err(e) = p.local_log().advance_log_start(start)
                        {
                            tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot move the local log start");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "remote retention failed")
                    }
                }
            }
        }
        if last_sweep.elapsed() >= config.orphan_sweep_interval {
            last_sweep = Instant::now();
            sweep_staging(&tier, config.orphan_grace).await;
            for p in &leading {
                if let Some(r) = p.remote()
                    && let Err(e) = r.cleanup_orphans(config.orphan_grace).await
                {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "orphan sweep failed");
                }
            }
        }
    }
}

/// One round of Parquet for a partition of a topic with parquet.enable. The leader
/// converts its sealed local segments below the high-water mark, in offset order, from
/// where the sink's manifest says the files end (a segment cut elsewhere than the last
/// one converted, after a leader change, is read from that offset); files wholly below
/// the log start are deleted (retention). Batches that can never be converted become
/// dead letters in the sink's manifest and conversion goes on after them (see
/// [`write_parquet`]). A follower only reads the progress.
async fn parquet_step(
    broker: &Broker,
    tier: &strata_tier::Tier,
    p: &Arc<Partition>,
) -> Result<bool, String> {
    let key = broker.partition_key(p);
    let options = strata_parquet::ConvertOptions::from_topic_config(
        p.topic.to_string(),
        p.index,
        &p.config(),
    )
    .map_err(|e| e.to_string())?;
    let sink = strata_parquet::ParquetSink::new(
        tier.store().clone(),
        strata_parquet::ParquetLayout::new(key.cluster_id.clone()),
        options,
    );
    let manifest = sink
        .manifest(&p.topic, p.index)
        .await
        .map_err(|e| e.to_string())?;
    let local_start = p.local_log().log_start_offset();
    let backfill = p.config().parquet_backfill && p.remote().is_some();
    let mut next = match manifest.next_offset {
        Some(n) if n < local_start && !backfill => {
            // The records in between left the local disk before they were converted
            // (parquet.enable turned on later): they can only come from the remote
            // tier, which parquet.backfill asks for. Retention must not wait on what
            // will not happen here.
            p.set_parquet_progress(i64::MAX);
            return Err(format!(
                "the parquet files end at offset {n} but the local log starts at {local_start}; \
                 `strata tier parquet backfill --topic {}` converts the rest from the remote tier",
                p.topic
            ));
        }
        Some(n) => n,
        // No file yet: from the log start (remote included) when backfilling, else from
        // where conversion was turned on.
        None if backfill => p.log_start_offset().min(local_start),
        None => local_start,
    };
    p.set_parquet_progress(next);
    p.set_parquet_coverage(manifest.covered_start().map(|start| {
        ParquetCoverage {
            start_offset: start,
            backfill_next: manifest.backfill.map(|c| c.next),
            dead_letters: manifest.dead_letters.len(),
            last_dead_letter: manifest
                .dead_letters
                .iter()
                .max_by_key(|d| d.at_ms)
                .cloned(),
        }
    }));
    if !p.is_leader() {
        return Ok(true);
    }
    let log_start = p.log_start_offset();
    let mut budget: u64 = BACKFILL_BYTES_PER_ROUND;
    // Backfill below where the files start: segments offloaded before parquet.enable was
    // set, from the remote tier, a bounded amount per round so offloads of other
    // partitions are not held up behind it.
    if backfill
        && let Some(start) = manifest.covered_start()
        && start > log_start
        && let Some(remote) = p.remote()
    {
        let mut cursor = manifest.backfill.map_or(log_start, |c| c.next);
        let segments: Vec<_> = remote
            .manifest_snapshot()
            .segments()
            .iter()
            .filter(|s| s.next_offset > cursor && s.base_offset < start)
            .copied()
            .collect();
        if let Some(first) = segments.first()
            && first.base_offset > cursor
        {
            tracing::warn!(topic = %p.topic, partition = p.index, from = cursor, to = first.base_offset, "records expired before the backfill reached them");
            sink.restart_backfill(&p.topic, p.index, first.base_offset)
                .await
                .map_err(|e| e.to_string())?;
            cursor = first.base_offset;
        }
        for seg in segments {
            let bytes = read_remote_segment(tier, &remote, &seg, cursor).await?;
            let (sink2, topic, index) = (sink.clone(), p.topic.to_string(), p.index);
            let range = seg.base_offset.max(cursor)..seg.next_offset;
            let (outcome, done) = at_background_priority(move |rt| {
                rt.block_on(sink2.write_backfill_or_dead_letter(&topic, index, &bytes, range))
            })
            .await?
            .map_err(|e| e.to_string())?;
            report_parquet(p, &outcome);
            cursor = seg.next_offset.min(start);
            let known = p.parquet_coverage();
            p.set_parquet_coverage(Some(ParquetCoverage {
                start_offset: if done { log_start.min(start) } else { start },
                backfill_next: (!done).then_some(cursor),
                dead_letters: known.as_ref().map_or(0, |c| c.dead_letters),
                last_dead_letter: known.and_then(|c| c.last_dead_letter),
            }));
            metrics::counter!("strata_parquet_backfill_bytes_total", "topic" => p.topic.to_string())
                .increment(seg.size_bytes);
            budget = budget.saturating_sub(seg.size_bytes);
            if done {
                break;
            }
            if budget == 0 {
                return Ok(false);
            }
        }
    }
    // Conversion behind the local log start (with backfill): from the remote tier.
    if next < local_start {
        let Some(remote) = p.remote() else {
            return Err("backfill needs the remote tier, which this partition lacks".into());
        };
        let segments: Vec<_> = remote
            .manifest_snapshot()
            .segments()
            .iter()
            .filter(|s| s.next_offset > next && s.base_offset < local_start)
            .copied()
            .collect();
        if segments.first().is_none_or(|s| s.base_offset > next) {
            // What lies between is gone (retention deleted it before conversion).
            let start = segments.first().map_or(local_start, |s| s.base_offset);
            tracing::warn!(topic = %p.topic, partition = p.index, from = next, to = start, "records expired before conversion; the Parquet files skip them");
            sink.skip_to(&p.topic, p.index, start)
                .await
                .map_err(|e| e.to_string())?;
            next = start;
        }
        for seg in segments {
            let bytes = read_remote_segment(tier, &remote, &seg, next).await?;
            let range = seg.base_offset.max(next)..seg.next_offset;
            write_parquet(&sink, p, range, move || Ok(bytes)).await?;
            next = seg.next_offset;
            p.set_parquet_progress(next);
            metrics::counter!("strata_parquet_backfill_bytes_total", "topic" => p.topic.to_string())
                .increment(seg.size_bytes);
            budget = budget.saturating_sub(seg.size_bytes);
            if budget == 0 {
                return Ok(false);
            }
        }
        if next < local_start {
            return Ok(false);
        }
    }
    let hwm = p.high_watermark();
    for seg in p.local_log().segments() {
        if !seg.sealed || seg.next_offset > hwm {
            break;
        }
        if seg.next_offset <= next {
            continue;
        }
        let from = seg.base_offset.max(next);
        let (part, end) = (p.clone(), seg.next_offset);
        // Read on the conversion thread too: copying the segment is part of its cost.
        let read = move || {
            let mut bytes = Vec::with_capacity(seg.size_bytes as usize);
            let mut at = from;
            while at < end {
                let r = part
                    .local_log()
                    .read(at, 8 << 20, Some(end))
                    .map_err(|e| e.to_string())?;
                if r.data.is_empty() || r.next_offset <= at {
                    return Err(format!("no batch at {at} below {end}"));
                }
                bytes.extend_from_slice(&r.data);
                at = r.next_offset;
            }
            Ok(bytes)
        };
        write_parquet(&sink, p, from..end, read).await?;
        next = seg.next_offset;
        p.set_parquet_progress(next);
    }
    sink.expire(&p.topic, p.index, p.log_start_offset())
        .await
        .map_err(|e| e.to_string())?;
    Ok(true)
}

/// Remote bytes a backfill converts per partition per offloader round.
const BACKFILL_BYTES_PER_ROUND: u64 = 256 << 20;
/// The backfill's read-ahead stream in the chunk cache.
const BACKFILL_READER: u64 = 0x5041_5251_4245_4b46;

type Job = Box<dyn FnOnce() + Send>;

/// The thread Parquet conversion runs on.
static PARQUET_THREAD: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Job>>> =
    std::sync::OnceLock::new();

/// Runs `f` (CPU-bound conversion, given the runtime's handle for its object-store IO)
/// on one dedicated thread at the idle scheduling class (SCHED_IDLE) and the idle IO
/// class, so conversion uses
/// the CPU producers and consumers leave idle and does not compete with them: on a saturated
/// broker the backlog waits (local retention waits with it, and the local-disk cap
/// pushes back on producers) instead of the producers slowing down. One thread: a
/// broker's conversions queue behind each other, which bounds their memory too.
async fn at_background_priority<T: Send + 'static>(
    f: impl FnOnce(&tokio::runtime::Handle) -> T + Send + 'static,
) -> Result<T, String> {
    let thread = PARQUET_THREAD.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("strata-parquet".into())
            .spawn(move || {
                // SCHED_IDLE: the kernel runs this thread only when no other wants the
                // CPU, and a waking request handler preempts it at once (a low nice
                // value would still make handlers wait out its time slice).
                use thread_priority::{
                    NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
                };
                if let Err(e) = thread_priority::set_thread_priority_and_policy(
                    thread_priority::thread_native_id(),
                    ThreadPriority::Min,
                    ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
                ) {
                    tracing::warn!(error = ?e, "cannot lower the Parquet thread's priority");
                }
                // And the idle IO class: conversion reads sealed segments back from the
                // disk (O_DIRECT), and at the default class those reads compete with the
                // producers' appends for it (benches/parquet.sh: a producer's throughput
                // 0.80x of alone while converting, 0.87-1.04x with this). The scheduler
                // ages idle requests, so conversion still progresses on a busy disk.
                // Pid 0 is the calling thread.
                if let Err(e) = ioprio::set_priority(
                    ioprio::Target::Process(ioprio::Pid::from_raw(0)),
                    ioprio::Priority::new(ioprio::Class::Idle),
                ) {
                    tracing::warn!(error = %e, "cannot lower the Parquet thread's IO priority");
                }
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
        match started {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the Parquet thread");
                None
            }
        }
    });
    let Some(thread) = thread else {
        return Err("the Parquet thread could not be started".into());
    };
    let rt = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    thread
        .send(Box::new(move || {
            let _ = tx.send(f(&rt));
        }))
        .map_err(|_| "the Parquet thread stopped".to_string())?;
    rx.await
        .map_err(|_| "the Parquet thread dropped a conversion".to_string())
}

/// A remote segment's batches from `from` (a batch boundary) to its end.
async fn read_remote_segment(
    tier: &strata_tier::Tier,
    remote: &strata_tier::RemotePartition,
    seg: &strata_tier::RemoteSegment,
    from: i64,
) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::with_capacity(seg.size_bytes as usize);
    let mut at = seg.base_offset.max(from);
    while at < seg.next_offset {
        let r = {
            let _permit = tier.read_permit().await;
            remote
                .read(at, 8 << 20, strata_cache::ReaderId(BACKFILL_READER))
                .await
                .map_err(|e| e.to_string())?
        };
        if r.data.is_empty() || r.next_offset <= at {
            return Err(format!("no remote batch at {at} below {}", seg.next_offset));
        }
        bytes.extend_from_slice(&r.data);
        at = r.next_offset;
    }
    Ok(bytes)
}

/// Converts one segment's batches `range` (what `read` returns, on the conversion
/// thread) into Parquet files through the sink. Batches that can never be converted are
/// set aside as dead letters in the sink's manifest (reported by [`report_parquet`]) so
/// that conversion, and local retention behind it, go on; other errors (the store, a
/// pending transaction, the options) are returned, and the offloader retries.
async fn write_parquet(
    sink: &strata_parquet::ParquetSink,
    p: &Partition,
    range: std::ops::Range<i64>,
    read: impl FnOnce() -> Result<Vec<u8>, String> + Send + 'static,
) -> Result<(), String> {
    let (sink2, topic, index) = (sink.clone(), p.topic.to_string(), p.index);
    let outcome = at_background_priority(move |rt| {
        let bytes = read()?;
        rt.block_on(sink2.write_segment_or_dead_letter(&topic, index, &bytes, range))
            .map_err(|e| e.to_string())
    })
    .await??;
    report_parquet(p, &outcome);
    Ok(())
}

/// Logs and counts what a conversion wrote and set aside, and notes the dead letters for
/// the tier status.
fn report_parquet(p: &Partition, outcome: &strata_parquet::SegmentOutcome) {
    for f in &outcome.files {
        tracing::debug!(topic = %p.topic, partition = p.index, key = %f.key, rows = f.rows, "wrote a parquet file");
        metrics::counter!("strata_parquet_rows_total", "topic" => p.topic.to_string())
            .increment(f.rows);
        if f.raw_fallbacks > 0 {
            tracing::warn!(topic = %p.topic, partition = p.index, key = %f.key, values = f.raw_fallbacks, "values that do not fit parquet.value.schema were kept whole in _raw");
            metrics::counter!("strata_parquet_raw_values_total", "topic" => p.topic.to_string())
                .increment(f.raw_fallbacks);
        }
    }
    let Some(last) = outcome.dead_letters.last() else {
        return;
    };
    for d in &outcome.dead_letters {
        tracing::warn!(
            topic = %p.topic,
            partition = p.index,
            first_offset = d.first_offset,
            last_offset = d.last_offset,
            reason = %d.reason,
            "parquet: offsets that cannot be converted are set aside as a dead letter in the manifest; conversion goes on after them"
        );
    }
    metrics::counter!("strata_parquet_dead_letters_total", "topic" => p.topic.to_string())
        .increment(outcome.dead_letters.len() as u64);
    let known = p.parquet_coverage();
    p.set_parquet_coverage(Some(ParquetCoverage {
        start_offset: known
            .as_ref()
            .map_or(outcome.dead_letters[0].first_offset, |c| c.start_offset),
        backfill_next: known.as_ref().and_then(|c| c.backfill_next),
        dead_letters: known.as_ref().map_or(0, |c| c.dead_letters) + outcome.dead_letters.len(),
        last_dead_letter: Some(last.clone()),
    }));
}

/// Multipart uploads in create mode go through a staging object that is copied into
/// place (cold/store); a crash between the two leaves it behind.
async fn sweep_staging(tier: &strata_tier::Tier, grace: Duration) {
    let cutoff = std::time::SystemTime::now()
        .checked_sub(grace)
        .unwrap_or(std::time::UNIX_EPOCH);
    match tier
        .store()
        .list(strata_store::STAGING_PREFIX.trim_end_matches('/'))
        .await
    {
        Ok(objects) => {
            for o in objects.into_iter().filter(|o| o.last_modified <= cutoff) {
                if let Err(e) = tier.store().delete(&o.path).await {
                    tracing::warn!(key = %o.path, error = %e, "cannot delete a stale staging object");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot list staging objects"),
    }
}
