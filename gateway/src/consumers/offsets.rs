//! An instance's offsets: committing them, reading the group's committed offsets, and
//! moving the instance's read positions (to an offset, the beginning or the end).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use strata_authz::Operation;
use utoipa::ToSchema;

use super::subscription::Partitions;
use super::{body_json, instance};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::service::{End, PartitionOffset, TopicPartition};
use crate::util::{self, V2};
use crate::{Shared, acl};

/// A topic-partition's offset.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct OffsetJson {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Offsets.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Offsets {
    pub offsets: Vec<OffsetJson>,
}

/// A commit's body: the offsets to commit. Without them (`{}`, `"offsets": null` or
/// `"offsets": []`, as without a body) everything the instance has read is committed, as
/// Confluent's.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CommitOffsets {
    pub offsets: Option<Vec<OffsetJson>>,
}

/// A committed offset.
#[derive(Debug, Serialize, ToSchema)]
pub struct CommittedJson {
    pub topic: String,
    pub partition: i32,
    /// The next offset the group reads (-1: none committed)
    pub offset: i64,
    pub metadata: String,
}

/// Committed offsets.
#[derive(Debug, Serialize, ToSchema)]
pub struct Committed {
    pub offsets: Vec<CommittedJson>,
}

fn check_partitions<'a>(it: impl Iterator<Item = (&'a str, i32)>) -> ApiResult<()> {
    for (t, p) in it {
        if !util::valid_topic_name(t) {
            return Err(ApiError::invalid_field(format!(
                "'{t}' is not a valid topic name"
            )));
        }
        if p < 0 {
            return Err(ApiError::invalid_field(format!(
                "partition {p} must not be negative"
            )));
        }
    }
    Ok(())
}

fn check_offsets(offsets: &[OffsetJson]) -> ApiResult<()> {
    check_partitions(offsets.iter().map(|o| (o.topic.as_str(), o.partition)))?;
    if let Some(o) = offsets.iter().find(|o| o.offset < 0) {
        return Err(ApiError::invalid_field(format!(
            "offset {} must not be negative",
            o.offset
        )));
    }
    Ok(())
}

/// Commit offsets. With offsets in the body, each given offset is the last record
/// processed (the group resumes after it, as Confluent's); without a body, or without
/// offsets in it, everything the instance has read so far.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/offsets", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (CommitOffsets = "application/vnd.kafka.v2+json"),
        (CommitOffsets = "application/json"),
    )),
    responses(
        (status = 204, description = "Committed"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "The instance does not own a partition now (rebalanced)", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn commit(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Option<CommitOffsets> = body_json(&s, &headers, body).await?;
    let offsets = match req.and_then(|r| r.offsets) {
        Some(offsets) if !offsets.is_empty() => {
            acl::topics(
                &s,
                &caller,
                Operation::Read,
                offsets.iter().map(|o| o.topic.as_str()),
            )?;
            check_offsets(&offsets)?;
            Some(
                offsets
                    .into_iter()
                    .map(|o| PartitionOffset {
                        topic: o.topic,
                        partition: o.partition,
                        offset: o.offset.saturating_add(1),
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    let _busy = i.busy.lock().await;
    i.consumer.commit(offsets).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The group's committed offsets for the given partitions (the body, as Confluent's
/// GET with a body), or for the instance's assignment without one.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/offsets", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Partitions = "application/vnd.kafka.v2+json"),
        (Partitions = "application/json"),
    )),
    responses(
        (status = 200, description = "Committed offsets", body = Committed, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn committed(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Option<Partitions> = body_json(&s, &headers, body).await?;
    let partitions: Vec<TopicPartition> = req
        .map(|r| r.partitions)
        .unwrap_or_default()
        .into_iter()
        .map(|p| TopicPartition {
            topic: p.topic,
            partition: p.partition,
        })
        .collect();
    acl::topics(
        &s,
        &caller,
        Operation::Describe,
        partitions.iter().map(|p| p.topic.as_str()),
    )?;
    check_partitions(partitions.iter().map(|p| (p.topic.as_str(), p.partition)))?;
    let got = i.consumer.committed(partitions).await?;
    let offsets = got
        .into_iter()
        .filter(|o| acl::may_describe(&s, &caller, &o.topic))
        .map(|o| CommittedJson {
            topic: o.topic,
            partition: o.partition,
            offset: o.offset,
            metadata: String::new(),
        })
        .collect();
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Committed { offsets },
    ))
}

/// Set the next offsets the instance reads (the partitions must be assigned to it).
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Offsets = "application/vnd.kafka.v2+json"),
        (Offsets = "application/json"),
    )),
    responses(
        (status = 204, description = "Positioned"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "A partition is not assigned to the instance: not yet (poll first) or no more (rebalanced) (40901)", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn seek(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Offsets = body_json(&s, &headers, body)
        .await?
        .ok_or_else(|| ApiError::invalid_body("a body {\"offsets\": [...]} is required"))?;
    acl::topics(
        &s,
        &caller,
        Operation::Read,
        req.offsets.iter().map(|o| o.topic.as_str()),
    )?;
    check_offsets(&req.offsets)?;
    let _busy = i.busy.lock().await;
    i.consumer
        .seek(
            req.offsets
                .into_iter()
                .map(|o| PartitionOffset {
                    topic: o.topic,
                    partition: o.partition,
                    offset: o.offset,
                })
                .collect(),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn seek_to(
    s: Shared,
    caller: Caller,
    group: String,
    name: String,
    headers: HeaderMap,
    body: Body,
    end: End,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Partitions = body_json(&s, &headers, body)
        .await?
        .ok_or_else(|| ApiError::invalid_body("a body {\"partitions\": [...]} is required"))?;
    acl::topics(
        &s,
        &caller,
        Operation::Read,
        req.partitions.iter().map(|p| p.topic.as_str()),
    )?;
    check_partitions(
        req.partitions
            .iter()
            .map(|p| (p.topic.as_str(), p.partition)),
    )?;
    let _busy = i.busy.lock().await;
    i.consumer
        .seek_to(
            req.partitions
                .into_iter()
                .map(|p| TopicPartition {
                    topic: p.topic,
                    partition: p.partition,
                })
                .collect(),
            end,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Move to the first offset of the given partitions.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions/beginning", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Partitions = "application/vnd.kafka.v2+json"),
        (Partitions = "application/json"),
    )),
    responses(
        (status = 204, description = "Positioned"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "A partition is not assigned to the instance: not yet (poll first) or no more (rebalanced) (40901)", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn seek_beginning(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    seek_to(s, caller, group, name, headers, body, End::Beginning).await
}

/// Move past the last offset of the given partitions.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions/end", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Partitions = "application/vnd.kafka.v2+json"),
        (Partitions = "application/json"),
    )),
    responses(
        (status = 204, description = "Positioned"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "A partition is not assigned to the instance: not yet (poll first) or no more (rebalanced) (40901)", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn seek_end(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    seek_to(s, caller, group, name, headers, body, End::End).await
}
