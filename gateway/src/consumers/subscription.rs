//! What an instance reads: its subscription (topics or a pattern) and the partitions
//! the group assigned to it.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use strata_authz::Operation;
use utoipa::ToSchema;

use super::{body_json, instance};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::util::{self, V2};
use crate::{Shared, acl};

/// Topics to subscribe to: a list, or (Confluent's `topic_pattern`) a regular expression
/// that a whole topic name must match; topics created later join at the consumer's next
/// metadata refresh.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Subscription {
    #[serde(default)]
    pub topics: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_pattern: Option<String>,
}

/// Subscribe the instance to topics (replacing its subscription).
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Subscription = "application/vnd.kafka.v2+json"),
        (Subscription = "application/json"),
    )),
    responses(
        (status = 204, description = "Subscribed"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid body, or a topic_pattern the Kafka client cannot use (42202)", body = ErrorBody),
    ))]
pub async fn subscribe(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Subscription = body_json(&s, &headers, body)
        .await?
        .ok_or_else(|| ApiError::invalid_body("a body {\"topics\": [...]} is required"))?;
    match (req.topics.is_empty(), req.topic_pattern) {
        (true, None) => Err(ApiError::invalid_body(
            "give topics (a non-empty list) or topic_pattern (a regular expression)",
        )),
        (false, Some(_)) => Err(ApiError::invalid_body(
            "give topics or topic_pattern, not both",
        )),
        (true, Some(pattern)) => {
            if let Err(e) = regex::Regex::new(&format!("^(?:{pattern})$")) {
                return Err(ApiError::invalid_field(format!(
                    "topic_pattern '{pattern}' is not a regular expression: {e}"
                )));
            }
            let _busy = i.busy.lock().await;
            i.consumer.subscribe_pattern(&pattern).await?;
            Ok(StatusCode::NO_CONTENT)
        }
        (false, None) => {
            acl::topics(
                &s,
                &caller,
                Operation::Read,
                req.topics.iter().map(String::as_str),
            )?;
            if let Some(t) = req.topics.iter().find(|t| !util::valid_topic_name(t)) {
                return Err(ApiError::invalid_field(format!(
                    "'{t}' is not a valid topic name"
                )));
            }
            let _busy = i.busy.lock().await;
            i.consumer.subscribe(req.topics).await?;
            Ok(StatusCode::NO_CONTENT)
        }
    }
}

/// The instance's subscription.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 200, description = "Subscribed topics", body = Subscription, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn get_subscription(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let i = instance(&s, &caller, &group, &name)?;
    let mut topics = i.consumer.subscription().await?;
    topics.retain(|t| acl::may_describe(&s, &caller, t));
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Subscription {
            topics,
            topic_pattern: None,
        },
    ))
}

/// Unsubscribe the instance from every topic.
#[utoipa::path(delete, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 204, description = "Unsubscribed"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn unsubscribe(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let _busy = i.busy.lock().await;
    i.consumer.unsubscribe().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A topic-partition.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct PartitionJson {
    pub topic: String,
    pub partition: i32,
}

/// Partitions.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Partitions {
    pub partitions: Vec<PartitionJson>,
}

/// The partitions the group assigned to the instance.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/assignments", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 200, description = "Assigned partitions", body = Partitions, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn assignments(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let i = instance(&s, &caller, &group, &name)?;
    let partitions = i
        .consumer
        .assignment()
        .await?
        .into_iter()
        .filter(|p| acl::may_describe(&s, &caller, &p.topic))
        .map(|p| PartitionJson {
            topic: p.topic,
            partition: p.partition,
        })
        .collect();
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Partitions { partitions },
    ))
}
