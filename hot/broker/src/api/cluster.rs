//! ApiVersions, DescribeCluster, InitProducerId, UnregisterBroker.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, DescribeClusterRequest,
    DescribeClusterResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
    UnregisterBrokerRequest, UnregisterBrokerResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use strata_authz::{Operation, ResourceType};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, SUPPORTED, authz, encode_response, ready};
use crate::broker::Broker;

/// ApiVersions. A version we do not know is answered in v0, with UNSUPPORTED_VERSION and
/// the list of what we speak, so the client retries with one of those (KIP-511).
pub(super) fn api_versions(ctx: &RequestContext, body: &mut Bytes) -> Pending {
    let (min, max) = (0, 4);
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = SUPPORTED
        .iter()
        .map(|(k, lo, hi)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *lo;
            v.max_version = *hi;
            v
        })
        .collect();
    if ctx.version < min || ctx.version > max {
        resp.error_code = ErrorCode::UnsupportedVersion.code();
        let v0 = RequestContext {
            version: 0,
            ..ctx.clone()
        };
        return ready(encode_response(&v0, &resp));
    }
    if ApiVersionsRequest::decode(body, ctx.version).is_err() {
        resp.error_code = ErrorCode::InvalidRequest.code();
    }
    ready(encode_response(ctx, &resp))
}

/// DescribeCluster. As on Kafka's brokers, anyone may ask (only a controller asks for
/// Alter on the cluster); the cluster's authorized operations (KIP-430), when asked
/// for, need Describe on the cluster (0 without it).
pub(super) fn describe_cluster(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: DescribeClusterRequest,
) -> Pending {
    let md = broker.cluster();
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = StrBytes::from_string(md.cluster_id.clone());
    // Controller voters and brokers share node ids.
    resp.controller_id = BrokerId(md.controller_leader.map_or(-1, |n| n as i32));
    resp.brokers = md
        .brokers
        .values()
        .filter(|r| !r.fenced)
        .filter_map(|r| {
            let (host, port) = r.endpoint(ctx.listener.name())?;
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(r.id);
            b.host = StrBytes::from_string(host.to_string());
            b.port = i32::from(port);
            b.rack = r.rack.clone().map(StrBytes::from_string);
            Some(b)
        })
        .collect();
    resp.cluster_authorized_operations = if req.include_cluster_authorized_operations {
        super::metadata::cluster_authorized_operations(broker, &ctx)
    } else {
        i32::MIN
    };
    ready(encode_response(&ctx, &resp))
}

/// InitProducerId: for an idempotent producer a fresh producer id with epoch 0, as Kafka
/// does for a producer without a transactional id (even one asking to bump its epoch,
/// KIP-360: a new id is always safe); for a transactional one, its coordinator's answer
/// (the epoch bumped, the previous producer fenced and its transaction aborted).
pub(super) fn init_producer_id(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: InitProducerIdRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = InitProducerIdResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        // As Kafka's KafkaApis.handleInitProducerIdRequest: a transactional producer
        // needs Write on its transactional id; an idempotent one IdempotentWrite on the
        // cluster (checked without an audit line) or, KIP-679, Write on some topic.
        let denied = match req.transactional_id.as_deref() {
            Some(id) => (!authz::transactional_id(&broker, &ctx, Operation::Write, id))
                .then_some(ErrorCode::TransactionalIdAuthorizationFailed),
            None => {
                let idempotent = authz::allowed_with(
                    &broker,
                    &ctx,
                    Operation::IdempotentWrite,
                    ResourceType::Cluster,
                    strata_authz::CLUSTER_NAME,
                    false,
                ) || authz::allowed_on_some(
                    &broker,
                    &ctx,
                    Operation::Write,
                    ResourceType::Topic,
                );
                // Refused: the cluster check once more, audited, for the denial's line.
                if idempotent {
                    None
                } else {
                    authz::deny_cluster(&broker, &ctx, Operation::IdempotentWrite)
                        .or(Some(ErrorCode::ClusterAuthorizationFailed))
                }
            }
        };
        if let Some(code) = denied {
            resp.error_code = code.code();
            return encode_response(&ctx, &resp);
        }
        if let Some(id) = req.transactional_id.as_ref().map(|s| s.to_string()) {
            let (code, pid) = init_transactional(&broker, &ctx, &req, &id).await;
            resp.error_code = code.code();
            if let Some(p) = pid {
                resp.producer_id = ProducerId(p.producer_id);
                resp.producer_epoch = p.producer_epoch;
            }
        } else {
            match broker.txns.next_producer_id().await {
                Ok(id) => {
                    resp.producer_id = ProducerId(id);
                    resp.producer_epoch = 0;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot allocate producer ids");
                    resp.error_code = ErrorCode::CoordinatorNotAvailable.code();
                }
            }
        }
        encode_response(&ctx, &resp)
    })
}

/// InitProducerId with a transactional id, at its coordinator.
async fn init_transactional(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: &InitProducerIdRequest,
    id: &str,
) -> (ErrorCode, Option<strata_txn::ProducerIdAndEpoch>) {
    if let Err(e) = broker.txns.txn_partition_for(id).await {
        return (e.code, None);
    }
    // An id for the coordinator to hand out if it needs one (a new transactional id, or
    // an exhausted epoch): taken before, as the coordinator does no IO.
    let fresh = match broker.txns.next_producer_id().await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot allocate producer ids");
            return (ErrorCode::CoordinatorNotAvailable, None);
        }
    };
    // KIP-360: a producer recovering from an error names the id and epoch it had.
    let expected =
        (ctx.version >= 3 && req.producer_id.0 >= 0).then_some(strata_txn::ProducerIdAndEpoch {
            producer_id: req.producer_id.0,
            producer_epoch: req.producer_epoch,
        });
    let now = broker.clock.now_ms();
    let mut fresh = Some(fresh);
    let outcome = broker.txns.with(|c| {
        c.init_producer_id(id, req.transaction_timeout_ms, expected, now, &mut || {
            fresh.take().ok_or(ErrorCode::CoordinatorNotAvailable)
        })
    });
    let result = broker
        .txns
        .txn_request(
            outcome,
            |r| match r {
                strata_txn::Reply::InitProducerId(r) => Some(r),
                _ => None,
            },
            Err(ErrorCode::NotCoordinator),
        )
        .await;
    match result {
        Ok(p) => (ErrorCode::None, Some(p)),
        Err(code) => (
            strata_txn::fenced_error_for_version(
                strata_txn::TxnApi::InitProducerId,
                ctx.version,
                code,
            ),
            None,
        ),
    }
}

/// UnregisterBroker (KIP-500): Alter on the cluster. Removes a broker for good once its
/// process has stopped (it is fenced) and it holds no replica; otherwise INVALID_REQUEST
/// saying which, and BROKER_ID_NOT_REGISTERED for an id the cluster does not know.
pub(super) fn unregister_broker(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: UnregisterBrokerRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = UnregisterBrokerResponse::default();
        if let Some(code) = authz::deny_cluster(&broker, &ctx, Operation::Alter) {
            resp.error_code = code.code();
            resp.error_message = super::msg("not authorized to unregister brokers");
            return encode_response(&ctx, &resp);
        }
        let id = req.broker_id.0;
        match broker.controller().unregister_broker(id).await {
            Ok(()) => {
                tracing::info!(broker = id, "unregistered broker");
                if let Err(e) = broker.replicas.refresh_and_apply().await {
                    tracing::warn!(error = %e.message, "cannot refresh metadata after unregistering a broker");
                }
            }
            Err(strata_controller::ControllerError::Rejected(
                strata_controller::Rejection::UnknownBroker { .. },
            )) => {
                resp.error_code = ErrorCode::BrokerIdNotRegistered.code();
                resp.error_message = super::msg(format!("broker {id} is not registered"));
            }
            Err(e) => {
                let e = crate::error::ApiError::from(e);
                resp.error_code = e.code.code();
                resp.error_message = super::msg(e.message);
            }
        }
        encode_response(&ctx, &resp)
    })
}
