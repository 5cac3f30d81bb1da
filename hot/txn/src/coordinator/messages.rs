//! What the coordinator hands back to its caller: answers to requests ([`Outcome`],
//! [`Reply`]), the effects it asks the caller to carry out ([`Action`]: a
//! [`TxnWrite`] to the transaction log or [`SendMarkers`] to partition leaders), and the
//! answers of DescribeTransactions and ListTransactions.

use bytes::Bytes;
use strata_proto::{ErrorCode, ProducerEpoch, ProducerId};

use crate::records::TxnState;

/// Identifies one record write the coordinator asked for; the caller hands it back to
/// [`TransactionCoordinator::on_write_complete`](crate::TransactionCoordinator::on_write_complete)
/// exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriteTicket(pub u64);

/// A record to append to a `__transaction_state` partition (replicated, `acks=all`,
/// uncompressed, as Kafka's `TransactionLog` requires), after which the caller reports the
/// result with [`TransactionCoordinator::on_write_complete`](crate::TransactionCoordinator::on_write_complete).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnWrite {
    /// Hand back to `on_write_complete`.
    pub ticket: WriteTicket,
    /// The transactional id the record is about.
    pub transactional_id: String,
    /// The `__transaction_state` partition to append to.
    pub partition: i32,
    /// The coordinator epoch (that partition's leader epoch) the write was issued under:
    /// the append must fail if this broker no longer leads the partition at that epoch.
    pub coordinator_epoch: i32,
    /// The record key ([`txn_key`](crate::txn_key)).
    pub key: Bytes,
    /// The record value, `None` for a tombstone (the transactional id expired).
    pub value: Option<Bytes>,
}

/// Transaction markers to write: the caller sends WriteTxnMarkers (one entry per
/// leader) for `partitions`, retries retriable failures itself, and reports the
/// partitions that are done with
/// [`TransactionCoordinator::on_markers_complete`](crate::TransactionCoordinator::on_markers_complete)
/// (possibly in several calls), which then yields the Complete record's write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendMarkers {
    /// The transactional id whose transaction ends.
    pub transactional_id: String,
    /// The `__transaction_state` partition that owns it (for cancelling on unload).
    pub txn_partition: i32,
    /// The producer id of the transaction.
    pub producer_id: ProducerId,
    /// The producer epoch to put in the markers.
    pub producer_epoch: ProducerEpoch,
    /// Commit (`true`) or abort marker.
    pub commit: bool,
    /// The coordinator epoch to put in the markers.
    pub coordinator_epoch: i32,
    /// The partitions to write a marker to, ordered by topic then partition.
    pub partitions: Vec<(String, i32)>,
}

/// Something the caller must do for the coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Append a record, then call `on_write_complete`.
    Write(TxnWrite),
    /// Send transaction markers, then call `on_markers_complete`.
    SendMarkers(SendMarkers),
}

/// A producer id and epoch handed out by InitProducerId.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProducerIdAndEpoch {
    /// The producer id.
    pub producer_id: ProducerId,
    /// The epoch.
    pub producer_epoch: ProducerEpoch,
}

/// The answer to an InitProducerId request.
pub type InitProducerIdResult = Result<ProducerIdAndEpoch, ErrorCode>;

/// What a request method returns: the answer, or a record to write first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Answer the client now with this.
    Reply(T),
    /// Append this record; the answer comes from `on_write_complete` with its ticket.
    Write(TxnWrite),
}

impl<T> Outcome<T> {
    /// The immediate answer, if any.
    pub fn reply(self) -> Option<T> {
        match self {
            Outcome::Reply(r) => Some(r),
            Outcome::Write(_) => None,
        }
    }

    /// The write to do, if any.
    pub fn write(self) -> Option<TxnWrite> {
        match self {
            Outcome::Reply(_) => None,
            Outcome::Write(w) => Some(w),
        }
    }
}

/// A deferred answer to the request whose record write completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// InitProducerId.
    InitProducerId(InitProducerIdResult),
    /// AddPartitionsToTxn (the error for every partition of the request).
    AddPartitions(ErrorCode),
    /// AddOffsetsToTxn.
    AddOffsets(ErrorCode),
    /// EndTxn.
    EndTxn(ErrorCode),
}

/// What [`on_write_complete`](crate::TransactionCoordinator::on_write_complete) returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteResult {
    /// The answer to the client request that caused the write; `None` for the
    /// coordinator's own writes (Complete records, timeouts, expiry, failover recovery).
    pub reply: Option<Reply>,
    /// What to do next (markers after a Prepare record, or the Complete write of a
    /// transaction with no partitions).
    pub actions: Vec<Action>,
}

/// One transaction in a DescribeTransactions answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnDescription {
    /// The transactional id.
    pub transactional_id: String,
    /// The current producer id.
    pub producer_id: ProducerId,
    /// The current producer epoch.
    pub producer_epoch: ProducerEpoch,
    /// The state (report [`TxnState::name`]).
    pub state: TxnState,
    /// The transaction timeout.
    pub transaction_timeout_ms: i32,
    /// When the current transaction started (`-1` if none).
    pub transaction_start_time_ms: i64,
    /// The transaction's partitions, grouped by topic.
    pub topics: Vec<(String, Vec<i32>)>,
}

/// The filters of a ListTransactions request (each empty / negative = no filter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only these state names.
    pub states: Vec<String>,
    /// Only these producer ids.
    pub producer_ids: Vec<ProducerId>,
    /// Only transactions running for longer than this (ListTransactions v1, KIP-994);
    /// negative = no filter.
    pub duration_ms: i64,
}

impl ListFilter {
    /// No filter at all.
    pub fn all() -> Self {
        ListFilter {
            duration_ms: -1,
            ..ListFilter::default()
        }
    }
}

/// One transaction in a ListTransactions answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedTxn {
    /// The transactional id.
    pub transactional_id: String,
    /// The current producer id.
    pub producer_id: ProducerId,
    /// The state.
    pub state: TxnState,
}

/// A ListTransactions answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnListing {
    /// State filters that name no state (Kafka returns them to the client).
    pub unknown_state_filters: Vec<String>,
    /// The matching transactions, ordered by transactional id.
    pub transactions: Vec<ListedTxn>,
}
