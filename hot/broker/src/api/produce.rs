//! Produce.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use strata_proto::ErrorCode;
use strata_proto::batch::{self, RecordBatch};

use super::{Pending, RequestContext, encode_response, msg, ready};
use crate::broker::Broker;

pub(super) fn handle(broker: &Arc<Broker>, ctx: RequestContext, req: ProduceRequest) -> Pending {
    let started = Instant::now();
    let acks = req.acks;
    let mut resp = ProduceResponse::default();
    let mut bytes_in = 0u64;
    for topic in req.topic_data {
        let mut out = TopicProduceResponse::default();
        out.name = topic.name.clone();
        out.topic_id = topic.topic_id;
        let name = if ctx.version >= 13 {
            broker
                .topic_by_id(strata_proto::TopicId(topic.topic_id))
                .map(|t| t.name.to_string())
        } else {
            Some(topic.name.0.to_string())
        };
        for p in topic.partition_data {
            let mut r = PartitionProduceResponse::default();
            r.index = p.index;
            let result = if !matches!(acks, -1..=1) {
                Err((
                    ErrorCode::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, not {acks}"),
                ))
            } else if req.transactional_id.is_some() {
                Err((
                    ErrorCode::InvalidTxnState,
                    "transactions are not supported".to_string(),
                ))
            } else {
                bytes_in += p.records.as_ref().map_or(0, |r| r.len() as u64);
                produce_partition(broker, name.as_deref(), p.index, p.records, acks)
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
    records: Option<Bytes>,
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
    for b in batch::batches(&records) {
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
    let mut buf = records.to_vec();
    let info = p.append(&mut buf).map_err(|e| {
        if e.is_retriable() {
            tracing::warn!(topic = %p.topic, partition = index, error = %e, "append failed");
        }
        (e.error_code(), e.to_string())
    })?;
    Ok((
        info.first_offset,
        info.log_append_time.unwrap_or(-1),
        p.log.log_start_offset(),
    ))
}
