//! Transactions (KIP-98): the transactional producer's requests to its coordinator
//! (InitProducerId with a transactional id is in `cluster.rs`; AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn), its offset commits to the group coordinator
//! (TxnOffsetCommit), and the coordinators' markers to partition leaders
//! (WriteTxnMarkers). The coordinator is strata-txn's state machine, run by
//! [`crate::txns`].

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeProducersRequest, DescribeProducersResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse,
    ListTransactionsRequest, ListTransactionsResponse, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::{Operation, ResourceType};
use strata_proto::ErrorCode;
use strata_proto::control::{Marker, MarkerKind};
use strata_txn::{Reply, TxnApi, fenced_error_for_version};

use super::{Pending, RequestContext, authz, encode_response};
use crate::broker::Broker;
use crate::groups::OFFSETS_TOPIC;

/// The coordinator's answer for a request about `transactional_id`: NOT_COORDINATOR
/// when it is not loaded here (the client finds it again).
async fn coordinated(broker: &Arc<Broker>, transactional_id: &str) -> Result<(), ErrorCode> {
    broker
        .txns
        .txn_partition_for(transactional_id)
        .await
        .map(|_| ())
        .map_err(|e| e.code)
}

pub(super) fn add_partitions_to_txn(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: AddPartitionsToTxnRequest,
) -> Pending {
    if ctx.version >= 4 {
        // v4+ comes from brokers (KIP-890 verification): ClusterAction on the cluster,
        // else the whole request answers CLUSTER_AUTHORIZATION_FAILED, as Kafka.
        if let Some(code) = authz::deny_cluster(&broker, &ctx, Operation::ClusterAction) {
            let mut resp = AddPartitionsToTxnResponse::default();
            resp.error_code = code.code();
            return super::ready(encode_response(&ctx, &resp));
        }
        return verify_partitions(broker, ctx, req);
    }
    Box::pin(async move {
        let id = req.v3_and_below_transactional_id.0.to_string();
        let mut parts = Vec::new();
        for t in &req.v3_and_below_topics {
            for &p in &t.partitions {
                parts.push((t.name.0.to_string(), p));
            }
        }
        // As Kafka's KafkaApis.handleAddPartitionsToTxnRequest: Write on the
        // transactional id (else every partition answers
        // TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then Write on each topic, checked
        // before existence.
        let id_ok = authz::transactional_id(&broker, &ctx, Operation::Write, &id);
        let mut denied: Vec<&str> = Vec::new();
        if id_ok {
            for t in &req.v3_and_below_topics {
                let name = t.name.0.as_str();
                if !denied.contains(&name) && !authz::topic(&broker, &ctx, Operation::Write, name) {
                    denied.push(name);
                }
            }
        }
        // Partitions that do not exist, or of a topic the producer may not write, are
        // refused one by one (and the rest get OPERATION_NOT_ATTEMPTED: nothing is
        // added), as Kafka answers.
        let md = broker.cluster();
        let unknown: Vec<(String, i32)> = parts
            .iter()
            .filter(|(t, p)| md.topic(t).and_then(|t| t.partition(*p)).is_none())
            .cloned()
            .collect();
        let code = if !id_ok {
            Some(ErrorCode::TransactionalIdAuthorizationFailed)
        } else if !denied.is_empty() || !unknown.is_empty() {
            None
        } else if let Err(code) = coordinated(&broker, &id).await {
            Some(code)
        } else {
            let now = broker.clock.now_ms();
            let outcome = broker.txns.with(|c| {
                c.add_partitions(
                    &id,
                    req.v3_and_below_producer_id.0,
                    req.v3_and_below_producer_epoch,
                    &parts,
                    now,
                )
            });
            let code = broker
                .txns
                .txn_request(
                    outcome,
                    |r| match r {
                        Reply::AddPartitions(c) => Some(c),
                        _ => None,
                    },
                    ErrorCode::NotCoordinator,
                )
                .await;
            Some(fenced_error_for_version(
                TxnApi::AddPartitionsToTxn,
                ctx.version,
                code,
            ))
        };
        let mut resp = AddPartitionsToTxnResponse::default();
        resp.results_by_topic_v3_and_below = req
            .v3_and_below_topics
            .iter()
            .map(|t| {
                let mut rt = AddPartitionsToTxnTopicResult::default();
                rt.name = t.name.clone();
                rt.results_by_partition = t
                    .partitions
                    .iter()
                    .map(|&p| {
                        let mut r = AddPartitionsToTxnPartitionResult::default();
                        r.partition_index = p;
                        r.partition_error_code = match code {
                            Some(c) => c.code(),
                            None if denied.contains(&t.name.0.as_str()) => {
                                ErrorCode::TopicAuthorizationFailed.code()
                            }
                            None if unknown.contains(&(t.name.0.to_string(), p)) => {
                                ErrorCode::UnknownTopicOrPartition.code()
                            }
                            None => ErrorCode::OperationNotAttempted.code(),
                        };
                        r
                    })
                    .collect();
                rt
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}

/// AddPartitionsToTxn v4+, between brokers: a partition leader asks whether
/// transactions are ongoing with its partitions added before it appends their first
/// batch (KIP-890 part 1, `verify_only`); or, without `verify_only`, adds them.
fn verify_partitions(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: AddPartitionsToTxnRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = AddPartitionsToTxnResponse::default();
        for txn in &req.transactions {
            let id = txn.transactional_id.0.to_string();
            let parts: Vec<(String, i32)> = txn
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|&p| (t.name.0.to_string(), p)))
                .collect();
            let answer: Vec<ErrorCode> = match coordinated(&broker, &id).await {
                Err(code) => vec![code; parts.len()],
                Ok(()) if txn.verify_only => parts
                    .iter()
                    .map(|(t, p)| {
                        match broker.txns.with(|c| {
                            c.verify_partition(&id, txn.producer_id.0, txn.producer_epoch, t, *p)
                        }) {
                            Ok(true) => ErrorCode::None,
                            Ok(false) => ErrorCode::InvalidTxnState,
                            Err(code) => code,
                        }
                    })
                    .collect(),
                Ok(()) => {
                    let now = broker.clock.now_ms();
                    let outcome = broker.txns.with(|c| {
                        c.add_partitions(&id, txn.producer_id.0, txn.producer_epoch, &parts, now)
                    });
                    let code = broker
                        .txns
                        .txn_request(
                            outcome,
                            |r| match r {
                                Reply::AddPartitions(c) => Some(c),
                                _ => None,
                            },
                            ErrorCode::NotCoordinator,
                        )
                        .await;
                    vec![code; parts.len()]
                }
            };
            let mut result = kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResult::default();
            result.transactional_id = txn.transactional_id.clone();
            let mut codes = answer.into_iter();
            for t in &txn.topics {
                let mut rt = AddPartitionsToTxnTopicResult::default();
                rt.name = t.name.clone();
                for &p in &t.partitions {
                    let mut r = AddPartitionsToTxnPartitionResult::default();
                    r.partition_index = p;
                    r.partition_error_code = codes.next().unwrap_or(ErrorCode::None).code();
                    rt.results_by_partition.push(r);
                }
                result.topic_results.push(rt);
            }
            resp.results_by_transaction.push(result);
        }
        encode_response(&ctx, &resp)
    })
}

pub(super) fn add_offsets_to_txn(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: AddOffsetsToTxnRequest,
) -> Pending {
    Box::pin(async move {
        let id = req.transactional_id.0.to_string();
        let group = req.group_id.0.to_string();
        // As Kafka: Write on the transactional id, then Read on the group.
        if !authz::transactional_id(&broker, &ctx, Operation::Write, &id) {
            let mut resp = AddOffsetsToTxnResponse::default();
            resp.error_code = ErrorCode::TransactionalIdAuthorizationFailed.code();
            return encode_response(&ctx, &resp);
        }
        if !authz::group(&broker, &ctx, Operation::Read, &group) {
            let mut resp = AddOffsetsToTxnResponse::default();
            resp.error_code = ErrorCode::GroupAuthorizationFailed.code();
            return encode_response(&ctx, &resp);
        }
        let code = async {
            // The offsets topic exists (it is created on first use), so the group's
            // partition is known.
            broker
                .groups
                .offsets_partition_for(&group)
                .await
                .map_err(|e| e.code)?;
            let count = broker
                .cluster()
                .topic(OFFSETS_TOPIC)
                .map_or(0, |t| t.partitions.len() as i32);
            coordinated(&broker, &id).await?;
            let now = broker.clock.now_ms();
            let outcome = broker.txns.with(|c| {
                c.add_offsets(
                    &id,
                    req.producer_id.0,
                    req.producer_epoch,
                    &group,
                    count,
                    now,
                )
            });
            Ok::<ErrorCode, ErrorCode>(
                broker
                    .txns
                    .txn_request(
                        outcome,
                        |r| match r {
                            Reply::AddOffsets(c) => Some(c),
                            _ => None,
                        },
                        ErrorCode::NotCoordinator,
                    )
                    .await,
            )
        }
        .await
        .unwrap_or_else(|e| e);
        let mut resp = AddOffsetsToTxnResponse::default();
        resp.error_code =
            fenced_error_for_version(TxnApi::AddOffsetsToTxn, ctx.version, code).code();
        encode_response(&ctx, &resp)
    })
}

pub(super) fn end_txn(broker: Arc<Broker>, ctx: RequestContext, req: EndTxnRequest) -> Pending {
    Box::pin(async move {
        let id = req.transactional_id.0.to_string();
        // As Kafka: Write on the transactional id.
        let allowed = authz::transactional_id(&broker, &ctx, Operation::Write, &id);
        let coordinator = if allowed {
            coordinated(&broker, &id).await
        } else {
            Err(ErrorCode::TransactionalIdAuthorizationFailed)
        };
        let code = match coordinator {
            Err(code) => code,
            Ok(()) => {
                let now = broker.clock.now_ms();
                let outcome = broker.txns.with(|c| {
                    c.end_txn(
                        &id,
                        req.producer_id.0,
                        req.producer_epoch,
                        req.committed,
                        now,
                    )
                });
                broker
                    .txns
                    .txn_request(
                        outcome,
                        |r| match r {
                            Reply::EndTxn(c) => Some(c),
                            _ => None,
                        },
                        ErrorCode::NotCoordinator,
                    )
                    .await
            }
        };
        let mut resp = EndTxnResponse::default();
        resp.error_code = fenced_error_for_version(TxnApi::EndTxn, ctx.version, code).code();
        resp.producer_id = req.producer_id;
        resp.producer_epoch = req.producer_epoch;
        encode_response(&ctx, &resp)
    })
}

/// WriteTxnMarkers: a transaction coordinator's markers for partitions this broker
/// leads, each appended and replicated (acks=all) before it is answered.
pub(super) fn write_txn_markers(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: WriteTxnMarkersRequest,
) -> Pending {
    // As Kafka's KafkaApis.handleWriteTxnMarkersRequest: Alter on the cluster (checked
    // without an audit line) or ClusterAction, else every partition answers
    // CLUSTER_AUTHORIZATION_FAILED.
    let denied = if authz::allowed_with(
        &broker,
        &ctx,
        Operation::Alter,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
        false,
    ) {
        None
    } else {
        authz::deny_cluster(&broker, &ctx, Operation::ClusterAction)
    };
    Box::pin(async move {
        let mut resp = WriteTxnMarkersResponse::default();
        for m in &req.markers {
            let marker = Marker {
                kind: if m.transaction_result {
                    MarkerKind::Commit
                } else {
                    MarkerKind::Abort
                },
                producer_id: m.producer_id.0,
                producer_epoch: m.producer_epoch,
                coordinator_epoch: m.coordinator_epoch,
                timestamp: broker.clock.now_ms(),
            };
            let mut r = WritableTxnMarkerResult::default();
            r.producer_id = m.producer_id;
            for t in &m.topics {
                let mut rt = WritableTxnMarkerTopicResult::default();
                rt.name = t.name.clone();
                for &index in &t.partition_indexes {
                    let code = match denied {
                        Some(code) => code,
                        None => {
                            broker
                                .txns
                                .write_marker_here(t.name.0.as_str(), index, &marker)
                                .await
                        }
                    };
                    let mut rp = WritableTxnMarkerPartitionResult::default();
                    rp.partition_index = index;
                    rp.error_code = code.code();
                    rt.partitions.push(rp);
                }
                r.topics.push(rt);
            }
            resp.markers.push(r);
        }
        encode_response(&ctx, &resp)
    })
}

/// DescribeTransactions: the coordinator's view of each transactional id it owns.
pub(super) fn describe_transactions(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: DescribeTransactionsRequest,
) -> Pending {
    use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
    Box::pin(async move {
        let mut resp = DescribeTransactionsResponse::default();
        for id in &req.transactional_ids {
            let mut st = TransactionState::default();
            st.transactional_id = id.clone();
            st.producer_id = kafka_protocol::messages::ProducerId(-1);
            st.producer_epoch = -1;
            st.transaction_start_time_ms = -1;
            // As Kafka: Describe on each transactional id, else
            // TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it.
            if !authz::transactional_id(&broker, &ctx, Operation::Describe, id.0.as_str()) {
                st.error_code = ErrorCode::TransactionalIdAuthorizationFailed.code();
                resp.transaction_states.push(st);
                continue;
            }
            let found = match coordinated(&broker, id.0.as_str()).await {
                Err(code) => Err(code),
                Ok(()) => broker.txns.with(|c| c.describe(id.0.as_str())),
            };
            match found {
                Ok(Some(d)) => {
                    st.transaction_state = StrBytes::from_static_str(d.state.name());
                    st.transaction_timeout_ms = d.transaction_timeout_ms;
                    st.transaction_start_time_ms = d.transaction_start_time_ms;
                    st.producer_id = kafka_protocol::messages::ProducerId(d.producer_id);
                    st.producer_epoch = d.producer_epoch;
                    // Only the topics the principal may describe, as Kafka.
                    st.topics = d
                        .topics
                        .into_iter()
                        .filter(|(t, _)| authz::topic(&broker, &ctx, Operation::Describe, t))
                        .map(|(t, ps)| {
                            let mut td = TopicData::default();
                            td.topic =
                                kafka_protocol::messages::TopicName(StrBytes::from_string(t));
                            td.partitions = ps;
                            td
                        })
                        .collect();
                }
                Ok(None) => st.error_code = ErrorCode::TransactionalIdNotFound.code(),
                Err(code) => st.error_code = code.code(),
            }
            resp.transaction_states.push(st);
        }
        encode_response(&ctx, &resp)
    })
}

/// ListTransactions: the transactions this broker coordinates (clients ask every
/// broker), filtered by state, producer id and, from v1, how long they have run.
pub(super) fn list_transactions(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: ListTransactionsRequest,
) -> Pending {
    use kafka_protocol::messages::list_transactions_response::TransactionState;
    let filter = strata_txn::ListFilter {
        states: req.state_filters.iter().map(|s| s.to_string()).collect(),
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        duration_ms: if ctx.version >= 1 {
            req.duration_filter
        } else {
            -1
        },
    };
    let now = broker.clock.now_ms();
    let mut resp = ListTransactionsResponse::default();
    match broker.txns.with(|c| c.list(&filter, now)) {
        Ok(listing) => {
            resp.unknown_state_filters = listing
                .unknown_state_filters
                .into_iter()
                .map(StrBytes::from_string)
                .collect();
            // Only the transactional ids the principal may describe (filtered, not
            // audited).
            resp.transaction_states = listing
                .transactions
                .into_iter()
                .filter(|t| {
                    authz::allowed_with(
                        broker,
                        &ctx,
                        Operation::Describe,
                        ResourceType::TransactionalId,
                        &t.transactional_id,
                        false,
                    )
                })
                .map(|t| {
                    let mut st = TransactionState::default();
                    st.transactional_id = kafka_protocol::messages::TransactionalId(
                        StrBytes::from_string(t.transactional_id),
                    );
                    st.producer_id = kafka_protocol::messages::ProducerId(t.producer_id);
                    st.transaction_state = StrBytes::from_static_str(t.state.name());
                    st
                })
                .collect();
        }
        Err(code) => resp.error_code = code.code(),
    }
    super::ready(encode_response(&ctx, &resp))
}

/// DescribeProducers: the producers the partition leader knows (its producer state),
/// with the first offset of each one's open transaction (-1 for none).
pub(super) fn describe_producers(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: DescribeProducersRequest,
) -> Pending {
    use kafka_protocol::messages::describe_producers_response::{
        PartitionResponse, ProducerState, TopicResponse,
    };
    let mut resp = DescribeProducersResponse::default();
    for t in &req.topics {
        let mut rt = TopicResponse::default();
        rt.name = t.name.clone();
        // As Kafka: Read on the topic, checked before its existence (no leak).
        let allowed = authz::topic(broker, &ctx, Operation::Read, t.name.0.as_str());
        for &index in &t.partition_indexes {
            let mut rp = PartitionResponse::default();
            rp.partition_index = index;
            if !allowed {
                rp.error_code = ErrorCode::TopicAuthorizationFailed.code();
                rt.partitions.push(rp);
                continue;
            }
            match broker
                .replicas
                .partition(t.name.0.as_str(), index)
                .filter(|p| p.is_leader())
            {
                None => {
                    rp.error_code = if broker
                        .replicas
                        .partition(t.name.0.as_str(), index)
                        .is_some()
                    {
                        ErrorCode::NotLeaderOrFollower.code()
                    } else {
                        ErrorCode::UnknownTopicOrPartition.code()
                    };
                }
                Some(p) => {
                    rp.active_producers = p
                        .producer_state()
                        .entries()
                        .map(|(pid, e)| {
                            let mut ps = ProducerState::default();
                            ps.producer_id = kafka_protocol::messages::ProducerId(pid);
                            ps.producer_epoch = i32::from(e.epoch());
                            ps.last_sequence = e.last_sequence();
                            ps.last_timestamp = e.last_timestamp();
                            ps.coordinator_epoch = -1;
                            ps.current_txn_start_offset =
                                e.current_txn_first_offset().unwrap_or(-1);
                            ps
                        })
                        .collect();
                }
            }
            rt.partitions.push(rp);
        }
        resp.topics.push(rt);
    }
    super::ready(encode_response(&ctx, &resp))
}
