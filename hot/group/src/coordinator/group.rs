//! One group's state machine (Kafka's `GroupMetadata` and the rebalance logic of its
//! `GroupCoordinator`): the group's members, generation, leader and protocol; the state
//! transitions Empty → PreparingRebalance → CompletingRebalance → Stable; and the join,
//! sync and session timers that drive them. [`Ctx`] carries what a transition needs
//! (the time, the settings, the outbox for answers to parked requests).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use strata_proto::ErrorCode;

use super::{
    CONSUMER_PROTOCOL_TYPE, Completion, GroupConfig, JoinResponse, MemberInfo, SyncResponse,
};
use crate::records::{self, CommittedOffset};

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

#[derive(Clone, Debug)]
pub(super) struct Member {
    pub(super) member_id: String,
    pub(super) group_instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) protocol_type: String,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) session_timeout_ms: i32,
    pub(super) rebalance_timeout_ms: i32,
    pub(super) assignment: Bytes,
    /// The generation `assignment` belongs to (-1: none).
    pub(super) assignment_generation: i32,
    pub(super) join_ticket: Option<u64>,
    pub(super) sync_ticket: Option<u64>,
    pub(super) heartbeat_deadline_ms: i64,
    /// Join order, for leader election.
    pub(super) seq: u64,
}

impl Member {
    pub(super) fn metadata_for(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|p| self.protocols.iter().find(|(n, _)| n == p))
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A committed offset and where the record that carried it sits in
/// `__consumer_offsets` (Kafka's `CommitRecordMetadataAndOffset`): the record offset
/// decides between a plain commit and a transactional one that completes later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StoredOffset {
    pub(super) offset: CommittedOffset,
    pub(super) record_offset: i64,
}

#[derive(Clone, Debug)]
pub(super) struct Group {
    pub(super) group_id: String,
    pub(super) state: GroupState,
    pub(super) generation_id: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol_name: Option<String>,
    pub(super) leader_id: Option<String>,
    pub(super) members: BTreeMap<String, Member>,
    /// group.instance.id → member id.
    pub(super) static_members: HashMap<String, String>,
    /// KIP-394 members that got MEMBER_ID_REQUIRED: member id → expiry.
    pub(super) pending_members: BTreeMap<String, i64>,
    /// Members of the current generation that have not sent SyncGroup yet.
    pub(super) pending_sync: BTreeSet<String>,
    pub(super) join_deadline_ms: Option<i64>,
    /// `Some(remaining)` while the initial delayed join of an empty group runs.
    pub(super) initial_delay_remaining_ms: Option<i64>,
    pub(super) new_member_added: bool,
    pub(super) sync_deadline_ms: Option<i64>,
    /// Topics the members subscribe to (consumer groups); `None` = unknown.
    pub(super) subscribed_topics: Option<BTreeSet<String>>,
    pub(super) state_timestamp_ms: i64,
    /// The visible committed offsets, by (topic, partition).
    pub(super) offsets: BTreeMap<(String, i32), StoredOffset>,
    /// Transactional offsets waiting for their transaction's marker (Kafka's
    /// `pendingTransactionalOffsetCommits`): producer id → (topic, partition) → offset.
    /// Never holds an empty inner map.
    pub(super) pending_txn: BTreeMap<i64, BTreeMap<(String, i32), StoredOffset>>,
    /// The group metadata last written for this group: (generation, whether it held
    /// members, the record's key and value). A Stable generation is written so that a
    /// new coordinator restores the members (they carry on without a rebalance, as
    /// Kafka's); an Empty one after a Stable one, so they are not restored.
    pub(super) persisted: Option<(i32, bool, Bytes, Bytes)>,
}

impl Group {
    pub(super) fn new(group_id: &str, now: i64) -> Self {
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
            pending_txn: BTreeMap::new(),
            persisted: None,
        }
    }

    /// Forgets every member (a load replacing what an earlier record restored, or a
    /// deleted group): Empty, no leader, protocol or subscriptions.
    pub(super) fn clear_members(&mut self) {
        self.members.clear();
        self.static_members.clear();
        self.pending_sync.clear();
        self.pending_members.clear();
        self.leader_id = None;
        self.protocol_name = None;
        self.subscribed_topics = Some(BTreeSet::new());
        self.state = GroupState::Empty;
    }

    pub(super) fn transition(&mut self, state: GroupState, now: i64) {
        self.state = state;
        self.state_timestamp_ms = now;
    }

    /// Whether a transaction holds a pending offset for this partition.
    pub(super) fn has_pending_txn(&self, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.pending_txn.values().any(|p| p.contains_key(&key))
    }

    /// Drops every pending transactional offset of one partition (its offset was deleted).
    pub(super) fn drop_pending_txn(&mut self, topic: &str, partition: i32) {
        let key = (topic.to_string(), partition);
        self.pending_txn.retain(|_, p| {
            p.remove(&key);
            !p.is_empty()
        });
    }

    fn is_static_member_fenced(&self, member_id: &str, instance: Option<&str>) -> bool {
        instance
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|current| current != member_id)
    }

    /// Kafka's `validateCurrentMember`.
    pub(super) fn validate_current_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
    ) -> ErrorCode {
        if self.is_static_member_fenced(member_id, instance) {
            ErrorCode::FencedInstanceId
        } else if !self.members.contains_key(member_id) {
            ErrorCode::UnknownMemberId
        } else {
            ErrorCode::None
        }
    }

    /// Kafka's `supportsProtocols`.
    pub(super) fn supports_protocols(
        &self,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
    ) -> bool {
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
    pub(super) fn select_protocol(&self) -> Option<String> {
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

    pub(super) fn add_member(&mut self, member: Member) {
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
}

/// The state-changing context every group operation needs.
pub(super) struct Ctx<'a> {
    pub(super) now: i64,
    pub(super) config: &'a GroupConfig,
    pub(super) out: &'a mut Vec<Completion>,
}

impl Ctx<'_> {
    pub(super) fn answer_join(&mut self, member: &mut Member, response: JoinResponse) {
        if let Some(ticket) = member.join_ticket.take() {
            self.out.push(Completion::Join(ticket, response));
        }
    }

    pub(super) fn answer_sync(&mut self, member: &mut Member, response: SyncResponse) {
        if let Some(ticket) = member.sync_ticket.take() {
            self.out.push(Completion::Sync(ticket, response));
        }
    }

    /// Kafka's `maybePrepareRebalance`.
    pub(super) fn maybe_prepare_rebalance(&mut self, g: &mut Group) {
        if matches!(
            g.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        ) {
            self.prepare_rebalance(g);
        }
    }

    /// Kafka's `prepareRebalance`.
    pub(super) fn prepare_rebalance(&mut self, g: &mut Group) {
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
    pub(super) fn try_complete_join(&mut self, g: &mut Group) {
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
            // As Kafka's initNextGeneration: the protocol type stays (ListGroups and
            // admin tools still see a consumer group); the protocol goes.
            g.protocol_name = None;
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
    pub(super) fn remove_member_and_update_group(&mut self, g: &mut Group, member_id: &str) {
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

    pub(super) fn run_timers(&mut self, g: &mut Group) {
        // Each firing either removes a member or moves a deadline forward; the bound is a
        // guard against a zero-length timer loop, never reached in practice.
        for _ in 0..(4 * (g.members.len() + g.pending_members.len()) + 16) {
            if !self.fire_timers(g) {
                break;
            }
        }
    }
}

pub(super) fn compute_subscribed_topics(g: &Group) -> Option<BTreeSet<String>> {
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
