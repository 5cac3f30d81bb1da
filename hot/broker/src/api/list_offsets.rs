//! ListOffsets: earliest, latest, by timestamp, max timestamp (KIP-734), and KIP-1005's
//! earliest-local and latest-tiered.

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use strata_authz::Operation;
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, authz, encode_response};
use crate::broker::Broker;
use crate::partition::Partition;

pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL: i64 = -4;
pub const LATEST_TIERED: i64 = -5;

pub(super) fn handle(broker: Arc<Broker>, ctx: RequestContext, req: ListOffsetsRequest) -> Pending {
    Box::pin(async move {
        let mut resp = ListOffsetsResponse::default();
        // KIP-98: read_committed (isolation_level 1, v2+) sees the log up to the last
        // stable offset.
        let read_committed = ctx.version >= 2 && req.isolation_level == 1;
        for topic in req.topics {
            let mut out = ListOffsetsTopicResponse::default();
            out.name = topic.name.clone();
            // Describe on the topic, checked before its existence (no leak of which
            // topics exist), as Kafka's KafkaApis.handleListOffsetRequest.
            let allowed = authz::topic(&broker, &ctx, Operation::Describe, topic.name.0.as_str());
            let state = broker.replicas.topic(topic.name.0.as_str());
            for lp in topic.partitions {
                let mut r = ListOffsetsPartitionResponse::default();
                r.partition_index = lp.partition_index;
                r.timestamp = -1;
                r.offset = -1;
                r.leader_epoch = -1;
                let p = state.as_ref().and_then(|t| t.partition(lp.partition_index));
                let result = match p {
                    _ if !allowed => Err(ErrorCode::TopicAuthorizationFailed),
                    None => Err(broker.replicas.missing_partition_code(
                        state.as_deref(),
                        crate::replicas::TopicRef::Name(topic.name.0.as_str()),
                        lp.partition_index,
                    )),
                    // Offsets come from the leader only, as Kafka answers: a follower's
                    // high-water mark and log end lag the leader's.
                    Some(p) if !p.is_leader() => Err(ErrorCode::NotLeaderOrFollower),
                    Some(p) => {
                        lookup(
                            &ctx,
                            p,
                            lp.timestamp,
                            lp.current_leader_epoch,
                            read_committed,
                        )
                        .await
                    }
                };
                match result {
                    Ok((offset, timestamp, epoch)) => {
                        r.offset = offset;
                        r.timestamp = timestamp;
                        // The field exists from v4; earlier versions refuse a non-default value.
                        if ctx.version >= 4 {
                            r.leader_epoch = epoch;
                        }
                    }
                    Err(code) => r.error_code = code.code(),
                }
                out.partitions.push(r);
            }
            resp.topics.push(out);
        }
        encode_response(&ctx, &resp)
    })
}

/// (offset, timestamp, leader epoch) for one partition.
async fn lookup(
    ctx: &RequestContext,
    p: &Partition,
    timestamp: i64,
    current_leader_epoch: i32,
    read_committed: bool,
) -> Result<(i64, i64, i32), ErrorCode> {
    let epoch = p.leader_epoch();
    if current_leader_epoch >= 0 && current_leader_epoch < epoch {
        return Err(ErrorCode::FencedLeaderEpoch);
    }
    if current_leader_epoch > epoch {
        return Err(ErrorCode::UnknownLeaderEpoch);
    }
    // What the caller may read: below the high-water mark, or the LSO.
    let visible = if read_committed {
        p.last_stable_offset()
    } else {
        p.high_watermark()
    };
    let log = p.log();
    let by_time = async |t: i64| match log
        .offset_for_timestamp(t, visible, ctx.connection_id)
        .await
    {
        Ok(Some((o, ts))) => Ok((o, ts, epoch)),
        // Kafka answers -1 when every record is older than the timestamp.
        Ok(None) => Ok((-1, -1, -1)),
        Err(e) => Err(e.error_code()),
    };
    match timestamp {
        LATEST => Ok((visible, -1, epoch)),
        // The earliest readable offset, remote included (KIP-405).
        EARLIEST => Ok((log.log_start(), -1, epoch)),
        // KIP-1005: the first offset on local disk.
        EARLIEST_LOCAL => Ok((log.local_start(), -1, epoch)),
        // KIP-1005: the last offset in object storage.
        LATEST_TIERED => Ok(log
            .latest_tiered()
            .map_or((-1, -1, -1), |last| (last, -1, epoch))),
        MAX_TIMESTAMP => match log.max_timestamp() {
            max if max < 0 => Ok((-1, -1, -1)),
            max => by_time(max).await,
        },
        t if t >= 0 => by_time(t).await,
        _ => Err(ErrorCode::InvalidRequest),
    }
}
