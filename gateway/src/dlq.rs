//! Dead letters for HTTP consumers: a v2 consumer instance or an SSE session rejects a
//! record it cannot process (`POST .../nack` with the reason). The gateway copies the
//! record (key, value, headers, timestamp) to the topic's dead-letter topic,
//! `{topic}{suffix}` (`.dlq` by default), with headers naming where it came from and why,
//! and only once that append is acknowledged commits the group past it: the poison
//! record never blocks its partition, and is never lost (a failed append commits
//! nothing, and the consumer may nack again).
//!
//! As any commit, committing past the record also commits the records before it in its
//! partition: nack a record after acknowledging those you have processed. The consumer
//! itself moves past the record too, so its next poll reads on.
//!
//! A json-format reader meets records that are not JSON: [`OnDecodeError`] says whether
//! it stops at one (the default) or dead-letters it by itself and reads on.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use strata_authz::Operation;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult, ErrorBody};
use crate::service::{GroupConsumer, PartitionOffset, ProduceRecord, Record};
use crate::util::{self, JSON, V2};
use crate::{Shared, acl};

/// The headers a dead letter carries besides the record's own.
pub const HEADER_TOPIC: &str = "strata.dlq.topic";
pub const HEADER_PARTITION: &str = "strata.dlq.partition";
pub const HEADER_OFFSET: &str = "strata.dlq.offset";
pub const HEADER_REASON: &str = "strata.dlq.reason";
/// The longest reason kept (bytes); a longer one is cut at a character boundary.
pub const MAX_REASON_BYTES: usize = 4096;

/// A record the consumer rejects.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Nack {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Why it cannot be processed (kept in the dead letter's `strata.dlq.reason`).
    pub reason: String,
}

/// Where the dead letter went.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLettered {
    /// The dead-letter topic.
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The group's committed offset in the source partition now: the one after the
    /// rejected record (the consumer itself reads on from there too).
    pub committed: i64,
}

/// Where a dead letter went.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterAt {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// What a json-format reader (a v2 consumer instance, an SSE stream) does with a
/// record whose key or value is not JSON: the instance's `strata.on.decode.error`, the
/// stream's query parameter of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDecodeError {
    /// Stop at it (an instance answers 422, a stream holds its partition) until the
    /// client nacks it or seeks past it. The default: nothing moves past a record
    /// without the client's say, and the client needs no Write on a dead-letter topic.
    #[default]
    Fail,
    /// Copy it to the dead-letter topic, as a nack does, with the decode error as the
    /// reason, and read on.
    DeadLetter,
}

impl OnDecodeError {
    /// The setting's name, in the create-instance body and the stream's query.
    pub const NAME: &'static str = "strata.on.decode.error";

    pub fn parse(v: Option<&str>) -> Result<OnDecodeError, String> {
        match v {
            None | Some("fail") => Ok(OnDecodeError::Fail),
            Some("dead-letter") => Ok(OnDecodeError::DeadLetter),
            Some(o) => Err(format!("{} '{o}': use fail or dead-letter", Self::NAME)),
        }
    }
}

/// A record a reader cannot show (`error` says why): dead-lettered by `policy`, or the
/// 422 that stops the reader, with `stop`: what stops and how to get past it.
pub(crate) async fn on_decode_error(
    s: &Shared,
    caller: &Caller,
    policy: OnDecodeError,
    record: &Record,
    error: String,
    stop: &str,
) -> ApiResult<DeadLetterAt> {
    let stop = |e: String| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            error::NOT_JSON_RECORD,
            format!("{e}. {stop}"),
        )
    };
    match policy {
        OnDecodeError::Fail => Err(stop(error)),
        OnDecodeError::DeadLetter => {
            let dlq = dlq_topic(s, caller, &record.topic).await?;
            append(s, &dlq, record.clone(), error).await
        }
    }
}

/// The dead-letter topic of `topic`, once the caller may write it; made on first use
/// (as Kafka Connect's dead-letter queue), which needs Create on it.
async fn dlq_topic(s: &Shared, caller: &Caller, topic: &str) -> ApiResult<String> {
    let dlq = format!("{topic}{}", s.config.dlq_suffix);
    if !util::valid_topic_name(&dlq) {
        return Err(ApiError::invalid_field(format!(
            "the dead-letter topic name '{dlq}' is not a valid topic name"
        )));
    }
    acl::topic(s, caller, Operation::Write, &dlq)?;
    if let Err(e) = s.service.partition_count(&dlq).await {
        if e.code != crate::service::codes::UNKNOWN_TOPIC_OR_PARTITION {
            return Err(e.into());
        }
        acl::topic(s, caller, Operation::Create, &dlq)?;
        s.service.create_topic(&dlq).await?;
    }
    Ok(dlq)
}

/// Appends `record` (key, value, headers, timestamp) to `dlq` with headers naming where
/// it came from and why.
async fn append(
    s: &Shared,
    dlq: &str,
    record: Record,
    mut reason: String,
) -> ApiResult<DeadLetterAt> {
    if reason.len() > MAX_REASON_BYTES {
        let mut cut = MAX_REASON_BYTES;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    let mut dl_headers = record.headers;
    dl_headers.push((HEADER_TOPIC.into(), Some(record.topic.clone().into_bytes())));
    dl_headers.push((
        HEADER_PARTITION.into(),
        Some(record.partition.to_string().into_bytes()),
    ));
    dl_headers.push((
        HEADER_OFFSET.into(),
        Some(record.offset.to_string().into_bytes()),
    ));
    dl_headers.push((HEADER_REASON.into(), Some(reason.into_bytes())));
    let appended = s
        .service
        .produce(
            dlq,
            vec![ProduceRecord {
                partition: None,
                key: record.key,
                value: record.value,
                headers: dl_headers,
                timestamp: record.timestamp,
            }],
        )
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::invalid_body("the dead-letter topic answered nothing"))??;
    Ok(DeadLetterAt {
        topic: dlq.to_string(),
        partition: appended.partition,
        offset: appended.offset,
    })
}

/// Copies the record `nack` names to its dead-letter topic, then commits `consumer`'s
/// group past it and moves `consumer` itself past it.
async fn dead_letter(
    s: &Shared,
    caller: &Caller,
    consumer: &dyn GroupConsumer,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<DeadLettered> {
    util::require_content_type(headers, &[JSON, V2])?;
    let bytes = util::read_body(headers, body, s.config.max_body_bytes).await?;
    let nack: Nack = util::parse_json(&bytes)?;
    if !util::valid_topic_name(&nack.topic) || nack.partition < 0 || nack.offset < 0 {
        return Err(ApiError::invalid_field(format!(
            "invalid record {}/{}/{}",
            nack.topic, nack.partition, nack.offset
        )));
    }
    if nack.reason.trim().is_empty() {
        return Err(ApiError::invalid_field(
            "reason must say why the record is rejected",
        ));
    }
    acl::topic(s, caller, Operation::Read, &nack.topic)?;
    let dlq = dlq_topic(s, caller, &nack.topic).await?;
    // The record itself, read from its partition.
    let read = s
        .service
        .read(
            &nack.topic,
            nack.partition,
            Some(nack.offset),
            1,
            std::time::Duration::ZERO,
        )
        .await?;
    let record = read
        .records
        .into_iter()
        .find(|r| r.offset == nack.offset)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                error::OFFSET_OUT_OF_RANGE,
                format!(
                    "{}-{} has no record at offset {} (log start {}, end {})",
                    nack.topic,
                    nack.partition,
                    nack.offset,
                    read.log_start_offset,
                    read.high_watermark
                ),
            )
        })?;
    let dead = append(s, &dlq, record, nack.reason).await?;
    // Only now, with the dead letter acknowledged, past the record: the group's
    // committed offset (for the next member) and this member's own position (a commit
    // does not move it, so it would read the record again).
    let past = PartitionOffset {
        topic: nack.topic,
        partition: nack.partition,
        offset: nack.offset.saturating_add(1),
    };
    consumer.commit(Some(vec![past.clone()])).await?;
    consumer
        .move_past(&PartitionOffset {
            offset: nack.offset,
            ..past
        })
        .await?;
    Ok(DeadLettered {
        topic: dead.topic,
        partition: dead.partition,
        offset: dead.offset,
        committed: nack.offset.saturating_add(1),
    })
}

/// Reject a record a consumer instance cannot process: it goes to the topic's
/// dead-letter topic (`{topic}.dlq`) with headers naming its topic, partition, offset
/// and the reason, then the group commits past it and the instance moves past it (its
/// next poll reads on after it, unless it is past it already).
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/nack", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Nack = "application/vnd.kafka.v2+json"),
        (Nack = "application/json"),
    )),
    responses(
        (status = 200, description = "Dead-lettered and committed past; the instance reads on after the record", body = DeadLettered),
        (status = 403, description = "Not authorized to read the group or the topic, or to write the dead-letter topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403), or no record at that offset (a compacted one, 41601)", body = ErrorBody),
        (status = 416, description = "The offset is outside the partition (41601)", body = ErrorBody),
        (status = 409, description = "The instance does not own the partition now (rebalanced)", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn nack_instance(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<DeadLettered>> {
    let i = crate::consumers::instance_for(&s, &caller, &group, &name)?;
    let _busy = i.busy().await;
    Ok(Json(
        dead_letter(&s, &caller, i.consumer.as_ref(), &headers, body).await?,
    ))
}

/// Reject a record of an SSE stream, as `.../instances/{instance}/nack` does.
#[utoipa::path(post, path = "/consumers/{group}/stream/{session}/nack", tag = "strata",
    params(("group" = String, Path), ("session" = String, Path, description = "From the stream's session event")),
    request_body(content(
        (Nack = "application/json"),
        (Nack = "application/vnd.kafka.v2+json"),
    )),
    responses(
        (status = 200, description = "Dead-lettered and committed past; the stream reads on after the record (a partition held at it too)", body = DeadLettered),
        (status = 403, description = "Not authorized to read the group or the topic, or to write the dead-letter topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown or closed session (40405), or no record at that offset (a compacted one, 41601)", body = ErrorBody),
        (status = 416, description = "The offset is outside the partition (41601)", body = ErrorBody),
        (status = 409, description = "The session's member does not own the partition now (rebalanced)", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn nack_stream(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, session)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<DeadLettered>> {
    let consumer = crate::sse::session_consumer(&s, &caller, &group, &session)?;
    Ok(Json(
        dead_letter(&s, &caller, consumer.as_ref(), &headers, body).await?,
    ))
}
