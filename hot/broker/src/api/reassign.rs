//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving a
//! partition's replicas to other brokers, carried out by the controller (which adds the
//! new replicas, lets them catch up, moves leadership and drops the old ones).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::Operation;
use strata_controller::Reassignment;
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, authz, encode_response, msg, ready};
use crate::broker::Broker;
use crate::error::ApiError;

fn name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

/// AlterPartitionReassignments: Alter on the cluster, as Kafka. Each partition names its
/// target replicas (the first the preferred leader), or none to cancel its reassignment.
/// The answer comes once the controller has accepted each change, not once the data has
/// moved: ListPartitionReassignments shows what is still moving. With
/// `allow_replication_factor_change` false (v1, KIP-860) a target of another size than
/// the partition's replicas is INVALID_REPLICATION_FACTOR.
pub(super) fn alter(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: AlterPartitionReassignmentsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = AlterPartitionReassignmentsResponse::default();
        resp.allow_replication_factor_change = req.allow_replication_factor_change;
        // Per partition: its answer, or `None` while it is to be sent to the controller.
        let mut answers: Vec<(String, i32, Option<ApiError>)> = Vec::new();
        let mut wanted: Vec<Reassignment> = Vec::new();
        let denied = authz::deny_cluster(&broker, &ctx, Operation::Alter);
        let md = broker.cluster();
        for t in &req.topics {
            let topic = t.name.0.to_string();
            for p in &t.partitions {
                let refuse = |code: ErrorCode, m: String| Some(ApiError::new(code, m));
                let target: Option<Vec<i32>> =
                    p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
                let error = if let Some(code) = denied {
                    refuse(code, "not authorized to reassign partitions".into())
                } else {
                    match md.partition(&topic, p.partition_index) {
                        None => refuse(
                            ErrorCode::UnknownTopicOrPartition,
                            format!("{topic}-{} does not exist", p.partition_index),
                        ),
                        Some(rec) => match &target {
                            Some(target)
                                if !req.allow_replication_factor_change
                                    && target.len() != rec.original_replicas().len() =>
                            {
                                refuse(
                                    ErrorCode::InvalidReplicationFactor,
                                    format!(
                                        "the target has {} replicas and {topic}-{} has {}; \
                                         the request does not allow the replication factor \
                                         to change",
                                        target.len(),
                                        p.partition_index,
                                        rec.original_replicas().len()
                                    ),
                                )
                            }
                            _ => None,
                        },
                    }
                };
                if error.is_none() {
                    wanted.push(Reassignment {
                        topic: topic.clone(),
                        partition: p.partition_index,
                        target,
                    });
                }
                answers.push((topic.clone(), p.partition_index, error));
            }
        }
        if !wanted.is_empty() {
            match broker.controller().alter_reassignments(wanted).await {
                Ok(outcomes) => {
                    let mut by_key: BTreeMap<(String, i32), Option<ApiError>> = outcomes
                        .into_iter()
                        .map(|o| {
                            let e = o.result.err().map(|r| {
                                ApiError::from(strata_controller::ControllerError::Rejected(r))
                            });
                            ((o.topic, o.partition), e)
                        })
                        .collect();
                    for (t, p, e) in &mut answers {
                        if e.is_none()
                            && let Some(outcome) = by_key.remove(&(t.clone(), *p))
                        {
                            *e = outcome;
                        }
                    }
                    if let Err(e) = broker.replicas.refresh_and_apply().await {
                        tracing::warn!(error = %e.message, "cannot refresh metadata after a reassignment");
                    }
                }
                Err(e) => {
                    // The controller did not answer: the request as a whole failed.
                    let e = ApiError::from(e);
                    resp.error_code = e.code.code();
                    resp.error_message = msg(e.message.clone());
                }
            }
        }
        let mut by_topic: BTreeMap<String, Vec<ReassignablePartitionResponse>> = BTreeMap::new();
        for (t, p, e) in answers {
            let mut r = ReassignablePartitionResponse::default();
            r.partition_index = p;
            if let Some(e) = e {
                r.error_code = e.code.code();
                r.error_message = msg(e.message);
            }
            by_topic.entry(t).or_default().push(r);
        }
        resp.responses = by_topic
            .into_iter()
            .map(|(t, partitions)| {
                let mut r = ReassignableTopicResponse::default();
                r.name = name(&t);
                r.partitions = partitions;
                r
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}

/// ListPartitionReassignments: Describe on the cluster. The partitions named (or every
/// partition) that are moving, with their replicas and the ones being added and removed.
/// A named partition that does not exist is left out, as Kafka's controller does.
pub(super) fn list(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: ListPartitionReassignmentsRequest,
) -> Pending {
    let mut resp = ListPartitionReassignmentsResponse::default();
    if let Some(code) = authz::deny_cluster(broker, &ctx, Operation::Describe) {
        resp.error_code = code.code();
        resp.error_message = msg("not authorized to list reassignments".to_string());
        return ready(encode_response(&ctx, &resp));
    }
    let md = broker.cluster();
    let mut by_topic: BTreeMap<String, Vec<OngoingPartitionReassignment>> = BTreeMap::new();
    let mut add = |topic: &str, p: &strata_controller::PartitionRecord| {
        if !p.is_reassigning() {
            return;
        }
        let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
        let mut o = OngoingPartitionReassignment::default();
        o.partition_index = p.partition;
        o.replicas = ids(&p.replicas);
        o.adding_replicas = ids(&p.adding_replicas);
        o.removing_replicas = ids(&p.removing_replicas);
        by_topic.entry(topic.to_string()).or_default().push(o);
    };
    match &req.topics {
        None => {
            for (t, p) in md.partitions() {
                add(&t.name, p);
            }
        }
        Some(topics) => {
            for t in topics {
                let topic = t.name.0.to_string();
                for &i in &t.partition_indexes {
                    if let Some(p) = md.partition(&topic, i) {
                        add(&topic, p);
                    }
                }
            }
        }
    }
    resp.topics = by_topic
        .into_iter()
        .map(|(t, partitions)| {
            let mut r = OngoingTopicReassignment::default();
            r.name = name(&t);
            r.partitions = partitions;
            r
        })
        .collect();
    ready(encode_response(&ctx, &resp))
}
