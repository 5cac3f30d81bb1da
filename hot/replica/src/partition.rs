//! The replica state machine of one partition on one broker.

use std::collections::BTreeMap;

use strata_proto::{ErrorCode, LeaderEpoch, Offset};

use crate::local_log::LocalLog;
use crate::truncation::{
    EpochEndOffset, OutOfRangeAction, TruncationDecision, out_of_range_action, truncation_decision,
};

/// A broker's id (Kafka's node id).
pub type BrokerId = i32;

/// Kafka's default `replica.lag.time.max.ms`.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: i64 = 30_000;

/// The replication settings the state machine applies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReplicaConfig {
    /// A follower in the ISR that has not caught up to the leader's log end for this
    /// long is removed from it (`replica.lag.time.max.ms`).
    pub replica_lag_time_max_ms: i64,
    /// How long to wait before resending an AlterPartition that failed with an error a
    /// retry can fix (a timeout, NOT_CONTROLLER).
    pub alter_partition_retry_backoff_ms: i64,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            replica_lag_time_max_ms: DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            alter_partition_retry_backoff_ms: 100,
        }
    }
}

/// The partition as the controller publishes it (Kafka's `PartitionRegistration`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PartitionState {
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    /// Bumped by the controller on every change of the partition (ISR, replicas,
    /// leader): AlterPartition names the version it changes (KIP-497).
    pub partition_epoch: i32,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
}

/// An ISR change the leader asks the controller for (KIP-497's AlterPartition).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct AlterPartitionRequest {
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch the change applies to: the controller refuses it
    /// (INVALID_UPDATE_VERSION) if the partition changed since.
    pub partition_epoch: i32,
    pub new_isr: Vec<BrokerId>,
}

/// The controller's partition state after an AlterPartition it accepted.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CommittedIsr {
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: i32,
    pub isr: Vec<BrokerId>,
}

/// Why the controller did not apply an AlterPartition (Kafka's error handling in
/// `Partition.handleAlterPartitionError`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AlterPartitionError {
    /// OPERATION_NOT_ATTEMPTED: not applied; the last committed ISR stands.
    OperationNotAttempted,
    /// INELIGIBLE_REPLICA (KIP-903): a replica to add is fenced or shutting down; not
    /// applied, the last committed ISR stands.
    IneligibleReplica,
    /// FENCED_LEADER_EPOCH: this leader is stale. Wait for the metadata that says so.
    FencedLeaderEpoch,
    /// INVALID_UPDATE_VERSION: the partition changed since (the controller shrank the
    /// ISR itself, say). Wait for the metadata with the new version.
    InvalidUpdateVersion,
    /// UNKNOWN_TOPIC_OR_PARTITION: the partition is gone. Wait for the metadata.
    UnknownTopicOrPartition,
    /// Anything a retry may fix (timeouts, NOT_CONTROLLER, network): resend the same
    /// request after the backoff.
    Retriable,
}

impl From<ErrorCode> for AlterPartitionError {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::OperationNotAttempted => AlterPartitionError::OperationNotAttempted,
            ErrorCode::IneligibleReplica => AlterPartitionError::IneligibleReplica,
            ErrorCode::FencedLeaderEpoch => AlterPartitionError::FencedLeaderEpoch,
            ErrorCode::InvalidUpdateVersion => AlterPartitionError::InvalidUpdateVersion,
            ErrorCode::UnknownTopicOrPartition => AlterPartitionError::UnknownTopicOrPartition,
            _ => AlterPartitionError::Retriable,
        }
    }
}

/// What the state machine asks the broker to do, in order.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Command {
    /// Record in the local log that `leader_epoch` starts at `start_offset`, the log
    /// end ([`strata_log::Log::assign_epoch_start`], Kafka's
    /// `maybeAssignEpochStartOffset`), before serving anything as leader: followers ask
    /// where their epochs end, and a leader that does not know its own epoch would
    /// answer "undefined" to a follower that led in between.
    AssignEpochStart {
        leader_epoch: LeaderEpoch,
        start_offset: Offset,
    },
    /// Send to the controller (KIP-497). At most one is in flight per partition; feed
    /// the answer to [`PartitionReplica::on_alter_partition_response`] with the request.
    AlterPartition(AlterPartitionRequest),
    /// The high-water mark moved to this offset: complete parked acks=all produce
    /// requests ([`PartitionReplica::check_enough_replicas_reach_offset`]), wake
    /// long-polling fetches, checkpoint it.
    HighWatermarkAdvanced(Offset),
    /// The committed ISR changed (the controller confirmed it): metrics (ISR
    /// shrinks/expands, under-replicated), and re-check parked acks=all requests.
    IsrChanged {
        isr: Vec<BrokerId>,
        partition_epoch: i32,
    },
    /// Follower: truncate the local log to this offset
    /// ([`strata_log::Log::truncate_to`]). At the log end it cuts no record, but still
    /// the leader-epoch cache's entries there (an epoch this replica started as leader
    /// and appended nothing in), as Kafka's `truncateTo` does.
    Truncate(Offset),
    /// Follower: delete the local log and restart it at this offset
    /// ([`strata_log::Log::truncate_fully_and_start_at`]).
    TruncateFullyAndStartAt(Offset),
}

/// A follower's fetch, as the leader sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FollowerFetch {
    pub replica: BrokerId,
    /// The leader epoch the follower believes current (Fetch v9+, KIP-320); `None`
    /// if not sent.
    pub current_leader_epoch: Option<LeaderEpoch>,
    /// Where the follower's log ends: the first offset it wants.
    pub fetch_offset: Offset,
    /// The epoch of the follower's last batch (Fetch v12+'s `lastFetchedEpoch`), so
    /// the leader can tell it where their logs part without an OffsetsForLeaderEpoch
    /// round trip; `None` if not sent.
    pub last_fetched_epoch: Option<LeaderEpoch>,
}

/// How the leader answers a follower's fetch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FetchDecision {
    /// Serve records from the fetch offset, with this high-water mark.
    Read {
        high_watermark: Offset,
    },
    /// No records: the follower's log parts from the leader's; answer
    /// `DivergingEpoch { epoch, end_offset }`, which the follower feeds to
    /// [`PartitionReplica::on_epoch_end_offset`].
    DivergingEpoch {
        epoch: LeaderEpoch,
        end_offset: Offset,
        high_watermark: Offset,
    },
    OffsetOutOfRange,
    /// The follower's leader epoch is older than this leader's.
    FencedLeaderEpoch,
    /// The follower's leader epoch is newer: this broker's metadata is behind.
    UnknownLeaderEpoch,
    /// This broker does not lead the partition, or the fetcher is not a replica of it.
    NotLeaderOrFollower,
}

impl FetchDecision {
    /// The partition error code of the fetch response.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            FetchDecision::Read { .. } | FetchDecision::DivergingEpoch { .. } => ErrorCode::None,
            FetchDecision::OffsetOutOfRange => ErrorCode::OffsetOutOfRange,
            FetchDecision::FencedLeaderEpoch => ErrorCode::FencedLeaderEpoch,
            FetchDecision::UnknownLeaderEpoch => ErrorCode::UnknownLeaderEpoch,
            FetchDecision::NotLeaderOrFollower => ErrorCode::NotLeaderOrFollower,
        }
    }
}

/// The answer to a follower's fetch, and what the broker must do besides.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FetchOutcome {
    pub decision: FetchDecision,
    pub commands: Vec<Command>,
}

/// What a follower does with the leader's `(epoch, end offset)`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TruncationOutcome {
    pub decision: TruncationDecision,
    /// The truncation to carry out, if any (and a high-water mark moved by it).
    pub commands: Vec<Command>,
}

/// Where a parked acks=all produce stands (Kafka's `checkEnoughReplicasReachOffset`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AckStatus {
    /// The high-water mark has not reached the batch yet.
    Waiting,
    /// Every in-sync replica has it: acknowledge.
    Done,
    /// The high-water mark passed the batch, but the ISR had shrunk below
    /// min.insync.replicas meanwhile: the batch is written, on fewer replicas than
    /// asked (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    NotEnoughReplicasAfterAppend,
    /// This broker no longer leads the partition: the produce fails with
    /// NOT_LEADER_OR_FOLLOWER (the batch may or may not survive).
    NotLeaderOrFollower,
}

/// What the leader knows of one follower (Kafka's `ReplicaState`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FollowerProgress {
    /// The follower's log end, as its last fetch said; `None` until it fetches from
    /// this leader (a new leader knows nothing of its followers).
    pub log_end_offset: Option<Offset>,
    /// The last time the follower was caught up: it fetched from the leader's log end,
    /// or from at least where the log ended at its previous fetch. `None`: not since
    /// this leader took over (and it was not in the ISR then).
    pub last_caught_up_ms: Option<i64>,
    pub last_fetch_ms: i64,
    /// The leader's log end at the follower's last fetch.
    pub last_fetch_leader_leo: Option<Offset>,
}

impl FollowerProgress {
    /// Kafka's `resetReplicaState` for a new leader: nothing known of the follower's
    /// log; an in-sync follower gets the full lag time to show up (so the ISR does not
    /// shrink at once), an out-of-sync one none (so it does not hold the HWM back).
    fn reset(now: i64, in_sync: bool) -> Self {
        FollowerProgress {
            log_end_offset: None,
            last_caught_up_ms: in_sync.then_some(now),
            last_fetch_ms: 0,
            last_fetch_leader_leo: None,
        }
    }

    /// Kafka's `isCaughtUp`: at the leader's log end, or caught up within the lag time.
    fn is_caught_up(&self, leader_leo: Offset, now: i64, max_lag_ms: i64) -> bool {
        self.log_end_offset == Some(leader_leo)
            || self
                .last_caught_up_ms
                .is_some_and(|t| now - t <= max_lag_ms)
    }

    /// Kafka's `updateFetchStateOrThrow`.
    fn on_fetch(&mut self, now: i64, fetch_offset: Offset, leader_leo: Offset) {
        if fetch_offset >= leader_leo {
            self.last_caught_up_ms = self.last_caught_up_ms.max(Some(now));
        } else if self
            .last_fetch_leader_leo
            .is_some_and(|l| fetch_offset >= l)
        {
            // Caught up to where the log ended when it fetched last: it was caught up
            // then.
            self.last_caught_up_ms = self.last_caught_up_ms.max(Some(self.last_fetch_ms));
        }
        self.log_end_offset = Some(fetch_offset);
        self.last_fetch_ms = now;
        self.last_fetch_leader_leo = Some(leader_leo);
    }
}

/// The role this broker plays for the partition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// Neither leader nor follower yet.
    Offline,
    Leader,
    Follower {
        leader: BrokerId,
    },
}

/// The leader's ISR: committed, or with one AlterPartition in flight (Kafka's
/// `PartitionState` variants).
#[derive(Clone, PartialEq, Eq, Debug)]
enum IsrState {
    Committed(Vec<BrokerId>),
    /// Adding `adding`: it counts for the high-water mark already.
    PendingExpand {
        committed: Vec<BrokerId>,
        adding: BrokerId,
        request: AlterPartitionRequest,
    },
    /// Removing `removing`: they still count for the high-water mark until the
    /// controller confirms, since until then the controller may elect one of them.
    PendingShrink {
        committed: Vec<BrokerId>,
        removing: Vec<BrokerId>,
        request: AlterPartitionRequest,
    },
}

impl IsrState {
    fn committed(&self) -> &[BrokerId] {
        match self {
            IsrState::Committed(isr)
            | IsrState::PendingExpand { committed: isr, .. }
            | IsrState::PendingShrink { committed: isr, .. } => isr,
        }
    }

    /// The ISR the high-water mark is computed over: the committed ISR plus a replica
    /// being added (KIP-497; a replica being removed is still in the committed ISR).
    fn maximal(&self) -> Vec<BrokerId> {
        let mut isr = self.committed().to_vec();
        if let IsrState::PendingExpand { adding, .. } = self
            && !isr.contains(adding)
        {
            isr.push(*adding);
        }
        isr
    }

    fn in_flight(&self) -> Option<&AlterPartitionRequest> {
        match self {
            IsrState::Committed(_) => None,
            IsrState::PendingExpand { request, .. } | IsrState::PendingShrink { request, .. } => {
                Some(request)
            }
        }
    }
}

#[derive(Clone, Debug)]
struct LeaderState {
    isr: IsrState,
    /// The local log's end.
    leo: Offset,
    /// Where this leader's epoch starts (Kafka's `leaderEpochStartOffsetOpt`): a
    /// follower joins the ISR only once it has everything before it.
    epoch_start_offset: Offset,
    followers: BTreeMap<BrokerId, FollowerProgress>,
    /// A retriable AlterPartition failure: resend at this time.
    retry_at: Option<i64>,
}

#[derive(Clone, Debug)]
struct FollowerState {
    leader: BrokerId,
    isr: Vec<BrokerId>,
}

#[derive(Clone, Debug)]
enum RoleState {
    Offline,
    Leader(LeaderState),
    Follower(FollowerState),
}

/// One partition's replica on this broker: Kafka's `Partition` replication logic, with
/// the IO taken out. See the crate docs.
#[derive(Clone, Debug)]
pub struct PartitionReplica {
    local: BrokerId,
    config: ReplicaConfig,
    high_watermark: Offset,
    /// The newest leader epoch applied; older metadata is ignored.
    leader_epoch: LeaderEpoch,
    partition_epoch: i32,
    replicas: Vec<BrokerId>,
    role: RoleState,
}

impl PartitionReplica {
    /// A replica on broker `local` that knows nothing yet but the high-water mark it
    /// checkpointed (Kafka's `replication-offset-checkpoint`; the log start if none).
    pub fn new(local: BrokerId, config: ReplicaConfig, high_watermark: Offset) -> Self {
        PartitionReplica {
            local,
            config,
            high_watermark,
            leader_epoch: -1,
            partition_epoch: -1,
            replicas: Vec::new(),
            role: RoleState::Offline,
        }
    }

    pub fn local_id(&self) -> BrokerId {
        self.local
    }

    pub fn config(&self) -> ReplicaConfig {
        self.config
    }

    pub fn set_config(&mut self, config: ReplicaConfig) {
        self.config = config;
    }

    pub fn role(&self) -> Role {
        match &self.role {
            RoleState::Offline => Role::Offline,
            RoleState::Leader(_) => Role::Leader,
            RoleState::Follower(f) => Role::Follower { leader: f.leader },
        }
    }

    pub fn is_leader(&self) -> bool {
        matches!(self.role, RoleState::Leader(_))
    }

    /// The high-water mark: consumers read below it, acks=all completes when it
    /// passes a batch. Never moves back, except when a follower's log is cut below it
    /// (only after an unclean election) or restarted elsewhere.
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn replicas(&self) -> &[BrokerId] {
        &self.replicas
    }

    /// The committed ISR: the controller's (a follower's view comes from metadata).
    pub fn isr(&self) -> Vec<BrokerId> {
        match &self.role {
            RoleState::Offline => Vec::new(),
            RoleState::Leader(l) => l.isr.committed().to_vec(),
            RoleState::Follower(f) => f.isr.clone(),
        }
    }

    /// Leader: the ISR the high-water mark is computed over (KIP-497's maximal ISR:
    /// committed, plus a replica being added).
    pub fn maximal_isr(&self) -> Vec<BrokerId> {
        match &self.role {
            RoleState::Leader(l) => l.isr.maximal(),
            _ => self.isr(),
        }
    }

    /// Leader: the AlterPartition in flight, if any.
    pub fn pending_alter_partition(&self) -> Option<&AlterPartitionRequest> {
        match &self.role {
            RoleState::Leader(l) => l.isr.in_flight(),
            _ => None,
        }
    }

    /// Leader: what it knows of a follower.
    pub fn follower_progress(&self, replica: BrokerId) -> Option<FollowerProgress> {
        match &self.role {
            RoleState::Leader(l) => l.followers.get(&replica).copied(),
            _ => None,
        }
    }

    /// Leader: where its epoch started in the log.
    pub fn epoch_start_offset(&self) -> Option<Offset> {
        match &self.role {
            RoleState::Leader(l) => Some(l.epoch_start_offset),
            _ => None,
        }
    }

    /// Fewer in-sync replicas than replicas (a metric).
    pub fn is_under_replicated(&self) -> bool {
        self.isr().len() < self.replicas.len()
    }

    /// Leader: whether an acks=all produce may be appended now: the committed ISR has
    /// at least `min_insync_replicas` members (otherwise NOT_ENOUGH_REPLICAS, and the
    /// batch is not written), as Kafka's `appendRecordsToLeader` checks.
    pub fn acks_all_allowed(&self, min_insync_replicas: usize) -> bool {
        match &self.role {
            RoleState::Leader(l) => l.isr.committed().len() >= min_insync_replicas,
            _ => false,
        }
    }

    /// Leader: where an acks=all produce whose batch ends at `required_offset` (its
    /// last offset + 1) stands (Kafka's `checkEnoughReplicasReachOffset`). Once the
    /// high-water mark has passed it, it is acknowledged if the maximal ISR still has
    /// `min_insync_replicas` members, and NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise:
    /// the ISR shrank below the minimum before every member had the batch. Call it
    /// on [`Command::HighWatermarkAdvanced`] and [`Command::IsrChanged`].
    pub fn check_enough_replicas_reach_offset(
        &self,
        required_offset: Offset,
        min_insync_replicas: usize,
    ) -> AckStatus {
        let RoleState::Leader(l) = &self.role else {
            return AckStatus::NotLeaderOrFollower;
        };
        if self.high_watermark < required_offset {
            AckStatus::Waiting
        } else if l.isr.maximal().len() >= min_insync_replicas {
            AckStatus::Done
        } else {
            AckStatus::NotEnoughReplicasAfterAppend
        }
    }

    /// This broker leads the partition (Kafka's `makeLeader`), or the controller
    /// changed the partition it leads (same leader epoch, newer partition epoch: the
    /// controller shrank the ISR itself, or reassigned replicas).
    ///
    /// A new leader epoch: [`Command::AssignEpochStart`] at the log end, which is
    /// where this epoch starts; every follower is reset (its log end unknown until it
    /// fetches, so the high-water mark waits for every in-sync follower's first fetch).
    /// The high-water mark is the one this replica had (it may be behind the old
    /// leader's; it only moves forward from here). Stale metadata (an older leader
    /// epoch, or the same with a partition epoch that is not newer) is ignored. A
    /// newer partition epoch drops any AlterPartition in flight: it names an older
    /// version, which the controller refuses, and the controller's state is the truth.
    pub fn become_leader(
        &mut self,
        now: i64,
        state: &PartitionState,
        local: &impl LocalLog,
    ) -> Vec<Command> {
        debug_assert_eq!(state.leader, self.local);
        let mut out = Vec::new();
        let leo = local.log_end_offset();
        let new_epoch = state.leader_epoch > self.leader_epoch || !self.is_leader();
        // Same leader epoch: only a newer partition epoch is news. The same one again
        // must not drop an AlterPartition in flight: the controller may still apply it,
        // and the HWM would meanwhile pass a replica it adds.
        if state.leader_epoch < self.leader_epoch
            || (!new_epoch && state.partition_epoch <= self.partition_epoch)
        {
            tracing::debug!(
                ?state,
                epoch = self.leader_epoch,
                "ignoring stale become-leader"
            );
            return out;
        }
        let old_isr = self.isr();
        self.leader_epoch = state.leader_epoch;
        self.partition_epoch = state.partition_epoch;
        self.replicas = state.replicas.clone();
        // The high-water mark stays within the log (a follower's always is).
        self.high_watermark = self.high_watermark.max(local.log_start_offset()).min(leo);
        let isr = IsrState::Committed(state.isr.clone());
        if new_epoch {
            out.push(Command::AssignEpochStart {
                leader_epoch: state.leader_epoch,
                start_offset: leo,
            });
            let followers = state
                .replicas
                .iter()
                .filter(|&&r| r != self.local)
                .map(|&r| (r, FollowerProgress::reset(now, state.isr.contains(&r))))
                .collect();
            self.role = RoleState::Leader(LeaderState {
                isr,
                leo,
                epoch_start_offset: leo,
                followers,
                retry_at: None,
            });
        } else if let RoleState::Leader(l) = &mut self.role {
            l.isr = isr;
            l.leo = l.leo.max(leo);
            l.retry_at = None;
            // Replicas added by a reassignment start unknown; removed ones go.
            let mut followers = BTreeMap::new();
            for &r in state.replicas.iter().filter(|&&r| r != self.local) {
                let p = l
                    .followers
                    .remove(&r)
                    .unwrap_or_else(|| FollowerProgress::reset(now, state.isr.contains(&r)));
                followers.insert(r, p);
            }
            l.followers = followers;
        }
        if !new_epoch && old_isr != state.isr {
            out.push(Command::IsrChanged {
                isr: state.isr.clone(),
                partition_epoch: state.partition_epoch,
            });
        }
        // The ISR may be the leader alone.
        self.maybe_increment_hwm(&mut out);
        out
    }

    /// This broker follows `state.leader` (Kafka's `makeFollower`). The high-water
    /// mark is kept (within the log); the follower then fetches with its log end and
    /// latest epoch, and truncates where the leader says the logs part
    /// ([`Self::on_epoch_end_offset`]). Stale metadata is ignored.
    pub fn become_follower(
        &mut self,
        now: i64,
        state: &PartitionState,
        local: &impl LocalLog,
    ) -> Vec<Command> {
        let _ = now;
        debug_assert_ne!(state.leader, self.local);
        if state.leader_epoch < self.leader_epoch
            || (state.leader_epoch == self.leader_epoch
                && state.partition_epoch < self.partition_epoch)
        {
            tracing::debug!(
                ?state,
                epoch = self.leader_epoch,
                "ignoring stale become-follower"
            );
            return Vec::new();
        }
        self.leader_epoch = state.leader_epoch;
        self.partition_epoch = state.partition_epoch;
        self.replicas = state.replicas.clone();
        self.high_watermark = self
            .high_watermark
            .max(local.log_start_offset())
            .min(local.log_end_offset());
        self.role = RoleState::Follower(FollowerState {
            leader: state.leader,
            isr: state.isr.clone(),
        });
        Vec::new()
    }

    /// Leader: the local log now ends at `leo` (after an append). Moves the high-water
    /// mark if the ISR is the leader alone.
    pub fn on_local_append(&mut self, now: i64, leo: Offset) -> Vec<Command> {
        // Every event carries the time; this one does not need it (the HWM does not
        // depend on time).
        let _ = now;
        let mut out = Vec::new();
        if let RoleState::Leader(l) = &mut self.role {
            l.leo = l.leo.max(leo);
            self.maybe_increment_hwm(&mut out);
        }
        out
    }

    /// Leader: a follower fetches (Kafka's `Partition.fetchRecords` for a follower).
    /// In order: the fetch's leader epoch must be this one (FENCED_LEADER_EPOCH /
    /// UNKNOWN_LEADER_EPOCH, KIP-320); with a `last_fetched_epoch`, the leader checks
    /// where that epoch ends in its own log and answers DivergingEpoch if the
    /// follower's log goes past it (or has an epoch the leader lacks); the offset must
    /// be within the log. Then the follower's progress is updated (its log ends at the
    /// fetch offset), it joins the ISR if it has caught up to the high-water mark and
    /// to this leader's epoch start ([`Command::AlterPartition`]), and the high-water
    /// mark moves to the smallest log end over the maximal ISR.
    pub fn on_follower_fetch(
        &mut self,
        now: i64,
        fetch: &FollowerFetch,
        log: &impl LocalLog,
    ) -> FetchOutcome {
        let mut out = Vec::new();
        let decision = self.follower_fetch(now, fetch, log, &mut out);
        FetchOutcome {
            decision,
            commands: out,
        }
    }

    fn follower_fetch(
        &mut self,
        now: i64,
        fetch: &FollowerFetch,
        log: &impl LocalLog,
        out: &mut Vec<Command>,
    ) -> FetchDecision {
        let leader_epoch = self.leader_epoch;
        let RoleState::Leader(l) = &mut self.role else {
            return FetchDecision::NotLeaderOrFollower;
        };
        if !l.followers.contains_key(&fetch.replica) {
            return FetchDecision::NotLeaderOrFollower;
        }
        match fetch.current_leader_epoch {
            Some(e) if e < leader_epoch => return FetchDecision::FencedLeaderEpoch,
            Some(e) if e > leader_epoch => return FetchDecision::UnknownLeaderEpoch,
            _ => {}
        }
        // The log is the truth about its own end (an append the broker has not
        // reported yet).
        l.leo = l.leo.max(log.log_end_offset());
        let (start, leo) = (log.log_start_offset(), l.leo);
        if let Some(fetched_epoch) = fetch.last_fetched_epoch {
            // Kafka's `validateFetchOffsetAndMaybeGetDivergingEpoch`.
            let Some((epoch, end_offset)) = log.end_offset_for_epoch(fetched_epoch) else {
                return FetchDecision::OffsetOutOfRange;
            };
            if fetch.fetch_offset < start {
                return FetchDecision::OffsetOutOfRange;
            }
            if epoch < fetched_epoch || end_offset < fetch.fetch_offset {
                return FetchDecision::DivergingEpoch {
                    epoch,
                    end_offset,
                    high_watermark: self.high_watermark,
                };
            }
        }
        if fetch.fetch_offset < start || fetch.fetch_offset > leo {
            return FetchDecision::OffsetOutOfRange;
        }
        let progress = l.followers.get_mut(&fetch.replica).expect("checked above");
        progress.on_fetch(now, fetch.fetch_offset, leo);
        self.maybe_expand_isr(fetch.replica, out);
        self.maybe_increment_hwm(out);
        FetchDecision::Read {
            high_watermark: self.high_watermark,
        }
    }

    /// Kafka's `maybeExpandIsr`: with no change in flight, a follower outside the ISR
    /// joins once its log reaches the high-water mark and this leader's epoch start
    /// (so the ISR never holds a replica that lacks committed records or the previous
    /// epochs' tail this leader kept).
    fn maybe_expand_isr(&mut self, replica: BrokerId, out: &mut Vec<Command>) {
        let (leader_epoch, partition_epoch, hwm) =
            (self.leader_epoch, self.partition_epoch, self.high_watermark);
        let RoleState::Leader(l) = &mut self.role else {
            return;
        };
        let IsrState::Committed(isr) = &l.isr else {
            return;
        };
        if isr.contains(&replica) {
            return;
        }
        let Some(end) = l.followers.get(&replica).and_then(|p| p.log_end_offset) else {
            return;
        };
        if end < hwm || end < l.epoch_start_offset {
            return;
        }
        let mut new_isr = isr.clone();
        new_isr.push(replica);
        let request = AlterPartitionRequest {
            leader_epoch,
            partition_epoch,
            new_isr,
        };
        tracing::info!(replica, ?request, "expanding the ISR");
        out.push(Command::AlterPartition(request.clone()));
        l.isr = IsrState::PendingExpand {
            committed: isr.clone(),
            adding: replica,
            request,
        };
    }

    /// Time passes (call it every few seconds, and at `alter_partition_retry_backoff_ms`
    /// granularity while a retry is due). Leader: resends a failed AlterPartition
    /// when due; with none in flight, asks to remove the in-sync followers that have
    /// not caught up for `replica_lag_time_max_ms` (Kafka's `maybeShrinkIsr`; they stay
    /// in the maximal ISR until the controller confirms).
    pub fn tick(&mut self, now: i64) -> Vec<Command> {
        let mut out = Vec::new();
        let (leader_epoch, partition_epoch) = (self.leader_epoch, self.partition_epoch);
        let max_lag = self.config.replica_lag_time_max_ms;
        let local = self.local;
        let RoleState::Leader(l) = &mut self.role else {
            return out;
        };
        if let Some(at) = l.retry_at
            && now >= at
            && let Some(request) = l.isr.in_flight()
        {
            out.push(Command::AlterPartition(request.clone()));
            l.retry_at = None;
        }
        if let IsrState::Committed(isr) = &l.isr {
            let out_of_sync: Vec<BrokerId> = isr
                .iter()
                .copied()
                .filter(|&r| r != local)
                .filter(|r| {
                    l.followers
                        .get(r)
                        .is_none_or(|p| !p.is_caught_up(l.leo, now, max_lag))
                })
                .collect();
            if !out_of_sync.is_empty() {
                let new_isr: Vec<BrokerId> = isr
                    .iter()
                    .copied()
                    .filter(|r| !out_of_sync.contains(r))
                    .collect();
                let request = AlterPartitionRequest {
                    leader_epoch,
                    partition_epoch,
                    new_isr,
                };
                tracing::info!(?out_of_sync, ?request, "shrinking the ISR");
                out.push(Command::AlterPartition(request.clone()));
                l.isr = IsrState::PendingShrink {
                    committed: isr.clone(),
                    removing: out_of_sync,
                    request,
                };
            }
        }
        self.maybe_increment_hwm(&mut out);
        out
    }

    /// Leader: the controller answered the AlterPartition `request` (Kafka's
    /// `handleAlterPartitionUpdate` / `handleAlterPartitionError`). An answer to a
    /// request that is not the one in flight is ignored. Accepted for this leader
    /// epoch: the controller's ISR becomes the committed one ([`Command::IsrChanged`]),
    /// and the high-water mark may move (a removed laggard no longer holds it back).
    /// OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA: back to the last committed ISR.
    /// A retriable error: resent after the backoff ([`Self::tick`]). A stale leader or
    /// partition epoch, or an unknown partition: the request stays in flight (so no
    /// other is sent and the maximal ISR still counts) until new metadata arrives.
    pub fn on_alter_partition_response(
        &mut self,
        now: i64,
        request: &AlterPartitionRequest,
        result: Result<CommittedIsr, AlterPartitionError>,
    ) -> Vec<Command> {
        let mut out = Vec::new();
        let backoff = self.config.alter_partition_retry_backoff_ms;
        let RoleState::Leader(l) = &mut self.role else {
            return out;
        };
        if l.isr.in_flight() != Some(request) {
            tracing::debug!(
                ?request,
                "ignoring the answer to an AlterPartition no longer in flight"
            );
            return out;
        }
        match result {
            Ok(committed) => {
                if committed.leader_epoch != self.leader_epoch
                    || committed.partition_epoch < self.partition_epoch
                {
                    tracing::debug!(
                        ?committed,
                        "ignoring an ISR for another leader epoch or an older version"
                    );
                    return out;
                }
                let changed = committed.isr != l.isr.committed();
                l.isr = IsrState::Committed(committed.isr.clone());
                l.retry_at = None;
                self.partition_epoch = committed.partition_epoch;
                if changed {
                    out.push(Command::IsrChanged {
                        isr: committed.isr,
                        partition_epoch: committed.partition_epoch,
                    });
                }
            }
            Err(
                AlterPartitionError::OperationNotAttempted | AlterPartitionError::IneligibleReplica,
            ) => {
                // The controller says it did not apply it, and the partition epoch is
                // current: the last committed ISR stands.
                l.isr = IsrState::Committed(l.isr.committed().to_vec());
                l.retry_at = None;
            }
            Err(AlterPartitionError::Retriable) => {
                l.retry_at = Some(now + backoff);
            }
            Err(
                e @ (AlterPartitionError::FencedLeaderEpoch
                | AlterPartitionError::InvalidUpdateVersion
                | AlterPartitionError::UnknownTopicOrPartition),
            ) => {
                tracing::info!(error = ?e, ?request, "AlterPartition refused; waiting for new metadata");
                l.retry_at = None;
            }
        }
        self.maybe_increment_hwm(&mut out);
        out
    }

    /// Kafka's `maybeIncrementLeaderHW`: the smallest log end over the maximal ISR.
    /// Moves only forward. (Kafka 3.7+ also waits for followers outside the ISR that
    /// are caught up and eligible; without eligibility here, a fenced one would hold
    /// acks=all for up to `replica.lag.time.max.ms`, so this waits only for the maximal
    /// ISR, whose members an expansion admits only at or past the HWM.)
    fn maybe_increment_hwm(&mut self, out: &mut Vec<Command>) {
        let RoleState::Leader(l) = &self.role else {
            return;
        };
        let mut hwm = l.leo;
        for r in l.isr.maximal() {
            if r != self.local {
                // A follower that has not fetched from this leader holds it.
                let end = l.followers.get(&r).and_then(|p| p.log_end_offset);
                hwm = hwm.min(end.unwrap_or(Offset::MIN));
            }
        }
        if hwm > self.high_watermark {
            self.high_watermark = hwm;
            out.push(Command::HighWatermarkAdvanced(hwm));
        }
    }

    /// Follower: a fetch response came, and its records are appended; the local log
    /// now ends at `local_leo`. The high-water mark becomes the leader's, as far as
    /// this log reaches (Kafka: `min(leader HW, LEO)`), never lower than it was.
    pub fn on_fetch_response(&mut self, leader_hwm: Offset, local_leo: Offset) -> Vec<Command> {
        let mut out = Vec::new();
        if !matches!(self.role, RoleState::Follower(_)) {
            return out;
        }
        let hwm = leader_hwm.min(local_leo);
        if hwm > self.high_watermark {
            self.high_watermark = hwm;
            out.push(Command::HighWatermarkAdvanced(hwm));
        }
        out
    }

    /// Follower: the leader answered where the epoch the follower asked about ends (an
    /// OffsetsForLeaderEpoch response for its latest epoch, or a fetch response's
    /// DivergingEpoch). Decides the truncation with KIP-279's algorithm
    /// ([`truncation_decision`]) and returns the command to carry it out; with
    /// [`TruncationDecision::TruncateAndAskAgain`] the follower asks again with its new
    /// latest epoch (or fetches with it as `last_fetched_epoch`). The high-water mark
    /// is lowered only if the cut goes below it, which a clean election never asks.
    pub fn on_epoch_end_offset(
        &mut self,
        answer: EpochEndOffset,
        local: &impl LocalLog,
    ) -> TruncationOutcome {
        let decision = truncation_decision(local, answer);
        let mut commands = Vec::new();
        match decision {
            TruncationDecision::Truncate { offset }
            | TruncationDecision::TruncateAndAskAgain { offset } => {
                // Also at the log end: that removes an epoch this replica assigned as
                // leader and appended nothing in, which it would otherwise keep sending
                // as its last fetched epoch, and be told to truncate again, forever.
                commands.push(Command::Truncate(offset));
                if offset < self.high_watermark {
                    tracing::warn!(
                        offset,
                        hwm = self.high_watermark,
                        "truncating below the high-water mark (unclean leader election?)"
                    );
                    self.high_watermark = offset;
                }
            }
            TruncationDecision::TruncateFully { offset } => {
                commands.push(Command::TruncateFullyAndStartAt(offset));
                self.high_watermark = offset;
            }
            TruncationDecision::Undefined => {}
        }
        TruncationOutcome { decision, commands }
    }

    /// Follower: the leader answered OFFSET_OUT_OF_RANGE; `leader_log_start` and
    /// `leader_log_end` are its ListOffsets answers (Kafka's
    /// `fetchOffsetAndTruncate`). Returns the truncation, if any; then fetch from the
    /// local log end.
    pub fn on_fetch_out_of_range(
        &mut self,
        leader_log_start: Offset,
        leader_log_end: Offset,
        local: &impl LocalLog,
    ) -> Vec<Command> {
        match out_of_range_action(local.log_end_offset(), leader_log_start, leader_log_end) {
            OutOfRangeAction::TruncateTo(offset) => {
                tracing::warn!(
                    offset,
                    leo = local.log_end_offset(),
                    "the leader's log ends before this one: truncating to it"
                );
                self.high_watermark = self.high_watermark.min(offset);
                vec![Command::Truncate(offset)]
            }
            OutOfRangeAction::TruncateFullyAndStartAt(offset) => {
                self.high_watermark = offset;
                vec![Command::TruncateFullyAndStartAt(offset)]
            }
            OutOfRangeAction::FetchFrom(_) => Vec::new(),
        }
    }
}
