//! ElectLeaders (KIP-183, KIP-460): preferred and unclean leader elections, carried out by
//! the controller.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_authz::Operation;
use strata_controller::{ElectionOutcome, ElectionType};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, authz, encode_response, msg};
use crate::broker::Broker;

/// ElectLeaders: Alter on the cluster, as Kafka. Preferred (0) moves each partition's
/// leadership to its first replica when that one is in sync and alive; unclean (1) gives
/// a partition without a leader one from any live replica, even out of sync (records it
/// lacks are lost, as the operator asked). The partitions named, or every partition
/// (then only those where an election was needed are answered). Each partition answers
/// its own code: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
/// ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION.
pub(super) fn elect_leaders(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: ElectLeadersRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = ElectLeadersResponse::default();
        let asked: Option<Vec<(String, i32)>> = req.topic_partitions.as_ref().map(|ts| {
            ts.iter()
                .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.0.to_string(), p)))
                .collect()
        });
        let fail_all = |resp: &mut ElectLeadersResponse, code: ErrorCode, message: String| {
            resp.error_code = code.code();
            let mut by_topic: BTreeMap<&str, Vec<PartitionResult>> = BTreeMap::new();
            for (t, p) in asked.iter().flatten() {
                let mut r = PartitionResult::default();
                r.partition_id = *p;
                r.error_code = code.code();
                r.error_message = msg(message.clone());
                by_topic.entry(t.as_str()).or_default().push(r);
            }
            resp.replica_election_results = results(by_topic);
        };
        if let Some(code) = authz::deny_cluster(&broker, &ctx, Operation::Alter) {
            fail_all(&mut resp, code, "not authorized to elect leaders".into());
            return encode_response(&ctx, &resp);
        }
        let election = match req.election_type {
            0 => ElectionType::Preferred,
            1 => ElectionType::Unclean,
            other => {
                fail_all(
                    &mut resp,
                    ErrorCode::InvalidRequest,
                    format!("election type {other} is neither preferred (0) nor unclean (1)"),
                );
                return encode_response(&ctx, &resp);
            }
        };
        let all = asked.is_none();
        match broker
            .controller()
            .elect_leaders(election, asked.clone())
            .await
        {
            Ok(outcomes) => {
                if outcomes.iter().any(|o| o.result.is_ok())
                    && let Err(e) = broker.replicas.refresh_and_apply().await
                {
                    tracing::warn!(error = %e.message, "cannot refresh metadata after an election");
                }
                let mut by_topic: BTreeMap<&str, Vec<PartitionResult>> = BTreeMap::new();
                for o in &outcomes {
                    if all && matches!(o.result, Err(strata_controller::ElectionError::NotNeeded)) {
                        continue;
                    }
                    by_topic
                        .entry(o.topic.as_str())
                        .or_default()
                        .push(result_of(o));
                }
                resp.replica_election_results = results(by_topic);
            }
            Err(e) => {
                let e = crate::error::ApiError::from(e);
                fail_all(&mut resp, e.code, e.message);
            }
        }
        encode_response(&ctx, &resp)
    })
}

fn result_of(o: &ElectionOutcome) -> PartitionResult {
    let mut r = PartitionResult::default();
    r.partition_id = o.partition;
    if let Err(e) = &o.result {
        let code = e.error_code();
        r.error_code = code.code();
        r.error_message = msg(match e {
            strata_controller::ElectionError::NotNeeded => {
                "the preferred replica already leads, or the partition has a leader".to_string()
            }
            strata_controller::ElectionError::PreferredLeaderNotAvailable => {
                "the preferred replica is not in sync or not alive".to_string()
            }
            strata_controller::ElectionError::EligibleLeadersNotAvailable => {
                "no replica of the partition is alive".to_string()
            }
            strata_controller::ElectionError::UnknownPartition => "no such partition".to_string(),
        });
    }
    r
}

fn results(by_topic: BTreeMap<&str, Vec<PartitionResult>>) -> Vec<ReplicaElectionResult> {
    by_topic
        .into_iter()
        .map(|(t, partitions)| {
            let mut r = ReplicaElectionResult::default();
            r.topic = TopicName(StrBytes::from_string(t.to_string()));
            r.partition_result = partitions;
            r
        })
        .collect()
}
