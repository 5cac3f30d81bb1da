//! The transaction coordinator (Kafka's `TransactionCoordinator` with the cache and
//! timers of its `TransactionStateManager`): owns the `__transaction_state` partitions
//! this broker leads, the metadata of every transactional id in them, and the record
//! writes in flight; loads a partition from its log and resumes the transactions it
//! finds half-done; aborts timed-out transactions and expires idle transactional ids
//! ([`TransactionCoordinator::tick`]); answers DescribeTransactions and
//! ListTransactions.
//!
//! - [`messages`]: the outcomes and effects handed to the caller;
//! - [`metadata`]: one transactional id's metadata and its transitions;
//! - [`requests`]: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and the
//!   KIP-890 verification;
//! - [`completion`]: what happens when a record write or markers complete;
//! - [`queries`]: DescribeTransactions and ListTransactions.

mod completion;
mod messages;
mod metadata;
mod queries;
mod requests;

use std::collections::BTreeMap;

use strata_proto::ErrorCode;

pub use self::completion::coordinator_error_for_append;
pub use self::messages::{
    Action, InitProducerIdResult, ListFilter, ListedTxn, Outcome, ProducerIdAndEpoch, Reply,
    SendMarkers, TxnDescription, TxnListing, TxnWrite, WriteResult, WriteTicket,
};
use self::metadata::{Inflight, Txn};
pub use self::metadata::{TransactionMetadata, is_epoch_exhausted};
pub use self::requests::{
    CONSUMER_OFFSETS_TOPIC, TxnApi, fenced_error_for_version, offsets_partition,
};
use crate::records::{self, DecodeError, TxnState};

/// Coordinator settings (Kafka's `transaction.*` broker configs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the largest transaction timeout a producer may ask
    /// for.
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: how long a transactional id with no transaction
    /// in progress is kept after its last update.
    pub transactional_id_expiration_ms: i64,
    /// `transaction.state.log.num.partitions`.
    pub txn_state_partitions: i32,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            txn_state_partitions: 50,
        }
    }
}

/// Why [`TransactionCoordinator::load`] stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The partition is not being loaded (call `begin_load` first).
    #[error("partition {0} is not being loaded")]
    NotLoading(i32),
    /// A record did not decode; the records before it were applied.
    #[error("record {index} of the load: {error}")]
    Record {
        /// Its position among the records of this `load` call.
        index: usize,
        /// What was wrong with it.
        error: DecodeError,
    },
}

/// One `__transaction_state` partition this coordinator leads (or is loading).
#[derive(Debug)]
struct TxnPartition {
    coordinator_epoch: i32,
    /// Distinguishes successive loads (even at the same coordinator epoch), so a write
    /// issued under an earlier one is never applied to a later one.
    generation: u64,
    loading: bool,
    txns: BTreeMap<String, Txn>,
}

/// Where a write goes and under which load.
#[derive(Clone, Copy, Debug)]
struct PartRef {
    id: i32,
    coordinator_epoch: i32,
    generation: u64,
}

impl TxnPartition {
    fn part_ref(&self, id: i32) -> PartRef {
        PartRef {
            id,
            coordinator_epoch: self.coordinator_epoch,
            generation: self.generation,
        }
    }
}

/// What a write was for: decides the answer and what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteKind {
    InitProducerId {
        created: bool,
    },
    /// The coordinator's abort with a bumped epoch: for an InitProducerId that found an
    /// open transaction (`from_init`), a timed-out transaction, or a loaded
    /// PrepareEpochFence.
    Fence {
        from_init: bool,
    },
    AddPartitions,
    AddOffsets,
    EndTxn,
    Complete,
    Expire,
}

impl WriteKind {
    /// The answer to the client waiting for this write, given an error.
    fn reply(self, error: ErrorCode) -> Option<Reply> {
        match self {
            WriteKind::InitProducerId { .. } | WriteKind::Fence { from_init: true } => {
                Some(Reply::InitProducerId(Err(error)))
            }
            WriteKind::AddPartitions => Some(Reply::AddPartitions(error)),
            WriteKind::AddOffsets => Some(Reply::AddOffsets(error)),
            WriteKind::EndTxn => Some(Reply::EndTxn(error)),
            WriteKind::Fence { from_init: false } | WriteKind::Complete | WriteKind::Expire => None,
        }
    }
}

#[derive(Debug)]
struct PendingWrite {
    txn_id: String,
    part: PartRef,
    kind: WriteKind,
    /// The metadata once the record is written; `None` for a tombstone.
    target: Option<TransactionMetadata>,
}

/// The record writes in flight.
#[derive(Debug, Default)]
struct Writes {
    next: u64,
    pending: BTreeMap<WriteTicket, PendingWrite>,
}

impl Writes {
    /// Asks for `target`'s record (a tombstone for `None`) and marks `txn` pending.
    fn issue(
        &mut self,
        part: PartRef,
        txn: &mut Txn,
        kind: WriteKind,
        target: Option<TransactionMetadata>,
    ) -> TxnWrite {
        let ticket = WriteTicket(self.next);
        self.next += 1;
        txn.meta.pending = Some(target.as_ref().map_or(TxnState::Dead, |t| t.state));
        txn.inflight = match kind {
            WriteKind::Complete => Inflight::Complete(Some(ticket)),
            _ => Inflight::Write(ticket),
        };
        let id = &txn.meta.transactional_id;
        let write = TxnWrite {
            ticket,
            transactional_id: id.clone(),
            partition: part.id,
            coordinator_epoch: part.coordinator_epoch,
            key: records::txn_key(id),
            value: target.as_ref().map(|t| records::txn_value(&t.log_value())),
        };
        self.pending.insert(
            ticket,
            PendingWrite {
                txn_id: id.clone(),
                part,
                kind,
                target,
            },
        );
        write
    }
}

/// The transaction coordinator for every `__transaction_state` partition this broker
/// leads.
///
/// Sans-IO: time comes in as `now` (ms), nothing blocks, and nothing is written by the
/// coordinator itself. A request method answers at once ([`Outcome::Reply`]) or asks
/// for a record to be appended first ([`Outcome::Write`]); the caller appends it to the
/// given partition (`acks=all`) and calls [`on_write_complete`](Self::on_write_complete)
/// with the ticket, which yields the answer and what follows (markers after a Prepare
/// record). Markers are reported back with [`on_markers_complete`](Self::on_markers_complete),
/// which yields the Complete record. [`tick`](Self::tick) aborts timed-out transactions,
/// expires idle transactional ids and retries failed Complete writes.
///
/// Partitions come and go with leadership: [`begin_load`](Self::begin_load),
/// [`load`](Self::load), [`resume`](Self::resume) (or all three:
/// [`load_partition`](Self::load_partition)) and
/// [`unload_partition`](Self::unload_partition). Requests for a transactional id of a
/// partition not led here answer NOT_COORDINATOR, of one still loading
/// COORDINATOR_LOAD_IN_PROGRESS.
#[derive(Debug)]
pub struct TransactionCoordinator {
    config: TxnConfig,
    partitions: BTreeMap<i32, TxnPartition>,
    writes: Writes,
    next_generation: u64,
}

/// The partition of `txn_id` if this coordinator serves it, with its transactions.
fn route<'a>(
    partitions: &'a mut BTreeMap<i32, TxnPartition>,
    count: i32,
    txn_id: &str,
) -> Result<(PartRef, &'a mut BTreeMap<String, Txn>), ErrorCode> {
    let id = records::partition_for(txn_id, count);
    match partitions.get_mut(&id) {
        None => Err(ErrorCode::NotCoordinator),
        Some(p) if p.loading => Err(ErrorCode::CoordinatorLoadInProgress),
        Some(p) => Ok((p.part_ref(id), &mut p.txns)),
    }
}

/// The state of an existing transactional id for a request from its producer: an empty
/// id is INVALID_REQUEST and an id this coordinator does not know is
/// INVALID_PRODUCER_ID_MAPPING, besides [`route`]'s answers.
fn route_existing<'a>(
    partitions: &'a mut BTreeMap<i32, TxnPartition>,
    count: i32,
    txn_id: &str,
) -> Result<(PartRef, &'a mut Txn), ErrorCode> {
    if txn_id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    let (pr, txns) = route(partitions, count, txn_id)?;
    let txn = txns
        .get_mut(txn_id)
        .ok_or(ErrorCode::InvalidProducerIdMapping)?;
    Ok((pr, txn))
}

impl TransactionCoordinator {
    /// A coordinator that leads no partition yet.
    pub fn new(config: TxnConfig) -> Self {
        TransactionCoordinator {
            config,
            partitions: BTreeMap::new(),
            writes: Writes::default(),
            next_generation: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// The `__transaction_state` partition of a transactional id.
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        records::partition_for(transactional_id, self.config.txn_state_partitions)
    }

    /// The partitions led here: `(partition, coordinator epoch, still loading)`.
    pub fn partitions(&self) -> Vec<(i32, i32, bool)> {
        self.partitions
            .iter()
            .map(|(id, p)| (*id, p.coordinator_epoch, p.loading))
            .collect()
    }

    /// A transactional id's metadata, if its partition is led (or loading) here.
    pub fn metadata(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        let p = self.partitions.get(&self.partition_for(transactional_id))?;
        p.txns.get(transactional_id).map(|t| &t.meta)
    }

    /// Every transactional id's metadata, by partition then id.
    pub fn transactions(&self) -> impl Iterator<Item = &TransactionMetadata> {
        self.partitions
            .values()
            .flat_map(|p| p.txns.values().map(|t| &t.meta))
    }

    /// Starts loading `partition` after this broker became its leader at
    /// `coordinator_epoch` (Kafka's `onElection`): whatever was held for it before is
    /// dropped, and its transactional ids answer COORDINATOR_LOAD_IN_PROGRESS until
    /// [`resume`](Self::resume).
    pub fn begin_load(&mut self, partition: i32, coordinator_epoch: i32) {
        self.next_generation += 1;
        self.partitions.insert(
            partition,
            TxnPartition {
                coordinator_epoch,
                generation: self.next_generation,
                loading: true,
                txns: BTreeMap::new(),
            },
        );
    }

    /// Replays records of the loading `partition`, in log order (call as often as
    /// needed, e.g. once per fetched chunk): the latest record of a transactional id
    /// wins, a tombstone (or a Dead record) removes it. Records with a key version Kafka
    /// does not know are skipped (as Kafka does); a record that does not decode stops the
    /// call with [`LoadError::Record`] (the records before it are applied). Returns how
    /// many records were applied.
    pub fn load<K, V>(
        &mut self,
        partition: i32,
        records: impl IntoIterator<Item = (K, Option<V>)>,
    ) -> Result<usize, LoadError>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let part = match self.partitions.get_mut(&partition) {
            Some(p) if p.loading => p,
            _ => return Err(LoadError::NotLoading(partition)),
        };
        let mut applied = 0;
        for (index, (key, value)) in records.into_iter().enumerate() {
            match records::decode_record(key.as_ref(), value.as_ref().map(|v| v.as_ref())) {
                // Kafka never writes Dead (it writes the tombstone): a Dead record is
                // taken for one rather than leave the id stuck.
                Ok((id, Some(v))) if v.state != TxnState::Dead => {
                    let meta = TransactionMetadata::from_log(&id, &v);
                    part.txns.insert(id, Txn::new(meta));
                }
                Ok((id, _)) => {
                    part.txns.remove(&id);
                }
                Err(DecodeError::UnknownKeyVersion(v)) => {
                    tracing::warn!(
                        partition,
                        v,
                        "skipping a transaction log record with an unknown key version"
                    );
                    continue;
                }
                Err(error) => return Err(LoadError::Record { index, error }),
            }
            applied += 1;
        }
        Ok(applied)
    }

    /// Ends the load of `partition`: its transactional ids are served from now on, and
    /// the transactions the previous coordinator left half-done are carried on — markers
    /// for every one in PrepareCommit / PrepareAbort (all its partitions: markers are
    /// idempotent), and the abort write for a PrepareEpochFence (with a bumped epoch).
    /// Ongoing transactions are left to time out.
    pub fn resume(&mut self, partition: i32, now: i64) -> Vec<Action> {
        let Some(part) = self.partitions.get_mut(&partition) else {
            return Vec::new();
        };
        if !part.loading {
            return Vec::new();
        }
        part.loading = false;
        let pr = part.part_ref(partition);
        let mut out = Vec::new();
        for txn in part.txns.values_mut() {
            match txn.meta.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort => {
                    out.push(completion::start_markers(&mut self.writes, pr, txn, now));
                }
                TxnState::PrepareEpochFence => {
                    let target = txn.meta.fence_and_abort(now);
                    let kind = WriteKind::Fence { from_init: false };
                    out.push(Action::Write(self.writes.issue(
                        pr,
                        txn,
                        kind,
                        Some(target),
                    )));
                }
                _ => {}
            }
        }
        out
    }

    /// [`begin_load`](Self::begin_load), [`load`](Self::load) and
    /// [`resume`](Self::resume) in one go. On a record that does not decode the
    /// partition stays loading (the caller decides: unload it, or resume with what was
    /// loaded, as Kafka does after a load error).
    pub fn load_partition<K, V>(
        &mut self,
        partition: i32,
        coordinator_epoch: i32,
        records: impl IntoIterator<Item = (K, Option<V>)>,
        now: i64,
    ) -> Result<Vec<Action>, LoadError>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.begin_load(partition, coordinator_epoch);
        self.load(partition, records)?;
        Ok(self.resume(partition, now))
    }

    /// Forgets `partition` after this broker stopped leading it (Kafka's
    /// `onResignation`). Writes still in flight for it answer NOT_COORDINATOR when they
    /// complete; its markers should be cancelled (their completion is ignored).
    /// Returns whether the partition was held.
    pub fn unload_partition(&mut self, partition: i32) -> bool {
        self.partitions.remove(&partition).is_some()
    }

    /// Aborts timed-out transactions, expires idle transactional ids and retries
    /// Complete records whose write failed, returning the writes to do (Kafka's
    /// `abortTimedOutTransactions` and `removeExpiredTransactionalIds`):
    /// - an Ongoing transaction with `txn_start + timeout < now` is aborted by the
    ///   coordinator with a bumped epoch (fencing its producer), then markers and
    ///   CompleteAbort follow as for EndTxn;
    /// - a transactional id in Empty / CompleteCommit / CompleteAbort not updated for
    ///   `transactional_id_expiration_ms` gets a tombstone and is removed once written.
    ///
    /// Transactional ids with a transition in progress are left alone.
    pub fn tick(&mut self, now: i64) -> Vec<Action> {
        let expiration = self.config.transactional_id_expiration_ms;
        let mut out = Vec::new();
        for (id, part) in self.partitions.iter_mut().filter(|(_, p)| !p.loading) {
            let pr = part.part_ref(*id);
            for txn in part.txns.values_mut() {
                let m = &txn.meta;
                let (kind, target) = match &txn.inflight {
                    Inflight::Complete(None) => (WriteKind::Complete, Some(m.complete(now))),
                    Inflight::Idle if m.state == TxnState::PrepareEpochFence => (
                        WriteKind::Fence { from_init: false },
                        Some(m.fence_and_abort(now)),
                    ),
                    Inflight::Idle
                        if m.state == TxnState::Ongoing
                            && m.txn_start_ms.saturating_add(i64::from(m.txn_timeout_ms)) < now =>
                    {
                        tracing::info!(txn = %m.transactional_id, "aborting a timed-out transaction");
                        (
                            WriteKind::Fence { from_init: false },
                            Some(m.fence_and_abort(now)),
                        )
                    }
                    Inflight::Idle
                        if m.expirable() && m.last_update_ms <= now.saturating_sub(expiration) =>
                    {
                        (WriteKind::Expire, None)
                    }
                    _ => continue,
                };
                out.push(Action::Write(self.writes.issue(pr, txn, kind, target)));
            }
        }
        out
    }

    /// The earliest time at which [`tick`](Self::tick) has something to do, if any
    /// (`i64::MIN` when something is due already, e.g. a failed Complete write).
    pub fn next_deadline(&self) -> Option<i64> {
        let expiration = self.config.transactional_id_expiration_ms;
        self.partitions
            .values()
            .filter(|p| !p.loading)
            .flat_map(|p| p.txns.values())
            .filter_map(|t| {
                let m = &t.meta;
                match &t.inflight {
                    Inflight::Complete(None) => Some(i64::MIN),
                    Inflight::Idle if m.state == TxnState::PrepareEpochFence => Some(i64::MIN),
                    Inflight::Idle if m.state == TxnState::Ongoing => Some(
                        m.txn_start_ms
                            .saturating_add(i64::from(m.txn_timeout_ms))
                            .saturating_add(1),
                    ),
                    Inflight::Idle if m.expirable() => {
                        Some(m.last_update_ms.saturating_add(expiration))
                    }
                    _ => None,
                }
            })
            .min()
    }

    /// Checks internal invariants (for tests): a pending state exactly when something is
    /// in flight, each in-flight write known under the same load, markers only for
    /// prepared transactions and to their partitions, no partitions outside a
    /// transaction.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        for (pid, p) in &self.partitions {
            for (id, t) in &p.txns {
                let m = &t.meta;
                let err = |what: &str| Err(format!("{id} (partition {pid}): {what}: {t:?}"));
                if id != &m.transactional_id {
                    return err("filed under another id");
                }
                if records::partition_for(id, self.config.txn_state_partitions) != *pid {
                    return err("in the wrong partition");
                }
                if m.pending.is_some() == (t.inflight == Inflight::Idle) {
                    return err("pending state and in-flight work disagree");
                }
                let write = match &t.inflight {
                    Inflight::Write(w) | Inflight::Complete(Some(w)) => Some(*w),
                    _ => None,
                };
                if let Some(w) = write {
                    match self.writes.pending.get(&w) {
                        Some(pw)
                            if pw.txn_id == *id
                                && pw.part.id == *pid
                                && pw.part.generation == p.generation => {}
                        _ => return err("in-flight write unknown"),
                    }
                }
                if let Inflight::Markers {
                    commit,
                    outstanding,
                } = &t.inflight
                {
                    let prepared = if *commit {
                        TxnState::PrepareCommit
                    } else {
                        TxnState::PrepareAbort
                    };
                    if m.state != prepared || !outstanding.is_subset(&m.partitions) {
                        return err("markers for a transaction not prepared so");
                    }
                }
                if matches!(t.inflight, Inflight::Markers { .. } | Inflight::Complete(_))
                    && !matches!(
                        m.pending,
                        Some(TxnState::CompleteCommit | TxnState::CompleteAbort)
                    )
                {
                    return err("completing without a Complete pending state");
                }
                if (m.expirable() || m.state == TxnState::Dead) && !m.partitions.is_empty() {
                    return err("partitions outside a transaction");
                }
                if m.producer_epoch < 0 && m.pending != Some(TxnState::Empty) {
                    return err("no epoch outside the first InitProducerId");
                }
            }
        }
        Ok(())
    }
}
