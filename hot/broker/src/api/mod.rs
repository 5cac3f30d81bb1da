//! Kafka API dispatch: request framing, versions, and one handler module per API group.
//!
//! A request's synchronous part (for Produce: validation and the append) runs in
//! [`dispatch`], in the order requests arrive on the connection, so pipelined produce
//! requests are appended in order. What may wait (a fetch's long poll, an acks=all
//! produce waiting for the high-water mark, metadata changes) is the returned future;
//! the connection writes responses in request order as those futures finish.

mod acls;
mod admin;
pub(crate) mod authz;
mod cluster;
mod configs;
mod elections;
mod epochs;
mod fetch;
mod frame;
mod group;
mod list_offsets;
mod logdirs;
mod metadata;
mod offsets;
mod produce;
mod quotas;
mod reassign;
pub(crate) mod sasl;
mod txn;
mod users;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use crate::broker::Broker;
pub use frame::Frame;

/// What a request produced: a future yielding the encoded response frame (length
/// prefix included), or `None` when no response is due (acks=0 produce).
pub type Pending = BoxFuture<'static, Option<Frame>>;

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

/// The APIs and versions this broker speaks (what ApiVersions advertises); the table
/// lives in strata-proto so the fuzz targets share it.
pub use strata_proto::api::SUPPORTED;
use strata_proto::api::supported;

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
    /// The listener the request came in on: Metadata answers with its addresses.
    pub listener: crate::listener::SecurityProtocol,
    /// Who sent it (`User:NAME`).
    pub principal: Arc<str>,
    /// The connection's quota mute (KIP-219).
    pub mute: Arc<crate::security::quotas::Mute>,
}

impl RequestContext {
    pub(crate) fn new(head: RequestHead, conn: &crate::server::Connection) -> RequestContext {
        RequestContext {
            api: head.api,
            version: head.version,
            correlation_id: head.correlation_id,
            client_id: head.client_id,
            connection_id: conn.id,
            peer: conn.peer,
            listener: conn.listener,
            principal: conn.principal.clone(),
            mute: conn.mute.clone(),
        }
    }
}

/// Encodes a response frame: size, header, body.
pub(crate) fn encode_response<R: Encodable + HeaderVersion>(
    ctx: &RequestContext,
    body: &R,
) -> Option<Frame> {
    let header_version = R::header_version(ctx.version);
    let mut header = ResponseHeader::default();
    header.correlation_id = ctx.correlation_id;
    // Sized up front: a fetch response carries megabytes of records, and growing the
    // buffer by doubling copied them several times (and faulted in fresh pages each
    // time).
    let size = body.compute_size(ctx.version).unwrap_or(0);
    let mut buf = BytesMut::with_capacity(64 + size);
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
    Some(Frame::One(buf.freeze()))
}

pub(crate) fn ready(frame: Option<Frame>) -> Pending {
    Box::pin(futures::future::ready(frame))
}

/// The header fields of a parsed request.
#[derive(Clone, Debug)]
pub struct RequestHead {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

macro_rules! requests {
    ($($api:ident => $ty:ident),* $(,)?) => {
        /// A decoded request body, one variant per API this broker serves.
        #[derive(Debug)]
        pub enum Request {
            /// ApiVersions keeps its body: any version is answered, even one this
            /// broker cannot decode (the answer says what it speaks).
            ApiVersions(Bytes),
            /// Produce keeps the body its batches are slices of (appended in place).
            Produce(kafka_protocol::messages::ProduceRequest, Bytes),
            $($api(kafka_protocol::messages::$ty),)*
        }

        fn decode_body(head: &RequestHead, body: &mut Bytes) -> Result<Request, ProtocolError> {
            Ok(match head.api {
                $(ApiKey::$api => Request::$api(decode(body, head)?),)*
                other => return Err(ProtocolError::UnsupportedApi { api: other }),
            })
        }
    };
}

requests! {
    Fetch => FetchRequest,
    ListOffsets => ListOffsetsRequest,
    Metadata => MetadataRequest,
    CreateTopics => CreateTopicsRequest,
    DeleteTopics => DeleteTopicsRequest,
    CreatePartitions => CreatePartitionsRequest,
    DescribeConfigs => DescribeConfigsRequest,
    AlterConfigs => AlterConfigsRequest,
    IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
    InitProducerId => InitProducerIdRequest,
    DescribeCluster => DescribeClusterRequest,
    OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
    FindCoordinator => FindCoordinatorRequest,
    JoinGroup => JoinGroupRequest,
    SyncGroup => SyncGroupRequest,
    Heartbeat => HeartbeatRequest,
    LeaveGroup => LeaveGroupRequest,
    OffsetCommit => OffsetCommitRequest,
    OffsetFetch => OffsetFetchRequest,
    ListGroups => ListGroupsRequest,
    DescribeGroups => DescribeGroupsRequest,
    DeleteGroups => DeleteGroupsRequest,
    OffsetDelete => OffsetDeleteRequest,
    AddPartitionsToTxn => AddPartitionsToTxnRequest,
    AddOffsetsToTxn => AddOffsetsToTxnRequest,
    EndTxn => EndTxnRequest,
    WriteTxnMarkers => WriteTxnMarkersRequest,
    TxnOffsetCommit => TxnOffsetCommitRequest,
    DescribeTransactions => DescribeTransactionsRequest,
    ListTransactions => ListTransactionsRequest,
    DescribeProducers => DescribeProducersRequest,
    DeleteRecords => DeleteRecordsRequest,
    DescribeLogDirs => DescribeLogDirsRequest,
    ElectLeaders => ElectLeadersRequest,
    AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
    ListPartitionReassignments => ListPartitionReassignmentsRequest,
    UnregisterBroker => UnregisterBrokerRequest,
    SaslHandshake => SaslHandshakeRequest,
    SaslAuthenticate => SaslAuthenticateRequest,
    DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
    AlterUserScramCredentials => AlterUserScramCredentialsRequest,
    CreateAcls => CreateAclsRequest,
    DescribeAcls => DescribeAclsRequest,
    DeleteAcls => DeleteAclsRequest,
    DescribeClientQuotas => DescribeClientQuotasRequest,
    AlterClientQuotas => AlterClientQuotasRequest,
}

fn decode<T: Decodable>(body: &mut Bytes, head: &RequestHead) -> Result<T, ProtocolError> {
    T::decode(body, head.version)
        .map_err(|e| ProtocolError::Malformed(format!("{:?} v{}: {e:#}", head.api, head.version)))
}

/// Decodes a request frame (without its length prefix): the header, the version check
/// against [`SUPPORTED`], and the body. Pure: no broker, no IO. The decoder under it is
/// kafka-protocol with every length checked against the bytes left before anything is
/// allocated (vendor/kafka-protocol), so what a frame can make this allocate is bounded
/// by a small multiple of its size.
pub fn parse_request(mut frame: Bytes) -> Result<(RequestHead, Request), ProtocolError> {
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
    let head = RequestHead {
        api,
        version,
        correlation_id: header.correlation_id,
        client_id: header.client_id.as_ref().map(|s| s.to_string()),
    };
    // The header's strings are slices of the frame: drop them, so a produce request's
    // frame can become uniquely owned (and its batches appended in place).
    drop(header);
    if api == ApiKey::ApiVersions {
        return Ok((head, Request::ApiVersions(frame)));
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
    if api == ApiKey::Produce {
        let body = frame.clone();
        let req = decode(&mut frame, &head)?;
        return Ok((head, Request::Produce(req, body)));
    }
    let req = decode_body(&head, &mut frame)?;
    Ok((head, req))
}

/// Parses a request frame (without its length prefix) and starts handling it.
pub fn dispatch(
    broker: &Arc<Broker>,
    conn: &crate::server::Connection,
    frame: Bytes,
) -> Result<Pending, ProtocolError> {
    let started = std::time::Instant::now();
    let (head, req) = parse_request(frame)?;
    let ctx = RequestContext::new(head, conn);
    let pending = dispatch_parsed(broker, &ctx, req);
    // request_percentage (KIP-124): the time this request held the connection's task
    // (decoding and the synchronous part of its handling; a long poll's wait is not work).
    broker.security.record_quota(
        &ctx.principal,
        ctx.client_id.as_deref(),
        &ctx.mute,
        strata_quota::QuotaKey::RequestPercentage,
        started.elapsed().as_nanos() as f64 * strata_quota::NANOS_TO_PERCENTAGE_PER_SECOND,
    );
    Ok(pending)
}

fn dispatch_parsed(broker: &Arc<Broker>, ctx: &RequestContext, req: Request) -> Pending {
    metrics::counter!("strata_requests_total", "api" => api_name(ctx.api)).increment(1);
    tracing::trace!(api = ?ctx.api, version = ctx.version, correlation_id = ctx.correlation_id, client = ?ctx.client_id, "request");
    let b = broker.clone();
    let c = ctx.clone();
    match req {
        Request::ApiVersions(mut body) => cluster::api_versions(ctx, &mut body),
        Request::Produce(req, body) => produce::handle(&b, c, req, body),
        Request::Fetch(r) => fetch::handle(b, c, r),
        Request::ListOffsets(r) => list_offsets::handle(b, c, r),
        Request::Metadata(r) => metadata::handle(b, c, r),
        Request::CreateTopics(r) => admin::create_topics(b, c, r),
        Request::DeleteTopics(r) => admin::delete_topics(b, c, r),
        Request::CreatePartitions(r) => admin::create_partitions(b, c, r),
        Request::DescribeConfigs(r) => configs::describe_configs(&b, c, r),
        Request::AlterConfigs(r) => configs::alter_configs(b, c, r),
        Request::IncrementalAlterConfigs(r) => configs::incremental_alter_configs(b, c, r),
        Request::InitProducerId(r) => cluster::init_producer_id(b, c, r),
        Request::DescribeCluster(r) => cluster::describe_cluster(&b, c, r),
        Request::OffsetForLeaderEpoch(r) => epochs::handle(&b, c, r),
        Request::FindCoordinator(r) => group::find_coordinator(b, c, r),
        Request::JoinGroup(r) => group::join_group(b, c, r),
        Request::SyncGroup(r) => group::sync_group(b, c, r),
        Request::Heartbeat(r) => group::heartbeat(b, c, r),
        Request::LeaveGroup(r) => group::leave_group(b, c, r),
        Request::OffsetCommit(r) => offsets::offset_commit(b, c, r),
        Request::OffsetFetch(r) => offsets::offset_fetch(b, c, r),
        Request::ListGroups(r) => group::list_groups(b, c, r),
        Request::DescribeGroups(r) => group::describe_groups(b, c, r),
        Request::DeleteGroups(r) => group::delete_groups(b, c, r),
        Request::OffsetDelete(r) => offsets::offset_delete(b, c, r),
        Request::AddPartitionsToTxn(r) => txn::add_partitions_to_txn(b, c, r),
        Request::AddOffsetsToTxn(r) => txn::add_offsets_to_txn(b, c, r),
        Request::EndTxn(r) => txn::end_txn(b, c, r),
        Request::WriteTxnMarkers(r) => txn::write_txn_markers(b, c, r),
        Request::TxnOffsetCommit(r) => offsets::txn_offset_commit(b, c, r),
        Request::DescribeTransactions(r) => txn::describe_transactions(b, c, r),
        Request::ListTransactions(r) => txn::list_transactions(&b, c, r),
        Request::DescribeProducers(r) => txn::describe_producers(&b, c, r),
        Request::DeleteRecords(r) => logdirs::delete_records(b, c, r),
        Request::DescribeLogDirs(r) => logdirs::describe_log_dirs(&b, c, r),
        Request::ElectLeaders(r) => elections::elect_leaders(b, c, r),
        Request::AlterPartitionReassignments(r) => reassign::alter(b, c, r),
        Request::ListPartitionReassignments(r) => reassign::list(&b, c, r),
        Request::UnregisterBroker(r) => cluster::unregister_broker(b, c, r),
        Request::DescribeUserScramCredentials(r) => users::describe(&b, c, r),
        Request::AlterUserScramCredentials(r) => users::alter(b, c, r),
        Request::CreateAcls(r) => acls::create(b, c, r),
        Request::DescribeAcls(r) => acls::describe(&b, c, r),
        Request::DeleteAcls(r) => acls::delete(b, c, r),
        Request::DescribeClientQuotas(r) => quotas::describe(&b, c, r),
        Request::AlterClientQuotas(r) => quotas::alter(b, c, r),
        // A SASL listener's connection answers these before dispatch.
        Request::SaslHandshake(_) | Request::SaslAuthenticate(_) => {
            ready(sasl::not_a_sasl_listener(ctx, ctx.listener))
        }
    }
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
        ApiKey::AddPartitionsToTxn => "add_partitions_to_txn",
        ApiKey::AddOffsetsToTxn => "add_offsets_to_txn",
        ApiKey::EndTxn => "end_txn",
        ApiKey::WriteTxnMarkers => "write_txn_markers",
        ApiKey::TxnOffsetCommit => "txn_offset_commit",
        ApiKey::DescribeTransactions => "describe_transactions",
        ApiKey::ListTransactions => "list_transactions",
        ApiKey::DescribeProducers => "describe_producers",
        ApiKey::DeleteRecords => "delete_records",
        ApiKey::DescribeLogDirs => "describe_log_dirs",
        ApiKey::ElectLeaders => "elect_leaders",
        ApiKey::AlterPartitionReassignments => "alter_partition_reassignments",
        ApiKey::ListPartitionReassignments => "list_partition_reassignments",
        ApiKey::UnregisterBroker => "unregister_broker",
        ApiKey::SaslHandshake => "sasl_handshake",
        ApiKey::SaslAuthenticate => "sasl_authenticate",
        ApiKey::DescribeUserScramCredentials => "describe_user_scram_credentials",
        ApiKey::AlterUserScramCredentials => "alter_user_scram_credentials",
        ApiKey::CreateAcls => "create_acls",
        ApiKey::DescribeAcls => "describe_acls",
        ApiKey::DeleteAcls => "delete_acls",
        ApiKey::DescribeClientQuotas => "describe_client_quotas",
        ApiKey::AlterClientQuotas => "alter_client_quotas",
        _ => "other",
    }
}

/// `Option<StrBytes>` from a message.
pub(crate) fn msg(s: impl Into<String>) -> Option<kafka_protocol::protocol::StrBytes> {
    Some(kafka_protocol::protocol::StrBytes::from_string(s.into()))
}
