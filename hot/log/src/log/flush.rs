//! When appended bytes become durable: segment rolls, the flush policy, producer
//! snapshots, the tail buffer's release, and the clean stop.

use std::path::Path;

use strata_proto::Offset;

use super::epochs::sync_epochs;
use super::recovery_point::write_own_recovery_point;
use super::{Inner, Log};
use crate::checkpoint;
use crate::error::LogError;
use crate::segment::{self, Segment};
use crate::snapshot;

impl Log {
    /// Seals the active segment and starts a new one, if the active one holds data.
    pub(super) fn roll(&self, g: &mut Inner) -> Result<(), LogError> {
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
    /// told the stop was clean, may trust them:
    /// [`RecoveryCheckpoint::Shared`](super::RecoveryCheckpoint::Shared)) and
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
}

pub(super) fn flush_locked(dir: &Path, g: &mut Inner) -> Result<(), LogError> {
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
