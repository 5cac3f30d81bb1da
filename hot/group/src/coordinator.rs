//! The group state machine (Kafka's classic `GroupCoordinator` + `GroupMetadata`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use strata_proto::ErrorCode;

use crate::records::{
    self, CommittedOffset, ConsumerOffsetsRecord, DecodeError, GroupMetadataValue, StoredMember,
};

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

/// The classic group states, named as Kafka names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members (possibly committed offsets).
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Waiting for the leader's assignment.
    CompletingRebalance,
    /// Assignment distributed.
    Stable,
    /// Deleted.
    Dead,
}

impl GroupState {
    /// The state's name as Kafka's ListGroups / DescribeGroups report it.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinGroup {
    /// The group.
    pub group_id: String,
    /// The member id; empty for a member joining for the first time.
    pub member_id: String,
    /// The static instance id (KIP-345).
    pub group_instance_id: Option<String>,
    /// The protocol type (`"consumer"`).
    pub protocol_type: String,
    /// Supported protocols in preference order, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (for JoinGroup v0, pass the session timeout).
    pub rebalance_timeout_ms: i32,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub client_host: String,
    /// Request version >= 4 (KIP-394): a new member first gets `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
}

/// One member as the leader sees it in its JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member id.
    pub member_id: String,
    /// The static instance id.
    pub group_instance_id: Option<String>,
    /// The member's metadata for the selected protocol.
    pub metadata: Bytes,
}

/// A JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinResponse {
    /// The error (`None` on success).
    pub error: ErrorCode,
    /// The generation (-1 on error).
    pub generation_id: i32,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The selected protocol.
    pub protocol_name: Option<String>,
    /// The leader's member id (empty on error).
    pub leader: String,
    /// The member's id (the newly assigned one with `MEMBER_ID_REQUIRED`).
    pub member_id: String,
    /// Every member's metadata: only in the leader's response.
    pub members: Vec<MemberInfo>,
}

impl JoinResponse {
    fn error(error: ErrorCode, member_id: &str) -> Self {
        JoinResponse {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

/// A SyncGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncGroup {
    /// The group.
    pub group_id: String,
    /// The generation the member joined.
    pub generation_id: i32,
    /// The member id.
    pub member_id: String,
    /// The static instance id.
    pub group_instance_id: Option<String>,
    /// The protocol type (v5+), checked against the group's.
    pub protocol_type: Option<String>,
    /// The protocol name (v5+), checked against the group's.
    pub protocol_name: Option<String>,
    /// The leader's assignment (empty for followers).
    pub assignments: Vec<(String, Bytes)>,
}

/// A SyncGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncResponse {
    /// The error (`None` on success).
    pub error: ErrorCode,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The selected protocol.
    pub protocol_name: Option<String>,
    /// This member's assignment.
    pub assignment: Bytes,
}

impl SyncResponse {
    fn error(error: ErrorCode) -> Self {
        SyncResponse {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// A deferred answer to a parked JoinGroup or SyncGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The answer to the JoinGroup parked under this ticket.
    Join(u64, JoinResponse),
    /// The answer to the SyncGroup parked under this ticket.
    Sync(u64, SyncResponse),
}

impl Completion {
    /// The ticket this completion answers.
    pub fn ticket(&self) -> u64 {
        match self {
            Completion::Join(t, _) | Completion::Sync(t, _) => *t,
        }
    }
}

/// One member in a DescribeGroups answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member id.
    pub member_id: String,
    /// The static instance id.
    pub group_instance_id: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub client_host: String,
    /// The member's metadata for the selected protocol (empty before one is selected).
    pub metadata: Bytes,
    /// The member's current assignment.
    pub assignment: Bytes,
}

/// A DescribeGroups answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// Kafka's state name.
    pub state: &'static str,
    /// The protocol type (`""` when none).
    pub protocol_type: String,
    /// The selected protocol (`""` when none).
    pub protocol: String,
    /// The current generation.
    pub generation_id: i32,
    /// The leader's member id, if any.
    pub leader: Option<String>,
    /// The members.
    pub members: Vec<MemberDescription>,
}

#[derive(Clone, Debug)]
struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    assignment: Bytes,
    /// The generation `assignment` belongs to (-1: none).
    assignment_generation: i32,
    join_ticket: Option<u64>,
    sync_ticket: Option<u64>,
    heartbeat_deadline_ms: i64,
    /// Join order, for leader election.
    seq: u64,
}

impl Member {
    fn metadata_for(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|p| self.protocols.iter().find(|(n, _)| n == p))
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug)]
struct Group {
    group_id: String,
    state: GroupState,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: BTreeMap<String, Member>,
    /// group.instance.id → member id.
    static_members: HashMap<String, String>,
    /// KIP-394 members that got MEMBER_ID_REQUIRED: member id → expiry.
    pending_members: BTreeMap<String, i64>,
    /// Members of the current generation that have not sent SyncGroup yet.
    pending_sync: BTreeSet<String>,
    join_deadline_ms: Option<i64>,
    /// `Some(remaining)` while the initial delayed join of an empty group runs.
    initial_delay_remaining_ms: Option<i64>,
    new_member_added: bool,
    sync_deadline_ms: Option<i64>,
    /// Topics the members subscribe to (consumer groups); `None` = unknown.
    subscribed_topics: Option<BTreeSet<String>>,
    state_timestamp_ms: i64,
    offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// The group metadata last written for this group: (generation, whether it held
    /// members, the record's key and value). A Stable generation is written so that a
    /// new coordinator restores the members (they carry on without a rebalance, as
    /// Kafka's); an Empty one after a Stable one, so they are not restored.
    persisted: Option<(i32, bool, Bytes, Bytes)>,
}

impl Group {
    fn new(group_id: &str, now: i64) -> Self {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            join_deadline_ms: None,
            initial_delay_remaining_ms: None,
            new_member_added: false,
            sync_deadline_ms: None,
            subscribed_topics: Some(BTreeSet::new()),
            state_timestamp_ms: now,
            offsets: BTreeMap::new(),
            persisted: None,
        }
    }

    /// Forgets every member (a load replacing what an earlier record restored, or a
    /// deleted group): Empty, no leader, protocol or subscriptions.
    fn clear_members(&mut self) {
        self.members.clear();
        self.static_members.clear();
        self.pending_sync.clear();
        self.pending_members.clear();
        self.leader_id = None;
        self.protocol_name = None;
        self.subscribed_topics = Some(BTreeSet::new());
        self.state = GroupState::Empty;
    }

    fn transition(&mut self, state: GroupState, now: i64) {
        self.state = state;
        self.state_timestamp_ms = now;
    }

    fn is_static_member_fenced(&self, member_id: &str, instance: Option<&str>) -> bool {
        instance
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|current| current != member_id)
    }

    /// Kafka's `validateCurrentMember`.
    fn validate_current_member(&self, member_id: &str, instance: Option<&str>) -> ErrorCode {
        if self.is_static_member_fenced(member_id, instance) {
            ErrorCode::FencedInstanceId
        } else if !self.members.contains_key(member_id) {
            ErrorCode::UnknownMemberId
        } else {
            ErrorCode::None
        }
    }

    /// Kafka's `supportsProtocols`.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    /// Kafka's `selectProtocol`: among protocols every member supports, the one most
    /// members prefer (ties go to the earliest member's preference order).
    fn select_protocol(&self) -> Option<String> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.seq);
        let first = members.first()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                members
                    .iter()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == *n))
            })
            .collect();
        let mut votes: Vec<(usize, &String)> = candidates.iter().map(|c| (0, *c)).collect();
        for m in &members {
            if let Some((name, _)) = m.protocols.iter().find(|(p, _)| candidates.contains(&p))
                && let Some(v) = votes.iter_mut().find(|(_, c)| *c == name)
            {
                v.0 += 1;
            }
        }
        let best = votes.iter().map(|(n, _)| *n).max()?;
        votes
            .into_iter()
            .find(|(n, _)| *n == best)
            .map(|(_, c)| c.clone())
    }

    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    fn has_all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.join_ticket.is_some())
    }

    fn first_member_by_seq(&self, filter: impl Fn(&Member) -> bool) -> Option<&Member> {
        self.members
            .values()
            .filter(|m| filter(m))
            .min_by_key(|m| m.seq)
    }

    fn add_member(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.members.insert(member.member_id.clone(), member);
    }

    /// The persisted form of the group.
    fn metadata_value(&self) -> GroupMetadataValue {
        let protocol = self.protocol_name.as_deref();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| StoredMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata_for(protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }
}

/// The state-changing context every group operation needs.
struct Ctx<'a> {
    now: i64,
    config: &'a GroupConfig,
    out: &'a mut Vec<Completion>,
}

impl Ctx<'_> {
    fn answer_join(&mut self, member: &mut Member, response: JoinResponse) {
        if let Some(ticket) = member.join_ticket.take() {
            self.out.push(Completion::Join(ticket, response));
        }
    }

    fn answer_sync(&mut self, member: &mut Member, response: SyncResponse) {
        if let Some(ticket) = member.sync_ticket.take() {
            self.out.push(Completion::Sync(ticket, response));
        }
    }

    /// Kafka's `maybePrepareRebalance`.
    fn maybe_prepare_rebalance(&mut self, g: &mut Group) {
        if matches!(
            g.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        ) {
            self.prepare_rebalance(g);
        }
    }

    /// Kafka's `prepareRebalance`.
    fn prepare_rebalance(&mut self, g: &mut Group) {
        if g.state == GroupState::CompletingRebalance {
            // resetAndPropagateAssignmentError: members waiting in SyncGroup must rejoin.
            for m in g.members.values_mut() {
                m.assignment = Bytes::new();
                m.assignment_generation = -1;
                self.answer_sync(m, SyncResponse::error(ErrorCode::RebalanceInProgress));
            }
        }
        g.pending_sync.clear();
        g.sync_deadline_ms = None;
        if g.state == GroupState::Empty {
            let delay = self.config.initial_rebalance_delay_ms.max(0);
            g.join_deadline_ms = Some(self.now + delay);
            g.initial_delay_remaining_ms = Some((g.rebalance_timeout_ms() - delay).max(0));
            g.new_member_added = false;
        } else {
            g.join_deadline_ms = Some(self.now + g.rebalance_timeout_ms());
            g.initial_delay_remaining_ms = None;
        }
        g.transition(GroupState::PreparingRebalance, self.now);
        tracing::debug!(group = %g.group_id, generation = g.generation_id, "preparing rebalance");
        self.try_complete_join(g);
    }

    /// Kafka's `DelayedJoin.tryComplete` (the initial delayed join only completes on expiry).
    fn try_complete_join(&mut self, g: &mut Group) {
        if g.state == GroupState::PreparingRebalance
            && g.initial_delay_remaining_ms.is_none()
            && g.has_all_members_joined()
        {
            self.complete_join(g);
        }
    }

    /// Kafka's `onCompleteJoin` + `initNextGeneration`.
    fn complete_join(&mut self, g: &mut Group) {
        g.join_deadline_ms = None;
        g.initial_delay_remaining_ms = None;
        // Dynamic members that did not rejoin are dropped; static ones stay (KIP-345) until
        // their session expires.
        let gone: Vec<String> = g
            .members
            .values()
            .filter(|m| m.join_ticket.is_none() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in gone {
            self.remove_member_quietly(g, &id, ErrorCode::UnknownMemberId);
        }
        if !g.members.is_empty() {
            // maybeElectNewJoinedLeader
            let leader_joined = g
                .leader_id
                .as_ref()
                .and_then(|l| g.members.get(l))
                .is_some_and(|m| m.join_ticket.is_some());
            if !leader_joined {
                match g.first_member_by_seq(|m| m.join_ticket.is_some()) {
                    Some(m) => g.leader_id = Some(m.member_id.clone()),
                    None => {
                        // Nobody rejoined (only static members remain): wait another round
                        // for their sessions to expire.
                        g.join_deadline_ms = Some(self.now + g.rebalance_timeout_ms());
                        return;
                    }
                }
            }
        }
        g.generation_id += 1;
        if g.members.is_empty() {
            g.protocol_name = None;
            g.protocol_type = None;
            g.leader_id = None;
            g.subscribed_topics = Some(BTreeSet::new());
            g.transition(GroupState::Empty, self.now);
            tracing::debug!(group = %g.group_id, generation = g.generation_id, "group is empty");
            return;
        }
        g.protocol_name = g.select_protocol();
        g.subscribed_topics = compute_subscribed_topics(g);
        g.transition(GroupState::CompletingRebalance, self.now);
        g.pending_sync = g.members.keys().cloned().collect();
        g.sync_deadline_ms = Some(self.now + g.rebalance_timeout_ms());
        let protocol = g.protocol_name.clone();
        let leader = g.leader_id.clone().unwrap_or_default();
        let mut all: Vec<&Member> = g.members.values().collect();
        all.sort_by_key(|m| m.seq);
        let member_infos: Vec<MemberInfo> = all
            .iter()
            .map(|m| MemberInfo {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(protocol.as_deref()),
            })
            .collect();
        let generation_id = g.generation_id;
        let protocol_type = g.protocol_type.clone();
        tracing::debug!(group = %g.group_id, generation_id, members = g.members.len(), "join completed");
        for m in g.members.values_mut() {
            if m.join_ticket.is_none() {
                continue;
            }
            let response = JoinResponse {
                error: ErrorCode::None,
                generation_id,
                protocol_type: protocol_type.clone(),
                protocol_name: protocol.clone(),
                leader: leader.clone(),
                member_id: m.member_id.clone(),
                members: if m.member_id == leader {
                    member_infos.clone()
                } else {
                    Vec::new()
                },
            };
            m.heartbeat_deadline_ms = self.now + i64::from(m.session_timeout_ms);
            self.answer_join(m, response);
        }
    }

    /// Removes a member, answering its parked requests with `error`, without reacting.
    fn remove_member_quietly(&mut self, g: &mut Group, member_id: &str, error: ErrorCode) {
        let Some(mut m) = g.members.remove(member_id) else {
            return;
        };
        self.answer_join(&mut m, JoinResponse::error(error, member_id));
        self.answer_sync(&mut m, SyncResponse::error(error));
        if let Some(instance) = &m.group_instance_id
            && g.static_members.get(instance).map(String::as_str) == Some(member_id)
        {
            g.static_members.remove(instance);
        }
        g.pending_sync.remove(member_id);
        if g.leader_id.as_deref() == Some(member_id) {
            g.leader_id = g.first_member_by_seq(|_| true).map(|m| m.member_id.clone());
        }
    }

    /// Kafka's `removeMemberAndUpdateGroup`.
    fn remove_member_and_update_group(&mut self, g: &mut Group, member_id: &str) {
        self.remove_member_quietly(g, member_id, ErrorCode::UnknownMemberId);
        match g.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.maybe_prepare_rebalance(g),
            GroupState::PreparingRebalance => self.try_complete_join(g),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Fires every timer of `g` that is due; returns whether any fired.
    fn fire_timers(&mut self, g: &mut Group) -> bool {
        let now = self.now;
        // Join phase.
        if g.state == GroupState::PreparingRebalance && g.join_deadline_ms.is_some_and(|d| d <= now)
        {
            match g.initial_delay_remaining_ms {
                Some(remaining) if g.new_member_added && remaining > 0 => {
                    let delay = self.config.initial_rebalance_delay_ms.max(0).min(remaining);
                    g.new_member_added = false;
                    g.initial_delay_remaining_ms = Some(remaining - delay);
                    g.join_deadline_ms = Some(now + delay);
                }
                _ => self.complete_join(g),
            }
            return true;
        }
        // Sync phase: members that never sent SyncGroup are removed.
        if matches!(
            g.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) && g.sync_deadline_ms.is_some_and(|d| d <= now)
        {
            g.sync_deadline_ms = None;
            let laggards: Vec<String> = std::mem::take(&mut g.pending_sync).into_iter().collect();
            for id in laggards {
                self.remove_member_and_update_group(g, &id);
            }
            return true;
        }
        // Sessions.
        let expired: Option<String> = g
            .members
            .values()
            .find(|m| {
                m.join_ticket.is_none() && m.sync_ticket.is_none() && m.heartbeat_deadline_ms <= now
            })
            .map(|m| m.member_id.clone());
        if let Some(id) = expired {
            tracing::debug!(group = %g.group_id, member = %id, "session expired");
            self.remove_member_and_update_group(g, &id);
            return true;
        }
        let pending: Option<String> = g
            .pending_members
            .iter()
            .find(|(_, d)| **d <= now)
            .map(|(id, _)| id.clone());
        if let Some(id) = pending {
            g.pending_members.remove(&id);
            self.try_complete_join(g);
            return true;
        }
        false
    }

    fn run_timers(&mut self, g: &mut Group) {
        // Each firing either removes a member or moves a deadline forward; the bound is a
        // guard against a zero-length timer loop, never reached in practice.
        for _ in 0..(4 * (g.members.len() + g.pending_members.len()) + 16) {
            if !self.fire_timers(g) {
                break;
            }
        }
    }
}

fn compute_subscribed_topics(g: &Group) -> Option<BTreeSet<String>> {
    if g.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
        return None;
    }
    let protocol = g.protocol_name.as_deref();
    let mut topics = BTreeSet::new();
    for m in g.members.values() {
        let meta = m.metadata_for(protocol);
        topics.extend(records::parse_consumer_subscription_topics(&meta)?);
    }
    Some(topics)
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
}

impl GroupCoordinator {
    /// A coordinator with no groups.
    pub fn new(config: GroupConfig) -> Self {
        GroupCoordinator {
            config,
            groups: BTreeMap::new(),
            next_member_seq: 0,
            outbox: Vec::new(),
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

    fn new_member_id(next_seq: &mut u64, prefix: &str, g: Option<&Group>) -> (String, u64) {
        loop {
            *next_seq += 1;
            let seq = *next_seq;
            let id = format!("{prefix}-{seq:016x}");
            let taken = g.is_some_and(|g| {
                g.members.contains_key(&id) || g.pending_members.contains_key(&id)
            });
            if !taken {
                return (id, seq);
            }
        }
    }

    /// Pulls the answer for `ticket` out of the outbox if this call produced it.
    fn take_own<T>(&mut self, ticket: u64, pick: impl Fn(Completion) -> Option<T>) -> Option<T> {
        let idx = self.outbox.iter().position(|c| c.ticket() == ticket)?;
        pick(self.outbox.remove(idx))
    }

    /// JoinGroup (Kafka's `handleJoinGroup`).
    pub fn join(
        &mut self,
        now: i64,
        ticket: u64,
        req: JoinGroup,
    ) -> (Option<JoinResponse>, Vec<Completion>) {
        let mut answer = self.join_inner(now, ticket, req);
        if answer.is_none() {
            answer = self.take_own(ticket, |c| match c {
                Completion::Join(_, r) => Some(r),
                Completion::Sync(..) => None,
            });
        }
        (answer, self.take_completions())
    }

    fn join_inner(&mut self, now: i64, ticket: u64, req: JoinGroup) -> Option<JoinResponse> {
        if req.group_id.is_empty() {
            return Some(JoinResponse::error(
                ErrorCode::InvalidGroupId,
                &req.member_id,
            ));
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return Some(JoinResponse::error(
                ErrorCode::InvalidSessionTimeout,
                &req.member_id,
            ));
        }
        let new_member = req.member_id.is_empty();
        if !self.groups.contains_key(&req.group_id) {
            if !new_member {
                return Some(JoinResponse::error(
                    ErrorCode::UnknownMemberId,
                    &req.member_id,
                ));
            }
            self.groups
                .insert(req.group_id.clone(), Group::new(&req.group_id, now));
        }
        let group = self.groups.get(&req.group_id)?;
        if group.state == GroupState::Dead {
            return Some(JoinResponse::error(
                ErrorCode::CoordinatorNotAvailable,
                &req.member_id,
            ));
        }
        if !group.supports_protocols(&req.protocol_type, &req.protocols) {
            return Some(JoinResponse::error(
                ErrorCode::InconsistentGroupProtocol,
                &req.member_id,
            ));
        }
        let static_known = req
            .group_instance_id
            .as_ref()
            .is_some_and(|i| group.static_members.contains_key(i));
        let already_in = group.members.contains_key(&req.member_id)
            || group.pending_members.contains_key(&req.member_id)
            || static_known;
        if let Some(max) = self.config.max_group_size
            && !already_in
            && group.members.len() >= max
        {
            return Some(JoinResponse::error(
                ErrorCode::GroupMaxSizeReached,
                &req.member_id,
            ));
        }
        if new_member {
            let prefix = req
                .group_instance_id
                .clone()
                .unwrap_or_else(|| req.client_id.clone());
            let group = self.groups.get(&req.group_id);
            let (member_id, seq) = Self::new_member_id(&mut self.next_member_seq, &prefix, group);
            if req.group_instance_id.is_some() {
                return self.join_static_new_member(now, ticket, req, member_id, seq);
            }
            if req.require_known_member_id {
                let deadline = now + i64::from(req.session_timeout_ms);
                self.with_group(now, &req.group_id, |_, g| {
                    g.pending_members.insert(member_id.clone(), deadline);
                });
                return Some(JoinResponse::error(ErrorCode::MemberIdRequired, &member_id));
            }
            return self.add_member_and_rebalance(now, ticket, req, member_id, seq);
        }
        // A known (or pending) member id.
        let group = self.groups.get(&req.group_id)?;
        if group.pending_members.contains_key(&req.member_id) {
            let member_id = req.member_id.clone();
            self.next_member_seq += 1;
            let seq = self.next_member_seq;
            return self.add_member_and_rebalance(now, ticket, req, member_id, seq);
        }
        let err = group.validate_current_member(&req.member_id, req.group_instance_id.as_deref());
        if !err.is_ok() {
            return Some(JoinResponse::error(err, &req.member_id));
        }
        self.with_group(now, &req.group_id, |ctx, g| {
            let state = g.state;
            let member = g.members.get(&req.member_id)?;
            let matches = member.protocols == req.protocols;
            let is_leader = g.leader_id.as_deref() == Some(req.member_id.as_str());
            match state {
                GroupState::Empty | GroupState::Dead => Some(JoinResponse::error(
                    ErrorCode::UnknownMemberId,
                    &req.member_id,
                )),
                GroupState::CompletingRebalance if matches => {
                    // A duplicate join (e.g. a retried request): answer with the current
                    // generation without rebalancing.
                    Some(current_generation_response(g, &req.member_id, is_leader))
                }
                GroupState::Stable if matches && !is_leader => {
                    Some(current_generation_response(g, &req.member_id, false))
                }
                _ => {
                    update_member_and_rebalance(ctx, g, ticket, &req);
                    None
                }
            }
        })
        .flatten()
    }

    fn add_member_and_rebalance(
        &mut self,
        now: i64,
        ticket: u64,
        req: JoinGroup,
        member_id: String,
        seq: u64,
    ) -> Option<JoinResponse> {
        self.with_group(now, &req.group_id, |ctx, g| {
            g.pending_members.remove(&member_id);
            let member = Member {
                member_id: member_id.clone(),
                group_instance_id: req.group_instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                protocol_type: req.protocol_type.clone(),
                protocols: req.protocols.clone(),
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                assignment: Bytes::new(),
                assignment_generation: -1,
                join_ticket: Some(ticket),
                sync_ticket: None,
                heartbeat_deadline_ms: now + i64::from(req.session_timeout_ms),
                seq,
            };
            if g.state == GroupState::PreparingRebalance && g.generation_id == 0 {
                g.new_member_added = true;
            }
            g.add_member(member);
            ctx.maybe_prepare_rebalance(g);
            ctx.try_complete_join(g);
        });
        None
    }

    /// KIP-345: a static member joining with an empty member id.
    fn join_static_new_member(
        &mut self,
        now: i64,
        ticket: u64,
        req: JoinGroup,
        new_member_id: String,
        seq: u64,
    ) -> Option<JoinResponse> {
        let instance = req.group_instance_id.clone().unwrap_or_default();
        let old_member_id = self
            .groups
            .get(&req.group_id)
            .and_then(|g| g.static_members.get(&instance).cloned());
        let Some(old_member_id) = old_member_id else {
            return self.add_member_and_rebalance(now, ticket, req, new_member_id, seq);
        };
        self.with_group(now, &req.group_id, |ctx, g| {
            let previous_leader = g.leader_id.clone().unwrap_or_default();
            let mut member = g.members.remove(&old_member_id)?;
            ctx.answer_join(
                &mut member,
                JoinResponse::error(ErrorCode::FencedInstanceId, &old_member_id),
            );
            ctx.answer_sync(&mut member, SyncResponse::error(ErrorCode::FencedInstanceId));
            let old_protocols = std::mem::replace(&mut member.protocols, req.protocols.clone());
            member.member_id = new_member_id.clone();
            member.client_id = req.client_id.clone();
            member.client_host = req.client_host.clone();
            member.session_timeout_ms = req.session_timeout_ms;
            member.rebalance_timeout_ms = req.rebalance_timeout_ms;
            member.heartbeat_deadline_ms = now + i64::from(req.session_timeout_ms);
            g.members.insert(new_member_id.clone(), member);
            g.static_members.insert(instance.clone(), new_member_id.clone());
            if g.leader_id.as_deref() == Some(old_member_id.as_str()) {
                g.leader_id = Some(new_member_id.clone());
            }
            if g.pending_sync.remove(&old_member_id) {
                g.pending_sync.insert(new_member_id.clone());
            }
            tracing::debug!(group = %g.group_id, %instance, old = %old_member_id, new = %new_member_id, "static member replaced");
            match g.state {
                GroupState::Stable => {
                    let unchanged = old_protocols == req.protocols
                        || g.select_protocol() == g.protocol_name;
                    if unchanged {
                        // No rebalance: the new id takes over the old one's assignment. The
                        // leader field names the leader as it was before the replacement
                        // (pre-KIP-814 behaviour), so a restarted leader acts as a follower
                        // and fetches its assignment with SyncGroup.
                        let mut r = current_generation_response(g, &new_member_id, false);
                        r.leader = previous_leader;
                        Some(r)
                    } else {
                        if let Some(m) = g.members.get_mut(&new_member_id) {
                            m.join_ticket = Some(ticket);
                        }
                        ctx.maybe_prepare_rebalance(g);
                        None
                    }
                }
                GroupState::CompletingRebalance => {
                    if let Some(m) = g.members.get_mut(&new_member_id) {
                        m.join_ticket = Some(ticket);
                    }
                    ctx.prepare_rebalance(g);
                    None
                }
                GroupState::PreparingRebalance => {
                    if let Some(m) = g.members.get_mut(&new_member_id) {
                        m.join_ticket = Some(ticket);
                    }
                    ctx.try_complete_join(g);
                    None
                }
                GroupState::Empty | GroupState::Dead => Some(JoinResponse::error(
                    ErrorCode::UnknownMemberId,
                    &new_member_id,
                )),
            }
        })
        .flatten()
    }

    /// SyncGroup (Kafka's `handleSyncGroup`).
    pub fn sync(
        &mut self,
        now: i64,
        ticket: u64,
        req: SyncGroup,
    ) -> (Option<SyncResponse>, Vec<Completion>) {
        let mut answer = self
            .with_group(now, &req.group_id, |ctx, g| {
                sync_in_group(ctx, g, ticket, &req)
            })
            .unwrap_or_else(|| Some(SyncResponse::error(ErrorCode::UnknownMemberId)));
        if answer.is_none() {
            answer = self.take_own(ticket, |c| match c {
                Completion::Sync(_, r) => Some(r),
                Completion::Join(..) => None,
            });
        }
        (answer, self.take_completions())
    }

    /// Heartbeat (Kafka's `handleHeartbeat`).
    pub fn heartbeat(
        &mut self,
        now: i64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> ErrorCode {
        self.with_group(now, group_id, |_, g| {
            if g.state == GroupState::Dead {
                return ErrorCode::CoordinatorNotAvailable;
            }
            let err = g.validate_current_member(member_id, group_instance_id);
            if !err.is_ok() {
                return err;
            }
            if generation_id != g.generation_id {
                return ErrorCode::IllegalGeneration;
            }
            let state = g.state;
            let Some(m) = g.members.get_mut(member_id) else {
                return ErrorCode::UnknownMemberId;
            };
            match state {
                GroupState::Empty | GroupState::Dead => ErrorCode::UnknownMemberId,
                GroupState::CompletingRebalance | GroupState::Stable => {
                    m.heartbeat_deadline_ms = now + i64::from(m.session_timeout_ms);
                    ErrorCode::None
                }
                GroupState::PreparingRebalance => {
                    m.heartbeat_deadline_ms = now + i64::from(m.session_timeout_ms);
                    ErrorCode::RebalanceInProgress
                }
            }
        })
        .unwrap_or(ErrorCode::UnknownMemberId)
    }

    /// LeaveGroup (Kafka's `handleLeaveGroup`): `members` are `(member_id,
    /// group_instance_id)`; an empty member id with an instance id removes whichever member
    /// currently holds that instance id (v3+ batch leave). Returns the top-level error and
    /// one error per member.
    pub fn leave(
        &mut self,
        now: i64,
        group_id: &str,
        members: Vec<(String, Option<String>)>,
    ) -> (ErrorCode, Vec<(String, ErrorCode)>, Vec<Completion>) {
        let (code, per_member) = self.leave_inner(now, group_id, members);
        (code, per_member, self.take_completions())
    }

    fn leave_inner(
        &mut self,
        now: i64,
        group_id: &str,
        members: Vec<(String, Option<String>)>,
    ) -> (ErrorCode, Vec<(String, ErrorCode)>) {
        let unknown = |members: &[(String, Option<String>)]| {
            members
                .iter()
                .map(|(m, _)| (m.clone(), ErrorCode::UnknownMemberId))
                .collect()
        };
        self.with_group(now, group_id, |ctx, g| {
            if g.state == GroupState::Dead {
                return (ErrorCode::CoordinatorNotAvailable, Vec::new());
            }
            let mut results = Vec::with_capacity(members.len());
            for (member_id, instance) in &members {
                let resolved = match (member_id.is_empty(), instance) {
                    (true, Some(i)) => g.static_members.get(i).cloned(),
                    _ => Some(member_id.clone()),
                };
                let Some(resolved) = resolved else {
                    results.push((member_id.clone(), ErrorCode::UnknownMemberId));
                    continue;
                };
                if instance.is_none() && g.pending_members.remove(&resolved).is_some() {
                    ctx.try_complete_join(g);
                    results.push((member_id.clone(), ErrorCode::None));
                    continue;
                }
                let err = g.validate_current_member(&resolved, instance.as_deref());
                if err.is_ok() {
                    tracing::debug!(group = %g.group_id, member = %resolved, "member left");
                    ctx.remove_member_and_update_group(g, &resolved);
                }
                results.push((member_id.clone(), err));
            }
            (ErrorCode::None, results)
        })
        .unwrap_or_else(|| (ErrorCode::None, unknown(&members)))
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

    /// OffsetCommit validation (Kafka's `validateOffsetCommit` + `doCommitOffsets`).
    ///
    /// Generation `-1` with an empty member id and no instance id is a standalone
    /// ("simple") commit: allowed when the group is unknown (an Empty group is created)
    /// or Empty. Otherwise the member must be current (UNKNOWN_MEMBER_ID /
    /// FENCED_INSTANCE_ID), of the current generation (ILLEGAL_GENERATION), and the group
    /// not waiting for the leader's assignment (REBALANCE_IN_PROGRESS). A valid member
    /// commit counts as a heartbeat. On `None`, the caller stores the offsets with
    /// [`commit`](Self::commit) (after persisting them).
    pub fn validate_commit(
        &mut self,
        now: i64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> ErrorCode {
        if group_id.is_empty() {
            return ErrorCode::InvalidGroupId;
        }
        if !self.groups.contains_key(group_id) {
            if generation_id < 0 {
                self.groups
                    .insert(group_id.to_string(), Group::new(group_id, now));
                return ErrorCode::None;
            }
            return ErrorCode::IllegalGeneration;
        }
        self.with_group(now, group_id, |_, g| {
            if g.state == GroupState::Dead {
                return ErrorCode::CoordinatorNotAvailable;
            }
            if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
                let err = g.validate_current_member(member_id, group_instance_id);
                if !err.is_ok() {
                    return err;
                }
                if generation_id != g.generation_id {
                    return ErrorCode::IllegalGeneration;
                }
            } else if g.state != GroupState::Empty {
                // A non-empty group only accepts commits from its members.
                return ErrorCode::UnknownMemberId;
            } else {
                return ErrorCode::None;
            }
            if g.state == GroupState::CompletingRebalance {
                return ErrorCode::RebalanceInProgress;
            }
            match g.members.get_mut(member_id) {
                Some(m) => {
                    m.heartbeat_deadline_ms = now + i64::from(m.session_timeout_ms);
                    ErrorCode::None
                }
                None => ErrorCode::UnknownMemberId,
            }
        })
        .unwrap_or(ErrorCode::UnknownMemberId)
    }

    fn group_or_create(&mut self, group_id: &str) -> &mut Group {
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, 0))
    }

    /// Stores a committed offset (creating an Empty group if needed).
    pub fn commit(&mut self, group_id: &str, topic: &str, partition: i32, offset: CommittedOffset) {
        self.group_or_create(group_id)
            .offsets
            .insert((topic.to_string(), partition), offset);
    }

    /// The committed offset of one partition.
    pub fn committed(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<CommittedOffset> {
        self.groups
            .get(group_id)?
            .offsets
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// Every committed offset of a group, ordered by topic then partition.
    pub fn offsets(&self, group_id: &str) -> Vec<(String, i32, CommittedOffset)> {
        self.groups
            .get(group_id)
            .map(|g| {
                g.offsets
                    .iter()
                    .map(|((t, p), o)| (t.clone(), *p, o.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// OffsetDelete (Kafka's `handleDeleteOffsets`): returns the top-level error and one
    /// error per partition. Consumer groups keep offsets of topics a member subscribes to
    /// (GROUP_SUBSCRIBED_TO_TOPIC; subscriptions that do not parse count as subscribed to
    /// everything); other non-empty groups answer NON_EMPTY_GROUP. The caller writes
    /// [`offset_tombstone`](crate::offset_tombstone)s for the partitions answered `None`.
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> (ErrorCode, Vec<(String, i32, ErrorCode)>) {
        let Some(g) = self.groups.get_mut(group_id) else {
            return (ErrorCode::GroupIdNotFound, Vec::new());
        };
        if g.state == GroupState::Dead {
            return (ErrorCode::GroupIdNotFound, Vec::new());
        }
        let consumer = g.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE);
        if !consumer && g.state != GroupState::Empty {
            return (ErrorCode::NonEmptyGroup, Vec::new());
        }
        let results = partitions
            .iter()
            .map(|(topic, partition)| {
                let subscribed = consumer
                    && g.state != GroupState::Empty
                    && g.subscribed_topics
                        .as_ref()
                        .is_none_or(|t| t.contains(topic));
                if subscribed {
                    (topic.clone(), *partition, ErrorCode::GroupSubscribedToTopic)
                } else {
                    g.offsets.remove(&(topic.clone(), *partition));
                    (topic.clone(), *partition, ErrorCode::None)
                }
            })
            .collect();
        (ErrorCode::None, results)
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

    /// The group metadata record (key, value) to persist the group's current state in
    /// `__consumer_offsets` (e.g. after a generation completes), `None` if unknown.
    pub fn group_metadata_record(&self, group_id: &str) -> Option<(Bytes, Bytes)> {
        let g = self.groups.get(group_id)?;
        Some(records::group_metadata_record(
            group_id,
            &g.metadata_value(),
        ))
    }

    /// The group metadata records to write now: every group that became Stable in a
    /// generation not yet written, and every group that became Empty after a Stable
    /// generation was written. Marks them written (write them before the next call).
    pub fn take_persist(&mut self) -> Vec<(Bytes, Bytes)> {
        let mut out = Vec::new();
        for g in self.groups.values_mut() {
            let stable = match g.state {
                GroupState::Stable => true,
                GroupState::Empty => false,
                _ => continue,
            };
            let due = match &g.persisted {
                None => stable,
                Some((generation, held, _, _)) => {
                    if stable {
                        *generation != g.generation_id || !held
                    } else {
                        *held
                    }
                }
            };
            if due {
                let (k, v) = records::group_metadata_record(&g.group_id, &g.metadata_value());
                g.persisted = Some((g.generation_id, stable, k.clone(), v.clone()));
                out.push((k, v));
            }
        }
        out
    }

    /// The last written group metadata record of every group whose members it holds
    /// (what an offsets checkpoint must write again).
    pub fn persisted_records(&self) -> Vec<(Bytes, Bytes)> {
        self.groups
            .values()
            .filter_map(|g| match &g.persisted {
                Some((_, true, k, v)) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }

    /// Ends a load: members restored by [`Self::replay`] get a full session from `now`
    /// (their heartbeats went to the previous coordinator).
    pub fn loaded(&mut self, now: i64) {
        for g in self.groups.values_mut() {
            for m in g.members.values_mut() {
                m.heartbeat_deadline_ms = now + i64::from(m.session_timeout_ms);
            }
        }
    }

    /// Restores a Stable generation's members from its metadata record.
    fn restore_members(&mut self, group_id: &str, v: records::GroupMetadataValue) {
        let mut seq = self.next_member_seq;
        let g = self.group_or_create(group_id);
        g.clear_members();
        g.protocol_type = (!v.protocol_type.is_empty()).then_some(v.protocol_type.clone());
        g.generation_id = v.generation_id;
        g.state_timestamp_ms = v.current_state_timestamp_ms;
        let restorable = v.protocol_name.is_some()
            && !v.members.is_empty()
            && v.leader
                .as_ref()
                .is_some_and(|l| v.members.iter().any(|m| &m.member_id == l))
            && {
                // One member id or instance id twice is no record this coordinator
                // wrote: restoring it would leave a static mapping dangling.
                let mut ids = BTreeSet::new();
                let mut instances = BTreeSet::new();
                v.members.iter().all(|m| {
                    ids.insert(m.member_id.as_str())
                        && m.group_instance_id
                            .as_deref()
                            .is_none_or(|i| instances.insert(i))
                })
            };
        if !restorable {
            return;
        }
        let protocol = v.protocol_name.clone().unwrap_or_default();
        for m in v.members {
            seq += 1;
            if let Some(i) = &m.group_instance_id {
                g.static_members.insert(i.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    protocol_type: v.protocol_type.clone(),
                    protocols: vec![(protocol.clone(), m.subscription)],
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    assignment: m.assignment,
                    assignment_generation: v.generation_id,
                    join_ticket: None,
                    sync_ticket: None,
                    heartbeat_deadline_ms: 0,
                    seq,
                },
            );
        }
        g.protocol_name = Some(protocol);
        g.leader_id = v.leader;
        g.subscribed_topics = compute_subscribed_topics(g);
        g.state = GroupState::Stable;
        self.next_member_seq = seq;
    }

    /// Rebuilds state from one `__consumer_offsets` record (`value == None` is a
    /// tombstone), in log order; end a load with [`Self::loaded`]. Offsets are restored
    /// exactly. A group metadata record replaces what an earlier one restored: a Stable
    /// generation's members come back as they were (so they carry on, heartbeating with
    /// their member ids and generation, without a rebalance, as with Kafka's
    /// coordinator); an Empty one restores the group with its protocol type and
    /// generation but no members. A group tombstone removes the group unless offsets
    /// remain.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), DecodeError> {
        let raw = value;
        match records::decode_record(key, value)? {
            ConsumerOffsetsRecord::Offset {
                group_id,
                topic,
                partition,
                value,
            } => match value {
                Some(offset) => self.commit(&group_id, &topic, partition, offset),
                None => {
                    if let Some(g) = self.groups.get_mut(&group_id) {
                        g.offsets.remove(&(topic, partition));
                    }
                }
            },
            ConsumerOffsetsRecord::Group { group_id, value } => match value {
                Some(v) => {
                    let stable = !v.members.is_empty();
                    let record =
                        raw.map(|b| (Bytes::copy_from_slice(key), Bytes::copy_from_slice(b)));
                    self.restore_members(&group_id, v);
                    if let (Some(g), Some((k, b))) = (self.groups.get_mut(&group_id), record) {
                        let held = stable && g.state == GroupState::Stable;
                        g.persisted = Some((g.generation_id, held, k, b));
                    }
                }
                None => {
                    // The group was deleted (only an Empty group can be): no members
                    // come back, whatever an earlier record restored.
                    let remove = self
                        .groups
                        .get(&group_id)
                        .is_some_and(|g| g.offsets.is_empty());
                    if remove {
                        self.groups.remove(&group_id);
                    } else if let Some(g) = self.groups.get_mut(&group_id) {
                        g.clear_members();
                        g.protocol_type = None;
                        g.persisted = None;
                    }
                }
            },
        }
        Ok(())
    }

    /// Checks internal invariants (for tests): at most one leader and it is a member;
    /// static mappings point at members; in Stable every member holds an assignment of
    /// the current generation; parked requests only in the phases that park them.
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
        }
        Ok(())
    }
}

fn current_generation_response(g: &Group, member_id: &str, with_members: bool) -> JoinResponse {
    let protocol = g.protocol_name.as_deref();
    let members = if with_members {
        let mut all: Vec<&Member> = g.members.values().collect();
        all.sort_by_key(|m| m.seq);
        all.into_iter()
            .map(|m| MemberInfo {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(protocol),
            })
            .collect()
    } else {
        Vec::new()
    };
    JoinResponse {
        error: ErrorCode::None,
        generation_id: g.generation_id,
        protocol_type: g.protocol_type.clone(),
        protocol_name: g.protocol_name.clone(),
        leader: g.leader_id.clone().unwrap_or_default(),
        member_id: member_id.to_string(),
        members,
    }
}

/// Kafka's `updateMemberAndRebalance`.
fn update_member_and_rebalance(ctx: &mut Ctx<'_>, g: &mut Group, ticket: u64, req: &JoinGroup) {
    let Some(m) = g.members.get_mut(&req.member_id) else {
        return;
    };
    // A newer JoinGroup from the same member supersedes a parked one.
    ctx.answer_join(
        m,
        JoinResponse::error(ErrorCode::RebalanceInProgress, &req.member_id),
    );
    m.protocols = req.protocols.clone();
    m.session_timeout_ms = req.session_timeout_ms;
    m.rebalance_timeout_ms = req.rebalance_timeout_ms;
    m.client_id = req.client_id.clone();
    m.client_host = req.client_host.clone();
    m.join_ticket = Some(ticket);
    ctx.maybe_prepare_rebalance(g);
    ctx.try_complete_join(g);
}

fn sync_in_group(
    ctx: &mut Ctx<'_>,
    g: &mut Group,
    ticket: u64,
    req: &SyncGroup,
) -> Option<SyncResponse> {
    if g.state == GroupState::Dead {
        return Some(SyncResponse::error(ErrorCode::CoordinatorNotAvailable));
    }
    let err = g.validate_current_member(&req.member_id, req.group_instance_id.as_deref());
    if !err.is_ok() {
        return Some(SyncResponse::error(err));
    }
    if req.generation_id != g.generation_id {
        return Some(SyncResponse::error(ErrorCode::IllegalGeneration));
    }
    if req.protocol_type.is_some() && req.protocol_type != g.protocol_type
        || req.protocol_name.is_some() && req.protocol_name != g.protocol_name
    {
        return Some(SyncResponse::error(ErrorCode::InconsistentGroupProtocol));
    }
    match g.state {
        GroupState::Empty | GroupState::Dead => {
            Some(SyncResponse::error(ErrorCode::UnknownMemberId))
        }
        GroupState::PreparingRebalance => Some(SyncResponse::error(ErrorCode::RebalanceInProgress)),
        GroupState::CompletingRebalance => {
            g.pending_sync.remove(&req.member_id);
            if let Some(m) = g.members.get_mut(&req.member_id) {
                // A newer SyncGroup from the same member supersedes a parked one.
                ctx.answer_sync(m, SyncResponse::error(ErrorCode::RebalanceInProgress));
                m.sync_ticket = Some(ticket);
            }
            if g.leader_id.as_deref() == Some(req.member_id.as_str()) {
                let generation_id = g.generation_id;
                let assignments: HashMap<&str, &Bytes> = req
                    .assignments
                    .iter()
                    .map(|(m, a)| (m.as_str(), a))
                    .collect();
                let protocol_type = g.protocol_type.clone();
                let protocol_name = g.protocol_name.clone();
                for m in g.members.values_mut() {
                    m.assignment = assignments
                        .get(m.member_id.as_str())
                        .map(|a| (*a).clone())
                        .unwrap_or_default();
                    m.assignment_generation = generation_id;
                    let response = SyncResponse {
                        error: ErrorCode::None,
                        protocol_type: protocol_type.clone(),
                        protocol_name: protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    };
                    ctx.answer_sync(m, response);
                }
                g.transition(GroupState::Stable, ctx.now);
                tracing::debug!(group = %g.group_id, generation_id, "group is stable");
            }
            None
        }
        GroupState::Stable => {
            g.pending_sync.remove(&req.member_id);
            let m = g.members.get(&req.member_id)?;
            Some(SyncResponse {
                error: ErrorCode::None,
                protocol_type: g.protocol_type.clone(),
                protocol_name: g.protocol_name.clone(),
                assignment: m.assignment.clone(),
            })
        }
    }
}
