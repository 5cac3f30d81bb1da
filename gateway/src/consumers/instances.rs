//! Creating and deleting v2 consumer instances: the create request's settings, the
//! instance's URI, and the 429 answered when too many are open.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_authz::Operation;
use utoipa::ToSchema;

use super::{Instance, body_json};
use crate::auth::Caller;
use crate::dlq::OnDecodeError;
use crate::error::{self, ApiError, ApiResult, ErrorBody};
use crate::service::ConsumerSettings;
use crate::service::OffsetReset;
use crate::util::{self, V2};
use crate::v2::Format;
use crate::{Shared, acl};

fn instance_uri(headers: &HeaderMap, group: &str, name: &str) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!(
        "http://{host}/consumers/{}/instances/{}",
        util::pct(group),
        util::pct(name)
    )
}

/// A request to create a consumer instance (Confluent's field names).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CreateConsumer {
    /// Instance name [default: generated]; 1 to 249 of [a-zA-Z0-9._-]
    pub name: Option<String>,
    /// binary (default) or json
    pub format: Option<String>,
    /// earliest, latest (default) or none
    #[serde(rename = "auto.offset.reset")]
    pub auto_offset_reset: Option<String>,
    /// "true" or "false" (default)
    #[serde(rename = "auto.commit.enable")]
    #[schema(value_type = Option<String>)]
    pub auto_commit_enable: Option<Value>,
    /// Accepted for compatibility; librdkafka's defaults apply
    #[serde(rename = "fetch.min.bytes")]
    #[schema(value_type = Option<String>)]
    pub fetch_min_bytes: Option<Value>,
    /// Accepted for compatibility; a records request names its own timeout
    #[serde(rename = "consumer.request.timeout.ms")]
    #[schema(value_type = Option<String>)]
    pub consumer_request_timeout_ms: Option<Value>,
    /// A json instance's answer to a record whose key or value is not JSON: fail (the
    /// default: 422 naming it, and the instance stops there until it is nacked or
    /// sought past) or dead-letter (copied to the dead-letter topic as a nack does,
    /// with the decode error as the reason, and skipped)
    #[serde(rename = "strata.on.decode.error")]
    pub on_decode_error: Option<String>,
}

/// A created instance.
#[derive(Debug, Serialize, ToSchema)]
pub struct Created {
    pub instance_id: String,
    pub base_uri: String,
}

fn parse_settings(req: &CreateConsumer) -> ApiResult<(Format, OnDecodeError, ConsumerSettings)> {
    let bad = |m: String| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            error::INVALID_CONSUMER_CONFIG,
            m,
        )
    };
    let format = match req
        .format
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("binary") => Format::Binary,
        Some("json") => Format::Json,
        Some(f) => {
            return Err(bad(format!(
                "format '{f}' is not supported: use binary or json (there is no schema registry)"
            )));
        }
    };
    let offset_reset = match req.auto_offset_reset.as_deref() {
        None | Some("latest") | Some("largest") => OffsetReset::Latest,
        Some("earliest") | Some("smallest") => OffsetReset::Earliest,
        Some("none") => OffsetReset::None,
        Some(o) => {
            return Err(bad(format!(
                "auto.offset.reset '{o}': use earliest, latest or none"
            )));
        }
    };
    let auto_commit = match &req.auto_commit_enable {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(v) => return Err(bad(format!("auto.commit.enable {v}: use true or false"))),
    };
    let on_decode_error = OnDecodeError::parse(req.on_decode_error.as_deref()).map_err(bad)?;
    Ok((
        format,
        on_decode_error,
        ConsumerSettings {
            offset_reset,
            auto_commit,
        },
    ))
}

/// Create a consumer instance in a group.
#[utoipa::path(post, path = "/consumers/{group}", tag = "v2 consumers",
    params(("group" = String, Path, description = "Consumer group")),
    request_body(content(
        (CreateConsumer = "application/vnd.kafka.v2+json"),
        (CreateConsumer = "application/json"),
    )),
    responses(
        (status = 200, description = "The instance", body = Created, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group (40301)", body = ErrorBody),
        (status = 409, description = "An instance of that name exists (40902)", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid settings (42204)", body = ErrorBody),
        (status = 429, description = "Too many open instances (42902)", body = ErrorBody),
    ))]
pub async fn create(
    State(s): State<Shared>,
    caller: Caller,
    Path(group): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    acl::group(&s, &caller, Operation::Read, &group)?;
    let req: CreateConsumer = body_json(&s, &headers, body).await?.unwrap_or_default();
    if !util::valid_name(&group) {
        return Err(ApiError::invalid_field(
            "the group name must be 1 to 249 printable characters",
        ));
    }
    let (format, on_decode_error, settings) = parse_settings(&req)?;
    let name = match req.name {
        Some(n) if util::valid_topic_name(&n) => n,
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                error::INVALID_CONSUMER_CONFIG,
                "name must be 1 to 249 of [a-zA-Z0-9._-]",
            ));
        }
        None => format!("rest-consumer-{}", uuid::Uuid::new_v4()),
    };
    let key = (group.clone(), name.clone());
    let exists = |s: &Shared| {
        s.consumers
            .instances
            .lock()
            .is_ok_and(|m| m.contains_key(&key))
    };
    if exists(&s) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            error::CONSUMER_ALREADY_EXISTS,
            "Consumer with specified consumer ID already exists in the specified consumer group.",
        ));
    }
    if !s.consumers.has_room() {
        return Err(too_many());
    }
    let consumer = s.service.consumer(&group, settings).await?;
    let instance = Arc::new(Instance {
        group: group.clone(),
        name: name.clone(),
        principal: caller.principal.clone(),
        format,
        on_decode_error,
        consumer,
        last_used: Mutex::new(Instant::now()),
        busy: tokio::sync::Mutex::new(()),
    });
    // Check again under the lock: two creates of one name may race.
    let raced = {
        let Ok(mut m) = s.consumers.instances.lock() else {
            return Err(ApiError::instance_not_found());
        };
        match m.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => true,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(instance.clone());
                false
            }
        }
    };
    if raced {
        instance.consumer.close().await;
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            error::CONSUMER_ALREADY_EXISTS,
            "Consumer with specified consumer ID already exists in the specified consumer group.",
        ));
    }
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Created {
            base_uri: instance_uri(&headers, &group, &name),
            instance_id: name,
        },
    ))
}

pub fn too_many() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        error::TOO_MANY_CONSUMERS,
        "Too many consumer instances and streams are open; delete some or wait for idle ones to expire.",
    )
}

/// Delete a consumer instance (it leaves its group).
#[utoipa::path(delete, path = "/consumers/{group}/instances/{instance}", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn delete_instance(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    acl::group(&s, &caller, Operation::Read, &group)?;
    let i = s
        .consumers
        .remove(&group, &name, &caller.principal)
        .ok_or_else(ApiError::instance_not_found)?;
    let _busy = i.busy.lock().await;
    i.consumer.close().await;
    Ok(StatusCode::NO_CONTENT)
}
