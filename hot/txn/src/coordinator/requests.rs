//! The producer's requests (Kafka's `TransactionCoordinator.handle*`): InitProducerId
//! (with KIP-360's producer id and epoch recovery), AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, and KIP-890's verification of a partition in a
//! transaction.
//!
//! The checks run in Kafka's order, so a client sees the error Kafka would give it.
//! PRODUCER_FENCED is returned for every API version; for older versions Kafka answers
//! INVALID_PRODUCER_EPOCH instead, which [`fenced_error_for_version`] does.

use strata_proto::{ErrorCode, ProducerEpoch, ProducerId};

use super::metadata::{TransactionMetadata, Txn, is_epoch_exhausted};
use super::{
    InitProducerIdResult, Outcome, ProducerIdAndEpoch, TransactionCoordinator, WriteKind, route,
    route_existing,
};
use crate::records::{self, TxnState};

/// Kafka's `__consumer_offsets` topic, whose partition AddOffsetsToTxn adds.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The transactional APIs whose answer depends on the version for a fenced producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnApi {
    /// InitProducerId (PRODUCER_FENCED from version 4).
    InitProducerId,
    /// AddPartitionsToTxn (from version 2).
    AddPartitionsToTxn,
    /// AddOffsetsToTxn (from version 2).
    AddOffsetsToTxn,
    /// EndTxn (from version 2).
    EndTxn,
}

/// The error to send for `error` to a client using `version` of `api`: clients older
/// than KIP-588 do not know PRODUCER_FENCED and get INVALID_PRODUCER_EPOCH (handled the
/// same way), as Kafka's `KafkaApis` answers them.
pub fn fenced_error_for_version(api: TxnApi, version: i16, error: ErrorCode) -> ErrorCode {
    let first = match api {
        TxnApi::InitProducerId => 4,
        TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
    };
    if error == ErrorCode::ProducerFenced && version < first {
        ErrorCode::InvalidProducerEpoch
    } else {
        error
    }
}

impl TransactionCoordinator {
    /// InitProducerId for a transactional id (Kafka's `handleInitProducerId`).
    ///
    /// `expected` is the producer id and epoch a KIP-360 client presents to recover
    /// (`None` when the request carries -1/-1; a request with only one of them set is
    /// INVALID_REQUEST). Producer ids come from `allocate` (called at most once: for a
    /// new transactional id, or when the epoch is exhausted); its error is the answer.
    ///
    /// - INVALID_REQUEST for an empty id, INVALID_TRANSACTION_TIMEOUT for a timeout not
    ///   in `1..=transaction_max_timeout_ms`, NOT_COORDINATOR /
    ///   COORDINATOR_LOAD_IN_PROGRESS for a partition not served here;
    /// - CONCURRENT_TRANSACTIONS while a transition is in progress or the transaction is
    ///   being committed or aborted (the client retries);
    /// - PRODUCER_FENCED when `expected` is neither the current producer nor a retry;
    /// - from Empty / CompleteCommit / CompleteAbort: the epoch is bumped (a new producer
    ///   id at epoch 0 once it reaches `i16::MAX - 1`), written, then answered;
    /// - from Ongoing: the open transaction of the previous producer is aborted with a
    ///   bumped epoch (fencing it) and the client gets CONCURRENT_TRANSACTIONS once that
    ///   is written (it retries, and then gets the next epoch).
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        now: i64,
        allocate: &mut dyn FnMut() -> Result<ProducerId, ErrorCode>,
    ) -> Outcome<InitProducerIdResult> {
        let reply = |e| Outcome::Reply(Err(e));
        if transactional_id.is_empty() {
            return reply(ErrorCode::InvalidRequest);
        }
        if transaction_timeout_ms <= 0
            || transaction_timeout_ms > self.config.transaction_max_timeout_ms
        {
            return reply(ErrorCode::InvalidTransactionTimeout);
        }
        if expected.is_some_and(|e| e.producer_id < 0 || e.producer_epoch < 0) {
            return reply(ErrorCode::InvalidRequest);
        }
        let count = self.config.txn_state_partitions;
        let (pr, txns) = match route(&mut self.partitions, count, transactional_id) {
            Ok(r) => r,
            Err(e) => return reply(e),
        };
        let created = !txns.contains_key(transactional_id);
        if created {
            let producer_id = match allocate() {
                Ok(p) => p,
                Err(e) => return reply(e),
            };
            let meta = TransactionMetadata::fresh(
                transactional_id,
                producer_id,
                transaction_timeout_ms,
                now,
            );
            txns.insert(transactional_id.to_string(), Txn::new(meta));
        }
        let Some(txn) = txns.get_mut(transactional_id) else {
            return reply(ErrorCode::UnknownServerError);
        };
        let m = &txn.meta;
        if txn.busy() {
            return reply(ErrorCode::ConcurrentTransactions);
        }
        if expected.is_some_and(|e| !m.accepts_expected(e)) {
            return reply(ErrorCode::ProducerFenced);
        }
        let (kind, target) = match m.state {
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let rotate = is_epoch_exhausted(m.producer_epoch)
                    && expected.is_none_or(|e| e.producer_epoch == m.producer_epoch);
                let target = if rotate {
                    match allocate() {
                        Ok(p) => {
                            m.rotate_producer_id(p, transaction_timeout_ms, expected.is_some(), now)
                        }
                        Err(e) => return reply(e),
                    }
                } else {
                    let expected_epoch = expected.map(|e| e.producer_epoch);
                    match m.bump_epoch(transaction_timeout_ms, expected_epoch, now) {
                        Ok(t) => t,
                        Err(e) => return reply(e),
                    }
                };
                (WriteKind::InitProducerId { created }, target)
            }
            TxnState::Ongoing => (WriteKind::Fence { from_init: true }, m.fence_and_abort(now)),
            // Being committed or aborted (or, for a PrepareEpochFence loaded from a log
            // Kafka never writes, about to be): the client retries.
            TxnState::PrepareCommit
            | TxnState::PrepareAbort
            | TxnState::PrepareEpochFence
            | TxnState::Dead => return reply(ErrorCode::ConcurrentTransactions),
        };
        Outcome::Write(self.writes.issue(pr, txn, kind, Some(target)))
    }

    /// AddPartitionsToTxn (Kafka's `handleAddPartitionsToTransaction`): the error for
    /// all of `partitions`.
    ///
    /// INVALID_PRODUCER_ID_MAPPING for an unknown id or another producer id,
    /// PRODUCER_FENCED for another epoch, CONCURRENT_TRANSACTIONS while a transition is
    /// in progress or the transaction is being committed or aborted. If the transaction
    /// is Ongoing and has every partition already, success at once; otherwise the
    /// transaction (started now if none was open) with the partitions added is written,
    /// then answered.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[(String, i32)],
        now: i64,
    ) -> Outcome<ErrorCode> {
        self.add(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            now,
            WriteKind::AddPartitions,
        )
    }

    /// AddOffsetsToTxn (Kafka's `handleAddOffsetsToTransaction`): adds the
    /// `__consumer_offsets` partition of `group_id` (given the offsets topic's
    /// partition count) to the transaction, as [`add_partitions`](Self::add_partitions)
    /// does (the write's answer is a [`Reply::AddOffsets`](super::Reply::AddOffsets)).
    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        group_id: &str,
        offsets_topic_partitions: i32,
        now: i64,
    ) -> Outcome<ErrorCode> {
        let partition = offsets_partition(group_id, offsets_topic_partitions);
        self.add(
            transactional_id,
            producer_id,
            producer_epoch,
            &[partition],
            now,
            WriteKind::AddOffsets,
        )
    }

    fn add(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[(String, i32)],
        now: i64,
        kind: WriteKind,
    ) -> Outcome<ErrorCode> {
        let count = self.config.txn_state_partitions;
        let (pr, txn) = match route_existing(&mut self.partitions, count, transactional_id) {
            Ok(r) => r,
            Err(e) => return Outcome::Reply(e),
        };
        let m = &txn.meta;
        let error = if m.producer_id != producer_id {
            ErrorCode::InvalidProducerIdMapping
        } else if m.producer_epoch != producer_epoch {
            ErrorCode::ProducerFenced
        } else if txn.busy()
            || matches!(
                m.state,
                TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
            )
        {
            ErrorCode::ConcurrentTransactions
        } else if m.state == TxnState::Ongoing
            && partitions.iter().all(|p| m.partitions.contains(p))
        {
            ErrorCode::None
        } else {
            let target = m.add_partitions(partitions, now);
            return Outcome::Write(self.writes.issue(pr, txn, kind, Some(target)));
        };
        Outcome::Reply(error)
    }

    /// EndTxn (Kafka's `handleEndTransaction` for clients without KIP-890's epoch bump
    /// per transaction).
    ///
    /// INVALID_PRODUCER_ID_MAPPING for an unknown id or another producer id,
    /// PRODUCER_FENCED for another epoch, CONCURRENT_TRANSACTIONS while a transition is
    /// in progress. Then by state: Ongoing → the PrepareCommit / PrepareAbort record is
    /// written, answered (success), and markers follow; a retry of an EndTxn that
    /// completed (same result) succeeds at once, a retry of one whose markers are
    /// being written gets CONCURRENT_TRANSACTIONS; ending a transaction the other way
    /// than it already ends, or one that never started (Empty), is INVALID_TXN_STATE.
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        commit: bool,
        now: i64,
    ) -> Outcome<ErrorCode> {
        let count = self.config.txn_state_partitions;
        let (pr, txn) = match route_existing(&mut self.partitions, count, transactional_id) {
            Ok(r) => r,
            Err(e) => return Outcome::Reply(e),
        };
        let m = &txn.meta;
        let error = if m.producer_id != producer_id {
            ErrorCode::InvalidProducerIdMapping
        } else if m.producer_epoch != producer_epoch {
            ErrorCode::ProducerFenced
        } else if txn.busy() {
            ErrorCode::ConcurrentTransactions
        } else {
            match (m.state, commit) {
                (TxnState::Ongoing, _) => {
                    let target = m.prepare_end(commit, now);
                    let write = self.writes.issue(pr, txn, WriteKind::EndTxn, Some(target));
                    return Outcome::Write(write);
                }
                (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                    ErrorCode::None
                }
                (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                    ErrorCode::ConcurrentTransactions
                }
                (TxnState::PrepareEpochFence | TxnState::Dead, _) => {
                    ErrorCode::ConcurrentTransactions
                }
                _ => ErrorCode::InvalidTxnState,
            }
        };
        Outcome::Reply(error)
    }

    /// KIP-890 part 1 verification (AddPartitionsToTxn v4+ with `verify_only`, Kafka's
    /// `handleVerifyPartitionsInTransaction`): whether `(topic, partition)` is in the
    /// producer's open transaction. Read-only; no pending-state check (the append is
    /// validated again by the partition). `Ok(false)`: not in the transaction (Kafka
    /// answers TRANSACTION_ABORTABLE, code 120, from 3.8, INVALID_TXN_STATE before).
    /// Errors: INVALID_REQUEST, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
    /// INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS (being
    /// committed or aborted).
    pub fn verify_partition(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        topic: &str,
        partition: i32,
    ) -> Result<bool, ErrorCode> {
        if transactional_id.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        let part = match self.partitions.get(&self.partition_for(transactional_id)) {
            None => return Err(ErrorCode::NotCoordinator),
            Some(p) if p.loading => return Err(ErrorCode::CoordinatorLoadInProgress),
            Some(p) => p,
        };
        let m = &part
            .txns
            .get(transactional_id)
            .ok_or(ErrorCode::InvalidProducerIdMapping)?
            .meta;
        if m.producer_id != producer_id {
            Err(ErrorCode::InvalidProducerIdMapping)
        } else if m.producer_epoch != producer_epoch {
            Err(ErrorCode::ProducerFenced)
        } else if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            Err(ErrorCode::ConcurrentTransactions)
        } else {
            Ok(m.state == TxnState::Ongoing
                && m.partitions.contains(&(topic.to_string(), partition)))
        }
    }
}

/// The `__consumer_offsets` partition AddOffsetsToTxn adds for a group.
pub fn offsets_partition(group_id: &str, offsets_topic_partitions: i32) -> (String, i32) {
    (
        CONSUMER_OFFSETS_TOPIC.to_string(),
        records::partition_for(group_id, offsets_topic_partitions),
    )
}
