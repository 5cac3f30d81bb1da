//! Confluent REST Proxy v3 admin, read side, in Confluent's JSON shapes: a cluster's
//! brokers, topics, a topic's partitions and configs, consumer groups, their members
//! and assignments, and their lag per partition and in summary. Links to related resources are
//! paths on this gateway (`{"related": "/v3/clusters/..."}`), and every resource names
//! itself in `metadata.self` with its Confluent resource name in
//! `metadata.resource_name` (`crn:///kafka=C/topic=T`).
//!
//! Authorization as Kafka's: a topic is listed and described with Describe on it, its
//! configs read with DescribeConfigs; a group with Describe on the group, and its lag
//! only for topics the caller may describe. Brokers are every caller's, as in Metadata.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use strata_authz::{Operation, ResourceType};
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult};
use crate::service::{GroupInfo, PartitionInfo, TopicInfo};
use crate::{Shared, acl, util, v2};

const JSON: &str = "application/json";

/// A link to a related resource.
#[derive(Debug, Serialize, ToSchema)]
pub struct Related {
    pub related: String,
}

/// A resource's own address and Confluent resource name.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResourceMetadata {
    #[serde(rename = "self")]
    pub self_: String,
    pub resource_name: String,
}

/// A list's own address (Confluent's lists are never paged here).
#[derive(Debug, Serialize, ToSchema)]
pub struct ListMetadata {
    #[serde(rename = "self")]
    pub self_: String,
    pub next: Option<String>,
}

/// A topic (`KafkaTopic`).
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub topic_name: String,
    pub is_internal: bool,
    pub replication_factor: i32,
    pub partitions_count: i32,
    pub partitions: Related,
    pub configs: Related,
    pub partition_reassignments: Related,
}

/// The topics (`KafkaTopicList`).
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicListV3 {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<TopicV3>,
}

/// A partition (`KafkaPartition`).
#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub topic_name: String,
    pub partition_id: i32,
    /// The leader's replica; `null` when the partition has no leader.
    pub leader: Option<Related>,
    pub replicas: Related,
    pub reassignment: Related,
}

/// A topic's partitions (`KafkaPartitionList`).
#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionListV3 {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<PartitionV3>,
}

/// A topic config (`KafkaTopicConfig`).
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicConfigV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub topic_name: String,
    pub name: String,
    pub value: Option<String>,
    pub is_default: bool,
    pub is_read_only: bool,
    pub is_sensitive: bool,
    /// DYNAMIC_TOPIC_CONFIG for a value set on the topic, DEFAULT_CONFIG otherwise.
    pub source: String,
    pub synonyms: Vec<String>,
}

/// A topic's configs (`KafkaTopicConfigList`).
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicConfigListV3 {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<TopicConfigV3>,
}

/// 404 for another cluster's id.
pub(crate) fn check_cluster(s: &Shared, cluster: &str) -> ApiResult<()> {
    if cluster != s.config.cluster_id {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            error::CLUSTER_NOT_FOUND,
            format!(
                "Cluster '{cluster}' not found (this is '{}').",
                s.config.cluster_id
            ),
        ));
    }
    Ok(())
}

fn related(path: String) -> Related {
    Related { related: path }
}

pub(crate) fn topic_path(cluster: &str, topic: &str) -> String {
    format!("/v3/clusters/{cluster}/topics/{topic}")
}

pub(crate) fn list_metadata(path: String) -> ListMetadata {
    ListMetadata {
        self_: path,
        next: None,
    }
}

pub(crate) fn topic_json(cluster: &str, t: &TopicInfo) -> TopicV3 {
    let replication_factor = t
        .partitions
        .iter()
        .map(|p| p.replicas.len() as i32)
        .min()
        .unwrap_or(0);
    topic_v3(
        cluster,
        &t.name,
        replication_factor,
        t.partitions.len() as i32,
    )
}

/// A topic of `partitions_count` partitions of `replication_factor` replicas.
pub(crate) fn topic_v3(
    cluster: &str,
    name: &str,
    replication_factor: i32,
    partitions_count: i32,
) -> TopicV3 {
    let base = topic_path(cluster, name);
    TopicV3 {
        kind: "KafkaTopic".into(),
        metadata: ResourceMetadata {
            self_: base.clone(),
            resource_name: format!("crn:///kafka={cluster}/topic={name}"),
        },
        cluster_id: cluster.to_string(),
        topic_name: name.to_string(),
        is_internal: name.starts_with("__"),
        replication_factor,
        partitions_count,
        partitions: related(format!("{base}/partitions")),
        configs: related(format!("{base}/configs")),
        partition_reassignments: related(format!("{base}/partitions/-/reassignment")),
    }
}

fn partition_json(cluster: &str, topic: &str, p: &PartitionInfo) -> PartitionV3 {
    let base = format!("{}/partitions/{}", topic_path(cluster, topic), p.partition);
    PartitionV3 {
        kind: "KafkaPartition".into(),
        metadata: ResourceMetadata {
            self_: base.clone(),
            resource_name: format!(
                "crn:///kafka={cluster}/topic={topic}/partition={}",
                p.partition
            ),
        },
        cluster_id: cluster.to_string(),
        topic_name: topic.to_string(),
        partition_id: p.partition,
        leader: (p.leader >= 0).then(|| related(format!("{base}/replicas/{}", p.leader))),
        replicas: related(format!("{base}/replicas")),
        reassignment: related(format!("{base}/reassignment")),
    }
}

/// The topics the caller may describe.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/topics", tag = "v3",
    params(("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)")),
    responses(
        (status = 200, description = "The topics", body = TopicListV3, content_type = "application/json"),
        (status = 404, description = "Unknown cluster (40404)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn list_topics(
    State(s): State<Shared>,
    caller: Caller,
    Path(cluster): Path<String>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let mut names = s.service.list_topics().await?;
    names.retain(|t| acl::may_describe(&s, &caller, t));
    names.sort();
    let mut data = Vec::with_capacity(names.len());
    for name in names {
        // A topic deleted between the list and its description is left out.
        match s.service.describe_topic(&name).await {
            Ok(t) => data.push(topic_json(&cluster, &t)),
            Err(e) if e.code == crate::service::codes::UNKNOWN_TOPIC_OR_PARTITION => {}
            Err(e) => return Err(e.into()),
        }
    }
    let body = TopicListV3 {
        kind: "KafkaTopicList".into(),
        metadata: list_metadata(format!("/v3/clusters/{cluster}/topics")),
        data,
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}

/// One topic.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/topics/{topic}", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
    ),
    responses(
        (status = 200, description = "The topic", body = TopicV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the topic (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster or topic", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn get_topic(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic)): Path<(String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    acl::topic(&s, &caller, Operation::Describe, &topic)?;
    let t = v2::describe(&s, &topic).await?;
    Ok(util::json_response(
        StatusCode::OK,
        JSON,
        &topic_json(&cluster, &t),
    ))
}

/// A topic's partitions.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/topics/{topic}/partitions", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
    ),
    responses(
        (status = 200, description = "The partitions", body = PartitionListV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the topic (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster or topic", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn list_partitions(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic)): Path<(String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    acl::topic(&s, &caller, Operation::Describe, &topic)?;
    let t = v2::describe(&s, &topic).await?;
    let body = PartitionListV3 {
        kind: "KafkaPartitionList".into(),
        metadata: list_metadata(format!("{}/partitions", topic_path(&cluster, &topic))),
        data: t
            .partitions
            .iter()
            .map(|p| partition_json(&cluster, &topic, p))
            .collect(),
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}

/// One partition.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/topics/{topic}/partitions/{partition}", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
        ("partition" = String, Path, description = "Partition id"),
    ),
    responses(
        (status = 200, description = "The partition", body = PartitionV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the topic (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster, topic or partition", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn get_partition(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic, partition)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    acl::topic(&s, &caller, Operation::Describe, &topic)?;
    let index = v2::parse_partition(&topic, &partition)?;
    let t = v2::describe(&s, &topic).await?;
    let p = t
        .partitions
        .iter()
        .find(|p| p.partition == index)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                error::PARTITION_NOT_FOUND,
                format!("Partition '{index}' of topic '{topic}' not found."),
            )
        })?;
    Ok(util::json_response(
        StatusCode::OK,
        JSON,
        &partition_json(&cluster, &topic, p),
    ))
}

/// A topic's configs, every key with its value; `is_default` where the value is the
/// default's.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/topics/{topic}/configs", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
    ),
    responses(
        (status = 200, description = "The configs", body = TopicConfigListV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the topic's configs (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster or topic", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn list_topic_configs(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic)): Path<(String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    acl::topic_configs(&s, &caller, Operation::DescribeConfigs, &topic)?;
    let t = v2::describe(&s, &topic).await?;
    let body = TopicConfigListV3 {
        kind: "KafkaTopicConfigList".into(),
        metadata: list_metadata(format!("{}/configs", topic_path(&cluster, &topic))),
        data: t
            .configs
            .iter()
            .map(|(name, value)| config_json(&cluster, &topic, name, value))
            .collect(),
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}

/// A topic's config `name` of value `value`; `is_default` where the value is the
/// default's.
pub(crate) fn config_json(cluster: &str, topic: &str, name: &str, value: &str) -> TopicConfigV3 {
    let default = strata_proto::config::DEFAULTS
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| *v);
    let is_default = default == Some(value);
    TopicConfigV3 {
        kind: "KafkaTopicConfig".into(),
        metadata: ResourceMetadata {
            self_: format!("{}/configs/{name}", topic_path(cluster, topic)),
            resource_name: format!("crn:///kafka={cluster}/topic={topic}/config={name}"),
        },
        cluster_id: cluster.to_string(),
        topic_name: topic.to_string(),
        name: name.to_string(),
        value: Some(value.to_string()),
        is_default,
        is_read_only: false,
        is_sensitive: false,
        source: if is_default {
            "DEFAULT_CONFIG".into()
        } else {
            "DYNAMIC_TOPIC_CONFIG".into()
        },
        synonyms: Vec::new(),
    }
}

/// A broker (`KafkaBroker`).
#[derive(Debug, Serialize, ToSchema)]
pub struct BrokerV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub broker_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub configs: Related,
    pub partition_replicas: Related,
}

/// The brokers (`KafkaBrokerList`).
#[derive(Debug, Serialize, ToSchema)]
pub struct BrokerListV3 {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<BrokerV3>,
}

/// A consumer group (`KafkaConsumerGroup`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsumerGroupV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    /// A group with no members' protocol (offsets committed by an admin or an assign()
    /// consumer).
    pub is_simple: bool,
    pub partition_assignor: String,
    /// STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY or DEAD.
    pub state: String,
    pub consumers: Related,
    pub lag_summary: Related,
}

/// The consumer groups (`KafkaConsumerGroupList`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsumerGroupListV3 {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<ConsumerGroupV3>,
}

/// A member of a group (`KafkaConsumer`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsumerV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub consumer_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub assignments: Vec<AssignmentV3>,
}

/// A partition assigned to a member.
#[derive(Debug, Serialize, ToSchema)]
pub struct AssignmentV3 {
    pub topic_name: String,
    pub partition_id: i32,
}

/// A group's members (`KafkaConsumerList`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsumerListV3 {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<ConsumerV3>,
}

/// One partition's lag (`KafkaConsumerLag`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsumerLagV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub topic_name: String,
    pub partition_id: i32,
    pub current_offset: i64,
    pub log_end_offset: i64,
    pub lag: i64,
    /// The member the partition is assigned to; empty when none is.
    pub consumer_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
}

/// A group's lag per partition (`KafkaConsumerLagList`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsumerLagListV3 {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<ConsumerLagV3>,
}

/// A group's lag in one object (`KafkaConsumerGroupLagSummary`).
#[derive(Debug, Serialize, ToSchema)]
pub struct LagSummaryV3 {
    pub kind: String,
    pub metadata: ResourceMetadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub max_lag_consumer_id: String,
    pub max_lag_instance_id: Option<String>,
    pub max_lag_client_id: String,
    pub max_lag_topic_name: String,
    pub max_lag_partition_id: i32,
    pub max_lag: i64,
    pub total_lag: i64,
    /// Null when no member is assigned the most lagging partition (a group without
    /// members), as Confluent's: there is no consumer to link to.
    pub max_lag_consumer: Option<Related>,
    /// Null when the group has committed no offset the caller may see.
    pub max_lag_partition: Option<Related>,
}

/// The brokers (every caller's, as Kafka's Metadata).
#[utoipa::path(get, path = "/v3/clusters/{cluster}/brokers", tag = "v3",
    params(("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)")),
    responses(
        (status = 200, description = "The brokers", body = BrokerListV3, content_type = "application/json"),
        (status = 404, description = "Unknown cluster (40404)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn list_brokers(
    State(s): State<Shared>,
    Path(cluster): Path<String>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let brokers = s.service.list_brokers().await?;
    let base = format!("/v3/clusters/{cluster}/brokers");
    let body = BrokerListV3 {
        kind: "KafkaBrokerList".into(),
        metadata: list_metadata(base.clone()),
        data: brokers
            .into_iter()
            .map(|b| BrokerV3 {
                kind: "KafkaBroker".into(),
                metadata: ResourceMetadata {
                    self_: format!("{base}/{}", b.id),
                    resource_name: format!("crn:///kafka={cluster}/broker={}", b.id),
                },
                cluster_id: cluster.clone(),
                broker_id: b.id,
                host: b.host,
                port: b.port,
                rack: None,
                configs: related(format!("{base}/{}/configs", b.id)),
                partition_replicas: related(format!("{base}/{}/partition-replicas", b.id)),
            })
            .collect(),
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}

fn group_path(cluster: &str, group: &str) -> String {
    format!("/v3/clusters/{cluster}/consumer-groups/{group}")
}

fn group_json(cluster: &str, g: &GroupInfo) -> ConsumerGroupV3 {
    let base = group_path(cluster, &g.group);
    ConsumerGroupV3 {
        kind: "KafkaConsumerGroup".into(),
        metadata: ResourceMetadata {
            self_: base.clone(),
            resource_name: format!("crn:///kafka={cluster}/consumer-group={}", g.group),
        },
        cluster_id: cluster.to_string(),
        consumer_group_id: g.group.clone(),
        is_simple: g.protocol_type.is_empty(),
        partition_assignor: g.protocol.clone(),
        state: g.state.to_ascii_uppercase().replace(' ', "_"),
        consumers: related(format!("{base}/consumers")),
        lag_summary: related(format!("{base}/lag-summary")),
    }
}

/// The group, after Describe on it, or 404.
async fn find_group(s: &Shared, caller: &Caller, group: &str) -> ApiResult<GroupInfo> {
    acl::group(s, caller, Operation::Describe, group)?;
    s.service
        .list_groups()
        .await?
        .into_iter()
        .find(|g| g.group == group)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                error::GROUP_NOT_FOUND,
                format!("Consumer group '{group}' not found."),
            )
        })
}

/// The consumer groups the caller may describe.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/consumer-groups", tag = "v3",
    params(("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)")),
    responses(
        (status = 200, description = "The groups", body = ConsumerGroupListV3, content_type = "application/json"),
        (status = 404, description = "Unknown cluster (40404)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn list_groups(
    State(s): State<Shared>,
    caller: Caller,
    Path(cluster): Path<String>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let groups = s.service.list_groups().await?;
    let body = ConsumerGroupListV3 {
        kind: "KafkaConsumerGroupList".into(),
        metadata: list_metadata(format!("/v3/clusters/{cluster}/consumer-groups")),
        data: groups
            .iter()
            .filter(|g| {
                acl::allowed(
                    &s,
                    &caller,
                    Operation::Describe,
                    ResourceType::Group,
                    &g.group,
                    false,
                )
            })
            .map(|g| group_json(&cluster, g))
            .collect(),
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}

/// One consumer group.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/consumer-groups/{group}", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("group" = String, Path, description = "Consumer group id"),
    ),
    responses(
        (status = 200, description = "The group", body = ConsumerGroupV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the group (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or group (40406)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn get_group(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, group)): Path<(String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let g = find_group(&s, &caller, &group).await?;
    Ok(util::json_response(
        StatusCode::OK,
        JSON,
        &group_json(&cluster, &g),
    ))
}

/// A group's members and their assignments.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/consumer-groups/{group}/consumers", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("group" = String, Path, description = "Consumer group id"),
    ),
    responses(
        (status = 200, description = "The members", body = ConsumerListV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the group (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or group (40406)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn list_consumers(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, group)): Path<(String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let g = find_group(&s, &caller, &group).await?;
    let base = format!("{}/consumers", group_path(&cluster, &group));
    let body = ConsumerListV3 {
        kind: "KafkaConsumerList".into(),
        metadata: list_metadata(base.clone()),
        data: g
            .members
            .iter()
            .map(|m| ConsumerV3 {
                kind: "KafkaConsumer".into(),
                metadata: ResourceMetadata {
                    self_: format!("{base}/{}", m.member_id),
                    resource_name: format!(
                        "crn:///kafka={cluster}/consumer-group={group}/consumer={}",
                        m.member_id
                    ),
                },
                cluster_id: cluster.clone(),
                consumer_group_id: group.clone(),
                consumer_id: m.member_id.clone(),
                instance_id: None,
                client_id: m.client_id.clone(),
                assignments: m
                    .assignment
                    .iter()
                    .map(|a| AssignmentV3 {
                        topic_name: a.topic.clone(),
                        partition_id: a.partition,
                    })
                    .collect(),
            })
            .collect(),
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}

/// Each partition's lag, with the member it is assigned to: committed partitions of
/// topics the caller may describe.
async fn lags(
    s: &Shared,
    caller: &Caller,
    cluster: &str,
    group: &str,
) -> ApiResult<Vec<ConsumerLagV3>> {
    let g = find_group(s, caller, group).await?;
    let mut offsets = s.service.group_offsets(group).await?;
    offsets.retain(|o| acl::may_describe(s, caller, &o.topic));
    offsets.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let base = format!("{}/lags", group_path(cluster, group));
    Ok(offsets
        .into_iter()
        .map(|o| {
            let member = g.members.iter().find(|m| {
                m.assignment
                    .iter()
                    .any(|a| a.topic == o.topic && a.partition == o.partition)
            });
            ConsumerLagV3 {
                kind: "KafkaConsumerLag".into(),
                metadata: ResourceMetadata {
                    self_: format!("{base}/{}/partitions/{}", o.topic, o.partition),
                    resource_name: format!(
                        "crn:///kafka={cluster}/consumer-group={group}/lag={}/partition={}",
                        o.topic, o.partition
                    ),
                },
                cluster_id: cluster.to_string(),
                consumer_group_id: group.to_string(),
                topic_name: o.topic.clone(),
                partition_id: o.partition,
                current_offset: o.committed,
                log_end_offset: o.end,
                lag: (o.end - o.committed).max(0),
                consumer_id: member.map(|m| m.member_id.clone()).unwrap_or_default(),
                instance_id: None,
                client_id: member.map(|m| m.client_id.clone()).unwrap_or_default(),
            }
        })
        .collect())
}

/// A group's lag per partition (committed offset against the high watermark).
#[utoipa::path(get, path = "/v3/clusters/{cluster}/consumer-groups/{group}/lags", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("group" = String, Path, description = "Consumer group id"),
    ),
    responses(
        (status = 200, description = "The lags", body = ConsumerLagListV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the group (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or group (40406)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn list_lags(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, group)): Path<(String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let data = lags(&s, &caller, &cluster, &group).await?;
    let body = ConsumerLagListV3 {
        kind: "KafkaConsumerLagList".into(),
        metadata: list_metadata(format!("{}/lags", group_path(&cluster, &group))),
        data,
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}

/// A group's total lag and its most lagging partition.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/consumer-groups/{group}/lag-summary", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("group" = String, Path, description = "Consumer group id"),
    ),
    responses(
        (status = 200, description = "The lag summary", body = LagSummaryV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the group (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or group (40406)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn lag_summary(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, group)): Path<(String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let data = lags(&s, &caller, &cluster, &group).await?;
    let total: i64 = data.iter().map(|l| l.lag).sum();
    // The first of the most lagging (in topic, partition order).
    let max = data
        .iter()
        .fold(None::<&ConsumerLagV3>, |best, l| match best {
            Some(b) if b.lag >= l.lag => Some(b),
            _ => Some(l),
        });
    let base = group_path(&cluster, &group);
    let body = LagSummaryV3 {
        kind: "KafkaConsumerGroupLagSummary".into(),
        metadata: ResourceMetadata {
            self_: format!("{base}/lag-summary"),
            resource_name: format!("crn:///kafka={cluster}/consumer-group={group}/lag-summary"),
        },
        cluster_id: cluster.clone(),
        consumer_group_id: group.clone(),
        max_lag_consumer_id: max.map(|l| l.consumer_id.clone()).unwrap_or_default(),
        max_lag_instance_id: None,
        max_lag_client_id: max.map(|l| l.client_id.clone()).unwrap_or_default(),
        max_lag_topic_name: max.map(|l| l.topic_name.clone()).unwrap_or_default(),
        max_lag_partition_id: max.map_or(-1, |l| l.partition_id),
        max_lag: max.map_or(0, |l| l.lag),
        total_lag: total,
        max_lag_consumer: max
            .filter(|l| !l.consumer_id.is_empty())
            .map(|l| related(format!("{base}/consumers/{}", l.consumer_id))),
        max_lag_partition: max.map(|l| {
            related(format!(
                "/v3/clusters/{cluster}/topics/{}/partitions/{}",
                l.topic_name, l.partition_id
            ))
        }),
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}
