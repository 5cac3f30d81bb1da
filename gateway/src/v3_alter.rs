//! Confluent REST Proxy v3 admin, write side: create and delete topics, read one config
//! and change configs (one at a time with PUT and DELETE, several at once with
//! `configs:alter`), in Confluent's JSON shapes.
//!
//! The broker decides: a topic that exists, a partition count, replication factor or
//! config it refuses is 400 with Confluent's bad-request code (40002) and the broker's
//! message; a body that is not a request is 422 before anything reaches the broker.
//! Config changes are incremental (IncrementalAlterConfigs): a config not named keeps
//! its value.
//!
//! Authorization as Kafka's CreateTopics, DeleteTopics, DescribeConfigs and
//! IncrementalAlterConfigs: Create (Delete) on the cluster or on the topic; Describe
//! Configs or AlterConfigs on the topic.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use strata_authz::{Operation, ResourceType};
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult};
use crate::service::{ConfigChange, NewTopicSpec, codes};
use crate::v3_admin::{TopicConfigV3, TopicV3, check_cluster, config_json, topic_json, topic_v3};
use crate::{Shared, acl, util, v2};

/// A config name and value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigValueV3 {
    pub name: String,
    pub value: Option<String>,
}

/// A topic to create (`CreateTopicRequest`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTopicV3 {
    /// 1 to 249 of [a-zA-Z0-9._-]
    pub topic_name: String,
    /// The broker's num.partitions when absent.
    #[schema(minimum = 1)]
    pub partitions_count: Option<i32>,
    /// The broker's default.replication.factor when absent.
    #[schema(minimum = 1)]
    pub replication_factor: Option<i16>,
    /// Topic configs (each with a value).
    #[serde(default)]
    pub configs: Vec<ConfigValueV3>,
    /// Only check that the broker would create it.
    #[serde(default)]
    pub validate_only: bool,
}

/// A config's new value (`UpdateTopicConfigRequest`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateConfigV3 {
    pub value: String,
}

/// One change of `configs:alter`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlterConfigV3 {
    pub name: String,
    /// The value to SET; none for DELETE.
    pub value: Option<String>,
    /// SET (the default) or DELETE (back to the default value).
    pub operation: Option<String>,
}

/// Several config changes, made together (`AlterTopicConfigBatchRequest`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlterConfigsV3 {
    pub data: Vec<AlterConfigV3>,
    #[serde(default)]
    pub validate_only: bool,
}

/// A JSON body of type `T`.
async fn json_body<T: serde::de::DeserializeOwned>(
    s: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<T> {
    util::require_content_type(headers, &[util::JSON])?;
    let bytes = util::read_body(headers, body, s.config.max_body_bytes).await?;
    util::parse_json(&bytes)
}

/// A config name as a topic can have one: printable, at most 255 bytes.
fn check_config_name(name: &str) -> ApiResult<()> {
    if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(ApiError::invalid_field(format!(
            "'{}' is not a config name",
            name.escape_debug()
        )));
    }
    Ok(())
}

/// `operation` on the cluster (unaudited, as Kafka checks it first) or on the topic.
fn cluster_or_topic(
    s: &Shared,
    caller: &Caller,
    operation: Operation,
    topic: &str,
) -> ApiResult<()> {
    let on_cluster = acl::allowed(
        s,
        caller,
        operation,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
        false,
    );
    if on_cluster {
        return Ok(());
    }
    acl::topic(s, caller, operation, topic)
}

/// Creates a topic.
#[utoipa::path(post, path = "/v3/clusters/{cluster}/topics", tag = "v3",
    params(("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)")),
    request_body(content = CreateTopicV3, content_type = "application/json"),
    responses(
        (status = 201, description = "The topic (with validate_only, as it would be)", body = TopicV3, content_type = "application/json"),
        (status = 400, description = "The broker refused it: it exists, or a partition count, replication factor or config it does not take (40002)", body = crate::error::ErrorBody),
        (status = 403, description = "Not authorized to create the topic (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404)", body = crate::error::ErrorBody),
        (status = 415, description = "Not application/json", body = crate::error::ErrorBody),
        (status = 422, description = "Not a topic to create", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn create_topic(
    State(s): State<Shared>,
    caller: Caller,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    let req: CreateTopicV3 = json_body(&s, &headers, body).await?;
    if !util::valid_topic_name(&req.topic_name) {
        return Err(ApiError::invalid_field(
            "topic_name must be 1 to 249 of [a-zA-Z0-9._-], and not '.' or '..'",
        ));
    }
    if req.partitions_count.is_some_and(|n| n < 1) {
        return Err(ApiError::invalid_field(
            "partitions_count must be at least 1",
        ));
    }
    if req.replication_factor.is_some_and(|n| n < 1) {
        return Err(ApiError::invalid_field(
            "replication_factor must be at least 1",
        ));
    }
    let mut configs = Vec::with_capacity(req.configs.len());
    for c in req.configs {
        check_config_name(&c.name)?;
        let Some(value) = c.value else {
            return Err(ApiError::invalid_field(format!(
                "config '{}' needs a value",
                c.name
            )));
        };
        configs.push((c.name, value));
    }
    cluster_or_topic(&s, &caller, Operation::Create, &req.topic_name)?;
    let spec = NewTopicSpec {
        name: req.topic_name,
        partitions: req.partitions_count.unwrap_or(-1),
        replication_factor: req.replication_factor.unwrap_or(-1),
        configs,
        validate_only: req.validate_only,
    };
    s.service.create_topic_with(&spec).await?;
    let topic = if spec.validate_only {
        // Nothing to describe; what was asked for (0 where the broker's default applies).
        topic_v3(
            &cluster,
            &spec.name,
            i32::from(spec.replication_factor.max(0)),
            spec.partitions.max(0),
        )
    } else {
        created(&s, &cluster, &spec.name).await?
    };
    Ok(util::json_response(StatusCode::CREATED, util::JSON, &topic))
}

/// A topic just created, once metadata shows it (within the request timeout).
async fn created(s: &Shared, cluster: &str, name: &str) -> ApiResult<TopicV3> {
    let t0 = Instant::now();
    loop {
        match s.service.describe_topic(name).await {
            Ok(t) if !t.partitions.is_empty() => return Ok(topic_json(cluster, &t)),
            Err(e)
                if e.code != codes::UNKNOWN_TOPIC_OR_PARTITION
                    && e.code != codes::LEADER_NOT_AVAILABLE =>
            {
                return Err(e.into());
            }
            _ if t0.elapsed() > Duration::from_secs(10) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    error::KAFKA_UNAVAILABLE,
                    format!(
                        "Topic '{name}' was created but metadata does not show it yet; GET it again."
                    ),
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Deletes a topic and its records.
#[utoipa::path(delete, path = "/v3/clusters/{cluster}/topics/{topic}", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Not authorized to delete the topic (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or topic (40401)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn delete_topic(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    check_cluster(&s, &cluster)?;
    if !util::valid_topic_name(&topic) {
        return Err(ApiError::topic_not_found(&topic));
    }
    cluster_or_topic(&s, &caller, Operation::Delete, &topic)?;
    s.service.delete_topic(&topic).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One of a topic's configs.
#[utoipa::path(get, path = "/v3/clusters/{cluster}/topics/{topic}/configs/{name}", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
        ("name" = String, Path, description = "Config name"),
    ),
    responses(
        (status = 200, description = "The config", body = TopicConfigV3, content_type = "application/json"),
        (status = 403, description = "Not authorized to describe the topic's configs (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404), topic (40401) or config (40407)", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn get_topic_config(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic, name)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    check_cluster(&s, &cluster)?;
    acl::topic_configs(&s, &caller, Operation::DescribeConfigs, &topic)?;
    let t = v2::describe(&s, &topic).await?;
    let value = t.configs.get(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            error::CONFIG_NOT_FOUND,
            format!("Config '{name}' not found for topic '{topic}'."),
        )
    })?;
    Ok(util::json_response(
        StatusCode::OK,
        util::JSON,
        &config_json(&cluster, &topic, &name, value),
    ))
}

/// Sets one of a topic's configs.
#[utoipa::path(put, path = "/v3/clusters/{cluster}/topics/{topic}/configs/{name}", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
        ("name" = String, Path, description = "Config name"),
    ),
    request_body(content = UpdateConfigV3, content_type = "application/json"),
    responses(
        (status = 204, description = "Set"),
        (status = 400, description = "The broker refused the value or the config (40002)", body = crate::error::ErrorBody),
        (status = 403, description = "Not authorized to alter the topic's configs (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or topic (40401)", body = crate::error::ErrorBody),
        (status = 415, description = "Not application/json", body = crate::error::ErrorBody),
        (status = 422, description = "Not a config value", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn update_topic_config(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    check_cluster(&s, &cluster)?;
    let req: UpdateConfigV3 = json_body(&s, &headers, body).await?;
    let change = ConfigChange {
        name,
        value: Some(req.value),
    };
    alter(&s, &caller, &topic, vec![change], false).await
}

/// Removes a topic's own value of a config: the default applies again.
#[utoipa::path(delete, path = "/v3/clusters/{cluster}/topics/{topic}/configs/{name}", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
        ("name" = String, Path, description = "Config name"),
    ),
    responses(
        (status = 204, description = "Back to the default"),
        (status = 400, description = "The broker refused it (40002)", body = crate::error::ErrorBody),
        (status = 403, description = "Not authorized to alter the topic's configs (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or topic (40401)", body = crate::error::ErrorBody),
        (status = 422, description = "Not a config name", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn reset_topic_config(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic, name)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    check_cluster(&s, &cluster)?;
    let change = ConfigChange { name, value: None };
    alter(&s, &caller, &topic, vec![change], false).await
}

/// Sets and removes several of a topic's configs in one change.
#[utoipa::path(post, path = "/v3/clusters/{cluster}/topics/{topic}/configs:alter", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
    ),
    request_body(content = AlterConfigsV3, content_type = "application/json"),
    responses(
        (status = 204, description = "Changed (with validate_only, would be)"),
        (status = 400, description = "The broker refused a value or a config (40002); none is changed", body = crate::error::ErrorBody),
        (status = 403, description = "Not authorized to alter the topic's configs (40301)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown cluster (40404) or topic (40401)", body = crate::error::ErrorBody),
        (status = 415, description = "Not application/json", body = crate::error::ErrorBody),
        (status = 422, description = "Not a list of changes", body = crate::error::ErrorBody),
        (status = 503, description = "The broker is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn alter_topic_configs(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    check_cluster(&s, &cluster)?;
    let req: AlterConfigsV3 = json_body(&s, &headers, body).await?;
    let mut changes = Vec::with_capacity(req.data.len());
    for c in req.data {
        let op = c.operation.as_deref().unwrap_or("SET");
        let value = if op.eq_ignore_ascii_case("SET") {
            let Some(v) = c.value else {
                return Err(ApiError::invalid_field(format!(
                    "SET of config '{}' needs a value",
                    c.name
                )));
            };
            Some(v)
        } else if op.eq_ignore_ascii_case("DELETE") {
            None
        } else {
            return Err(ApiError::invalid_field(format!(
                "operation must be SET or DELETE, not '{}'",
                op.escape_debug()
            )));
        };
        changes.push(ConfigChange {
            name: c.name,
            value,
        });
    }
    if changes.is_empty() {
        return Err(ApiError::invalid_body("data names no config to change"));
    }
    alter(&s, &caller, &topic, changes, req.validate_only).await
}

/// Checks the names and the caller, then makes the changes.
async fn alter(
    s: &Shared,
    caller: &Caller,
    topic: &str,
    changes: Vec<ConfigChange>,
    validate_only: bool,
) -> ApiResult<StatusCode> {
    for c in &changes {
        check_config_name(&c.name)?;
    }
    acl::topic_configs(s, caller, Operation::AlterConfigs, topic)?;
    if !util::valid_topic_name(topic) {
        return Err(ApiError::topic_not_found(topic));
    }
    s.service
        .alter_topic_configs(topic, &changes, validate_only)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
