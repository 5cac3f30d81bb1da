//! Confluent REST Proxy v2: topics and produce, plus stateless partition reads.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use strata_authz::{Operation, ResourceType};

use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult, ErrorBody};
use crate::idempotency::{Claim, Stored, fingerprint};
use crate::service::{ProduceRecord, Record, TopicInfo};
use crate::util::{self, V2, V2_BINARY, V2_JSON};
use crate::{Shared, acl};

/// How keys and values travel in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// base64 strings
    #[default]
    Binary,
    /// JSON values (the bytes are the value's JSON text)
    Json,
}

impl Format {
    pub fn media(self) -> &'static str {
        match self {
            Format::Binary => V2_BINARY,
            Format::Json => V2_JSON,
        }
    }

    /// Bytes as this format shows them (json: an error for bytes that are not JSON).
    pub fn encode(self, bytes: Option<&[u8]>) -> Result<Value, serde_json::Error> {
        match (self, bytes) {
            (_, None) => Ok(Value::Null),
            (Format::Binary, Some(b)) => Ok(Value::String(util::b64(b))),
            (Format::Json, Some(b)) => serde_json::from_slice(b),
        }
    }

    /// A request's key or value as bytes: base64-decoded (binary), or the JSON text as
    /// sent without insignificant whitespace (json: key order, numbers and escapes are
    /// kept, as Confluent's proxy keeps them). `what` names the field, for errors.
    pub fn decode(
        self,
        what: impl FnOnce() -> String,
        v: Option<Box<RawValue>>,
    ) -> ApiResult<Option<Vec<u8>>> {
        let Some(v) = v else { return Ok(None) };
        match self {
            Format::Binary => match serde_json::from_str::<Option<String>>(v.get()) {
                Ok(None) => Ok(None),
                Ok(Some(s)) => util::unb64(&what(), &s).map(Some),
                Err(_) => Err(ApiError::invalid_field(format!(
                    "{} must be a base64 string in the binary format",
                    what()
                ))),
            },
            Format::Json if v.get() == "null" => Ok(None),
            Format::Json => Ok(Some(compact_json(Box::<str>::from(v).into()))),
        }
    }
}

/// Valid JSON text without whitespace outside strings. Valid JSON has no raw control
/// characters inside strings, so text with no byte at or below b' ' is compact already
/// (the common case: it is returned as is, without a copy).
pub fn compact_json(text: String) -> Vec<u8> {
    let b = text.as_bytes();
    // Branch-free per chunk, so the check vectorizes.
    let spaced = b
        .chunks(64)
        .any(|c| c.iter().fold(false, |acc, &x| acc | (x <= b' ')));
    if !spaced {
        return text.into_bytes();
    }
    let mut out = Vec::with_capacity(b.len());
    let (mut in_string, mut escaped) = (false, false);
    for &c in b {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
        } else if c == b'"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            out.push(c);
        }
    }
    out
}

/// A header of a record (value base64, or null).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeaderJson {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
}

/// A record as consumers read it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConsumerRecord {
    pub topic: String,
    /// base64 (binary) or a JSON value (json); null when absent
    #[schema(value_type = Object, nullable)]
    pub key: Value,
    #[schema(value_type = Object, nullable)]
    pub value: Value,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch
    pub timestamp: Option<i64>,
    pub headers: Vec<HeaderJson>,
}

/// A record as `format` shows it; an error names the record (topic/partition/offset)
/// and says what is not JSON.
pub fn encode_record(r: &Record, format: Format) -> Result<ConsumerRecord, String> {
    let field = |what: &str, bytes: Option<&[u8]>| {
        format.encode(bytes).map_err(|e| {
            format!(
                "The {what} of the record at topic '{}' partition {} offset {} is not JSON ({e})",
                r.topic, r.partition, r.offset
            )
        })
    };
    Ok(ConsumerRecord {
        topic: r.topic.clone(),
        key: field("key", r.key.as_deref())?,
        value: field("value", r.value.as_deref())?,
        partition: r.partition,
        offset: r.offset,
        timestamp: r.timestamp,
        headers: r
            .headers
            .iter()
            .map(|(k, v)| HeaderJson {
                name: k.clone(),
                value: v.as_deref().map(util::b64),
            })
            .collect(),
    })
}

pub fn topic_exists_or_404(
    r: Result<TopicInfo, crate::ServiceError>,
    topic: &str,
) -> ApiResult<TopicInfo> {
    r.map_err(|e| {
        let a = ApiError::from_service(&e);
        if a.body.error_code == error::TOPIC_NOT_FOUND {
            ApiError::topic_not_found(topic)
        } else {
            a
        }
    })
}

/// The partition count of a topic that must exist (404 otherwise).
pub async fn partition_count(s: &Shared, topic: &str) -> ApiResult<i32> {
    if !util::valid_topic_name(topic) {
        return Err(ApiError::topic_not_found(topic));
    }
    s.service.partition_count(topic).await.map_err(|e| {
        let a = ApiError::from_service(&e);
        if a.body.error_code == error::TOPIC_NOT_FOUND {
            ApiError::topic_not_found(topic)
        } else {
            a
        }
    })
}

pub async fn describe(s: &Shared, topic: &str) -> ApiResult<TopicInfo> {
    if !util::valid_topic_name(topic) {
        return Err(ApiError::topic_not_found(topic));
    }
    topic_exists_or_404(s.service.describe_topic(topic).await, topic)
}

pub fn parse_partition(topic: &str, p: &str) -> ApiResult<i32> {
    p.parse::<i32>().ok().filter(|p| *p >= 0).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            error::PARTITION_NOT_FOUND,
            format!("Partition '{p}' of topic '{topic}' not found."),
        )
    })
}

/// Topic names (those the caller may describe).
#[utoipa::path(get, path = "/topics", tag = "v2",
    responses(
        (status = 200, description = "Topic names", body = [String], content_type = "application/vnd.kafka.v2+json"),
        (status = 503, description = "The broker is unreachable", body = ErrorBody),
    ))]
pub async fn list_topics(State(s): State<Shared>, caller: Caller) -> ApiResult<Response> {
    let mut topics = s.service.list_topics().await?;
    topics.retain(|t| acl::may_describe(&s, &caller, t));
    Ok(util::json_response(StatusCode::OK, V2, &topics))
}

/// A replica of a partition.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplicaJson {
    pub broker: i32,
    pub leader: bool,
    pub in_sync: bool,
}

/// A partition of a topic.
#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionJson {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<ReplicaJson>,
}

/// A topic.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicJson {
    pub name: String,
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionJson>,
}

/// A topic's partitions, replicas and configs (the configs only with DescribeConfigs on
/// the topic; empty otherwise).
#[utoipa::path(get, path = "/topics/{topic}", tag = "v2",
    params(("topic" = String, Path, description = "Topic name")),
    responses(
        (status = 200, description = "The topic", body = TopicJson, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to describe the topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown topic (40401)", body = ErrorBody),
    ))]
pub async fn get_topic(
    State(s): State<Shared>,
    caller: Caller,
    Path(topic): Path<String>,
) -> ApiResult<Response> {
    acl::topic(&s, &caller, Operation::Describe, &topic)?;
    let t = describe(&s, &topic).await?;
    let configs = if acl::allowed(
        &s,
        &caller,
        Operation::DescribeConfigs,
        ResourceType::Topic,
        &topic,
        false,
    ) {
        t.configs
    } else {
        BTreeMap::new()
    };
    let body = TopicJson {
        name: t.name,
        configs,
        partitions: t
            .partitions
            .into_iter()
            .map(|p| PartitionJson {
                partition: p.partition,
                leader: p.leader,
                replicas: p
                    .replicas
                    .iter()
                    .map(|b| ReplicaJson {
                        broker: *b,
                        leader: *b == p.leader,
                        in_sync: p.isr.contains(b),
                    })
                    .collect(),
            })
            .collect(),
    };
    Ok(util::json_response(StatusCode::OK, V2, &body))
}

/// A record to produce. In the binary format key and value are base64 strings; in the
/// json format any JSON value. Null or absent: no key / a null value. Any other member
/// is refused (422), not ignored.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProduceRecordJson {
    // Raw: a value's text is produced as sent (minus whitespace), without building and
    // re-encoding a tree for every record.
    #[serde(default)]
    #[schema(value_type = Object, nullable)]
    pub key: Option<Box<RawValue>>,
    #[serde(default)]
    #[schema(value_type = Object, nullable)]
    pub value: Option<Box<RawValue>>,
    /// The partition; absent: by the key's hash (murmur2, as Kafka's partitioner)
    #[serde(default)]
    pub partition: Option<i32>,
}

/// A v2 produce request. Confluent's `key_schema`, `key_schema_id`, `value_schema` and
/// `value_schema_id` need a schema registry, which Strata does not have yet: they are
/// refused (422) unless null. Any other member is refused too, not ignored.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProduceRequest {
    pub records: Vec<ProduceRecordJson>,
    // Parsed only to be refused by name (an unknown member's error would not say why).
    #[serde(default)]
    #[schema(ignore)]
    pub key_schema: Option<Value>,
    #[serde(default)]
    #[schema(ignore)]
    pub key_schema_id: Option<Value>,
    #[serde(default)]
    #[schema(ignore)]
    pub value_schema: Option<Value>,
    #[serde(default)]
    #[schema(ignore)]
    pub value_schema_id: Option<Value>,
}

/// Where one record went, or why it did not.
#[derive(Debug, Serialize, ToSchema)]
pub struct OffsetJson {
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub error_code: Option<u32>,
    pub error: Option<String>,
}

/// A v2 produce answer, one entry per record in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProduceResponse {
    pub offsets: Vec<OffsetJson>,
    pub key_schema_id: Option<i32>,
    pub value_schema_id: Option<i32>,
}

/// Produce records to a topic.
///
/// The whole request is validated before any record is produced: a malformed record
/// fails the request (422) and nothing is appended. When every record fails for the
/// same reason the answer carries that reason's status (503 not enough in-sync
/// replicas, 429 throttled, 413 too large); otherwise 200 with an error per failed
/// record. With `Idempotency-Key`, a retry of the same request returns the first
/// successful answer byte for byte and appends nothing.
#[utoipa::path(post, path = "/topics/{topic}", tag = "v2",
    params(
        ("topic" = String, Path, description = "Topic name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Retries with the same key return the first answer"),
    ),
    request_body(content(
        (ProduceRequest = "application/vnd.kafka.json.v2+json"),
        (ProduceRequest = "application/vnd.kafka.binary.v2+json"),
    )),
    responses(
        (status = 200, description = "Offsets (or per-record errors)", body = ProduceResponse, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to write to the topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown topic (40401) or partition (40402)", body = ErrorBody),
        (status = 413, description = "Body or record too large", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid body (42201, a member Strata does not know included) or field (42202, a schema-registry member such as value_schema_id included: there is no schema registry yet)", body = ErrorBody),
        (status = 429, description = "Throttled: the produce queue is full", body = ErrorBody),
        (status = 503, description = "The broker cannot take writes (e.g. not enough in-sync replicas)", body = ErrorBody),
    ))]
pub async fn produce(
    State(s): State<Shared>,
    caller: Caller,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Before anything else (a replay of a stored answer too): as in Kafka, the
    // principal's right comes before the topic's existence.
    if let Err(e) = acl::topic(&s, &caller, Operation::Write, &topic) {
        return e.into_response();
    }
    produce_v2(s, caller, topic, None, headers, body).await
}

/// Produce records to one partition of a topic (see POST /topics/{topic}).
#[utoipa::path(post, path = "/topics/{topic}/partitions/{partition}", tag = "v2",
    params(
        ("topic" = String, Path, description = "Topic name"),
        ("partition" = i32, Path, description = "Partition"),
        ("Idempotency-Key" = Option<String>, Header, description = "Retries with the same key return the first answer"),
    ),
    request_body(content(
        (ProduceRequest = "application/vnd.kafka.json.v2+json"),
        (ProduceRequest = "application/vnd.kafka.binary.v2+json"),
    )),
    responses(
        (status = 200, description = "Offsets (or per-record errors)", body = ProduceResponse, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to write to the topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown topic (40401) or partition (40402)", body = ErrorBody),
        (status = 413, description = "Body or record too large", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid body (42201, a member Strata does not know included) or field (42202, a schema-registry member such as value_schema_id included: there is no schema registry yet)", body = ErrorBody),
        (status = 429, description = "Throttled", body = ErrorBody),
        (status = 503, description = "The broker cannot take writes", body = ErrorBody),
    ))]
pub async fn produce_partition(
    State(s): State<Shared>,
    caller: Caller,
    Path((topic, partition)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = acl::topic(&s, &caller, Operation::Write, &topic) {
        return e.into_response();
    }
    match parse_partition(&topic, &partition) {
        Ok(p) => produce_v2(s, caller, topic, Some(p), headers, body).await,
        Err(e) => e.into_response(),
    }
}

async fn produce_v2(
    s: Shared,
    caller: Caller,
    topic: String,
    partition: Option<i32>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let ct = match util::require_content_type(&headers, &[V2_JSON, V2_BINARY]) {
        Ok(ct) => ct,
        Err(e) => return e.into_response(),
    };
    let bytes = match util::read_body(&headers, body, s.config.max_body_bytes).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let format = if ct == V2_JSON {
        Format::Json
    } else {
        Format::Binary
    };
    let path = format!("/topics/{topic}/{partition:?}");
    idempotent(
        &s,
        &caller,
        &headers,
        &[path.as_bytes(), ct.as_bytes(), &bytes],
        async {
            match produce_v2_inner(&s, &topic, partition, format, &bytes).await {
                Ok(r) => r,
                Err(e) => e.into_response(),
            }
        },
    )
    .await
}

async fn produce_v2_inner(
    s: &Shared,
    topic: &str,
    partition: Option<i32>,
    format: Format,
    bytes: &[u8],
) -> ApiResult<Response> {
    let req: ProduceRequest = util::parse_json(bytes)?;
    util::refuse_schema_members([
        ("key_schema".to_string(), &req.key_schema),
        ("key_schema_id".to_string(), &req.key_schema_id),
        ("value_schema".to_string(), &req.value_schema),
        ("value_schema_id".to_string(), &req.value_schema_id),
    ])?;
    if req.records.is_empty() {
        return Err(ApiError::invalid_body("records must not be empty"));
    }
    let count = partition_count(s, topic).await?;
    let mut records = Vec::with_capacity(req.records.len());
    for (i, r) in req.records.into_iter().enumerate() {
        let p = partition.or(r.partition);
        if let Some(p) = p
            && !(0..count).contains(&p)
        {
            return Err(ApiError::partition_not_found(topic, p));
        }
        records.push(ProduceRecord {
            partition: p,
            key: format.decode(|| format!("records[{i}].key"), r.key)?,
            value: format.decode(|| format!("records[{i}].value"), r.value)?,
            headers: Vec::new(),
            timestamp: None,
        });
    }
    let results = s.service.produce(topic, records).await?;
    if let Some(Err(first)) = results.first()
        && results.iter().all(|r| r.is_err())
    {
        return Err(ApiError::from_service(first));
    }
    let offsets = results
        .into_iter()
        .map(|r| match r {
            Ok(p) => OffsetJson {
                partition: Some(p.partition),
                offset: Some(p.offset),
                error_code: None,
                error: None,
            },
            Err(e) => OffsetJson {
                partition: None,
                offset: None,
                error_code: Some(ApiError::from_service(&e).body.error_code),
                error: Some(e.message),
            },
        })
        .collect();
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &ProduceResponse {
            offsets,
            key_schema_id: None,
            value_schema_id: None,
        },
    ))
}

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Runs `run` under the request's Idempotency-Key, if it has one. Keys are the
/// caller's own: the same key from another principal is another request.
pub async fn idempotent(
    s: &Shared,
    caller: &Caller,
    headers: &HeaderMap,
    parts: &[&[u8]],
    run: impl Future<Output = Response>,
) -> Response {
    let Some(key) = headers.get(IDEMPOTENCY_KEY) else {
        return run.await;
    };
    let key = match key.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= 255 => k.to_string(),
        _ => {
            return ApiError::invalid_field(
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            )
            .into_response();
        }
    };
    let key = format!("{}\n{key}", caller.principal);
    let guard = match s.idempotency.claim(&key, fingerprint(parts)).await {
        Claim::First(g) => g,
        Claim::Replay(stored) => return replay(&stored),
        Claim::Conflict => {
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                error::IDEMPOTENCY_KEY_REUSED,
                "This Idempotency-Key was used for a different request.",
            )
            .into_response();
        }
    };
    let response = run.await;
    if !response.status().is_success() {
        guard.complete(None);
        return response;
    }
    let (parts, body) = response.into_parts();
    // Produce answers are small (one entry per record of a bounded body).
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            guard.complete(None);
            return ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                500,
                format!("cannot buffer the answer: {e}"),
            )
            .into_response();
        }
    };
    let stored = Stored {
        status: parts.status,
        content_type: parts.headers.get(axum::http::header::CONTENT_TYPE).cloned(),
        body: bytes.clone(),
    };
    guard.complete(Some(stored));
    Response::from_parts(parts, Body::from(bytes))
}

fn replay(stored: &Stored) -> Response {
    let mut r = Response::new(Body::from(stored.body.clone()));
    *r.status_mut() = stored.status;
    if let Some(ct) = &stored.content_type {
        r.headers_mut()
            .insert(axum::http::header::CONTENT_TYPE, ct.clone());
    }
    r.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    r
}

/// Query of a stateless read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// First offset to read [default: the partition's log start]
    pub offset: Option<i64>,
    /// Byte budget for keys, values and headers (at least one record is returned)
    pub max_bytes: Option<u64>,
    /// Milliseconds to wait when nothing is there yet [default: 0]
    pub timeout: Option<u64>,
    /// binary (base64) or json
    pub format: Option<Format>,
}

/// A stateless read's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadResponse {
    pub topic: String,
    pub partition: i32,
    pub records: Vec<ConsumerRecord>,
    /// Offset to read from next
    pub next_offset: i64,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// Read a partition from an offset, without a consumer group.
#[utoipa::path(get, path = "/topics/{topic}/partitions/{partition}/records", tag = "strata",
    params(
        ("topic" = String, Path, description = "Topic name"),
        ("partition" = i32, Path, description = "Partition"),
        ReadQuery,
    ),
    responses(
        (status = 200, description = "Records", body = ReadResponse, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown topic (40401) or partition (40402)", body = ErrorBody),
        (status = 416, description = "Offset outside the partition", body = ErrorBody),
        (status = 422, description = "Invalid query, or a record that is not JSON in the json format", body = ErrorBody),
    ))]
pub async fn read_partition(
    State(s): State<Shared>,
    caller: Caller,
    Path((topic, partition)): Path<(String, String)>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> ApiResult<Response> {
    acl::topic(&s, &caller, Operation::Read, &topic)?;
    let Query(q) = query.map_err(|e| ApiError::invalid_field(e.body_text()))?;
    let partition = parse_partition(&topic, &partition)?;
    if partition >= partition_count(&s, &topic).await? {
        return Err(ApiError::partition_not_found(&topic, partition));
    }
    let max_bytes = q.max_bytes.map_or(s.config.default_max_bytes, |b| {
        b.clamp(1, s.config.max_body_bytes as u64 * 8) as usize
    });
    let wait = Duration::from_millis(q.timeout.unwrap_or(0)).min(s.config.max_poll_timeout);
    if q.offset.is_some_and(|o| o < 0) {
        return Err(ApiError::invalid_field("offset must not be negative"));
    }
    let r = s
        .service
        .read(&topic, partition, q.offset, max_bytes, wait)
        .await?;
    let offset = q.offset.unwrap_or(r.log_start_offset);
    let format = q.format.unwrap_or_default();
    let next_offset = r.records.last().map_or(offset, |x| x.offset + 1);
    let records = r
        .records
        .iter()
        .map(|x| encode_record(x, format))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                error::NOT_JSON_RECORD,
                format!("{e}; read it with the binary format"),
            )
        })?;
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &ReadResponse {
            topic,
            partition,
            records,
            next_offset,
            high_watermark: r.high_watermark,
            log_start_offset: r.log_start_offset,
        },
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn json_values_are_produced_as_sent_without_whitespace() {
        let c = |s: &str| String::from_utf8(compact_json(s.to_string())).unwrap();
        assert_eq!(
            c(r#"{"b":1,"a":[1.50,true]}"#),
            r#"{"b":1,"a":[1.50,true]}"#
        );
        assert_eq!(
            c("{ \"a b\" : [ 1 ,\n\t2 ] , \"c\\\" d\":\"x \\\\\" }\r\n"),
            r#"{"a b":[1,2],"c\" d":"x \\"}"#
        );
        let raw = |s: &str| Some(RawValue::from_string(s.to_string()).unwrap());
        let what = || "v".to_string();
        assert_eq!(
            Format::Json.decode(what, raw(r#" {"k": "v"} "#)).unwrap(),
            Some(br#"{"k":"v"}"#.to_vec())
        );
        assert_eq!(Format::Json.decode(what, None).unwrap(), None);
        assert_eq!(
            Format::Binary.decode(what, raw(r#""aGk=""#)).unwrap(),
            Some(b"hi".to_vec())
        );
        assert!(Format::Binary.decode(what, raw("1")).is_err());
    }
}
