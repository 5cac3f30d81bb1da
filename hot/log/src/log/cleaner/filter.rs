//! The pure parts of a cleaner pass, over batch bytes wherever they come from: mapping
//! keys ([`map_keys`]), deciding what of a batch stays ([`Filter`]) and laying the kept
//! batches out as one segment with its indexes ([`SegmentBuilder`]). The local pass
//! (`Log::clean`) reads a partition's segment files through them; the remote tier's
//! pass (strata-tier) reads remote segments through them, so both clean alike.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;

use strata_proto::batch::{self, BatchHeader, RecordBatch};
use strata_proto::control::{self, MarkerKind};
use strata_proto::rewrite;
use strata_proto::{Offset, ProducerId};

use super::OffsetMap;
use crate::error::LogError;
use crate::index::{IndexBuilder, Indexes, rel};
use crate::txn_index::AbortedTxn;

/// What a pass knows of transactions as it walks batches in offset order (Kafka's
/// `CleanedTransactionMetadata`): the aborted transactions of the range (from the
/// segments' `.txnindex`), which of them it is inside, and which producers it has seen
/// committed-transaction data of.
///
/// * A transactional batch of an aborted transaction goes whole; its keys are not mapped.
/// * An ABORT marker may go once no batch of its transaction is left: if this pass
///   removed some, the marker stays this time (with its index entry, in
///   [`Self::take_kept`]), since the groups of a pass are swapped in one at a time and a
///   reader between two swaps must still be told the data is aborted.
/// * A COMMIT marker may go once the pass has seen no data of its transaction.
/// * A marker that may go stays until its batch's delete horizon has passed
///   (`delete.retention.ms` after the pass that first found it removable, KIP-534), as a
///   tombstone does, so a consumer that read the data has time to read the marker.
#[derive(Debug, Default)]
pub struct TxnCleaner {
    /// Aborted transactions not reached yet, by first offset.
    pending: VecDeque<AbortedTxn>,
    /// Aborted transactions the walk is inside: (entry, a batch of it was seen).
    aborted: HashMap<ProducerId, (AbortedTxn, bool)>,
    /// Producers whose committed-transaction data the walk is inside.
    committed: HashSet<ProducerId>,
    /// Index entries of ABORT markers kept with data removed in this pass.
    kept: Vec<AbortedTxn>,
}

impl TxnCleaner {
    /// A walk over a range whose aborted transactions (every entry whose marker is at
    /// or after the range's start) are `aborted`.
    pub fn new(mut aborted: Vec<AbortedTxn>) -> TxnCleaner {
        aborted.sort_by_key(|a| (a.first_offset, a.last_offset));
        TxnCleaner {
            pending: aborted.into(),
            ..TxnCleaner::default()
        }
    }

    fn reach(&mut self, offset: Offset) {
        while self
            .pending
            .front()
            .is_some_and(|a| a.first_offset <= offset)
        {
            let a = self.pending.pop_front().expect("checked");
            // A producer's transactions follow one another: a newer one replaces an
            // ended one the walk did not see the marker of (key mapping skips markers).
            self.aborted.insert(a.producer_id, (a, false));
        }
    }

    /// A data batch: whether it belongs to an aborted transaction (and goes whole).
    pub fn on_data(&mut self, h: &BatchHeader) -> bool {
        self.reach(h.last_offset());
        // An emptied batch (a producer's last, kept as its header) holds no data of its
        // transaction any more.
        if !h.is_transactional() || h.record_count == 0 {
            return false;
        }
        match self.aborted.get_mut(&h.producer_id) {
            Some((a, seen)) if h.base_offset < a.last_offset => {
                *seen = true;
                true
            }
            _ => {
                self.committed.insert(h.producer_id);
                false
            }
        }
    }

    /// A control batch (`kind` its marker, `None` for another control record or an
    /// already emptied one): whether it may go (once its horizon has passed).
    pub fn on_control(&mut self, h: &BatchHeader, kind: Option<MarkerKind>) -> bool {
        self.reach(h.last_offset());
        match kind {
            Some(MarkerKind::Abort) => match self.aborted.remove(&h.producer_id) {
                Some((a, true)) => {
                    self.kept.push(a);
                    false
                }
                _ => true,
            },
            Some(MarkerKind::Commit) => !self.committed.remove(&h.producer_id),
            None => true,
        }
    }

    /// The index entries of the ABORT markers kept since the last call, in marker
    /// order: what the cleaned segment holding them must index.
    pub fn take_kept(&mut self) -> Vec<AbortedTxn> {
        std::mem::take(&mut self.kept)
    }
}

/// Puts the key of every record of the batches in `bytes` (whole batches, back to
/// back) into `map`, a batch at a time. `Ok(None)`: every batch went in. `Ok(Some(o))`:
/// the map filled before the batch at `o`, which did not (the pass then cleans only
/// below `o`). A batch alone larger than the whole map is an error.
pub fn map_keys(
    bytes: &[u8],
    map: &mut OffsetMap,
    txns: &mut TxnCleaner,
) -> Result<Option<Offset>, LogError> {
    for b in batch::batches(bytes) {
        let b = b?;
        // Markers have no keys; an aborted transaction's records never were values.
        if b.header().is_control() {
            txns.on_control(b.header(), None);
            continue;
        }
        if txns.on_data(b.header()) {
            continue;
        }
        let n = b.header().record_count.max(0) as usize;
        if map.len() + n > map.capacity() {
            if map.is_empty() {
                return Err(LogError::DedupeBufferTooSmall {
                    records: n,
                    capacity: map.capacity(),
                });
            }
            return Ok(Some(b.base_offset()));
        }
        for r in b.records()?.iter() {
            let r = r?;
            if let Some(k) = r.key {
                map.put(k, r.offset);
            }
        }
    }
    Ok(None)
}

/// Splits consecutive segments into the groups a pass rewrites, each into one segment:
/// runs whose sizes add up to at most `max_bytes` (at least one segment each) and whose
/// offsets fit a segment's 32-bit relative offsets. `span` gives a segment's (base
/// offset, next offset, size).
pub fn group_segments<T>(
    segs: &[T],
    max_bytes: u64,
    span: impl Fn(&T) -> (Offset, Offset, u64),
) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        let (base, _, mut size) = span(&segs[i]);
        let mut j = i + 1;
        while j < segs.len() {
            let (_, next, s) = span(&segs[j]);
            if size + s > max_bytes || next - base > u32::MAX as i64 {
                break;
            }
            size += s;
            j += 1;
        }
        out.push(&segs[i..j]);
        i = j;
    }
    out
}

/// What one pass keeps of a batch.
#[derive(Debug)]
pub struct Filter<'a> {
    /// Every key of the dirty part and its latest offset.
    pub map: &'a OffsetMap,
    /// Records at or above this were not mapped: they stay.
    pub end: Offset,
    /// The pass's time: tombstones whose delete horizon is at or before it go.
    pub now: i64,
    /// delete.retention.ms: the horizon a kept tombstone's batch gets.
    pub delete_retention_ms: i64,
    /// Each idempotent producer's last offset: its last batch keeps at least its header.
    pub producer_last: &'a HashMap<ProducerId, Offset>,
}

/// What filtering batches did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterStats {
    /// A batch differs from its source.
    pub changed: bool,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// The earliest delete horizon of a batch kept with tombstones.
    pub min_horizon: Option<i64>,
}

impl Filter<'_> {
    /// One batch through the pass: `None` when it goes, else the bytes to keep (the
    /// batch itself when nothing changes). See the module docs of the cleaner for the
    /// rules.
    pub fn batch(
        &self,
        b: &RecordBatch<'_>,
        txns: &mut TxnCleaner,
        stats: &mut FilterStats,
    ) -> Result<Option<Vec<u8>>, LogError> {
        let h = *b.header();
        if h.is_control() {
            // A marker that does not read as one stays as it is.
            let Ok(kind) = control::marker_kind(b) else {
                return Ok(Some(b.as_bytes().to_vec()));
            };
            if !txns.on_control(&h, kind) {
                return Ok(Some(b.as_bytes().to_vec()));
            }
            return self.expire_marker(b, stats);
        }
        if txns.on_data(&h) {
            // An aborted transaction's batch goes whole.
            stats.changed = true;
            stats.records_removed += h.record_count.max(0) as u64;
            return Ok(self.producer_needs(&h).then(|| rewrite::empty_batch(&h)));
        }
        let records = b.records()?;
        let batch_horizon = h.delete_horizon();
        let mut kept = Vec::new();
        let mut removed = 0u64;
        let mut tombstones_kept = false;
        for r in records.iter() {
            let r = r?;
            // Above where the map got: not deduplicated in this pass.
            if r.offset >= self.end {
                tombstones_kept |= r.value.is_none() && batch_horizon.is_some();
                kept.push(r);
                continue;
            }
            let latest = match r.key {
                // A keyless record has no place in a compacted log (Kafka drops it too).
                None => false,
                Some(k) => self.map.get(k).is_none_or(|o| r.offset >= o),
            };
            let keep = latest
                && match r.value {
                    Some(_) => true,
                    None => batch_horizon.is_none_or(|hz| self.now < hz),
                };
            if keep {
                tombstones_kept |= r.value.is_none();
                kept.push(r);
            } else {
                removed += 1;
                if r.value.is_none() && latest {
                    stats.tombstones_removed += 1;
                }
            }
        }
        stats.records_removed += removed;
        let horizon = self.now.saturating_add(self.delete_retention_ms);
        // A kept tombstone below `end` gets its horizon the first time a pass keeps it.
        let stamp = tombstones_kept
            && batch_horizon.is_none()
            && kept
                .iter()
                .any(|r| r.value.is_none() && r.offset < self.end);
        if tombstones_kept {
            let hz = if stamp {
                horizon
            } else {
                batch_horizon.unwrap_or(horizon)
            };
            stats.min_horizon = Some(stats.min_horizon.map_or(hz, |m| m.min(hz)));
        }
        if removed == 0 && !stamp {
            return Ok(Some(b.as_bytes().to_vec()));
        }
        stats.changed = true;
        if kept.is_empty() {
            return Ok(self.producer_needs(&h).then(|| rewrite::empty_batch(&h)));
        }
        Ok(Some(rewrite::rewrite_batch(
            &h,
            &kept,
            stamp.then_some(horizon),
        )?))
    }

    /// Kafka keeps the last batch of a producer (at least its header): its sequence and
    /// epoch are what the producer state checks the next batch against.
    fn producer_needs(&self, h: &BatchHeader) -> bool {
        h.has_producer_id()
            && self
                .producer_last
                .get(&h.producer_id)
                .is_some_and(|&o| h.base_offset <= o && o <= h.last_offset())
    }

    /// A marker that may go: stamped with its delete horizon the first time, removed
    /// once that has passed (KIP-534, as tombstones).
    fn expire_marker(
        &self,
        b: &RecordBatch<'_>,
        stats: &mut FilterStats,
    ) -> Result<Option<Vec<u8>>, LogError> {
        let h = *b.header();
        match h.delete_horizon() {
            Some(hz) if self.now >= hz => {
                stats.changed = true;
                stats.records_removed += h.record_count.max(0) as u64;
                Ok(self.producer_needs(&h).then(|| rewrite::empty_batch(&h)))
            }
            Some(hz) => {
                stats.min_horizon = Some(stats.min_horizon.map_or(hz, |m| m.min(hz)));
                Ok(Some(b.as_bytes().to_vec()))
            }
            None => {
                let hz = self.now.saturating_add(self.delete_retention_ms);
                stats.min_horizon = Some(stats.min_horizon.map_or(hz, |m| m.min(hz)));
                stats.changed = true;
                let recs = b.records()?;
                let records: Vec<_> = recs.iter().collect::<Result<_, _>>()?;
                Ok(Some(rewrite::rewrite_batch(&h, &records, Some(hz))?))
            }
        }
    }
}

/// A cleaned segment being laid out: kept batches go to `out` with the index a log
/// builds for them, the last one held back until [`Self::finish`] knows whether it ends
/// the segment where its sources ended.
#[derive(Debug)]
pub struct SegmentBuilder<W> {
    base: Offset,
    index: IndexBuilder,
    out: W,
    size: u64,
    next_offset: Offset,
    max_timestamp: i64,
    pending: Option<Vec<u8>>,
}

/// What [`SegmentBuilder::finish`] laid out.
#[derive(Debug)]
pub struct BuiltSegment<W> {
    pub out: W,
    pub base: Offset,
    pub next_offset: Offset,
    pub size: u64,
    pub max_timestamp: i64,
    pub index: Indexes,
    /// The last batch had to be replaced by its header (so the changes are real).
    pub emptied_last: bool,
}

impl<W: Write> SegmentBuilder<W> {
    /// A segment based at `base` (the first source's base), indexed every
    /// `index_interval` bytes.
    pub fn new(base: Offset, index_interval: u64, out: W) -> SegmentBuilder<W> {
        SegmentBuilder {
            base,
            index: IndexBuilder::new(index_interval),
            out,
            size: 0,
            next_offset: base,
            max_timestamp: -1,
            pending: None,
        }
    }

    /// Adds a kept batch (in offset order); returns the bytes written out now.
    pub fn push(&mut self, kept: Vec<u8>) -> Result<u64, LogError> {
        match self.pending.replace(kept) {
            Some(prev) => self.emit(&prev),
            None => Ok(0),
        }
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<u64, LogError> {
        let h = batch::parse_header(bytes)?;
        self.index.on_batch(
            rel(self.base, h.base_offset),
            self.size as u32,
            bytes.len() as u64,
            h.max_timestamp,
        );
        self.out.write_all(bytes).map_err(LogError::io(
            "write",
            std::path::Path::new("(a cleaned segment)"),
        ))?;
        self.size += bytes.len() as u64;
        self.next_offset = h.next_offset();
        self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
        Ok(bytes.len() as u64)
    }

    /// Ends the segment at `sources_next` (where its sources ended): the last kept batch
    /// if it ends there, else (it was removed) the header of the sources' last batch,
    /// `last_header`, after it; the index is sealed there.
    pub fn finish(
        mut self,
        sources_next: Offset,
        last_header: impl FnOnce() -> Result<BatchHeader, LogError>,
    ) -> Result<BuiltSegment<W>, LogError> {
        let mut emptied_last = false;
        match self.pending.take() {
            Some(b) if batch::parse_header(&b)?.next_offset() == sources_next => {
                self.emit(&b)?;
            }
            other => {
                if let Some(b) = other {
                    self.emit(&b)?;
                }
                emptied_last = true;
                self.emit(&rewrite::empty_batch(&last_header()?))?;
            }
        }
        self.index.seal(rel(self.base, sources_next));
        Ok(BuiltSegment {
            out: self.out,
            base: self.base,
            next_offset: self.next_offset,
            size: self.size,
            max_timestamp: self.max_timestamp,
            index: self.index.idx,
            emptied_last,
        })
    }
}
