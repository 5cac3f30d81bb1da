//! Reading records through an instance, and the checks every read passes: records of
//! topics the caller may not read are given back (seeked to) rather than skipped.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;
use strata_authz::{Operation, ResourceType};
use utoipa::IntoParams;

use super::instance;
use crate::auth::Caller;
use crate::dlq::{OnDecodeError, on_decode_error};
use crate::error::{self, ApiError, ApiResult, ErrorBody};
use crate::service::{GroupConsumer, PartitionOffset, Record};
use crate::util;
use crate::v2::{ConsumerRecord, Format, encode_record};
use crate::{Shared, acl};

/// Seeks each partition of `records` back to its first record, so the next poll reads
/// them again.
pub(crate) async fn give_back(consumer: &dyn GroupConsumer, records: &[Record]) -> ApiResult<()> {
    let mut back: HashMap<(String, i32), i64> = HashMap::new();
    for r in records {
        back.entry((r.topic.clone(), r.partition))
            .and_modify(|o| *o = (*o).min(r.offset))
            .or_insert(r.offset);
    }
    let seeks = back
        .into_iter()
        .map(|((topic, partition), offset)| PartitionOffset {
            topic,
            partition,
            offset,
        })
        .collect();
    consumer.seek(seeks).await?;
    Ok(())
}

/// The records a poll got, when the caller may read every topic they come from (Kafka's
/// Fetch asks Read on each). Otherwise none is answered: all are given back (nothing is
/// skipped; the next poll reads them again) and the answer is 403, naming the topics the
/// caller may describe. Records of a topic it may not read come from a `topic_pattern`
/// that matches it, or from an ACL removed since the subscription.
pub(crate) async fn screen(
    s: &Shared,
    c: &Caller,
    consumer: &dyn GroupConsumer,
    records: Vec<Record>,
) -> ApiResult<Vec<Record>> {
    if !acl::enabled(s) || records.is_empty() {
        return Ok(records);
    }
    let topics: BTreeSet<&str> = records.iter().map(|r| r.topic.as_str()).collect();
    let denied: Vec<&str> = topics
        .into_iter()
        .filter(|t| !acl::allowed(s, c, Operation::Read, ResourceType::Topic, t, true))
        .collect();
    if denied.is_empty() {
        return Ok(records);
    }
    let named: Vec<&str> = denied
        .iter()
        .copied()
        .filter(|t| acl::may_describe(s, c, t))
        .collect();
    let e = if named.len() == denied.len() {
        acl::topics_denied(named)
    } else {
        acl::forbidden(format!(
            "Not authorized to access topics: [{}] (and topics assigned to this member \
             that you may not describe: subscribe only to topics you may read)",
            named.join(", ")
        ))
    };
    give_back(consumer, &records).await?;
    Err(e)
}

/// Query of a records request.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RecordsQuery {
    /// Milliseconds to wait for records [default: 1000]
    pub timeout: Option<u64>,
    /// Byte budget for keys, values and headers (at least one record is returned)
    pub max_bytes: Option<u64>,
}

/// Fetch records for the instance's assigned partitions.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/records", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path), RecordsQuery),
    responses(
        (status = 200, description = "Records", body = [ConsumerRecord], content_type = "application/vnd.kafka.binary.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 406, description = "Accept names another format than the instance's (40601)", body = ErrorBody),
        (status = 409, description = "A partition has no committed offset and the instance's auto.offset.reset is none (40903): commit an offset for it and subscribe again", body = ErrorBody),
        (status = 422, description = "A record is not JSON in a json instance with strata.on.decode.error fail (42203): the instance stops at it until it is nacked or sought past", body = ErrorBody),
    ))]
pub async fn records(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    query: Result<Query<RecordsQuery>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = query.map_err(|e| ApiError::invalid_field(e.body_text()))?;
    let i = instance(&s, &caller, &group, &name)?;
    if let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) {
        let other = match i.format {
            Format::Binary => "vnd.kafka.json",
            Format::Json => "vnd.kafka.binary",
        };
        if accept.contains(other) && !accept.contains(i.format.media()) {
            return Err(ApiError::new(
                StatusCode::NOT_ACCEPTABLE,
                error::CONSUMER_FORMAT_MISMATCH,
                format!(
                    "The instance reads the {:?} format; accept {}",
                    i.format,
                    i.format.media()
                ),
            ));
        }
    }
    let timeout = q
        .timeout
        .map_or(s.config.default_poll_timeout, Duration::from_millis)
        .min(s.config.max_poll_timeout);
    let max_bytes = q.max_bytes.map_or(s.config.default_max_bytes, |b| {
        b.clamp(1, s.config.default_max_bytes.max(1) as u64 * 8) as usize
    });
    let _busy = i.busy.lock().await;
    let got = i.consumer.poll(timeout, max_bytes).await;
    i.touch();
    let got = screen(&s, &caller, i.consumer.as_ref(), got?).await?;
    let mut out = Vec::with_capacity(got.len());
    for (n, r) in got.iter().enumerate() {
        let e = match encode_record(r, i.format) {
            Ok(x) => {
                out.push(x);
                continue;
            }
            Err(e) => e,
        };
        // Dead-lettered (the member is past it already: it was polled), or the reader
        // stops at it.
        let base = format!(
            "/consumers/{}/instances/{}",
            util::pct(&group),
            util::pct(&name)
        );
        let stop = format!(
            "The instance stops at it until you nack it (POST {base}/nack: it goes to the \
             dead-letter topic) or seek past it (POST {base}/positions). Or read the topic \
             with the binary format, or create the instance with \
             \"{}\": \"dead-letter\".",
            OnDecodeError::NAME
        );
        if let Err(e) = on_decode_error(&s, &caller, i.on_decode_error, r, e, &stop).await {
            // Give the records from here on back: the next read starts at them.
            give_back(i.consumer.as_ref(), &got[n..]).await?;
            if out.is_empty() {
                return Err(e);
            }
            break;
        }
    }
    Ok(util::json_response(StatusCode::OK, i.format.media(), &out))
}
