//! One partition's archiver (Redpanda's `ntp_archiver`, Kafka's per-partition
//! `RLMTask`): everything that moves the partition's bytes into the bucket and keeps
//! them there in shape. As leader it reloads the manifest once per leader epoch, offloads
//! sealed segments below the high-water mark (re-cutting one that straddles the remote
//! end), backs off after a failure, applies remote retention (moving the local start
//! with it), sweeps orphans and converts sealed segments to Parquet (backfilling from
//! the remote tier when asked). As follower it re-reads the manifest every 30 s (it
//! deletes local segments the leader offloaded) and the Parquet progress.
//!
//! The broker keeps one archiver per tiered or Parquet partition and drives them from
//! one scheduler loop; each step returns a typed [`ArchiveError`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_log::LogError;
use strata_parquet::{ByteSource, ConvertError, ParquetSink, SegmentOutcome, SinkError};
use strata_proto::{Offset, TopicConfig};

use crate::compaction::{RemoteCleanSettings, RemoteCleaner};
use crate::error::TierError;
use crate::layout::PartitionKey;
use crate::manifest::RemoteSegment;
use crate::parquet_source::{LocalSegmentSource, RemoteSegmentSource};
use crate::remote::RemotePartition;
use crate::service::Tier;
use crate::tiered_log::{ParquetCoverage, ReadError, TieredLog};

/// How often a follower re-reads a tiered partition's manifest (and a Parquet
/// partition's progress).
pub const FOLLOWER_RELOAD_INTERVAL: Duration = Duration::from_secs(30);
/// Remote bytes a backfill converts per partition per round.
const BACKFILL_BYTES_PER_ROUND: u64 = 256 << 20;

/// The partition's replica state, as the archiver needs it this round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub leader: bool,
    pub leader_epoch: i32,
    pub high_watermark: Offset,
}

/// What failed, step by step.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("cannot reload the remote manifest: {0}")]
    Reload(#[source] TierError),
    #[error("offload failed: {0}")]
    Offload(#[source] TierError),
    #[error("remote retention failed: {0}")]
    Retention(#[source] TierError),
    #[error("cannot move the local log start: {0}")]
    LocalStart(#[source] LogError),
    #[error("orphan sweep failed: {0}")]
    Orphans(#[source] TierError),
    #[error("parquet conversion failed: {0}")]
    Parquet(#[from] ParquetError),
}

/// Why a Parquet round failed.
#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    /// The topic's parquet.* configs do not make conversion options.
    #[error("parquet options: {0}")]
    Options(#[source] ConvertError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// The records between the files' end and the local start left the local disk
    /// before they were converted.
    #[error(
        "the parquet files end at offset {files_end} but the local log starts at {local_start}; \
         `strata tier parquet backfill --topic {topic}` converts the rest from the remote tier"
    )]
    Gap {
        files_end: Offset,
        local_start: Offset,
        topic: String,
    },
    #[error("backfill needs the remote tier, which this partition lacks")]
    NoRemote,
    #[error("reading the log for conversion: {0}")]
    Read(#[from] ReadError),
    /// A read returned nothing where a batch must be.
    #[error("no batch at {at} below {end}")]
    Hole { at: Offset, end: Offset },
    #[error("{0}")]
    Thread(&'static str),
    /// The topic's Iceberg table could not be read.
    #[error("reading the Iceberg table: {0}")]
    Table(String),
    /// A one-copy topic's file list could not be read again for fetches.
    #[error("reading the Parquet manifest for fetches: {0}")]
    Files(TierError),
}

/// What a leader's Parquet conversion last caught up with: leader epoch, log start, last
/// sealed offset below the high-water mark, and parquet.backfill.
type ParquetState = (i32, Offset, Option<Offset>, bool);

/// One partition's archiver state.
#[derive(Debug, Default)]
pub struct Archiver {
    /// After a failed offload: when to try again, and the delay that led there.
    backoff: Option<(Instant, Duration)>,
    /// The leader epoch in which this broker, as leader, last reloaded the manifest
    /// (the previous leader may have committed to it since we last read it).
    leading_since: Option<i32>,
    /// When a follower last reloaded the manifest.
    follower_reloaded: Option<Instant>,
    /// When a follower last read the Parquet progress.
    parquet_checked: Option<Instant>,
    /// Leaders: what Parquet last caught up with.
    parquet_done: Option<ParquetState>,
    /// Compacted topics: the remote tier's cleaner (one pass at a time, in its own task).
    remote_cleaner: Arc<tokio::sync::Mutex<RemoteCleaner>>,
}

impl Archiver {
    pub fn new() -> Archiver {
        Archiver::default()
    }

    /// Leaders reload the manifest once per leader epoch (and again while fenced);
    /// followers every [`FOLLOWER_RELOAD_INTERVAL`]. A follower's failure is returned
    /// as `Ok(false)` after a debug log (it retries at its next interval).
    pub async fn reload_manifest(
        &mut self,
        log: &TieredLog,
        lead: Leadership,
    ) -> Result<(), ArchiveError> {
        let Some(r) = log.remote() else { return Ok(()) };
        if lead.leader {
            self.follower_reloaded = None;
            if self.leading_since == Some(lead.leader_epoch) && !r.is_fenced() {
                return Ok(());
            }
            r.reload().await.map_err(ArchiveError::Reload)?;
            self.leading_since = Some(lead.leader_epoch);
        } else {
            self.leading_since = None;
            if self
                .follower_reloaded
                .is_some_and(|at| at.elapsed() < FOLLOWER_RELOAD_INTERVAL)
            {
                return Ok(());
            }
            self.follower_reloaded = Some(Instant::now());
            if let Err(e) = r.reload().await {
                tracing::debug!(topic = %log.topic(), partition = log.partition(), error = %e, "follower cannot reload the remote manifest");
            }
        }
        Ok(())
    }

    /// Whether this broker leads the partition and has read the manifest as of its
    /// epoch: only then does it offload and apply remote retention.
    pub fn leads(&self, lead: Leadership) -> bool {
        lead.leader && self.leading_since == Some(lead.leader_epoch)
    }

    /// Whether an offload is due: leading, not fenced, and not backing off.
    pub fn offload_due(&self, log: &TieredLog, lead: Leadership, now: Instant) -> bool {
        self.leads(lead)
            && log.remote().is_some_and(|r| !r.is_fenced())
            && self.backoff.is_none_or(|(at, _)| at <= now)
    }

    pub fn in_backoff(&self) -> bool {
        self.backoff.is_some()
    }

    /// Offloads, in order, the sealed segments below the high-water mark not yet
    /// remote; returns how many.
    pub async fn offload(
        &self,
        tier: &Tier,
        log: &TieredLog,
        lead: Leadership,
    ) -> Result<usize, ArchiveError> {
        let Some(remote) = log.remote() else {
            return Ok(0);
        };
        // One copy: the Parquet files are the bucket's copy of the sealed log.
        if log.one_copy() {
            return Ok(0);
        }
        // A compacted log uploads only what its cleaner has been through.
        let upper = log.local().offload_bound(lead.high_watermark);
        tier.offload_ready(log.local(), &remote, upper, lead.leader_epoch)
            .await
            .map_err(ArchiveError::Offload)
    }

    /// Notes an offload's outcome: a failure backs off exponentially (1 s doubling to
    /// 15 s) and is retried forever, counted in metrics; its local segments stay (local
    /// retention waits for the offload). Returns the delay when it failed.
    pub fn offload_finished(
        &mut self,
        log: &TieredLog,
        result: &Result<usize, ArchiveError>,
    ) -> Option<Duration> {
        match result {
            Ok(_) => {
                self.backoff = None;
                None
            }
            Err(_) => {
                let delay = self.backoff.map_or(Duration::from_secs(1), |(_, d)| {
                    (d * 2).min(Duration::from_secs(15))
                });
                self.backoff = Some((Instant::now() + delay, delay));
                metrics::counter!("strata_tier_upload_failures_total", "topic" => log.topic().to_string()).increment(1);
                Some(delay)
            }
        }
    }

    /// Publishes the offload lag and remote size.
    pub fn publish_lag(&self, log: &TieredLog, now_ms: i64) {
        let (bytes, secs) = log.offload_lag(now_ms);
        let labels = [
            ("topic", log.topic().to_string()),
            ("partition", log.partition().to_string()),
        ];
        metrics::gauge!("strata_tier_offload_lag_bytes", &labels).set(bytes as f64);
        metrics::gauge!("strata_tier_offload_lag_seconds", &labels).set(secs);
        if let Some(r) = log.remote() {
            metrics::gauge!("strata_tier_remote_bytes", &labels).set(r.remote_bytes() as f64);
        }
    }

    /// Remote retention by the topic's retention.ms and retention.bytes (local bytes not
    /// yet remote count toward the size). Retention bounds the whole log: local data
    /// below the new remote start goes too. Returns how many remote segments went.
    pub async fn apply_retention(
        &self,
        log: &TieredLog,
        config: &TopicConfig,
        now_ms: i64,
    ) -> Result<usize, ArchiveError> {
        let Some(r) = log.remote() else { return Ok(0) };
        if r.is_fenced() {
            return Ok(0);
        }
        // cleanup.policy=compact alone: nothing expires by time or size.
        let deletes = config.cleanup_policy.deletes();
        let ms = (deletes && config.retention_ms >= 0).then_some(config.retention_ms);
        let bytes =
            (deletes && config.retention_bytes >= 0).then_some(config.retention_bytes as u64);
        let beyond: u64 = log
            .local()
            .segments()
            .iter()
            .filter(|s| {
                s.next_offset > r.start_bound() && r.end_offset().is_none_or(|e| s.next_offset > e)
            })
            .map(|s| s.size_bytes)
            .sum();
        let gone = r
            .apply_retention(now_ms, ms, bytes, beyond)
            .await
            .map_err(ArchiveError::Retention)?;
        if log.one_copy() {
            return Ok(gone.len() + self.one_copy_retention(log, now_ms, ms, bytes));
        }
        if gone.is_empty() {
            return Ok(0);
        }
        tracing::info!(topic = %log.topic(), partition = log.partition(), segments = gone.len(), start = ?r.log_start_offset(), "remote retention deleted segments");
        // Kafka deletes segments below the log start. (The bound, not
        // log_start_offset(): that is None once every remote segment expired, and the
        // local copies must go too.)
        let start = r.start_bound();
        let local = log.local();
        if local.log_start_offset() < start && start <= local.log_end_offset() {
            local
                .advance_log_start(start)
                .map_err(ArchiveError::LocalStart)?;
        }
        Ok(gone.len())
    }

    /// Remote retention of a one-copy topic, over its Parquet files: the log start moves
    /// past the files that go (the next Parquet round expires them) and the local log
    /// start with it. Returns how many files go.
    fn one_copy_retention(
        &self,
        log: &TieredLog,
        now_ms: i64,
        ms: Option<i64>,
        bytes: Option<u64>,
    ) -> usize {
        let Some(files) = log.parquet_reads() else {
            return 0;
        };
        let end = files.end().unwrap_or(-1);
        let beyond: u64 = log
            .local()
            .segments()
            .iter()
            .filter(|s| s.next_offset > end)
            .map(|s| s.size_bytes)
            .sum();
        let Some(bound) = files.retention_bound(now_ms, ms, bytes, beyond) else {
            return 0;
        };
        if bound <= log.log_start() {
            return 0;
        }
        let gone = files.files_below(bound);
        log.set_retention_start(bound);
        tracing::info!(topic = %log.topic(), partition = log.partition(), files = gone, start = bound, "remote retention moved the log start past Parquet files");
        let local = log.local();
        if local.log_start_offset() < bound
            && bound <= local.log_end_offset()
            && let Err(e) = local.advance_log_start(bound)
        {
            tracing::warn!(topic = %log.topic(), partition = log.partition(), error = %e, "cannot move the local log start with remote retention");
        }
        gone
    }

    /// Starts a pass of the remote tier's cleaner in its own task, for a compacted topic
    /// this broker leads, when the local cleaner has moved since the last pass and no
    /// pass is running (see `compaction`). `map_bytes`: the pass's offset map.
    pub fn compact_remote(
        &self,
        log: &Arc<TieredLog>,
        lead: Leadership,
        config: &TopicConfig,
        map_bytes: usize,
        now_ms: i64,
    ) {
        if !self.leads(lead) || !config.cleanup_policy.compacts() {
            return;
        }
        let Ok(mut cleaner) = self.remote_cleaner.clone().try_lock_owned() else {
            return;
        };
        if !cleaner.due(log) {
            return;
        }
        let settings = RemoteCleanSettings {
            map_bytes,
            segment_bytes: config.segment_bytes,
            index_interval: config.index_interval_bytes,
            delete_retention_ms: config.delete_retention_ms,
            leader_epoch: lead.leader_epoch,
            now_ms,
        };
        let log = log.clone();
        tokio::spawn(async move {
            match cleaner.run(&log, settings).await {
                Ok(Some(out)) if out.segments_before > 0 => {
                    tracing::info!(topic = %log.topic(), partition = log.partition(), ?out, "compacted the remote tier");
                }
                Ok(_) => {}
                Err(e) => {
                    metrics::counter!("strata_tier_compaction_failures_total").increment(1);
                    tracing::warn!(topic = %log.topic(), partition = log.partition(), error = %e, "remote compaction failed; the next pass retries");
                }
            }
        });
    }

    /// Deletes the objects of remote segments a compaction pass replaced, once `grace`
    /// has passed since (no listing: the partition remembers them).
    pub async fn delete_retired(&self, log: &TieredLog, grace: Duration) -> usize {
        match log.remote() {
            Some(r) => r.delete_retired(grace).await,
            None => 0,
        }
    }

    /// Deletes this partition's objects no manifest names, older than `grace`.
    pub async fn sweep_orphans(
        &self,
        log: &TieredLog,
        grace: Duration,
    ) -> Result<usize, ArchiveError> {
        match log.remote() {
            Some(r) => r
                .cleanup_orphans(grace)
                .await
                .map_err(ArchiveError::Orphans),
            None => Ok(0),
        }
    }

    /// One Parquet round for a partition of a topic with parquet.enable, when something
    /// changed for a leader (a new leadership, a newly sealed segment, a new log start,
    /// parquet.backfill) or every [`FOLLOWER_RELOAD_INTERVAL`] for a follower.
    /// `published`: the topic's files are published as an Iceberg table
    /// ([`crate::iceberg`]) in this catalog, so retention and compaction leave the
    /// objects of the files they drop to the publisher.
    /// `compact_now`: a leader runs the round whatever changed and rewrites every group
    /// of small files ([`strata_parquet::CompactPolicy::force`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn parquet(
        &mut self,
        tier: &Tier,
        key: &PartitionKey,
        log: &Arc<TieredLog>,
        lead: Leadership,
        config: &TopicConfig,
        published: Option<&strata_iceberg::Catalog>,
        compact_now: bool,
    ) -> Result<(), ArchiveError> {
        // Leaders read the manifest (an object-store GET) only when something changed.
        let leader_state = lead.leader.then(|| {
            let sealed = log
                .local()
                .segments()
                .iter()
                .filter(|s| s.sealed && s.next_offset <= lead.high_watermark)
                .map(|s| s.next_offset)
                .max();
            (
                lead.leader_epoch,
                log.log_start(),
                sealed,
                config.parquet_backfill,
            )
        });
        match leader_state {
            Some(state) if self.parquet_done == Some(state) && !compact_now => return Ok(()),
            Some(_) => {}
            None => {
                if self
                    .parquet_checked
                    .is_some_and(|at| at.elapsed() < FOLLOWER_RELOAD_INTERVAL)
                {
                    return Ok(());
                }
                self.parquet_checked = Some(Instant::now());
            }
        }
        let caught_up = parquet_step(tier, key, log, lead, config, published, compact_now).await?;
        if let Some(state) = leader_state
            && caught_up
        {
            self.parquet_done = Some(state);
        }
        Ok(())
    }
}

/// One round of Parquet for a partition of a topic with parquet.enable. The leader
/// converts its sealed local segments below the high-water mark, in offset order, from
/// where the sink's manifest says the files end (a segment cut elsewhere than the last
/// one converted, after a leader change, is read from that offset); files wholly below
/// the log start are deleted (retention). Batches that can never be converted become
/// dead letters in the sink's manifest and conversion goes on after them (see
/// [`write_parquet`]). A follower only reads the progress. Returns whether it caught up.
async fn parquet_step(
    tier: &Tier,
    key: &PartitionKey,
    log: &Arc<TieredLog>,
    lead: Leadership,
    config: &TopicConfig,
    published: Option<&strata_iceberg::Catalog>,
    compact_now: bool,
) -> Result<bool, ParquetError> {
    let (topic, index) = (log.topic(), log.partition());
    let options =
        strata_parquet::ConvertOptions::from_topic_config(topic.to_string(), index, config)
            .map_err(ParquetError::Options)?;
    let sink = ParquetSink::new(
        tier.store().clone(),
        strata_parquet::ParquetLayout::new(key.cluster_id.clone()),
        options,
    );
    let manifest = sink.manifest(topic, index).await?;
    // One copy: fetches below the local start read the files this manifest lists.
    let reads = log.one_copy().then(|| log.parquet_reads()).flatten();
    if let Some(r) = &reads {
        r.set_manifest(&manifest);
    }
    let local_start = log.local_start();
    let backfill = config.parquet_backfill && log.remote().is_some();
    let mut next = match manifest.next_offset {
        Some(n) if n < local_start && !backfill => {
            // The records in between left the local disk before they were converted
            // (parquet.enable turned on later): they can only come from the remote
            // tier, which parquet.backfill asks for. Retention must not wait on what
            // will not happen here.
            log.set_parquet_progress(i64::MAX);
            return Err(ParquetError::Gap {
                files_end: n,
                local_start,
                topic: topic.to_string(),
            });
        }
        Some(n) => n,
        // No file yet: from the log start (remote included) when backfilling, else from
        // where conversion was turned on.
        None if backfill => log.log_start().min(local_start),
        None => local_start,
    };
    log.set_parquet_progress(next);
    log.set_parquet_coverage(manifest.covered_start().map(|start| {
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
    if !lead.leader {
        return Ok(true);
    }
    let log_start = log.log_start();
    let mut budget: u64 = BACKFILL_BYTES_PER_ROUND;
    // Backfill below where the files start: segments offloaded before parquet.enable was
    // set, from the remote tier, a bounded amount per round so offloads of other
    // partitions are not held up behind it.
    if backfill
        && let Some(start) = manifest.covered_start()
        && start > log_start
        && let Some(remote) = log.remote()
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
            tracing::warn!(topic = %topic, partition = index, from = cursor, to = first.base_offset, "records expired before the backfill reached them");
            sink.restart_backfill(topic, index, first.base_offset)
                .await?;
            cursor = first.base_offset;
        }
        for seg in segments {
            let src = remote_source(tier, log, &remote, &seg, cursor).await?;
            let (sink2, topic2) = (sink.clone(), topic.to_string());
            let range = seg.base_offset.max(cursor)..seg.next_offset;
            let (outcome, done) = at_background_priority(move |rt| {
                rt.block_on(sink2.write_backfill_source_or_dead_letter(&topic2, index, &src, range))
            })
            .await??;
            report_parquet(log, &outcome);
            cursor = seg.next_offset.min(start);
            let known = log.parquet_coverage();
            log.set_parquet_coverage(Some(ParquetCoverage {
                start_offset: if done { log_start.min(start) } else { start },
                backfill_next: (!done).then_some(cursor),
                dead_letters: known.as_ref().map_or(0, |c| c.dead_letters),
                last_dead_letter: known.and_then(|c| c.last_dead_letter),
            }));
            metrics::counter!("strata_parquet_backfill_bytes_total", "topic" => topic.to_string())
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
        let Some(remote) = log.remote() else {
            return Err(ParquetError::NoRemote);
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
            tracing::warn!(topic = %topic, partition = index, from = next, to = start, "records expired before conversion; the Parquet files skip them");
            sink.skip_to(topic, index, start).await?;
            next = start;
        }
        for seg in segments {
            let src = remote_source(tier, log, &remote, &seg, next).await?;
            let range = seg.base_offset.max(next)..seg.next_offset;
            write_parquet(&sink, log, range, move || Ok(Box::new(src))).await?;
            next = seg.next_offset;
            log.set_parquet_progress(next);
            metrics::counter!("strata_parquet_backfill_bytes_total", "topic" => topic.to_string())
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
    // Below the last stable offset: a Parquet file is never rewritten, so it takes only
    // transactions that have ended (their aborted records are left out).
    let hwm = log.last_stable_offset(lead.high_watermark);
    for seg in log.local().segments() {
        if !seg.sealed || seg.next_offset > hwm {
            break;
        }
        if seg.next_offset <= next {
            continue;
        }
        let from = seg.base_offset.max(next);
        let end = seg.next_offset;
        let owner = log.clone();
        // The segment is read on the conversion thread, a few MiB at a time, twice (see
        // strata_parquet::stream): reading is part of conversion's cost.
        let open = move || -> Result<Box<dyn ByteSource>, ParquetError> {
            let src = LocalSegmentSource::open(owner, from, end)
                .map_err(|e| ParquetError::Read(e.into()))?;
            Ok(Box::new(src))
        };
        write_parquet(&sink, log, from..end, open).await?;
        next = seg.next_offset;
        log.set_parquet_progress(next);
    }
    // A topic published as an Iceberg table: its snapshots name the files until the
    // publisher's next commit, and the publisher deletes them with those snapshots.
    let objects = match published {
        Some(_) => strata_parquet::ExpiredObjects::Keep,
        None => strata_parquet::ExpiredObjects::Delete,
    };
    sink.expire_with(topic, index, log.log_start(), objects)
        .await?;
    // Compaction is housekeeping: a failure is logged and tried again with the next
    // segment, and does not hold conversion up.
    if lead.leader
        && let Err(e) = compact_parquet(&sink, log, config, published, compact_now).await
    {
        tracing::warn!(topic = %topic, partition = index, error = %e, "Parquet small-file compaction failed; it is tried again after the next segment");
    }
    // The files this round wrote, expired and compacted, for fetches (and for local
    // retention, which waits until fetches can read a segment's records from a file).
    if let Some(r) = &reads {
        r.reload().await.map_err(ParquetError::Files)?;
    }
    Ok(true)
}

/// Rewrites the partition's small Parquet files ([`strata_parquet::compact`]) on the
/// Parquet thread; `force` rewrites every group, not only full ones and past days. A
/// published topic's compaction takes only files its Iceberg table holds, so every file
/// it replaces is one the table's snapshots name, and their expiry deletes it.
async fn compact_parquet(
    sink: &ParquetSink,
    log: &TieredLog,
    config: &TopicConfig,
    published: Option<&strata_iceberg::Catalog>,
    force: bool,
) -> Result<(), ParquetError> {
    let (topic, index) = (log.topic().to_string(), log.partition());
    let now_ms = crate::remote::now_ms();
    let mut policy = strata_parquet::CompactPolicy::new(config.parquet_target_file_bytes, now_ms);
    policy.force = force;
    let objects = if let Some(catalog) = published {
        let manifest = sink.manifest(&topic, index).await?;
        if strata_parquet::compact::plan(&manifest, &policy).is_empty() {
            return Ok(());
        }
        let held = crate::iceberg::table_keys(catalog, &topic, index)
            .await
            .map_err(|e| ParquetError::Table(e.to_string()))?;
        policy.only = Some(held);
        strata_parquet::ExpiredObjects::Keep
    } else {
        strata_parquet::ExpiredObjects::Delete
    };
    let sink = sink.clone();
    let done = at_background_priority(move |rt| {
        rt.block_on(sink.compact(&topic, index, &policy, objects))
            .map_err(ParquetError::from)
    })
    .await??;
    for c in &done {
        tracing::debug!(topic = %log.topic(), partition = index, key = %c.file.key, files = c.replaced.len(), "compacted small parquet files");
        metrics::counter!("strata_parquet_compacted_files_total", "topic" => log.topic().to_string())
            .increment(c.replaced.len() as u64);
    }
    Ok(())
}

type Job = Box<dyn FnOnce() + Send>;

/// The thread Parquet conversion runs on.
static PARQUET_THREAD: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Job>>> =
    std::sync::OnceLock::new();

/// Runs `f` (CPU-bound conversion, given the runtime's handle for its object-store IO)
/// on one dedicated thread at the idle scheduling class (SCHED_IDLE) and the idle IO
/// class, so conversion uses the CPU producers and consumers leave idle and does not
/// compete with them: on a saturated broker the backlog waits (local retention waits
/// with it, and the local-disk cap pushes back on producers) instead of the producers
/// slowing down. One thread: a broker's conversions queue behind each other, which
/// bounds their memory too (one conversion's: a row group, an upload part and a read
/// buffer).
async fn at_background_priority<T: Send + 'static>(
    f: impl FnOnce(&tokio::runtime::Handle) -> T + Send + 'static,
) -> Result<T, ParquetError> {
    let thread = PARQUET_THREAD.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("strata-parquet".into())
            .spawn(move || {
                strata_log::priority::lower_this_thread("Parquet");
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
        return Err(ParquetError::Thread(
            "the Parquet thread could not be started",
        ));
    };
    let rt = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    thread
        .send(Box::new(move || {
            let _ = tx.send(f(&rt));
        }))
        .map_err(|_| ParquetError::Thread("the Parquet thread stopped"))?;
    rx.await
        .map_err(|_| ParquetError::Thread("the Parquet thread dropped a conversion"))
}

/// A remote segment's batches from `from` (a batch boundary) to its end, as a source
/// conversion reads by ranged GETs.
async fn remote_source(
    tier: &Tier,
    log: &TieredLog,
    remote: &RemotePartition,
    seg: &RemoteSegment,
    from: Offset,
) -> Result<RemoteSegmentSource, ParquetError> {
    RemoteSegmentSource::open(tier.store().clone(), log.tier().cloned(), remote, seg, from)
        .await
        .map_err(|e| ParquetError::Read(e.into()))
}

/// Converts one segment's batches `range` (the source `open` returns, on the
/// conversion thread) into Parquet files through the sink, streaming: a row group and
/// an upload part in memory, not the segment. Batches that can never be converted are
/// set aside as dead letters in the sink's manifest (reported by [`report_parquet`]) so
/// that conversion, and local retention behind it, go on; other errors (the store, a
/// pending transaction, the options) are returned, and the archiver retries.
async fn write_parquet(
    sink: &ParquetSink,
    log: &TieredLog,
    range: std::ops::Range<Offset>,
    open: impl FnOnce() -> Result<Box<dyn ByteSource>, ParquetError> + Send + 'static,
) -> Result<(), ParquetError> {
    let (sink2, topic, index) = (sink.clone(), log.topic().to_string(), log.partition());
    let outcome = at_background_priority(move |rt| {
        let src = open()?;
        rt.block_on(sink2.write_source_or_dead_letter(&topic, index, src.as_ref(), range))
            .map_err(ParquetError::from)
    })
    .await??;
    report_parquet(log, &outcome);
    Ok(())
}

/// Logs and counts what a conversion wrote and set aside, and notes the dead letters for
/// the tier status.
fn report_parquet(log: &TieredLog, outcome: &SegmentOutcome) {
    let (topic, index) = (log.topic(), log.partition());
    for f in &outcome.files {
        tracing::debug!(topic = %topic, partition = index, key = %f.key, rows = f.rows, "wrote a parquet file");
        metrics::counter!("strata_parquet_rows_total", "topic" => topic.to_string())
            .increment(f.rows);
        if f.raw_fallbacks > 0 {
            tracing::warn!(topic = %topic, partition = index, key = %f.key, values = f.raw_fallbacks, "values that do not fit parquet.value.schema were kept whole in _raw");
            metrics::counter!("strata_parquet_raw_values_total", "topic" => topic.to_string())
                .increment(f.raw_fallbacks);
        }
    }
    let Some(last) = outcome.dead_letters.last() else {
        return;
    };
    for d in &outcome.dead_letters {
        tracing::warn!(
            topic = %topic,
            partition = index,
            first_offset = d.first_offset,
            last_offset = d.last_offset,
            reason = %d.reason,
            "parquet: offsets that cannot be converted are set aside as a dead letter in the manifest; conversion goes on after them"
        );
    }
    metrics::counter!("strata_parquet_dead_letters_total", "topic" => topic.to_string())
        .increment(outcome.dead_letters.len() as u64);
    let known = log.parquet_coverage();
    log.set_parquet_coverage(Some(ParquetCoverage {
        start_offset: known
            .as_ref()
            .map_or(outcome.dead_letters[0].first_offset, |c| c.start_offset),
        backfill_next: known.as_ref().and_then(|c| c.backfill_next),
        dead_letters: known.as_ref().map_or(0, |c| c.dead_letters) + outcome.dead_letters.len(),
        last_dead_letter: Some(last.clone()),
    }));
}

/// Multipart uploads in create mode go through a staging object that is copied into
/// place (cold/store); a crash between the two leaves it behind. Deletes those older
/// than `grace`.
pub async fn sweep_staging(tier: &Tier, grace: Duration) {
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
