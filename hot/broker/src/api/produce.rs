//! Produce.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_authz::Operation;
use strata_proto::ErrorCode;
use strata_proto::batch::{self, RecordBatch};

use super::{Pending, RequestContext, authz, encode_response, msg, ready};
use crate::broker::Broker;
use crate::partition::Partition;

/// Handles a produce request. `frame` is the request body the request was decoded from:
/// once the decoded request (whose records are slices of `frame`) is dropped, `frame` is
/// the only handle left, and the batches are appended in place instead of being copied
/// first (the log rewrites offsets in the batch headers).
///
/// A transactional producer's first batch to a partition in a transaction is appended
/// only once its coordinator confirms that the transaction is ongoing and added the
/// partition (KIP-890 part 1: a batch that arrives after its transaction was aborted
/// would otherwise start one that nobody ends, and hold the last stable offset
/// forever); later batches of the same transaction are in the partition's producer
/// state already.
pub(super) fn handle(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: ProduceRequest,
    frame: Bytes,
) -> Pending {
    // Kafka's KafkaApis.handleProduceRequest: a request carrying transactional records
    // needs Write on its transactional id, or the whole request is refused.
    if let Some(id) = req.transactional_id.as_deref()
        && has_transactional_records(&req)
        && !authz::transactional_id(broker, &ctx, Operation::Write, id)
    {
        let resp = refused(
            &req,
            &[],
            ErrorCode::TransactionalIdAuthorizationFailed,
            &format!("not authorized to write transactional id '{id}'"),
        );
        if req.acks == 0 {
            return ready(None);
        }
        return ready(encode_response(&ctx, &resp));
    }
    // Write on each topic, checked before the topic's existence so an unauthorized
    // client cannot learn which topics exist; its partitions are not appended.
    let authorized: Vec<bool> = if authz::authorizer(broker).is_none() {
        Vec::new()
    } else {
        req.topic_data
            .iter()
            .map(|t| {
                topic_name(broker, ctx.version, t)
                    .is_none_or(|name| authz::topic(broker, &ctx, Operation::Write, &name))
            })
            .collect()
    };
    let Some(id) = req.transactional_id.as_ref().map(|s| s.to_string()) else {
        return handle_verified(broker, ctx, req, frame, authorized);
    };
    let mut unverified = crate::txns::unverified_partitions(&broker.replicas, &req);
    // Only the authorized partitions go on to their coordinator (Kafka verifies what it
    // would append).
    unverified.retain(|(topic, ..)| {
        req.topic_data
            .iter()
            .zip(&authorized)
            .all(|(t, ok)| *ok || t.name.0.as_str() != topic.as_str())
    });
    if unverified.is_empty() {
        return handle_verified(broker, ctx, req, frame, authorized);
    }
    let broker = broker.clone();
    Box::pin(async move {
        match broker.txns.verify_txn_partitions(&id, &unverified).await {
            Ok(()) => handle_verified(&broker, ctx, req, frame, authorized).await,
            Err(code) => {
                tracing::debug!(transactional_id = %id, ?code, "transactional produce refused by its coordinator");
                let resp = refused(
                    &req,
                    &authorized,
                    code,
                    &format!(
                        "the transaction is not ongoing with this partition added ({code:?}): abort it"
                    ),
                );
                if req.acks == 0 {
                    return None;
                }
                encode_response(&ctx, &resp)
            }
        }
    })
}

/// The topic a produce request's entry names: by name, or from v13 by id (`None` for an
/// id no topic has).
fn topic_name(
    broker: &Broker,
    version: i16,
    topic: &kafka_protocol::messages::produce_request::TopicProduceData,
) -> Option<String> {
    if version >= 13 {
        broker
            .replicas
            .topic_by_id(strata_proto::TopicId(topic.topic_id))
            .map(|t| t.name.to_string())
    } else {
        Some(topic.name.0.to_string())
    }
}

/// Whether any partition's batch is transactional (Kafka's
/// `RequestUtils.hasTransactionalRecords`; v3+ carries one batch per partition).
fn has_transactional_records(req: &ProduceRequest) -> bool {
    req.topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .filter_map(|p| p.records.as_ref())
        .any(|r| batch::parse_header(r).is_ok_and(|h| h.is_transactional()))
}

/// An answer refusing every partition with `code`, except that the partitions of the
/// topics `authorized` marks false (when given) answer TOPIC_AUTHORIZATION_FAILED.
fn refused(
    req: &ProduceRequest,
    authorized: &[bool],
    code: ErrorCode,
    message: &str,
) -> ProduceResponse {
    let mut resp = ProduceResponse::default();
    for (i, t) in req.topic_data.iter().enumerate() {
        let mut out = TopicProduceResponse::default();
        out.name = TopicName(StrBytes::from_string(t.name.0.to_string()));
        out.topic_id = t.topic_id;
        let denied = authorized.get(i).is_some_and(|ok| !ok);
        for p in &t.partition_data {
            let mut r = PartitionProduceResponse::default();
            r.index = p.index;
            r.base_offset = -1;
            if denied {
                r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                r.error_message = msg(format!("not authorized to write to topic '{}'", t.name.0));
            } else {
                r.error_code = code.code();
                r.error_message = msg(message);
            }
            out.partition_responses.push(r);
        }
        resp.responses.push(out);
    }
    resp
}

fn handle_verified(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: ProduceRequest,
    frame: Bytes,
    // Per topic of the request: may the principal write it (empty: all may).
    authorized: Vec<bool>,
) -> Pending {
    let started = Instant::now();
    let acks = req.acks;
    let timeout_ms = req.timeout_ms;
    let transactional = req.transactional_id.is_some();
    let base = frame.as_ptr() as usize;
    // (partition, records range in `frame`)
    type Part = (i32, Option<Range<usize>>);
    // (topic name as sent, topic id, resolved name, authorized, its partitions)
    type Planned = (TopicName, uuid::Uuid, Option<String>, bool, Vec<Part>);
    let mut plan: Vec<Planned> = Vec::with_capacity(req.topic_data.len());
    for (i, topic) in req.topic_data.into_iter().enumerate() {
        let name = topic_name(broker, ctx.version, &topic);
        let allowed = authorized.get(i).copied().unwrap_or(true);
        let parts = topic
            .partition_data
            .into_iter()
            .map(|p| {
                let range = p.records.as_ref().map(|r| {
                    let start = r.as_ptr() as usize - base;
                    start..start + r.len()
                });
                (p.index, range)
            })
            .collect();
        // Owned copy of the name: `topic.name` is a slice of the frame.
        let topic_name = TopicName(StrBytes::from_string(topic.name.0.to_string()));
        plan.push((topic_name, topic.topic_id, name, allowed, parts));
    }
    // Every slice of `frame` is gone now (the request was consumed above).
    let frame_len = frame.len();
    let mut buf: BytesMut = frame.try_into_mut().unwrap_or_else(|shared| {
        metrics::counter!("strata_produce_copied_bytes_total").increment(shared.len() as u64);
        BytesMut::from(&shared[..])
    });
    let mut resp = ProduceResponse::default();
    let mut bytes_in = 0u64;
    // acks=all partitions to wait for: (topic index, partition index, partition, offset
    // after the batch).
    let mut waits: Vec<(usize, usize, Arc<Partition>, i64, i32)> = Vec::new();
    for (topic_name, topic_id, name, allowed, parts) in plan {
        let mut out = TopicProduceResponse::default();
        out.name = topic_name;
        out.topic_id = topic_id;
        for (index, range) in parts {
            let mut r = PartitionProduceResponse::default();
            r.index = index;
            let result = if !allowed {
                Err(Refusal::from((
                    ErrorCode::TopicAuthorizationFailed,
                    format!("not authorized to write to topic '{}'", out.name.0),
                )))
            } else if !matches!(acks, -1..=1) {
                Err(Refusal::from((
                    ErrorCode::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, not {acks}"),
                )))
            } else {
                let records = range.map(|r| &mut buf[r]);
                bytes_in += records.as_ref().map_or(0, |r| r.len() as u64);
                produce_partition(broker, name.as_deref(), index, records, acks, transactional)
            };
            match result {
                Ok(done) => {
                    r.base_offset = done.base_offset;
                    r.log_append_time_ms = done.log_append_time;
                    r.log_start_offset = done.log_start;
                    if let Some((p, offset, epoch)) = done.wait {
                        waits.push((
                            resp.responses.len(),
                            out.partition_responses.len(),
                            p,
                            offset,
                            epoch,
                        ));
                    }
                }
                Err(Refusal {
                    code,
                    message,
                    records,
                }) => {
                    r.error_code = code.code();
                    r.base_offset = -1;
                    if ctx.version >= 8 && !records.is_empty() {
                        // KIP-467: each record that broke a rule, with what it broke.
                        r.record_errors = records
                            .into_iter()
                            .map(|(i, why)| {
                                let mut e = BatchIndexAndErrorMessage::default();
                                e.batch_index = i;
                                e.batch_index_error_message = msg(why);
                                e
                            })
                            .collect();
                    } else if ctx.version >= 8
                        && (code == ErrorCode::InvalidRecord || code == ErrorCode::CorruptMessage)
                    {
                        let mut e = BatchIndexAndErrorMessage::default();
                        e.batch_index = 0;
                        e.batch_index_error_message = msg(message.clone());
                        r.record_errors = vec![e];
                    }
                    r.error_message = msg(message);
                    metrics::counter!("strata_produce_errors_total", "error" => format!("{code:?}")).increment(1);
                }
            }
            out.partition_responses.push(r);
        }
        resp.responses.push(out);
    }
    metrics::counter!("strata_produce_bytes_total").increment(bytes_in);
    // producer_byte_rate: the request's size, as Kafka records it.
    resp.throttle_time_ms = broker.security.record_quota(
        &ctx.principal,
        ctx.client_id.as_deref(),
        &ctx.mute,
        strata_quota::QuotaKey::ProducerByteRate,
        frame_len as f64,
    );
    if acks == 0 {
        // acks=0: the client expects no answer at all.
        return ready(None);
    }
    if waits.is_empty() {
        metrics::histogram!("strata_produce_seconds").record(started.elapsed().as_secs_f64());
        return ready(encode_response(&ctx, &resp));
    }
    // acks=all: the purgatory. The batches are appended (in request order, above); the
    // answer waits until the high-water mark passes each of them, or the ISR shrinks
    // below min.insync.replicas (NOT_ENOUGH_REPLICAS_AFTER_APPEND), or leadership moves,
    // or the request's timeout passes.
    let timeout = Duration::from_millis(timeout_ms.max(0) as u64);
    Box::pin(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        for (ti, pi, p, offset, epoch) in waits {
            let code = p.wait_acked(offset, epoch, deadline).await;
            if code != ErrorCode::None {
                let r = &mut resp.responses[ti].partition_responses[pi];
                r.error_code = code.code();
                r.error_message = msg(format!("{code:?} while waiting for the in-sync replicas"));
                metrics::counter!("strata_produce_errors_total", "error" => format!("{code:?}"))
                    .increment(1);
            }
        }
        metrics::histogram!("strata_produce_seconds").record(started.elapsed().as_secs_f64());
        encode_response(&ctx, &resp)
    })
}

/// Why a partition's batch was refused: the error, and (KIP-467) the records that broke
/// a per-record rule, by their index in the batch with what each broke. The batch is
/// refused whole, as Kafka's; a client that reads `record_errors` (Produce v8+) fails
/// those records with their own message and can send the others again.
struct Refusal {
    code: ErrorCode,
    message: String,
    records: Vec<(i32, String)>,
}

impl From<(ErrorCode, String)> for Refusal {
    fn from((code, message): (ErrorCode, String)) -> Refusal {
        Refusal {
            code,
            message,
            records: Vec::new(),
        }
    }
}

/// What an append left to report.
struct Appended {
    base_offset: i64,
    log_append_time: i64,
    log_start: i64,
    /// acks=all: the partition and the offset the high-water mark must reach.
    wait: Option<(Arc<Partition>, i64, i32)>,
}

/// Appends one partition's batch as its leader.
fn produce_partition(
    broker: &Broker,
    topic: Option<&str>,
    index: i32,
    records: Option<&mut [u8]>,
    acks: i16,
    transactional: bool,
) -> Result<Appended, Refusal> {
    let name = topic.unwrap_or("?");
    if crate::metadata::is_internal_topic(name) {
        // Kafka: "Cannot append to internal topic" (only its coordinator writes it).
        return Err(Refusal::from((
            ErrorCode::InvalidTopicException,
            format!("'{name}' is an internal topic: only the broker's coordinator writes to it"),
        )));
    }
    let md = broker.cluster();
    let Some(t) = topic.and_then(|t| md.topics.get(t)) else {
        return Err(Refusal::from((
            ErrorCode::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        )));
    };
    if index < 0 || index as usize >= t.partitions.len() {
        return Err(Refusal::from((
            ErrorCode::UnknownTopicOrPartition,
            format!("{name} has no partition {index}"),
        )));
    }
    let state = broker.replicas.topic(name);
    if let Some(reason) = state.as_ref().and_then(|s| s.offline.get(&index)) {
        return Err(Refusal::from((
            ErrorCode::KafkaStorageError,
            format!("{name}-{index} is offline on this broker: {reason}"),
        )));
    }
    let p = state
        .and_then(|s| s.partition(index).cloned())
        .filter(|p| p.is_leader())
        .ok_or_else(|| {
            (
                ErrorCode::NotLeaderOrFollower,
                format!("this broker does not lead {name}-{index}"),
            )
        })?;
    let records = records
        .filter(|r| !r.is_empty())
        .ok_or((ErrorCode::CorruptMessage, "no records".to_string()))?;
    let config = p.config();
    if config.writes_closed {
        return Err(Refusal::from((
            ErrorCode::PolicyViolation,
            match &config.repartitioned_to {
                Some(to) => format!(
                    "'{name}' is closed for writes: it was repartitioned into '{to}' (strata topic repartition); produce to '{to}'"
                ),
                None => format!("'{name}' is closed for writes (writes.closed=true)"),
            },
        )));
    }
    let compacted = config.cleanup_policy.compacts();
    let bounds = config
        .timestamp_bounds()
        .filter(|&(before, after)| before != i64::MAX || after != i64::MAX);
    let now_ms = broker.clock.now_ms();
    // compression.type: the batch in the topic's codec when it arrived in another.
    let mut recompressed: Option<Vec<u8>> = None;
    // Produce v3+ carries exactly one batch per partition (Kafka enforces the same).
    let mut count = 0;
    for b in batch::batches(records) {
        let b: RecordBatch<'_> = b.map_err(|e| (e.error_code(), e.to_string()))?;
        count += 1;
        let h = b.header();
        if h.is_control() {
            return Err(Refusal::from((
                ErrorCode::InvalidRecord,
                "producers may not write control batches".into(),
            )));
        }
        // Kafka: transactional records come with the producer's transactional id.
        if h.is_transactional() && !transactional {
            return Err(Refusal::from((
                ErrorCode::InvalidRecord,
                "transactional records must come in a produce request with a transactional id"
                    .into(),
            )));
        }
        // A compressed batch is small on the wire whatever it expands to: check what it
        // decompresses to (streamed, nothing kept), so no later reader of the log meets
        // a bomb.
        b.check_decompressed_size(broker.config.limits.max_decompressed_batch_bytes)
            .map_err(|e| (e.error_code(), e.to_string()))?;
        // One pass over the records for what needs them: a compacted log keeps the latest
        // record per key, so a record without a key has no place in it (Kafka's
        // LogValidator refuses it the same way); message.timestamp.before/after.max.ms
        // (its validateTimestamp).
        // Every record that breaks a rule is named (KIP-467), not only the first.
        // confluent.*.schema.validation: each key or value names, in its first five
        // bytes, a schema registered under the topic's subject (nothing else is parsed).
        // The ids each subject accepts are read once per batch; a miss asks again
        // (a schema registered a moment ago).
        let subjects = [
            (config.key_schema_validation, "key"),
            (config.value_schema_validation, "value"),
        ]
        .map(|(on, what)| {
            let subject = format!("{name}-{what}");
            let ids = if on {
                broker.schemas.read(|r| r.ids_in(&subject))
            } else {
                Vec::new()
            };
            (on, what, subject, ids)
        });
        let validates = subjects.iter().any(|(on, ..)| *on);
        if compacted || bounds.is_some() || validates {
            let records = b.records().map_err(|e| (e.error_code(), e.to_string()))?;
            let mut bad: Vec<(i32, String)> = Vec::new();
            let mut invalid = false;
            for (i, r) in records.iter().enumerate() {
                let r = r.map_err(|e| (e.error_code(), e.to_string()))?;
                let at = i32::try_from(i).unwrap_or(i32::MAX);
                let unregistered = subjects.iter().find_map(|(on, what, subject, ids)| {
                    let bytes = if *what == "key" { r.key } else { r.value };
                    on.then(|| schema_problem(broker, what, subject, ids, bytes))
                        .flatten()
                });
                if let Some(why) = unregistered {
                    invalid = true;
                    bad.push((at, format!("the record at batch index {i}: {why}")));
                } else if compacted && r.key.is_none() {
                    invalid = true;
                    bad.push((
                        at,
                        format!(
                            "Compacted topic cannot accept message without key in topic partition {name}-{index}."
                        ),
                    ));
                } else if let Some((before, after)) = bounds
                    && (now_ms.saturating_sub(r.timestamp) > before
                        || r.timestamp.saturating_sub(now_ms) > after)
                {
                    bad.push((
                        at,
                        format!(
                            "timestamp {} of the record at offset delta {} is out of range: at most {before} ms before and {after} ms after the broker's time {now_ms} (message.timestamp.before.max.ms / after.max.ms)",
                            r.timestamp,
                            r.offset - b.base_offset()
                        ),
                    ));
                }
            }
            if let Some((_, first)) = bad.first() {
                let message = match bad.len() {
                    1 => first.clone(),
                    n => format!("{first} ({n} records of the batch break the topic's rules)"),
                };
                return Err(Refusal {
                    // A missing key or an unregistered schema is an invalid record;
                    // timestamps alone, an invalid
                    // timestamp (Kafka's LogValidator answers the same codes).
                    code: if invalid {
                        ErrorCode::InvalidRecord
                    } else {
                        ErrorCode::InvalidTimestamp
                    },
                    message,
                    records: bad,
                });
            }
        }
        if let Some(codec) = config.compression_type
            && b.compression()
                .map_err(|e| (e.error_code(), e.to_string()))?
                != codec
        {
            recompressed = Some(
                strata_proto::rewrite::recompress_batch(&b, codec)
                    .map_err(|e| (e.error_code(), e.to_string()))?,
            );
        }
    }
    if count != 1 {
        return Err(Refusal::from((
            ErrorCode::InvalidRecord,
            format!(
                "a produce request must hold exactly one record batch per partition, not {count}"
            ),
        )));
    }
    broker
        .replicas
        .check_disk_cap(&p)
        .map_err(|e| (e.code, e.message))?;
    // acks=all is refused before the append when the ISR is below min.insync.replicas
    // (Kafka: NOT_ENOUGH_REPLICAS), so nothing is written that would live on too few
    // disks.
    if acks == -1 && !p.acks_all_allowed() {
        return Err(Refusal::from((
            ErrorCode::NotEnoughReplicas,
            format!(
                "min.insync.replicas is {} but the in-sync replicas are {:?}",
                p.config().min_insync_replicas,
                p.isr()
            ),
        )));
    }
    let records = match recompressed.as_mut() {
        Some(r) => &mut r[..],
        None => records,
    };
    let appended = records.len() as u64;
    let (info, epoch) = p.append(records).map_err(|e| {
        if e.is_retriable() {
            tracing::warn!(topic = %p.topic, partition = index, error = %e, "append failed");
        }
        (e.error_code(), e.to_string())
    })?;
    if p.tiered() && !info.duplicate {
        broker.replicas.note_tiered_append(appended);
    }
    let wait = (acks == -1).then(|| (p.clone(), info.last_offset + 1, epoch));
    Ok(Appended {
        base_offset: info.first_offset,
        log_append_time: info.log_append_time.unwrap_or(-1),
        log_start: p.log_start_offset(),
        wait,
    })
}

/// Why a record's key or value (`what`) does not carry, in Confluent's wire format
/// (magic byte 0, then a 4-byte big-endian schema id), the id of a schema registered
/// under `subject` (whose ids were `ids` when the batch arrived); `None` when it does,
/// or is null.
fn schema_problem(
    broker: &Broker,
    what: &str,
    subject: &str,
    ids: &[i32],
    bytes: Option<&[u8]>,
) -> Option<String> {
    let bytes = bytes?;
    let Some(&[0, a, b, c, d]) = bytes.first_chunk::<5>() else {
        return Some(format!(
            "its {what} is not in the schema registry's wire format (a 0 byte, then a 4-byte schema id), which confluent.{what}.schema.validation requires"
        ));
    };
    let id = i32::from_be_bytes([a, b, c, d]);
    let known = ids.binary_search(&id).is_ok() || broker.schemas.accepts(subject, id);
    (!known).then(|| {
        format!(
            "its {what} names schema id {id}, which is not registered under the subject {subject}"
        )
    })
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use strata_proto::Compression;
    use strata_proto::batch::build::{NewRecord, ProducerFields, batch};

    use super::*;

    fn request(transactional: bool) -> ProduceRequest {
        let mut b = batch(
            &[NewRecord::value(Bytes::from_static(b"v"), 0)],
            Compression::None,
            Some(ProducerFields {
                producer_id: 7,
                producer_epoch: 0,
                base_sequence: 0,
            }),
        )
        .to_vec();
        if transactional {
            batch::set_transactional(&mut b);
        }
        let mut req = ProduceRequest::default();
        for name in ["allowed", "denied"] {
            let mut t = TopicProduceData::default();
            t.name = TopicName(StrBytes::from_static_str(name));
            for index in 0..2 {
                let mut p = PartitionProduceData::default();
                p.index = index;
                p.records = Some(Bytes::from(b.clone()));
                t.partition_data.push(p);
            }
            req.topic_data.push(t);
        }
        req
    }

    #[test]
    fn transactional_records_are_spotted() {
        assert!(has_transactional_records(&request(true)));
        assert!(!has_transactional_records(&request(false)));
        assert!(!has_transactional_records(&ProduceRequest::default()));
    }

    #[test]
    fn a_refusal_keeps_the_authorization_failures() {
        let req = request(true);
        let codes = |resp: &ProduceResponse| -> Vec<Vec<i16>> {
            resp.responses
                .iter()
                .map(|t| t.partition_responses.iter().map(|p| p.error_code).collect())
                .collect()
        };
        let fenced = ErrorCode::InvalidTxnState.code();
        let denied = ErrorCode::TopicAuthorizationFailed.code();
        let resp = refused(&req, &[true, false], ErrorCode::InvalidTxnState, "x");
        assert_eq!(
            codes(&resp),
            vec![vec![fenced, fenced], vec![denied, denied]]
        );
        // Without authorization results, every partition gets the code.
        let txn = ErrorCode::TransactionalIdAuthorizationFailed;
        let resp = refused(&req, &[], txn, "x");
        assert_eq!(codes(&resp), vec![vec![txn.code(); 2]; 2]);
        assert!(
            resp.responses
                .iter()
                .flat_map(|t| &t.partition_responses)
                .all(|p| p.base_offset == -1)
        );
    }
}
