//! What removes data from an open [`Log`]: truncation (a follower cutting where its
//! log parts from the leader's, or restarting at the leader's start), local retention,
//! and moves of the log start.

use strata_proto::Offset;

use super::loader::replay_producers;
use super::{
    Inner, LOG_START_FILE, Log, RetentionOutcome, SegmentInfo, delete_segment_files, info,
};
use crate::checkpoint;
use crate::config::IoMode;
use crate::error::LogError;
use crate::producer::ProducerState;
use crate::sealed::RemoteEndState;
use crate::segment::Segment;
use crate::snapshot;

impl Log {
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
        // What reads cached before this is not what the log holds after it.
        g.read_generation += 1;
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
        super::recovery_point::write_own_recovery_point(&self.dir, g, rp, true)?;
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
            Some(cut) => {
                let seg = g
                    .segments
                    .get_mut(&seg_base)
                    .expect("the segment being cut is still there");
                seg.apply_cut(cut)?;
                seg.truncate_aborted(offset)?;
            }
        }
        if g.segments.is_empty() || g.active().sealed {
            let seg = Segment::create(&self.dir, offset, g.config.index_interval_bytes)?;
            g.segments.insert(offset, seg);
            g.open_direct(&self.dir)?;
        }
        checkpoint::sync_directory(&self.dir)?;
        self.reload_producers(g)?;
        // What is appended from here on has not been cleaned.
        if g.cleaner.cleaned_to > offset {
            g.cleaner.cleaned_to = offset;
            checkpoint::write(
                &self.dir.join(super::cleaner::CLEANER_CHECKPOINT),
                offset,
                false,
            )?;
        }
        // The cut segment was fsynced, and every earlier one was when it was sealed.
        super::epochs::sync_epochs(&self.dir, g)?;
        g.recovery_point = offset;
        g.unflushed_records = 0;
        g.first_unflushed_ms = None;
        super::recovery_point::write_own_recovery_point(&self.dir, g, offset, false)?;
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
        // What reads cached before this is not what the log holds after it.
        g.read_generation += 1;
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
        super::epochs::sync_epochs(&self.dir, g)?;
        g.recovery_point = offset;
        g.unflushed_records = 0;
        g.first_unflushed_ms = None;
        super::recovery_point::write_own_recovery_point(&self.dir, g, offset, false)
    }

    /// Rebuilds the producer state from the newest snapshot at or below the log end
    /// and the batches after it (Kafka's `truncateAndReload`).
    fn reload_producers(&self, g: &mut Inner) -> Result<(), LogError> {
        let loaded = snapshot::load_latest(&self.dir, g.log_end_offset())?;
        let (from, mut producers) = loaded
            .snapshot
            .unwrap_or((g.log_start_offset, ProducerState::new()));
        let direct = g.config.io_mode == IoMode::Direct && !g.direct_refused;
        replay_producers(
            &mut g.segments,
            from.max(g.log_start_offset),
            &mut producers,
            direct,
        )?;
        producers.expire(self.clock.now_ms(), g.config.producer_expiration_ms);
        g.producers = producers;
        Ok(())
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
        g.read_generation += 1;
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
        super::recovery_point::write_own_recovery_point(&self.dir, &mut g, offset, false)?;
        // What the remote part's epochs were is not known here.
        self.update_epochs(&mut g, |c| c.clear())
    }

    /// [`Self::reset_empty`] at `offset`, the end of the remote tier, continuing the log
    /// that offloaded the last remote segment: its producer snapshot (the state of
    /// every batch below `offset`) becomes this log's, and the epoch of its last batches
    /// is in force from `offset` on. A snapshot that does not decode or describes
    /// another offset is left out with a warning (the producers it held start afresh,
    /// as after producer expiry).
    pub fn restore_at(&self, offset: Offset, state: &RemoteEndState) -> Result<(), LogError> {
        self.reset_empty(offset)?;
        let mut g = self.write_lock();
        let g = &mut *g;
        if let Some(bytes) = &state.producer_snapshot {
            match ProducerState::decode_snapshot(bytes) {
                Ok((at, mut producers)) if at == offset => {
                    producers.expire(self.clock.now_ms(), g.config.producer_expiration_ms);
                    snapshot::write(&self.dir, offset, &producers, true)?;
                    g.producers = producers;
                }
                Ok((at, _)) => {
                    tracing::warn!(dir = %self.dir.display(), offset, snapshot = at, "the remote producer snapshot describes another offset: left out");
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), offset, error = %e, "the remote producer snapshot does not decode: left out");
                }
            }
        }
        if let Some(latest) = state.leader_epochs.as_ref().and_then(|c| c.latest()) {
            self.assign_epochs(g, [(latest.epoch, offset)])?;
        }
        Ok(())
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
