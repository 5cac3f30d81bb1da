//! Log compaction (Kafka's `LogCleaner`, `Cleaner` and `LogCleanerManager`): a
//! compacted log keeps, below its *uncleanable* offset, at least the latest record of
//! every key. The mechanism lives here; when and on which log it runs is the broker's
//! (a bounded pool of cleaner threads, `hot/broker/src/cleaner.rs`).
//!
//! A pass ([`Log::clean`]):
//!
//! 1. The *dirty* part is the sealed segments from the cleaner checkpoint
//!    (`cleaner-offset-checkpoint`, the offset cleaned up to) to the uncleanable
//!    offset: the active segment's base, the caller's bound (the high-water mark), and
//!    the first segment holding a record younger than `min.compaction.lag.ms`. The
//!    active segment is never cleaned.
//! 2. The offset map ([`OffsetMap`], the dedupe buffer) takes every key of the dirty
//!    part and the offset of its latest record, whole batches at a time, until it is
//!    full: then this pass cleans only up to where the map got, and the next pass goes
//!    on from there (a partition with more keys than fit is cleaned in several passes).
//! 3. The segments from the log start to there are rewritten, in groups whose sizes add
//!    up to at most `segment.bytes`, each group into one segment: a record stays if no
//!    later record has its key, and a tombstone (a null value) also only until its
//!    delete horizon has passed. A batch keeps its base offset and last offset delta, and
//!    its records their offsets (`strata_proto::rewrite`): offsets stay increasing, with
//!    gaps. A batch whose records all go is dropped, except that its header stays (as
//!    an empty batch) when it is the last batch of an idempotent producer (the producer
//!    state remembers its sequence) or the last batch of the group (so the segment
//!    still ends where it did, and segment ranges stay contiguous for the offloader and
//!    recovery). A tombstone that stays gets the delete horizon `now +
//!    delete.retention.ms` stamped into its batch the first time a pass keeps it
//!    (KIP-534); a later pass removes it once the horizon has passed.
//! 4. Each group's new segment is swapped in crash-safely (`swap`): written beside the
//!    old ones as `{base}.log.cleaned`, renamed to `{base}.log.swap` (the commit point),
//!    the old segments deleted, then renamed to `{base}.log`. Recovery deletes
//!    `.cleaned` files and completes a `.swap`: a crash leaves either the old segments
//!    or the new one, never both and never neither.
//! 5. The checkpoint moves to where the map got.

pub mod filter;
mod offset_map;
mod swap;

use std::path::PathBuf;
use std::sync::Arc;

use strata_proto::batch;
use strata_proto::{Offset, ProducerId};

use self::filter::{Filter, FilterStats, SegmentBuilder, TxnCleaner, group_segments, map_keys};
pub use self::offset_map::{OffsetMap, SLOT_BYTES};
pub(crate) use self::swap::{CLEANER_CHECKPOINT, recover_swaps};
use crate::config::CompactionConfig;
use crate::error::LogError;
use crate::files::SegmentFile;
use crate::index::{Indexes, rel};
use crate::log::Log;
use crate::segment::read_at;
use crate::txn_index::AbortedTxn;

/// How much one read of a pass asks for: a pass reads at a capped rate, and a read of
/// several MiB would hold the disk in front of producers' appends for tens of
/// milliseconds (their p99 rose with the size of the cleaner's reads).
const READ_CHUNK: usize = 1 << 20;

/// Where a compacted log stands for the cleaner ([`Log::cleanable`]).
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct Cleanable {
    /// The log is cleaned up to here (the cleaner checkpoint, at least the log start).
    pub first_dirty: Offset,
    /// Nothing at or above this may be cleaned yet.
    pub uncleanable: Offset,
    /// Bytes of the segments below `first_dirty`.
    pub clean_bytes: u64,
    /// Bytes of the sealed segments from `first_dirty` to `uncleanable`.
    pub dirty_bytes: u64,
    /// `dirty_bytes / (clean_bytes + dirty_bytes)`, 0 for an empty log.
    pub dirty_ratio: f64,
    /// The timestamp of the first dirty batch, if any.
    pub first_dirty_timestamp: Option<i64>,
    /// The dirty ratio reached min.cleanable.dirty.ratio.
    pub ratio_due: bool,
    /// The first dirty record is older than max.compaction.lag.ms (KIP-354).
    pub lag_due: bool,
    /// A tombstone's delete horizon has passed (or, after a restart, may have).
    pub horizon_due: bool,
}

impl Cleanable {
    /// Whether a pass would do work worth doing now.
    pub fn due(&self) -> bool {
        (self.dirty_bytes > 0 && (self.ratio_due || self.lag_due)) || self.horizon_due
    }
}

/// What a pass did ([`Log::clean`]).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CleanOutcome {
    /// The cleaner checkpoint before and after the pass.
    pub first_dirty: Offset,
    pub cleaned_to: Offset,
    /// Keys the offset map took.
    pub keys: usize,
    /// Bytes read (building the map and rewriting) and written.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Bytes of the rewritten segments before and after.
    pub size_before: u64,
    pub size_after: u64,
    /// Segments replaced and the segments that replaced them.
    pub segments_before: usize,
    pub segments_after: usize,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Groups whose swap was abandoned because the log changed meanwhile (a retention
    /// pass or a truncation took some of their segments).
    pub groups_abandoned: usize,
    /// The first dirty batch's timestamp when the pass started (for the cleaner's lag).
    pub first_dirty_timestamp: Option<i64>,
}

impl CleanOutcome {
    pub fn bytes_reclaimed(&self) -> u64 {
        self.size_before.saturating_sub(self.size_after)
    }
}

/// The cleaner's state of one log, kept with it (under its write lock).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CleanerState {
    /// The cleaner checkpoint: offsets below it have been cleaned.
    pub cleaned_to: Offset,
    /// The earliest delete horizon a kept tombstone carries, if a pass kept one;
    /// `Some(i64::MIN)` after an open of a log cleaned before (unknown until a pass).
    pub next_horizon: Option<i64>,
}

/// A sealed segment as the plan of a pass sees it.
#[derive(Clone, Debug)]
struct Planned {
    base: Offset,
    next: Offset,
    size: u64,
    /// Opened when read: if retention deleted the segment since, the read fails and
    /// the pass with it (the next pass plans afresh).
    file: Arc<SegmentFile>,
    path: PathBuf,
}

fn plain(s: &Planned) -> Result<Arc<std::fs::File>, LogError> {
    s.file.plain().map_err(LogError::io("open", &s.path))
}

/// What a pass decided to do, taken under the read lock.
struct Plan {
    config: CompactionConfig,
    segment_bytes: u64,
    index_interval: u64,
    log_start: Offset,
    first_dirty: Offset,
    uncleanable: Offset,
    /// Every sealed segment ending above the log start and at or below `uncleanable`.
    sealed: Vec<Planned>,
    /// producer id -> the offset of its last record, for the empty batches kept.
    producer_last: std::collections::HashMap<ProducerId, Offset>,
    next_horizon: Option<i64>,
    /// Every aborted transaction of the log (its segments' `.txnindex` entries).
    aborted: Vec<AbortedTxn>,
}

impl Log {
    /// Where this log stands for the cleaner at time `now`, cleaning below `upper` at
    /// most (the high-water mark); `None` when the topic is not compacted.
    pub fn cleanable(&self, now: i64, upper: Offset) -> Result<Option<Cleanable>, LogError> {
        let Some(plan) = self.plan(now, upper) else {
            return Ok(None);
        };
        let mut c = Cleanable {
            first_dirty: plan.first_dirty,
            uncleanable: plan.uncleanable,
            ..Cleanable::default()
        };
        let mut first_dirty_seg = None;
        for s in &plan.sealed {
            if s.next <= plan.first_dirty {
                c.clean_bytes += s.size;
            } else if s.base >= plan.first_dirty {
                c.dirty_bytes += s.size;
                first_dirty_seg.get_or_insert(s);
            }
        }
        let total = c.clean_bytes + c.dirty_bytes;
        c.dirty_ratio = if total == 0 {
            0.0
        } else {
            c.dirty_bytes as f64 / total as f64
        };
        c.ratio_due = c.dirty_ratio >= plan.config.min_cleanable_dirty_ratio();
        if let Some(s) = first_dirty_seg {
            let head = read_at(&*plain(s)?, &s.path, 0, batch::HEADER_LEN)?;
            if let Ok(h) = batch::parse_header(&head) {
                c.first_dirty_timestamp = Some(h.max_timestamp);
                c.lag_due = now.saturating_sub(h.max_timestamp) > plan.config.max_compaction_lag_ms;
            }
        }
        c.horizon_due = plan.next_horizon.is_some_and(|h| now >= h);
        Ok(Some(c))
    }

    /// One cleaner pass (see the module docs) at time `now`, below `upper` (the
    /// high-water mark), with `map` as the dedupe buffer; `throttle` is told every byte
    /// read and written, and may sleep to cap the IO rate. Does nothing on a log that is
    /// not compacted. Appends, reads and retention go on meanwhile: the write lock is
    /// taken only to swap each group in.
    pub fn clean(
        &self,
        map: &mut OffsetMap,
        now: i64,
        upper: Offset,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<CleanOutcome, LogError> {
        // One pass at a time per log.
        let _pass = self.clean_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(plan) = self.plan(now, upper) else {
            return Ok(CleanOutcome::default());
        };
        let mut out = CleanOutcome {
            first_dirty: plan.first_dirty,
            cleaned_to: plan.first_dirty,
            ..CleanOutcome::default()
        };
        // Cleaned segments have gaps: recovery must know before the first is swapped in.
        self.allow_gaps(&mut self.write_lock())?;

        // The offset map over the dirty segments, whole batches at a time.
        map.clear();
        let mut end = plan.first_dirty;
        // Aborted transactions' records are not mapped (they never were values).
        let mut map_txns = TxnCleaner::new(plan.aborted.clone());
        for s in plan.sealed.iter().filter(|s| s.base >= plan.first_dirty) {
            let mut stopped = None;
            self.read_range_in(
                s.base.max(plan.log_start),
                s.next,
                READ_CHUNK,
                &mut |chunk| {
                    throttle(chunk.len() as u64);
                    out.bytes_read += chunk.len() as u64;
                    if stopped.is_none() {
                        stopped = map_keys(&chunk, map, &mut map_txns)?;
                    }
                    Ok(())
                },
            )?;
            if let Some(at) = stopped {
                end = at;
                break;
            }
            end = s.next;
        }
        out.keys = map.len();
        out.first_dirty_timestamp = self
            .cleanable(now, upper)?
            .and_then(|c| c.first_dirty_timestamp);

        // Rewrite the segments below `end`, group by group.
        let mut next_horizon: Option<i64> = None;
        // One walk over the transactions of the whole range, group after group.
        let mut txns = TxnCleaner::new(plan.aborted.clone());
        let doomed: Vec<&Planned> = plan
            .sealed
            .iter()
            .filter(|s| s.base < end.max(plan.first_dirty))
            .collect();
        for group in group_segments(&doomed, plan.segment_bytes, |s| (s.base, s.next, s.size)) {
            let written =
                self.rewrite_group(&plan, group, map, end, now, &mut txns, throttle, &mut out)?;
            out.bytes_written += written.files.size;
            if let Some(h) = written.stats.min_horizon {
                next_horizon = Some(next_horizon.map_or(h, |n: i64| n.min(h)));
            }
            if !written.stats.changed {
                swap::discard(&written.files);
                continue;
            }
            let bases: Vec<Offset> = group.iter().map(|s| s.base).collect();
            let sizes: Vec<u64> = group.iter().map(|s| s.size).collect();
            let size_after = written.files.size;
            if self.swap_in(
                &bases,
                &sizes,
                written.files,
                written.index,
                plan.index_interval,
            )? {
                out.segments_before += group.len();
                out.segments_after += 1;
                out.size_before += sizes.iter().sum::<u64>();
                out.size_after += size_after;
                out.records_removed += written.stats.records_removed;
                out.tombstones_removed += written.stats.tombstones_removed;
            } else {
                out.groups_abandoned += 1;
            }
        }
        out.cleaned_to = end.max(plan.first_dirty);
        self.finish_pass(out.cleaned_to, next_horizon)?;
        Ok(out)
    }

    /// The cleaner checkpoint (everything below it has been through a pass) of a
    /// compacted log; `None` for one that is not compacted.
    pub fn cleaned_to(&self) -> Option<Offset> {
        let g = self.read_lock();
        g.config.compaction.map(|_| g.cleaner.cleaned_to)
    }

    /// Up to where the offloader may upload with the high-water mark at `hwm`: below
    /// the last stable offset (a segment goes up with its aborted-transaction index,
    /// which must be final: no transaction open in it), and a compacted log's only once
    /// cleaned (the bucket should not keep what a pass would remove).
    pub fn offload_bound(&self, hwm: Offset) -> Offset {
        let lso = self.last_stable_offset(hwm);
        self.cleaned_to().map_or(lso, |c| lso.min(c))
    }

    /// What a pass would work on, under the read lock; `None` if not compacted.
    fn plan(&self, now: i64, upper: Offset) -> Option<Plan> {
        let g = self.read_lock();
        let config = g.config.compaction?;
        let log_start = g.log_start_offset;
        let active_base = g.active().base;
        let mut uncleanable = active_base.min(upper.max(log_start));
        // Never past the last stable offset (Kafka's `firstUncleanableOffset`): an open
        // transaction's records are not yet committed or aborted.
        if let Some(first) = g.producers.first_unstable_offset(upper) {
            uncleanable = uncleanable.min(first.max(log_start));
        }
        // min.compaction.lag.ms: the first segment holding a record that young.
        if config.min_compaction_lag_ms > 0 {
            let young = now.saturating_sub(config.min_compaction_lag_ms);
            if let Some(s) = g
                .segments
                .values()
                .find(|s| s.sealed && s.next_offset > log_start && s.max_timestamp > young)
            {
                uncleanable = uncleanable.min(s.base);
            }
        }
        let sealed: Vec<Planned> = g
            .segments
            .values()
            .filter(|s| s.sealed && s.next_offset > log_start && s.next_offset <= uncleanable)
            .map(|s| Planned {
                base: s.base,
                next: s.next_offset,
                size: s.size,
                file: s.file.clone(),
                path: s.path.clone(),
            })
            .collect();
        // The checkpoint, within the log; and at a segment boundary, so that the dirty
        // part is whole segments.
        let mut first_dirty = g
            .cleaner
            .cleaned_to
            .clamp(log_start, uncleanable.max(log_start));
        if let Some(s) = sealed
            .iter()
            .find(|s| s.base < first_dirty && first_dirty < s.next)
        {
            first_dirty = s.base.max(log_start);
        }
        let producer_last = g
            .producers
            .entries()
            .map(|(pid, e)| (pid, e.last_offset()))
            .collect();
        Some(Plan {
            config,
            segment_bytes: g.config.segment_bytes,
            index_interval: g.config.index_interval_bytes,
            log_start,
            first_dirty,
            uncleanable,
            sealed,
            producer_last,
            next_horizon: g.cleaner.next_horizon,
            aborted: g
                .segments
                .values()
                .flat_map(|s| s.aborted.iter().copied())
                .collect(),
        })
    }

    /// Filters one group's batches into a new segment's files (not yet swapped in).
    #[allow(clippy::too_many_arguments)]
    fn rewrite_group(
        &self,
        plan: &Plan,
        group: &[&Planned],
        map: &OffsetMap,
        end: Offset,
        now: i64,
        txns: &mut TxnCleaner,
        throttle: &mut dyn FnMut(u64),
        out: &mut CleanOutcome,
    ) -> Result<Written, LogError> {
        let base = group[0].base;
        let last_seg = group[group.len() - 1];
        let filter = Filter {
            map,
            end,
            now,
            delete_retention_ms: plan.config.delete_retention_ms,
            producer_last: &plan.producer_last,
        };
        let mut stats = FilterStats::default();
        let mut builder = SegmentBuilder::new(
            base,
            plan.index_interval,
            swap::CleanedWriter::create(self.dir(), base)?,
        );
        let mut result = Ok(());
        for s in group {
            result = self.read_range_in(
                s.base.max(plan.log_start),
                s.next,
                READ_CHUNK,
                &mut |chunk| {
                    throttle(chunk.len() as u64);
                    out.bytes_read += chunk.len() as u64;
                    for b in batch::batches(&chunk) {
                        if let Some(kept) = filter.batch(&b?, txns, &mut stats)? {
                            throttle(builder.push(kept)?);
                        }
                    }
                    Ok(())
                },
            );
            if result.is_err() {
                break;
            }
        }
        // The group's last batch stays, at least as its header, so the new segment ends
        // where the group did.
        let built =
            result.and_then(|()| builder.finish(last_seg.next, || self.last_header(last_seg)));
        let built = match built {
            Ok(b) => b,
            Err(e) => {
                swap::CleanedWriter::remove_all(self.dir(), base);
                return Err(e);
            }
        };
        stats.changed |= built.emptied_last;
        // The ABORT markers this group keeps, with their index entries.
        let aborted = txns.take_kept();
        let files = built.out.finish(
            &built.index,
            built.size,
            built.next_offset,
            built.max_timestamp,
            aborted,
        )?;
        Ok(Written {
            files,
            index: built.index,
            stats,
        })
    }

    /// The header of the last batch of a sealed segment (read through its index).
    fn last_header(&self, s: &Planned) -> Result<batch::BatchHeader, LogError> {
        let (mut pos, file) = {
            let g = self.read_lock();
            let seg = g.segments.get(&s.base).ok_or(LogError::NoBatch {
                offset: s.base,
                end: s.next,
            })?;
            (
                seg.index()?.position_for(rel(s.base, s.next - 1)) as u64,
                seg.plain()?,
            )
        };
        let mut last = None;
        while pos < s.size {
            let head = read_at(&file, &s.path, pos, batch::HEADER_LEN)?;
            let h = batch::parse_header(&head)?;
            pos += h.total_size() as u64;
            last = Some(h);
        }
        last.ok_or(LogError::NoBatch {
            offset: s.base,
            end: s.next,
        })
    }

    /// Swaps a cleaned group in, under the write lock, if its segments are still the
    /// ones it was cleaned from; otherwise discards it. Returns whether it swapped.
    fn swap_in(
        &self,
        bases: &[Offset],
        sizes: &[u64],
        files: swap::CleanedFiles,
        index: Indexes,
        interval: u64,
    ) -> Result<bool, LogError> {
        let mut g = self.write_lock();
        let unchanged = bases.iter().zip(sizes).all(|(b, size)| {
            g.segments
                .get(b)
                .is_some_and(|s| s.sealed && s.size == *size)
        });
        if !unchanged {
            swap::discard(&files);
            return Ok(false);
        }
        g.read_generation += 1;
        let seg = swap::commit(self.dir(), bases, files, index, interval)?;
        for b in bases {
            g.segments.remove(b);
            g.tail.forget_segment(*b);
        }
        g.segments.insert(seg.base, seg);
        Ok(true)
    }

    /// Records the pass in the cleaner checkpoint.
    fn finish_pass(&self, cleaned_to: Offset, next_horizon: Option<i64>) -> Result<(), LogError> {
        let mut g = self.write_lock();
        g.cleaner.next_horizon = next_horizon;
        if g.cleaner.cleaned_to != cleaned_to {
            g.cleaner.cleaned_to = cleaned_to;
            crate::checkpoint::write(&self.dir().join(CLEANER_CHECKPOINT), cleaned_to, false)?;
        }
        Ok(())
    }
}

/// What rewriting one group produced.
#[derive(Debug)]
struct Written {
    files: swap::CleanedFiles,
    index: Indexes,
    stats: FilterStats,
}
