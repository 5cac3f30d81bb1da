//! Fetch, with min_bytes/max_wait long polling, from the partition's tiered log (which
//! serves below the local log start from the remote tier).
//!
//! Fetch sessions (KIP-227, [`crate::fetch_sessions`]): an incremental fetch names only
//! what changed and is answered with only what has news.
//!
//! Remote reads run concurrently across the partitions of one fetch (Kafka served one
//! remote partition per fetch until 2025) on the tier's bounded pool; they are async,
//! so a slow GET holds up only the fetch that asked for it, never other connections.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use strata_authz::Operation;
use strata_proto::{ErrorCode, Offset, TopicId};

use super::frame::MoreRecords;
use super::{Pending, RequestContext, authz, encode_response};
use crate::broker::Broker;
use crate::partition::Partition;

pub(super) fn handle(broker: Arc<Broker>, ctx: RequestContext, req: FetchRequest) -> Pending {
    Box::pin(async move {
        let started = Instant::now();
        let wait =
            Duration::from_millis(req.max_wait_ms.max(0) as u64).min(broker.config.max_fetch_wait);
        let deadline = started + wait;
        let privileged = replica_id(&ctx, &req) >= 0;
        // An incremental fetch stands for its session's partitions: `req` from here on is
        // that request.
        let (session, req) = match broker.fetch_sessions.begin(
            ctx.version,
            &req,
            &ctx.principal,
            privileged,
            started,
        ) {
            Ok((kind, effective)) => (kind, effective.unwrap_or(req)),
            Err(code) => {
                let mut resp = FetchResponse::default();
                resp.error_code = code.code();
                return encode_response(&ctx, &resp);
            }
        };
        // Authorization, once per request (as Kafka's KafkaApis.handleFetchRequest): a
        // follower needs ClusterAction on the cluster, else every partition answers
        // TOPIC_AUTHORIZATION_FAILED; a consumer needs Read on each topic, checked
        // before the topic's existence (no leak of which topics exist).
        let denied: Vec<bool> = if replica_id(&ctx, &req) >= 0 {
            if authz::deny_cluster(&broker, &ctx, Operation::ClusterAction).is_some() {
                return encode_response(&ctx, &refuse_all(&req));
            }
            Vec::new()
        } else if authz::authorizer(&broker).is_none() {
            Vec::new()
        } else {
            req.topics
                .iter()
                .map(|t| {
                    topic_name(&broker, &ctx, t)
                        .is_some_and(|name| !authz::topic(&broker, &ctx, Operation::Read, &name))
                })
                .collect()
        };
        // One waker for the whole wait, registered with every partition in the first
        // pass (before it reads them, so no move is missed).
        let waker = crate::waker::FetchWaker::new();
        let mut register = Some(&waker);
        loop {
            let (mut resp, mut more, total, has_error, waits) =
                fetch_once(&broker, &ctx, &req, &denied, register.take()).await;
            let now = Instant::now();
            if total >= req.min_bytes.max(0) as usize || has_error || now >= deadline || !waits {
                metrics::counter!("strata_fetch_bytes_total").increment(total as u64);
                resp.session_id = broker.fetch_sessions.finish(
                    session,
                    &req,
                    &mut resp,
                    &mut more,
                    Instant::now(),
                );
                // consumer_byte_rate: what this response carries (followers are exempt).
                if replica_id(&ctx, &req) < 0 {
                    resp.throttle_time_ms = broker.security.record_quota(
                        &ctx.principal,
                        ctx.client_id.as_deref(),
                        &ctx.mute,
                        strata_quota::QuotaKey::ConsumerByteRate,
                        total as f64,
                    );
                }
                return super::frame::encode_fetch_response(&ctx, resp, more);
            }
            // Wait for any requested partition's high-water mark (a follower's: log end)
            // to move, or the deadline.
            let _ = tokio::time::timeout_at(deadline.into(), waker.woken()).await;
        }
    })
}

/// The answer, its further record pieces, its record bytes, whether it failed anywhere,
/// and whether any partition it reads could move (there is something to wait for).
type FetchOnce = (FetchResponse, MoreRecords, usize, bool, bool);

/// The most a consumer's local read asks the log for at once: a partition's records
/// past it come in further pieces (pooled read buffers, spliced into the response).
const READ_PIECE: usize = 1 << 20;

/// Whether a partition is read in this round, and how.
enum Plan {
    Done,
    /// Now, in request order, within what is left of the response budget.
    Local,
    /// Up front, concurrently with the other reads that wait on the object store.
    Remote,
}

/// The broker id a follower's fetch names (in ReplicaState from v15); negative for a
/// consumer.
fn replica_id(ctx: &RequestContext, req: &FetchRequest) -> i32 {
    if ctx.version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    }
}

/// The name of a fetched topic: as sent, or from v13 resolved from its id (`None` for an
/// id no topic has: that answers UNKNOWN_TOPIC_ID, not an authorization failure).
fn topic_name(
    broker: &Broker,
    ctx: &RequestContext,
    topic: &kafka_protocol::messages::fetch_request::FetchTopic,
) -> Option<String> {
    if ctx.version >= 13 {
        broker
            .cluster()
            .topic_by_id(TopicId(topic.topic_id))
            .map(|t| t.name.clone())
    } else {
        Some(topic.topic.0.to_string())
    }
}

/// The answer to a follower fetch without ClusterAction: every partition
/// TOPIC_AUTHORIZATION_FAILED, as Kafka answers (its top-level error stays NONE).
fn refuse_all(req: &FetchRequest) -> FetchResponse {
    let mut resp = FetchResponse::default();
    for topic in &req.topics {
        let mut out = FetchableTopicResponse::default();
        out.topic = topic.topic.clone();
        out.topic_id = topic.topic_id;
        for fp in &topic.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = fp.partition;
            pd.error_code = ErrorCode::TopicAuthorizationFailed.code();
            pd.high_watermark = -1;
            pd.last_stable_offset = -1;
            pd.log_start_offset = -1;
            pd.preferred_read_replica = BrokerId(-1);
            out.partitions.push(pd);
        }
        resp.responses.push(out);
    }
    resp
}

/// One pass over the requested partitions. `denied` marks the topics (by request index)
/// the consumer may not read; `waker`, in the first pass, is registered with every
/// partition read.
async fn fetch_once(
    broker: &Broker,
    ctx: &RequestContext,
    req: &FetchRequest,
    denied: &[bool],
    waker: Option<&Arc<crate::waker::FetchWaker>>,
) -> FetchOnce {
    let replica = replica_id(ctx, req);
    let follower = (replica >= 0).then_some(replica);
    // KIP-98: a read_committed consumer (isolation_level 1, v4+) reads below the last
    // stable offset and gets the aborted transactions of what it read.
    let read_committed = follower.is_none() && ctx.version >= 4 && req.isolation_level == 1;
    let mut resp = FetchResponse::default();
    if let Some(replica) = follower
        && let Err(reason) = check_replica_broker(broker, ctx, req, replica)
    {
        // Nothing of this fetch may move a high-water mark or an ISR (KIP-903).
        tracing::debug!(replica, %reason, "replica fetch refused");
        resp.error_code = ErrorCode::StaleBrokerEpoch.code();
        return (resp, MoreRecords::new(), 0, true, false);
    }
    // The leader's replication throttle, when this is a follower and a rate is set (a
    // consumer's fetch does not look).
    let throttle = follower.and_then(|r| {
        let md = broker.cluster();
        let rate = broker.throttles.leader.rate(&md, broker.node_id())?;
        Some((r, rate, md))
    });
    let mut budget = req.max_bytes.max(0) as usize;
    let mut any_data = false;
    let mut has_error = false;
    let mut waits = false;
    // First pass: checks, and the plan for each partition.
    let mut slots: Vec<(usize, usize, Arc<Partition>, Offset, usize)> = Vec::new(); // (topic i, partition i, p, offset, max)
    let mut remote: Vec<(usize, usize)> = Vec::new();
    for (ti, topic) in req.topics.iter().enumerate() {
        let mut out = FetchableTopicResponse::default();
        out.topic = topic.topic.clone();
        out.topic_id = topic.topic_id;
        let (state, unknown_code) = if ctx.version >= 13 {
            (
                broker.replicas.topic_by_id(TopicId(topic.topic_id)),
                ErrorCode::UnknownTopicId,
            )
        } else {
            (
                broker.replicas.topic(topic.topic.0.as_str()),
                ErrorCode::UnknownTopicOrPartition,
            )
        };
        let topic_denied = denied.get(ti).copied().unwrap_or(false);
        for (pi, fp) in topic.partitions.iter().enumerate() {
            let mut pd = PartitionData::default();
            pd.partition_index = fp.partition;
            pd.high_watermark = -1;
            pd.last_stable_offset = -1;
            pd.log_start_offset = -1;
            pd.preferred_read_replica = BrokerId(-1);
            let p = state.as_ref().and_then(|t| t.partition(fp.partition));
            let (code, plan) = match (p, follower) {
                _ if topic_denied => (ErrorCode::TopicAuthorizationFailed, Plan::Done),
                (None, _) => {
                    let named = match ctx.version >= 13 {
                        true => crate::replicas::TopicRef::Id(TopicId(topic.topic_id)),
                        false => crate::replicas::TopicRef::Name(topic.topic.0.as_str()),
                    };
                    let code = match broker.replicas.missing_partition_code(
                        state.as_deref(),
                        named,
                        fp.partition,
                    ) {
                        ErrorCode::UnknownTopicOrPartition => unknown_code,
                        code => code,
                    };
                    (code, Plan::Done)
                }
                (Some(p), Some(replica)) => {
                    if let Some(w) = waker {
                        p.register_fetch(w, true);
                    }
                    waits = true;
                    check_follower(p, replica, fp, &mut pd)
                }
                (Some(p), None) => {
                    if let Some(w) = waker {
                        p.register_fetch(w, false);
                    }
                    waits = true;
                    check_partition(
                        p,
                        fp.fetch_offset,
                        fp.current_leader_epoch,
                        read_committed,
                        &mut pd,
                    )
                }
            };
            if code != ErrorCode::None {
                has_error = true;
                pd.error_code = code.code();
            }
            // A follower told where the logs part must hear it now, not after a wait.
            if pd.diverging_epoch.epoch >= 0 {
                has_error = true;
            }
            if let (Some(p), Plan::Local | Plan::Remote) = (p, &plan) {
                if matches!(plan, Plan::Remote) {
                    remote.push((slots.len(), 0));
                }
                slots.push((
                    ti,
                    pi,
                    p.clone(),
                    fp.fetch_offset,
                    fp.partition_max_bytes.max(0) as usize,
                ));
            }
            out.partitions.push(pd);
        }
        resp.responses.push(out);
    }
    // Reads that wait on the object store, all at once, each up to its partition limit
    // (and the response limit).
    let remote_results: Vec<Result<bytes::Bytes, ErrorCode>> = {
        let reads = remote.iter().map(|(si, _)| {
            let (_, _, p, offset, max) = &slots[*si];
            let limit = (*max).min(budget.max(1));
            let p = p.clone();
            let (offset, reader) = (*offset, ctx.connection_id);
            async move {
                p.log()
                    .read(offset, limit, None, reader)
                    .await
                    .map_err(|e| e.error_code())
            }
        });
        futures::future::join_all(reads).await
    };
    let mut more = MoreRecords::new();
    let mut remote_results = remote
        .iter()
        .map(|(si, _)| *si)
        .zip(remote_results)
        .collect::<std::collections::HashMap<_, _>>();
    // Second pass, in request order: fill local reads and remote results within the
    // response budget (KIP-74: the first partition with data may exceed it).
    let mut throttled = std::collections::HashSet::new();
    for (si, (ti, pi, p, offset, max)) in slots.into_iter().enumerate() {
        let pd = &mut resp.responses[ti].partitions[pi];
        let result = match remote_results.remove(&si) {
            Some(r) => r.map(|data| vec![data]),
            None => {
                // As Kafka: each partition up to its limit and what is left of the
                // response's; the first with data gets at least one whole batch.
                let limit = max.min(budget);
                if limit == 0 && any_data {
                    continue;
                }
                if let Some((replica, rate, md)) = &throttle
                    && leader_throttles(md, &p, *replica, broker.node_id())
                {
                    if !broker
                        .throttles
                        .leader
                        .admits(*rate, std::time::Instant::now())
                    {
                        continue;
                    }
                    throttled.insert(si);
                }
                // Consumers read below the high-water mark (read_committed: below the
                // last stable offset, without aborted batches); followers to the log end.
                let read = || {
                    if read_committed {
                        p.log().read_local_committed(
                            offset,
                            limit.max(1),
                            pd.last_stable_offset,
                            READ_PIECE,
                        )
                    } else {
                        let upper = follower.is_none().then_some(pd.high_watermark);
                        p.log()
                            .read_local_pieces(offset, limit.max(1), upper, READ_PIECE)
                    }
                };
                // A read that goes to the device leaves the async worker to the other
                // connections while it waits.
                let read = if p.read_may_wait(offset) {
                    crate::blocking::may_wait("read", read)
                } else {
                    read()
                };
                read.map_err(|e| e.error_code())
            }
        };
        match result {
            Ok(pieces) => {
                let len: usize = pieces.iter().map(bytes::Bytes::len).sum();
                let Some(last) = pieces.last() else { continue };
                if len == 0 || (any_data && len > budget) {
                    continue;
                }
                if read_committed {
                    match aborted_in(&p, offset, last).await {
                        Ok(aborted) => pd.aborted_transactions = Some(aborted),
                        Err(code) => {
                            // Without its aborted transactions the data would read as
                            // committed: none of it goes out.
                            has_error = true;
                            pd.error_code = code.code();
                            continue;
                        }
                    }
                }
                budget = budget.saturating_sub(len);
                any_data = true;
                if follower.is_none() {
                    p.traffic().on_fetch(len);
                }
                if throttled.contains(&si) {
                    broker.throttles.leader.record(len);
                }
                let mut pieces = pieces.into_iter();
                pd.records = pieces.next();
                let rest: Vec<bytes::Bytes> = pieces.collect();
                if !rest.is_empty() {
                    more.insert((ti, pi), rest);
                }
            }
            Err(code) => {
                has_error = true;
                pd.error_code = code.code();
            }
        }
    }
    let total = resp
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum::<usize>()
        + more
            .values()
            .flatten()
            .map(bytes::Bytes::len)
            .sum::<usize>();
    (resp, more, total, has_error, waits)
}

/// Whether this leader throttles `replica`'s replication of `p` (see `crate::throttle`).
fn leader_throttles(
    md: &strata_controller::ClusterMetadata,
    p: &Partition,
    replica: i32,
    node: i32,
) -> bool {
    md.partition(&p.topic, p.index).is_some_and(|rec| {
        crate::throttle::is_throttled(rec, replica, node, &p.config().leader_throttled_replicas)
    })
}

/// A replica fetch must come from a registered, unfenced broker in its current
/// incarnation: the ReplicaState of Fetch v15+ carries its broker epoch, which must not
/// be older than the registration the controller knows (an older one is a restarted
/// broker's previous life, KIP-903). Fetches that name a replica at an older version
/// carry no epoch and are refused: this broker's own followers send v15.
fn check_replica_broker(
    broker: &Broker,
    ctx: &RequestContext,
    req: &FetchRequest,
    replica: i32,
) -> Result<(), String> {
    if ctx.version < 15 {
        return Err(format!(
            "a replica fetch at v{} carries no broker epoch",
            ctx.version
        ));
    }
    let md = broker.cluster();
    let Some(b) = md.brokers.get(&replica) else {
        return Err(format!("broker {replica} is not registered"));
    };
    if b.fenced {
        return Err(format!("broker {replica} is fenced"));
    }
    let epoch = req.replica_state.replica_epoch;
    if epoch < b.epoch {
        return Err(format!(
            "broker {replica}'s epoch {epoch} is older than its registration {}",
            b.epoch
        ));
    }
    Ok(())
}

/// A follower's fetch: the replica state machine checks its epoch and position (and
/// moves the ISR and the high-water mark); the data comes from the local log, up to its
/// end.
fn check_follower(
    p: &Arc<Partition>,
    replica: i32,
    fp: &kafka_protocol::messages::fetch_request::FetchPartition,
    pd: &mut PartitionData,
) -> (ErrorCode, Plan) {
    use strata_replica::{FetchDecision, FollowerFetch};
    let fetch = FollowerFetch {
        replica,
        current_leader_epoch: (fp.current_leader_epoch >= 0).then_some(fp.current_leader_epoch),
        fetch_offset: fp.fetch_offset,
        last_fetched_epoch: (fp.last_fetched_epoch >= 0).then_some(fp.last_fetched_epoch),
    };
    let (outcome, result) = p.on_follower_fetch(&fetch);
    if let Err(e) = result {
        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "follower fetch bookkeeping failed");
    }
    // Followers start from the leader's local log (KIP-405: what is only in the object
    // store is not replicated).
    pd.log_start_offset = p.log().local_start();
    pd.last_stable_offset = p.high_watermark();
    if !matches!(outcome.decision, FetchDecision::Read { .. }) {
        tracing::debug!(topic = %p.topic, partition = p.index, replica, ?fetch, decision = ?outcome.decision, "follower fetch not served");
    }
    match outcome.decision {
        FetchDecision::Read { high_watermark } => {
            pd.high_watermark = high_watermark;
            if fp.fetch_offset >= p.log().log_end() {
                return (ErrorCode::None, Plan::Done);
            }
            (ErrorCode::None, Plan::Local)
        }
        FetchDecision::DivergingEpoch {
            epoch,
            end_offset,
            high_watermark,
        } => {
            pd.high_watermark = high_watermark;
            pd.diverging_epoch.epoch = epoch;
            pd.diverging_epoch.end_offset = end_offset;
            (ErrorCode::None, Plan::Done)
        }
        other => {
            pd.high_watermark = p.high_watermark();
            (other.error_code(), Plan::Done)
        }
    }
}

/// The aborted transactions of the batches a read_committed fetch returns (`data`,
/// read from `offset`), as Kafka's fetch carries them: those overlapping the range up
/// to the end of the last batch.
async fn aborted_in(
    p: &Partition,
    offset: Offset,
    data: &[u8],
) -> Result<Vec<AbortedTransaction>, ErrorCode> {
    let end = strata_proto::batch::batches(data)
        .filter_map(Result::ok)
        .last()
        .map_or(offset, |b| b.next_offset());
    let aborted = p
        .log()
        .aborted_transactions(offset, end)
        .await
        .map_err(|e| e.error_code())?;
    Ok(aborted
        .into_iter()
        .map(|t| {
            let mut a = AbortedTransaction::default();
            a.producer_id = ProducerId(t.producer_id);
            a.first_offset = t.first_offset;
            a
        })
        .collect())
}

/// Epoch and range checks; fills the partition's marks. Says where the data is.
fn check_partition(
    p: &Partition,
    offset: i64,
    current_leader_epoch: i32,
    read_committed: bool,
    pd: &mut PartitionData,
) -> (ErrorCode, Plan) {
    // Consumers read from the leader (fetching from followers, KIP-392, is not offered).
    if !p.is_leader() {
        return (ErrorCode::NotLeaderOrFollower, Plan::Done);
    }
    let epoch = p.leader_epoch();
    if current_leader_epoch >= 0 && current_leader_epoch < epoch {
        return (ErrorCode::FencedLeaderEpoch, Plan::Done);
    }
    if current_leader_epoch > epoch {
        return (ErrorCode::UnknownLeaderEpoch, Plan::Done);
    }
    let log = p.log();
    let hwm = p.high_watermark();
    let lso = log.last_stable_offset(hwm);
    let start = log.log_start();
    pd.high_watermark = hwm;
    pd.last_stable_offset = lso;
    pd.log_start_offset = start;
    // Kafka answers read_committed with a list (empty when nothing was aborted) and
    // read_uncommitted with null.
    pd.aborted_transactions = read_committed.then(Vec::new);
    if offset < start || offset > log.log_end() {
        return (ErrorCode::OffsetOutOfRange, Plan::Done);
    }
    if offset >= if read_committed { lso } else { hwm } {
        return (ErrorCode::None, Plan::Done);
    }
    if log.waits_on_remote(offset) {
        return (ErrorCode::None, Plan::Remote);
    }
    (ErrorCode::None, Plan::Local)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    #[test]
    fn an_unauthorized_follower_fetch_fails_every_partition() {
        let mut req = FetchRequest::default();
        for name in ["a", "b"] {
            let mut t = FetchTopic::default();
            t.topic = TopicName(StrBytes::from_static_str(name));
            for partition in 0..3 {
                let mut p = FetchPartition::default();
                p.partition = partition;
                t.partitions.push(p);
            }
            req.topics.push(t);
        }
        let resp = refuse_all(&req);
        // Kafka leaves the top-level error NONE and fails each partition.
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.responses.len(), 2);
        for t in &resp.responses {
            let indexes: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
            assert_eq!(indexes, vec![0, 1, 2]);
            for p in &t.partitions {
                assert_eq!(p.error_code, ErrorCode::TopicAuthorizationFailed.code());
                assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));
                assert_eq!(p.high_watermark, -1);
            }
        }
    }
}
