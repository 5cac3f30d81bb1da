//! The gateway's produce path: an idempotent Kafka producer over the wire protocol.
//!
//! Why not librdkafka here (consumers still use it): librdkafka queues, copies and
//! reports every record on its own threads, which on two cores cost the HTTP path more
//! CPU than the broker's append. A gateway request already arrives as a batch, so this
//! producer encodes each request's records for a partition straight into one RecordBatch
//! v2 (`strata_proto::batch::build`) and sends Produce requests to the partition leaders
//! itself, keeping the semantics a Kafka client gives:
//!
//! - partitioning: an explicit partition, else murmur2 of the key (Kafka's default
//!   partitioner), else one partition per request for keyless records, rotating between
//!   requests (sticky, as KIP-480);
//! - acks=all and idempotence: one producer id (InitProducerId), a sequence per
//!   partition, and at most one batch in flight per partition, so a retried batch keeps
//!   its sequence and the broker appends it once. Records of one partition keep their
//!   order across requests;
//! - retries with backoff 100-500 ms: a leader change is retried for the whole delivery
//!   timeout (an election is a pause, not an error), a broker that refuses writes
//!   (NOT_ENOUGH_REPLICAS) three times, so it answers within about a second; a batch
//!   whose outcome is unknown when it fails (timeout, lost connection) retires the
//!   producer id, so a later batch can never be taken for a duplicate of it;
//! - a batch over the topic's max.message.bytes is split in halves and retried; a single
//!   record over it fails with MESSAGE_TOO_LARGE.
//!
//! One task owns all the state (no locks on the hot path). Each leader has up to
//! `max_in_flight_per_leader` requests in flight, on separate connections, and a
//! partition at most one batch; records that arrive meanwhile gather into its next
//! batch, which is how batches grow under load (linger without a timer).
//!
//! The files: this one, the handle ([`NativeProducer`]) and its settings, and how a
//! request's records are partitioned and cut; `accumulator` the records waiting per
//! partition and the batches built from them; `engine` the task's state and loop;
//! `send` a Produce request to a leader and its answer; `retry` what each refusal
//! means (retry, split, a new producer id, or fail); `metadata` where partitions lead,
//! and the producer id.

mod accumulator;
mod engine;
mod metadata;
mod retry;
mod send;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use strata_client::LocalBroker;
use strata_proto::batch::build::NewRecord;
use strata_proto::partitioner::partition_for_key;
use tokio::sync::{mpsc, oneshot};

use self::accumulator::{Pending, Sink, record_bytes};
use self::engine::Engine;
use crate::service::{ProduceRecord, Produced, ServiceError, codes};

const CLIENT_ID: &str = "strata-gateway";

/// The broker in this process, reached without a socket for the partitions it leads
/// (and for metadata and the producer id).
#[derive(Clone)]
pub struct LocalLeader {
    pub node_id: i32,
    pub broker: Arc<dyn LocalBroker>,
}

impl std::fmt::Debug for LocalLeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLeader")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

/// How the producer is set up.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// The broker's Kafka address (HOST:PORT), for metadata and the producer id.
    pub bootstrap: String,
    /// The broker in this process, if any.
    pub local: Option<LocalLeader>,
    /// Connects, metadata and InitProducerId.
    pub request_timeout: Duration,
    /// How long a record may wait for acks=all, retries included.
    pub delivery_timeout: Duration,
    /// Retries of a retriable error before the records fail with it.
    pub retries: u32,
    /// The largest batch built for one partition (Kafka's batch.size; the topic's
    /// max.message.bytes is learned by splitting what the broker refuses).
    pub max_batch_bytes: usize,
    /// The largest Produce request sent to one leader.
    pub max_request_bytes: usize,
    /// Produce requests in flight to one leader, each on its own connection (a
    /// partition still has at most one batch in flight, so its order and sequences
    /// hold); the broker appends to different partitions in parallel.
    pub max_in_flight_per_leader: usize,
    /// How connections to brokers authenticate (TLS, SASL).
    pub security: strata_client::ClientSecurity,
}

impl ProducerConfig {
    pub fn new(bootstrap: impl Into<String>) -> ProducerConfig {
        ProducerConfig {
            bootstrap: bootstrap.into(),
            local: None,
            request_timeout: Duration::from_secs(5),
            delivery_timeout: Duration::from_secs(30),
            retries: 3,
            security: strata_client::ClientSecurity::default(),
            max_batch_bytes: 1_000_000,
            max_request_bytes: 16 * 1024 * 1024,
            max_in_flight_per_leader: 4,
        }
    }
}

/// A handle on the producer task; cheap to share.
#[derive(Debug)]
pub struct NativeProducer {
    tx: mpsc::UnboundedSender<Vec<Pending>>,
    sticky: AtomicU32,
    max_batch_bytes: usize,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl NativeProducer {
    /// Starts the producer task on the current tokio runtime.
    pub fn start(config: ProducerConfig) -> NativeProducer {
        let (tx, rx) = mpsc::unbounded_channel();
        let max_batch_bytes = config.max_batch_bytes;
        tokio::spawn(Engine::new(config).run(rx));
        NativeProducer {
            tx,
            sticky: AtomicU32::new(0),
            max_batch_bytes,
        }
    }

    /// Appends `records` to `topic` (which has `partitions` partitions) and answers each
    /// one, in order.
    pub async fn produce(
        &self,
        topic: &str,
        partitions: i32,
        records: Vec<ProduceRecord>,
    ) -> Vec<Result<Produced, ServiceError>> {
        let n = records.len();
        if n == 0 {
            return Vec::new();
        }
        let (done_tx, done_rx) = oneshot::channel();
        let sink = Arc::new(Sink {
            results: Mutex::new(vec![None; n]),
            remaining: AtomicUsize::new(n),
            done: Mutex::new(Some(done_tx)),
        });
        let topic: Arc<str> = Arc::from(topic);
        let sticky =
            (self.sticky.fetch_add(1, Ordering::Relaxed) % partitions.max(1) as u32) as i32;
        let now = now_ms();
        let enqueued = Instant::now();
        // Per partition, in request order, cut at max_batch_bytes.
        let mut open: HashMap<i32, Pending> = HashMap::new();
        let mut out: Vec<Pending> = Vec::new();
        let mut invalid: Vec<(usize, ServiceError)> = Vec::new();
        for (i, r) in records.into_iter().enumerate() {
            let partition = match (r.partition, &r.key) {
                (Some(p), _) => p,
                (None, Some(k)) => partition_for_key(k, partitions),
                (None, None) => sticky,
            };
            if partition < 0 || partition >= partitions {
                invalid.push((
                    i,
                    ServiceError::new(
                        codes::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("partition {partition} of topic '{topic}' does not exist"),
                    ),
                ));
                continue;
            }
            let rec = NewRecord {
                key: r.key.map(Bytes::from),
                value: r.value.map(Bytes::from),
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k, v.map(Bytes::from)))
                    .collect(),
                timestamp: r.timestamp.unwrap_or(now),
            };
            let size = record_bytes(&rec);
            let empty = || Pending {
                topic: topic.clone(),
                partition,
                records: Vec::new(),
                idx: Vec::new(),
                bytes: 0,
                sink: sink.clone(),
                enqueued,
            };
            let p = open.entry(partition).or_insert_with(empty);
            if !p.records.is_empty() && p.bytes + size > self.max_batch_bytes {
                out.push(std::mem::replace(p, empty()));
            }
            p.records.push(rec);
            p.idx.push(i);
            p.bytes += size;
        }
        out.extend(open.into_values());
        for (i, e) in invalid {
            sink.fill(&[i], |_| Err(e.clone()));
        }
        if !out.is_empty()
            && let Err(mpsc::error::SendError(parts)) = self.tx.send(out)
        {
            let e = ServiceError::new(codes::LOCAL_TRANSPORT, "the gateway's producer has stopped");
            for p in parts {
                p.fail(&e);
            }
        }
        let _ = done_rx.await;
        let results = sink
            .results
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(ServiceError::new(
                        codes::LOCAL_MSG_TIMED_OUT,
                        "the producer stopped before delivery",
                    ))
                })
            })
            .collect()
    }
}
