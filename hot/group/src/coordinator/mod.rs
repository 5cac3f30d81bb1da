//! The consumer group coordinator (Kafka's classic `GroupCoordinator`): owns every
//! group this broker coordinates, its settings, and the outbox of answers to parked
//! requests; the read-only and lifecycle requests (ListGroups, DescribeGroups,
//! DeleteGroups) and the timers' driver ([`GroupCoordinator::tick`]).
//!
//! What the coordinator does with a request lives with what the request touches:
//! - [`messages`]: the request and response types of the membership protocol and
//!   DescribeGroups;
//! - [`group`]: one group's state machine (members, generations, rebalance phases and
//!   their timers);
//! - [`membership`]: JoinGroup, SyncGroup, Heartbeat and LeaveGroup;
//! - [`offsets`]: committed offsets (OffsetCommit validation, storage, OffsetDelete);
//! - [`txn`]: transactional offset commits (TxnOffsetCommit, their completion by the
//!   transaction's marker, KIP-447's unstable offsets);
//! - [`persist`]: what goes to and comes back from `__consumer_offsets` (group metadata
//!   records, the load's replay, the checkpoint's records).

mod group;
mod membership;
mod messages;
mod offsets;
mod persist;
mod txn;

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_proto::ErrorCode;

pub use self::group::GroupState;
use self::group::{Ctx, Group, Member};
pub use self::messages::{
    Completion, GroupDescription, JoinGroup, JoinResponse, MemberDescription, MemberInfo,
    SyncGroup, SyncResponse,
};
pub use self::offsets::ExpiredOffsets;
pub use self::txn::{CompletedTxnOffset, TxnOffsetOutcome};

/// Kafka's `ConsumerProtocol.PROTOCOL_TYPE`.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Coordinator settings (Kafka's `group.*` broker configs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members (extended by the same delay while members keep arriving, up
    /// to the rebalance timeout).
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size` (`None` = unlimited).
    pub max_group_size: Option<usize>,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3000,
            max_group_size: None,
        }
    }
}

/// The consumer group coordinator for every group this broker coordinates.
///
/// Sans-IO: time comes in as `now` (ms) on every call, and nothing blocks. JoinGroup and
/// SyncGroup may have to wait for other members: the caller passes a ticket it chose,
/// and the call returns `Some(answer)` when it can answer at once (including when the
/// request itself completed the phase), or `None` when the request is parked.
///
/// Answers to parked requests of *other* tickets are queued in an internal outbox;
/// [`join`](Self::join), [`sync`](Self::sync), [`leave`](Self::leave) and
/// [`tick`](Self::tick) drain it and return its contents as `Vec<Completion>`. Calls that
/// return a plain [`ErrorCode`] (`heartbeat`, `validate_commit`) may also fire due timers;
/// what they complete stays queued and comes out of the next draining call (or
/// [`take_completions`](Self::take_completions)). Each ticket is answered exactly once.
/// Call `tick` periodically (e.g. every 100 ms, or at [`next_deadline`](Self::next_deadline))
/// to expire sessions and time out join/sync phases.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    next_member_seq: u64,
    outbox: Vec<Completion>,
    /// The highest `__consumer_offsets` offset this coordinator has been told of (a
    /// record offset or a marker's), `-1` before any: what a commit whose record offset
    /// is not given counts as (see [`commit`](Self::commit)).
    last_record_offset: i64,
}

impl GroupCoordinator {
    /// A coordinator with no groups.
    pub fn new(config: GroupConfig) -> Self {
        GroupCoordinator {
            config,
            groups: BTreeMap::new(),
            next_member_seq: 0,
            outbox: Vec::new(),
            last_record_offset: -1,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Drains the answers to parked JoinGroup/SyncGroup requests.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.outbox)
    }

    /// Runs `f` on group `group_id` with a context, then fires due timers.
    fn with_group<R>(
        &mut self,
        now: i64,
        group_id: &str,
        f: impl FnOnce(&mut Ctx<'_>, &mut Group) -> R,
    ) -> Option<R> {
        let g = self.groups.get_mut(group_id)?;
        let mut ctx = Ctx {
            now,
            config: &self.config,
            out: &mut self.outbox,
        };
        let r = f(&mut ctx, g);
        ctx.run_timers(g);
        Some(r)
    }

    fn group_or_create(&mut self, group_id: &str) -> &mut Group {
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, 0))
    }

    /// Expires sessions, pending (MEMBER_ID_REQUIRED) members, join phases (rebalance
    /// timeout, initial rebalance delay) and sync phases. Answers land in the outbox.
    pub fn tick(&mut self, now: i64) -> Vec<Completion> {
        let mut ctx = Ctx {
            now,
            config: &self.config,
            out: &mut self.outbox,
        };
        for g in self.groups.values_mut() {
            ctx.run_timers(g);
        }
        self.take_completions()
    }

    /// The earliest time at which [`tick`](Self::tick) has something to do, if any.
    pub fn next_deadline(&self) -> Option<i64> {
        self.groups
            .values()
            .flat_map(|g| {
                let sessions = g
                    .members
                    .values()
                    .filter(|m| m.join_ticket.is_none() && m.sync_ticket.is_none())
                    .map(|m| m.heartbeat_deadline_ms);
                let join = g
                    .join_deadline_ms
                    .filter(|_| g.state == GroupState::PreparingRebalance);
                let sync = g.sync_deadline_ms.filter(|_| {
                    matches!(
                        g.state,
                        GroupState::CompletingRebalance | GroupState::Stable
                    )
                });
                sessions
                    .chain(g.pending_members.values().copied())
                    .chain(join)
                    .chain(sync)
            })
            .min()
    }

    /// ListGroups: `(group_id, protocol_type ("" when none), state name)`.
    pub fn list_groups(&self) -> Vec<(String, String, &'static str)> {
        self.groups
            .values()
            .map(|g| {
                (
                    g.group_id.clone(),
                    g.protocol_type.clone().unwrap_or_default(),
                    g.state.as_str(),
                )
            })
            .collect()
    }

    /// DescribeGroups for one group; `None` if unknown (Kafka then answers with state
    /// "Dead" and no error).
    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let g = self.groups.get(group_id)?;
        let protocol = g.protocol_name.as_deref();
        let mut members: Vec<&Member> = g.members.values().collect();
        members.sort_by_key(|m| m.seq);
        Some(GroupDescription {
            state: g.state.as_str(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: g.protocol_name.clone().unwrap_or_default(),
            generation_id: g.generation_id,
            leader: g.leader_id.clone(),
            members: members
                .into_iter()
                .map(|m| MemberDescription {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    // Kafka only reports metadata/assignment in Stable.
                    metadata: if g.state == GroupState::Stable {
                        m.metadata_for(protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if g.state == GroupState::Stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        })
    }

    /// DeleteGroups: NON_EMPTY_GROUP unless the group is Empty (or Dead),
    /// GROUP_ID_NOT_FOUND if unknown. A deleted group's offsets are dropped too: read
    /// [`offsets`](Self::offsets) first to write their tombstones, plus a
    /// [`group_tombstone`](crate::group_tombstone).
    ///
    /// Pending transactional offsets do not keep a group from being deleted (as Kafka's
    /// `validateDeleteGroup`: only members do); they are dropped with the group, so a
    /// marker arriving later finds nothing to apply. The group tombstone drops them on a
    /// reload too ([`replay`](Self::replay)); Kafka also writes an offset tombstone for
    /// each pending partition ([`pending_txn_offsets`](Self::pending_txn_offsets)),
    /// which is harmless here but not needed.
    pub fn delete_groups(&mut self, group_ids: &[String]) -> Vec<(String, ErrorCode)> {
        group_ids
            .iter()
            .map(|id| {
                let err = match self.groups.get_mut(id) {
                    None => ErrorCode::GroupIdNotFound,
                    Some(g) if g.state == GroupState::Dead => ErrorCode::GroupIdNotFound,
                    Some(g) if g.state == GroupState::Empty => {
                        g.state = GroupState::Dead;
                        self.groups.remove(id);
                        ErrorCode::None
                    }
                    Some(_) => ErrorCode::NonEmptyGroup,
                };
                (id.clone(), err)
            })
            .collect()
    }

    /// Checks internal invariants (for tests): at most one leader and it is a member;
    /// static mappings point at members; in Stable every member holds an assignment of
    /// the current generation; parked requests only in the phases that park them; no
    /// producer with an empty set of pending transactional offsets, and no record offset
    /// above the newest the coordinator was told of.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        for g in self.groups.values() {
            match &g.leader_id {
                Some(l) if !g.members.contains_key(l) => {
                    return Err(format!("{}: leader {l} is not a member", g.group_id));
                }
                None if !g.members.is_empty() => {
                    return Err(format!("{}: members but no leader", g.group_id));
                }
                _ => {}
            }
            for (instance, id) in &g.static_members {
                let ok = g
                    .members
                    .get(id)
                    .is_some_and(|m| m.group_instance_id.as_deref() == Some(instance));
                if !ok {
                    return Err(format!(
                        "{}: static {instance} -> {id} dangling",
                        g.group_id
                    ));
                }
            }
            for m in g.members.values() {
                if g.state == GroupState::Stable && m.assignment_generation != g.generation_id {
                    return Err(format!(
                        "{}: Stable member {} has assignment of generation {} (group {})",
                        g.group_id, m.member_id, m.assignment_generation, g.generation_id
                    ));
                }
                if m.join_ticket.is_some() && g.state != GroupState::PreparingRebalance {
                    return Err(format!("{}: join parked in {:?}", g.group_id, g.state));
                }
                if m.sync_ticket.is_some() && g.state != GroupState::CompletingRebalance {
                    return Err(format!("{}: sync parked in {:?}", g.group_id, g.state));
                }
            }
            if g.state == GroupState::Empty && !g.members.is_empty() {
                return Err(format!("{}: Empty with members", g.group_id));
            }
            for (producer_id, pending) in &g.pending_txn {
                if pending.is_empty() {
                    return Err(format!(
                        "{}: producer {producer_id} holds an empty pending map",
                        g.group_id
                    ));
                }
            }
            let newest = g
                .offsets
                .values()
                .chain(g.pending_txn.values().flat_map(|p| p.values()))
                .map(|o| o.record_offset)
                .max();
            if let Some(r) = newest.filter(|r| *r > self.last_record_offset) {
                return Err(format!(
                    "{}: record offset {r} above the last seen {}",
                    g.group_id, self.last_record_offset
                ));
            }
        }
        Ok(())
    }
}
