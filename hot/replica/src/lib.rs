//! Strata's partition replica state machine: the replication logic of Kafka's
//! `Partition` / `ReplicaManager` / fetcher for one partition on one broker, sans-IO.
//!
//! [`PartitionReplica`] takes events and returns [`Command`]s, in the style of openraft's
//! `Engine`: no sockets, no disk, no tasks, no clock (time is an argument, in
//! milliseconds). The broker owns the log, the network and the timers; it feeds the
//! state machine what happened and carries out what it says. Reads of the local log go
//! through [`LocalLog`] (implemented for [`strata_log::Log`], whose answers come from
//! memory). Everything here is deterministic, so the tests drive it through random
//! interleavings of events and check invariants after each.
//!
//! # Leader
//!
//! | event | Kafka | what it does |
//! |---|---|---|
//! | [`PartitionReplica::become_leader`] | `makeLeader` | new epoch: [`Command::AssignEpochStart`], followers reset |
//! | [`PartitionReplica::on_local_append`] | `appendRecordsToLeader` | LEO; HWM if the ISR is the leader alone |
//! | [`PartitionReplica::on_follower_fetch`] | `fetchRecords` | [`FetchDecision`]: read / diverging epoch / out of range / fenced; follower progress, ISR expansion, HWM |
//! | [`PartitionReplica::tick`] | `maybeShrinkIsr` | ISR shrink after `replica.lag.time.max.ms`, AlterPartition retries |
//! | [`PartitionReplica::on_alter_partition_response`] | `handleAlterPartitionUpdate` | commit, revert, retry or wait |
//! | [`PartitionReplica::acks_all_allowed`] | min.insync.replicas at append | NOT_ENOUGH_REPLICAS |
//! | [`PartitionReplica::check_enough_replicas_reach_offset`] | same name | parked acks=all: done / NOT_ENOUGH_REPLICAS_AFTER_APPEND |
//!
//! The **high-water mark** is the smallest log end offset over the *maximal* ISR
//! (KIP-497): the committed ISR plus a replica being added, with a replica being
//! removed kept until the controller confirms, since until then the controller may
//! elect it. A new leader knows no follower's log end until it
//! fetches, so the HWM waits for every in-sync follower's first fetch. The HWM only
//! moves forward ([`Command::HighWatermarkAdvanced`]).
//!
//! The **ISR** changes only through the controller: the leader sends
//! [`Command::AlterPartition`] with the partition epoch it changes (KIP-497), at most
//! one at a time, and applies the ISR the controller answers. A follower joins once it
//! has fetched up to the HWM and to this leader's epoch start offset; an in-sync
//! follower that has not caught up to the leader's log end for
//! `replica.lag.time.max.ms` (30 s) is proposed for removal. The controller may also
//! change the ISR itself (fencing a broker): that arrives as metadata, through
//! [`PartitionReplica::become_leader`] with the same leader epoch.
//!
//! **acks=all**: the committed ISR must have min.insync.replicas members when the batch
//! is appended (NOT_ENOUGH_REPLICAS otherwise, nothing written); the request then waits
//! until the HWM passes the batch, and fails with NOT_ENOUGH_REPLICAS_AFTER_APPEND if
//! by then the ISR has shrunk below the minimum. A leader cut off from the controller
//! keeps taking acks=1 writes (which a new leader will truncate), but cannot complete
//! acks=all: its followers moved on, and dropping them from the ISR needs the
//! controller.
//!
//! # Follower
//!
//! | event | Kafka | what it does |
//! |---|---|---|
//! | [`PartitionReplica::become_follower`] | `makeFollower` | role, ISR view |
//! | [`PartitionReplica::on_fetch_response`] | `processPartitionData` | HWM = min(leader HWM, local LEO), forward only |
//! | [`PartitionReplica::on_epoch_end_offset`] | `truncateOnFetchResponse` / OffsetsForLeaderEpoch | [`Command::Truncate`] where the logs part |
//! | [`PartitionReplica::on_fetch_out_of_range`] | `fetchOffsetAndTruncate` | truncate, or [`Command::TruncateFullyAndStartAt`] the leader's start |
//!
//! A follower never truncates to its high-water mark: that loses acknowledged records
//! when leaders change twice quickly (KIP-101). It fetches with its log end and latest
//! epoch (`lastFetchedEpoch`, Fetch v12); the leader answers with the end of that epoch
//! in its own log if the follower's log goes past it, and the follower cuts there. When
//! the leader answers with an epoch the follower does not have, the follower cuts to
//! where its own older epochs end and asks again with its new latest epoch (KIP-279),
//! until both know the epoch: then the logs agree below the cut
//! ([`truncation_decision`]). The leader-epoch cache behind this lives in the log
//! ([`strata_log::epoch`]), durable and truncated with it.
//!
//! The idempotent-producer state is replicated with the log: a follower's appends
//! ([`strata_log::Log::append_replicated`]) update it from the batch headers, so a new
//! leader deduplicates retries of batches its predecessor accepted.
//!
//! # Durability (KIP-966)
//!
//! The log fsyncs by its flush policy (Kafka's defaults: never on append), so an
//! acknowledged record lives in the page cache of every ISR member, and survives the
//! loss of any of them, but not a simultaneous power loss of all ("last replica
//! standing", KIP-966, which adds the eligible leader replicas and unclean recovery
//! that this crate does not implement). A replica that restarts with a shorter log
//! stays in the ISR until it lags for `replica.lag.time.max.ms`.
//!
//! Not implemented: KIP-966's ELR, KIP-903's broker epochs in AlterPartition and
//! KIP-841's ineligible (fenced, shutting-down) replicas (the controller refuses those
//! with INELIGIBLE_REPLICA, which reverts the change), reassignment's adding/removing
//! replica sets.
//!
//! # Modules (private; their types are re-exported here)
//!
//! * `partition.rs`: [`PartitionReplica`], the events it takes and the [`Command`]s it
//!   returns, the acks=all checks.
//! * `truncation.rs`: [`truncation_decision`] and [`out_of_range_action`], where a
//!   follower cuts its log (KIP-101, KIP-279) and what it does when out of range.
//! * `local_log.rs`: [`LocalLog`] and [`EpochLog`], all the state machine reads of the
//!   log.

mod local_log;
mod partition;
mod truncation;

pub use local_log::{EpochLog, LocalLog};
pub use partition::{
    AckStatus, AlterPartitionError, AlterPartitionRequest, BrokerId, Command, CommittedIsr,
    DEFAULT_REPLICA_LAG_TIME_MAX_MS, FetchDecision, FetchOutcome, FollowerFetch, FollowerProgress,
    PartitionReplica, PartitionState, ReplicaConfig, Role, TruncationOutcome,
};
pub use truncation::{
    EpochEndOffset, OutOfRangeAction, TruncationDecision, out_of_range_action, truncation_decision,
};
