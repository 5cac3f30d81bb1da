//! Loading a partition log from its directory (Kafka's `LogLoader`): [`Log::open`]
//! lists the segment files, trusts the sealed segments below the recovery point (their
//! indexes checked when first used), CRC-scans the others and the last one, truncates a
//! torn or corrupt tail and drops the segments after it, rebuilds missing or damaged
//! indexes, moves the log start past whole segments below it, loads the producer state
//! (the newest usable snapshot, then a replay of the batch headers after it) and makes
//! the leader-epoch checkpoint agree with the batches. What it found and repaired is the
//! [`RecoveryReport`]. Appends, reads, retention and truncation are in the parent module.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};

use strata_proto::{LeaderEpoch, Offset};

use super::recovery_point::OwnRecoveryFile;
use super::{
    GAPS_FILE, Inner, LEADER_EPOCH_FILE, LOG_START_FILE, Log, RECOVERY_POINT_FILE,
    RecoveryCheckpoint, delete_segment_files,
};
use crate::checkpoint;
use crate::clock::Clock;
use crate::config::{IoMode, LogConfig};
use crate::direct_read;
use crate::epoch::LeaderEpochCache;
use crate::error::LogError;
use crate::files::SegmentFile;
use crate::index::{TIME_ENTRY, TimeEntry, rel};
use crate::producer::ProducerState;
use crate::segment::{self, Segment};
use crate::snapshot;
use crate::tail::TailCache;

/// One truncation made during recovery.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Truncation {
    pub segment_base: Offset,
    /// The byte position the segment was cut at.
    pub position: u64,
    pub bytes_removed: u64,
    pub reason: String,
}

/// What [`Log::open`] found and repaired.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RecoveryReport {
    /// Segments CRC-scanned (those at or above the recovery point, and the last one).
    pub scanned_segments: Vec<Offset>,
    /// Of those, the ones scanned only from a byte position on (base offset, position):
    /// after a clean stop ([`RecoveryCheckpoint::Shared`]'s `clean`), the active segment
    /// from its last index entry below the recovery point.
    pub resumed_scans: Vec<(Offset, u64)>,
    /// Bytes those scans read and CRC-checked.
    pub scanned_bytes: u64,
    pub truncations: Vec<Truncation>,
    /// Segments removed: after a truncation (offsets must not overlap) or below the log start.
    pub deleted_segments: Vec<Offset>,
    /// Sealed segments whose index files were missing or damaged and were rebuilt.
    pub rebuilt_indexes: Vec<Offset>,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    /// The producer snapshot the producer state was loaded from; batches from there to
    /// the log end were replayed. `None`: replayed from the log start.
    pub producer_snapshot: Option<Offset>,
    /// Producer snapshots deleted: damaged ones, and ones past the log end (left by a
    /// truncation).
    pub deleted_producer_snapshots: Vec<Offset>,
    /// The leader-epoch checkpoint was missing, damaged, or disagreed with the
    /// batches, and the cache was rebuilt from the batch headers.
    pub rebuilt_leader_epochs: bool,
    /// Cleaned segments whose swap a crash had interrupted and recovery completed
    /// (their base offsets).
    pub completed_swaps: Vec<Offset>,
    /// Everything the open found was durable already (the recovery checkpoint at the
    /// log end, as after a clean close) and it changed nothing: it wrote and fsynced
    /// nothing. `false`: it made the tail durable (a crash left appends past the last
    /// flush) or repaired something.
    pub clean: bool,
}

impl RecoveryReport {
    /// Whether recovery had to throw anything away.
    pub fn lost_data(&self) -> bool {
        !self.truncations.is_empty()
    }
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering it as described in the
    /// crate docs.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<(Log, RecoveryReport), LogError> {
        Self::open_with(dir, config, clock, RecoveryCheckpoint::Own)
    }

    /// [`Log::open`], with the recovery point kept as `recovery` says.
    pub fn open_with(
        dir: &Path,
        config: LogConfig,
        clock: Arc<dyn Clock>,
        recovery: RecoveryCheckpoint,
    ) -> Result<(Log, RecoveryReport), LogError> {
        fs::create_dir_all(dir).map_err(LogError::io("create dir", dir))?;
        // A cleaner pass cut short: roll back what it had not committed, finish what it had.
        let mut report = RecoveryReport {
            completed_swaps: super::cleaner::recover_swaps(dir)?,
            ..RecoveryReport::default()
        };
        // Whether this open removed or created a file in `dir` (then the directory is
        // fsynced before the recovery point says anything is durable).
        let mut removed_files = false;
        let mut bases = Vec::new();
        for entry in fs::read_dir(dir).map_err(LogError::io("list", dir))? {
            let entry = entry.map_err(LogError::io("list", dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(entry.path());
                removed_files = true;
                continue;
            }
            if let Some(stem) = name.strip_suffix(".log")
                && let Ok(base) = stem.parse::<Offset>()
            {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        // Index files without a log file are leftovers of a deletion cut short.
        for entry in fs::read_dir(dir)
            .map_err(LogError::io("list", dir))?
            .flatten()
        {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let stem = name
                .strip_suffix(".index")
                .or_else(|| name.strip_suffix(".timeindex"));
            if let Some(base) = stem.and_then(|s| s.parse::<Offset>().ok())
                && bases.binary_search(&base).is_err()
            {
                let _ = fs::remove_file(entry.path());
                removed_files = true;
            }
        }

        let own_checkpoint = checkpoint::read(&dir.join(RECOVERY_POINT_FILE));
        // Both are lower bounds of what was durable: the lower one is safe whichever was
        // written last (the log's own file is written where the point moves back).
        let recovery_checkpoint = match (own_checkpoint, recovery) {
            (Some(own), RecoveryCheckpoint::Shared { hint: Some(h), .. }) => Some(own.min(h)),
            (None, RecoveryCheckpoint::Shared { hint, .. }) => hint,
            (own, _) => own,
        };
        let own_recovery = OwnRecoveryFile {
            shared: matches!(recovery, RecoveryCheckpoint::Shared { .. }),
            // It may be there even unread (torn): the first save of a shared value
            // removes it or finds it gone, rather than every open looking for it.
            present: true,
            writes: 0,
        };
        let recovery_point = recovery_checkpoint.unwrap_or(0);
        let clean_stop = matches!(recovery, RecoveryCheckpoint::Shared { clean: true, .. })
            && recovery_checkpoint.is_some();
        // Whether offsets may have gaps here (see `GAPS_FILE`).
        let gaps_allowed = dir.join(GAPS_FILE).exists();
        let start_checkpoint = checkpoint::read(&dir.join(LOG_START_FILE));
        let interval = config.index_interval_bytes;
        let mut segments: BTreeMap<Offset, Segment> = BTreeMap::new();
        // The leader-epoch runs of the scanned batches, to check the epoch cache with.
        let mut scanned_epochs: Vec<(LeaderEpoch, Offset, Offset)> = Vec::new();
        let mut cut = false;
        for (i, &base) in bases.iter().enumerate() {
            let path = segment::log_path(dir, base);
            if cut {
                delete_segment_files(dir, base);
                report.deleted_segments.push(base);
                continue;
            }
            let next_base = bases.get(i + 1).copied();
            let is_last = next_base.is_none();
            let needs_scan = is_last || next_base.is_some_and(|nb| nb > recovery_point);
            if !needs_scan {
                if let Some(seg) =
                    open_trusted(dir, base, path.clone(), next_base.unwrap_or(base), interval)?
                {
                    segments.insert(base, seg);
                    continue;
                }
                report.rebuilt_indexes.push(base);
                // Fall through to a scan with a freshly opened handle.
            }
            let file = Segment::open_file(&path)?;
            report.scanned_segments.push(base);
            // Direct mode scans with O_DIRECT (the scan must not fill the page cache).
            let direct = match config.io_mode {
                IoMode::Direct => {
                    direct_read::open(&path).map_err(LogError::io("open O_DIRECT", &path))?
                }
                IoMode::Buffered => None,
            };
            // After a clean stop the active segment's index is trusted up to the recovery
            // point: only the batches from its last entry on are scanned (at most an index
            // interval and a batch), if they end exactly there.
            let resumed = match is_last && clean_stop {
                true => resumed_scan(
                    dir,
                    base,
                    &file,
                    direct.as_ref(),
                    recovery_point,
                    interval,
                    gaps_allowed,
                )?,
                false => None,
            };
            // The index files as read for the resumed scan: compared with the rebuilt
            // index below without reading them again.
            let (scan, scanned_from, index_on_disk) = match resumed {
                Some((scan, pos, files)) => {
                    report.resumed_scans.push((base, pos));
                    (scan, pos, Some(files))
                }
                None => {
                    let scan =
                        Segment::scan(&file, direct.as_ref(), &path, base, interval, gaps_allowed)?;
                    (scan, 0, None)
                }
            };
            report.scanned_bytes += scan.valid_size.saturating_sub(scanned_from);
            scanned_epochs.extend_from_slice(&scan.epochs);
            let len = file.metadata().map_err(LogError::io("stat", &path))?.len();
            if scan.padding > 0 {
                // Zeros a direct write padded the last block with: nothing was lost.
                file.set_len(scan.valid_size)
                    .map_err(LogError::io("truncate", &path))?;
                tracing::debug!(segment = %path.display(), bytes = scan.padding, "cut direct-write padding");
            }
            if let Some(reason) = &scan.stop_reason {
                file.set_len(scan.valid_size)
                    .map_err(LogError::io("truncate", &path))?;
                file.sync_all().map_err(LogError::io("fsync", &path))?;
                tracing::warn!(segment = %path.display(), position = scan.valid_size, removed = len - scan.valid_size, %reason, "truncated log tail");
                report.truncations.push(Truncation {
                    segment_base: base,
                    position: scan.valid_size,
                    bytes_removed: len - scan.valid_size,
                    reason: reason.clone(),
                });
                cut = !is_last;
            } else if next_base.is_some_and(|nb| nb < scan.next_offset) {
                tracing::warn!(segment = %path.display(), next = scan.next_offset, "segment overlaps the next one; dropping later segments");
                report.truncations.push(Truncation {
                    segment_base: base,
                    position: scan.valid_size,
                    bytes_removed: 0,
                    reason: format!(
                        "segment ends at offset {} past where the next segment starts, {}",
                        scan.next_offset,
                        next_base.unwrap_or_default()
                    ),
                });
                cut = true;
            }
            let last_now = is_last || cut;
            // A sealed segment's range runs to the next segment's base: its last batches
            // may have been compacted away, or a truncation cut it in a gap.
            let next_offset = match next_base {
                Some(nb) if !last_now => nb,
                _ => scan.next_offset,
            };
            let mut seg = Segment {
                base,
                next_offset,
                size: scan.valid_size,
                max_timestamp: scan.builder.max_timestamp(),
                file: Arc::new(SegmentFile::with_plain(path.clone(), file)),
                direct_writes: false,
                path,
                sealed: false,
                builder: scan.builder,
                persisted: (0, 0),
                sealed_index: Default::default(),
                first_append_ms: scan.first_batch_max_ts,
                dirty: true,
                // Entries past what the scan kept belong to a cut tail; the replay of
                // producer state below adds back any the file lost.
                aborted: crate::txn_index::load(dir, base, next_offset)?,
                aborted_dirty: false,
            };
            if last_now {
                // The active segment: its index is rebuilt on every open, so rewrite the
                // files from the scan (unless they hold exactly that already, as after a
                // clean close) and keep appending to them.
                let holds = match &index_on_disk {
                    Some((offsets, times)) => {
                        segment::index_bytes_hold(offsets, times, &seg.builder.idx)
                    }
                    None => segment::index_files_hold(dir, base, &seg.builder.idx),
                };
                if !holds {
                    segment::write_index_files(dir, base, &seg.builder.idx, false)?;
                }
                seg.persisted = (seg.builder.idx.offsets.len(), seg.builder.idx.times.len());
                // Its direct fd is opened read-write for appends (`open_direct`).
            } else {
                seg.seal()?;
            }
            segments.insert(base, seg);
        }

        // The log start: the checkpoint, but never before the first segment.
        let mut log_start = start_checkpoint.unwrap_or(0);
        if let Some((&first, _)) = segments.iter().next() {
            log_start = log_start.max(first);
        }
        let leo = segments.values().next_back().map(|s| s.next_offset);
        if leo.is_some_and(|leo| log_start > leo) {
            // Everything local is below the start (for example, a remote retention moved
            // the start past the local data): start afresh at the log start.
            for (&base, _) in segments.iter() {
                delete_segment_files(dir, base);
                report.deleted_segments.push(base);
            }
            segments.clear();
        }
        // Whole segments below the log start are gone already from a reader's view.
        while segments.len() > 1 {
            let (&base, seg) = segments.iter().next().expect("len > 1");
            if seg.next_offset > log_start {
                break;
            }
            segments.remove(&base);
            delete_segment_files(dir, base);
            report.deleted_segments.push(base);
        }
        let created = segments.is_empty();
        if created {
            let seg = Segment::create(dir, log_start, interval)?;
            segments.insert(log_start, seg);
        }
        // Every byte below the recovery checkpoint was fsynced before it was written, and
        // a roll fsyncs the directory: if the checkpoint is the log end this open found
        // (as after a clean close), and the open changed nothing, everything is durable
        // already, and the open writes nothing (with 10,000 partitions, the fsyncs below
        // were most of a restart).
        let durable = recovery_checkpoint == segments.values().next_back().map(|s| s.next_offset)
            && !created
            && !removed_files
            && report.truncations.is_empty()
            && report.deleted_segments.is_empty()
            && report.completed_swaps.is_empty();
        if !durable {
            checkpoint::sync_directory(dir)?;
        }

        let tail_cache_bytes = config.tail_cache_bytes;
        let mut inner = Inner {
            config,
            segments,
            log_start_offset: log_start,
            recovery_point: 0,
            unflushed_records: 0,
            first_unflushed_ms: None,
            producers: ProducerState::new(),
            epochs: LeaderEpochCache::new(),
            epochs_unsynced: false,
            tail: TailCache::new(tail_cache_bytes),
            last_append_ms: clock.now_ms(),
            direct_refused: false,
            direct_written: false,
            direct_reads_refused: AtomicBool::new(false),
            read_generation: 0,
            cleaner: super::cleaner::CleanerState::default(),
            gaps_allowed,
            own_recovery: OwnRecoveryFile::default(),
        };
        inner.open_direct(dir)?;
        inner.recovery_point = inner.log_end_offset();
        if durable {
            inner.active_mut().dirty = false;
        } else {
            // What we scanned may sit only in the page cache (the process died, the
            // machine did not): make it durable before the recovery point says so, and
            // the epoch checkpoint with it (an assignment may have written it unsynced).
            inner.active_mut().sync()?;
            checkpoint::sync_file(&dir.join(LEADER_EPOCH_FILE))?;
            checkpoint::write(&dir.join(RECOVERY_POINT_FILE), inner.recovery_point, false)?;
        }
        inner.own_recovery = own_recovery;
        if start_checkpoint != Some(inner.log_start_offset) {
            checkpoint::write(&dir.join(LOG_START_FILE), inner.log_start_offset, true)?;
        }
        let recovery_point_written = inner.recovery_point;
        report.clean = durable;
        report.log_start_offset = inner.log_start_offset;
        report.log_end_offset = inner.log_end_offset();

        // Producer state: the newest usable snapshot, then the batches after it.
        let loaded = snapshot::load_latest(dir, inner.log_end_offset())?;
        if !loaded.rejected.is_empty() {
            // A stale snapshot that came back after a power loss would be trusted once
            // the log grows past it again.
            checkpoint::sync_directory(dir)?;
        }
        report.deleted_producer_snapshots = loaded.rejected;
        let (from, mut producers) = match loaded.snapshot {
            Some((offset, state)) => {
                report.producer_snapshot = Some(offset);
                (offset, state)
            }
            None => (inner.log_start_offset, ProducerState::new()),
        };
        let direct = inner.config.io_mode == IoMode::Direct;
        replay_producers(
            &mut inner.segments,
            from.max(inner.log_start_offset),
            &mut producers,
            direct,
        )?;
        // Kafka drops expired producers when it loads a snapshot; do the same for the
        // rebuilt state as a whole.
        producers.expire(clock.now_ms(), inner.config.producer_expiration_ms);
        inner.producers = producers;
        // Finish a retention pass cut short between deleting segments and snapshots.
        snapshot::retain_from(dir, inner.log_start_offset);

        // The cleaner checkpoint. A log cleaned before may hold tombstones whose delete
        // horizon has passed: one pass finds out.
        let cleaned_to = checkpoint::read(&dir.join(super::cleaner::CLEANER_CHECKPOINT))
            .unwrap_or(0)
            .min(inner.log_end_offset());
        inner.cleaner = super::cleaner::CleanerState {
            cleaned_to,
            next_horizon: (cleaned_to > inner.log_start_offset).then_some(i64::MIN),
        };

        let (epochs, rebuilt) = recover_epochs(dir, &inner, &scanned_epochs)?;
        report.rebuilt_leader_epochs = rebuilt;
        inner.epochs = epochs;

        if !report.truncations.is_empty() || !report.deleted_segments.is_empty() {
            tracing::warn!(dir = %dir.display(), ?report, "log recovered with repairs");
        }
        Ok((
            Log {
                dir: dir.to_path_buf(),
                clock,
                inner: RwLock::new(inner),
                clean_lock: Default::default(),
                checkpointed: std::sync::atomic::AtomicI64::new(recovery_point_written),
                read_cache_id: crate::read_cache::new_log_id(),
            },
            report,
        ))
    }
}

/// Rebuilds producer state from the headers of the batches that end after `from`, as
/// Kafka's `rebuildProducerState` does from its last snapshot. Headers only: no record
/// is read or decompressed.
pub(super) fn replay_producers(
    segments: &mut BTreeMap<Offset, Segment>,
    from: Offset,
    state: &mut ProducerState,
    direct: bool,
) -> Result<(), LogError> {
    // Aborted transactions the replay ended, for the segments that hold their markers
    // (entries the `.txnindex` files already have are not added twice).
    let mut aborted = Vec::new();
    for seg in segments.values() {
        if seg.next_offset <= from || seg.size == 0 {
            continue;
        }
        let pos = if from <= seg.base {
            0
        } else {
            seg.index()?.position_for(rel(seg.base, from)) as u64
        };
        let (file, direct) = seg_files(seg, direct)?;
        segment::walk_headers_and_markers(
            &file,
            direct.as_deref(),
            &seg.path,
            pos,
            seg.size,
            &mut |h, marker| {
                if h.next_offset() > from
                    && let Some(done) = state.update(h, marker)
                    && done.aborted
                {
                    aborted.push(super::append::aborted_entry(state, &done));
                }
            },
        )?;
    }
    for entry in aborted {
        if let Some((_, seg)) = segments.range_mut(..=entry.last_offset).next_back() {
            seg.add_aborted(entry)?;
        }
    }
    Ok(())
}

/// Loads the leader-epoch checkpoint and makes it agree with the log: entries past the
/// log end go (a crash between the checkpoint and the batches; one at the log end is an
/// epoch assigned before its first append, and stays), the first entry moves to the
/// log start, and the batches scanned by recovery (`scanned`: their epoch runs) are
/// checked against it. A run of a newer epoch after the last entry is added (Kafka's
/// recovery does the same); any other disagreement, or a checkpoint that is missing,
/// torn, or does not cover the log start while the log holds batches, makes the cache
/// be rebuilt from the headers of every batch. Segments below the recovery point are
/// trusted, as Kafka trusts them. Returns the cache and whether it was rebuilt.
fn recover_epochs(
    dir: &Path,
    g: &Inner,
    scanned: &[(LeaderEpoch, Offset, Offset)],
) -> Result<(LeaderEpochCache, bool), LogError> {
    let path = dir.join(LEADER_EPOCH_FILE);
    let on_disk = checkpoint::read_epochs(&path);
    let (start, leo) = (g.log_start_offset, g.log_end_offset());
    let checked = on_disk.clone().and_then(|mut c| {
        c.truncate_from_end(leo + 1);
        c.truncate_from_start(start);
        for &(epoch, base, end) in scanned {
            if epoch < 0 || end <= start || base >= leo {
                continue;
            }
            let (base, end) = (base.max(start), end.min(leo));
            let floor = c.entry_at(base);
            if floor.is_some_and(|f| f.epoch == epoch) {
                let split = c
                    .entries()
                    .iter()
                    .any(|e| e.start_offset > base && e.start_offset < end);
                if split {
                    return None;
                }
            } else if floor == c.latest() && c.latest_epoch().is_none_or(|l| l < epoch) {
                c.assign(epoch, base);
            } else {
                return None;
            }
        }
        (leo == start || c.entry_at(start).is_some()).then_some(c)
    });
    let rebuilt = checked.is_none() && leo > start;
    let cache = match checked {
        Some(c) => c,
        None => rebuild_epochs(&g.segments, start, g.config.io_mode == IoMode::Direct)?,
    };
    if rebuilt {
        tracing::info!(dir = %dir.display(), found = on_disk.is_some(), entries = cache.entries().len(), "rebuilt the leader-epoch cache from the batches");
    }
    if on_disk.as_ref() != Some(&cache) {
        checkpoint::write_epochs(&path, &cache)?;
    }
    Ok((cache, rebuilt))
}

/// The leader-epoch cache of the batches from `from` on, from their headers: a batch
/// starts an entry when its epoch is newer than the latest (Kafka's recovery rule).
fn rebuild_epochs(
    segments: &BTreeMap<Offset, Segment>,
    from: Offset,
    direct: bool,
) -> Result<LeaderEpochCache, LogError> {
    let mut cache = LeaderEpochCache::new();
    for seg in segments.values() {
        if seg.next_offset <= from || seg.size == 0 {
            continue;
        }
        let pos = if from <= seg.base {
            0
        } else {
            seg.index()?.position_for(rel(seg.base, from)) as u64
        };
        let (file, direct) = seg_files(seg, direct)?;
        segment::walk_headers(
            &file,
            direct.as_deref(),
            &seg.path,
            pos,
            seg.size,
            &mut |h| {
                let epoch = h.partition_leader_epoch;
                if h.next_offset() > from && cache.latest_epoch().is_none_or(|l| epoch > l) {
                    cache.assign(epoch, h.base_offset);
                }
            },
        )?;
    }
    cache.truncate_from_start(from);
    Ok(cache)
}

/// The descriptors a recovery walk reads `seg` through: the ordinary one, and in
/// direct mode (`direct`) the `O_DIRECT` one of a sealed segment or of an active one
/// written with `O_DIRECT` (`None` if the filesystem refuses it).
fn seg_files(
    seg: &Segment,
    direct: bool,
) -> Result<(Arc<std::fs::File>, Option<Arc<std::fs::File>>), LogError> {
    let direct = if direct && (seg.direct_writes || seg.sealed) {
        seg.file.direct(false).ok().flatten()
    } else {
        None
    };
    Ok((seg.plain()?, direct))
}

/// A resumed scan, the byte position it started at, and the index files' bytes (offset
/// index, time index) it trusted.
type ResumedScan = (segment::ScanResult, u64, (Vec<u8>, Vec<u8>));

/// The scan of a cleanly stopped active segment from its last offset-index entry below
/// `recovery_point` (with the index before it), if its index files hold whole, ordered
/// entries inside the file, the batch at that entry starts at the entry's offset, and the
/// batches from there end exactly at `recovery_point`. Returns the scan, the position it
/// started at and the index files' bytes. `None`: the segment is to be scanned whole (no
/// such entry, so it is at most an index interval and a batch long; damaged files; or
/// batches that do not match them).
fn resumed_scan(
    dir: &Path,
    base: Offset,
    file: &std::fs::File,
    direct: Option<&std::fs::File>,
    recovery_point: Offset,
    interval: u64,
    gaps_allowed: bool,
) -> Result<Option<ResumedScan>, LogError> {
    let Some(next_rel) = recovery_point
        .checked_sub(base)
        .filter(|&r| r > 0)
        .and_then(|r| u32::try_from(r).ok())
    else {
        return Ok(None);
    };
    let path = segment::log_path(dir, base);
    let len = file.metadata().map_err(LogError::io("stat", &path))?.len();
    let (Ok(offsets), Ok(times)) = (
        fs::read(segment::index_path(dir, base)),
        fs::read(segment::time_index_path(dir, base)),
    ) else {
        return Ok(None);
    };
    let idx = match crate::index::Indexes::decode_checked(&offsets, &times, len, next_rel as u64) {
        Ok(idx) => idx,
        Err(reason) => {
            tracing::info!(dir = %dir.display(), base, %reason, "active segment index damaged after a clean stop: scanning it whole");
            return Ok(None);
        }
    };
    let Some(last) = idx.offsets.last().copied() else {
        return Ok(None);
    };
    let (builder, pos) = crate::index::IndexBuilder::rewind(&idx, interval, next_rel);
    debug_assert_eq!(pos, last.pos);
    let offset = base + last.rel as i64;
    let from = segment::ScanFrom {
        pos: pos as u64,
        offset,
        builder,
    };
    let scan = Segment::scan_from(file, direct, &path, base, gaps_allowed, from)?;
    let whole = scan.stop_reason.is_none()
        && scan.next_offset == recovery_point
        && scan.epochs.first().is_some_and(|run| run.1 == offset);
    if !whole {
        tracing::info!(segment = %path.display(), position = pos, "the index of a cleanly stopped segment does not match its batches: scanning it whole");
        return Ok(None);
    }
    Ok(Some((scan, pos as u64, (offsets, times))))
}

/// Opens a sealed segment below the recovery point without scanning it. Returns `None`
/// if its time index cannot give the max timestamp (the caller then scans and rebuilds).
fn open_trusted(
    dir: &Path,
    base: Offset,
    path: PathBuf,
    next_offset: Offset,
    interval: u64,
) -> Result<Option<Segment>, LogError> {
    // A stat, not an open: the descriptor is opened on first use (see `files`).
    let meta = fs::metadata(&path).map_err(LogError::io("stat", &path))?;
    if !meta.is_file() {
        return Err(LogError::io("open", &path)(std::io::Error::other(
            "not a regular file",
        )));
    }
    let size = meta.len();
    let tpath = segment::time_index_path(dir, base);
    let tail = fs::read(&tpath).ok().and_then(|t| {
        if t.is_empty() || t.len() % TIME_ENTRY != 0 {
            return None;
        }
        let last = TimeEntry::decode(t.as_chunks::<TIME_ENTRY>().0.last()?);
        (last.rel as i64 == next_offset - base).then_some(last.ts)
    });
    let Some(max_timestamp) = tail else {
        return Ok(None);
    };
    if size == 0 || next_offset <= base {
        return Ok(None);
    }
    Ok(Some(Segment {
        base,
        next_offset,
        size,
        max_timestamp,
        file: Arc::new(SegmentFile::new(path.clone())),
        direct_writes: false,
        path,
        sealed: true,
        builder: crate::index::IndexBuilder::new(interval),
        persisted: (0, 0),
        sealed_index: Default::default(),
        first_append_ms: None,
        dirty: false,
        aborted: crate::txn_index::load(dir, base, next_offset)?,
        aborted_dirty: false,
    }))
}
