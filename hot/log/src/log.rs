//! The partition log: appends, reads, rolls, flushes, retention and truncation of a
//! [`Log`] that is open. Opening it (loading and recovery) is in `loader`.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use strata_proto::batch::{self, HEADER_LEN, RecordBatch};
use strata_proto::{BatchHeader, LeaderEpoch, Offset, ProducerId};

use crate::checkpoint;
use crate::clock::Clock;
use crate::config::{IoMode, LogConfig};
use crate::direct_read::{self, AlignedBuf};
use crate::epoch::{EpochEntry, LeaderEpochCache};
use crate::error::LogError;
use crate::index::{Indexes, rel};
use crate::producer::{ProducerEntry, ProducerState, SequenceCheck};
use crate::segment::{self, Segment, read_at};
use crate::snapshot;
use crate::tail::{self, TailCache, ceil_block, floor_block};
use crate::window::{self, Window};

mod loader;

use self::loader::replay_producers;
pub use self::loader::{RecoveryReport, Truncation};

const RECOVERY_POINT_FILE: &str = "recovery-point";
/// Extra bytes a read takes beyond max_bytes, to cover the walk from the sparse index
/// entry to the wanted batch (index.interval.bytes is 4 KiB by default).
const READ_SLACK: u64 = 64 * 1024;
/// The bytes one read of [`Log::read_range`] asks for.
const RANGE_CHUNK: usize = 8 << 20;
const LOG_START_FILE: &str = "log-start-offset";
/// Kafka's name for the leader-epoch cache's checkpoint.
const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";

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
    /// write lock, durable before the batches it describes are written.
    epochs: LeaderEpochCache,
    /// Direct mode: the active segment's newest bytes, written through it and read
    /// from it (see `tail`).
    tail: TailCache,
    /// The filesystem refused O_DIRECT: this log writes through the page cache.
    direct_refused: bool,
    /// A direct write succeeded: from then on EINVAL is an error, not a refusal.
    direct_written: bool,
    /// The filesystem refused an `O_DIRECT` read: this log reads through the page cache.
    /// Set by readers, under the read lock.
    direct_reads_refused: AtomicBool,
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
        if active.direct.is_some() {
            return Ok(());
        }
        match tail::open_direct(&active.path)? {
            Some(f) => {
                // The same fd serves the segment's direct reads, now and once sealed.
                let f = Arc::new(f);
                let _ = active.direct_read.set(f.clone());
                active.direct = Some(f);
            }
            None => self.fall_back(dir, "open with O_DIRECT refused"),
        }
        Ok(())
    }

    /// The fd to read `seg` with `O_DIRECT` through, if this log reads that way: in
    /// direct mode, unless the filesystem refused direct IO, and for the active segment
    /// only while it is written with `O_DIRECT` (otherwise its newest bytes are in the
    /// page cache, which a buffered read finds and a direct read would first write
    /// back). Opens the segment's direct fd on first use.
    fn direct_reader(&self, dir: &Path, seg: &Segment) -> Option<Arc<std::fs::File>> {
        if self.config.io_mode != IoMode::Direct
            || self.direct_refused
            || self.direct_reads_refused.load(Ordering::Relaxed)
            || (!seg.sealed && seg.direct.is_none())
        {
            return None;
        }
        match seg.direct_reader() {
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
        self.active_mut().direct = None;
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
        if let Some(direct) = &active.direct {
            match tail.append(active.base, active.size, bytes, direct, &active.file) {
                Ok(()) => {
                    *direct_written = true;
                    return Ok(());
                }
                // The first direct write is where some filesystems say no (alignment
                // they do not take, or no direct IO behind an open that worked).
                Err(e) if !*direct_written && tail::is_refusal(&e) => {
                    let _ = active.file.set_len(active.size);
                    self.fall_back(dir, "direct write refused");
                }
                Err(e) => {
                    // Cut a partial append and the padding: the committed size stays
                    // the end of the file.
                    let _ = active.file.set_len(active.size);
                    return Err(LogError::io("write", &active.path)(e));
                }
            }
        }
        let active = self.active_mut();
        if let Err(e) = active.file.write_all_at(bytes, active.size) {
            // Leave no partial bytes behind the committed size.
            let _ = active.file.set_len(active.size);
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
        if self.read_lock().active().direct.is_some() {
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
            match g.producers.check(h)? {
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
    /// first must start at the log end and each the next where the previous ended
    /// ([`LogError::UnexpectedAppendOffset`] otherwise). Framing and CRCs are checked;
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
            if let Some(e) = expected
                && h.base_offset != e
            {
                return Err(LogError::UnexpectedAppendOffset {
                    expected: e,
                    found: h.base_offset,
                });
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
        if first_offset != leo {
            return Err(LogError::UnexpectedAppendOffset {
                expected: leo,
                found: first_offset,
            });
        }
        self.maybe_roll_for(g, now, batches.len(), next - first_offset)?;
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
    /// and makes the change durable before returning. Nothing changes (and nothing is
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
            checkpoint::write_epochs(&self.dir.join(LEADER_EPOCH_FILE), &cache)?;
            g.epochs = cache;
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
        if update_producers {
            for s in stored {
                // The stored header: offsets assigned, append time stamped.
                let h = batch::parse_header(&batches[s.start..])
                    .expect("framed above, and the rewrites leave length and magic alone");
                g.producers.update(&h);
            }
        }
        g.unflushed_records += records;
        g.first_unflushed_ms.get_or_insert(now);
        if g.unflushed_records >= g.config.flush_messages
            || g.first_unflushed_ms
                .is_some_and(|t| now - t >= g.config.flush_ms)
        {
            flush_locked(g)?;
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
        g.recovery_point = base;
        g.unflushed_records = 0;
        g.first_unflushed_ms = None;
        checkpoint::write(&self.dir.join(RECOVERY_POINT_FILE), base, false)?;
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
        flush_locked(&mut g)?;
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
            flush_locked(&mut g)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Writes the recovery-point checkpoint, so the next open rescans less.
    pub fn checkpoint(&self) -> Result<(), LogError> {
        let rp = self.read_lock().recovery_point;
        checkpoint::write(&self.dir.join(RECOVERY_POINT_FILE), rp, false)
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
        self.flush()?;
        {
            let mut g = self.write_lock();
            let leo = g.log_end_offset();
            self.snapshot_producers(&mut g, leo, true)?;
        }
        self.checkpoint()
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

    /// Removes every record at or above `offset` (Kafka's `truncateTo`): what a follower
    /// does where its log parts from the leader's (KIP-101, KIP-279). `offset` must be
    /// within `[log start, log end]` ([`LogError::OffsetOutOfRange`] otherwise) and a
    /// batch boundary or the log start ([`LogError::NotBatchBoundary`] otherwise:
    /// Kafka truncates to batch boundaries, and epoch ends are batch boundaries); a
    /// refused target changes nothing.
    ///
    /// Later segments are deleted, newest first; the segment holding `offset` is cut
    /// there (its index rebuilt from the entries below the cut and a walk of at most an
    /// index interval of batch headers). The active segment is cut in place; a sealed
    /// one stays sealed and a new, empty active segment starts at `offset`; a segment
    /// cut at its base or at the log start is deleted whole. The tail
    /// buffer is forgotten (it is keyed by segment base offset, which a new segment may
    /// share with a deleted one). Producer snapshots above `offset` are deleted and the
    /// producer state rebuilt from the newest one left, so that a batch above the cut
    /// is no longer a duplicate; the epoch cache loses its entries at and above
    /// `offset`, including one at the log end (an epoch this replica started as leader
    /// and appended nothing in, as Kafka does). Durable before returning: the cut
    /// segment is fsynced and the recovery point lowered to `offset`; it is first
    /// lowered to the cut segment's base, so a crash half-way makes the next open
    /// rescan from there and find either the whole tail or the cut log, consistent
    /// with its epoch cache and producer state either way. After an IO error the log
    /// may be left part-way: close and reopen it.
    pub fn truncate_to(&self, offset: Offset) -> Result<(), LogError> {
        let mut g = self.write_lock();
        let g = &mut *g;
        let (start, end) = (g.log_start_offset, g.log_end_offset());
        if offset < start || offset > end {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                start,
                end,
            });
        }
        if offset == end {
            return self.update_epochs(g, |c| c.truncate_from_end(offset));
        }
        // Where to cut; nothing changes yet, so a refused target leaves the log alone.
        let (seg_base, plan) = {
            let seg = g
                .segment_for(offset)
                .expect("offsets in [start, end) are in a segment");
            // Cut at its base, a sealed segment goes whole; cut at the log start, any
            // segment does (what stays of it would lie wholly below the start).
            if (seg.sealed && seg.base == offset) || offset == start {
                (seg.base, None)
            } else {
                (seg.base, Some(seg.plan_cut(offset)?))
            }
        };
        let rp = g.recovery_point.min(seg_base);
        checkpoint::write(&self.dir.join(RECOVERY_POINT_FILE), rp, true)?;
        g.recovery_point = rp;
        self.update_epochs(g, |c| c.truncate_from_end(offset))?;
        for o in snapshot::list(&self.dir)? {
            if o > offset {
                snapshot::remove(&self.dir, o)?;
            }
        }
        // Newest first: a crash leaves a contiguous prefix of the segments.
        let later: Vec<Offset> = g
            .segments
            .range(seg_base + 1..)
            .map(|(&b, _)| b)
            .rev()
            .collect();
        for base in later {
            g.segments.remove(&base);
            delete_segment_files(&self.dir, base);
        }
        g.tail.clear();
        match plan {
            None => {
                g.segments.remove(&seg_base);
                delete_segment_files(&self.dir, seg_base);
            }
            Some(cut) => g
                .segments
                .get_mut(&seg_base)
                .expect("the segment being cut is still there")
                .apply_cut(cut)?,
        }
        if g.segments.is_empty() || g.active().sealed {
            let seg = Segment::create(&self.dir, offset, g.config.index_interval_bytes)?;
            g.segments.insert(offset, seg);
            g.open_direct(&self.dir)?;
        }
        checkpoint::sync_directory(&self.dir)?;
        self.reload_producers(g)?;
        // The cut segment was fsynced, and every earlier one was when it was sealed.
        g.recovery_point = offset;
        g.unflushed_records = 0;
        g.first_unflushed_ms = None;
        checkpoint::write(&self.dir.join(RECOVERY_POINT_FILE), offset, false)?;
        Ok(())
    }

    /// Deletes the whole log and restarts it, empty, at `offset` (Kafka's
    /// `truncateFullyAndStartAt`): what a follower does when the leader's log starts
    /// past this log's end, so that offsets stay dense. The log start and recovery
    /// point move to `offset` (the owner moves its high-water mark there); the producer state and
    /// the epoch cache are cleared (the follower rebuilds both from the batches it
    /// fetches next). Snapshots and the epoch checkpoint go first, then the segments,
    /// newest first, so a crash half-way leaves a prefix of the old log (whose producer
    /// state and epochs recovery rebuilds from its batches) or the new empty one.
    pub fn truncate_fully_and_start_at(&self, offset: Offset) -> Result<(), LogError> {
        let mut g = self.write_lock();
        let g = &mut *g;
        if offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                start: g.log_start_offset,
                end: g.log_end_offset(),
            });
        }
        // Snapshots and epochs first: a crash before the segments are gone leaves a log
        // whose producer state and epochs recovery rebuilds from its batches, rather
        // than state about batches that are gone.
        for o in snapshot::list(&self.dir)? {
            snapshot::remove(&self.dir, o)?;
        }
        g.producers = ProducerState::new();
        self.update_epochs(g, |c| c.clear())?;
        let old: Vec<Offset> = g.segments.keys().rev().copied().collect();
        g.segments.clear();
        for base in old {
            delete_segment_files(&self.dir, base);
        }
        g.tail.clear();
        let seg = Segment::create(&self.dir, offset, g.config.index_interval_bytes)?;
        g.segments.insert(offset, seg);
        g.open_direct(&self.dir)?;
        checkpoint::sync_directory(&self.dir)?;
        checkpoint::write(&self.dir.join(LOG_START_FILE), offset, true)?;
        g.log_start_offset = offset;
        g.recovery_point = offset;
        g.unflushed_records = 0;
        g.first_unflushed_ms = None;
        checkpoint::write(&self.dir.join(RECOVERY_POINT_FILE), offset, false)
    }

    /// Rebuilds the producer state from the newest snapshot at or below the log end
    /// and the batches after it (Kafka's `truncateAndReload`).
    fn reload_producers(&self, g: &mut Inner) -> Result<(), LogError> {
        let loaded = snapshot::load_latest(&self.dir, g.log_end_offset())?;
        let (from, mut producers) = loaded
            .snapshot
            .unwrap_or((g.log_start_offset, ProducerState::new()));
        replay_producers(&g.segments, from.max(g.log_start_offset), &mut producers)?;
        producers.expire(self.clock.now_ms(), g.config.producer_expiration_ms);
        g.producers = producers;
        Ok(())
    }

    /// Reads whole batches starting with the one that contains `offset`, up to
    /// `max_bytes` (but always at least one whole batch, as Kafka does since KIP-74), and
    /// only batches that end at or below `max_offset` when given (the high-water mark).
    /// Reads come from one segment; the caller continues from `next_offset`.
    pub fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        max_offset: Option<Offset>,
    ) -> Result<ReadResult, LogError> {
        let empty = || ReadResult {
            data: Bytes::new(),
            next_offset: offset,
        };
        let (seg_base, file, direct, path, mut pos, limit) = {
            let g = self.read_lock();
            let (start, end) = (g.log_start_offset, g.log_end_offset());
            if offset < start || offset > end {
                return Err(LogError::OffsetOutOfRange {
                    requested: offset,
                    start,
                    end,
                });
            }
            if offset == end || max_offset.is_some_and(|m| offset >= m) {
                return Ok(empty());
            }
            let Some(seg) = g.segment_for(offset) else {
                return Ok(empty());
            };
            let target = rel(seg.base, offset.max(seg.base));
            let pos = if seg.sealed {
                seg.index()?.position_for(target)
            } else {
                seg.builder.idx.position_for(target)
            };
            (
                seg.base,
                seg.file.clone(),
                g.direct_reader(&self.dir, seg),
                seg.path.clone(),
                pos as u64,
                seg.size,
            )
        };
        // One read from the index entry covers the walk to the wanted batch (at most an
        // index interval plus one batch) and the data: no separate header reads.
        let corrupt = |at: u64, e: batch::BatchError| LogError::Corrupt {
            path: path.clone(),
            position: at,
            reason: e.to_string(),
        };
        loop {
            if pos >= limit {
                return Ok(empty());
            }
            let want = (max_bytes as u64)
                .saturating_add(READ_SLACK)
                .min(limit - pos);
            let data = self.read_segment(
                seg_base,
                &file,
                direct.as_deref(),
                &path,
                pos,
                want as usize,
            )?;
            let window = window::find_window(&data, offset, max_bytes, max_offset)
                .map_err(|e| corrupt(pos + e.at as u64, e.error))?;
            match window {
                Window::Found {
                    start,
                    end,
                    next_offset,
                } => {
                    return Ok(ReadResult {
                        data: data.slice(start..end),
                        next_offset,
                    });
                }
                // Not one batch header before the segment's end (the file is shorter
                // than its recorded size): retrying here would loop forever.
                Window::NotFound { skip: 0 } => {
                    return Err(corrupt(
                        pos,
                        batch::BatchError::Truncated {
                            need: HEADER_LEN,
                            have: data.len(),
                        },
                    ));
                }
                // The walk ran past this read: continue from where it stopped.
                Window::NotFound { skip } => pos += skip as u64,
                Window::PastMaxOffset => return Ok(empty()),
                Window::Incomplete {
                    start,
                    len,
                    next_offset,
                } => {
                    // KIP-74: the first batch is returned whole even when larger than
                    // max_bytes.
                    let at = pos + start as u64;
                    let data =
                        self.read_segment(seg_base, &file, direct.as_deref(), &path, at, len)?;
                    if data.len() < len {
                        return Err(corrupt(
                            at,
                            batch::BatchError::Truncated {
                                need: len,
                                have: data.len(),
                            },
                        ));
                    }
                    return Ok(ReadResult {
                        data: data.slice(..len),
                        next_offset,
                    });
                }
            }
        }
    }

    /// The batches from `from` (a batch boundary) up to `end` (a batch boundary after
    /// it, at most the log end), back to back: what reads from `from` on return until
    /// they reach `end`. [`LogError::NoBatch`] if a read there returns nothing (`end`
    /// is inside a batch, or the range is not all in the log); a range below the log
    /// start is [`LogError::OffsetOutOfRange`], as for [`Self::read`].
    pub fn read_range(&self, from: Offset, end: Offset) -> Result<Vec<u8>, LogError> {
        let mut out = Vec::new();
        self.read_range_chunks(from, end, &mut |chunk| {
            out.extend_from_slice(&chunk);
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Self::read_range`], handing each read's batches to `f` as they come (at most
    /// [`RANGE_CHUNK`] bytes, or one batch, each) instead of gathering them.
    pub(crate) fn read_range_chunks(
        &self,
        from: Offset,
        end: Offset,
        f: &mut dyn FnMut(Bytes) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let mut at = from;
        while at < end {
            let r = self.read(at, RANGE_CHUNK, Some(end))?;
            if r.data.is_empty() || r.next_offset <= at {
                return Err(LogError::NoBatch { offset: at, end });
            }
            at = r.next_offset;
            f(r.data)?;
        }
        Ok(())
    }

    /// Bytes `[pos, pos + len)` of segment `seg` (fewer only past the end of the file):
    /// the part the tail cache holds is copied from memory, under the read lock (a
    /// memcpy, no syscall); the part before it is read from the file without the lock,
    /// with `O_DIRECT` through `direct` when given (see `direct_read`), else through
    /// `file` and the page cache. Bytes below a segment's size never change, so it does
    /// not matter whether a byte comes from the cache or the file, nor that the cache
    /// moves on meanwhile.
    fn read_segment(
        &self,
        seg: Offset,
        file: &std::fs::File,
        direct: Option<&std::fs::File>,
        path: &Path,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, LogError> {
        match direct {
            Some(direct) => self.read_segment_direct(seg, file, direct, path, pos, len),
            None => self.read_segment_buffered(seg, file, path, pos, len),
        }
    }

    fn read_segment_buffered(
        &self,
        seg: Offset,
        file: &std::fs::File,
        path: &Path,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, LogError> {
        let end = pos + len as u64;
        let mut out = Vec::with_capacity(len);
        let mut at = pos;
        while at < end {
            let cached_from = {
                let g = self.read_lock();
                at += g.tail.copy_out(seg, at, end, &mut out);
                g.tail.cached_from(seg)
            };
            if at >= end {
                break;
            }
            // From the file: up to where the cache starts, if that is inside the range.
            let stop = cached_from.filter(|&c| c > at && c < end).unwrap_or(end);
            let want = (stop - at) as usize;
            let got = segment::read_into(file, path, at, want, &mut out)?;
            at += got as u64;
            if got < want || stop == end {
                break;
            }
        }
        Ok(Bytes::from(out))
    }

    /// [`Self::read_segment`] in direct mode: one aligned buffer covers the blocks of
    /// `[pos, pos + len)`; the file's part of the range is read into it with `O_DIRECT`
    /// in whole blocks (where the cache starts is a block boundary), the cache's part
    /// copied after it, and the result is a slice of the buffer. A direct read may
    /// rewrite bytes of the buffer already copied from the cache (the start of a block,
    /// or a gap between the windows): below the segment's size, file and cache agree.
    fn read_segment_direct(
        &self,
        seg: Offset,
        file: &std::fs::File,
        direct: &std::fs::File,
        path: &Path,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, LogError> {
        let end = pos + len as u64;
        let base = floor_block(pos);
        let mut buf = AlignedBuf::new((ceil_block(end) - base) as usize);
        let mut direct = Some(direct);
        let mut at = pos;
        while at < end {
            let cached_from = {
                let g = self.read_lock();
                let out = &mut buf.bytes_mut()[(at - base) as usize..];
                at += g.tail.copy_out_to(seg, at, end, out);
                g.tail.cached_from(seg)
            };
            if at >= end {
                break;
            }
            // From the file: up to where the cache starts, if that is inside the range.
            let stop = cached_from.filter(|&c| c > at && c < end).unwrap_or(end);
            let from = floor_block(at);
            let region = &mut buf.bytes_mut()[(from - base) as usize..];
            let got = direct_read::fill(file, &mut direct, region, from, (stop - from) as usize)
                .map_err(LogError::io("read", path))?;
            if direct.is_none() {
                self.read_lock()
                    .refuse_direct_reads(&self.dir, "direct read refused");
            }
            let reached = from + got as u64;
            if reached < stop {
                // The end of the file.
                at = at.max(reached);
                break;
            }
            at = stop;
        }
        let (from, to) = ((pos - base) as usize, (at.max(pos) - base) as usize);
        Ok(buf.into_bytes(from, to))
    }

    /// The first record with a timestamp at or after `timestamp` (Kafka's ListOffsets by
    /// time): its offset and timestamp, or `None` if every record is older. Found through
    /// the segments' max timestamps and time indexes, then a walk of at most one index
    /// interval of batches.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(Offset, i64)>, LogError> {
        let candidates: Vec<(Arc<std::fs::File>, PathBuf, u64, u64, Offset)> = {
            let g = self.read_lock();
            let start = g.log_start_offset;
            let mut out = Vec::new();
            for seg in g.segments.values() {
                if seg.next_offset <= start || seg.max_timestamp < timestamp {
                    continue;
                }
                let with_index = |idx: &Indexes| {
                    let from = seg.base + idx.start_for_timestamp(timestamp) as i64;
                    let from = from.max(start).min(seg.next_offset);
                    idx.position_for(rel(seg.base, from))
                };
                let pos = if seg.sealed {
                    with_index(seg.index()?.as_ref())
                } else {
                    with_index(&seg.builder.idx)
                };
                out.push((
                    seg.file.clone(),
                    seg.path.clone(),
                    pos as u64,
                    seg.size,
                    start,
                ));
            }
            out
        };
        for (file, path, mut pos, limit, start) in candidates {
            while pos < limit {
                let head = read_at(&file, &path, pos, HEADER_LEN)?;
                let h = batch::parse_header(&head).map_err(|e| LogError::Corrupt {
                    path: path.clone(),
                    position: pos,
                    reason: e.to_string(),
                })?;
                let size = h.total_size() as u64;
                if h.max_timestamp >= timestamp && h.next_offset() > start {
                    let bytes = read_at(&file, &path, pos, size as usize)?;
                    let (b, _) = RecordBatch::parse(&bytes)?;
                    let recs = b.records()?;
                    for r in recs.iter() {
                        let r = r?;
                        if r.offset >= start && r.timestamp >= timestamp {
                            return Ok(Some((r.offset, r.timestamp)));
                        }
                    }
                }
                pos += size;
            }
        }
        Ok(None)
    }

    /// Deletes the oldest sealed segments that local retention (time or size) or the log
    /// start offset has passed, never the active segment, and only as long as
    /// `may_delete` agrees: the first segment it refuses stops the pass, so the log
    /// stays a contiguous range (the offloader uses this for "not deleted until
    /// offloaded"). The log start offset moves (durably) before any file is removed.
    pub fn apply_retention(
        &self,
        may_delete: &mut dyn FnMut(&SegmentInfo) -> bool,
    ) -> Result<RetentionOutcome, LogError> {
        let now = self.clock.now_ms();
        let (infos, limits, start, total) = {
            let g = self.read_lock();
            let infos: Vec<SegmentInfo> =
                g.segments.values().filter(|s| s.sealed).map(info).collect();
            (infos, g.config.retention, g.log_start_offset, g.size())
        };
        let mut remaining = total;
        let mut doomed = Vec::new();
        let mut blocked = None;
        for seg in infos {
            let below_start = seg.next_offset <= start;
            let by_time = limits.ms.is_some_and(|ms| now - seg.max_timestamp > ms);
            let by_size = limits
                .bytes
                .is_some_and(|b| remaining - seg.size_bytes >= b);
            if !(below_start || by_time || by_size) {
                break;
            }
            if !below_start && !may_delete(&seg) {
                blocked = Some(seg.base_offset);
                break;
            }
            remaining -= seg.size_bytes;
            doomed.push(seg);
        }
        let mut g = self.write_lock();
        let Some(last) = doomed.last() else {
            return Ok(RetentionOutcome {
                deleted: vec![],
                blocked_by_predicate: blocked,
                log_start_offset: g.log_start_offset,
            });
        };
        let new_start = g.log_start_offset.max(last.next_offset);
        checkpoint::write(&self.dir.join(LOG_START_FILE), new_start, true)?;
        g.log_start_offset = new_start;
        self.update_epochs(&mut g, |c| c.truncate_from_start(new_start))?;
        let mut deleted = Vec::new();
        for seg in doomed {
            // Only the unchanged prefix: a concurrent pass may have removed some already.
            if g.segments.get(&seg.base_offset).is_some_and(|s| s.sealed) {
                g.segments.remove(&seg.base_offset);
                delete_segment_files(&self.dir, seg.base_offset);
                deleted.push(seg);
            }
        }
        checkpoint::sync_directory(&self.dir)?;
        snapshot::retain_from(&self.dir, g.log_start_offset);
        Ok(RetentionOutcome {
            deleted,
            blocked_by_predicate: blocked,
            log_start_offset: g.log_start_offset,
        })
    }

    /// Restarts an empty log (start == end, no data) at `offset`: its segment is replaced
    /// by an empty one based there, and the start moves there durably. A partition whose
    /// history lives only in object storage (a broker with a fresh data dir, a topic
    /// recovered from the bucket) continues at the remote end this way, so offsets stay
    /// dense across the tiers.
    pub fn reset_empty(&self, offset: Offset) -> Result<(), LogError> {
        let mut g = self.write_lock();
        let (start, end) = (g.log_start_offset, g.log_end_offset());
        if start != end || g.size() != 0 || offset < end {
            return Err(LogError::NotEmpty {
                start,
                end,
                requested: offset,
            });
        }
        if offset == end {
            return Ok(());
        }
        checkpoint::write(&self.dir.join(LOG_START_FILE), offset, true)?;
        let interval = g.config.index_interval_bytes;
        let seg = Segment::create(&self.dir, offset, interval)?;
        let old: Vec<Offset> = g.segments.keys().copied().collect();
        g.segments.clear();
        g.segments.insert(offset, seg);
        for base in old {
            delete_segment_files(&self.dir, base);
        }
        // The tail buffer belonged to the old active segment.
        g.tail.clear();
        g.open_direct(&self.dir)?;
        g.log_start_offset = offset;
        g.recovery_point = offset;
        checkpoint::sync_directory(&self.dir)?;
        checkpoint::write(&self.dir.join(RECOVERY_POINT_FILE), offset, false)?;
        // What the remote part's epochs were is not known here.
        self.update_epochs(&mut g, |c| c.clear())
    }

    /// Moves the log start offset forward (DeleteRecords, remote retention). Offsets
    /// below it are no longer served; whole sealed segments below it are deleted.
    pub fn advance_log_start(&self, offset: Offset) -> Result<Offset, LogError> {
        {
            let mut g = self.write_lock();
            let end = g.log_end_offset();
            if offset > end {
                return Err(LogError::OffsetOutOfRange {
                    requested: offset,
                    start: g.log_start_offset,
                    end,
                });
            }
            if offset <= g.log_start_offset {
                return Ok(g.log_start_offset);
            }
            checkpoint::write(&self.dir.join(LOG_START_FILE), offset, true)?;
            g.log_start_offset = offset;
            self.update_epochs(&mut g, |c| c.truncate_from_start(offset))?;
        }
        self.apply_retention(&mut |_| false)?;
        Ok(self.log_start_offset())
    }
}

fn flush_locked(g: &mut Inner) -> Result<(), LogError> {
    let leo = g.log_end_offset();
    let active = g.active_mut();
    active.persist_index()?;
    active.sync()?;
    g.recovery_point = leo;
    g.unflushed_records = 0;
    g.first_unflushed_ms = None;
    Ok(())
}

fn delete_segment_files(dir: &Path, base: Offset) {
    for p in [
        segment::log_path(dir, base),
        segment::index_path(dir, base),
        segment::time_index_path(dir, base),
    ] {
        if let Err(e) = fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %p.display(), error = %e, "cannot delete segment file");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::Bytes;
    use strata_proto::Compression;
    use strata_proto::batch::build::{NewRecord, batch};

    use super::*;
    use crate::clock::ManualClock;
    use crate::tail::refuse::{self, Refusal};

    fn make_batch(seed: u8) -> Vec<u8> {
        let records: Vec<NewRecord> = (0..3)
            .map(|i| NewRecord::value(vec![seed.wrapping_add(i); 700], 1000))
            .map(|r| NewRecord {
                key: Some(Bytes::from_static(b"k")),
                ..r
            })
            .collect();
        batch(&records, Compression::None, None).to_vec()
    }

    /// With direct IO refused (at open, or at the first write behind an open that
    /// worked), the log writes through the page cache: every append succeeds, nothing
    /// is padded, and a reopen finds exactly the data.
    fn falls_back_to_buffered(refusal: Refusal) {
        let dir = tempfile::tempdir().unwrap();
        let probe = dir.path().join("probe");
        fs::write(&probe, b"").unwrap();
        let direct_works = tail::open_direct(&probe).unwrap().is_some();
        let config = LogConfig {
            segment_bytes: 8000,
            io_mode: IoMode::Direct,
            ..LogConfig::default()
        };
        let clock = Arc::new(ManualClock::new(0));
        refuse::set(Some(refusal));
        let (log, _) = Log::open(dir.path(), config.clone(), clock.clone()).unwrap();
        let mut stored = Vec::new();
        for i in 0..20u8 {
            let mut b = make_batch(i);
            log.append(&mut b, 0).unwrap();
            stored.extend_from_slice(&b);
            assert_eq!(log.io_mode(), IoMode::Buffered);
        }
        assert!(log.segments().len() > 2, "rolled, and stayed buffered");
        for s in log.segments() {
            let len = fs::metadata(&s.log_path).unwrap().len();
            assert_eq!(len, s.size_bytes, "buffered writes leave no padding");
        }
        let g = log.read_lock();
        assert!(g.direct_refused && !g.direct_written);
        assert_eq!(g.tail.allocated(), 0, "no tail buffer");
        drop(g);
        drop(log);
        refuse::set(None);
        // Reopened where O_DIRECT works: the same bytes, and direct IO again.
        let (log, report) = Log::open(dir.path(), config, clock).unwrap();
        assert!(report.truncations.is_empty(), "{report:?}");
        let mut got = Vec::new();
        let mut offset = 0;
        while offset < log.log_end_offset() {
            let r = log.read(offset, 1 << 20, None).unwrap();
            got.extend_from_slice(&r.data);
            offset = r.next_offset;
        }
        assert!(got == stored);
        if direct_works {
            assert_eq!(log.io_mode(), IoMode::Direct);
        }
    }

    /// Appends batches of about 2.2 KB (so that segments of 8000 bytes end off a block
    /// boundary) until the log has more than four segments; returns them.
    fn fill(log: &Log) -> Vec<Vec<u8>> {
        let mut stored = Vec::new();
        for i in 0..20u8 {
            let mut b = make_batch(i);
            log.append(&mut b, 0).unwrap();
            stored.push(b);
        }
        assert!(log.segments().len() > 4);
        stored
    }

    fn read_everything(log: &Log) -> Vec<u8> {
        let mut got = Vec::new();
        let mut offset = 0;
        while offset < log.log_end_offset() {
            let r = log.read(offset, 1 << 20, None).unwrap();
            assert!(!r.data.is_empty());
            got.extend_from_slice(&r.data);
            offset = r.next_offset;
        }
        got
    }

    /// Direct mode with segments of 8000 bytes and a tail cache of two 4 KiB windows.
    fn small_direct() -> LogConfig {
        LogConfig {
            segment_bytes: 8000,
            tail_cache_bytes: 8192,
            io_mode: IoMode::Direct,
            ..LogConfig::default()
        }
    }

    /// How many of this process's fds are open on files under `dir`.
    fn fds_under(dir: &Path) -> usize {
        let dir = dir.canonicalize().unwrap();
        fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&dir)))
            .count()
    }

    /// In direct mode every byte outside the tail cache is read with O_DIRECT, from
    /// sealed segments, from the active one, and after a reopen (sealed segments then
    /// open their direct fd on first read); in buffered mode nothing is. Each segment
    /// holds at most two fds: its ordinary one and one O_DIRECT one, which the active
    /// segment shares between appends and reads and keeps once sealed.
    #[test]
    fn direct_mode_reads_with_o_direct_through_at_most_one_more_fd_per_segment() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (log, _) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
        if log.io_mode() != IoMode::Direct {
            eprintln!("the temp dir refuses O_DIRECT: nothing to test");
            return;
        }
        let stored = fill(&log).concat();
        let segments = log.segments().len();
        // Appending left each sealed segment its O_DIRECT fd.
        assert_eq!(fds_under(dir.path()), 2 * segments);
        let before = direct_read::stats::direct_bytes();
        assert!(read_everything(&log) == stored);
        let direct = direct_read::stats::direct_bytes() - before;
        // Everything but what the cache holds (at most 12 KiB), at least once.
        assert!(direct + 12 * 1024 >= stored.len() as u64, "{direct}");
        assert_eq!(fds_under(dir.path()), 2 * segments);
        assert!(!log.read_lock().direct_reads_refused.load(Ordering::Relaxed));
        drop(log);

        // Reopened: only the active segment has its O_DIRECT fd until the others are
        // read, and then each has exactly one.
        let (log, _) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
        assert_eq!(fds_under(dir.path()), segments + 1);
        let before = direct_read::stats::direct_bytes();
        assert!(read_everything(&log) == stored);
        // The tail cache starts empty: every byte comes from the file.
        assert!(direct_read::stats::direct_bytes() - before >= stored.len() as u64);
        assert_eq!(fds_under(dir.path()), 2 * segments);
        drop(log);
        assert_eq!(fds_under(dir.path()), 0);

        // Buffered mode reads through the page cache only.
        let buffered = LogConfig {
            io_mode: IoMode::Buffered,
            ..small_direct()
        };
        let (log, _) = Log::open(dir.path(), buffered, clock).unwrap();
        let before = direct_read::stats::direct_bytes();
        assert!(read_everything(&log) == stored);
        assert_eq!(direct_read::stats::direct_bytes(), before);
        assert_eq!(fds_under(dir.path()), segments);
    }

    /// With O_DIRECT reads refused (at the first read, or at the open of a segment's
    /// read-only O_DIRECT fd), reads fall back to the page cache at once, for sealed
    /// segments and the active one, and return exactly the bytes; appends stay direct,
    /// and segments sealed after the refusal read the same way. A reopen where direct
    /// reads work reads directly again.
    fn direct_reads_fall_back_to_buffered(refusal: Refusal) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (log, _) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
        if log.io_mode() != IoMode::Direct {
            eprintln!("the temp dir refuses O_DIRECT: nothing to test");
            return;
        }
        let mut stored = fill(&log);
        drop(log);
        refuse::set(Some(refusal));
        // Reopened, so sealed segments open their O_DIRECT fd on first read (where
        // `ReadOpen` refuses); the active segment's is the append fd (where `Read`
        // refuses its first read).
        let (log, report) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
        assert!(report.truncations.is_empty(), "{report:?}");
        assert_eq!(log.io_mode(), IoMode::Direct, "appends stay direct");
        let before = direct_read::stats::direct_bytes();
        assert!(read_everything(&log) == stored.concat());
        assert!(log.read_lock().direct_reads_refused.load(Ordering::Relaxed));
        // More segments, sealed after the refusal.
        for i in 20..30u8 {
            let mut b = make_batch(i);
            log.append(&mut b, 0).unwrap();
            stored.push(b);
            let r = log.read(log.log_end_offset() - 3, 1, None).unwrap();
            assert_eq!(&r.data[..], &stored.last().unwrap()[..]);
        }
        assert_eq!(log.io_mode(), IoMode::Direct);
        assert!(read_everything(&log) == stored.concat());
        assert_eq!(direct_read::stats::direct_bytes(), before, "no direct read");
        drop(log);

        refuse::set(None);
        let (log, report) = Log::open(dir.path(), small_direct(), clock).unwrap();
        assert!(report.truncations.is_empty(), "{report:?}");
        let before = direct_read::stats::direct_bytes();
        assert!(read_everything(&log) == stored.concat());
        assert!(direct_read::stats::direct_bytes() > before);
        assert!(!log.read_lock().direct_reads_refused.load(Ordering::Relaxed));
    }

    #[test]
    fn refused_direct_reads_fall_back_to_buffered() {
        direct_reads_fall_back_to_buffered(Refusal::Read);
    }

    #[test]
    fn refused_direct_read_opens_fall_back_to_buffered() {
        direct_reads_fall_back_to_buffered(Refusal::ReadOpen);
    }

    #[test]
    fn refused_direct_open_falls_back_to_buffered() {
        falls_back_to_buffered(Refusal::Open);
    }

    #[test]
    fn refused_first_direct_write_falls_back_to_buffered() {
        falls_back_to_buffered(Refusal::Write);
    }
}
