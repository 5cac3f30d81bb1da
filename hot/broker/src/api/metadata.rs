//! Metadata: brokers, and every topic's partitions with leader, replicas and ISR, from
//! the controller's metadata (with optional auto-creation of topics).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_controller::{ClusterMetadata, TopicRecord};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, encode_response};
use crate::broker::Broker;
use crate::metadata::validate_topic_name;

pub(super) fn handle(broker: Arc<Broker>, ctx: RequestContext, req: MetadataRequest) -> Pending {
    Box::pin(async move {
        // v0: an empty list means all topics; v1+: null means all, empty means none.
        let all = match &req.topics {
            None => true,
            Some(t) => t.is_empty() && ctx.version == 0,
        };
        // Before v4 auto-creation was implied by the broker setting alone.
        let may_create =
            broker.config.auto_create_topics && (ctx.version < 4 || req.allow_auto_topic_creation);
        let mut topics = Vec::new();
        if all {
            let md = broker.cluster();
            topics = md
                .topics
                .values()
                .map(|t| describe(&broker, &md, t))
                .collect();
        } else {
            for rt in req.topics.unwrap_or_default() {
                let md = broker.cluster();
                let found = match &rt.name {
                    Some(n) => md.topics.get(n.0.as_str()).cloned(),
                    None => md.topic_by_id(strata_proto::TopicId(rt.topic_id)).cloned(),
                };
                let topic = match (found, &rt.name) {
                    (Some(t), _) => describe(&broker, &md, &t),
                    (None, Some(name)) => {
                        let name = name.0.to_string();
                        if let Err(e) = validate_topic_name(&name) {
                            tracing::debug!(error = %e, "metadata for an invalid topic name");
                            error_topic(Some(&name), rt.topic_id, ErrorCode::InvalidTopicException)
                        } else if may_create {
                            match auto_create(&broker, &name).await {
                                Ok(md) => match md.topics.get(&name) {
                                    Some(t) => describe(&broker, &md, t),
                                    None => error_topic(
                                        Some(&name),
                                        rt.topic_id,
                                        ErrorCode::LeaderNotAvailable,
                                    ),
                                },
                                Err(code) => error_topic(Some(&name), rt.topic_id, code),
                            }
                        } else {
                            error_topic(
                                Some(&name),
                                rt.topic_id,
                                ErrorCode::UnknownTopicOrPartition,
                            )
                        }
                    }
                    (None, None) => error_topic(
                        None,
                        rt.topic_id,
                        if rt.topic_id.is_nil() {
                            ErrorCode::InvalidRequest
                        } else {
                            ErrorCode::UnknownTopicId
                        },
                    ),
                };
                topics.push(topic);
            }
        }
        let md = broker.cluster();
        let mut resp = MetadataResponse::default();
        resp.brokers = md
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| {
                let mut mb = MetadataResponseBroker::default();
                mb.node_id = BrokerId(b.id);
                mb.host = StrBytes::from_string(b.host.clone());
                mb.port = b.port as i32;
                mb.rack = b.rack.clone().map(StrBytes::from_string);
                mb
            })
            .collect();
        resp.cluster_id = Some(StrBytes::from_string(md.cluster_id.clone()));
        // Controller voters and brokers share node ids.
        resp.controller_id = BrokerId(md.controller_leader.map_or(-1, |n| n as i32));
        resp.cluster_authorized_operations = i32::MIN;
        resp.topics = topics;
        encode_response(&ctx, &resp)
    })
}

async fn auto_create(broker: &Arc<Broker>, name: &str) -> Result<Arc<ClusterMetadata>, ErrorCode> {
    if broker.cluster().topics.contains_key(name) {
        return Ok(broker.cluster());
    }
    match broker
        .controller()
        .create_topic(name, broker.config.default_partitions, -1, BTreeMap::new())
        .await
    {
        Ok(_) => tracing::info!(
            topic = name,
            partitions = broker.config.default_partitions,
            "auto-created topic"
        ),
        Err(e) if e.error_code() == ErrorCode::TopicAlreadyExists => {}
        Err(e) => return Err(e.error_code()),
    }
    broker.refresh_and_apply().await.map_err(|e| e.code)?;
    Ok(broker.cluster())
}

fn error_topic(name: Option<&str>, id: uuid::Uuid, code: ErrorCode) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.name = name.map(|n| TopicName(StrBytes::from_string(n.to_string())));
    t.topic_id = id;
    t.error_code = code.code();
    t.topic_authorized_operations = i32::MIN;
    t
}

fn describe(broker: &Broker, md: &ClusterMetadata, t: &TopicRecord) -> MetadataResponseTopic {
    // Replicas of this topic that are offline here (cannot be opened).
    let local = broker.topic(&t.name).filter(|s| s.id == t.id);
    let offline_here = |p: i32| local.as_ref().is_some_and(|s| s.offline.contains_key(&p));
    let node = broker.node_id();
    let mut out = MetadataResponseTopic::default();
    out.name = Some(TopicName(StrBytes::from_string(t.name.clone())));
    out.topic_id = t.id.0;
    // As Kafka marks it: clients leave internal topics out of regex subscriptions.
    out.is_internal = crate::metadata::is_internal_topic(&t.name);
    out.topic_authorized_operations = i32::MIN;
    out.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut mp = MetadataResponsePartition::default();
            mp.partition_index = p.partition;
            mp.leader_id = BrokerId(p.leader);
            mp.leader_epoch = p.leader_epoch;
            mp.replica_nodes = p.replicas.iter().map(|r| BrokerId(*r)).collect();
            mp.isr_nodes = p.isr.iter().map(|r| BrokerId(*r)).collect();
            mp.offline_replicas = p
                .replicas
                .iter()
                .filter(|r| !md.is_live(**r) || (**r == node && offline_here(p.partition)))
                .map(|r| BrokerId(*r))
                .collect();
            if p.leader < 0 {
                // No live in-sync replica: the partition is offline until one returns.
                mp.error_code = ErrorCode::LeaderNotAvailable.code();
            } else if p.leader == node && offline_here(p.partition) {
                // Led here, but its replica here cannot be opened (Kafka's answer for a
                // replica on a failed log directory).
                mp.error_code = ErrorCode::KafkaStorageError.code();
            }
            mp
        })
        .collect();
    out
}
