//! Strata's transaction coordinator as a sans-IO state machine.
//!
//! The crate owns transactional ids: their producer ids and epochs, transaction
//! states, markers, and their `__transaction_state` records.
//!
//! Modeled on Apache Kafka's `TransactionCoordinator` / `TransactionMetadata` /
//! `TransactionStateManager` (transactions version 0/1: the producer epoch is bumped by
//! InitProducerId and by the coordinator's own aborts, not by every EndTxn as KIP-890
//! part 2 does). Transactional ids move through Empty → Ongoing → PrepareCommit /
//! PrepareAbort → CompleteCommit / CompleteAbort; InitProducerId hands out producer ids
//! and epochs (with KIP-360 recovery) and fences the previous producer, aborting its
//! open transaction; timed-out transactions are aborted and idle transactional ids
//! expired by [`TransactionCoordinator::tick`] with the time passed in.
//!
//! Every transition is persisted before it takes effect: the coordinator hands the
//! caller a [`TxnWrite`] for the `__transaction_state` partition that owns the
//! transactional id ([`records`] is Kafka's record format, bit for bit), and applies the
//! transition when the caller reports the write done. Transaction markers are likewise
//! handed out as [`SendMarkers`] and reported back. A new leader of a partition replays
//! its log ([`TransactionCoordinator::load`]) and resumes what was half-done.
//!
//! Nothing here does IO, spawns tasks, allocates producer ids, or reads a clock.
//!
//! Public modules:
//! * [`records`]: `__transaction_state` keys and values, and the partition owning an id.
//!
//! The state machine is the private `coordinator` module; its types are re-exported here.

mod coordinator;
pub mod records;

pub use coordinator::{
    Action, CONSUMER_OFFSETS_TOPIC, InitProducerIdResult, ListFilter, ListedTxn, LoadError,
    Outcome, ProducerIdAndEpoch, Reply, SendMarkers, TransactionCoordinator, TransactionMetadata,
    TxnApi, TxnConfig, TxnDescription, TxnListing, TxnWrite, WriteResult, WriteTicket,
    coordinator_error_for_append, fenced_error_for_version, is_epoch_exhausted, offsets_partition,
};
pub use records::{
    DecodeError, TRANSACTION_STATE_TOPIC, TxnLogValue, TxnState, decode_key, decode_record,
    decode_value, partition_for, txn_key, txn_record, txn_value,
};
