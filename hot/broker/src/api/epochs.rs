//! OffsetForLeaderEpoch (KIP-101, KIP-279): where an epoch ends in the leader's log.
//! Followers use it to find where their log parts from the leader's; consumers use it
//! (KIP-320) to detect that the log they read was truncated under them after a leader
//! change.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use strata_authz::{Operation, ResourceType};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, authz, encode_response, ready};
use crate::broker::Broker;

pub(super) fn handle(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: OffsetForLeaderEpochRequest,
) -> Pending {
    let mut resp = OffsetForLeaderEpochResponse::default();
    // As Kafka's KafkaApis.handleOffsetForLeaderEpochRequest: ClusterAction on the
    // cluster (a follower's right, checked without an audit line) covers every topic;
    // otherwise (KIP-320, consumers) each topic needs Describe, checked before its
    // existence, and a denied topic's partitions answer TOPIC_AUTHORIZATION_FAILED.
    let cluster_action = authz::allowed_with(
        broker,
        &ctx,
        Operation::ClusterAction,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
        false,
    );
    for t in req.topics {
        let mut out = OffsetForLeaderTopicResult::default();
        out.topic = t.topic.clone();
        let allowed =
            cluster_action || authz::topic(broker, &ctx, Operation::Describe, t.topic.0.as_str());
        let state = broker.replicas.topic(t.topic.0.as_str());
        for rp in t.partitions {
            let mut e = EpochEndOffset::default();
            e.partition = rp.partition;
            e.leader_epoch = -1;
            e.end_offset = -1;
            let code = match state.as_ref().and_then(|s| s.partition(rp.partition)) {
                _ if !allowed => ErrorCode::TopicAuthorizationFailed,
                None => broker.replicas.missing_partition_code(
                    state.as_deref(),
                    crate::replicas::TopicRef::Name(t.topic.0.as_str()),
                    rp.partition,
                ),
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
