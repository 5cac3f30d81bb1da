//! Confluent REST Proxy v3 admin, read side, in Confluent's JSON shapes: a cluster's
//! topics, a topic, its partitions, and its configs. Links to related resources are
//! paths on this gateway (`{"related": "/v3/clusters/..."}`), and every resource names
//! itself in `metadata.self` with its Confluent resource name in
//! `metadata.resource_name` (`crn:///kafka=C/topic=T`).
//!
//! Authorization as Kafka's: a topic is listed and described with Describe on it, its
//! configs read with DescribeConfigs.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use strata_authz::{Operation, ResourceType};
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult};
use crate::service::{PartitionInfo, TopicInfo};
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

fn topic_path(cluster: &str, topic: &str) -> String {
    format!("/v3/clusters/{cluster}/topics/{topic}")
}

fn list_metadata(path: String) -> ListMetadata {
    ListMetadata {
        self_: path,
        next: None,
    }
}

fn topic_json(cluster: &str, t: &TopicInfo) -> TopicV3 {
    let base = topic_path(cluster, &t.name);
    TopicV3 {
        kind: "KafkaTopic".into(),
        metadata: ResourceMetadata {
            self_: base.clone(),
            resource_name: format!("crn:///kafka={cluster}/topic={}", t.name),
        },
        cluster_id: cluster.to_string(),
        topic_name: t.name.clone(),
        is_internal: t.name.starts_with("__"),
        replication_factor: t
            .partitions
            .iter()
            .map(|p| p.replicas.len() as i32)
            .min()
            .unwrap_or(0),
        partitions_count: t.partitions.len() as i32,
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
    if !acl::allowed(
        &s,
        &caller,
        Operation::DescribeConfigs,
        ResourceType::Topic,
        &topic,
        true,
    ) {
        return Err(acl::forbidden(format!(
            "Not authorized to describe the configs of topic '{topic}'."
        )));
    }
    let t = v2::describe(&s, &topic).await?;
    let base = format!("{}/configs", topic_path(&cluster, &topic));
    let data = t
        .configs
        .iter()
        .map(|(name, value)| {
            let default = strata_proto::config::DEFAULTS
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| *v);
            let is_default = default == Some(value.as_str());
            TopicConfigV3 {
                kind: "KafkaTopicConfig".into(),
                metadata: ResourceMetadata {
                    self_: format!("{base}/{name}"),
                    resource_name: format!("crn:///kafka={cluster}/topic={topic}/config={name}"),
                },
                cluster_id: cluster.clone(),
                topic_name: topic.clone(),
                name: name.clone(),
                value: Some(value.clone()),
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
        })
        .collect();
    let body = TopicConfigListV3 {
        kind: "KafkaTopicConfigList".into(),
        metadata: list_metadata(base),
        data,
    };
    Ok(util::json_response(StatusCode::OK, JSON, &body))
}
