//! One transactional id's metadata (Kafka's `TransactionMetadata`) and the transitions
//! its requests prepare (Kafka's `prepare*` methods returning a `TxnTransitMetadata`).
//!
//! A prepared transition is the whole metadata as it will be once its record is written:
//! the coordinator sets [`TransactionMetadata::pending`] to the target state, asks the
//! caller to write the record, and only when the write succeeded replaces the metadata
//! with the target (so a failed write leaves it as it was). The in-memory metadata is
//! therefore always what the last successful record says, apart from the two fields the
//! version-0 record cannot hold (`last_producer_id`, `last_producer_epoch`), which a load
//! resets to `-1` as Kafka's does.

use std::collections::BTreeSet;

use strata_proto::{ErrorCode, ProducerEpoch, ProducerId};

use super::messages::{ProducerIdAndEpoch, WriteTicket};
use crate::records::{TxnLogValue, TxnState};

/// Kafka's `RecordBatch.NO_PRODUCER_ID`.
pub(crate) const NO_PRODUCER_ID: ProducerId = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
pub(crate) const NO_PRODUCER_EPOCH: ProducerEpoch = -1;

/// Whether no further epoch may be handed out for a producer id (Kafka's
/// `isEpochExhausted`: `Short.MaxValue - 1` and up, so the coordinator can always fence).
pub fn is_epoch_exhausted(epoch: ProducerEpoch) -> bool {
    epoch >= i16::MAX - 1
}

/// One transactional id's metadata (Kafka's `TransactionMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionMetadata {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id in use.
    pub producer_id: ProducerId,
    /// The producer id before the last InitProducerId (Kafka's `previousProducerId`;
    /// a KIP-360 retry may present it after a producer id rotation). Not in the version-0
    /// record: `-1` after a load.
    pub last_producer_id: ProducerId,
    /// The current epoch (`-1` only for a transactional id whose first InitProducerId is
    /// being written).
    pub producer_epoch: ProducerEpoch,
    /// The epoch before the last bump, so a KIP-360 retry of a successful
    /// InitProducerId gets the same answer; `-1` when a new producer took over or after a
    /// load.
    pub last_producer_epoch: ProducerEpoch,
    /// The transaction timeout.
    pub txn_timeout_ms: i32,
    /// The state.
    pub state: TxnState,
    /// The partitions of the current transaction (kept in the Prepare states until the
    /// Complete record, also while markers are being written).
    pub partitions: BTreeSet<(String, i32)>,
    /// When the current transaction started (`-1`: none).
    pub txn_start_ms: i64,
    /// When the metadata last changed (drives transactional id expiry).
    pub last_update_ms: i64,
    /// The state a transition in progress leads to (Kafka's `pendingState`): a record
    /// write is in flight, or (with `CompleteCommit` / `CompleteAbort`) markers are being
    /// written. Requests that would change the metadata meanwhile get
    /// CONCURRENT_TRANSACTIONS.
    pub pending: Option<TxnState>,
}

impl TransactionMetadata {
    /// The metadata of a transactional id seen for the first time (Kafka creates it with
    /// a freshly allocated producer id and no epoch, then bumps the epoch to 0).
    pub(crate) fn fresh(
        transactional_id: &str,
        producer_id: ProducerId,
        txn_timeout_ms: i32,
        now: i64,
    ) -> Self {
        TransactionMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            last_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            txn_start_ms: -1,
            last_update_ms: now,
            pending: None,
        }
    }

    /// The metadata a record holds (Kafka's `readTxnRecordValue`).
    pub fn from_log(transactional_id: &str, v: &TxnLogValue) -> Self {
        TransactionMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id: v.producer_id,
            last_producer_id: v.previous_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms: v.transaction_timeout_ms,
            state: v.state,
            partitions: if v.state == TxnState::Empty {
                BTreeSet::new()
            } else {
                v.partitions.clone()
            },
            txn_start_ms: v.start_timestamp_ms,
            last_update_ms: v.last_update_timestamp_ms,
            pending: None,
        }
    }

    /// The record value of this metadata (written as version 0): every field but
    /// `last_producer_id`, `last_producer_epoch` and `pending`, so also what a reload
    /// from the log is compared by.
    pub fn log_value(&self) -> TxnLogValue {
        TxnLogValue {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            transaction_timeout_ms: self.txn_timeout_ms,
            state: self.state,
            partitions: self.partitions.clone(),
            last_update_timestamp_ms: self.last_update_ms,
            start_timestamp_ms: self.txn_start_ms,
            previous_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            client_transaction_version: 0,
        }
    }

    /// The target of a transition: this metadata, changed by `f`, with no pending state.
    fn target(&self, now: i64, f: impl FnOnce(&mut Self)) -> Self {
        let mut t = self.clone();
        t.pending = None;
        t.last_update_ms = now;
        f(&mut t);
        t
    }

    /// KIP-360's check of the producer id an InitProducerId presents (Kafka's
    /// `isValidProducerId`): the metadata was just created, or the id is the current
    /// one (its epoch is checked by the bump), or it is the previous one with an
    /// exhausted epoch (a retry of the InitProducerId that rotated the id).
    pub(crate) fn accepts_expected(&self, e: ProducerIdAndEpoch) -> bool {
        self.producer_epoch == NO_PRODUCER_EPOCH
            || e.producer_id == self.producer_id
            || (e.producer_id == self.last_producer_id && is_epoch_exhausted(e.producer_epoch))
    }

    /// InitProducerId from Empty / CompleteCommit / CompleteAbort with the same producer
    /// id (Kafka's `prepareIncrementProducerEpoch`): the epoch is bumped, unless this is a
    /// retry of a successful call (the expected epoch is the last one), which gets the
    /// current epoch again.
    pub(crate) fn bump_epoch(
        &self,
        txn_timeout_ms: i32,
        expected_epoch: Option<ProducerEpoch>,
        now: i64,
    ) -> Result<Self, ErrorCode> {
        let bumped = self.producer_epoch.saturating_add(1);
        let (epoch, last) = match expected_epoch {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (bumped, self.producer_epoch)
            }
            Some(e) if e == self.last_producer_epoch => {
                (self.producer_epoch, self.last_producer_epoch)
            }
            Some(_) => return Err(ErrorCode::ProducerFenced),
        };
        Ok(self.target(now, |t| {
            t.last_producer_id = self.producer_id;
            t.producer_epoch = epoch;
            t.last_producer_epoch = last;
            t.txn_timeout_ms = txn_timeout_ms;
            t.state = TxnState::Empty;
            t.partitions.clear();
            t.txn_start_ms = -1;
        }))
    }

    /// InitProducerId when the epoch is exhausted (Kafka's `prepareProducerIdRotation`):
    /// a new producer id at epoch 0. With an expected epoch (a KIP-360 request), the old
    /// epoch is kept as the last one so a retry is recognised.
    pub(crate) fn rotate_producer_id(
        &self,
        new_producer_id: ProducerId,
        txn_timeout_ms: i32,
        record_last_epoch: bool,
        now: i64,
    ) -> Self {
        self.target(now, |t| {
            t.last_producer_id = self.producer_id;
            t.producer_id = new_producer_id;
            t.producer_epoch = 0;
            t.last_producer_epoch = if record_last_epoch {
                self.producer_epoch
            } else {
                NO_PRODUCER_EPOCH
            };
            t.txn_timeout_ms = txn_timeout_ms;
            t.state = TxnState::Empty;
            t.partitions.clear();
            t.txn_start_ms = -1;
        })
    }

    /// The coordinator aborts the open transaction with a bumped epoch, fencing the
    /// producer that opened it (Kafka's `prepareFenceProducerEpoch` followed by the
    /// PrepareAbort of `endTransaction(isFromClient = false)`): the record written is a
    /// PrepareAbort at the bumped epoch, with no last epoch. An epoch already at
    /// `i16::MAX` (only from a log this coordinator did not write) is not bumped.
    pub(crate) fn fence_and_abort(&self, now: i64) -> Self {
        self.target(now, |t| {
            t.producer_epoch = self.producer_epoch.saturating_add(1);
            t.last_producer_epoch = NO_PRODUCER_EPOCH;
            t.state = TxnState::PrepareAbort;
        })
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (Kafka's `prepareAddPartitions`): Ongoing with
    /// the union of the partitions; a new transaction starts now.
    pub(crate) fn add_partitions(&self, added: &[(String, i32)], now: i64) -> Self {
        self.target(now, |t| {
            if matches!(
                self.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ) {
                t.txn_start_ms = now;
            }
            t.state = TxnState::Ongoing;
            t.partitions.extend(added.iter().cloned());
        })
    }

    /// EndTxn from Ongoing (Kafka's `prepareAbortOrCommit` without the KIP-890 epoch
    /// bump): PrepareCommit or PrepareAbort, same epoch and partitions.
    pub(crate) fn prepare_end(&self, commit: bool, now: i64) -> Self {
        self.target(now, |t| {
            t.state = if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            };
        })
    }

    /// After every marker is written (Kafka's `prepareComplete`): CompleteCommit or
    /// CompleteAbort, no partitions, the start time kept.
    pub(crate) fn complete(&self, now: i64) -> Self {
        self.target(now, |t| {
            t.state = if self.state == TxnState::PrepareCommit {
                TxnState::CompleteCommit
            } else {
                TxnState::CompleteAbort
            };
            t.partitions.clear();
        })
    }

    /// Whether the transactional id may expire in this state (Kafka's
    /// `isExpirationAllowed`).
    pub(crate) fn expirable(&self) -> bool {
        matches!(
            self.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// What is in flight for a transactional id besides its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Inflight {
    /// Nothing: `pending` is `None`.
    Idle,
    /// A record write (`pending` is its target state).
    Write(WriteTicket),
    /// The markers of a prepared transaction; the partitions not yet done.
    Markers {
        commit: bool,
        outstanding: BTreeSet<(String, i32)>,
    },
    /// The markers are done; the Complete record is being written (`Some`) or its last
    /// write failed and [`tick`](super::TransactionCoordinator::tick) retries it (`None`).
    Complete(Option<WriteTicket>),
}

/// A transactional id's metadata and what is in flight for it.
#[derive(Clone, Debug)]
pub(crate) struct Txn {
    pub(crate) meta: TransactionMetadata,
    pub(crate) inflight: Inflight,
}

impl Txn {
    pub(crate) fn new(meta: TransactionMetadata) -> Self {
        Txn {
            meta,
            inflight: Inflight::Idle,
        }
    }

    /// Whether a transition is in progress (Kafka's `pendingTransitionInProgress`).
    pub(crate) fn busy(&self) -> bool {
        self.meta.pending.is_some()
    }
}
