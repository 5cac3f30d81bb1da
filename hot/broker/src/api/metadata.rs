//! Metadata (with optional auto-creation of topics).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_proto::{ErrorCode, TopicId};

use super::{Pending, RequestContext, encode_response};
use crate::broker::{Broker, TopicState};
use crate::metadata::validate_topic_name;

pub(super) fn handle(broker: Arc<Broker>, ctx: RequestContext, req: MetadataRequest) -> Pending {
    Box::pin(async move {
        let node = broker.node_id();
        let (host, port) = broker.advertised();
        let mut resp = MetadataResponse::default();
        let mut b = MetadataResponseBroker::default();
        b.node_id = BrokerId(node);
        b.host = StrBytes::from_string(host);
        b.port = port as i32;
        resp.brokers = vec![b];
        resp.cluster_id = Some(StrBytes::from_string(broker.cluster_id()));
        resp.controller_id = BrokerId(node);
        resp.cluster_authorized_operations = i32::MIN;

        // v0: an empty list means all topics; v1+: null means all, empty means none.
        let all = match &req.topics {
            None => true,
            Some(t) => t.is_empty() && ctx.version == 0,
        };
        if all {
            resp.topics = broker.topics().iter().map(|t| describe(node, t)).collect();
            return encode_response(&ctx, &resp);
        }
        // Before v4 auto-creation was implied by the broker setting alone.
        let may_create =
            broker.config.auto_create_topics && (ctx.version < 4 || req.allow_auto_topic_creation);
        for rt in req.topics.unwrap_or_default() {
            let by_id = rt.name.is_none() && !rt.topic_id.is_nil();
            let found = match &rt.name {
                Some(n) => broker.topic(n.0.as_str()),
                None => broker.topic_by_id(TopicId(rt.topic_id)),
            };
            let topic = match (found, &rt.name) {
                (Some(t), _) => describe(node, &t),
                (None, Some(name)) => {
                    let name = name.0.to_string();
                    if let Err(e) = validate_topic_name(&name) {
                        error_topic(Some(&name), rt.topic_id, e.error_code())
                    } else if may_create {
                        match auto_create(&broker, &name).await {
                            Ok(t) => describe(node, &t),
                            Err(code) => error_topic(Some(&name), rt.topic_id, code),
                        }
                    } else {
                        error_topic(Some(&name), rt.topic_id, ErrorCode::UnknownTopicOrPartition)
                    }
                }
                (None, None) => error_topic(
                    None,
                    rt.topic_id,
                    if by_id {
                        ErrorCode::UnknownTopicId
                    } else {
                        ErrorCode::InvalidRequest
                    },
                ),
            };
            resp.topics.push(topic);
        }
        encode_response(&ctx, &resp)
    })
}

async fn auto_create(broker: &Broker, name: &str) -> Result<Arc<TopicState>, ErrorCode> {
    let guard = broker.lock_metadata().await;
    if let Some(t) = broker.topic(name) {
        return Ok(t);
    }
    let created = broker
        .store
        .create_topic(name, broker.config.default_partitions, BTreeMap::new())
        .await;
    let applied = broker.apply_metadata(&guard);
    match (created, applied) {
        (Ok(_), Ok(())) => {
            tracing::info!(
                topic = name,
                partitions = broker.config.default_partitions,
                "auto-created topic"
            );
            broker.topic(name).ok_or(ErrorCode::LeaderNotAvailable)
        }
        (Err(e), _) if e.error_code() == ErrorCode::TopicAlreadyExists => {
            broker.topic(name).ok_or(ErrorCode::LeaderNotAvailable)
        }
        (Err(e), _) => Err(e.error_code()),
        (_, Err(e)) => Err(e.code),
    }
}

fn error_topic(name: Option<&str>, id: uuid::Uuid, code: ErrorCode) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.name = name.map(|n| TopicName(StrBytes::from_string(n.to_string())));
    t.topic_id = id;
    t.error_code = code.code();
    t.topic_authorized_operations = i32::MIN;
    t
}

fn describe(node: i32, t: &TopicState) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.name = Some(TopicName(StrBytes::from_string(t.name.to_string())));
    out.topic_id = t.id.0;
    out.is_internal = false;
    out.topic_authorized_operations = i32::MIN;
    out.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut mp = MetadataResponsePartition::default();
            mp.partition_index = p.index;
            mp.leader_id = BrokerId(node);
            mp.leader_epoch = p.leader_epoch();
            mp.replica_nodes = vec![BrokerId(node)];
            mp.isr_nodes = vec![BrokerId(node)];
            mp
        })
        .collect();
    out
}
