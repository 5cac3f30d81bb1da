//! Request and response plumbing shared by the handlers.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use serde::Serialize;

use crate::error::ApiError;

pub const V2: &str = "application/vnd.kafka.v2+json";
pub const V2_JSON: &str = "application/vnd.kafka.json.v2+json";
pub const V2_BINARY: &str = "application/vnd.kafka.binary.v2+json";
pub const JSON: &str = "application/json";

/// The media type of a request, lowercased, without parameters.
pub fn content_type(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let t = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    (!t.is_empty()).then_some(t)
}

/// Refuses a content type not in `allowed` (415).
pub fn require_content_type(headers: &HeaderMap, allowed: &[&str]) -> Result<String, ApiError> {
    let got = content_type(headers);
    match &got {
        Some(t) if allowed.contains(&t.as_str()) => Ok(t.clone()),
        _ => Err(ApiError::unsupported_media_type(got.as_deref(), allowed)),
    }
}

/// The whole body, refused with 413 past `limit` bytes.
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(ApiError::body_too_large(limit));
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::body_too_large(limit))
}

/// An empty body is allowed where the body is optional.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid_body(format!("The request body is not valid: {e}")))
}

pub fn parse_optional_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<Option<T>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    parse_json(body).map(Some)
}

/// A JSON answer with a given media type.
pub fn json_response<T: Serialize>(status: StatusCode, media: &'static str, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(media))],
            bytes,
        )
            .into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            500,
            format!("cannot encode the answer: {e}"),
        )
        .into_response(),
    }
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(field: &str, s: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| ApiError::invalid_field(format!("{field} is not valid base64: {e}")))
}

/// Refuses a produce body's schema-registry members (`key_schema_id`, v3's `schema_id`,
/// ...), each named as the client wrote it: Strata has no schema registry yet, and
/// ignoring one would write plain bytes while the client believes it wrote Avro,
/// Protobuf or JSON Schema. A member sent as null is absent, as in Confluent's own
/// answers (`"value_schema_id": null`).
pub fn refuse_schema_members<'a>(
    members: impl IntoIterator<Item = (String, &'a Option<serde_json::Value>)>,
) -> Result<(), ApiError> {
    for (name, v) in members {
        if v.is_some() {
            return Err(ApiError::invalid_field(format!(
                "{name} is not supported: it needs a schema registry, which Strata does not \
                 have yet (not built), so nothing was produced; send the data without it \
                 (v2: the json or binary format; v3: type BINARY, JSON or STRING)"
            )));
        }
    }
    Ok(())
}

/// Kafka's legal topic names: 1 to 249 of [a-zA-Z0-9._-]. Anything else cannot exist.
pub fn valid_topic_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Group and instance names: printable, bounded (they become client ids and URLs).
pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 249 && s.chars().all(|c| !c.is_control())
}

/// Percent-encodes a path segment (RFC 3986 unreserved characters stay as they are).
pub fn pct(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
