//! The partition log: the [`Log`], its state and the accessors over it. Its children
//! own the rest: `append` appends (as leader and as follower), `flush` rolls, flushes
//! and stops it cleanly, `recovery_point` keeps its recovery point between runs,
//! `epochs` keeps its leader-epoch cache, `direct` writes and reads it with
//! `O_DIRECT`, `loader` opens and recovers it (Kafka's `LogLoader`), `read` reads it,
//! `retention` removes data from it (truncation, retention, log start moves), and
//! `cleaner` compacts it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use strata_proto::{Offset, ProducerId};

use crate::clock::Clock;
use crate::config::{IoMode, LogConfig};
use crate::epoch::LeaderEpochCache;
use crate::producer::{ProducerEntry, ProducerState};
use crate::segment::{self, Segment};
use crate::tail::TailCache;

use self::recovery_point::OwnRecoveryFile;

mod append;
pub(crate) mod cleaner;
mod direct;
mod epochs;
mod flush;
mod loader;
mod read;
mod recovery_point;
mod retention;

pub use self::loader::{RecoveryReport, Truncation};
pub use self::read::SealedSpan;
pub use self::recovery_point::{RecoveryCheckpoint, SharedRecoveryPoint};

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
    /// [`epochs::sync_epochs`] makes it durable before the recovery point moves.
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

    /// What the log knows about an idempotent producer: its epoch, its last sequence
    /// and offset, and the batches it would deduplicate.
    pub fn producer_entry(&self, producer_id: ProducerId) -> Option<ProducerEntry> {
        self.read_lock().producers.entry(producer_id).cloned()
    }

    /// A copy of every producer's state (for DescribeProducers).
    pub fn producer_state(&self) -> ProducerState {
        self.read_lock().producers.clone()
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
