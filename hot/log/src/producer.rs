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
//!
//! The producer map and its sequence checks are here; `txn` tracks the transactions
//! (the unstable set behind the last stable offset), `snapshot` is the snapshot's byte
//! format.

use std::collections::{BTreeMap, VecDeque};

use strata_proto::control::MarkerKind;
use strata_proto::{BatchHeader, ErrorCode, Offset, ProducerEpoch, ProducerId};

use self::txn::Unstable;

mod snapshot;
mod txn;

pub use self::snapshot::SnapshotError;
pub use self::txn::CompletedTxn;

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

#[cfg(test)]
mod tests;
