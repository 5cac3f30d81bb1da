//! Kafka API dispatch: request framing, versions, and one handler module per API group.
//!
//! A request's synchronous part (for Produce: validation and the append) runs in
//! [`dispatch`], in the order requests arrive on the connection, so pipelined produce
//! requests are appended in order. What may wait (a fetch's long poll, an acks=all
//! produce waiting for the high-water mark, metadata changes) is the returned future;
//! the connection writes responses in request order as those futures finish.

mod admin;
mod cluster;
mod epochs;
mod fetch;
mod group;
mod list_offsets;
mod metadata;
mod produce;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use crate::broker::Broker;
pub(crate) use produce::wait_for_replicas;

/// What a request produced: a future yielding the encoded response frame (length
/// prefix included), or `None` when no response is due (acks=0 produce).
pub type Pending = BoxFuture<'static, Option<Bytes>>;

/// Why a connection must be closed instead of answered.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{api:?} v{version} is not supported (supported: v{min}-v{max})")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("{api:?} is not supported by this broker")]
    UnsupportedApi { api: ApiKey },
    #[error("malformed request: {0}")]
    Malformed(String),
}

/// The APIs and versions this broker speaks (what ApiVersions advertises).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 9),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 4),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
];

fn supported(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|(_, min, max)| (*min, *max))
}

/// The parts of a request header a handler needs.
#[derive(Clone, Debug)]
pub struct RequestContext {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// Identifies the connection (remote reads use it to spot sequential readers).
    pub connection_id: u64,
    /// The client's address (group members' client_host).
    pub peer: std::net::SocketAddr,
}

/// Encodes a response frame: size, header, body.
pub(crate) fn encode_response<R: Encodable + HeaderVersion>(
    ctx: &RequestContext,
    body: &R,
) -> Option<Bytes> {
    let header_version = R::header_version(ctx.version);
    let mut header = ResponseHeader::default();
    header.correlation_id = ctx.correlation_id;
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0);
    let encoded = header
        .encode(&mut buf, header_version)
        .and_then(|_| body.encode(&mut buf, ctx.version));
    if let Err(e) = encoded {
        // Our own response failed to encode (a field the negotiated version cannot
        // carry): a bug. Answering nothing makes the client time out and retry.
        tracing::error!(api = ?ctx.api, version = ctx.version, error = %e, "cannot encode response");
        return None;
    }
    let len = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Some(buf.freeze())
}

pub(crate) fn ready(frame: Option<Bytes>) -> Pending {
    Box::pin(futures::future::ready(frame))
}

fn decode<T: Decodable>(body: &mut Bytes, ctx: &RequestContext) -> Result<T, ProtocolError> {
    T::decode(body, ctx.version)
        .map_err(|e| ProtocolError::Malformed(format!("{:?} v{}: {e:#}", ctx.api, ctx.version)))
}

/// Parses a request frame (without its length prefix) and starts handling it.
pub fn dispatch(
    broker: &Arc<Broker>,
    connection_id: u64,
    peer: std::net::SocketAddr,
    mut frame: Bytes,
) -> Result<Pending, ProtocolError> {
    if frame.len() < 8 {
        return Err(ProtocolError::Malformed(format!(
            "a {}-byte frame has no room for a request header",
            frame.len()
        )));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = ApiKey::try_from(key).map_err(|_| ProtocolError::UnknownApiKey(key))?;
    let header_version = api.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| ProtocolError::Malformed(format!("request header: {e:#}")))?;
    let ctx = RequestContext {
        api,
        version,
        correlation_id: header.correlation_id,
        client_id: header.client_id.as_ref().map(|s| s.to_string()),
        connection_id,
        peer,
    };
    // The header's strings are slices of the frame: drop them, so a produce request's
    // frame can become uniquely owned (and its batches appended in place).
    drop(header);
    metrics::counter!("strata_requests_total", "api" => api_name(api)).increment(1);
    tracing::trace!(?api, version, correlation_id = ctx.correlation_id, client = ?ctx.client_id, "request");
    if api == ApiKey::ApiVersions {
        // Any version, even one from the future: the answer tells the client what we speak.
        return Ok(cluster::api_versions(&ctx, &mut frame));
    }
    let Some((min, max)) = supported(api) else {
        return Err(ProtocolError::UnsupportedApi { api });
    };
    if version < min || version > max {
        // Kafka closes the connection here too: the client cannot parse an answer in a
        // version it did not send, and ApiVersions already told it what we speak.
        return Err(ProtocolError::UnsupportedVersion {
            api,
            version,
            min,
            max,
        });
    }
    let b = broker.clone();
    Ok(match api {
        ApiKey::Produce => {
            let body = frame.clone();
            let req = decode(&mut frame, &ctx)?;
            drop(frame);
            produce::handle(&b, ctx.clone(), req, body)
        }
        ApiKey::Fetch => fetch::handle(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::ListOffsets => list_offsets::handle(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::Metadata => metadata::handle(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::CreateTopics => admin::create_topics(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::DeleteTopics => admin::delete_topics(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::CreatePartitions => {
            admin::create_partitions(b, ctx.clone(), decode(&mut frame, &ctx)?)
        }
        ApiKey::DescribeConfigs => {
            admin::describe_configs(&b, ctx.clone(), decode(&mut frame, &ctx)?)
        }
        ApiKey::AlterConfigs => admin::alter_configs(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::IncrementalAlterConfigs => {
            admin::incremental_alter_configs(b, ctx.clone(), decode(&mut frame, &ctx)?)
        }
        ApiKey::InitProducerId => {
            cluster::init_producer_id(b, ctx.clone(), decode(&mut frame, &ctx)?)
        }
        ApiKey::DescribeCluster => {
            cluster::describe_cluster(&b, ctx.clone(), decode(&mut frame, &ctx)?)
        }
        ApiKey::OffsetForLeaderEpoch => epochs::handle(&b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::FindCoordinator => {
            group::find_coordinator(b, ctx.clone(), decode(&mut frame, &ctx)?)
        }
        ApiKey::JoinGroup => group::join_group(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::SyncGroup => group::sync_group(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::Heartbeat => group::heartbeat(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::LeaveGroup => group::leave_group(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::OffsetCommit => group::offset_commit(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::OffsetFetch => group::offset_fetch(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::ListGroups => group::list_groups(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::DescribeGroups => group::describe_groups(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::DeleteGroups => group::delete_groups(b, ctx.clone(), decode(&mut frame, &ctx)?),
        ApiKey::OffsetDelete => group::offset_delete(b, ctx.clone(), decode(&mut frame, &ctx)?),
        other => return Err(ProtocolError::UnsupportedApi { api: other }),
    })
}

pub(crate) fn api_name(api: ApiKey) -> &'static str {
    match api {
        ApiKey::Produce => "produce",
        ApiKey::Fetch => "fetch",
        ApiKey::ListOffsets => "list_offsets",
        ApiKey::Metadata => "metadata",
        ApiKey::ApiVersions => "api_versions",
        ApiKey::CreateTopics => "create_topics",
        ApiKey::DeleteTopics => "delete_topics",
        ApiKey::InitProducerId => "init_producer_id",
        ApiKey::DescribeConfigs => "describe_configs",
        ApiKey::AlterConfigs => "alter_configs",
        ApiKey::CreatePartitions => "create_partitions",
        ApiKey::IncrementalAlterConfigs => "incremental_alter_configs",
        ApiKey::DescribeCluster => "describe_cluster",
        ApiKey::OffsetForLeaderEpoch => "offset_for_leader_epoch",
        ApiKey::FindCoordinator => "find_coordinator",
        ApiKey::JoinGroup => "join_group",
        ApiKey::SyncGroup => "sync_group",
        ApiKey::Heartbeat => "heartbeat",
        ApiKey::LeaveGroup => "leave_group",
        ApiKey::OffsetCommit => "offset_commit",
        ApiKey::OffsetFetch => "offset_fetch",
        ApiKey::ListGroups => "list_groups",
        ApiKey::DescribeGroups => "describe_groups",
        ApiKey::DeleteGroups => "delete_groups",
        ApiKey::OffsetDelete => "offset_delete",
        _ => "other",
    }
}

/// `Option<StrBytes>` from a message.
pub(crate) fn msg(s: impl Into<String>) -> Option<kafka_protocol::protocol::StrBytes> {
    Some(kafka_protocol::protocol::StrBytes::from_string(s.into()))
}
