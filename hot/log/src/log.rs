//! The partition log: the [`Log`] and its state, appends (as leader and as follower),
//! rolls, flushes, checkpoints, producer state and the leader-epoch cache. Its children
//! own the rest: `loader` opens and recovers it (Kafka's `LogLoader`), `read` reads it,
//! `retention` removes data from it (truncation, retention, log start moves).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use strata_proto::batch::{self, RecordBatch};
use strata_proto::control::{self, MarkerKind};
use strata_proto::{BatchHeader, LeaderEpoch, Offset, ProducerId};

use crate::checkpoint;
use crate::clock::Clock;
use crate::config::{IoMode, LogConfig};
use crate::epoch::{EpochEntry, LeaderEpochCache};
use crate::error::LogError;
use crate::index::rel;
use crate::producer::{CompletedTxn, ProducerEntry, ProducerState, SequenceCheck};
use crate::segment::{self, Segment};
use crate::snapshot;
use crate::tail::{self, TailCache};
use crate::txn_index::AbortedTxn;

pub(crate) mod cleaner;
mod loader;
mod read;
mod retention;

pub use self::loader::{RecoveryReport, Truncation};
pub use self::read::SealedSpan;

const RECOVERY_POINT_FILE: &str = "recovery-point";
/// Extra bytes a read takes beyond max_bytes, to cover the walk from the sparse index
/// entry to the wanted batch (index.interval.bytes is 4 KiB by default).
pub(crate) const READ_SLACK: u64 = 64 * 1024;
/// The bytes one read of [`Log::read_range`] asks for.
const RANGE_CHUNK: usize = 8 << 20;
const LOG_START_FILE: &str = "log-start-offset";
/// Kafka's name for the leader-epoch cache's checkpoint.
const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";
/// Present once the log may hold offset gaps (a cleaner pass, or a follower that took
/// a leader's gap), written before the first gap is. Recovery takes a batch past where
/// the previous one ended as a gap only when it is there: the base offset is not
/// covered by the CRC, so in a log that never had gaps a jump is damage, and the tail
/// from there is cut as before.
const GAPS_FILE: &str = "offset-gaps";

/// What an append did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AppendInfo {
    /// Offset given to the first record.
    pub first_offset: Offset,
    /// Offset of the last record.
    pub last_offset: Offset,
    /// The log-end offset after the append.
    pub log_end_offset: Offset,
    /// The largest record timestamp in the appended batches.
    pub max_timestamp: i64,
    /// The broker time stamped into the batches, when the topic uses LogAppendTime.
    pub log_append_time: Option<i64>,
    /// Number of records appended (0 for a duplicate).
    pub record_count: i64,
    /// The batch was a retry of an idempotent producer's batch already in the log:
    /// nothing was appended, and the offsets and timestamp are the original's.
    pub duplicate: bool,
}

/// What a read returned.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ReadResult {
    /// Whole batches; the first contains the requested offset.
    pub data: Bytes,
    /// The offset after the last returned batch (the requested offset when empty).
    pub next_offset: Offset,
}

/// A segment as seen from outside (by retention predicates, the offloader, tools).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SegmentInfo {
    pub base_offset: Offset,
    /// The offset after the segment's last record.
    pub next_offset: Offset,
    pub size_bytes: u64,
    /// The largest record timestamp, -1 for an empty segment.
    pub max_timestamp: i64,
    /// Sealed segments never change; the last segment is the active one.
    pub sealed: bool,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    pub time_index_path: PathBuf,
}

/// What a retention pass deleted.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RetentionOutcome {
    pub deleted: Vec<SegmentInfo>,
    /// The first segment retention wanted to delete but the caller's predicate kept.
    pub blocked_by_predicate: Option<Offset>,
    pub log_start_offset: Offset,
}

/// Where one batch of an append sits in the caller's buffer, and what it got.
#[derive(Clone, Copy, Debug)]
struct Stored {
    start: usize,
    len: usize,
    base: Offset,
    /// The max timestamp as stored (the append time for LogAppendTime topics).
    max_ts: i64,
    records: i64,
}

/// Where a log keeps its recovery point between runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RecoveryCheckpoint {
    /// In its own `recovery-point` file, written at every roll, checkpoint and close:
    /// a log opened on its own (the `strata log` tools, tests).
    Own,
    /// With every other partition's, in one file its owner (the broker) writes at each
    /// checkpoint interval and at shutdown, as Kafka's `recovery-point-offset-checkpoint`:
    /// 10,000 partitions cost one fsync per interval rather than 10,000. `hint` is the
    /// value that file held for this log (if any). The log still writes its own file
    /// where the point moves back (a truncation) or an open repaired something; that
    /// file wins while it is lower, and [`Log::recovery_checkpoint_saved`] removes it once
    /// the owner's file holds a newer value.
    ///
    /// `clean`: the owner stopped cleanly and nothing wrote to the log since: it was
    /// flushed, its active segment's index files fsynced ([`Log::prepare_shutdown`]), and
    /// `hint` taken after that. The open then trusts the active segment's index below
    /// `hint` and CRC-scans only from its last entry (Kafka's `.kafka_cleanshutdown`),
    /// falling back to a whole scan if what it finds there does not end exactly at `hint`.
    Shared { hint: Option<Offset>, clean: bool },
}

/// A recovery point taken for the owner's shared checkpoint file
/// ([`Log::recovery_checkpoint`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SharedRecoveryPoint {
    pub offset: Offset,
    /// How many times the log had written its own recovery-point file when taken.
    own_writes: u64,
}

/// The log's own `recovery-point` file, as far as a [`RecoveryCheckpoint::Shared`] log
/// knows it.
#[derive(Clone, Copy, Default, Debug)]
struct OwnRecoveryFile {
    shared: bool,
    /// The file may exist (it was there at open, or written since).
    present: bool,
    /// Writes since open: a value taken for the shared file before the last write may
    /// be above what the file says now.
    writes: u64,
}

#[derive(Debug)]
struct Inner {
    config: LogConfig,
    /// Every segment by base offset; the last is the active one.
    segments: BTreeMap<Offset, Segment>,
    log_start_offset: Offset,
    /// Every byte below this offset is fsynced.
    recovery_point: Offset,
    unflushed_records: i64,
    first_unflushed_ms: Option<i64>,
    /// Idempotent producers: checked and updated under the write lock together with the
    /// append, so a check and the append it allows are atomic.
    producers: ProducerState,
    /// The leader-epoch cache (KIP-101), consistent with the batches: changed under the
    /// write lock, written before the batches it describes are, and fsynced before the
    /// recovery point passes them (see `epochs_unsynced`).
    epochs: LeaderEpochCache,
    /// The checkpoint file holds `epochs` but may not be on the device yet (an
    /// assignment writes it without fsync, as Kafka does since KAFKA-15046: with
    /// thousands of partitions changing leader, the fsyncs were most of a restart).
    /// [`sync_epochs`] makes it durable before the recovery point moves.
    epochs_unsynced: bool,
    /// Direct mode: the active segment's newest bytes, written through it and read
    /// from it (see `tail`).
    tail: TailCache,
    /// When the last append was (ms), for [`Log::release_idle_tail`].
    last_append_ms: i64,
    /// The filesystem refused O_DIRECT: this log writes through the page cache.
    direct_refused: bool,
    /// A direct write succeeded: from then on EINVAL is an error, not a refusal.
    direct_written: bool,
    /// The filesystem refused an `O_DIRECT` read: this log reads through the page cache.
    /// Set by readers, under the read lock.
    direct_reads_refused: AtomicBool,
    /// Where the cleaner stands (compacted topics).
    cleaner: cleaner::CleanerState,
    /// The log may hold offset gaps (`GAPS_FILE` exists).
    gaps_allowed: bool,
    /// Moves with every change that can make segment bytes differ from what a read saw
    /// (a truncation, a reset, a cleaner swap): the read cache's chunks are keyed by it.
    read_generation: u64,
    /// The log's own recovery-point file (see [`RecoveryCheckpoint`]).
    own_recovery: OwnRecoveryFile,
}

impl Inner {
    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }
    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }
    fn log_end_offset(&self) -> Offset {
        self.active().next_offset
    }

    /// Opens the active segment for direct writes, if the config asks for them and the
    /// filesystem has not refused them.
    fn open_direct(&mut self, dir: &Path) -> Result<(), LogError> {
        if self.config.io_mode != IoMode::Direct || self.direct_refused {
            // Buffered from this segment on: the tail buffer has no more use.
            self.tail.release();
            return Ok(());
        }
        let active = self.active_mut();
        if active.direct_writes {
            return Ok(());
        }
        // The descriptor is opened read-write now (so that a refusal shows here), and
        // serves the segment's direct reads too, as long as the cache keeps it.
        match active.file.direct(true) {
            Ok(Some(_)) => active.direct_writes = true,
            Ok(None) => self.fall_back(dir, "open with O_DIRECT refused"),
            Err(e) => return Err(LogError::io("open O_DIRECT", &active.path)(e)),
        }
        Ok(())
    }

    /// The fd to read `seg` with `O_DIRECT` through, if this log reads that way: in
    /// direct mode, unless the filesystem refused direct IO, and for the active segment
    /// only while it is written with `O_DIRECT` (otherwise its newest bytes are in the
    /// page cache, which a buffered read finds and a direct read would first write
    /// back). From the descriptor cache, opened read-only on a miss.
    fn direct_reader(&self, dir: &Path, seg: &Segment) -> Option<Arc<std::fs::File>> {
        if self.config.io_mode != IoMode::Direct
            || self.direct_refused
            || self.direct_reads_refused.load(Ordering::Relaxed)
            || (!seg.sealed && !seg.direct_writes)
        {
            return None;
        }
        match seg.file.direct(false) {
            Ok(Some(f)) => Some(f),
            Ok(None) => {
                self.refuse_direct_reads(dir, "open with O_DIRECT refused");
                None
            }
            Err(e) => {
                // Out of fds, say: this read goes through the page cache.
                tracing::debug!(segment = %seg.path.display(), error = %e, "cannot open for direct reads");
                None
            }
        }
    }

    /// Gives up direct reads for this log (the filesystem refuses them), once.
    fn refuse_direct_reads(&self, dir: &Path, why: &str) {
        if !self.direct_reads_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(dir = %dir.display(), why, "the filesystem refuses direct reads: this log reads through the page cache");
        }
    }

    /// Gives up direct IO for this log (the filesystem refuses it), once.
    fn fall_back(&mut self, dir: &Path, why: &str) {
        self.direct_refused = true;
        self.active_mut().direct_writes = false;
        self.tail.release();
        tracing::warn!(dir = %dir.display(), why, "the filesystem refuses direct IO: this log writes through the page cache");
    }

    /// Writes `bytes` after the active segment's last byte (the caller then counts them
    /// in its size). On error nothing is left after that byte.
    fn write_active(&mut self, dir: &Path, bytes: &[u8]) -> Result<(), LogError> {
        let Inner {
            segments,
            tail,
            direct_written,
            ..
        } = self;
        let active = segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment");
        if active.direct_writes {
            let direct = match active.file.direct(true) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    return Err(LogError::io("open O_DIRECT", &active.path)(
                        std::io::Error::other("O_DIRECT refused on reopen"),
                    ));
                }
                Err(e) => return Err(LogError::io("open O_DIRECT", &active.path)(e)),
            };
            let file = &active.file;
            match tail.append(active.base, active.size, bytes, &direct, &|| file.plain()) {
                Ok(()) => {
                    *direct_written = true;
                    return Ok(());
                }
                // The first direct write is where some filesystems say no (alignment
                // they do not take, or no direct IO behind an open that worked).
                Err(e) if !*direct_written && tail::is_refusal(&e) => {
                    let _ = active.plain().map(|f| f.set_len(active.size));
                    self.fall_back(dir, "direct write refused");
                }
                Err(e) => {
                    // Cut a partial append and the padding: the committed size stays
                    // the end of the file.
                    let _ = active.plain().map(|f| f.set_len(active.size));
                    return Err(LogError::io("write", &active.path)(e));
                }
            }
        }
        let active = self.active_mut();
        let file = active.plain()?;
        if let Err(e) = file.write_all_at(bytes, active.size) {
            // Leave no partial bytes behind the committed size.
            let _ = file.set_len(active.size);
            return Err(LogError::io("write", &active.path)(e));
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.segments.values().map(|s| s.size).sum()
    }
    /// The segment holding `offset`, if any.
    fn segment_for(&self, offset: Offset) -> Option<&Segment> {
        let seg = self.segments.range(..=offset).next_back().map(|(_, s)| s)?;
        if offset < seg.next_offset {
            return Some(seg);
        }
        // Past the floor segment's end (possible only across a gap): the next one.
        self.segments
            .range(offset + 1..)
            .next()
            .map(|(_, s)| s)
            .filter(|s| s.next_offset > s.base)
    }
}

fn info(s: &Segment) -> SegmentInfo {
    let dir = s.dir();
    SegmentInfo {
        base_offset: s.base,
        next_offset: s.next_offset,
        size_bytes: s.size,
        max_timestamp: s.max_timestamp,
        sealed: s.sealed,
        log_path: s.path.clone(),
        index_path: segment::index_path(dir, s.base),
        time_index_path: segment::time_index_path(dir, s.base),
    }
}

/// A partition's log on local disk. Appends are serialised; reads run concurrently with
/// appends and with each other (they hold the lock only to find file positions).
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    inner: RwLock<Inner>,
    /// Held by a cleaner pass, so that one log has one pass at a time.
    clean_lock: Mutex<()>,
    /// The recovery point [`Log::checkpoint`] last wrote: an idle log's periodic
    /// checkpoint writes (and fsyncs) nothing. Other writes of the file do not set it;
    /// at worst the file then holds a lower value, which only means a longer scan.
    checkpointed: std::sync::atomic::AtomicI64,
    /// This log's number in the read cache (`read_cache`).
    read_cache_id: u64,
}

impl Drop for Log {
    fn drop(&mut self) {
        crate::read_cache::forget_log(self.read_cache_id);
    }
}

impl Log {
    fn read_lock(&self) -> RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock cannot leave Inner half-updated in a way reads
        // care about (appends update sizes last), so poisoning is ignored.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> LogConfig {
        self.read_lock().config.clone()
    }

    /// Applies a new configuration (topic configs changed). Takes effect on the next
    /// append or retention pass.
    pub fn set_config(&self, config: LogConfig) {
        let mut g = self.write_lock();
        g.tail.resize(config.tail_cache_bytes);
        g.config = config;
    }

    /// How the active segment is written: the configured mode, unless the filesystem
    /// refused direct IO ([`IoMode::Direct`] falls back to [`IoMode::Buffered`] for the
    /// log then) or a changed mode waits for the next segment.
    pub fn io_mode(&self) -> IoMode {
        if self.read_lock().active().direct_writes {
            IoMode::Direct
        } else {
            IoMode::Buffered
        }
    }

    pub fn log_start_offset(&self) -> Offset {
        self.read_lock().log_start_offset
    }

    pub fn log_end_offset(&self) -> Offset {
        self.read_lock().log_end_offset()
    }

    /// Every offset below this is fsynced.
    pub fn recovery_point(&self) -> Offset {
        self.read_lock().recovery_point
    }

    /// Bytes on local disk (segment files).
    pub fn size_bytes(&self) -> u64 {
        self.read_lock().size()
    }

    pub fn segments(&self) -> Vec<SegmentInfo> {
        let g = self.read_lock();
        g.segments.values().map(info).collect()
    }

    /// Validates and appends one or more batches, giving them offsets from the log end
    /// and stamping `leader_epoch` into them (Kafka's `appendAsLeader`). Either every
    /// batch is appended or none. An epoch newer than the leader-epoch cache's latest
    /// starts a new entry at the first offset, made durable before the batches are
    /// written (KIP-101); a negative epoch is stamped but not recorded.
    ///
    /// A batch with a producer id must come alone and passes the idempotent-producer
    /// checks first (see the crate docs): a retry of one of the producer's last five
    /// batches appends nothing and returns the original offsets with `duplicate` set.
    pub fn append(&self, batches: &mut [u8], leader_epoch: i32) -> Result<AppendInfo, LogError> {
        self.append_as_leader(batches, leader_epoch, Origin::Client)
    }

    /// Appends a batch a coordinator writes on a producer's behalf (Kafka's origin
    /// COORDINATOR: a TxnOffsetCommit's records in `__consumer_offsets`, in the
    /// producer's transaction): the producer's epoch is checked, its sequence is not
    /// (the coordinator writes every such batch at sequence 0, as Kafka's does).
    pub fn append_coordinator(
        &self,
        batches: &mut [u8],
        leader_epoch: i32,
    ) -> Result<AppendInfo, LogError> {
        self.append_as_leader(batches, leader_epoch, Origin::Coordinator)
    }

    /// Appends a transaction marker (Kafka's `appendAsLeader` with origin
    /// COORDINATOR, for WriteTxnMarkers): refused with INVALID_PRODUCER_EPOCH if the
    /// producer has a newer epoch here. It ends the producer's open transaction; an
    /// ABORT goes into the segment's aborted-transaction index.
    pub fn append_marker(
        &self,
        marker: &control::Marker,
        leader_epoch: i32,
    ) -> Result<AppendInfo, LogError> {
        let mut bytes = marker.encode();
        self.append_as_leader(&mut bytes, leader_epoch, Origin::Marker)
    }

    fn append_as_leader(
        &self,
        batches: &mut [u8],
        leader_epoch: i32,
        origin: Origin,
    ) -> Result<AppendInfo, LogError> {
        let marker = origin == Origin::Marker;
        if batches.is_empty() {
            return Err(LogError::EmptyAppend);
        }
        let (max_message_bytes, segment_bytes) = {
            let g = self.read_lock();
            (g.config.max_message_bytes, g.config.segment_bytes)
        };
        // Validate everything before touching the log (no lock held: CRCs take time).
        let mut spans: Vec<Stored> = Vec::new();
        let mut producer_batch: Option<BatchHeader> = None;
        let mut pos = 0;
        for b in batch::batches(batches) {
            let b = b?;
            b.validate_for_append()?;
            if b.len() as u64 > max_message_bytes {
                return Err(batch::BatchError::TooLarge {
                    size: b.len(),
                    max: max_message_bytes as usize,
                }
                .into());
            }
            if b.header().is_control() != marker {
                return Err(LogError::ControlBatchFromProducer);
            }
            if b.header().has_producer_id() {
                producer_batch = Some(*b.header());
            }
            spans.push(Stored {
                start: pos,
                len: b.len(),
                base: 0, // assigned under the lock
                max_ts: b.max_timestamp(),
                records: b.header().record_count as i64,
            });
            pos += b.len();
        }
        if producer_batch.is_some() && spans.len() > 1 {
            return Err(LogError::ProducerBatchNotAlone {
                batches: spans.len(),
            });
        }
        if batches.len() as u64 > segment_bytes {
            return Err(LogError::RecordListTooLarge {
                size: batches.len(),
                segment_bytes,
            });
        }

        let now = self.clock.now_ms();
        let mut g = self.write_lock();
        let g = &mut *g;
        // Before anything is written (a roll included): a duplicate appends nothing,
        // and a refused batch leaves the log as it was.
        if let Some(h) = &producer_batch {
            let check = match origin {
                Origin::Client => g.producers.check(h),
                Origin::Marker | Origin::Coordinator => g
                    .producers
                    .check_marker(h.producer_id, h.producer_epoch)
                    .map(|()| SequenceCheck::Append),
            };
            match check? {
                SequenceCheck::Append => {}
                SequenceCheck::Duplicate {
                    first_offset,
                    last_offset,
                    timestamp,
                } => {
                    // As Kafka answers a duplicate: the original offsets and timestamp.
                    return Ok(AppendInfo {
                        first_offset,
                        last_offset,
                        log_end_offset: g.log_end_offset(),
                        max_timestamp: timestamp,
                        log_append_time: g.config.log_append_time.then_some(timestamp),
                        record_count: 0,
                        duplicate: true,
                    });
                }
            }
        }
        let total_records: i64 = spans.iter().map(|s| s.records).sum();
        self.maybe_roll_for(g, now, batches.len(), total_records)?;
        let log_append_time = g.config.log_append_time.then_some(now);
        let first_offset = g.log_end_offset();
        let mut next = first_offset;
        let mut max_ts = -1i64;
        for s in &mut spans {
            let b = &mut batches[s.start..s.start + s.len];
            batch::set_base_offset(b, next);
            batch::set_partition_leader_epoch(b, leader_epoch);
            if let Some(t) = log_append_time {
                batch::set_log_append_time(b, t);
                s.max_ts = t;
            }
            s.base = next;
            next += s.records;
            max_ts = max_ts.max(s.max_ts);
        }
        // KIP-101: the first offset of a new leader epoch, durable before the batches
        // that carry it (an entry without batches is harmless; batches without their
        // entry would answer OffsetsForLeaderEpoch wrongly).
        self.assign_epochs(g, [(leader_epoch, first_offset)])?;
        g.write_active(&self.dir, batches)?;
        self.after_write(
            g,
            now,
            batches,
            &spans,
            next,
            max_ts,
            producer_batch.is_some(),
            total_records,
        )?;
        Ok(AppendInfo {
            first_offset,
            last_offset: next - 1,
            log_end_offset: next,
            max_timestamp: max_ts,
            log_append_time,
            record_count: total_records,
            duplicate: false,
        })
    }

    /// Appends batches a follower fetched from its leader (Kafka's `appendAsFollower`).
    /// They keep the offsets, leader epochs and timestamps the leader gave them: the
    /// first must start at or after the log end and each at or after where the
    /// previous ended ([`LogError::UnexpectedAppendOffset`] otherwise); a gap is a range
    /// the leader's cleaner removed (Kafka's `appendAsFollower` takes it too). Framing and CRCs are checked;
    /// the idempotent-producer checks are not (the leader made them, and Kafka's
    /// followers do not repeat them), but the producer state is updated from the
    /// headers, so that this replica deduplicates retries once it leads. The
    /// leader-epoch cache takes the epochs of the batches. Nor is max.message.bytes
    /// checked (the leader's config may be newer). Rolls, indexes and flushes as
    /// [`Self::append`] does; the batches go to one segment, which may therefore exceed
    /// segment.bytes by less than one fetch (as in Kafka). Either every batch is
    /// appended or none.
    pub fn append_replicated(&self, batches: &mut [u8]) -> Result<AppendInfo, LogError> {
        if batches.is_empty() {
            return Err(LogError::EmptyAppend);
        }
        // Validate everything before touching the log (no lock held: CRCs take time).
        let mut stored = Vec::new();
        let mut epochs: Vec<(LeaderEpoch, Offset)> = Vec::new();
        let mut expected: Option<Offset> = None;
        let mut has_gap = false;
        let mut max_ts = -1i64;
        let mut records = 0i64;
        let mut has_producers = false;
        let mut pos = 0;
        for b in batch::batches(batches) {
            let b = b?;
            b.validate_crc()?;
            b.compression()?;
            let h = b.header();
            if h.last_offset_delta < 0 {
                return Err(batch::BatchError::BadRecordCount {
                    count: h.record_count,
                    last_offset_delta: h.last_offset_delta,
                }
                .into());
            }
            // Offsets increase; a gap is the leader's compaction (Kafka's followers
            // accept it too), an overlap is an error.
            if let Some(e) = expected {
                if h.base_offset < e {
                    return Err(LogError::UnexpectedAppendOffset {
                        expected: e,
                        found: h.base_offset,
                    });
                }
                has_gap |= h.base_offset > e;
            }
            expected = Some(h.next_offset());
            if epochs
                .last()
                .is_none_or(|&(e, _)| e != h.partition_leader_epoch)
            {
                epochs.push((h.partition_leader_epoch, h.base_offset));
            }
            has_producers |= h.has_producer_id();
            records += h.record_count.max(0) as i64;
            max_ts = max_ts.max(h.max_timestamp);
            stored.push(Stored {
                start: pos,
                len: b.len(),
                base: h.base_offset,
                max_ts: h.max_timestamp,
                records: h.record_count.max(0) as i64,
            });
            pos += b.len();
        }
        let first_offset = stored.first().map_or(0, |s| s.base);
        let next = expected.unwrap_or(first_offset);

        let now = self.clock.now_ms();
        let mut g = self.write_lock();
        let g = &mut *g;
        let leo = g.log_end_offset();
        if first_offset < leo {
            return Err(LogError::UnexpectedAppendOffset {
                expected: leo,
                found: first_offset,
            });
        }
        if first_offset > leo || has_gap {
            self.allow_gaps(g)?;
        }
        self.maybe_roll_for(g, now, batches.len(), next - leo)?;
        self.assign_epochs(g, epochs)?;
        g.write_active(&self.dir, batches)?;
        self.after_write(
            g,
            now,
            batches,
            &stored,
            next,
            max_ts,
            has_producers,
            records,
        )?;
        Ok(AppendInfo {
            first_offset,
            last_offset: next - 1,
            log_end_offset: next,
            max_timestamp: max_ts,
            log_append_time: None,
            record_count: records,
            duplicate: false,
        })
    }

    /// Rolls before an append of `bytes` bytes and `offsets` offsets if the active
    /// segment would grow past segment.bytes, is segment.ms old, or its relative
    /// offsets would overflow 32 bits.
    fn maybe_roll_for(
        &self,
        g: &mut Inner,
        now: i64,
        bytes: usize,
        offsets: i64,
    ) -> Result<(), LogError> {
        let active = g.active();
        let too_big = active.size + bytes as u64 > g.config.segment_bytes;
        let too_old = active
            .first_append_ms
            .is_some_and(|t| now - t >= g.config.segment_ms);
        let offsets_overflow = active.next_offset - active.base + offsets > u32::MAX as i64;
        let index_full = active.builder.idx.offsets.len() >= g.config.index_max_entries;
        if active.size > 0 && (too_big || too_old || offsets_overflow || index_full) {
            self.roll(g)?;
        }
        Ok(())
    }

    /// Assigns leader epochs (epoch, first offset) in log order to the epoch cache,
    /// and writes the change (without fsync: see `epochs_unsynced`) before returning.
    /// Nothing changes (and nothing is
    /// written) in the common case of an epoch the cache already has as its latest.
    /// On error the cache is as it was.
    fn assign_epochs(
        &self,
        g: &mut Inner,
        epochs: impl IntoIterator<Item = (LeaderEpoch, Offset)>,
    ) -> Result<(), LogError> {
        let mut changed: Option<LeaderEpochCache> = None;
        for (epoch, offset) in epochs {
            let current = changed.as_ref().unwrap_or(&g.epochs);
            if !current.would_change(epoch, offset) {
                continue;
            }
            changed
                .get_or_insert_with(|| g.epochs.clone())
                .assign(epoch, offset);
        }
        if let Some(cache) = changed {
            checkpoint::write_epochs_unsynced(&self.dir.join(LEADER_EPOCH_FILE), &cache)?;
            g.epochs = cache;
            g.epochs_unsynced = true;
        }
        Ok(())
    }

    /// Writes the epoch cache if `change` changed it. The in-memory cache changes
    /// either way: a checkpoint left behind is repaired by recovery, which clips the
    /// cache to the log's offsets.
    fn update_epochs(
        &self,
        g: &mut Inner,
        change: impl FnOnce(&mut LeaderEpochCache) -> bool,
    ) -> Result<(), LogError> {
        if change(&mut g.epochs) {
            checkpoint::write_epochs(&self.dir.join(LEADER_EPOCH_FILE), &g.epochs)?;
            g.epochs_unsynced = false;
        }
        Ok(())
    }

    /// The bookkeeping after `write_active` wrote `batches` (laid out as `stored`) at
    /// the active segment's end: index entries, sizes, producer state, flush policy.
    #[allow(clippy::too_many_arguments)]
    fn after_write(
        &self,
        g: &mut Inner,
        now: i64,
        batches: &[u8],
        stored: &[Stored],
        next: Offset,
        max_ts: i64,
        update_producers: bool,
        records: i64,
    ) -> Result<(), LogError> {
        let active = g.active_mut();
        for s in stored {
            let pos = active.size + s.start as u64;
            active
                .builder
                .on_batch(rel(active.base, s.base), pos as u32, s.len as u64, s.max_ts);
        }
        active.size += batches.len() as u64;
        active.next_offset = next;
        active.max_timestamp = active.max_timestamp.max(max_ts);
        active.dirty = true;
        active.first_append_ms.get_or_insert(now);
        g.last_append_ms = now;
        if update_producers {
            for s in stored {
                // The stored header: offsets assigned, append time stamped.
                let h = batch::parse_header(&batches[s.start..])
                    .expect("framed above, and the rewrites leave length and magic alone");
                let marker = if h.is_control() {
                    marker_of(&batches[s.start..s.start + s.len])
                } else {
                    None
                };
                if let Some(done) = g.producers.update(&h, marker)
                    && done.aborted
                {
                    let entry = aborted_entry(&g.producers, &done);
                    g.active_mut().add_aborted(entry)?;
                }
            }
        }
        g.unflushed_records += records;
        g.first_unflushed_ms.get_or_insert(now);
        if g.unflushed_records >= g.config.flush_messages
            || g.first_unflushed_ms
                .is_some_and(|t| now - t >= g.config.flush_ms)
        {
            flush_locked(&self.dir, g)?;
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one, if the active one holds data.
    fn roll(&self, g: &mut Inner) -> Result<(), LogError> {
        let active = g.active_mut();
        if active.size == 0 {
            return Ok(());
        }
        active.seal()?;
        let base = active.next_offset;
        let interval = g.config.index_interval_bytes;
        let seg = Segment::create(&self.dir, base, interval)?;
        // Everything below `base` is in the producer state now: snapshot it so that an
        // open replays at most the active segment (Kafka snapshots on every roll too).
        // A failed snapshot costs replay time, not correctness, so it fails no append.
        if let Err(e) = self.snapshot_producers(g, base, false) {
            tracing::warn!(dir = %self.dir.display(), offset = base, error = %e, "cannot write producer snapshot");
        }
        checkpoint::sync_directory(&self.dir)?;
        g.segments.insert(base, seg);
        g.open_direct(&self.dir)?;
        // Sealing fsynced the old active segment and every earlier one was fsynced when
        // it was sealed: everything below the new base is durable.
        sync_epochs(&self.dir, g)?;
        g.recovery_point = base;
        g.unflushed_records = 0;
        g.first_unflushed_ms = None;
        // A shared checkpoint takes the new point at its next write; until then the
        // next open scans the segment just sealed too.
        if !g.own_recovery.shared {
            write_own_recovery_point(&self.dir, g, base, false)?;
        }
        Ok(())
    }

    /// Rolls the active segment now (if it holds data).
    pub fn force_roll(&self) -> Result<(), LogError> {
        let mut g = self.write_lock();
        self.roll(&mut g)
    }

    /// Rolls the active segment if segment.ms has passed since its first append, so an
    /// idle partition's last data still becomes a sealed (offloadable) segment.
    pub fn maybe_roll(&self) -> Result<bool, LogError> {
        let now = self.clock.now_ms();
        let mut g = self.write_lock();
        let due = {
            let a = g.active();
            a.size > 0
                && a.first_append_ms
                    .is_some_and(|t| now - t >= g.config.segment_ms)
        };
        if due {
            self.roll(&mut g)?;
        }
        Ok(due)
    }

    /// fsyncs everything appended so far. Returns the new recovery point.
    pub fn flush(&self) -> Result<Offset, LogError> {
        let mut g = self.write_lock();
        flush_locked(&self.dir, &mut g)?;
        Ok(g.recovery_point)
    }

    /// Flushes if flush.ms has passed since the oldest unflushed append. Call
    /// periodically.
    pub fn maybe_flush(&self) -> Result<bool, LogError> {
        let now = self.clock.now_ms();
        let mut g = self.write_lock();
        if g.first_unflushed_ms
            .is_some_and(|t| now - t >= g.config.flush_ms)
        {
            flush_locked(&self.dir, &mut g)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether an append of `bytes` bytes will wait on the device for an fsync: the
    /// flush policy is due (flush.messages, counting at least one record, or flush.ms)
    /// or the active segment rolls (segment.bytes; a roll seals, fsyncs and creates
    /// files). A caller on an async worker runs such an append where it cannot hold up
    /// the worker's other tasks. A guess from the state now: a concurrent append may
    /// change it either way, which costs only where the append runs.
    pub fn append_may_wait(&self, bytes: usize) -> bool {
        let now = self.clock.now_ms();
        let g = self.read_lock();
        g.unflushed_records + 1 >= g.config.flush_messages
            || g.first_unflushed_ms
                .is_some_and(|t| now - t >= g.config.flush_ms)
            || g.active().size + bytes as u64 > g.config.segment_bytes
    }

    /// Gives the tail buffer's memory back to the broker-wide budget (`tail::budget`)
    /// if the log has taken no append for `idle_ms`: an idle partition holds none. The
    /// next append reloads the partial last block from the file; reads of the newest
    /// bytes go to the file until then. Returns whether it released anything. Does not
    /// wait for a busy log.
    pub fn release_idle_tail(&self, idle_ms: i64) -> bool {
        let now = self.clock.now_ms();
        let Ok(mut g) = self.inner.try_write() else {
            return false;
        };
        if now - g.last_append_ms < idle_ms || !g.tail.holds_memory() {
            return false;
        }
        g.tail.release();
        true
    }

    /// Writes the recovery-point checkpoint, so the next open rescans less; nothing if
    /// it has not moved since the last call, or if its owner keeps it
    /// ([`RecoveryCheckpoint::Shared`]: see [`Self::recovery_checkpoint`]).
    pub fn checkpoint(&self) -> Result<(), LogError> {
        // Under the write lock: a truncation writing a lower point meanwhile must not be
        // overwritten with this higher one.
        let mut g = self.write_lock();
        let rp = g.recovery_point;
        if g.own_recovery.shared || self.checkpointed.load(Ordering::Relaxed) == rp {
            return Ok(());
        }
        write_own_recovery_point(&self.dir, &mut g, rp, false)?;
        self.checkpointed.store(rp, Ordering::Relaxed);
        Ok(())
    }

    /// The recovery point for the owner's shared checkpoint file
    /// ([`RecoveryCheckpoint::Shared`]): everything below it is durable now.
    pub fn recovery_checkpoint(&self) -> SharedRecoveryPoint {
        let g = self.read_lock();
        SharedRecoveryPoint {
            offset: g.recovery_point,
            own_writes: g.own_recovery.writes,
        }
    }

    /// The owner has made a file holding `saved` durable: the log's own recovery-point
    /// file is removed unless written since `saved` was taken (a truncation that moved
    /// the point back must keep its lower value). A removal a crash undoes brings back a
    /// value no higher than `saved`, which the next open takes (the lower one wins), so
    /// the removal is not fsynced.
    pub fn recovery_checkpoint_saved(&self, saved: SharedRecoveryPoint) -> Result<(), LogError> {
        let mut g = self.write_lock();
        let own = &mut g.own_recovery;
        if !own.shared || !own.present || own.writes != saved.own_writes {
            return Ok(());
        }
        let path = self.dir.join(RECOVERY_POINT_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("remove", &path)(e)),
        }
        own.present = false;
        Ok(())
    }

    /// Expires idle producers and writes the producer snapshot at `offset`, which must
    /// be the log end (the state covers exactly the batches below it).
    fn snapshot_producers(
        &self,
        g: &mut Inner,
        offset: Offset,
        sync_dir: bool,
    ) -> Result<(), LogError> {
        let now = self.clock.now_ms();
        let expired = g.producers.expire(now, g.config.producer_expiration_ms);
        if expired > 0 {
            tracing::debug!(dir = %self.dir.display(), expired, "expired idle producers");
        }
        snapshot::write(&self.dir, offset, &g.producers, sync_dir)
    }

    /// Flushes, snapshots the producer state at the log end (so the next open replays
    /// nothing), checkpoints and closes the log.
    pub fn close(self) -> Result<(), LogError> {
        // The file ends at the last batch again; the flush makes that durable.
        self.write_lock().active_mut().trim_padding()?;
        self.prepare_shutdown()?;
        self.checkpoint()
    }

    /// Readies the log for its owner's clean stop, after which nothing may write to
    /// it: flushes, fsyncs the active segment's index files (so that the next open,
    /// told the stop was clean, may trust them: [`RecoveryCheckpoint::Shared`]) and
    /// snapshots the producer state at the log end (so that it replays no batch).
    /// Returns the log end, which is the recovery point now.
    pub fn prepare_shutdown(&self) -> Result<Offset, LogError> {
        let mut g = self.write_lock();
        flush_locked(&self.dir, &mut g)?;
        let leo = g.log_end_offset();
        segment::sync_index_files(&self.dir, g.active().base)?;
        // A snapshot at the log end describes every batch below it already (written by
        // the roll or close that left the log there, or loaded by the open; a truncation
        // removes the snapshots past its cut): a log stopped with nothing appended since
        // writes nothing.
        if !snapshot::path(&self.dir, leo).exists() {
            self.snapshot_producers(&mut g, leo, true)?;
        }
        Ok(leo)
    }

    /// What the log knows about an idempotent producer: its epoch, its last sequence
    /// and offset, and the batches it would deduplicate.
    pub fn producer_entry(&self, producer_id: ProducerId) -> Option<ProducerEntry> {
        self.read_lock().producers.entry(producer_id).cloned()
    }

    /// A copy of every producer's state (for DescribeProducers).
    pub fn producer_state(&self) -> ProducerState {
        self.read_lock().producers.clone()
    }

    /// The newest leader epoch the log knows (Kafka's `latestEpoch`): the epoch of its
    /// last batches, or the one assigned by [`Self::assign_epoch_start`] after them.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.read_lock().epochs.latest_epoch()
    }

    /// Where leader epoch `requested` ends in this log, for OffsetsForLeaderEpoch and
    /// the fetch-path divergence check (Kafka's `endOffsetForEpoch`, KIP-279): `(the
    /// largest known epoch <= requested, the start offset of the next larger epoch)`,
    /// or the log end offset when that epoch is the latest. Below the first known
    /// epoch: `(requested, start of the first one)`, as Kafka answers. `None` (Kafka's
    /// `UNDEFINED_EPOCH_OFFSET`) when `requested` is negative or above every known
    /// epoch, or no epoch is known. See [`crate::epoch::LeaderEpochCache::end_offset_for`].
    pub fn end_offset_for_epoch(&self, requested: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        let g = self.read_lock();
        g.epochs.end_offset_for(requested, g.log_end_offset())
    }

    /// The leader-epoch cache: the first offset of every known epoch, oldest first.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.read_lock().epochs.entries().to_vec()
    }

    /// Marks the log as one that may hold offset gaps (`GAPS_FILE`), durably, before
    /// the first gap is written.
    fn allow_gaps(&self, g: &mut Inner) -> Result<(), LogError> {
        if !g.gaps_allowed {
            checkpoint::write_bytes(&self.dir.join(GAPS_FILE), b"1\n", true)?;
            g.gaps_allowed = true;
        }
        Ok(())
    }

    pub(crate) fn epoch_cache(&self) -> LeaderEpochCache {
        self.read_lock().epochs.clone()
    }

    /// Records that leader epoch `epoch` starts at the log end, durably (Kafka's
    /// `maybeAssignEpochStartOffset`, called when this replica becomes leader). Without
    /// it a new leader that has not appended yet would not know its own epoch, and
    /// would answer a follower asking about a newer epoch of its own log "undefined"
    /// instead of where their logs part. Returns the start offset (the log end).
    /// Assigning the latest epoch again changes nothing.
    pub fn assign_epoch_start(&self, epoch: LeaderEpoch) -> Result<Offset, LogError> {
        let mut g = self.write_lock();
        let g = &mut *g;
        let leo = g.log_end_offset();
        self.assign_epochs(g, [(epoch, leo)])?;
        Ok(leo)
    }
}

/// fsyncs the leader-epoch checkpoint if an assignment wrote it without: called
/// before the recovery point moves up, so that no batch below it has an epoch the
/// checkpoint on the device lacks.
fn sync_epochs(dir: &Path, g: &mut Inner) -> Result<(), LogError> {
    if g.epochs_unsynced {
        // The file holds the cache already: fsync it and its rename, not a rewrite.
        checkpoint::sync_file(&dir.join(LEADER_EPOCH_FILE))?;
        checkpoint::sync_directory(dir)?;
        g.epochs_unsynced = false;
    }
    Ok(())
}

/// Writes the log's own recovery-point file (fsynced; with `sync_dir` its rename too).
fn write_own_recovery_point(
    dir: &Path,
    g: &mut Inner,
    offset: Offset,
    sync_dir: bool,
) -> Result<(), LogError> {
    checkpoint::write(&dir.join(RECOVERY_POINT_FILE), offset, sync_dir)?;
    g.own_recovery.present = true;
    g.own_recovery.writes += 1;
    Ok(())
}

fn flush_locked(dir: &Path, g: &mut Inner) -> Result<(), LogError> {
    sync_epochs(dir, g)?;
    let leo = g.log_end_offset();
    let active = g.active_mut();
    active.persist_index()?;
    active.sync()?;
    g.recovery_point = leo;
    g.unflushed_records = 0;
    g.first_unflushed_ms = None;
    Ok(())
}

/// Who a leader's append is from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Origin {
    /// A producer: every check.
    Client,
    /// A coordinator on a producer's behalf: its epoch is checked, not its sequence.
    Coordinator,
    /// A transaction marker.
    Marker,
}

/// The marker kind of a stored control batch; `None` (with a warning) for one that does
/// not read as a marker.
fn marker_of(bytes: &[u8]) -> Option<MarkerKind> {
    match RecordBatch::parse(bytes)
        .map_err(|e| e.to_string())
        .and_then(|(b, _)| control::marker_kind(&b).map_err(|e| e.to_string()))
    {
        Ok(kind) => kind,
        Err(reason) => {
            tracing::warn!(%reason, "control batch is not a transaction marker");
            None
        }
    }
}

/// The aborted-transaction index entry of a transaction an ABORT marker just ended:
/// its last stable offset is where the oldest transaction still open starts, or just
/// past the marker (Kafka's `ProducerStateManager.lastStableOffset`).
pub(crate) fn aborted_entry(producers: &ProducerState, done: &CompletedTxn) -> AbortedTxn {
    AbortedTxn {
        producer_id: done.producer_id,
        first_offset: done.first_offset,
        last_offset: done.last_offset,
        last_stable_offset: producers
            .open_transactions()
            .next()
            .map_or(done.last_offset + 1, |(first, _)| first),
    }
}

fn delete_segment_files(dir: &Path, base: Offset) {
    for p in [
        segment::log_path(dir, base),
        segment::index_path(dir, base),
        segment::time_index_path(dir, base),
        crate::txn_index::path(dir, base),
    ] {
        if let Err(e) = fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %p.display(), error = %e, "cannot delete segment file");
        }
    }
}

#[cfg(test)]
mod tests;
