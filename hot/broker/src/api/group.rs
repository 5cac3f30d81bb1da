//! Consumer groups: FindCoordinator, and (through [`crate::groups`]) the group
//! membership and offset APIs.
//!
//! A group's coordinator is the leader of its partition of `__consumer_offsets`
//! (Kafka's `abs(groupId.hashCode) % partitions`); committed offsets are records in that
//! partition, replicated like any data.

use std::sync::Arc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use strata_authz::{Operation, ResourceType};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, authz, encode_response, msg};
use crate::broker::Broker;
use crate::error::ApiError;

/// Where a group's coordinator is (the broker leading its offsets partition), or a
/// transactional id's (key type 1: the leader of its `__transaction_state` partition).
async fn locate(
    broker: &Arc<Broker>,
    key: &str,
    transaction: bool,
    listener: crate::listener::SecurityProtocol,
) -> Result<(i32, String, i32), ApiError> {
    let (topic, partition) = if transaction {
        (
            crate::txns::TXN_TOPIC,
            broker.txns.txn_partition_for(key).await?,
        )
    } else {
        (
            crate::groups::OFFSETS_TOPIC,
            broker.groups.offsets_partition_for(key).await?,
        )
    };
    let md = broker.cluster();
    let leader = md
        .topic(topic)
        .and_then(|t| t.partition(partition))
        .map_or(-1, |p| p.leader);
    let Some(b) = md.broker(leader).filter(|b| !b.fenced) else {
        return Err(ApiError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!("partition {partition} of {topic} has no leader yet; retry"),
        ));
    };
    // The coordinator's address on the listener the client uses (Kafka answers
    // COORDINATOR_NOT_AVAILABLE while a broker lacks it).
    let Some((host, port)) = b.endpoint(listener.name()) else {
        return Err(ApiError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!(
                "the coordinator, broker {leader}, has no {} listener",
                listener.name()
            ),
        ));
    };
    Ok((leader, host.to_string(), i32::from(port)))
}

/// Kafka's FindCoordinator authorization (KafkaApis.getCoordinator): Describe on the
/// group (key type 0) or on the transactional id (key type 1), per key.
fn deny_coordinator_key(
    broker: &Broker,
    ctx: &RequestContext,
    key_type: i8,
    key: &str,
) -> Option<ApiError> {
    if key_type == 1 {
        (!authz::transactional_id(broker, ctx, Operation::Describe, key)).then(|| {
            ApiError::new(
                ErrorCode::TransactionalIdAuthorizationFailed,
                format!("not authorized to describe transactional id '{key}'"),
            )
        })
    } else {
        (!authz::group(broker, ctx, Operation::Describe, key)).then(|| group_denied(key))
    }
}

/// GROUP_AUTHORIZATION_FAILED for `group`.
pub(super) fn group_denied(group: &str) -> ApiError {
    ApiError::new(
        ErrorCode::GroupAuthorizationFailed,
        format!("not authorized to access group '{group}'"),
    )
}

/// Read on the group (what JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit
/// ask, as Kafka).
fn check_read_group(broker: &Broker, ctx: &RequestContext, group: &str) -> Result<(), ApiError> {
    if authz::group(broker, ctx, Operation::Read, group) {
        Ok(())
    } else {
        Err(group_denied(group))
    }
}

pub(super) fn find_coordinator(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: FindCoordinatorRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = FindCoordinatorResponse::default();
        // key_type 0 is a group, 1 a transactional id.
        let keys: Vec<String> = if ctx.version >= 4 {
            req.coordinator_keys.iter().map(|k| k.to_string()).collect()
        } else {
            vec![req.key.to_string()]
        };
        let mut answers = Vec::new();
        for key in keys {
            let mut c = Coordinator::default();
            c.key = StrBytes::from_string(key.clone());
            c.node_id = BrokerId(-1);
            c.host = StrBytes::from_static_str("");
            c.port = -1;
            let result = if !(0..=1).contains(&req.key_type) {
                Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "unknown coordinator key type {}: 0 (group) and 1 (transaction) are offered",
                        req.key_type
                    ),
                ))
            } else if let Some(e) = deny_coordinator_key(&broker, &ctx, req.key_type, &key) {
                Err(e)
            } else if key.is_empty() {
                Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    "empty coordinator key",
                ))
            } else {
                locate(&broker, &key, req.key_type == 1, ctx.listener).await
            };
            match result {
                Ok((node, host, port)) => {
                    c.node_id = BrokerId(node);
                    c.host = StrBytes::from_string(host);
                    c.port = port;
                }
                Err(e) => {
                    c.error_code = e.code.code();
                    c.error_message = msg(e.message);
                }
            }
            answers.push(c);
        }
        if ctx.version >= 4 {
            resp.coordinators = answers;
        } else if let Some(c) = answers.pop() {
            resp.error_code = c.error_code;
            resp.error_message = if ctx.version >= 1 {
                c.error_message
            } else {
                None
            };
            resp.node_id = c.node_id;
            resp.host = c.host;
            resp.port = c.port;
        }
        encode_response(&ctx, &resp)
    })
}

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use strata_group::Completion;

fn opt(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

/// Waits for a parked JoinGroup or SyncGroup, at most `limit`.
async fn parked(
    rx: tokio::sync::oneshot::Receiver<Completion>,
    limit: std::time::Duration,
) -> Result<Completion, ApiError> {
    match tokio::time::timeout(limit, rx).await {
        Ok(Ok(c)) => Ok(c),
        // The shard went away: leadership of the offsets partition moved.
        Ok(Err(_)) => Err(ApiError::new(
            ErrorCode::NotCoordinator,
            "the coordinator moved; find it again",
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::RebalanceInProgress,
            "the rebalance did not finish in time; rejoin",
        )),
    }
}

pub(super) fn join_group(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: JoinGroupRequest,
) -> Pending {
    Box::pin(async move {
        let group = req.group_id.0.to_string();
        let join = strata_group::JoinGroup {
            group_id: group.clone(),
            member_id: req.member_id.to_string(),
            group_instance_id: opt(&req.group_instance_id),
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect(),
            session_timeout_ms: req.session_timeout_ms,
            // v0 has no rebalance timeout: it is the session timeout.
            rebalance_timeout_ms: if ctx.version >= 1 {
                req.rebalance_timeout_ms
            } else {
                req.session_timeout_ms
            },
            client_id: ctx.client_id.clone().unwrap_or_default(),
            client_host: ctx.peer.ip().to_string(),
            require_known_member_id: ctx.version >= 4,
        };
        let limit =
            std::time::Duration::from_millis(join.rebalance_timeout_ms.max(0) as u64 + 5_000);
        let result = async {
            check_read_group(&broker, &ctx, &group)?;
            let p = broker.groups.offsets_partition_for(&group).await?;
            let ticket = broker.groups.ticket();
            let now = broker.clock.now_ms();
            let waiting = broker.groups.with_shard(p, |s| {
                let (answer, done) = s.coordinator.join(now, ticket, join);
                let rx = answer.is_none().then(|| s.wait(ticket));
                s.deliver(done);
                (answer, rx)
            })?;
            match waiting {
                (Some(r), _) => Ok(r),
                (None, Some(rx)) => match parked(rx, limit).await? {
                    Completion::Join(_, r) => Ok(r),
                    Completion::Sync(..) => Err(ApiError::new(
                        ErrorCode::UnknownServerError,
                        "mixed-up answer",
                    )),
                },
                (None, None) => Err(ApiError::new(ErrorCode::UnknownServerError, "no answer")),
            }
        }
        .await;
        let mut resp = JoinGroupResponse::default();
        match result {
            Ok(r) => {
                resp.error_code = r.error.code();
                resp.generation_id = r.generation_id;
                resp.protocol_type = r.protocol_type.map(StrBytes::from_string);
                resp.protocol_name =
                    Some(StrBytes::from_string(r.protocol_name.unwrap_or_default()));
                resp.leader = StrBytes::from_string(r.leader);
                resp.member_id = StrBytes::from_string(r.member_id);
                resp.members = r
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut x = JoinGroupResponseMember::default();
                        x.member_id = StrBytes::from_string(m.member_id);
                        x.group_instance_id = m.group_instance_id.map(StrBytes::from_string);
                        x.metadata = m.metadata;
                        x
                    })
                    .collect();
            }
            Err(e) => {
                resp.error_code = e.code.code();
                resp.generation_id = -1;
                resp.member_id = req.member_id.clone();
                resp.protocol_name = Some(StrBytes::from_static_str(""));
            }
        }
        encode_response(&ctx, &resp)
    })
}

pub(super) fn sync_group(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: SyncGroupRequest,
) -> Pending {
    Box::pin(async move {
        let group = req.group_id.0.to_string();
        let sync = strata_group::SyncGroup {
            group_id: group.clone(),
            generation_id: req.generation_id,
            member_id: req.member_id.to_string(),
            group_instance_id: opt(&req.group_instance_id),
            protocol_type: opt(&req.protocol_type),
            protocol_name: opt(&req.protocol_name),
            assignments: req
                .assignments
                .iter()
                .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                .collect(),
        };
        let result = async {
            check_read_group(&broker, &ctx, &group)?;
            let p = broker.groups.offsets_partition_for(&group).await?;
            let ticket = broker.groups.ticket();
            let now = broker.clock.now_ms();
            let waiting = broker.groups.with_shard(p, |s| {
                let (answer, done) = s.coordinator.sync(now, ticket, sync);
                let rx = answer.is_none().then(|| s.wait(ticket));
                s.deliver(done);
                (answer, rx)
            })?;
            match waiting {
                (Some(r), _) => Ok(r),
                (None, Some(rx)) => match parked(rx, std::time::Duration::from_secs(330)).await? {
                    Completion::Sync(_, r) => Ok(r),
                    Completion::Join(..) => Err(ApiError::new(
                        ErrorCode::UnknownServerError,
                        "mixed-up answer",
                    )),
                },
                (None, None) => Err(ApiError::new(ErrorCode::UnknownServerError, "no answer")),
            }
        }
        .await;
        let mut resp = SyncGroupResponse::default();
        match result {
            Ok(r) => {
                resp.error_code = r.error.code();
                resp.protocol_type = r.protocol_type.map(StrBytes::from_string);
                resp.protocol_name = r.protocol_name.map(StrBytes::from_string);
                resp.assignment = r.assignment;
            }
            Err(e) => resp.error_code = e.code.code(),
        }
        encode_response(&ctx, &resp)
    })
}

pub(super) fn heartbeat(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: HeartbeatRequest,
) -> Pending {
    Box::pin(async move {
        let group = req.group_id.0.to_string();
        let code = async {
            check_read_group(&broker, &ctx, &group)?;
            let p = broker.groups.offsets_partition_for(&group).await?;
            let now = broker.clock.now_ms();
            broker.groups.with_shard(p, |s| {
                s.coordinator.heartbeat(
                    now,
                    &group,
                    req.generation_id,
                    req.member_id.as_str(),
                    req.group_instance_id.as_ref().map(|s| s.as_str()),
                )
            })
        }
        .await
        .unwrap_or_else(|e| e.code);
        let mut resp = HeartbeatResponse::default();
        resp.error_code = code.code();
        encode_response(&ctx, &resp)
    })
}

pub(super) fn leave_group(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: LeaveGroupRequest,
) -> Pending {
    Box::pin(async move {
        let group = req.group_id.0.to_string();
        // v0-2 name one member; v3+ a batch (KIP-345).
        let members: Vec<(String, Option<String>)> = if ctx.version >= 3 {
            req.members
                .iter()
                .map(|m| (m.member_id.to_string(), opt(&m.group_instance_id)))
                .collect()
        } else {
            vec![(req.member_id.to_string(), None)]
        };
        let result = async {
            // Kafka answers a denied LeaveGroup with the top-level error only.
            check_read_group(&broker, &ctx, &group)?;
            let p = broker.groups.offsets_partition_for(&group).await?;
            let now = broker.clock.now_ms();
            broker.groups.with_shard(p, |s| {
                let (code, per_member, done) = s.coordinator.leave(now, &group, members.clone());
                s.deliver(done);
                (code, per_member)
            })
        }
        .await;
        let mut resp = LeaveGroupResponse::default();
        match result {
            Ok((code, per_member)) => {
                resp.error_code = code.code();
                if ctx.version >= 3 {
                    resp.members = per_member
                        .into_iter()
                        .zip(members.iter())
                        .map(|((member, code), (_, instance))| {
                            let mut m = MemberResponse::default();
                            m.member_id = StrBytes::from_string(member);
                            m.group_instance_id = instance.clone().map(StrBytes::from_string);
                            m.error_code = code.code();
                            m
                        })
                        .collect();
                } else if let Some((_, c)) = per_member.first()
                    && code == ErrorCode::None
                {
                    resp.error_code = c.code();
                }
            }
            Err(e) => resp.error_code = e.code.code(),
        }
        encode_response(&ctx, &resp)
    })
}

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    ListGroupsRequest, ListGroupsResponse,
};

/// ListGroups: the groups this broker coordinates (clients ask every broker).
pub(super) fn list_groups(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: ListGroupsRequest,
) -> Pending {
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let mut resp = ListGroupsResponse::default();
    // As Kafka's KafkaApis.handleListGroupsRequest: Describe on the cluster lists every
    // group; otherwise only the groups the principal may describe (filtered, not
    // audited).
    let every = authz::allowed_with(
        &broker,
        &ctx,
        Operation::Describe,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
        false,
    );
    for (group, protocol_type, state) in broker.groups.list() {
        if !states.is_empty() && !states.contains(&state.to_lowercase()) {
            continue;
        }
        if !every
            && !authz::allowed_with(
                &broker,
                &ctx,
                Operation::Describe,
                ResourceType::Group,
                &group,
                false,
            )
        {
            continue;
        }
        if !types.is_empty() && !types.contains(&"classic".to_string()) {
            continue;
        }
        let mut g = ListedGroup::default();
        g.group_id = kafka_protocol::messages::GroupId(StrBytes::from_string(group));
        g.protocol_type = StrBytes::from_string(protocol_type);
        g.group_state = StrBytes::from_static_str(state);
        g.group_type = StrBytes::from_static_str("classic");
        resp.groups.push(g);
    }
    super::ready(encode_response(&ctx, &resp))
}

pub(super) fn describe_groups(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: DescribeGroupsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = DescribeGroupsResponse::default();
        for id in &req.groups {
            let group = id.0.to_string();
            let mut d = DescribedGroup::default();
            d.group_id = id.clone();
            d.authorized_operations = i32::MIN;
            let result = async {
                // Describe on the group, else GROUP_AUTHORIZATION_FAILED for it.
                if !authz::group(&broker, &ctx, Operation::Describe, &group) {
                    return Err(group_denied(&group));
                }
                let p = broker.groups.offsets_partition_for(&group).await?;
                broker
                    .groups
                    .with_shard(p, |s| s.coordinator.describe(&group))
            }
            .await;
            match result {
                Ok(Some(g)) => {
                    d.group_state = StrBytes::from_static_str(g.state);
                    d.protocol_type = StrBytes::from_string(g.protocol_type);
                    d.protocol_data = StrBytes::from_string(g.protocol);
                    d.members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut x = DescribedGroupMember::default();
                            x.member_id = StrBytes::from_string(m.member_id);
                            x.group_instance_id = m.group_instance_id.map(StrBytes::from_string);
                            x.client_id = StrBytes::from_string(m.client_id);
                            x.client_host = StrBytes::from_string(m.client_host);
                            x.member_metadata = m.metadata;
                            x.member_assignment = m.assignment;
                            x
                        })
                        .collect();
                }
                // Kafka describes an unknown group as Dead, without an error.
                Ok(None) => d.group_state = StrBytes::from_static_str("Dead"),
                Err(e) => {
                    d.error_code = e.code.code();
                    d.error_message = msg(e.message);
                }
            }
            // KIP-430 (v3+): the operations the principal may do on the group, when
            // asked for and described.
            if ctx.version >= 3 && req.include_authorized_operations && d.error_code == 0 {
                d.authorized_operations = super::metadata::authorized_operations(
                    &broker,
                    &ctx,
                    ResourceType::Group,
                    &group,
                );
            }
            resp.groups.push(d);
        }
        encode_response(&ctx, &resp)
    })
}

pub(super) fn delete_groups(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: DeleteGroupsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = DeleteGroupsResponse::default();
        for id in &req.groups_names {
            let group = id.0.to_string();
            let result: Result<(), ApiError> = async {
                // Delete on the group, else GROUP_AUTHORIZATION_FAILED for it.
                if !authz::group(&broker, &ctx, Operation::Delete, &group) {
                    return Err(group_denied(&group));
                }
                let p = broker.groups.offsets_partition_for(&group).await?;
                // What the tombstones must cover, if the group can be deleted.
                let (code, offsets) =
                    broker
                        .groups
                        .with_shard(p, |s| match s.coordinator.describe(&group) {
                            None => (ErrorCode::GroupIdNotFound, Vec::new()),
                            Some(g) if g.state != "Empty" && g.state != "Dead" => {
                                (ErrorCode::NonEmptyGroup, Vec::new())
                            }
                            Some(_) => (ErrorCode::None, s.coordinator.offsets(&group)),
                        })?;
                if code != ErrorCode::None {
                    return Err(ApiError::new(code, "cannot delete"));
                }
                let mut records: Vec<_> = offsets
                    .iter()
                    .map(|(t, i, _)| (strata_group::offset_tombstone(&group, t, *i), None))
                    .collect();
                records.push((strata_group::group_tombstone(&group), None));
                let g = group.clone();
                let apply: crate::groups::Apply = Box::new(move |s| {
                    let _ = s.coordinator.delete_groups(std::slice::from_ref(&g));
                });
                broker
                    .groups
                    .append_offsets_records(p, records, Some(apply))
                    .await
            }
            .await;
            let mut r = DeletableGroupResult::default();
            r.group_id = id.clone();
            r.error_code = result.err().map_or(0, |e| e.code.code());
            resp.results.push(r);
        }
        encode_response(&ctx, &resp)
    })
}
