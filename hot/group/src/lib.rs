//! Strata's consumer group coordinator as a sans-IO state machine.
//!
//! The crate owns consumer groups: membership, generations, rebalances, committed
//! offsets (transactional ones included) and their `__consumer_offsets` records.
//!
//! Modeled on Apache Kafka's classic `GroupCoordinator` / `GroupMetadata`: groups move
//! through Empty → PreparingRebalance → CompletingRebalance → Stable (and Dead when
//! deleted); JoinGroup/SyncGroup long-poll through caller-chosen tickets; sessions,
//! rebalance timeouts and the initial rebalance delay are driven by [`GroupCoordinator::tick`]
//! with the time passed in. Static membership (KIP-345) and the member-id-required
//! handshake (KIP-394) are supported. Committed offsets are kept in memory, and
//! [`records`] encodes/decodes Kafka's `__consumer_offsets` records so the broker can
//! persist and replay them. Transactional offset commits (KIP-98, KIP-447) stay pending
//! per producer until their transaction's marker commits or aborts them
//! ([`GroupCoordinator::prepare_txn_commit`], [`GroupCoordinator::complete_txn`]).
//!
//! Nothing here does IO, spawns tasks, or reads a clock.
//!
//! Public modules:
//! * [`records`]: `__consumer_offsets` keys and values, and the partition owning a group.
//!
//! The state machine is the private `coordinator` module; its types are re-exported here.

mod coordinator;
pub mod records;

pub use coordinator::{
    CONSUMER_PROTOCOL_TYPE, CompletedTxnOffset, Completion, ExpiredOffsets, GroupConfig,
    GroupCoordinator, GroupDescription, GroupState, JoinGroup, JoinResponse, MemberDescription,
    MemberInfo, SyncGroup, SyncResponse, TxnOffsetOutcome,
};
pub use records::{
    CommittedOffset, ConsumerOffsetsRecord, DecodeError, GroupMetadataValue, StoredMember,
    decode_record, group_metadata_key, group_metadata_record, group_tombstone, java_string_hash,
    offset_commit_key, offset_commit_record, offset_tombstone, parse_consumer_subscription_topics,
    partition_for,
};
