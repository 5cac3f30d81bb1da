//! Idempotent-producer state: what Kafka's `ProducerStateManager` keeps per partition so
//! that a retried batch is answered with the offsets it got the first time instead of
//! being appended twice (KIP-98).
//!
//! This module is sans-IO: [`ProducerState`] takes batch headers and answers whether a
//! batch may be appended; [`ProducerState::encode_snapshot`] and
//! [`ProducerState::decode_snapshot`] turn it into bytes and back. The log owns the
//! files and decides when to check, update, expire and snapshot.
//!
//! The rules are those of Kafka 3.x (`ProducerAppendInfo.checkSequence`,
//! `ProducerStateEntry.findDuplicateBatch`, `UnifiedLog.analyzeAndValidateProducerState`)
//! for idempotent producers, and the transaction bookkeeping of Kafka's
//! `ProducerStateManager` for transactional ones (KIP-98): a producer's transaction in
//! this partition starts with its first transactional batch and ends with a marker
//! (a control batch); until the marker is below the high-water mark the transaction is
//! unstable, and the last stable offset cannot pass its first offset. Batches without a
//! producer id (`producerId < 0`) bypass all of it.

use std::collections::{BTreeMap, VecDeque};

use strata_proto::control::MarkerKind;
use strata_proto::{BatchHeader, ErrorCode, Offset, ProducerEpoch, ProducerId};

/// How many of a producer's most recent batches are remembered for deduplication. The
/// Java producer keeps at most `max.in.flight.requests.per.connection` = 5 batches in
/// flight per partition when idempotence is on, so any retry it can send is one of the
/// last 5 (Kafka's `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`).
pub const BATCHES_PER_PRODUCER: usize = 5;

/// Kafka's default `producer.id.expiration.ms` (one day, KIP-854).
pub const DEFAULT_PRODUCER_EXPIRATION_MS: i64 = 86_400_000;

/// The sequence number after `seq`. Sequences wrap from `i32::MAX` to 0, as in Kafka's
/// `ProducerAppendInfo.inSequence`.
fn next_sequence(seq: i32) -> i32 {
    if seq == i32::MAX { 0 } else { seq + 1 }
}

/// One appended batch, as remembered for deduplication.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: Offset,
    pub last_offset: Offset,
    /// The batch's max timestamp as stored (the append time for LogAppendTime topics).
    pub max_timestamp: i64,
}

/// What the log knows about one producer id.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ProducerEntry {
    epoch: ProducerEpoch,
    /// Oldest first; at most [`BATCHES_PER_PRODUCER`]. Empty only when the last batch
    /// of this epoch was a control batch (which carries no sequence).
    batches: VecDeque<BatchMetadata>,
    /// The max timestamp of the producer's last batch; expiration counts from it.
    last_timestamp: i64,
    /// The offset of the first batch of the producer's open transaction here (Kafka's
    /// `currentTxnFirstOffset`).
    current_txn_first_offset: Option<Offset>,
}

impl ProducerEntry {
    pub fn epoch(&self) -> ProducerEpoch {
        self.epoch
    }

    /// The remembered batches of the current epoch, oldest first.
    pub fn batches(&self) -> impl ExactSizeIterator<Item = &BatchMetadata> {
        self.batches.iter()
    }

    /// The sequence number of the last record appended in this epoch, -1 if none.
    pub fn last_sequence(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }

    /// The offset of the last record appended in this epoch, -1 if none.
    pub fn last_offset(&self) -> Offset {
        self.batches.back().map_or(-1, |b| b.last_offset)
    }

    /// The max timestamp of the producer's last batch.
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }

    /// The first offset of the producer's open transaction in this partition, if one is
    /// open.
    pub fn current_txn_first_offset(&self) -> Option<Offset> {
        self.current_txn_first_offset
    }
}

/// A transaction that a marker ended in this partition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    /// The offset of the transaction's first batch here; the marker's own offset for a
    /// transaction that wrote nothing here.
    pub first_offset: Offset,
    /// The marker's offset.
    pub last_offset: Offset,
    pub aborted: bool,
}

/// A transaction whose data a read_committed consumer may not see past yet: open, or
/// ended by a marker not yet below the high-water mark.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Unstable {
    producer_id: ProducerId,
    marker: Option<Offset>,
}

/// What [`ProducerState::check`] decided about a batch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SequenceCheck {
    /// Append it (and call [`ProducerState::update`] with the stored header afterwards).
    Append,
    /// A retry of a batch already in the log: append nothing and answer with the
    /// offsets (and timestamp) the original got, as Kafka does.
    Duplicate {
        first_offset: Offset,
        last_offset: Offset,
        timestamp: i64,
    },
}

/// Why an idempotent batch was refused. None of these becomes acceptable by retrying
/// the same batch.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ProducerError {
    /// A zombie: the producer id was re-initialised with a newer epoch since.
    #[error("producer {producer_id} has epoch {epoch}, older than the current epoch {current}")]
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        current: ProducerEpoch,
    },
    /// A gap (a batch was lost in between), a retry too old to be remembered, or a new
    /// epoch that does not start at sequence 0.
    #[error(
        "out of order sequence for producer {producer_id} epoch {epoch}: \
         batch starts at {first_seq}, expected {expected}"
    )]
    OutOfOrderSequence {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        first_seq: i32,
        expected: i32,
    },
    /// A batch with a producer id must carry a sequence (Kafka's LogValidator refuses
    /// `baseSequence < 0` with INVALID_RECORD).
    #[error("batch of producer {producer_id} has invalid base sequence {base_sequence}")]
    InvalidSequence {
        producer_id: ProducerId,
        base_sequence: i32,
    },
    /// A non-transactional batch from a producer with an open transaction here (Kafka's
    /// "Expected transactional write from producer").
    #[error("producer {producer_id} has an open transaction here: expected a transactional write")]
    ExpectedTransactional { producer_id: ProducerId },
}

impl ProducerError {
    /// The Kafka error the producer gets.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ProducerError::InvalidProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            ProducerError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequenceNumber,
            ProducerError::InvalidSequence { .. } => ErrorCode::InvalidRecord,
            ProducerError::ExpectedTransactional { .. } => ErrorCode::InvalidTxnState,
        }
    }
}

/// A producer snapshot could not be decoded. The caller discards the snapshot and
/// rebuilds the state from the log instead.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("producer snapshot truncated: need {need} more bytes at byte {at}")]
    Truncated { at: usize, need: usize },
    #[error("unsupported producer snapshot version {0}")]
    UnsupportedVersion(u16),
    #[error("producer snapshot CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("invalid producer snapshot: {0}")]
    Invalid(&'static str),
}

/// Every idempotent producer of one partition.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ProducerState {
    /// Ordered, so snapshots of equal states are byte-identical.
    producers: BTreeMap<ProducerId, ProducerEntry>,
    /// Unstable transactions by first offset (Kafka's `ongoingTxns` and
    /// `unreplicatedTxns` in one map): the open ones are derived from the producers'
    /// entries; ended ones leave when [`ProducerState::prune_stable`] sees their marker
    /// below the high-water mark.
    unstable: BTreeMap<Offset, Unstable>,
}

impl ProducerState {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn entry(&self, producer_id: ProducerId) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Every producer, by id.
    pub fn entries(&self) -> impl Iterator<Item = (ProducerId, &ProducerEntry)> {
        self.producers.iter().map(|(&id, e)| (id, e))
    }

    /// Decides whether a producer's batch (header as received, before offsets are
    /// assigned) is new, a retry, or refused. Changes nothing.
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, ProducerError> {
        let producer_id = header.producer_id;
        if producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let first_seq = header.base_sequence;
        if first_seq < 0 {
            return Err(ProducerError::InvalidSequence {
                producer_id,
                base_sequence: first_seq,
            });
        }
        // A producer we know nothing of may start at any sequence: its state may have
        // been removed by expiration or by retention of its batches, and refusing it
        // would wedge a live producer (Kafka accepts it, see KIP-360).
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(SequenceCheck::Append);
        };
        let epoch = header.producer_epoch;
        // Duplicates first, before the sequence check, as in
        // `UnifiedLog.analyzeAndValidateProducerState`: a retry of any of the cached
        // batches of the current epoch gets the original offsets.
        if epoch == entry.epoch {
            let last_seq = header.last_sequence();
            if let Some(b) = entry
                .batches
                .iter()
                .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
            {
                return Ok(SequenceCheck::Duplicate {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    timestamp: b.max_timestamp,
                });
            }
        }
        if epoch < entry.epoch {
            // KIP-588: INVALID_PRODUCER_EPOCH (not the fatal PRODUCER_FENCED) so the
            // client can abort and retry.
            return Err(ProducerError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current: entry.epoch,
            });
        }
        if !header.is_transactional() && entry.current_txn_first_offset.is_some() {
            return Err(ProducerError::ExpectedTransactional { producer_id });
        }
        let expected = if epoch > entry.epoch {
            // A new epoch starts its sequences afresh.
            0
        } else {
            entry
                .batches
                .back()
                .map_or(0, |b| next_sequence(b.last_seq))
        };
        if first_seq != expected {
            return Err(ProducerError::OutOfOrderSequence {
                producer_id,
                epoch,
                first_seq,
                expected,
            });
        }
        Ok(SequenceCheck::Append)
    }

    /// Whether a transaction marker of `producer_id` at `epoch` may be appended: not
    /// from an epoch older than the producer's (Kafka's `appendEndTxnMarker` refuses it
    /// with INVALID_PRODUCER_EPOCH).
    pub fn check_marker(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
    ) -> Result<(), ProducerError> {
        match self.producers.get(&producer_id) {
            Some(e) if e.epoch > epoch => Err(ProducerError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current: e.epoch,
            }),
            _ => Ok(()),
        }
    }

    /// Records a batch that is now in the log: `header` is the stored header, with its
    /// offsets assigned, and `marker` the kind of a control batch's marker. Used after
    /// an append and when rebuilding from the log, so it checks nothing (a follower's
    /// or a replayed log is the truth). Returns the transaction a marker ended.
    pub fn update(
        &mut self,
        header: &BatchHeader,
        marker: Option<MarkerKind>,
    ) -> Option<CompletedTxn> {
        if header.producer_id < 0 {
            return None;
        }
        let entry = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: header.producer_epoch,
                batches: VecDeque::with_capacity(BATCHES_PER_PRODUCER),
                last_timestamp: header.max_timestamp,
                current_txn_first_offset: None,
            });
        // A new epoch forgets the old epoch's batches (`maybeUpdateProducerEpoch`).
        if entry.epoch != header.producer_epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        entry.last_timestamp = header.max_timestamp;
        // A control batch (transaction marker) carries no sequence: it moves the epoch
        // and the timestamp, and ends the open transaction, as Kafka's
        // `appendEndTxnMarker` does.
        if header.is_control() {
            let kind = marker?;
            let marker_offset = header.base_offset;
            let first_offset = match entry.current_txn_first_offset.take() {
                Some(first) => {
                    if let Some(u) = self.unstable.get_mut(&first) {
                        u.marker = Some(marker_offset);
                    }
                    first
                }
                None => marker_offset,
            };
            return Some(CompletedTxn {
                producer_id: header.producer_id,
                first_offset,
                last_offset: marker_offset,
                aborted: kind == MarkerKind::Abort,
            });
        }
        if header.is_transactional() && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(header.base_offset);
            self.unstable.insert(
                header.base_offset,
                Unstable {
                    producer_id: header.producer_id,
                    marker: None,
                },
            );
        }
        if entry.batches.len() == BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMetadata {
            first_seq: header.base_sequence,
            last_seq: header.last_sequence(),
            first_offset: header.base_offset,
            last_offset: header.last_offset(),
            max_timestamp: header.max_timestamp,
        });
        None
    }

    /// The first offset of the oldest transaction a read_committed consumer may not
    /// read past with the high-water mark at `high_watermark`: open, or ended by a
    /// marker at or above it. The last stable offset is this, or the high-water mark
    /// when there is none (or it is higher).
    pub fn first_unstable_offset(&self, high_watermark: Offset) -> Option<Offset> {
        self.unstable
            .iter()
            .find(|(_, u)| u.marker.is_none_or(|m| m >= high_watermark))
            .map(|(&first, _)| first)
    }

    /// Forgets ended transactions whose marker is below `high_watermark`: they are
    /// stable for good.
    pub fn prune_stable(&mut self, high_watermark: Offset) {
        self.unstable
            .retain(|_, u| u.marker.is_none_or(|m| m >= high_watermark));
    }

    /// The open transactions here: (first offset, producer id), oldest first.
    pub fn open_transactions(&self) -> impl Iterator<Item = (Offset, ProducerId)> + '_ {
        self.unstable
            .iter()
            .filter(|(_, u)| u.marker.is_none())
            .map(|(&first, u)| (first, u.producer_id))
    }

    /// The unstable set as the producers' open transactions have it (after a snapshot
    /// is decoded: ended transactions are not in it, as Kafka's snapshots do not keep
    /// them).
    fn rebuild_unstable(&mut self) {
        self.unstable = self
            .producers
            .iter()
            .filter_map(|(&producer_id, e)| {
                e.current_txn_first_offset.map(|first| {
                    (
                        first,
                        Unstable {
                            producer_id,
                            marker: None,
                        },
                    )
                })
            })
            .collect();
    }

    /// Forgets producers whose last batch is `expiration_ms` or more older than
    /// `now_ms` (`producer.id.expiration.ms`, Kafka's `isProducerExpired`). Their next
    /// batch is then accepted with any sequence. Returns how many were removed.
    ///
    /// As in Kafka, age is measured from the batch's max timestamp, so a producer whose
    /// clock runs far behind expires early and loses deduplication, not data.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        // A producer with an open transaction never expires (Kafka's
        // `isProducerExpired`): the transaction holds the last stable offset back until
        // its coordinator ends it.
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }
}

// Snapshot format, version 2 (all integers big-endian). Like Kafka's producer snapshot
// (a version and a CRC-32C up front), but keeping every cached batch, not only the
// last, so a retry of any of the last five still deduplicates after a restart.
//
//   u16  version (1)
//   u32  CRC-32C of every byte after this field
//   i64  offset: the state covers exactly the batches below it
//   u32  producer count, then per producer, by increasing id:
//        i64 producer id, i16 epoch, i64 last timestamp,
//        i64 first offset of the open transaction (-1: none; absent in version 1),
//        u8 batch count (0..=5),
//        then per batch, oldest first:
//        i32 first seq, i32 last seq, i64 first offset, i64 last offset, i64 max timestamp
const SNAPSHOT_VERSION: u16 = 2;
/// Snapshots written before transactions (no open-transaction field) still load.
const SNAPSHOT_VERSION_1: u16 = 1;
const SNAPSHOT_HEADER: usize = 2 + 4;
const BATCH_BYTES: usize = 4 + 4 + 8 + 8 + 8;

impl ProducerState {
    /// Encodes the state, covering every batch below `offset`.
    pub fn encode_snapshot(&self, offset: Offset) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            SNAPSHOT_HEADER + 12 + self.producers.len() * (19 + 2 * BATCH_BYTES),
        );
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // CRC, filled in below
        out.extend_from_slice(&offset.to_be_bytes());
        let count = u32::try_from(self.producers.len())
            .expect("fewer than 2^32 producers: each needs an appended batch");
        out.extend_from_slice(&count.to_be_bytes());
        for (&id, e) in &self.producers {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
            // At most BATCHES_PER_PRODUCER (5), so it fits a byte.
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.max_timestamp.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out[SNAPSHOT_HEADER..]);
        out[2..SNAPSHOT_HEADER].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a snapshot: the offset it covers and the state. Torn, corrupt or
    /// implausible input gives an error, never a panic or a partial state.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<(Offset, ProducerState), SnapshotError> {
        let mut r = Reader { bytes, at: 0 };
        let version = u16::from_be_bytes(r.array()?);
        if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_1 {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let stored = u32::from_be_bytes(r.array()?);
        let computed = crc32c::crc32c(&bytes[SNAPSHOT_HEADER..]);
        if stored != computed {
            return Err(SnapshotError::CrcMismatch { stored, computed });
        }
        let offset = i64::from_be_bytes(r.array()?);
        if offset < 0 {
            return Err(SnapshotError::Invalid("negative offset"));
        }
        let count = u32::from_be_bytes(r.array()?);
        let mut producers = BTreeMap::new();
        let mut previous: Option<ProducerId> = None;
        for _ in 0..count {
            let id = i64::from_be_bytes(r.array()?);
            if id < 0 {
                return Err(SnapshotError::Invalid("negative producer id"));
            }
            if previous.is_some_and(|p| p >= id) {
                return Err(SnapshotError::Invalid(
                    "producer ids not strictly increasing",
                ));
            }
            previous = Some(id);
            let epoch = i16::from_be_bytes(r.array()?);
            let last_timestamp = i64::from_be_bytes(r.array()?);
            let current_txn_first_offset = if version == SNAPSHOT_VERSION_1 {
                None
            } else {
                match i64::from_be_bytes(r.array()?) {
                    -1 => None,
                    first if (0..offset).contains(&first) => Some(first),
                    _ => return Err(SnapshotError::Invalid("open transaction out of range")),
                }
            };
            let [n] = r.array::<1>()?;
            if n as usize > BATCHES_PER_PRODUCER {
                return Err(SnapshotError::Invalid("too many batches for a producer"));
            }
            let mut batches = VecDeque::with_capacity(n as usize);
            for _ in 0..n {
                let b = BatchMetadata {
                    first_seq: i32::from_be_bytes(r.array()?),
                    last_seq: i32::from_be_bytes(r.array()?),
                    first_offset: i64::from_be_bytes(r.array()?),
                    last_offset: i64::from_be_bytes(r.array()?),
                    max_timestamp: i64::from_be_bytes(r.array()?),
                };
                if b.first_seq < 0 || b.last_seq < 0 {
                    return Err(SnapshotError::Invalid("negative sequence"));
                }
                if b.first_offset < 0 || b.last_offset < b.first_offset || b.last_offset >= offset {
                    return Err(SnapshotError::Invalid("batch offsets out of range"));
                }
                batches.push_back(b);
            }
            producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp,
                    current_txn_first_offset,
                },
            );
        }
        if r.at != bytes.len() {
            return Err(SnapshotError::Invalid("trailing bytes"));
        }
        let mut state = ProducerState {
            producers,
            unstable: BTreeMap::new(),
        };
        state.rebuild_unstable();
        Ok((offset, state))
    }
}

/// A bounds-checked big-endian reader.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let end = self.at.checked_add(N).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(SnapshotError::Truncated {
                at: self.at,
                need: N - (self.bytes.len() - self.at),
            });
        };
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    const PID: ProducerId = 7;

    /// A stored-or-received header of `count` records.
    fn header(pid: ProducerId, epoch: i16, seq: i32, count: i32, base: Offset) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 1_000,
            max_timestamp: 1_000 + base,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    /// Checks and, if new, "appends" at `*leo`: returns the check's answer.
    fn append(
        s: &mut ProducerState,
        leo: &mut Offset,
        h: BatchHeader,
    ) -> Result<SequenceCheck, ProducerError> {
        let c = s.check(&h)?;
        if c == SequenceCheck::Append {
            let stored = BatchHeader {
                base_offset: *leo,
                max_timestamp: 1_000 + *leo,
                ..h
            };
            s.update(&stored, None);
            *leo += h.record_count as i64;
        }
        Ok(c)
    }

    #[test]
    fn batches_without_a_producer_id_bypass_everything() {
        let mut s = ProducerState::new();
        let h = header(-1, -1, -1, 3, 0);
        assert_eq!(s.check(&h), Ok(SequenceCheck::Append));
        s.update(&h, None);
        assert!(s.is_empty());
    }

    #[test]
    fn retries_of_the_last_five_are_duplicates_and_older_ones_out_of_order() {
        let mut s = ProducerState::new();
        let mut leo = 100;
        let mut seq = 0;
        let mut sent = Vec::new();
        for i in 0..8 {
            let n = 1 + i % 3;
            let first = leo;
            assert_eq!(
                append(&mut s, &mut leo, header(PID, 0, seq, n, -1)),
                Ok(SequenceCheck::Append)
            );
            sent.push((seq, n, first, leo - 1));
            seq += n;
        }
        for (k, &(seq, n, first, last)) in sent.iter().enumerate() {
            let got = s.check(&header(PID, 0, seq, n, -1));
            if k >= sent.len() - BATCHES_PER_PRODUCER {
                assert_eq!(
                    got,
                    Ok(SequenceCheck::Duplicate {
                        first_offset: first,
                        last_offset: last,
                        timestamp: 1_000 + first,
                    })
                );
            } else {
                assert!(matches!(
                    got,
                    Err(ProducerError::OutOfOrderSequence { expected, .. }) if expected == seq_after(&sent)
                ));
            }
        }
        // Same first sequence, different length: not a duplicate, and out of order.
        let (seq, n, _, _) = sent[sent.len() - 1];
        assert!(s.check(&header(PID, 0, seq, n + 1, -1)).is_err());
    }

    fn seq_after(sent: &[(i32, i32, Offset, Offset)]) -> i32 {
        sent.last().map_or(0, |&(s, n, _, _)| s + n)
    }

    #[test]
    fn gaps_are_out_of_order() {
        let mut s = ProducerState::new();
        let mut leo = 0;
        append(&mut s, &mut leo, header(PID, 0, 0, 2, -1)).unwrap();
        let err = s.check(&header(PID, 0, 3, 1, -1)).unwrap_err();
        assert_eq!(
            err,
            ProducerError::OutOfOrderSequence {
                producer_id: PID,
                epoch: 0,
                first_seq: 3,
                expected: 2
            }
        );
        assert_eq!(err.error_code(), ErrorCode::OutOfOrderSequenceNumber);
        assert_eq!(err.error_code().code(), 45);
    }

    #[test]
    fn an_unknown_producer_may_start_at_any_sequence() {
        let s = ProducerState::new();
        assert_eq!(
            s.check(&header(PID, 3, 12_345, 2, -1)),
            Ok(SequenceCheck::Append)
        );
    }

    #[test]
    fn a_new_epoch_starts_at_zero_and_fences_the_old_one() {
        let mut s = ProducerState::new();
        let mut leo = 0;
        append(&mut s, &mut leo, header(PID, 1, 0, 3, -1)).unwrap();
        append(&mut s, &mut leo, header(PID, 1, 3, 3, -1)).unwrap();
        // A new epoch must start at 0.
        assert!(matches!(
            s.check(&header(PID, 2, 6, 1, -1)),
            Err(ProducerError::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(
            append(&mut s, &mut leo, header(PID, 2, 0, 1, -1)),
            Ok(SequenceCheck::Append)
        );
        let e = s.entry(PID).unwrap();
        assert_eq!((e.epoch(), e.last_sequence(), e.last_offset()), (2, 0, 6));
        assert_eq!(
            e.batches().len(),
            1,
            "the old epoch's batches are forgotten"
        );
        // The old epoch is fenced, even for what used to be a duplicate.
        let err = s.check(&header(PID, 1, 3, 3, -1)).unwrap_err();
        assert_eq!(
            err,
            ProducerError::InvalidProducerEpoch {
                producer_id: PID,
                epoch: 1,
                current: 2
            }
        );
        assert_eq!(err.error_code().code(), 47);
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        let mut s = ProducerState::new();
        let mut leo = 0;
        // 3 records from MAX - 1: MAX - 1, MAX, 0.
        let h = header(PID, 0, i32::MAX - 1, 3, -1);
        assert_eq!(h.last_sequence(), 0);
        append(&mut s, &mut leo, h).unwrap();
        assert_eq!(
            append(&mut s, &mut leo, header(PID, 0, 1, 1, -1)),
            Ok(SequenceCheck::Append)
        );
        // A batch ending exactly at MAX is followed by 0.
        let mut s = ProducerState::new();
        append(&mut s, &mut leo, header(PID, 0, i32::MAX - 1, 2, -1)).unwrap();
        assert!(s.check(&header(PID, 0, 1, 1, -1)).is_err());
        assert_eq!(
            s.check(&header(PID, 0, 0, 1, -1)),
            Ok(SequenceCheck::Append)
        );
        assert!(matches!(
            s.check(&header(PID, 0, i32::MAX - 1, 2, -1)),
            Ok(SequenceCheck::Duplicate { .. })
        ));
    }

    #[test]
    fn negative_sequences_are_invalid_records() {
        let s = ProducerState::new();
        let err = s.check(&header(PID, 0, -1, 1, -1)).unwrap_err();
        assert_eq!(err.error_code(), ErrorCode::InvalidRecord);
    }

    #[test]
    fn expiration_counts_from_the_last_batch_timestamp() {
        let mut s = ProducerState::new();
        let mut leo = 0;
        append(&mut s, &mut leo, header(1, 0, 0, 1, -1)).unwrap(); // ts 1000
        append(&mut s, &mut leo, header(2, 0, 0, 1, -1)).unwrap(); // ts 1001
        assert_eq!(s.expire(1_000 + 499, 500), 0);
        assert_eq!(s.expire(1_000 + 500, 500), 1, "Kafka expires at >=");
        assert!(s.entry(1).is_none() && s.entry(2).is_some());
        // The forgotten producer may continue at any sequence.
        assert_eq!(s.check(&header(1, 0, 77, 1, -1)), Ok(SequenceCheck::Append));
    }

    /// A transactional batch of `pid` at `base`.
    fn txn(pid: ProducerId, epoch: i16, seq: i32, count: i32, base: Offset) -> BatchHeader {
        BatchHeader {
            attributes: 0x10,
            ..header(pid, epoch, seq, count, base)
        }
    }

    fn marker_at(pid: ProducerId, epoch: i16, base: Offset) -> BatchHeader {
        BatchHeader {
            attributes: 0x20 | 0x10,
            base_sequence: -1,
            ..header(pid, epoch, -1, 1, base)
        }
    }

    #[test]
    fn transactions_hold_the_stable_offset_until_their_marker_is_replicated() {
        let mut s = ProducerState::new();
        assert_eq!(s.update(&txn(1, 0, 0, 2, 10), None), None);
        assert_eq!(s.update(&txn(2, 0, 0, 2, 12), None), None);
        assert_eq!(s.update(&txn(1, 0, 2, 2, 14), None), None);
        assert_eq!(s.first_unstable_offset(100), Some(10));
        assert_eq!(
            s.check(&header(1, 0, 4, 1, -1)),
            Err(ProducerError::ExpectedTransactional { producer_id: 1 })
        );
        let done = s.update(&marker_at(1, 0, 16), Some(MarkerKind::Commit));
        assert_eq!(
            done,
            Some(CompletedTxn {
                producer_id: 1,
                first_offset: 10,
                last_offset: 16,
                aborted: false
            })
        );
        // Ended, but its marker is not below the high-water mark yet.
        assert_eq!(s.first_unstable_offset(16), Some(10));
        assert_eq!(s.first_unstable_offset(17), Some(12));
        assert_eq!(s.open_transactions().collect::<Vec<_>>(), vec![(12, 2)]);
        // The snapshot keeps the open transaction (not the ended one, as Kafka's).
        let (at, decoded) = ProducerState::decode_snapshot(&s.encode_snapshot(17)).unwrap();
        assert_eq!(at, 17);
        assert_eq!(decoded.first_unstable_offset(17), Some(12));
        assert_eq!(
            decoded.entry(2).unwrap().current_txn_first_offset(),
            Some(12)
        );
        s.prune_stable(17);
        assert_eq!(s, decoded);
        let done = s
            .update(&marker_at(2, 0, 17), Some(MarkerKind::Abort))
            .unwrap();
        assert!(done.aborted);
        s.prune_stable(18);
        assert_eq!(s.first_unstable_offset(18), None);
        // A marker from an older epoch is refused; an unknown control record ends nothing.
        assert!(s.check_marker(2, 0).is_ok() && s.check_marker(2, 1).is_ok());
        s.update(&txn(3, 1, 0, 1, 20), None);
        assert_eq!(
            s.check_marker(3, 0).unwrap_err().error_code(),
            ErrorCode::InvalidProducerEpoch
        );
        assert_eq!(s.update(&marker_at(3, 1, 21), None), None);
        assert_eq!(s.first_unstable_offset(100), Some(20));
    }

    #[test]
    fn version_1_snapshots_still_load() {
        let (s, leo) = sample_state();
        let v2 = s.encode_snapshot(leo);
        // Version 1: the same without the open-transaction field of each producer.
        let mut v1 = Vec::new();
        let mut r = &v2[SNAPSHOT_HEADER + 12..];
        while !r.is_empty() {
            let (fixed, rest) = r.split_at(8 + 2 + 8);
            v1.extend_from_slice(fixed);
            let rest = &rest[8..];
            let n = rest[0] as usize;
            v1.extend_from_slice(&rest[..1 + n * BATCH_BYTES]);
            r = &rest[1 + n * BATCH_BYTES..];
        }
        let mut content = v2[SNAPSHOT_HEADER..SNAPSHOT_HEADER + 12].to_vec();
        content.extend_from_slice(&v1);
        let mut bytes = SNAPSHOT_VERSION_1.to_be_bytes().to_vec();
        bytes.extend_from_slice(&crc32c::crc32c(&content).to_be_bytes());
        bytes.extend_from_slice(&content);
        assert_eq!(ProducerState::decode_snapshot(&bytes), Ok((leo, s)));
    }

    #[test]
    fn control_batches_move_the_epoch_without_a_sequence() {
        let mut s = ProducerState::new();
        let mut leo = 0;
        append(&mut s, &mut leo, header(PID, 0, 0, 2, -1)).unwrap();
        let marker = BatchHeader {
            attributes: 0x20 | 0x10,
            base_sequence: -1,
            ..header(PID, 1, -1, 1, 2)
        };
        s.update(&marker, Some(MarkerKind::Commit));
        let e = s.entry(PID).unwrap();
        assert_eq!((e.epoch(), e.batches().len()), (1, 0));
        assert_eq!(
            s.check(&header(PID, 1, 0, 1, -1)),
            Ok(SequenceCheck::Append)
        );
        assert!(s.check(&header(PID, 1, 5, 1, -1)).is_err());
    }

    fn sample_state() -> (ProducerState, Offset) {
        let mut s = ProducerState::new();
        let mut leo = 0;
        for i in 0..20 {
            let pid = i % 3;
            let seq = s.entry(pid).map_or(0, |e| next_sequence(e.last_sequence()));
            append(
                &mut s,
                &mut leo,
                header(pid, 0, seq, 1 + (i as i32 % 4), -1),
            )
            .unwrap();
        }
        (s, leo)
    }

    #[test]
    fn snapshot_round_trips() {
        let (s, leo) = sample_state();
        let bytes = s.encode_snapshot(leo);
        assert_eq!(ProducerState::decode_snapshot(&bytes), Ok((leo, s)));
        let empty = ProducerState::new().encode_snapshot(0);
        assert_eq!(
            ProducerState::decode_snapshot(&empty),
            Ok((0, ProducerState::new()))
        );
    }

    #[test]
    fn torn_and_corrupt_snapshots_are_refused() {
        let (s, leo) = sample_state();
        let bytes = s.encode_snapshot(leo);
        for len in 0..bytes.len() {
            assert!(
                ProducerState::decode_snapshot(&bytes[..len]).is_err(),
                "torn at {len}"
            );
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(
                    ProducerState::decode_snapshot(&b).is_err(),
                    "flip {i}:{bit}"
                );
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(ProducerState::decode_snapshot(&longer).is_err());
        let mut v3 = bytes;
        v3[1] = 3;
        assert_eq!(
            ProducerState::decode_snapshot(&v3),
            Err(SnapshotError::UnsupportedVersion(3))
        );
    }

    /// Re-signs `content` (everything after the CRC) so only the semantic checks apply.
    fn signed(content: &[u8]) -> Vec<u8> {
        let mut out = SNAPSHOT_VERSION.to_be_bytes().to_vec();
        out.extend_from_slice(&crc32c::crc32c(content).to_be_bytes());
        out.extend_from_slice(content);
        out
    }

    #[test]
    fn implausible_snapshots_with_a_valid_crc_are_refused() {
        let (s, leo) = sample_state();
        let good = s.encode_snapshot(leo);
        // The state covers batches below `leo`: claiming less is a lie.
        let mut content = good[SNAPSHOT_HEADER..].to_vec();
        content[..8].copy_from_slice(&(leo - 1).to_be_bytes());
        assert_eq!(
            ProducerState::decode_snapshot(&signed(&content)),
            Err(SnapshotError::Invalid("batch offsets out of range"))
        );
        // A huge producer count with no producers behind it.
        let mut content = 0i64.to_be_bytes().to_vec();
        content.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            ProducerState::decode_snapshot(&signed(&content)),
            Err(SnapshotError::Truncated { .. })
        ));
    }

    /// One step of the model-based test, for producer `pid` (0 or 1).
    #[derive(Clone, Debug)]
    enum Op {
        /// The next batch in sequence, of `n` records.
        New { pid: usize, n: i32 },
        /// A retry of the batch `back` batches before the newest of this epoch.
        Retry { pid: usize, back: usize },
        /// A batch `skip` sequences past the expected one.
        Gap { pid: usize, skip: i32 },
        /// A new epoch, starting at sequence 0 or (wrongly) elsewhere.
        Bump { pid: usize, at_zero: bool },
        /// A batch from an epoch older than the current one.
        Zombie { pid: usize, n: i32 },
        /// Replace the state by its snapshot, decoded.
        Snapshot,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0usize..2, 1i32..6).prop_map(|(pid, n)| Op::New { pid, n }),
            4 => (0usize..2, 0usize..9).prop_map(|(pid, back)| Op::Retry { pid, back }),
            1 => (0usize..2, 1i32..50).prop_map(|(pid, skip)| Op::Gap { pid, skip }),
            1 => (0usize..2, any::<bool>()).prop_map(|(pid, at_zero)| Op::Bump { pid, at_zero }),
            1 => (0usize..2, 1i32..4).prop_map(|(pid, n)| Op::Zombie { pid, n }),
            1 => Just(Op::Snapshot),
        ]
    }

    /// What the test knows of a producer: every batch of its current epoch.
    #[derive(Clone, Debug)]
    struct Model {
        epoch: i16,
        /// Sequence of the first batch, for a producer not yet seen.
        start_seq: i32,
        /// (first seq, record count, first offset, last offset)
        sent: Vec<(i32, i32, Offset, Offset)>,
        known: bool,
    }

    impl Model {
        fn next_seq(&self) -> i32 {
            match self.sent.last() {
                Some(&(s, n, _, _)) => seq_add(s, n),
                None if self.known => 0,
                None => self.start_seq,
            }
        }
    }

    /// `seq + n` with Kafka's wrap-around.
    fn seq_add(seq: i32, n: i32) -> i32 {
        ((seq as i64 + n as i64) % (i32::MAX as i64 + 1)) as i32
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn the_state_deduplicates_exactly_the_last_five_batches(
            near_max in proptest::array::uniform2(any::<bool>()),
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let mut s = ProducerState::new();
            let mut leo: Offset = 0;
            // A producer may start anywhere; starting near i32::MAX exercises wrapping.
            let mut models: Vec<Model> = near_max
                .iter()
                .map(|&m| Model {
                    epoch: 0,
                    start_seq: if m { i32::MAX - 10 } else { 0 },
                    sent: vec![],
                    known: false,
                })
                .collect();
            for op in ops {
                match op {
                    Op::New { pid, n } => {
                        let m = &mut models[pid];
                        let seq = m.next_seq();
                        let first = leo;
                        let got = append(&mut s, &mut leo, header(pid as i64, m.epoch, seq, n, -1));
                        prop_assert_eq!(got, Ok(SequenceCheck::Append));
                        m.sent.push((seq, n, first, leo - 1));
                        m.known = true;
                    }
                    Op::Retry { pid, back } => {
                        let m = &models[pid];
                        if back >= m.sent.len() {
                            continue;
                        }
                        let (seq, n, first, last) = m.sent[m.sent.len() - 1 - back];
                        let before = s.clone();
                        let got = append(&mut s, &mut leo, header(pid as i64, m.epoch, seq, n, -1));
                        if back < BATCHES_PER_PRODUCER {
                            prop_assert_eq!(got, Ok(SequenceCheck::Duplicate {
                                first_offset: first,
                                last_offset: last,
                                timestamp: 1_000 + first,
                            }));
                        } else {
                            let is_out_of_order =
                                matches!(got, Err(ProducerError::OutOfOrderSequence { .. }));
                            prop_assert!(is_out_of_order, "old retry gave {:?}", got);
                        }
                        prop_assert_eq!(&s, &before, "a retry changes nothing");
                    }
                    Op::Gap { pid, skip } => {
                        let m = &mut models[pid];
                        let seq = seq_add(m.next_seq(), skip);
                        let first = leo;
                        let got = append(&mut s, &mut leo, header(pid as i64, m.epoch, seq, 1, -1));
                        if m.known {
                            let is_out_of_order =
                                matches!(got, Err(ProducerError::OutOfOrderSequence { .. }));
                            prop_assert!(is_out_of_order, "gap gave {:?}", got);
                        } else {
                            // Unknown producers start anywhere.
                            prop_assert_eq!(got, Ok(SequenceCheck::Append));
                            m.sent.push((seq, 1, first, first));
                            m.known = true;
                        }
                    }
                    Op::Bump { pid, at_zero } => {
                        let m = &mut models[pid];
                        let seq = if at_zero { 0 } else { 1 + m.next_seq() % 1000 };
                        let first = leo;
                        let got = append(&mut s, &mut leo, header(pid as i64, m.epoch + 1, seq, 1, -1));
                        if at_zero || !m.known {
                            prop_assert_eq!(got, Ok(SequenceCheck::Append));
                            m.epoch += 1;
                            m.sent = vec![(seq, 1, first, first)];
                            m.known = true;
                        } else {
                            let ok = matches!(got, Err(ProducerError::OutOfOrderSequence { expected: 0, .. }));
                            prop_assert!(ok, "bump not at 0 gave {:?}", got);
                        }
                    }
                    Op::Zombie { pid, n } => {
                        let m = &models[pid];
                        if !m.known || m.epoch == 0 {
                            continue;
                        }
                        let before = s.clone();
                        let got = append(&mut s, &mut leo, header(pid as i64, m.epoch - 1, m.next_seq(), n, -1));
                        let fenced = matches!(got, Err(ProducerError::InvalidProducerEpoch { .. }));
                        prop_assert!(fenced, "zombie gave {:?}", got);
                        prop_assert_eq!(&s, &before);
                    }
                    Op::Snapshot => {
                        let (at, decoded) = ProducerState::decode_snapshot(&s.encode_snapshot(leo)).unwrap();
                        prop_assert_eq!(at, leo);
                        prop_assert_eq!(&decoded, &s);
                        s = decoded;
                    }
                }
                // The entry always describes the newest batch of the current epoch.
                for (pid, m) in models.iter().enumerate() {
                    let e = s.entry(pid as i64);
                    prop_assert_eq!(e.is_some(), m.known);
                    if let (Some(e), Some(&(seq, n, _, last))) = (e, m.sent.last()) {
                        prop_assert_eq!(e.epoch(), m.epoch);
                        prop_assert_eq!(e.last_sequence(), seq_add(seq, n - 1));
                        prop_assert_eq!(e.last_offset(), last);
                        prop_assert!(e.batches().len() <= BATCHES_PER_PRODUCER);
                    }
                }
            }
        }

        #[test]
        fn decoding_garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = ProducerState::decode_snapshot(&data);
            // Also behind a valid header and CRC, so the field checks are reached.
            let _ = ProducerState::decode_snapshot(&signed(&data));
        }
    }
}
