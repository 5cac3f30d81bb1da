//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, and the transactional
//! producer's TxnOffsetCommit. Both commits build their records and the shard's update
//! the same way ([`commits`]); a plain commit is applied once durable, a transactional
//! one stays pending until its transaction's marker reaches the offsets partition.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::Operation;
use strata_group::CommittedOffset;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::{Compression, ErrorCode};

use super::group::group_denied;
use super::{Pending, RequestContext, authz, encode_response};
use crate::broker::Broker;
use crate::error::ApiError;
use crate::groups::OFFSETS_TOPIC;

/// A commit's `__consumer_offsets` records (key, value) and what the group's shard
/// applies once they are durable (or, transactional, once their marker lands).
struct Commits {
    records: Vec<(Bytes, Bytes)>,
    commits: Vec<(String, i32, CommittedOffset)>,
}

/// The records and updates of committing `offsets` (topic, partition, offset) for
/// `group`.
fn commits<'a>(
    group: &str,
    offsets: impl Iterator<Item = (&'a str, i32, CommittedOffset)>,
) -> Commits {
    let mut out = Commits {
        records: Vec::new(),
        commits: Vec::new(),
    };
    for (topic, index, c) in offsets {
        out.records
            .push(strata_group::offset_commit_record(group, topic, index, &c));
        out.commits.push((topic.to_string(), index, c));
    }
    out
}

/// A committed offset as a request gives it, committed at `now`.
fn committed(
    offset: i64,
    leader_epoch: i32,
    metadata: &Option<StrBytes>,
    now: i64,
) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch,
        metadata: metadata.as_ref().map(|m| m.to_string()),
        commit_timestamp_ms: now,
    }
}

pub(super) fn offset_commit(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: OffsetCommitRequest,
) -> Pending {
    Box::pin(async move {
        let group = req.group_id.0.to_string();
        let now = broker.clock.now_ms();
        // As Kafka's KafkaApis.handleOffsetCommitRequest: Read on the group (else every
        // partition answers GROUP_AUTHORIZATION_FAILED), then Read on each topic (a
        // denied topic's partitions answer TOPIC_AUTHORIZATION_FAILED, the rest are
        // committed).
        let group_ok = authz::group(&broker, &ctx, Operation::Read, &group);
        let topic_ok: Vec<bool> = if group_ok {
            req.topics
                .iter()
                .map(|t| authz::topic(&broker, &ctx, Operation::Read, t.name.0.as_str()))
                .collect()
        } else {
            Vec::new()
        };
        // As Kafka: a partition the cluster does not have answers
        // UNKNOWN_TOPIC_OR_PARTITION, and only the others are committed.
        let cluster = broker.cluster();
        let exists = |topic: &str, index: i32| {
            cluster
                .topics
                .get(topic)
                .is_some_and(|t| index >= 0 && (index as usize) < t.partitions.len())
        };
        let result: Result<(), ApiError> = async {
            if !group_ok {
                return Err(group_denied(&group));
            }
            let committable = req.topics.iter().zip(&topic_ok).any(|(t, ok)| {
                *ok && t
                    .partitions
                    .iter()
                    .any(|p| exists(t.name.0.as_str(), p.partition_index))
            });
            if !committable {
                // Nothing left to commit: Kafka answers without the coordinator.
                return Ok(());
            }
            let p = broker.groups.offsets_partition_for(&group).await?;
            let code = broker.groups.with_shard(p, |s| {
                s.coordinator.validate_commit(
                    now,
                    &group,
                    req.generation_id_or_member_epoch,
                    req.member_id.as_str(),
                    req.group_instance_id.as_ref().map(|s| s.as_str()),
                )
            })?;
            if code != ErrorCode::None {
                return Err(ApiError::new(code, "commit refused"));
            }
            let Commits { records, commits } = commits(
                &group,
                req.topics
                    .iter()
                    .zip(&topic_ok)
                    .filter(|(_, ok)| **ok)
                    .flat_map(|(t, _)| {
                        t.partitions
                            .iter()
                            .filter(|p| exists(t.name.0.as_str(), p.partition_index))
                            .map(move |pr| {
                                (
                                    t.name.0.as_str(),
                                    pr.partition_index,
                                    committed(
                                        pr.committed_offset,
                                        pr.committed_leader_epoch,
                                        &pr.committed_metadata,
                                        now,
                                    ),
                                )
                            })
                    }),
            );
            let records: Vec<_> = records.into_iter().map(|(k, v)| (k, Some(v))).collect();
            if !records.is_empty() {
                let g = group.clone();
                let apply: crate::groups::Apply = Box::new(move |s| {
                    for (topic, index, c) in commits {
                        s.coordinator.commit(&g, &topic, index, c);
                    }
                });
                broker
                    .groups
                    .append_offsets_records(p, records, Some(apply))
                    .await?;
            }
            Ok(())
        }
        .await;
        let code = match &result {
            Ok(()) => ErrorCode::None,
            Err(e) => e.code,
        };
        if let Err(e) = &result {
            tracing::debug!(group = %group, error = %e.message, "offset commit failed");
        }
        let mut resp = OffsetCommitResponse::default();
        resp.topics = req
            .topics
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let code = if topic_ok.get(i).is_some_and(|ok| !ok) {
                    ErrorCode::TopicAuthorizationFailed
                } else {
                    code
                };
                let mut rt = OffsetCommitResponseTopic::default();
                rt.name = t.name.clone();
                rt.topic_id = t.topic_id;
                rt.partitions = t
                    .partitions
                    .iter()
                    .map(|pr| {
                        let mut rp = OffsetCommitResponsePartition::default();
                        rp.partition_index = pr.partition_index;
                        rp.error_code = if code == ErrorCode::None
                            && !exists(t.name.0.as_str(), pr.partition_index)
                        {
                            ErrorCode::UnknownTopicOrPartition.code()
                        } else {
                            code.code()
                        };
                        rp
                    })
                    .collect();
                rt
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}

/// One group's committed offsets for OffsetFetch: `(topic, [(partition, offset,
/// error)])`, all the group has when `topics` is `None`; the error is
/// UNSTABLE_OFFSET_COMMIT when the caller asked for stable offsets only and a
/// transaction's offset commit for the partition awaits its marker (KIP-447: the
/// consumer retries), TOPIC_AUTHORIZATION_FAILED for a topic it may not describe.
type Fetched = Vec<(String, Vec<(i32, Option<CommittedOffset>, ErrorCode)>)>;

/// [`fetch_offsets`] as Kafka authorizes it (KafkaApis.handleOffsetFetchRequest):
/// Describe on the group, else GROUP_AUTHORIZATION_FAILED; then Describe on each topic:
/// a listed topic without it answers TOPIC_AUTHORIZATION_FAILED for its partitions
/// (after the others, as Kafka), and when all are asked for, such topics are left out.
async fn fetch_authorized(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Fetched, ApiError> {
    if !authz::group(broker, ctx, Operation::Describe, group) {
        return Err(group_denied(group));
    }
    let described = |t: &str| authz::topic(broker, ctx, Operation::Describe, t);
    match topics {
        None => {
            let mut fetched = fetch_offsets(broker, group, None, require_stable).await?;
            fetched.retain(|(t, _)| described(t));
            Ok(fetched)
        }
        Some(topics) => {
            let (allowed, denied): (Vec<_>, Vec<_>) =
                topics.into_iter().partition(|(t, _)| described(t));
            let mut fetched = fetch_offsets(broker, group, Some(allowed), require_stable).await?;
            fetched.extend(denied.into_iter().map(|(t, parts)| {
                let parts = parts
                    .into_iter()
                    .map(|i| (i, None, ErrorCode::TopicAuthorizationFailed))
                    .collect();
                (t, parts)
            }));
            Ok(fetched)
        }
    }
}

async fn fetch_offsets(
    broker: &Arc<Broker>,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Fetched, ApiError> {
    let p = broker.groups.offsets_partition_for(group).await?;
    broker.groups.with_shard(p, |s| {
        let pending = |t: &str, i: i32| {
            if require_stable && s.coordinator.has_pending_txn_offsets(group, t, i) {
                ErrorCode::UnstableOffsetCommit
            } else {
                ErrorCode::None
            }
        };
        match topics {
            Some(topics) => topics
                .into_iter()
                .map(|(t, parts)| {
                    let offsets = parts
                        .into_iter()
                        .map(|i| (i, s.coordinator.committed(group, &t, i), pending(&t, i)))
                        .collect();
                    (t, offsets)
                })
                .collect(),
            None => {
                let mut by_topic: std::collections::BTreeMap<
                    String,
                    Vec<(i32, Option<CommittedOffset>, ErrorCode)>,
                > = std::collections::BTreeMap::new();
                for (t, i, c) in s.coordinator.offsets(group) {
                    let unstable = pending(&t, i);
                    by_topic.entry(t).or_default().push((i, Some(c), unstable));
                }
                by_topic.into_iter().collect()
            }
        }
    })
}

/// An OffsetFetch partition's offset, leader epoch and metadata (-1, -1, "" for none).
fn committed_fields(c: Option<CommittedOffset>) -> (i64, i32, Option<StrBytes>) {
    match c {
        Some(c) => (
            c.offset,
            c.leader_epoch,
            Some(StrBytes::from_string(c.metadata.unwrap_or_default())),
        ),
        None => (-1, -1, Some(StrBytes::from_static_str(""))),
    }
}

pub(super) fn offset_fetch(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: OffsetFetchRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = OffsetFetchResponse::default();
        if ctx.version >= 8 {
            for g in &req.groups {
                let group = g.group_id.0.to_string();
                let topics = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let mut rg = OffsetFetchResponseGroup::default();
                rg.group_id = g.group_id.clone();
                match fetch_authorized(&broker, &ctx, &group, topics, req.require_stable).await {
                    Ok(fetched) => {
                        rg.topics = fetched
                            .into_iter()
                            .map(|(t, parts)| {
                                let mut rt = OffsetFetchResponseTopics::default();
                                rt.name =
                                    kafka_protocol::messages::TopicName(StrBytes::from_string(t));
                                rt.partitions = parts
                                    .into_iter()
                                    .map(|(i, c, code)| {
                                        let mut rp = OffsetFetchResponsePartitions::default();
                                        rp.partition_index = i;
                                        (
                                            rp.committed_offset,
                                            rp.committed_leader_epoch,
                                            rp.metadata,
                                        ) = committed_fields(c);
                                        if code != ErrorCode::None {
                                            rp.committed_offset = -1;
                                            rp.error_code = code.code();
                                        }
                                        rp
                                    })
                                    .collect();
                                rt
                            })
                            .collect();
                    }
                    Err(e) => rg.error_code = e.code.code(),
                }
                resp.groups.push(rg);
            }
            return encode_response(&ctx, &resp);
        }
        let group = req.group_id.0.to_string();
        let topics = req.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        // require_stable exists from v7.
        let stable = ctx.version >= 7 && req.require_stable;
        match fetch_authorized(&broker, &ctx, &group, topics, stable).await {
            Ok(fetched) => {
                resp.topics = fetched
                    .into_iter()
                    .map(|(t, parts)| {
                        let mut rt = OffsetFetchResponseTopic::default();
                        rt.name = kafka_protocol::messages::TopicName(StrBytes::from_string(t));
                        rt.partitions = parts
                            .into_iter()
                            .map(|(i, c, code)| {
                                let mut rp = OffsetFetchResponsePartition::default();
                                rp.partition_index = i;
                                (rp.committed_offset, rp.committed_leader_epoch, rp.metadata) =
                                    committed_fields(c);
                                if code != ErrorCode::None {
                                    rp.committed_offset = -1;
                                    rp.error_code = code.code();
                                }
                                rp
                            })
                            .collect();
                        rt
                    })
                    .collect();
            }
            Err(e) => {
                // v2+ carry a top-level error; v0-1 per partition.
                resp.error_code = e.code.code();
                if let Some(ts) = &req.topics {
                    resp.topics = ts
                        .iter()
                        .map(|t| {
                            let mut rt = OffsetFetchResponseTopic::default();
                            rt.name = t.name.clone();
                            rt.partitions = t
                                .partition_indexes
                                .iter()
                                .map(|&i| {
                                    let mut rp = OffsetFetchResponsePartition::default();
                                    rp.partition_index = i;
                                    rp.committed_offset = -1;
                                    rp.error_code = e.code.code();
                                    rp
                                })
                                .collect();
                            rt
                        })
                        .collect();
                }
            }
        }
        encode_response(&ctx, &resp)
    })
}

pub(super) fn offset_delete(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: OffsetDeleteRequest,
) -> Pending {
    Box::pin(async move {
        let group = req.group_id.0.to_string();
        // As Kafka's KafkaApis.handleOffsetDeleteRequest: Delete on the group (else the
        // whole request answers GROUP_AUTHORIZATION_FAILED), then Read on each topic (a
        // denied topic's partitions answer TOPIC_AUTHORIZATION_FAILED and are kept).
        let group_ok = authz::group(&broker, &ctx, Operation::Delete, &group);
        let topic_ok: Vec<bool> = if group_ok {
            req.topics
                .iter()
                .map(|t| authz::topic(&broker, &ctx, Operation::Read, t.name.0.as_str()))
                .collect()
        } else {
            Vec::new()
        };
        let wanted: Vec<(String, i32)> = req
            .topics
            .iter()
            .zip(&topic_ok)
            .filter(|(_, ok)| **ok)
            .map(|(t, _)| t)
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.0.to_string(), p.partition_index))
            })
            .collect();
        let result = async {
            if !group_ok {
                return Err(group_denied(&group));
            }
            let p = broker.groups.offsets_partition_for(&group).await?;
            let (code, per) = broker
                .groups
                .with_shard(p, |s| s.coordinator.delete_offsets(&group, &wanted))?;
            let deleted: Vec<_> = per
                .iter()
                .filter(|(_, _, c)| *c == ErrorCode::None)
                .map(|(t, i, _)| (strata_group::offset_tombstone(&group, t, *i), None))
                .collect();
            if !deleted.is_empty() {
                broker
                    .groups
                    .append_offsets_records(p, deleted, None)
                    .await?;
            }
            Ok::<_, ApiError>((code, per))
        }
        .await;
        let mut resp = OffsetDeleteResponse::default();
        match result {
            Ok((code, per)) => {
                resp.error_code = code.code();
                for (t, ok) in req.topics.iter().zip(&topic_ok) {
                    let mut rt = OffsetDeleteResponseTopic::default();
                    rt.name = t.name.clone();
                    rt.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut rp = OffsetDeleteResponsePartition::default();
                            rp.partition_index = p.partition_index;
                            rp.error_code = if *ok {
                                per.iter()
                                    .find(|(n, i, _)| {
                                        n.as_str() == t.name.0.as_str() && *i == p.partition_index
                                    })
                                    .map_or(0, |(_, _, c)| c.code())
                            } else {
                                ErrorCode::TopicAuthorizationFailed.code()
                            };
                            rp
                        })
                        .collect();
                    resp.topics.push(rt);
                }
            }
            Err(e) => resp.error_code = e.code.code(),
        }
        encode_response(&ctx, &resp)
    })
}
/// TxnOffsetCommit: the offsets go into the group's offsets partition in a batch of
/// the producer's transaction (Kafka's coordinator-origin append: epoch checked, no
/// sequence), and stay pending in the group coordinator until the transaction's marker
/// reaches that partition.
pub(super) fn txn_offset_commit(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: TxnOffsetCommitRequest,
) -> Pending {
    Box::pin(async move {
        let group = req.group_id.0.to_string();
        let now = broker.clock.now_ms();
        // As Kafka's KafkaApis.handleTxnOffsetCommitRequest: Write on the transactional
        // id, then Read on the group (either denied: every partition answers it), then
        // Read on each topic (a denied topic's partitions answer
        // TOPIC_AUTHORIZATION_FAILED, the rest are committed).
        let denied = if !authz::transactional_id(
            &broker,
            &ctx,
            Operation::Write,
            req.transactional_id.0.as_str(),
        ) {
            Some(ErrorCode::TransactionalIdAuthorizationFailed)
        } else if !authz::group(&broker, &ctx, Operation::Read, &group) {
            Some(ErrorCode::GroupAuthorizationFailed)
        } else {
            None
        };
        let topic_ok: Vec<bool> = if denied.is_none() {
            req.topics
                .iter()
                .map(|t| authz::topic(&broker, &ctx, Operation::Read, t.name.0.as_str()))
                .collect()
        } else {
            Vec::new()
        };
        let result: Result<(), ApiError> = async {
            if let Some(code) = denied {
                return Err(ApiError::new(code, "not authorized"));
            }
            if !topic_ok.is_empty() && !topic_ok.contains(&true) {
                // Nothing left to commit: Kafka answers without the coordinator.
                return Ok(());
            }
            let p = broker.groups.offsets_partition_for(&group).await?;
            let code = broker.groups.with_shard(p, |s| {
                s.coordinator.validate_txn_commit(
                    now,
                    &group,
                    req.generation_id,
                    req.member_id.as_str(),
                    req.group_instance_id.as_ref().map(|s| s.as_str()),
                )
            })?;
            if code != ErrorCode::None {
                return Err(ApiError::new(code, "transactional commit refused"));
            }
            let Commits { records, commits } = commits(
                &group,
                req.topics
                    .iter()
                    .zip(&topic_ok)
                    .filter(|(_, ok)| **ok)
                    .flat_map(|(t, _)| {
                        t.partitions.iter().map(move |pr| {
                            (
                                t.name.0.as_str(),
                                pr.partition_index,
                                committed(
                                    pr.committed_offset,
                                    pr.committed_leader_epoch,
                                    &pr.committed_metadata,
                                    now,
                                ),
                            )
                        })
                    }),
            );
            let records: Vec<NewRecord> = records
                .into_iter()
                .map(|(k, v)| NewRecord {
                    key: Some(k),
                    value: Some(v),
                    headers: vec![],
                    timestamp: now,
                })
                .collect();
            if records.is_empty() {
                return Ok(());
            }
            let partition = broker
                .replicas
                .partition(OFFSETS_TOPIC, p)
                .filter(|p| p.is_leader())
                .ok_or_else(|| ApiError::new(ErrorCode::NotCoordinator, "not the coordinator"))?;
            let mut b = batch(
                &records,
                Compression::None,
                Some(ProducerFields {
                    producer_id: req.producer_id.0,
                    producer_epoch: req.producer_epoch,
                    base_sequence: 0,
                }),
            )
            .to_vec();
            strata_proto::batch::set_transactional(&mut b);
            let (info, epoch) = partition
                .append_coordinator(&mut b)
                .map_err(|e| ApiError::new(e.error_code(), e.to_string()))?;
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
            match partition
                .wait_acked(info.last_offset + 1, epoch, deadline)
                .await
            {
                ErrorCode::None => {}
                ErrorCode::NotLeaderOrFollower => {
                    return Err(ApiError::new(
                        ErrorCode::NotCoordinator,
                        "the coordinator moved",
                    ));
                }
                code => return Err(ApiError::new(code, "the commit was not replicated")),
            }
            broker.groups.with_shard(p, |s| {
                s.coordinator.prepare_txn_commit(
                    &group,
                    req.producer_id.0,
                    info.first_offset,
                    commits,
                )
            })?;
            Ok(())
        }
        .await;
        let code = match &result {
            Ok(()) => ErrorCode::None,
            Err(e) => {
                tracing::debug!(group = %group, error = %e.message, "transactional offset commit failed");
                e.code
            }
        };
        let mut resp = TxnOffsetCommitResponse::default();
        resp.topics = req
            .topics
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let code = if topic_ok.get(i).is_some_and(|ok| !ok) {
                    ErrorCode::TopicAuthorizationFailed
                } else {
                    code
                };
                let mut rt = TxnOffsetCommitResponseTopic::default();
                rt.name = t.name.clone();
                rt.partitions = t
                    .partitions
                    .iter()
                    .map(|pr| {
                        let mut rp = TxnOffsetCommitResponsePartition::default();
                        rp.partition_index = pr.partition_index;
                        rp.error_code = code.code();
                        rp
                    })
                    .collect();
                rt
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}
