//! What happens when work the coordinator asked for is done: a record write completed
//! (Kafka's `appendTransactionToLog` callback and `completeTransitionTo`, and EndTxn's
//! `sendTxnMarkersCallback`), or markers were written (Kafka's
//! `TransactionMarkerChannelManager`: `maybeWriteTxnCompletion`).

use std::collections::BTreeSet;

use strata_proto::ErrorCode;

use super::metadata::{Inflight, Txn};
use super::{
    Action, PartRef, ProducerIdAndEpoch, Reply, SendMarkers, TransactionCoordinator, TxnWrite,
    WriteKind, WriteResult, WriteTicket, Writes,
};
use crate::records::TxnState;

/// The error a client gets for a failed append to the transaction log (Kafka's mapping
/// in `appendTransactionToLog`): unavailable partitions and timeouts become
/// COORDINATOR_NOT_AVAILABLE, a lost leadership or a storage error NOT_COORDINATOR,
/// oversized records UNKNOWN_SERVER_ERROR, anything else itself.
pub fn coordinator_error_for_append(error: ErrorCode) -> ErrorCode {
    match error {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge | ErrorCode::None => {
            ErrorCode::UnknownServerError
        }
        other => other,
    }
}

/// Starts the markers of a transaction whose Prepare record is written: they go to
/// every partition of the transaction, and the metadata is pending Complete until the
/// Complete record is written. A transaction without partitions goes straight to its
/// Complete record.
pub(super) fn start_markers(writes: &mut Writes, part: PartRef, txn: &mut Txn, now: i64) -> Action {
    let commit = txn.meta.state == TxnState::PrepareCommit;
    txn.meta.pending = Some(if commit {
        TxnState::CompleteCommit
    } else {
        TxnState::CompleteAbort
    });
    if txn.meta.partitions.is_empty() {
        let target = txn.meta.complete(now);
        return Action::Write(writes.issue(part, txn, WriteKind::Complete, Some(target)));
    }
    txn.inflight = Inflight::Markers {
        commit,
        outstanding: txn.meta.partitions.clone(),
    };
    Action::SendMarkers(markers_of(part, txn, commit, &txn.meta.partitions))
}

fn markers_of(
    part: PartRef,
    txn: &Txn,
    commit: bool,
    partitions: &BTreeSet<(String, i32)>,
) -> SendMarkers {
    SendMarkers {
        transactional_id: txn.meta.transactional_id.clone(),
        txn_partition: part.id,
        producer_id: txn.meta.producer_id,
        producer_epoch: txn.meta.producer_epoch,
        commit,
        coordinator_epoch: part.coordinator_epoch,
        partitions: partitions.iter().cloned().collect(),
    }
}

impl TransactionCoordinator {
    /// Reports the result of appending a record the coordinator asked for: `Ok` once it
    /// is written and replicated, `Err` with the append's error (mapped for the client
    /// by [`coordinator_error_for_append`]). Every ticket must be reported exactly once;
    /// an unknown ticket yields nothing.
    ///
    /// On success the metadata becomes what the record says, and the result carries the
    /// answer to the request that caused the write (InitProducerId's id and epoch,
    /// AddPartitions / AddOffsets / EndTxn success; CONCURRENT_TRANSACTIONS for an
    /// InitProducerId that had to abort an open transaction first, which its client
    /// retries) plus what follows: markers after a Prepare record (EndTxn is answered
    /// now, before the markers, as Kafka does).
    ///
    /// On failure the metadata is left as it was before the request (a Complete record
    /// is retried by [`tick`](Self::tick) instead). If the partition was unloaded or
    /// reloaded since the write was issued, nothing changes and the client gets
    /// NOT_COORDINATOR.
    pub fn on_write_complete(
        &mut self,
        ticket: WriteTicket,
        result: Result<(), ErrorCode>,
        now: i64,
    ) -> WriteResult {
        let Some(w) = self.writes.pending.remove(&ticket) else {
            return WriteResult::default();
        };
        let stale_error = match result {
            Ok(()) => ErrorCode::NotCoordinator,
            Err(e) => coordinator_error_for_append(e),
        };
        let stale = WriteResult {
            reply: w.kind.reply(stale_error),
            actions: Vec::new(),
        };
        let part = match self.partitions.get_mut(&w.part.id) {
            Some(p) if p.generation == w.part.generation && !p.loading => p,
            _ => return stale,
        };
        let Some(txn) = part.txns.get_mut(&w.txn_id) else {
            return stale;
        };
        let ours = match txn.inflight {
            Inflight::Write(t) | Inflight::Complete(Some(t)) => t == ticket,
            _ => false,
        };
        if !ours {
            return stale;
        }

        if let Err(e) = result {
            let error = coordinator_error_for_append(e);
            tracing::info!(txn = %w.txn_id, ?e, kind = ?w.kind, "transaction log append failed");
            match w.kind {
                // Kafka retries the Complete record while it still leads the partition;
                // the markers are written, so only the record is missing.
                WriteKind::Complete => txn.inflight = Inflight::Complete(None),
                WriteKind::InitProducerId { created: true } => {
                    part.txns.remove(&w.txn_id);
                }
                _ => {
                    txn.meta.pending = None;
                    txn.inflight = Inflight::Idle;
                }
            }
            return WriteResult {
                reply: w.kind.reply(error),
                actions: Vec::new(),
            };
        }

        let Some(target) = w.target else {
            // The tombstone of an expired transactional id.
            part.txns.remove(&w.txn_id);
            return WriteResult::default();
        };
        txn.meta = target;
        txn.inflight = Inflight::Idle;
        let m = &txn.meta;
        let reply = match w.kind {
            WriteKind::InitProducerId { .. } => {
                Some(Reply::InitProducerId(Ok(ProducerIdAndEpoch {
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                })))
            }
            WriteKind::AddPartitions => Some(Reply::AddPartitions(ErrorCode::None)),
            WriteKind::AddOffsets => Some(Reply::AddOffsets(ErrorCode::None)),
            WriteKind::EndTxn => Some(Reply::EndTxn(ErrorCode::None)),
            WriteKind::Fence { from_init } => from_init.then_some(Reply::InitProducerId(Err(
                ErrorCode::ConcurrentTransactions,
            ))),
            WriteKind::Complete | WriteKind::Expire => None,
        };
        let mut actions = Vec::new();
        if matches!(w.kind, WriteKind::EndTxn | WriteKind::Fence { .. }) {
            actions.push(start_markers(&mut self.writes, w.part, txn, now));
        }
        WriteResult { reply, actions }
    }

    /// Reports markers written: `done` are partitions of `markers` whose marker is
    /// written (or that need none any more: a deleted partition, or
    /// UNSUPPORTED_FOR_MESSAGE_FORMAT, as Kafka drops them). Retriable failures
    /// (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, timeouts)
    /// are the caller's to retry and are not reported; on INVALID_PRODUCER_EPOCH or
    /// TRANSACTION_COORDINATOR_FENCED the caller stops sending and reports nothing (a
    /// newer coordinator carries on).
    ///
    /// Once every partition is done, returns the Complete record to write. Reports for
    /// markers this coordinator no longer waits for (another producer epoch, another
    /// coordinator epoch, an unloaded partition) are ignored.
    pub fn on_markers_complete(
        &mut self,
        markers: &SendMarkers,
        done: &[(String, i32)],
        now: i64,
    ) -> Option<TxnWrite> {
        let part = self.partitions.get_mut(&markers.txn_partition)?;
        if part.loading || part.coordinator_epoch != markers.coordinator_epoch {
            return None;
        }
        let pr = part.part_ref(markers.txn_partition);
        let txn = part.txns.get_mut(&markers.transactional_id)?;
        if txn.meta.producer_id != markers.producer_id
            || txn.meta.producer_epoch != markers.producer_epoch
        {
            return None;
        }
        let Inflight::Markers {
            commit,
            outstanding,
        } = &mut txn.inflight
        else {
            return None;
        };
        if *commit != markers.commit {
            return None;
        }
        for p in done {
            outstanding.remove(p);
        }
        if !outstanding.is_empty() {
            return None;
        }
        let target = txn.meta.complete(now);
        Some(
            self.writes
                .issue(pr, txn, WriteKind::Complete, Some(target)),
        )
    }

    /// The markers still outstanding for every prepared transaction (e.g. to hand them
    /// again to a marker sender that restarted).
    pub fn pending_markers(&self) -> Vec<SendMarkers> {
        let mut out = Vec::new();
        for (id, part) in self.partitions.iter().filter(|(_, p)| !p.loading) {
            for txn in part.txns.values() {
                if let Inflight::Markers {
                    commit,
                    outstanding,
                } = &txn.inflight
                {
                    out.push(markers_of(part.part_ref(*id), txn, *commit, outstanding));
                }
            }
        }
        out
    }
}
