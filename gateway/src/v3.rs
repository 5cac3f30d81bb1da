//! Confluent REST Proxy v3's produce endpoint, `POST /v3/clusters/{cluster}/topics/{topic}/records`.
//!
//! A body with a Content-Length is read whole and validated whole before anything is
//! produced: one record gets one answer object with the record's own status; several
//! concatenated records get 200 and one answer object per record. A chunked body is a
//! stream, as Confluent's: records are produced as they arrive and answered record by
//! record (objects, one per line), each with its own `error_code` (200 or an HTTP
//! status); a record that cannot be parsed ends the stream with an error object.

use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use strata_authz::Operation;

use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult, ErrorBody};
use crate::service::{ProduceRecord, Produced, ServiceError};
use crate::util::{self, JSON};
use crate::v2::{HeaderJson, idempotent, partition_count};
use crate::{Shared, acl};

/// A key or a value. Confluent's `schema_id`, `schema_version`, `schema`, `subject` and
/// `subject_name_strategy` need a schema registry, which Strata does not have yet: they
/// are refused (422) unless null. Any other member is refused too, not ignored.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DataJson {
    /// BINARY (base64 data), JSON (any JSON data) or STRING (text) [default: JSON]
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    #[schema(value_type = Object, nullable)]
    pub data: Option<Value>,
    // Parsed only to be refused by name (an unknown member's error would not say why).
    #[serde(default)]
    #[schema(ignore)]
    pub schema_id: Option<Value>,
    #[serde(default)]
    #[schema(ignore)]
    pub schema_version: Option<Value>,
    #[serde(default)]
    #[schema(ignore)]
    pub schema: Option<Value>,
    #[serde(default)]
    #[schema(ignore)]
    pub subject: Option<Value>,
    #[serde(default)]
    #[schema(ignore)]
    pub subject_name_strategy: Option<Value>,
}

/// A record to produce. A member not listed here is refused (422), not ignored.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordJson {
    /// The partition; absent: by the key's hash
    pub partition_id: Option<i32>,
    #[serde(default)]
    pub headers: Vec<HeaderJson>,
    pub key: Option<DataJson>,
    pub value: Option<DataJson>,
    /// RFC 3339 time, or milliseconds since the epoch [default: now]
    #[schema(value_type = Option<String>)]
    pub timestamp: Option<Value>,
}

/// Size and type of a produced key or value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DataInfo {
    #[serde(rename = "type")]
    pub kind: String,
    pub size: usize,
}

/// Where a record went.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProducedJson {
    /// 200
    pub error_code: u16,
    pub cluster_id: String,
    pub topic_name: String,
    pub partition_id: i32,
    pub offset: i64,
    pub timestamp: Option<String>,
    pub key: Option<DataInfo>,
    pub value: Option<DataInfo>,
}

/// A cluster.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterJson {
    pub kind: String,
    pub cluster_id: String,
}

/// The clusters (one).
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterList {
    pub kind: String,
    pub data: Vec<ClusterJson>,
}

/// The cluster this gateway serves (v3 paths name its id). Open to every caller, as
/// Kafka's Metadata and DescribeCluster tell any client the cluster id.
#[utoipa::path(get, path = "/v3/clusters", tag = "v3",
    responses((status = 200, description = "The cluster", body = ClusterList, content_type = "application/json")))]
pub async fn list_clusters(State(s): State<Shared>) -> Response {
    util::json_response(
        StatusCode::OK,
        JSON,
        &ClusterList {
            kind: "KafkaClusterList".into(),
            data: vec![ClusterJson {
                kind: "KafkaCluster".into(),
                cluster_id: s.config.cluster_id.clone(),
            }],
        },
    )
}

/// A record ready to produce, and what to answer about it.
struct Parsed {
    record: ProduceRecord,
    key: Option<DataInfo>,
    value: Option<DataInfo>,
}

fn data(what: &str, d: Option<&DataJson>) -> ApiResult<(Option<Vec<u8>>, Option<DataInfo>)> {
    let Some(d) = d else { return Ok((None, None)) };
    util::refuse_schema_members([
        (format!("{what}.schema_id"), &d.schema_id),
        (format!("{what}.schema_version"), &d.schema_version),
        (format!("{what}.schema"), &d.schema),
        (format!("{what}.subject"), &d.subject),
        (
            format!("{what}.subject_name_strategy"),
            &d.subject_name_strategy,
        ),
    ])?;
    let kind = d.kind.as_deref().unwrap_or("JSON").to_ascii_uppercase();
    let bytes = match (kind.as_str(), &d.data) {
        (_, None | Some(Value::Null)) => None,
        ("BINARY", Some(Value::String(s))) => Some(util::unb64(&format!("{what}.data"), s)?),
        ("STRING", Some(Value::String(s))) => Some(s.as_bytes().to_vec()),
        ("BINARY" | "STRING", Some(_)) => {
            return Err(ApiError::invalid_field(format!(
                "{what}.data must be a string for type {kind}"
            )));
        }
        ("JSON", Some(v)) => Some(
            serde_json::to_vec(v)
                .map_err(|e| ApiError::invalid_field(format!("{what}.data: {e}")))?,
        ),
        _ => {
            return Err(ApiError::invalid_field(format!(
                "{what}.type '{kind}' is not supported: use BINARY, JSON or STRING (there is no schema registry)"
            )));
        }
    };
    let info = DataInfo {
        kind,
        size: bytes.as_ref().map_or(0, Vec::len),
    };
    Ok((bytes, Some(info)))
}

fn timestamp(v: Option<&Value>) -> ApiResult<Option<i64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            n.as_i64().filter(|t| *t >= 0).map(Some).ok_or_else(|| {
                ApiError::invalid_field("timestamp must be non-negative milliseconds")
            })
        }
        Some(Value::String(s)) => {
            let t = humantime::parse_rfc3339_weak(s)
                .map_err(|e| ApiError::invalid_field(format!("timestamp '{s}': {e}")))?;
            let ms = t
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_err(|_| ApiError::invalid_field("timestamp is before 1970"))?
                .as_millis();
            Ok(Some(i64::try_from(ms).map_err(|_| {
                ApiError::invalid_field("timestamp too large")
            })?))
        }
        Some(_) => Err(ApiError::invalid_field(
            "timestamp must be an RFC 3339 string or milliseconds",
        )),
    }
}

fn parse_record(v: Value, partitions: i32, topic: &str) -> ApiResult<Parsed> {
    let r: RecordJson = serde_json::from_value(v)
        .map_err(|e| ApiError::invalid_body(format!("not a record: {e}")))?;
    if let Some(p) = r.partition_id
        && !(0..partitions).contains(&p)
    {
        return Err(ApiError::partition_not_found(topic, p));
    }
    let (key, key_info) = data("key", r.key.as_ref())?;
    let (value, value_info) = data("value", r.value.as_ref())?;
    let mut headers = Vec::with_capacity(r.headers.len());
    for h in &r.headers {
        let v = match &h.value {
            None => None,
            Some(v) => Some(util::unb64(&format!("header '{}'", h.name), v)?),
        };
        headers.push((h.name.clone(), v));
    }
    Ok(Parsed {
        record: ProduceRecord {
            partition: r.partition_id,
            key,
            value,
            headers,
            timestamp: timestamp(r.timestamp.as_ref())?,
        },
        key: key_info,
        value: value_info,
    })
}

/// The answer's time, or None past year 9999: RFC 3339 has four-digit years (humantime's
/// Display fails there, and `to_string` would panic on it), while Kafka takes any
/// non-negative millisecond count, so such a record is produced and answered without
/// its time.
fn rfc3339(ms: Option<i64>) -> Option<String> {
    use std::fmt::Write;
    let ms = u64::try_from(ms?).ok()?;
    let t = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms))?;
    let mut out = String::new();
    write!(out, "{}", humantime::format_rfc3339_millis(t)).ok()?;
    Some(out)
}

fn produced_json(s: &Shared, topic: &str, p: &Parsed, r: &Produced) -> ProducedJson {
    ProducedJson {
        error_code: 200,
        cluster_id: s.config.cluster_id.clone(),
        topic_name: topic.to_string(),
        partition_id: r.partition,
        offset: r.offset,
        timestamp: rfc3339(r.timestamp.or(p.record.timestamp)),
        key: p.key.clone(),
        value: p.value.clone(),
    }
}

/// A streamed answer's error object: `error_code` is the HTTP status.
fn stream_error(e: &ApiError) -> Value {
    serde_json::json!({"error_code": e.status.as_u16(), "message": e.body.message})
}

fn line(v: &impl Serialize) -> Bytes {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// Produce records (see the module documentation for single, batched and streamed
/// bodies).
#[utoipa::path(post, path = "/v3/clusters/{cluster}/topics/{topic}/records", tag = "v3",
    params(
        ("cluster" = String, Path, description = "Cluster id (GET /v3/clusters)"),
        ("topic" = String, Path, description = "Topic name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Retries with the same key return the first answer"),
    ),
    request_body(content((RecordJson = "application/json"))),
    responses(
        (status = 200, description = "Where the record went (one object per record for several or a stream)", body = ProducedJson, content_type = "application/json"),
        (status = 403, description = "Not authorized to write to the topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown cluster, topic or partition", body = ErrorBody),
        (status = 413, description = "Body or record too large", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid record (42201, a member Strata does not know included) or field (42202, a schema-registry member such as schema_id or subject included: there is no schema registry yet)", body = ErrorBody),
        (status = 429, description = "Throttled", body = ErrorBody),
        (status = 503, description = "The broker cannot take writes", body = ErrorBody),
    ))]
pub async fn produce(
    State(s): State<Shared>,
    caller: Caller,
    Path((cluster, topic)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match produce_inner(s, caller, cluster, topic, headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn produce_inner(
    s: Shared,
    caller: Caller,
    cluster: String,
    topic: String,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    crate::v3_admin::check_cluster(&s, &cluster)?;
    // Before the topic's existence and before any replay of a stored answer.
    acl::topic(&s, &caller, Operation::Write, &topic)?;
    util::require_content_type(&headers, &[JSON])?;
    let streamed = !headers.contains_key(header::CONTENT_LENGTH)
        && !headers.contains_key(crate::v2::IDEMPOTENCY_KEY);
    if streamed {
        let count = partition_count(&s, &topic).await?;
        return Ok(stream(s, caller, topic, count, body));
    }
    let bytes = util::read_body(&headers, body, s.config.max_body_bytes).await?;
    let path = format!("/v3/{cluster}/{topic}");
    Ok(
        idempotent(&s, &caller, &headers, &[path.as_bytes(), &bytes], async {
            whole(&s, &topic, &bytes)
                .await
                .unwrap_or_else(IntoResponse::into_response)
        })
        .await,
    )
}

async fn whole(s: &Shared, topic: &str, bytes: &[u8]) -> ApiResult<Response> {
    let mut values = Vec::new();
    for v in serde_json::Deserializer::from_slice(bytes).into_iter::<Value>() {
        values.push(v.map_err(|e| {
            ApiError::invalid_body(format!("The request body is not valid JSON: {e}"))
        })?);
    }
    if values.is_empty() {
        return Err(ApiError::invalid_body("the body holds no record"));
    }
    let count = partition_count(s, topic).await?;
    let parsed = values
        .into_iter()
        .map(|v| parse_record(v, count, topic))
        .collect::<ApiResult<Vec<Parsed>>>()?;
    let results = s
        .service
        .produce(topic, parsed.iter().map(|p| p.record.clone()).collect())
        .await?;
    if parsed.len() == 1 {
        return match results.first() {
            Some(Ok(r)) => Ok(util::json_response(
                StatusCode::OK,
                JSON,
                &produced_json(s, topic, &parsed[0], r),
            )),
            Some(Err(e)) => Err(ApiError::from_service(e)),
            None => Err(ApiError::from_service(&ServiceError::new(
                -1,
                "no answer for the record",
            ))),
        };
    }
    let mut out = Vec::new();
    for (p, r) in parsed.iter().zip(&results) {
        out.extend_from_slice(&match r {
            Ok(r) => line(&produced_json(s, topic, p, r)),
            Err(e) => line(&stream_error(&ApiError::from_service(e))),
        });
    }
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static(JSON))],
        out,
    )
        .into_response())
}

/// Finds where the top-level JSON values of a stream end, incrementally: it keeps its
/// place (nesting depth, inside a string, after a backslash) between calls, so each byte
/// is looked at once however the stream is cut into chunks.
#[derive(Debug, Default)]
pub(crate) struct RecordSplitter {
    /// Bytes of the buffer already scanned.
    scanned: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// A value has started (a byte that is not whitespace since the last end).
    started: bool,
}

impl RecordSplitter {
    /// The ends (exclusive offsets into `buf`) of the values completed by the bytes
    /// not scanned yet.
    pub(crate) fn scan(&mut self, buf: &[u8], at_end: bool) -> Vec<usize> {
        let mut ends = Vec::new();
        for (i, &b) in buf.iter().enumerate().skip(self.scanned) {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if self.depth == 0 {
                        ends.push(i + 1);
                        self.started = false;
                    }
                }
                continue;
            }
            // A bare scalar at the top level also ends where an object, array or string
            // starts (`7{"value":1}` is two values, as serde_json's stream reads it, and
            // as a body with a Content-Length is read): cutting them as one made a
            // chunked body fail as invalid JSON where the whole body answers each.
            let scalar_ends = self.started && self.depth == 0;
            match b {
                b'{' | b'[' => {
                    if scalar_ends {
                        ends.push(i);
                    }
                    self.depth += 1;
                    self.started = true;
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        ends.push(i + 1);
                        self.started = false;
                    }
                }
                b'"' => {
                    if scalar_ends {
                        ends.push(i);
                    }
                    self.in_string = true;
                    self.started = true;
                }
                b' ' | b'\t' | b'\r' | b'\n' => {
                    // A bare scalar at the top level ends at whitespace.
                    if self.started && self.depth == 0 {
                        ends.push(i);
                        self.started = false;
                    }
                }
                _ => self.started = true,
            }
        }
        self.scanned = buf.len();
        // At the end of the stream a bare scalar ends there; an object or string still
        // open is left for the caller to report ("the stream ended inside a record").
        if at_end && self.started && self.depth == 0 && !self.in_string {
            ends.push(buf.len());
            self.started = false;
        }
        ends
    }

    /// The caller dropped the first `n` bytes of its buffer.
    pub(crate) fn consumed(&mut self, n: usize) {
        self.scanned -= n;
    }
}

/// A chunked body: records are produced in batches of whatever has arrived, in order,
/// and answered as they complete. Each batch asks for Write again, as each of a Kafka
/// producer's requests is: a stream outliving its ACL ends with a 403 error object.
fn stream(s: Shared, caller: Caller, topic: String, partitions: i32, body: Body) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let limit = s.config.max_body_bytes;
    tokio::spawn(async move {
        let mut input = body.into_data_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut splitter = RecordSplitter::default();
        let mut ended = false;
        loop {
            // Parse every whole record already buffered. The splitter scans each byte
            // once, so a record arriving in many small chunks costs its length, not its
            // length times the number of chunks.
            let mut batch: Vec<Result<Parsed, ApiError>> = Vec::new();
            let mut fatal = None;
            let mut consumed = 0;
            for end in splitter.scan(&buf, ended) {
                match serde_json::from_slice::<Value>(&buf[consumed..end]) {
                    Ok(v) => batch.push(parse_record(v, partitions, &topic)),
                    Err(e) => {
                        fatal = Some(ApiError::invalid_body(format!("not valid JSON: {e}")));
                        break;
                    }
                }
                consumed = end;
            }
            buf.drain(..consumed);
            splitter.consumed(consumed);
            if !batch.is_empty() {
                if let Err(e) = acl::topic(&s, &caller, Operation::Write, &topic) {
                    let _ = tx.send(line(&stream_error(&e))).await;
                    return;
                }
                let records: Vec<ProduceRecord> = batch
                    .iter()
                    .filter_map(|p| p.as_ref().ok().map(|p| p.record.clone()))
                    .collect();
                let mut results = if records.is_empty() {
                    Ok(Vec::new())
                } else {
                    s.service.produce(&topic, records).await
                }
                .map(Vec::into_iter);
                for p in &batch {
                    let out = match (p, &mut results) {
                        (Err(e), _) => line(&stream_error(e)),
                        (Ok(_), Err(e)) => line(&stream_error(&ApiError::from_service(e))),
                        (Ok(p), Ok(rs)) => match rs.next() {
                            Some(Ok(r)) => line(&produced_json(&s, &topic, p, &r)),
                            Some(Err(e)) => line(&stream_error(&ApiError::from_service(&e))),
                            None => line(&stream_error(&ApiError::from_service(
                                &ServiceError::new(-1, "no answer"),
                            ))),
                        },
                    };
                    if tx.send(out).await.is_err() {
                        return;
                    }
                }
            }
            if let Some(e) = fatal {
                let _ = tx.send(line(&stream_error(&e))).await;
                return;
            }
            if buf.len() > limit {
                let _ = tx
                    .send(line(&stream_error(&ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        error::RECORD_TOO_LARGE,
                        format!("a record is larger than {limit} bytes"),
                    ))))
                    .await;
                return;
            }
            if ended {
                if buf.iter().any(|b| !b.is_ascii_whitespace()) {
                    let _ = tx
                        .send(line(&stream_error(&ApiError::invalid_body(
                            "the stream ended inside a record",
                        ))))
                        .await;
                }
                return;
            }
            match input.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                Some(Err(_)) => return,
                None => ended = true,
            }
        }
    });
    let out = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static(JSON))],
        Body::from_stream(out),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::RecordSplitter;

    /// Splits `stream` fed in chunks of `step` bytes, as the handler does: the values
    /// found, as text.
    fn split(stream: &[u8], step: usize) -> (Vec<String>, String) {
        let mut s = RecordSplitter::default();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut chunks = stream.chunks(step.max(1)).peekable();
        loop {
            let at_end = chunks.peek().is_none();
            let mut consumed = 0;
            for end in s.scan(&buf, at_end) {
                out.push(
                    String::from_utf8(buf[consumed..end].to_vec())
                        .unwrap()
                        .trim()
                        .to_string(),
                );
                consumed = end;
            }
            buf.drain(..consumed);
            s.consumed(consumed);
            match chunks.next() {
                Some(c) => buf.extend_from_slice(c),
                None => break,
            }
        }
        (out, String::from_utf8(buf).unwrap())
    }

    #[test]
    fn records_are_found_however_the_stream_is_cut() {
        let stream = br#"{"value":{"a":"x}y","b":[1,{"c":"\"}"}]}} {"key":"k"}
{"value":"\\"}  7 {"headers":[]}"#;
        let want = vec![
            r#"{"value":{"a":"x}y","b":[1,{"c":"\"}"}]}}"#.to_string(),
            r#"{"key":"k"}"#.to_string(),
            r#"{"value":"\\"}"#.to_string(),
            "7".to_string(),
            r#"{"headers":[]}"#.to_string(),
        ];
        for step in [1, 2, 3, 7, 64, stream.len()] {
            let (got, rest) = split(stream, step);
            assert_eq!(got, want, "chunks of {step}");
            assert_eq!(rest, "");
        }
        // A bare scalar ends where a value starts right after it, as serde_json reads it.
        let (got, rest) = split(br#"7{"key":"k"}true"s"[1]"#, 1);
        assert_eq!(got, vec!["7", r#"{"key":"k"}"#, "true", r#""s""#, "[1]"]);
        assert_eq!(rest, "");
        // A record still open at the end is left over, not cut.
        let (got, rest) = split(br#"{"key":"k"} {"value":"unfinished"#, 5);
        assert_eq!(got, vec![r#"{"key":"k"}"#.to_string()]);
        assert_eq!(rest.trim(), r#"{"value":"unfinished"#);
    }

    #[test]
    fn a_large_record_in_tiny_chunks_is_scanned_once() {
        // 4 MiB in 1 KiB chunks: each byte is looked at once (the old handler re-parsed
        // the buffered prefix on every chunk, 4096 times over).
        let big = format!(r#"{{"value":"{}"}}"#, "x".repeat(4 << 20));
        let mut s = RecordSplitter::default();
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for c in big.as_bytes().chunks(1024) {
            buf.extend_from_slice(c);
            ends.extend(s.scan(&buf, false));
        }
        assert_eq!(ends, vec![big.len()]);
    }
}
