//! ApiVersions, DescribeCluster, InitProducerId.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, DescribeClusterRequest,
    DescribeClusterResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, SUPPORTED, encode_response, ready};
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

pub(super) fn describe_cluster(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    _req: DescribeClusterRequest,
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
        .map(|r| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(r.id);
            b.host = StrBytes::from_string(r.host.clone());
            b.port = r.port as i32;
            b.rack = r.rack.clone().map(StrBytes::from_string);
            b
        })
        .collect();
    resp.cluster_authorized_operations = i32::MIN;
    ready(encode_response(&ctx, &resp))
}

/// InitProducerId for idempotent producers: a fresh producer id with epoch 0, as Kafka
/// does for a producer without a transactional id (even one asking to bump its epoch,
/// KIP-360: a new id is always safe). Transactions are not supported yet.
pub(super) fn init_producer_id(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: InitProducerIdRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = InitProducerIdResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        if req.transactional_id.is_some() {
            tracing::debug!(client = ?ctx.client_id, "transactional producer refused: transactions are not supported");
            resp.error_code = ErrorCode::UnsupportedVersion.code();
        } else {
            match broker.next_producer_id().await {
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
