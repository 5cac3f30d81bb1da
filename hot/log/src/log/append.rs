//! Appends: a leader's (producers, coordinators, transaction markers), with the
//! idempotent-producer checks, and a follower's of the leader's batches; the rolls
//! they trigger and the bookkeeping after the bytes are written.

use strata_proto::batch::{self, RecordBatch};
use strata_proto::control::{self, MarkerKind};
use strata_proto::{BatchHeader, LeaderEpoch, Offset};

use super::flush::flush_locked;
use super::{AppendInfo, GAPS_FILE, Inner, Log};
use crate::checkpoint;
use crate::error::LogError;
use crate::index::rel;
use crate::producer::{CompletedTxn, ProducerState, SequenceCheck};
use crate::txn_index::AbortedTxn;

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

impl Log {
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

    /// Marks the log as one that may hold offset gaps (`GAPS_FILE`), durably, before
    /// the first gap is written.
    pub(super) fn allow_gaps(&self, g: &mut Inner) -> Result<(), LogError> {
        if !g.gaps_allowed {
            checkpoint::write_bytes(&self.dir.join(GAPS_FILE), b"1\n", true)?;
            g.gaps_allowed = true;
        }
        Ok(())
    }
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
pub(super) fn aborted_entry(producers: &ProducerState, done: &CompletedTxn) -> AbortedTxn {
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
