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
use crate::one_copy::ParquetReads;
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

/// A Parquet conversion that keeps failing (a `parquet.value.schema` no value fits, a
/// store that refuses writes): what it said last, since when, how many rounds. Local
/// retention waits for the conversion meanwhile, so the local log grows; the tier status
/// and /healthz show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParquetFailure {
    pub error: String,
    /// When the first failure of this run of failures happened (ms).
    pub since_ms: i64,
    pub failures: u64,
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
    /// The local log, shared with the partition that writes it.
    log: Arc<Log>,
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
    /// remote.storage.format=parquet: the Parquet files are the bucket's only copy of
    /// the sealed log (no segment is offloaded; reads below the local start re-encode
    /// batches from the files).
    one_copy: AtomicBool,
    /// The partition's Parquet files as fetches read them (attached with the remote
    /// tier).
    parquet_reads: RwLock<Option<Arc<ParquetReads>>>,
    /// One-copy topics: where remote retention moved the log start (-1: nowhere yet);
    /// the next Parquet round expires the files below it.
    retention_start: AtomicI64,
    /// Topics with parquet.enable: the offset below which the log is in Parquet files
    /// (the sink's manifest, as the archiver last read it; -1 unknown).
    parquet_progress: AtomicI64,
    /// Topics with parquet.enable: where the files start, and a backfill's remaining
    /// offsets below it (for the tier status; `None` unknown).
    parquet_coverage: Mutex<Option<ParquetCoverage>>,
    /// Topics with parquet.enable: the conversion's failures since it last succeeded.
    parquet_failure: Mutex<Option<ParquetFailure>>,
}

impl TieredLog {
    pub fn new(
        log: impl Into<Arc<Log>>,
        topic: Arc<str>,
        topic_id: TopicId,
        partition: i32,
        tier: Option<Arc<Tier>>,
    ) -> TieredLog {
        TieredLog {
            log: log.into(),
            topic,
            topic_id,
            partition,
            tier,
            remote: RwLock::new(None),
            tiered: AtomicBool::new(false),
            parquet_enable: AtomicBool::new(false),
            one_copy: AtomicBool::new(false),
            parquet_reads: RwLock::new(None),
            retention_start: AtomicI64::new(-1),
            parquet_progress: AtomicI64::new(-1),
            parquet_coverage: Mutex::new(None),
            parquet_failure: Mutex::new(None),
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

    /// The local log, for the archiver's reads and its trims below what is offloaded.
    /// Writes (appends, replication, truncation) are the partition's: it holds the same
    /// log and writes it directly, never through the tier.
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
    /// there too). A one-copy topic's remote end is where its Parquet files end (without
    /// producer state: the files do not keep it, so a retry of a batch that is only in
    /// the bucket is not recognised as one).
    pub async fn open_remote(
        &self,
        key: PartitionKey,
        restarted: impl FnOnce(Offset),
    ) -> Result<(), AttachError> {
        let Some(tier) = &self.tier else {
            return Err(AttachError::NoTier);
        };
        let reads = Arc::new(ParquetReads::new(
            tier.store().clone(),
            tier.cache().clone(),
            &key.cluster_id,
            &self.topic,
            self.partition,
        ));
        let remote = Arc::new(tier.open_partition(key).await?);
        let local_empty = self.log.log_end_offset() == self.log.log_start_offset();
        let mut restarted = Some(restarted);
        if let Some(end) = remote.end_offset()
            && local_empty
            && self.log.log_end_offset() < end
        {
            // The producers and epochs of the log that offloaded the last segment.
            let state = remote.end_state().await?;
            self.log.restore_at(end, &state)?;
            if let Some(f) = restarted.take() {
                f(end);
            }
            tracing::info!(topic = %self.topic, partition = self.partition, offset = end, "local log continues at the remote end");
        }
        if self.one_copy.load(Ordering::Relaxed) {
            reads.reload().await?;
            if let Some(end) = reads.end()
                && self.log.log_end_offset() == self.log.log_start_offset()
                && self.log.log_end_offset() < end
            {
                self.log
                    .restore_at(end, &strata_log::RemoteEndState::default())?;
                if let Some(f) = restarted.take() {
                    f(end);
                }
                tracing::info!(topic = %self.topic, partition = self.partition, offset = end, "local log continues where the Parquet files end");
            }
        }
        *self
            .parquet_reads
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(reads);
        self.attach_remote(remote);
        Ok(())
    }

    /// The topic's remote.storage.enable, parquet.enable and whether
    /// remote.storage.format is parquet (one copy), which decide what local retention
    /// waits for and where reads below the local start go.
    pub fn set_policy(&self, tiered: bool, parquet_enable: bool, one_copy: bool) {
        self.tiered.store(tiered, Ordering::Relaxed);
        self.parquet_enable.store(parquet_enable, Ordering::Relaxed);
        self.one_copy.store(one_copy, Ordering::Relaxed);
    }

    /// Whether the Parquet files are the bucket's only copy (remote.storage.format=parquet).
    pub fn one_copy(&self) -> bool {
        self.one_copy.load(Ordering::Relaxed)
    }

    /// The partition's Parquet files as fetches read them, once the remote tier is
    /// attached.
    pub fn parquet_reads(&self) -> Option<Arc<ParquetReads>> {
        self.parquet_reads
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A one-copy topic's Parquet files, when attached: where reads below the local
    /// start (and below the raw segments a topic tiered before it became one-copy) go.
    fn one_copy_reads(&self) -> Option<Arc<ParquetReads>> {
        if self.one_copy() {
            self.parquet_reads()
        } else {
            None
        }
    }

    /// The earliest offset a consumer can read: the remote start when the remote tier
    /// holds data below the local start (KIP-405; for a one-copy topic the Parquet
    /// files' start too), else the local start.
    pub fn log_start(&self) -> Offset {
        let local = self.log.log_start_offset();
        let remote = self.remote().and_then(|r| r.log_start_offset());
        let parquet = self
            .one_copy_reads()
            .and_then(|r| r.start())
            .map(|s| s.max(self.retention_start.load(Ordering::Relaxed)));
        [remote, parquet]
            .into_iter()
            .flatten()
            .fold(local, Offset::min)
    }

    /// One-copy topics: moves the log start up to `offset` (remote retention over the
    /// Parquet files); the files below it expire in the next Parquet round.
    pub fn set_retention_start(&self, offset: Offset) {
        self.retention_start.fetch_max(offset, Ordering::Relaxed);
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

    /// KIP-1005's latest-tiered offset: the last offset in object storage (for a
    /// one-copy topic, in its Parquet files).
    pub fn latest_tiered(&self) -> Option<Offset> {
        let remote = self.remote().and_then(|r| r.end_offset());
        let parquet = self.one_copy_reads().and_then(|r| r.end());
        remote.max(parquet).map(|e| e - 1)
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
        let local_start = self.log.log_start_offset();
        // A one-copy topic reads its Parquet files, except where raw segments tiered
        // before it became one-copy still hold the offset.
        let parquet = self.one_copy_reads().filter(|_| !remote.holds(offset));
        let _permit = tier.read_permit().await;
        let started = Instant::now();
        let id = self.reader_id(reader);
        let r = match &parquet {
            Some(files) => files
                .read(offset, max_bytes.max(1), local_start, id)
                .await
                .map(|data| data.ok_or(local_start)),
            None => remote
                .read(offset, max_bytes.max(1), id)
                .await
                .map(|r| Ok(r.data)),
        };
        metrics::histogram!("strata_tier_remote_fetch_seconds")
            .record(started.elapsed().as_secs_f64());
        match r {
            Ok(Ok(data)) => Ok(data),
            // Only gaps (aborted records, markers) up to the local start: the consumer
            // goes on from there.
            Ok(Err(local_start)) => self.read_local(local_start, max_bytes, upper_bound),
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

    /// A consumer's read of the local log in pieces of whole batches, each read with at
    /// most `piece` bytes asked for, up to `max_bytes` in all (the first piece at least
    /// one whole batch, KIP-74; the rest only while a whole piece is still wanted),
    /// crossing segments, below `upper_bound`. A client may ask
    /// for tens of megabytes of one partition (librdkafka doubles its ask after a fetch
    /// that gave it no message, such as one of only aborted records, and never shrinks
    /// it back): read in pieces, those come from the pool of read buffers instead of
    /// fresh allocations the size of the ask. A piece that fails after the first ends
    /// the read with what was read.
    pub fn read_local_pieces(
        &self,
        offset: Offset,
        max_bytes: usize,
        upper_bound: Option<Offset>,
        piece: usize,
    ) -> Result<Vec<Bytes>, ReadError> {
        self.read_pieces(offset, max_bytes, upper_bound, piece, false)
    }

    /// A read_committed consumer's read of the local log below `lso`, in pieces as
    /// [`read_local_pieces`](Self::read_local_pieces), without the batches of aborted
    /// transactions: the consumer would drop them (it gets the aborted transactions of
    /// the range all the same), so they are neither sent nor counted against
    /// `max_bytes`; what is left goes out as slices of the read buffers (offsets with
    /// gaps, as after compaction). Control batches stay: an ABORT marker in a response
    /// is what tells a client such as librdkafka that a fetch of no message was not too
    /// small (it doubles its fetch size after one that was, for good). Past aborted
    /// data the read goes on for at most `max_bytes` + [`ABORTED_READ_AHEAD`] bytes;
    /// if it found nothing else, the last aborted batch goes out so the consumer moves
    /// past what was read.
    pub fn read_local_committed(
        &self,
        offset: Offset,
        max_bytes: usize,
        lso: Offset,
        piece: usize,
    ) -> Result<Vec<Bytes>, ReadError> {
        self.read_pieces(offset, max_bytes, Some(lso), piece, true)
    }

    /// [`read_local_pieces`](Self::read_local_pieces), and with `leave_out_aborted`
    /// [`read_local_committed`](Self::read_local_committed).
    fn read_pieces(
        &self,
        offset: Offset,
        max_bytes: usize,
        upper_bound: Option<Offset>,
        piece: usize,
        leave_out_aborted: bool,
    ) -> Result<Vec<Bytes>, ReadError> {
        let piece = piece.max(1);
        let max_bytes = max_bytes.max(1);
        let mut out: Vec<Bytes> = Vec::new();
        let (mut at, mut sent, mut read) = (offset, 0usize, 0usize);
        let mut last_aborted: Option<Bytes> = None;
        // After the first, a piece is read only when a whole one is still wanted: a
        // short last read would mostly fetch a batch that does not fit.
        while upper_bound.is_none_or(|u| at < u)
            && (out.is_empty() || max_bytes.saturating_sub(sent) >= piece)
            && read < max_bytes.saturating_add(ABORTED_READ_AHEAD)
        {
            let ask = max_bytes.saturating_sub(sent).clamp(1, piece);
            let r = match self.log.read(at, ask, upper_bound) {
                Ok(r) => r,
                Err(_) if !out.is_empty() || last_aborted.is_some() => break,
                Err(e) => {
                    if e.error_code() != ErrorCode::OffsetOutOfRange {
                        tracing::warn!(topic = %self.topic, partition = self.partition, offset, error = %e, "fetch read failed");
                    }
                    return Err(e.into());
                }
            };
            if r.data.is_empty() || r.next_offset <= at {
                break;
            }
            let kept = if leave_out_aborted {
                drop_aborted(&r.data, &self.log.aborted_transactions(at, r.next_offset))
            } else {
                Kept {
                    runs: vec![r.data.clone()],
                    last_aborted: None,
                }
            };
            let kept_len: usize = kept.runs.iter().map(Bytes::len).sum();
            // After the first, a read whose batches exceed what is left stays for the
            // next fetch (only a first batch may be larger than the limit, KIP-74).
            if !out.is_empty() && kept_len > max_bytes.saturating_sub(sent) {
                break;
            }
            read += r.data.len();
            sent += kept_len;
            at = r.next_offset;
            out.extend(kept.runs);
            if kept.last_aborted.is_some() {
                last_aborted = kept.last_aborted;
            }
            if leave_out_aborted {
                metrics::counter!("strata_fetch_aborted_bytes_skipped_total")
                    .increment((r.data.len() - kept_len) as u64);
            }
        }
        if out.is_empty() {
            out.extend(last_aborted);
        }
        Ok(out)
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
        let parquet = self.one_copy_reads().map_or(-1, |r| r.max_timestamp());
        local.max(remote).max(parquet)
    }

    /// The first record at or after `timestamp` below `upper_bound` (the high-water
    /// mark): its offset and timestamp. Remote segments first (they are older), then a
    /// one-copy topic's Parquet files, then local.
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
        if let Some(files) = self.one_copy_reads()
            && files.start().is_some_and(|s| s < local_start)
            && let Some(found) = files
                .offset_for_timestamp(timestamp, local_start, self.reader_id(reader))
                .await?
        {
            return Ok(Some(found));
        }
        Ok(self
            .log
            .offset_for_timestamp(timestamp)?
            .filter(|(o, _)| *o < upper_bound))
    }

    /// Whether local segment [base, next) may be deleted by local retention: for topics
    /// that tier, only once offloaded ("not deleted until offloaded") or below the remote
    /// start; for topics that write Parquet, only once converted (for a one-copy topic,
    /// that is its offload).
    pub fn may_delete_locally(&self, base: Offset, next: Offset) -> bool {
        // Parquet is written from local segments: none goes before it is converted.
        if self.parquet_enable.load(Ordering::Relaxed) && self.parquet_progress() < next {
            return false;
        }
        // The files are the copy in the bucket, and fetches below the local start read
        // them (converted and in the reader's list: the archiver hands it each manifest
        // it writes before the progress moves).
        if self.one_copy() {
            return self
                .one_copy_reads()
                .and_then(|r| r.end())
                .is_some_and(|end| end >= next);
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

    /// The conversion's failures since it last succeeded; `None` when its last round
    /// succeeded (or none ran).
    pub fn parquet_failure(&self) -> Option<ParquetFailure> {
        self.parquet_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records how a Parquet round ended: an error starts (or extends) a run of
    /// failures, a success ends it.
    pub fn note_parquet_round(&self, result: Result<(), String>, now_ms: i64) {
        let mut f = self
            .parquet_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *f = match (result, f.take()) {
            (Ok(()), _) => None,
            (Err(error), Some(before)) => Some(ParquetFailure {
                error,
                since_ms: before.since_ms,
                failures: before.failures + 1,
            }),
            (Err(error), None) => Some(ParquetFailure {
                error,
                since_ms: now_ms,
                failures: 1,
            }),
        };
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

    /// Sealed local segments not yet offloaded (for a one-copy topic, not yet in its
    /// Parquet files): their bytes, and how long the oldest has waited by its newest
    /// record's timestamp, in seconds.
    pub fn offload_lag(&self, now_ms: i64) -> (u64, f64) {
        let remote_end = match self.one_copy_reads() {
            Some(files) => files.end(),
            None => self.remote().and_then(|r| r.end_offset()),
        };
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

/// How far a read_committed read goes past its byte limit through aborted batches,
/// looking for something to send.
pub const ABORTED_READ_AHEAD: usize = 32 << 20;

/// A read's batches without those of aborted transactions.
struct Kept {
    /// Runs of consecutive kept batches, slices of the read's buffer.
    runs: Vec<Bytes>,
    /// The last dropped batch, if any.
    last_aborted: Option<Bytes>,
}

/// Splits `data` (whole batches) into the runs of batches a read_committed consumer
/// keeps: all but the data batches of a producer from an aborted transaction's first
/// offset up to its ABORT marker (`aborted`, the transactions overlapping the range).
fn drop_aborted(data: &Bytes, aborted: &[AbortedTxn]) -> Kept {
    let mut kept = Kept {
        runs: Vec::new(),
        last_aborted: None,
    };
    if aborted.is_empty() {
        kept.runs.push(data.clone());
        return kept;
    }
    let (mut run_start, mut pos) = (0usize, 0usize);
    for b in strata_proto::batch::batches(data) {
        let Ok(b) = b else { break };
        let h = b.header();
        let is_aborted = h.is_transactional()
            && !h.is_control()
            && aborted.iter().any(|a| {
                a.producer_id == h.producer_id
                    && a.first_offset <= h.base_offset
                    && h.base_offset < a.last_offset
            });
        let end = pos + b.len();
        if is_aborted {
            if pos > run_start {
                kept.runs.push(data.slice(run_start..pos));
            }
            kept.last_aborted = Some(data.slice(pos..end));
            run_start = end;
        }
        pos = end;
    }
    // Whatever did not parse goes as it is: the client reports it.
    if data.len() > run_start {
        kept.runs.push(data.slice(run_start..));
    }
    kept
}
