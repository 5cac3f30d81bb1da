//! Fetch, with min_bytes/max_wait long polling.
//!
//! Fetch sessions (KIP-227) are refused cleanly: a client asking for one gets session id
//! 0, which tells it to keep sending full fetch requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use strata_proto::{ErrorCode, TopicId};
use tokio::sync::watch;

use super::{Pending, RequestContext, encode_response};
use crate::broker::Broker;
use crate::partition::Partition;

pub(super) fn handle(broker: Arc<Broker>, ctx: RequestContext, req: FetchRequest) -> Pending {
    Box::pin(async move {
        let started = Instant::now();
        let wait =
            Duration::from_millis(req.max_wait_ms.max(0) as u64).min(broker.config.max_fetch_wait);
        let deadline = started + wait;
        let mut resp = FetchResponse::default();
        // Sessionless (epoch -1) and "create a session" (id 0, epoch 0) get full fetches
        // and session id 0; anything naming a session we never created is an error.
        if req.session_id != 0 {
            resp.error_code = ErrorCode::FetchSessionIdNotFound.code();
            return encode_response(&ctx, &resp);
        }
        if req.session_epoch > 0 {
            resp.error_code = ErrorCode::InvalidFetchSessionEpoch.code();
            return encode_response(&ctx, &resp);
        }
        loop {
            let (resp, total, has_error, mut watches) = fetch_once(&broker, &ctx, &req);
            let now = Instant::now();
            if total >= req.min_bytes.max(0) as usize
                || has_error
                || now >= deadline
                || watches.is_empty()
            {
                metrics::counter!("strata_fetch_bytes_total").increment(total as u64);
                return encode_response(&ctx, &resp);
            }
            // Wait for any requested partition's high-water mark to move, or the deadline.
            let changed =
                futures::future::select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
            let _ = tokio::time::timeout_at(deadline.into(), changed).await;
        }
    })
}

type FetchOnce = (FetchResponse, usize, bool, Vec<watch::Receiver<i64>>);

fn fetch_once(broker: &Broker, ctx: &RequestContext, req: &FetchRequest) -> FetchOnce {
    let mut resp = FetchResponse::default();
    let mut budget = req.max_bytes.max(0) as usize;
    let mut total = 0usize;
    let mut any_data = false;
    let mut has_error = false;
    let mut watches = Vec::new();
    for topic in &req.topics {
        let mut out = FetchableTopicResponse::default();
        out.topic = topic.topic.clone();
        out.topic_id = topic.topic_id;
        let (state, unknown_code) = if ctx.version >= 13 {
            (
                broker.topic_by_id(TopicId(topic.topic_id)),
                ErrorCode::UnknownTopicId,
            )
        } else {
            (
                broker.topic(topic.topic.0.as_str()),
                ErrorCode::UnknownTopicOrPartition,
            )
        };
        for fp in &topic.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = fp.partition;
            pd.high_watermark = -1;
            pd.last_stable_offset = -1;
            pd.log_start_offset = -1;
            pd.preferred_read_replica = BrokerId(-1);
            let p = state.as_ref().and_then(|t| {
                usize::try_from(fp.partition)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
            });
            let code = match p {
                None => unknown_code,
                Some(p) => {
                    watches.push(p.watch_high_watermark());
                    read_partition(
                        p,
                        fp.fetch_offset,
                        fp.current_leader_epoch,
                        fp.partition_max_bytes,
                        &mut budget,
                        &mut any_data,
                        &mut pd,
                    )
                }
            };
            if code != ErrorCode::None {
                has_error = true;
                pd.error_code = code.code();
            }
            total += pd.records.as_ref().map_or(0, |r| r.len());
            out.partitions.push(pd);
        }
        resp.responses.push(out);
    }
    (resp, total, has_error, watches)
}

fn read_partition(
    p: &Partition,
    offset: i64,
    current_leader_epoch: i32,
    partition_max_bytes: i32,
    budget: &mut usize,
    any_data: &mut bool,
    pd: &mut PartitionData,
) -> ErrorCode {
    let epoch = p.leader_epoch();
    if current_leader_epoch >= 0 && current_leader_epoch < epoch {
        return ErrorCode::FencedLeaderEpoch;
    }
    if current_leader_epoch > epoch {
        return ErrorCode::UnknownLeaderEpoch;
    }
    let hwm = p.high_watermark();
    let start = p.log.log_start_offset();
    pd.high_watermark = hwm;
    pd.last_stable_offset = hwm;
    pd.log_start_offset = start;
    pd.aborted_transactions = None;
    if offset < start || offset > p.log.log_end_offset() {
        return ErrorCode::OffsetOutOfRange;
    }
    if offset >= hwm {
        return ErrorCode::None;
    }
    // KIP-74: the first partition with data returns at least one whole batch even past
    // the limits; later partitions only what fits in what is left of max_bytes.
    let limit =
        (partition_max_bytes.max(0) as usize).min(if *any_data { *budget } else { usize::MAX });
    if limit == 0 && *any_data {
        return ErrorCode::None;
    }
    match p.log.read(offset, limit.max(1), Some(hwm)) {
        Ok(r) => {
            if r.data.is_empty() || (*any_data && r.data.len() > *budget) {
                return ErrorCode::None;
            }
            *budget = budget.saturating_sub(r.data.len());
            *any_data = true;
            pd.records = Some(r.data);
            ErrorCode::None
        }
        Err(e) => {
            if e.error_code() != ErrorCode::OffsetOutOfRange {
                tracing::warn!(topic = %p.topic, partition = p.index, offset, error = %e, "fetch read failed");
            }
            e.error_code()
        }
    }
}
