//! Metadata: brokers, and every topic's partitions with leader, replicas and ISR, from
//! the controller's metadata (with optional auto-creation of topics).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_authz::{Operation, ResourceType};
use strata_controller::{ClusterMetadata, TopicRecord};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, authz, encode_response};
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
        // As Kafka's KafkaApis.handleTopicMetadataRequest: every topic answered needs
        // Describe. Asked for all topics, those without it are silently left out; named,
        // they answer TOPIC_AUTHORIZATION_FAILED whether they exist or not (checked
        // before existence: no leak). `true` in the pair: the topic passed the checks
        // (its authorized operations are reported when asked for).
        let mut topics: Vec<(MetadataResponseTopic, bool)> = Vec::new();
        if all {
            let md = broker.cluster();
            topics = md
                .topics
                .values()
                .filter(|t| {
                    authz::allowed_with(
                        &broker,
                        &ctx,
                        Operation::Describe,
                        ResourceType::Topic,
                        &t.name,
                        false,
                    )
                })
                .map(|t| (describe(&broker, &md, t), true))
                .collect();
        } else {
            for rt in req.topics.unwrap_or_default() {
                let md = broker.cluster();
                let found = match &rt.name {
                    Some(n) => md.topic(n.0.as_str()).cloned(),
                    None => md.topic_by_id(strata_proto::TopicId(rt.topic_id)).cloned(),
                };
                let name = match (&found, &rt.name) {
                    (_, Some(n)) => Some(n.0.to_string()),
                    (Some(t), None) => Some(t.name.clone()),
                    (None, None) => None,
                };
                if let Some(name) = &name
                    && !authz::topic(&broker, &ctx, Operation::Describe, name)
                {
                    // By name: no id (and nothing else) about it. By id: the id is no
                    // secret (Kafka answers it back, without the name).
                    let (shown, id) = match &rt.name {
                        Some(_) => (Some(name.as_str()), uuid::Uuid::nil()),
                        None => (None, rt.topic_id),
                    };
                    topics.push((
                        error_topic(shown, id, ErrorCode::TopicAuthorizationFailed),
                        false,
                    ));
                    continue;
                }
                let topic = match (found, &rt.name) {
                    (Some(t), _) => describe(&broker, &md, &t),
                    (None, Some(name)) => {
                        let name = name.0.to_string();
                        if may_create && !may_create_topic(&broker, &ctx, &name) {
                            // Kafka: an unknown topic that would be auto-created, without
                            // Create on the cluster or on the topic, answers
                            // TOPIC_AUTHORIZATION_FAILED (and is not created).
                            topics.push((
                                error_topic(
                                    Some(&name),
                                    uuid::Uuid::nil(),
                                    ErrorCode::TopicAuthorizationFailed,
                                ),
                                false,
                            ));
                            continue;
                        }
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
                topics.push((topic, true));
            }
        }
        // KIP-430: the operations the principal may do on each topic answered, when asked
        // (v8+).
        let topics = topics
            .into_iter()
            .map(|(mut t, passed)| {
                if passed
                    && ctx.version >= 8
                    && req.include_topic_authorized_operations
                    && let Some(name) = &t.name
                {
                    t.topic_authorized_operations =
                        authorized_operations(&broker, &ctx, ResourceType::Topic, name);
                }
                t
            })
            .collect();
        let md = broker.cluster();
        let mut resp = MetadataResponse::default();
        resp.brokers = md
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                // The addresses of the listener the client came in on; a broker without
                // that listener is left out (Kafka's advertised.listeners).
                let (host, port) = b.endpoint(ctx.listener.name())?;
                let mut mb = MetadataResponseBroker::default();
                mb.node_id = BrokerId(b.id);
                mb.host = StrBytes::from_string(host.to_string());
                mb.port = i32::from(port);
                mb.rack = b.rack.clone().map(StrBytes::from_string);
                Some(mb)
            })
            .collect();
        resp.cluster_id = Some(StrBytes::from_string(md.cluster_id.clone()));
        // Controller voters and brokers share node ids.
        resp.controller_id = BrokerId(md.controller_leader.map_or(-1, |n| n as i32));
        resp.cluster_authorized_operations = i32::MIN;
        // v8-10 may ask for the cluster's too (later versions ask DescribeCluster): 0
        // without Describe on the cluster, as Kafka answers.
        if (8..=10).contains(&ctx.version) && req.include_cluster_authorized_operations {
            resp.cluster_authorized_operations = cluster_authorized_operations(&broker, &ctx);
        }
        resp.topics = topics;
        encode_response(&ctx, &resp)
    })
}

/// Whether the principal may have `name` auto-created: Create on the cluster (checked
/// without an audit line, as Kafka) or Create on the topic.
fn may_create_topic(broker: &Broker, ctx: &RequestContext, name: &str) -> bool {
    authz::allowed_with(
        broker,
        ctx,
        Operation::Create,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
        false,
    ) || authz::topic(broker, ctx, Operation::Create, name)
}

/// KIP-430's bit field of the operations the principal may do on a resource: bit `code`
/// set for each operation Kafka lists for its type (`AclEntry.supportedOperations`,
/// without All) that is allowed; every one with the authorizer off. Not audited.
pub(super) fn authorized_operations(
    broker: &Broker,
    ctx: &RequestContext,
    resource_type: ResourceType,
    name: &str,
) -> i32 {
    resource_type
        .supported_operations()
        .iter()
        .filter(|op| **op != Operation::All)
        .filter(|op| authz::allowed_with(broker, ctx, **op, resource_type, name, false))
        .fold(0, |bits, op| bits | (1 << op.code()))
}

/// The cluster's authorized operations, as Kafka answers them: 0 without Describe on
/// the cluster.
pub(super) fn cluster_authorized_operations(broker: &Broker, ctx: &RequestContext) -> i32 {
    if authz::deny_cluster(broker, ctx, Operation::Describe).is_some() {
        0
    } else {
        authorized_operations(
            broker,
            ctx,
            ResourceType::Cluster,
            strata_authz::CLUSTER_NAME,
        )
    }
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
    broker
        .replicas
        .refresh_and_apply()
        .await
        .map_err(|e| e.code)?;
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
    let local = broker.replicas.topic(&t.name).filter(|s| s.id == t.id);
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
