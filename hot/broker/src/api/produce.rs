//! Produce.

use std::sync::Arc;
use std::time::Instant;

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_proto::ErrorCode;
use strata_proto::batch::{self, RecordBatch};

use super::{Pending, RequestContext, encode_response, msg, ready};
use crate::broker::Broker;

/// Handles a produce request. `frame` is the request body the request was decoded from:
/// once the decoded request (whose records are slices of `frame`) is dropped, `frame` is
/// the only handle left, and the batches are appended in place instead of being copied
/// first (the log rewrites offsets in the batch headers).
pub(super) fn handle(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: ProduceRequest,
    frame: Bytes,
) -> Pending {
    let started = Instant::now();
    let acks = req.acks;
    let transactional = req.transactional_id.is_some();
    let base = frame.as_ptr() as usize;
    // (topic name as sent, topic id, resolved name, partition, records range in `frame`)
    type Part = (i32, Option<Range<usize>>);
    let mut plan: Vec<(TopicName, uuid::Uuid, Option<String>, Vec<Part>)> =
        Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        let name = if ctx.version >= 13 {
            broker
                .topic_by_id(strata_proto::TopicId(topic.topic_id))
                .map(|t| t.name.to_string())
        } else {
            Some(topic.name.0.to_string())
        };
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
        plan.push((topic_name, topic.topic_id, name, parts));
    }
    // Every slice of `frame` is gone now (the request was consumed above).
    let mut buf: BytesMut = frame.try_into_mut().unwrap_or_else(|shared| {
        metrics::counter!("strata_produce_copied_bytes_total").increment(shared.len() as u64);
        BytesMut::from(&shared[..])
    });
    let mut resp = ProduceResponse::default();
    let mut bytes_in = 0u64;
    for (topic_name, topic_id, name, parts) in plan {
        let mut out = TopicProduceResponse::default();
        out.name = topic_name;
        out.topic_id = topic_id;
        for (index, range) in parts {
            let mut r = PartitionProduceResponse::default();
            r.index = index;
            let result = if !matches!(acks, -1..=1) {
                Err((
                    ErrorCode::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, not {acks}"),
                ))
            } else if transactional {
                Err((
                    ErrorCode::InvalidTxnState,
                    "transactions are not supported".to_string(),
                ))
            } else {
                let records = range.map(|r| &mut buf[r]);
                bytes_in += records.as_ref().map_or(0, |r| r.len() as u64);
                produce_partition(broker, name.as_deref(), index, records, acks)
            };
            match result {
                Ok((base_offset, log_append_time, log_start)) => {
                    r.base_offset = base_offset;
                    r.log_append_time_ms = log_append_time;
                    r.log_start_offset = log_start;
                }
                Err((code, message)) => {
                    r.error_code = code.code();
                    r.base_offset = -1;
                    if ctx.version >= 8
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
    metrics::histogram!("strata_produce_seconds").record(started.elapsed().as_secs_f64());
    if acks == 0 {
        // acks=0: the client expects no answer at all.
        return ready(None);
    }
    ready(encode_response(&ctx, &resp))
}

/// Appends one partition's batch. Returns (base offset, log append time or -1, log start).
fn produce_partition(
    broker: &Broker,
    topic: Option<&str>,
    index: i32,
    records: Option<&mut [u8]>,
    acks: i16,
) -> Result<(i64, i64, i64), (ErrorCode, String)> {
    let unknown = || {
        (
            ErrorCode::UnknownTopicOrPartition,
            format!("{}-{index} is not hosted here", topic.unwrap_or("?")),
        )
    };
    let p = topic
        .and_then(|t| broker.partition(t, index))
        .ok_or_else(unknown)?;
    let records = records
        .filter(|r| !r.is_empty())
        .ok_or((ErrorCode::CorruptMessage, "no records".to_string()))?;
    // Produce v3+ carries exactly one batch per partition (Kafka enforces the same).
    let mut count = 0;
    for b in batch::batches(records) {
        let b: RecordBatch<'_> = b.map_err(|e| (e.error_code(), e.to_string()))?;
        count += 1;
        let h = b.header();
        if h.is_control() {
            return Err((
                ErrorCode::InvalidRecord,
                "producers may not write control batches".into(),
            ));
        }
        if h.is_transactional() {
            return Err((
                ErrorCode::InvalidTxnState,
                "transactions are not supported".into(),
            ));
        }
    }
    if count != 1 {
        return Err((
            ErrorCode::InvalidRecord,
            format!(
                "a produce request must hold exactly one record batch per partition, not {count}"
            ),
        ));
    }
    // One replica: the ISR is this broker alone.
    broker.check_disk_cap(&p).map_err(|e| (e.code, e.message))?;
    let config = p.config();
    if acks == -1 && config.min_insync_replicas > 1 {
        return Err((
            ErrorCode::NotEnoughReplicas,
            format!(
                "min.insync.replicas is {} but the partition has 1 in-sync replica",
                config.min_insync_replicas
            ),
        ));
    }
    let appended = records.len() as u64;
    let info = p.append(records).map_err(|e| {
        if e.is_retriable() {
            tracing::warn!(topic = %p.topic, partition = index, error = %e, "append failed");
        }
        (e.error_code(), e.to_string())
    })?;
    if p.tiered() && !info.duplicate {
        broker.note_tiered_append(appended);
    }
    Ok((
        info.first_offset,
        info.log_append_time.unwrap_or(-1),
        p.log_start_offset(),
    ))
}
