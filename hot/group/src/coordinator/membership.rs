//! The membership protocol's requests: JoinGroup (including KIP-394's member-id
//! handshake and KIP-345's static members), SyncGroup, Heartbeat and LeaveGroup, as
//! [`GroupCoordinator`] methods that drive a group's state machine.

use std::collections::HashMap;

use bytes::Bytes;
use strata_proto::ErrorCode;

use super::{
    Completion, Ctx, Group, GroupCoordinator, GroupState, JoinGroup, JoinResponse, Member,
    MemberInfo, SyncGroup, SyncResponse,
};

impl GroupCoordinator {
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
