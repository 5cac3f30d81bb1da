//! OffsetForLeaderEpoch (KIP-101, KIP-279): where an epoch ends in the leader's log.
//! Followers use it to find where their log parts from the leader's; consumers use it
//! (KIP-320) to detect that the log they read was truncated under them after a leader
//! change.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, encode_response, ready};
use crate::broker::Broker;

pub(super) fn handle(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: OffsetForLeaderEpochRequest,
) -> Pending {
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let mut out = OffsetForLeaderTopicResult::default();
        out.topic = t.topic.clone();
        let state = broker.topic(t.topic.0.as_str());
        for rp in t.partitions {
            let mut e = EpochEndOffset::default();
            e.partition = rp.partition;
            e.leader_epoch = -1;
            e.end_offset = -1;
            let known = state
                .as_ref()
                .is_some_and(|s| rp.partition >= 0 && rp.partition < s.partition_count);
            let code = match state.as_ref().and_then(|s| s.partition(rp.partition)) {
                None if known => state.as_ref().map_or(ErrorCode::NotLeaderOrFollower, |s| {
                    s.missing_partition_code(rp.partition)
                }),
                None => ErrorCode::UnknownTopicOrPartition,
                Some(p) if !p.is_leader() => ErrorCode::NotLeaderOrFollower,
                Some(p) => {
                    let epoch = p.leader_epoch();
                    if rp.current_leader_epoch >= 0 && rp.current_leader_epoch < epoch {
                        ErrorCode::FencedLeaderEpoch
                    } else if rp.current_leader_epoch > epoch {
                        ErrorCode::UnknownLeaderEpoch
                    } else {
                        if let Some((epoch, end)) = p.end_offset_for_epoch(rp.leader_epoch) {
                            e.leader_epoch = epoch;
                            e.end_offset = end;
                        }
                        ErrorCode::None
                    }
                }
            };
            e.error_code = code.code();
            out.partitions.push(e);
        }
        resp.topics.push(out);
    }
    ready(encode_response(&ctx, &resp))
}
