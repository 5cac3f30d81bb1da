//! One partition's log as a reader sees it: the local [`Log`] and, below its start, the
//! remote tier (KIP-405's `UnifiedLog`). Fetch and ListOffsets ask this and nothing
//! else; where the bytes live (local disk, the chunk cache, the object store) is decided
//! here, and so is whether a local segment may be deleted (only once it is offloaded,
//! and converted to Parquet where the topic asks for that).

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use bytes::Bytes;
use strata_cache::ReaderId;
use strata_log::txn_index::AbortedTxn;
use strata_log::{Log, LogError};
use strata_proto::{ErrorCode, Offset, TopicId};

use crate::error::TierError;
use crate::layout::PartitionKey;
use crate::remote::RemotePartition;
use crate::service::Tier;

/// Why a read or a time lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Local(#[from] LogError),
    #[error(transparent)]
    Remote(#[from] TierError),
    /// Below the local start with no remote tier attached (yet) to read from.
    #[error("offset {offset} is below the local log start and no remote tier is attached")]
    NoRemote { offset: Offset },
}

impl ReadError {
    /// The Kafka error a fetch or list-offsets answers with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ReadError::Local(e) => e.error_code(),
            ReadError::Remote(e) => e.error_code(),
            ReadError::NoRemote { .. } => ErrorCode::OffsetOutOfRange,
        }
    }
}

/// Where a partition's Parquet files start and how much a backfill has left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParquetCoverage {
    /// The first offset the files cover contiguously up to the progress.
    pub start_offset: Offset,
    /// A backfill below the start: the first offset it has not converted.
    pub backfill_next: Option<Offset>,
    /// The manifest's dead letters (offsets set aside as unconvertible), and the one
    /// recorded last.
    pub dead_letters: usize,
    pub last_dead_letter: Option<strata_parquet::DeadLetter>,
}

/// Why a remote tier could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("the broker has no object store")]
    NoTier,
    /// The manifest, or the last remote segment's producer state and epochs, could not
    /// be loaded (the store is down, or they are damaged).
    #[error("cannot load the remote tier: {0}")]
    Load(#[from] TierError),
    /// The local log could not restart at the remote end.
    #[error("cannot align the local log with the remote tier: {0}")]
    Align(#[from] LogError),
}

/// A partition's tiered log.
#[derive(Debug)]
pub struct TieredLog {
    log: Log,
    topic: Arc<str>,
    topic_id: TopicId,
    partition: i32,
    /// The broker's tier service (store, cache, remote-read permits), if it has one.
    tier: Option<Arc<Tier>>,
    /// The remote tier, once attached (topics with remote.storage.enable=true).
    remote: RwLock<Option<Arc<RemotePartition>>>,
    /// remote.storage.enable: local segments go only once offloaded.
    tiered: AtomicBool,
    /// parquet.enable: local segments go only once converted.
    parquet_enable: AtomicBool,
    /// Topics with parquet.enable: the offset below which the log is in Parquet files
    /// (the sink's manifest, as the archiver last read it; -1 unknown).
    parquet_progress: AtomicI64,
    /// Topics with parquet.enable: where the files start, and a backfill's remaining
    /// offsets below it (for the tier status; `None` unknown).
    parquet_coverage: Mutex<Option<ParquetCoverage>>,
}

impl TieredLog {
    pub fn new(
        log: Log,
        topic: Arc<str>,
        topic_id: TopicId,
        partition: i32,
        tier: Option<Arc<Tier>>,
    ) -> TieredLog {
        TieredLog {
            log,
            topic,
            topic_id,
            partition,
            tier,
            remote: RwLock::new(None),
            tiered: AtomicBool::new(false),
            parquet_enable: AtomicBool::new(false),
            parquet_progress: AtomicI64::new(-1),
            parquet_coverage: Mutex::new(None),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn topic_id(&self) -> TopicId {
        self.topic_id
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The local log: appends, truncation and replication work on it directly.
    pub fn local(&self) -> &Log {
        &self.log
    }

    /// The broker's tier service, if it has one.
    pub fn tier(&self) -> Option<&Arc<Tier>> {
        self.tier.as_ref()
    }

    /// The remote tier, if attached.
    pub fn remote(&self) -> Option<Arc<RemotePartition>> {
        self.remote
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn attach_remote(&self, remote: Arc<RemotePartition>) {
        *self.remote.write().unwrap_or_else(|e| e.into_inner()) = Some(remote);
    }

    /// Opens the remote tier stored under `key` (loads its manifest) and attaches it. A
    /// local log that is empty while the remote tier holds data (a broker restarted with
    /// an empty data dir, or a topic recovered from the bucket) first restarts at the
    /// remote end, so offsets stay dense, with the producer state and leader epoch the
    /// last remote segment carries (`Log::restore_at`): then `restarted` is called with the new local
    /// start before the remote tier is attached (the partition's high-water mark starts
    /// there too).
    pub async fn open_remote(
        &self,
        key: PartitionKey,
        restarted: impl FnOnce(Offset),
    ) -> Result<(), AttachError> {
        let Some(tier) = &self.tier else {
            return Err(AttachError::NoTier);
        };
        let remote = Arc::new(tier.open_partition(key).await?);
        if let Some(end) = remote.end_offset() {
            let local_empty = self.log.log_end_offset() == self.log.log_start_offset();
            if local_empty && self.log.log_end_offset() < end {
                // The producers and epochs of the log that offloaded the last segment.
                let state = remote.end_state().await?;
                self.log.restore_at(end, &state)?;
                restarted(end);
                tracing::info!(topic = %self.topic, partition = self.partition, offset = end, "local log continues at the remote end");
            }
        }
        self.attach_remote(remote);
        Ok(())
    }

    /// The topic's remote.storage.enable and parquet.enable, which decide what local
    /// retention waits for.
    pub fn set_policy(&self, tiered: bool, parquet_enable: bool) {
        self.tiered.store(tiered, Ordering::Relaxed);
        self.parquet_enable.store(parquet_enable, Ordering::Relaxed);
    }

    /// The earliest offset a consumer can read: the remote start when the remote tier
    /// holds data below the local start (KIP-405), else the local start.
    pub fn log_start(&self) -> Offset {
        let local = self.log.log_start_offset();
        match self.remote().and_then(|r| r.log_start_offset()) {
            Some(remote) => remote.min(local),
            None => local,
        }
    }

    /// KIP-1005's earliest-local offset: the first offset on local disk.
    pub fn local_start(&self) -> Offset {
        self.log.log_start_offset()
    }

    pub fn log_end(&self) -> Offset {
        self.log.log_end_offset()
    }

    /// Bytes on local disk.
    pub fn local_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    /// KIP-1005's latest-tiered offset: the last offset in object storage.
    pub fn latest_tiered(&self) -> Option<Offset> {
        self.remote().and_then(|r| r.end_offset()).map(|e| e - 1)
    }

    /// The last stable offset with the high-water mark at `high_watermark` (KIP-98): a
    /// read_committed consumer reads below it.
    pub fn last_stable_offset(&self, high_watermark: Offset) -> Offset {
        self.log.last_stable_offset(high_watermark)
    }

    /// The aborted transactions a read_committed fetch of `[from, upper)` carries: from
    /// the `.txnindex` objects of the remote segments below the local start (when
    /// `from` is below it), then from the local log's, exactly as one log would answer.
    pub async fn aborted_transactions(
        &self,
        from: Offset,
        upper: Offset,
    ) -> Result<Vec<AbortedTxn>, ReadError> {
        let local_start = self.log.log_start_offset();
        let mut out = Vec::new();
        if from < local_start
            && let Some(remote) = self.remote()
        {
            let (remote_part, done) = remote
                .aborted_transactions(from, upper, local_start)
                .await
                .map_err(ReadError::from)?;
            out = remote_part;
            if done {
                return Ok(out);
            }
        }
        out.extend(self.log.aborted_transactions(from.max(local_start), upper));
        Ok(out)
    }

    /// Whether a read at `offset` waits on the object store (it is below the local
    /// start); a fetch starts those first and concurrently.
    pub fn waits_on_remote(&self, offset: Offset) -> bool {
        offset < self.log.log_start_offset()
    }

    /// A consumer's read: whole batches starting with the one holding `offset`, up to
    /// `max_bytes` (at least one whole batch, KIP-74), from one segment, below
    /// `upper_bound` when given (the high-water mark). Below the local start it comes
    /// from the remote tier through the chunk cache, on the tier's bounded read pool;
    /// `reader` names the caller's stream (a connection) for the cache's read-ahead.
    pub async fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        upper_bound: Option<Offset>,
        reader: u64,
    ) -> Result<Bytes, ReadError> {
        if !self.waits_on_remote(offset) {
            return self.read_local(offset, max_bytes, upper_bound);
        }
        let (Some(tier), Some(remote)) = (self.tier.as_ref(), self.remote()) else {
            return Err(ReadError::NoRemote { offset });
        };
        let _permit = tier.read_permit().await;
        let started = Instant::now();
        let r = remote
            .read(offset, max_bytes.max(1), self.reader_id(reader))
            .await;
        metrics::histogram!("strata_tier_remote_fetch_seconds")
            .record(started.elapsed().as_secs_f64());
        match r {
            Ok(r) => Ok(r.data),
            Err(e) => {
                tracing::warn!(topic = %self.topic, partition = self.partition, offset, error = %e, "remote read failed");
                metrics::counter!("strata_tier_remote_read_errors_total").increment(1);
                Err(e.into())
            }
        }
    }

    /// A read of the local log only: followers replicate from it (KIP-405: what is only
    /// in the object store is not replicated).
    pub fn read_local(
        &self,
        offset: Offset,
        max_bytes: usize,
        upper_bound: Option<Offset>,
    ) -> Result<Bytes, ReadError> {
        match self.log.read(offset, max_bytes.max(1), upper_bound) {
            Ok(r) => Ok(r.data),
            Err(e) => {
                if e.error_code() != ErrorCode::OffsetOutOfRange {
                    tracing::warn!(topic = %self.topic, partition = self.partition, offset, error = %e, "fetch read failed");
                }
                Err(e.into())
            }
        }
    }

    /// One read-ahead stream per (caller stream, partition): a consumer catching up.
    fn reader_id(&self, reader: u64) -> ReaderId {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (reader, self.topic_id, self.partition).hash(&mut h);
        ReaderId(h.finish())
    }

    /// The largest record timestamp in the log, remote included (-1 when empty).
    pub fn max_timestamp(&self) -> i64 {
        let local = self
            .log
            .segments()
            .iter()
            .map(|s| s.max_timestamp)
            .max()
            .unwrap_or(-1);
        let remote = self.remote().map_or(-1, |r| {
            r.manifest_snapshot()
                .segments()
                .iter()
                .map(|s| s.max_timestamp)
                .max()
                .unwrap_or(-1)
        });
        local.max(remote)
    }

    /// The first record at or after `timestamp` below `upper_bound` (the high-water
    /// mark): its offset and timestamp. Remote segments first (they are older), then
    /// local.
    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
        upper_bound: Offset,
        reader: u64,
    ) -> Result<Option<(Offset, i64)>, ReadError> {
        let local_start = self.log.log_start_offset();
        if let Some(r) = self.remote()
            && r.log_start_offset().is_some_and(|s| s < local_start)
        {
            match r
                .offset_for_timestamp(timestamp, self.reader_id(reader))
                .await?
            {
                Some((o, ts)) if o < local_start => return Ok(Some((o, ts))),
                _ => {}
            }
        }
        Ok(self
            .log
            .offset_for_timestamp(timestamp)?
            .filter(|(o, _)| *o < upper_bound))
    }

    /// Whether local segment [base, next) may be deleted by local retention: for topics
    /// that tier, only once offloaded ("not deleted until offloaded") or below the remote
    /// start; for topics that write Parquet, only once converted.
    pub fn may_delete_locally(&self, base: Offset, next: Offset) -> bool {
        // Parquet is written from local segments: none goes before it is converted.
        if self.parquet_enable.load(Ordering::Relaxed) && self.parquet_progress() < next {
            return false;
        }
        if !self.tiered.load(Ordering::Relaxed) {
            return true;
        }
        // Offloaded, or below the remote start (remote retention expired it: it is
        // below the log start and no reader may see it).
        self.remote()
            .is_some_and(|r| r.is_offloaded(base, next) || next <= r.start_bound())
    }

    /// Topics with parquet.enable: the offset below which the log is in Parquet files.
    pub fn parquet_progress(&self) -> Offset {
        self.parquet_progress.load(Ordering::Relaxed)
    }

    pub fn set_parquet_progress(&self, next: Offset) {
        self.parquet_progress.store(next, Ordering::Relaxed);
    }

    pub fn parquet_coverage(&self) -> Option<ParquetCoverage> {
        self.parquet_coverage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_parquet_coverage(&self, c: Option<ParquetCoverage>) {
        *self
            .parquet_coverage
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = c;
    }

    /// Sealed local segments not yet offloaded: their bytes, and how long the oldest has
    /// waited by its newest record's timestamp, in seconds.
    pub fn offload_lag(&self, now_ms: i64) -> (u64, f64) {
        let remote_end = self.remote().and_then(|r| r.end_offset());
        let pending: Vec<_> = self
            .log
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
}
