//! `GET /consumers/{group}/stream?topic=...`: a group member whose records arrive as
//! server-sent events, committed as the client acknowledges them.
//!
//! The first event (`event: session`) names the session and its ack URI; every record
//! is an `event: record` whose `id` is `topic/partition/offset`. The client
//! acknowledges with `POST /consumers/{group}/stream/{session}/ack` (`{"offsets":
//! [{"topic","partition","offset"}]}`, each the last record it processed), and the
//! gateway commits the offset after it for the group. A client that reconnects with
//! `Last-Event-ID` acknowledges that event (best effort: the commit is made before the
//! new member joins). Records never acknowledged are read again by whoever gets the
//! partition next: delivery is at least once.
//!
//! A stream asks Read on the group and on each topic when it opens, and again for each
//! batch of records it polls (as each of a Kafka consumer's fetches is checked): a
//! stream whose ACLs are removed ends with an `error` event, its unacknowledged records
//! left for the next member. Only the principal that opened a session may acknowledge
//! on it.
//!
//! In the json format, a record whose key or value is not JSON is handled as a v2
//! instance handles it (`strata.on.decode.error`, see `crate::dlq`): by default an
//! `error` event names it and its partition is held there (the other partitions go on)
//! until the client nacks it; with `dead-letter` it is copied to the dead-letter topic
//! and a `dead-letter` event with the record's id takes its place.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use strata_authz::Operation;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::consumers::StreamMember;
use crate::consumers::instances::too_many;
use crate::consumers::offsets::Offsets;
use crate::consumers::records::screen;
use crate::dlq::{DeadLetterAt, OnDecodeError, on_decode_error};
use crate::error::{self, ApiError, ApiResult, ErrorBody};
use crate::service::{ConsumerSettings, GroupConsumer, OffsetReset, PartitionOffset, Record};
use crate::util::{self, JSON, V2};
use crate::v2::{Format, encode_record};
use crate::{Shared, acl};

/// Query of a stream.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Topics, comma-separated
    pub topic: String,
    /// binary (base64 keys and values, default) or json
    pub format: Option<Format>,
    /// Where a group without a committed offset starts: earliest or latest (default)
    #[serde(rename = "auto.offset.reset")]
    #[param(rename = "auto.offset.reset")]
    pub auto_offset_reset: Option<String>,
    /// In the json format, a record whose key or value is not JSON: fail (the default:
    /// an `error` event naming it, and its partition is held there until the client
    /// nacks it) or dead-letter (copied to the dead-letter topic as a nack does, with
    /// the decode error as the reason, and a `dead-letter` event in its place)
    #[serde(rename = "strata.on.decode.error")]
    #[param(rename = "strata.on.decode.error")]
    pub on_decode_error: Option<String>,
}

/// A `dead-letter` event: a record the stream could not show, copied to the
/// dead-letter topic by itself (`strata.on.decode.error=dead-letter`). Its id is the
/// record's, so acknowledging it (or reconnecting past it) commits past it as a record.
#[derive(Debug, Serialize)]
struct DeadLetterEvent {
    topic: String,
    partition: i32,
    offset: i64,
    reason: String,
    dead_letter: DeadLetterAt,
}

/// The first event of a stream.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionJson {
    pub session_id: String,
    /// POST acknowledgements here
    pub ack_uri: String,
    /// POST a record the client rejects here (it goes to the topic's dead-letter topic)
    pub nack_uri: String,
}

/// Server-sent events: `event: session` first, then `event: record` with id
/// `topic/partition/offset` and a record (as the v2 consumer records) as data. In the
/// json format, a record that is not JSON is an `event: error` naming it, its partition
/// held there until the client nacks it (`strata.on.decode.error=fail`, the default),
/// or an `event: dead-letter` with the record's id once it is copied to the
/// dead-letter topic (`dead-letter`).
#[utoipa::path(get, path = "/consumers/{group}/stream", tag = "strata",
    params(
        ("group" = String, Path, description = "Consumer group"),
        ("Last-Event-ID" = Option<String>, Header, description = "topic/partition/offset of the last event processed: acknowledged before streaming"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "An event stream", content_type = "text/event-stream", body = String),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown topic (40401)", body = ErrorBody),
        (status = 422, description = "Invalid query (42202)", body = ErrorBody),
        (status = 429, description = "Too many open streams and instances", body = ErrorBody),
    ))]
pub async fn stream(
    State(s): State<Shared>,
    caller: Caller,
    Path(group): Path<String>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = query.map_err(|e| ApiError::invalid_field(e.body_text()))?;
    if !util::valid_name(&group) {
        return Err(ApiError::invalid_field(
            "the group name must be 1 to 249 printable characters",
        ));
    }
    let topics: Vec<String> = q
        .topic
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if topics.is_empty() {
        return Err(ApiError::invalid_field("topic names at least one topic"));
    }
    acl::group(&s, &caller, Operation::Read, &group)?;
    acl::topics(
        &s,
        &caller,
        Operation::Read,
        topics.iter().map(String::as_str),
    )?;
    for t in &topics {
        crate::v2::partition_count(&s, t).await?;
    }
    let offset_reset = match q.auto_offset_reset.as_deref() {
        None | Some("latest") => OffsetReset::Latest,
        Some("earliest") => OffsetReset::Earliest,
        Some(o) => {
            return Err(ApiError::invalid_field(format!(
                "auto.offset.reset '{o}': use earliest or latest"
            )));
        }
    };
    let format = q.format.unwrap_or_default();
    let policy =
        OnDecodeError::parse(q.on_decode_error.as_deref()).map_err(ApiError::invalid_field)?;
    if !s.consumers.has_room() {
        return Err(too_many());
    }
    let consumer: Arc<dyn GroupConsumer> = Arc::from(
        s.service
            .consumer(
                &group,
                ConsumerSettings {
                    offset_reset,
                    auto_commit: false,
                },
            )
            .await?,
    );
    if let Some(last) = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_event_id)
        && acl::topic(&s, &caller, Operation::Read, &last.topic).is_ok()
        && let Err(e) = consumer
            .commit(Some(vec![PartitionOffset {
                offset: last.offset + 1,
                ..last
            }]))
            .await
    {
        tracing::info!(group = %group, error = %e, "Last-Event-ID commit failed");
    }
    if let Err(e) = consumer.subscribe(topics).await {
        consumer.close().await;
        return Err(e.into());
    }
    let session = uuid::Uuid::new_v4().to_string();
    if let Ok(mut m) = s.consumers.streams.lock() {
        m.insert(
            session.clone(),
            StreamMember {
                group: group.clone(),
                principal: caller.principal.clone(),
                consumer: consumer.clone(),
            },
        );
    }
    let ack_uri = format!(
        "/consumers/{}/stream/{session}/ack",
        crate::util::pct(&group)
    );
    let nack_uri = format!(
        "/consumers/{}/stream/{session}/nack",
        crate::util::pct(&group)
    );
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(256);
    let first = Event::default().event("session").json_data(SessionJson {
        session_id: session.clone(),
        ack_uri,
        nack_uri: nack_uri.clone(),
    });
    if let Ok(e) = first {
        let _ = tx.try_send(e);
    }
    let state = s.clone();
    let session_id = session.clone();
    metrics::gauge!("strata_http_sse_streams").increment(1.0);
    tokio::spawn(async move {
        'outer: loop {
            let got = tokio::select! {
                _ = tx.closed() => break,
                got = consumer.poll(Duration::from_millis(500), 1 << 20) => got,
            };
            // Each batch is asked for as each Kafka fetch is: Read on the group and on
            // every topic it comes from.
            let got = match got {
                Ok(records) if !records.is_empty() => {
                    match acl::group(&state, &caller, Operation::Read, &group) {
                        Ok(()) => screen(&state, &caller, consumer.as_ref(), records).await,
                        Err(e) => Err(e),
                    }
                }
                Ok(records) => Ok(records),
                Err(e) => {
                    let _ = tx
                        .send(Event::default().event("error").data(e.message.clone()))
                        .await;
                    if !e.retriable() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            match got {
                Ok(records) => {
                    // Partitions held at a record this batch could not show: their
                    // records after it wait for the client's nack.
                    let mut held: Vec<(&str, i32)> = Vec::new();
                    for r in &records {
                        if held.contains(&(r.topic.as_str(), r.partition)) {
                            continue;
                        }
                        let ev = match encode_record(r, format) {
                            Ok(rec) => Event::default()
                                .event("record")
                                .id(format!("{}/{}/{}", r.topic, r.partition, r.offset))
                                .json_data(rec),
                            Err(e) => {
                                let (ev, held_now) = undecodable(
                                    &state,
                                    &caller,
                                    consumer.as_ref(),
                                    policy,
                                    &nack_uri,
                                    r,
                                    e,
                                )
                                .await;
                                if held_now {
                                    held.push((r.topic.as_str(), r.partition));
                                }
                                ev
                            }
                        };
                        let Ok(ev) = ev else { continue };
                        if tx.send(ev).await.is_err() {
                            break 'outer;
                        }
                    }
                }
                Err(e) => {
                    // Not authorized any more: the stream ends.
                    let _ = tx
                        .send(Event::default().event("error").data(e.body.message))
                        .await;
                    break;
                }
            }
        }
        if let Ok(mut m) = state.consumers.streams.lock() {
            m.remove(&session_id);
        }
        metrics::gauge!("strata_http_sse_streams").decrement(1.0);
        consumer.close().await;
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    let mut r = Sse::new(events)
        // Also how soon a vanished client is noticed (the write fails): a member that
        // holds partitions for nobody should not linger.
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&session) {
        r.headers_mut().insert("strata-stream-session", v);
    }
    Ok(r)
}

/// The event for a record the stream cannot show in its format: `dead-letter` once
/// `policy` dead-lettered it (with the record's id, so acknowledging it commits past it
/// as a record); or the `error` that stops its partition, held at the record until the
/// client nacks it (true).
async fn undecodable(
    s: &Shared,
    caller: &Caller,
    consumer: &dyn GroupConsumer,
    policy: OnDecodeError,
    nack_uri: &str,
    r: &Record,
    error: String,
) -> (Result<Event, axum::Error>, bool) {
    let stop = format!(
        "The stream holds partition {} of '{}' at it until you nack it (POST {nack_uri}: \
         it goes to the dead-letter topic); the other partitions go on. Or read the topic \
         with format=binary, or open the stream with {}=dead-letter.",
        r.partition,
        r.topic,
        OnDecodeError::NAME
    );
    match on_decode_error(s, caller, policy, r, error.clone(), &stop).await {
        Ok(dead_letter) => {
            let ev = Event::default()
                .event("dead-letter")
                .id(format!("{}/{}/{}", r.topic, r.partition, r.offset))
                .json_data(DeadLetterEvent {
                    topic: r.topic.clone(),
                    partition: r.partition,
                    offset: r.offset,
                    reason: error,
                    dead_letter,
                });
            (ev, false)
        }
        Err(e) => {
            let at = PartitionOffset {
                topic: r.topic.clone(),
                partition: r.partition,
                offset: r.offset,
            };
            // Not held (a rebalance moved the partition away): its new member reads it
            // from the group's committed offset.
            if let Err(h) = consumer.hold(&at).await {
                tracing::info!(error = %h, "cannot hold a partition at a record");
            }
            (
                Ok(Event::default().event("error").data(e.body.message)),
                true,
            )
        }
    }
}

/// `topic/partition/offset`.
fn parse_event_id(id: &str) -> Option<PartitionOffset> {
    let mut it = id.rsplitn(3, '/');
    let offset: i64 = it.next()?.parse().ok()?;
    let partition: i32 = it.next()?.parse().ok()?;
    let topic = it.next()?;
    (util::valid_topic_name(topic) && partition >= 0 && offset >= 0).then(|| PartitionOffset {
        topic: topic.to_string(),
        partition,
        offset,
    })
}

/// Acknowledge records of a stream: each offset is the last record processed in its
/// partition; the group commits the offset after it.
#[utoipa::path(post, path = "/consumers/{group}/stream/{session}/ack", tag = "strata",
    params(("group" = String, Path), ("session" = String, Path, description = "From the stream's session event")),
    request_body(content(
        (Offsets = "application/json"),
        (Offsets = "application/vnd.kafka.v2+json"),
    )),
    responses(
        (status = 204, description = "Committed"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown or closed session (40405)", body = ErrorBody),
        (status = 409, description = "The session's member does not own a partition now (rebalanced)", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn ack(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, session)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let consumer = session_consumer(&s, &caller, &group, &session)?;
    util::require_content_type(&headers, &[JSON, V2])?;
    let bytes = util::read_body(&headers, body, s.config.max_body_bytes).await?;
    let req: Offsets = util::parse_json(&bytes)?;
    if req.offsets.is_empty() {
        return Err(ApiError::invalid_body("offsets must not be empty"));
    }
    acl::topics(
        &s,
        &caller,
        Operation::Read,
        req.offsets.iter().map(|o| o.topic.as_str()),
    )?;
    let mut offsets = Vec::with_capacity(req.offsets.len());
    for o in req.offsets {
        if !util::valid_topic_name(&o.topic) || o.partition < 0 || o.offset < 0 {
            return Err(ApiError::invalid_field(format!(
                "invalid offset {}/{}/{}",
                o.topic, o.partition, o.offset
            )));
        }
        offsets.push(PartitionOffset {
            topic: o.topic,
            partition: o.partition,
            offset: o.offset.saturating_add(1),
        });
    }
    consumer.commit(Some(offsets)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The member of the caller's stream `session` of `group` (Read on the group).
pub(crate) fn session_consumer(
    s: &Shared,
    caller: &Caller,
    group: &str,
    session: &str,
) -> ApiResult<Arc<dyn crate::service::GroupConsumer>> {
    acl::group(s, caller, Operation::Read, group)?;
    s.consumers
        .streams
        .lock()
        .ok()
        .and_then(|m| {
            m.get(session)
                .filter(|m| m.group == group && m.principal == caller.principal)
                .map(|m| m.consumer.clone())
        })
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                error::STREAM_SESSION_NOT_FOUND,
                "Stream session not found (closed or never opened).",
            )
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn event_ids_round_trip() {
        let p = parse_event_id("a.b-c/3/42").unwrap();
        assert_eq!((p.topic.as_str(), p.partition, p.offset), ("a.b-c", 3, 42));
        assert!(parse_event_id("x/-1/2").is_none());
        assert!(parse_event_id("nope").is_none());
    }
}
