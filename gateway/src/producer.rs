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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_client::{KafkaConnection, LocalBroker};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::partitioner::partition_for_key;
use tokio::sync::{mpsc, oneshot};

use crate::service::{ProduceRecord, Produced, ServiceError, codes};

const PRODUCE_VERSION: i16 = 9;
const METADATA_VERSION: i16 = 9;
const INIT_PRODUCER_ID_VERSION: i16 = 4;
const CLIENT_ID: &str = "strata-gateway";

// Kafka error codes this producer acts on (beyond `codes`).
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const UNKNOWN_PRODUCER_ID: i16 = 59;
const PRODUCER_FENCED: i16 = 90;

/// Bytes a record adds to a batch beyond its key, value and headers (varints and
/// deltas; an upper bound for batch sizing, not an exact figure).
const RECORD_OVERHEAD: usize = 24;
const BATCH_OVERHEAD: usize = 61;

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
}

impl ProducerConfig {
    pub fn new(bootstrap: impl Into<String>) -> ProducerConfig {
        ProducerConfig {
            bootstrap: bootstrap.into(),
            local: None,
            request_timeout: Duration::from_secs(5),
            delivery_timeout: Duration::from_secs(30),
            retries: 3,
            max_batch_bytes: 1_000_000,
            max_request_bytes: 16 * 1024 * 1024,
            max_in_flight_per_leader: 4,
        }
    }
}

/// Where a request's answers gather: one slot per record, filled as its batch
/// completes; the waiter wakes when the last one is.
struct Sink {
    results: Mutex<Vec<Option<Result<Produced, ServiceError>>>>,
    remaining: AtomicUsize,
    done: Mutex<Option<oneshot::Sender<()>>>,
}

impl Sink {
    fn fill(&self, idx: &[usize], mut answer: impl FnMut(usize) -> Result<Produced, ServiceError>) {
        if let Ok(mut r) = self.results.lock() {
            for (i, &at) in idx.iter().enumerate() {
                r[at] = Some(answer(i));
            }
        }
        if self.remaining.fetch_sub(idx.len(), Ordering::AcqRel) == idx.len()
            && let Some(tx) = self.done.lock().ok().and_then(|mut d| d.take())
        {
            let _ = tx.send(());
        }
    }
}

/// Records of one request for one partition, in order.
struct Pending {
    topic: Arc<str>,
    partition: i32,
    records: Vec<NewRecord>,
    /// Each record's index in its request.
    idx: Vec<usize>,
    bytes: usize,
    sink: Arc<Sink>,
    enqueued: Instant,
}

impl Pending {
    fn fail(self, e: &ServiceError) {
        self.sink.fill(&self.idx, |_| Err(e.clone()));
    }

    /// Splits off the second half (None for a single record).
    fn split(&mut self) -> Option<Pending> {
        if self.records.len() < 2 {
            return None;
        }
        let at = self.records.len() / 2;
        let records = self.records.split_off(at);
        let idx = self.idx.split_off(at);
        let bytes: usize = records.iter().map(record_bytes).sum();
        self.bytes -= bytes.min(self.bytes);
        Some(Pending {
            topic: self.topic.clone(),
            partition: self.partition,
            records,
            idx,
            bytes,
            sink: self.sink.clone(),
            enqueued: self.enqueued,
        })
    }
}

fn record_bytes(r: &NewRecord) -> usize {
    RECORD_OVERHEAD
        + r.key.as_ref().map_or(0, Bytes::len)
        + r.value.as_ref().map_or(0, Bytes::len)
        + r.headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 4)
            .sum::<usize>()
}

/// A batch built for one partition: what was sent, and the records to answer.
struct Batch {
    topic: Arc<str>,
    partition: i32,
    parts: Vec<Pending>,
    encoded: Bytes,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    generation: u64,
    count: i32,
    attempts: u32,
    /// The broker refused this batch's producer id or sequence: it goes again under
    /// the current producer id. Any other retry keeps its id and sequence, so the broker
    /// recognises it if an earlier attempt was appended.
    refused_producer: bool,
}

impl Batch {
    fn fail(self, e: &ServiceError) {
        for p in self.parts {
            p.fail(e);
        }
    }

    fn oldest(&self) -> Instant {
        self.parts
            .iter()
            .map(|p| p.enqueued)
            .min()
            .unwrap_or_else(Instant::now)
    }
}

#[derive(Default)]
struct PartitionState {
    queue: VecDeque<Pending>,
    /// A batch to send again (same sequence) once `not_before` has passed.
    retry: Option<Batch>,
    not_before: Option<Instant>,
    in_flight: bool,
    /// Batch size learned from MESSAGE_TOO_LARGE (below `max_batch_bytes`).
    max_bytes: Option<usize>,
    /// The next sequence, valid for producer `generation`.
    sequence: i32,
    generation: u64,
}

impl PartitionState {
    fn has_work(&self) -> bool {
        self.retry.is_some() || !self.queue.is_empty()
    }
}

/// A handle on the producer task; cheap to share.
#[derive(Debug)]
pub struct NativeProducer {
    tx: mpsc::UnboundedSender<Vec<Pending>>,
    sticky: AtomicU32,
    max_batch_bytes: usize,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
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

/// Where a topic's partitions lead, as of `fetched`.
struct TopicMeta {
    fetched: Instant,
    leaders: Vec<i32>,
    stale: bool,
}

/// A partition's answer in a Produce response.
struct Answer {
    code: i16,
    base: i64,
    append_time: i64,
    message: Option<String>,
}

/// The outcome of one Produce request to one leader.
struct Sent {
    leader: i32,
    conn: Option<KafkaConnection>,
    batches: Vec<Batch>,
    result: Result<ProduceResponse, ServiceError>,
}

/// The producer task's state.
struct Engine {
    config: ProducerConfig,
    partitions: HashMap<(Arc<str>, i32), PartitionState>,
    topics: HashMap<Arc<str>, TopicMeta>,
    brokers: HashMap<i32, String>,
    /// Idle connections by leader.
    conns: HashMap<i32, Vec<KafkaConnection>>,
    meta_conn: Option<KafkaConnection>,
    /// Requests in flight by leader.
    in_flight: HashMap<i32, usize>,
    producer: Option<(i64, i16)>,
    generation: u64,
    /// When InitProducerId or metadata last failed: wait before asking again.
    backoff_until: Option<Instant>,
    last_error: Option<ServiceError>,
    last_expire: Instant,
}

impl Engine {
    fn new(config: ProducerConfig) -> Engine {
        Engine {
            config,
            partitions: HashMap::new(),
            topics: HashMap::new(),
            brokers: HashMap::new(),
            conns: HashMap::new(),
            meta_conn: None,
            in_flight: HashMap::new(),
            producer: None,
            generation: 0,
            backoff_until: None,
            last_error: None,
            last_expire: Instant::now(),
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Vec<Pending>>) {
        let mut in_flight: FuturesUnordered<futures::future::BoxFuture<'static, Sent>> =
            FuturesUnordered::new();
        let mut open = true;
        loop {
            self.expire();
            self.start_requests(&mut in_flight).await;
            let waiting = self.partitions.values().any(PartitionState::has_work);
            if !open && in_flight.is_empty() && !waiting {
                return;
            }
            // Wake for a new request, a response, or (while work waits on a backoff or a
            // busy leader) a short tick.
            let tick = tokio::time::sleep(if waiting {
                Duration::from_millis(20)
            } else {
                Duration::from_secs(3600)
            });
            tokio::select! {
                got = rx.recv(), if open => match got {
                    Some(parts) => {
                        self.enqueue(parts);
                        while let Ok(more) = rx.try_recv() {
                            self.enqueue(more);
                        }
                    }
                    None => open = false,
                },
                Some(sent) = in_flight.next(), if !in_flight.is_empty() => {
                    self.complete(sent);
                    while let Some(Some(sent)) = futures::FutureExt::now_or_never(in_flight.next()) {
                        self.complete(sent);
                    }
                    while let Ok(more) = rx.try_recv() {
                        self.enqueue(more);
                    }
                }
                () = tick => {}
            }
        }
    }

    fn enqueue(&mut self, parts: Vec<Pending>) {
        for p in parts {
            self.partitions
                .entry((p.topic.clone(), p.partition))
                .or_default()
                .queue
                .push_back(p);
        }
    }

    /// Fails queued records older than the delivery timeout (a leader that stays away).
    /// At most every 100 ms: the loop runs once per request and response.
    fn expire(&mut self) {
        let timeout = self.config.delivery_timeout;
        let now = Instant::now();
        if now.duration_since(self.last_expire) < Duration::from_millis(100) {
            return;
        }
        self.last_expire = now;
        for ((topic, partition), st) in &mut self.partitions {
            while st
                .queue
                .front()
                .is_some_and(|p| now.duration_since(p.enqueued) > timeout)
            {
                if let Some(p) = st.queue.pop_front() {
                    let why = self
                        .last_error
                        .as_ref()
                        .map_or_else(String::new, |e| format!(": {}", e.message));
                    p.fail(&ServiceError::new(
                        codes::LOCAL_MSG_TIMED_OUT,
                        format!("{topic}-{partition}: not delivered within {timeout:?}{why}"),
                    ));
                }
            }
        }
        self.partitions
            .retain(|_, st| st.has_work() || st.in_flight || st.sequence != 0);
    }

    /// Sends a request to every idle leader that has a partition with work.
    async fn start_requests(
        &mut self,
        in_flight: &mut FuturesUnordered<futures::future::BoxFuture<'static, Sent>>,
    ) {
        let now = Instant::now();
        if self.backoff_until.is_some_and(|t| now < t) {
            return;
        }
        let ready: Vec<(Arc<str>, i32)> = self
            .partitions
            .iter()
            .filter(|(_, st)| {
                !st.in_flight && st.has_work() && st.not_before.is_none_or(|t| now >= t)
            })
            .map(|(k, _)| k.clone())
            .collect();
        if ready.is_empty() {
            return;
        }
        if self.producer.is_none()
            && let Err(e) = self.init_producer_id().await
        {
            tracing::warn!(error = %e, "gateway producer: InitProducerId failed; retrying");
            self.last_error = Some(e);
            self.backoff_until = Some(Instant::now() + Duration::from_millis(250));
            return;
        }
        // Metadata for topics not known, stale, or missing a leader we need.
        let mut refresh: Vec<Arc<str>> = Vec::new();
        for (topic, partition) in &ready {
            let need = match self.topics.get(topic) {
                None => true,
                Some(m) => {
                    m.stale
                        || m.fetched.elapsed() > Duration::from_secs(30)
                        || m.leaders.get(*partition as usize).is_none_or(|&l| l < 0)
                }
            };
            if need && !refresh.contains(topic) {
                refresh.push(topic.clone());
            }
        }
        if !refresh.is_empty()
            && let Err(e) = self.refresh_metadata(&refresh).await
        {
            tracing::warn!(error = %e, "gateway producer: metadata refresh failed; retrying");
            self.last_error = Some(e);
            self.backoff_until = Some(Instant::now() + Duration::from_millis(250));
            return;
        }
        // Group ready partitions by leader.
        let mut by_leader: HashMap<i32, Vec<(Arc<str>, i32)>> = HashMap::new();
        for (topic, partition) in ready {
            let leader = self
                .topics
                .get(&topic)
                .and_then(|m| m.leaders.get(partition as usize).copied());
            match leader {
                Some(l) if l >= 0 && self.brokers.contains_key(&l) => {
                    if self.in_flight.get(&l).copied().unwrap_or(0)
                        < self.config.max_in_flight_per_leader
                    {
                        by_leader.entry(l).or_default().push((topic, partition));
                    }
                }
                Some(_) => {
                    // No leader now (an election): wait and look again.
                    if let Some(m) = self.topics.get_mut(&topic) {
                        m.stale = true;
                    }
                    if let Some(st) = self.partitions.get_mut(&(topic.clone(), partition)) {
                        st.not_before = Some(now + Duration::from_millis(100));
                    }
                }
                None => {
                    let e = ServiceError::new(
                        codes::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("partition {partition} of topic '{topic}' does not exist"),
                    );
                    if let Some(st) = self.partitions.get_mut(&(topic, partition)) {
                        if let Some(b) = st.retry.take() {
                            b.fail(&e);
                        }
                        for p in st.queue.drain(..) {
                            p.fail(&e);
                        }
                    }
                }
            }
        }
        for (leader, parts) in by_leader {
            let mut batches = Vec::new();
            let mut bytes = 0;
            for key in parts {
                if bytes >= self.config.max_request_bytes {
                    break;
                }
                if let Some(b) = self.next_batch(&key) {
                    bytes += b.encoded.len();
                    batches.push(b);
                }
            }
            if batches.is_empty() {
                continue;
            }
            for b in &batches {
                if let Some(st) = self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
                    st.in_flight = true;
                }
            }
            *self.in_flight.entry(leader).or_default() += 1;
            let conn = self.conns.get_mut(&leader).and_then(Vec::pop);
            let addr = self.brokers.get(&leader).cloned().unwrap_or_default();
            in_flight.push(Box::pin(send(
                leader,
                addr,
                conn,
                batches,
                self.config.clone(),
            )));
        }
    }

    /// The partition's next batch: its retry, else records from its queue.
    fn next_batch(&mut self, key: &(Arc<str>, i32)) -> Option<Batch> {
        let max = self.config.max_batch_bytes;
        let (pid, epoch) = self.producer?;
        let generation = self.generation;
        let st = self.partitions.get_mut(key)?;
        if let Some(mut b) = st.retry.take() {
            st.not_before = None;
            if b.refused_producer {
                if st.generation != generation {
                    st.generation = generation;
                    st.sequence = 0;
                }
                let records: Vec<NewRecord> = b
                    .parts
                    .iter()
                    .flat_map(|p| p.records.iter().cloned())
                    .collect();
                b.encoded = encode(&records, pid, epoch, st.sequence);
                b.producer_id = pid;
                b.producer_epoch = epoch;
                b.base_sequence = st.sequence;
                b.generation = generation;
                b.refused_producer = false;
            }
            return Some(b);
        }
        let max = st.max_bytes.map_or(max, |m| m.min(max));
        // A request's records for one partition over the learned limit go in pieces.
        while let Some(front) = st.queue.front_mut()
            && front.bytes + BATCH_OVERHEAD > max
            && let Some(second) = front.split()
        {
            st.queue.insert(1, second);
        }
        let mut parts = Vec::new();
        let mut bytes = BATCH_OVERHEAD;
        while let Some(p) = st.queue.front() {
            if !parts.is_empty() && bytes + p.bytes > max {
                break;
            }
            bytes += p.bytes;
            parts.extend(st.queue.pop_front());
        }
        if parts.is_empty() {
            return None;
        }
        if st.generation != generation {
            st.generation = generation;
            st.sequence = 0;
        }
        let records: Vec<NewRecord> = if parts.len() == 1 {
            parts[0].records.clone()
        } else {
            parts
                .iter()
                .flat_map(|p| p.records.iter().cloned())
                .collect()
        };
        let count = records.len() as i32;
        Some(Batch {
            topic: key.0.clone(),
            partition: key.1,
            encoded: encode(&records, pid, epoch, st.sequence),
            parts,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: st.sequence,
            generation,
            count,
            attempts: 0,
            refused_producer: false,
        })
    }

    /// Retires the producer id: the next batch of every partition starts sequence 0
    /// under a new one.
    fn retire_producer(&mut self) {
        metrics::counter!("strata_gateway_producer_resets_total").increment(1);
        self.producer = None;
        self.generation += 1;
    }

    fn complete(&mut self, sent: Sent) {
        if let Some(n) = self.in_flight.get_mut(&sent.leader) {
            *n = n.saturating_sub(1);
        }
        if let Some(c) = sent.conn {
            self.conns.entry(sent.leader).or_default().push(c);
        }
        let response = match sent.result {
            Ok(r) => r,
            Err(e) => {
                // Lost connection or timeout: whether the batches were appended is
                // unknown; resending them with their sequences is safe.
                self.last_error = Some(e.clone());
                self.mark_stale_all(&sent.batches);
                for b in sent.batches {
                    self.retry_or_fail(b, e.clone(), true);
                }
                return;
            }
        };
        let mut answers: HashMap<(String, i32), Answer> = HashMap::new();
        for t in response.responses {
            for p in t.partition_responses {
                answers.insert(
                    (t.name.0.to_string(), p.index),
                    Answer {
                        code: p.error_code,
                        base: p.base_offset,
                        append_time: p.log_append_time_ms,
                        message: p.error_message.map(|m| m.to_string()),
                    },
                );
            }
        }
        for b in sent.batches {
            let answer = answers.remove(&(b.topic.to_string(), b.partition));
            let Some(Answer {
                code,
                base,
                append_time,
                message,
            }) = answer
            else {
                let e = ServiceError::new(
                    codes::NETWORK_EXCEPTION,
                    format!(
                        "the broker's produce response has no answer for {}-{}",
                        b.topic, b.partition
                    ),
                );
                self.retry_or_fail(b, e, true);
                continue;
            };
            if code == 0 {
                self.succeed(b, base, append_time);
                continue;
            }
            let msg = message.unwrap_or_else(|| {
                strata_proto::ErrorCode::from_code(code)
                    .map_or_else(|| format!("error {code}"), |c| c.to_string())
            });
            let e = ServiceError::new(
                i32::from(code),
                format!("{}-{}: {msg}", b.topic, b.partition),
            );
            self.failed(b, code, e);
        }
    }

    fn succeed(&mut self, b: Batch, base: i64, append_time: i64) {
        metrics::counter!("strata_gateway_produce_batches_total").increment(1);
        if let Some(st) = self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
            st.in_flight = false;
            if st.generation == b.generation {
                st.sequence = st.sequence.wrapping_add(b.count) & i32::MAX;
            }
        }
        let mut offset = base;
        for p in b.parts {
            let records = &p.records;
            let partition = b.partition;
            let first = offset;
            p.sink.fill(&p.idx, |i| {
                Ok(Produced {
                    partition,
                    offset: first + i as i64,
                    timestamp: Some(if append_time >= 0 {
                        append_time
                    } else {
                        records[i].timestamp
                    }),
                })
            });
            offset += p.records.len() as i64;
        }
    }

    fn failed(&mut self, mut b: Batch, code: i16, e: ServiceError) {
        let c = i32::from(code);
        match code {
            _ if c == codes::MESSAGE_TOO_LARGE || c == codes::RECORD_LIST_TOO_LARGE => {
                // Refused whole, so nothing was appended: this partition's batches are
                // cut smaller from now on and the records go again, in order, with the
                // same sequence.
                let total: usize = b.parts.iter().map(|p| p.records.len()).sum();
                self.release(&b);
                if total < 2 {
                    b.fail(&e);
                    return;
                }
                let limit = (b.encoded.len() / 2).max(1);
                match self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
                    Some(st) => {
                        st.max_bytes = Some(st.max_bytes.map_or(limit, |m| m.min(limit)));
                        for p in b.parts.into_iter().rev() {
                            st.queue.push_front(p);
                        }
                    }
                    None => b.fail(&e),
                }
            }
            OUT_OF_ORDER_SEQUENCE_NUMBER
            | UNKNOWN_PRODUCER_ID
            | INVALID_PRODUCER_EPOCH
            | PRODUCER_FENCED => {
                // The broker lost or doubts this producer's state; the batch was refused.
                // A new producer id sends it again from sequence 0.
                tracing::warn!(error = %e, "gateway producer: retiring the producer id");
                if b.generation == self.generation {
                    self.retire_producer();
                }
                b.refused_producer = true;
                self.retry_or_fail(b, e, false);
            }
            _ if e.retriable() => {
                if (c == codes::NOT_LEADER_OR_FOLLOWER || c == codes::LEADER_NOT_AVAILABLE)
                    && let Some(m) = self.topics.get_mut(&b.topic)
                {
                    m.stale = true;
                }
                let unknown = c == codes::REQUEST_TIMED_OUT
                    || c == codes::NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    || c == codes::NETWORK_EXCEPTION
                    || c == codes::KAFKA_STORAGE_ERROR;
                self.retry_or_fail(b, e, unknown);
            }
            _ => {
                // Refused for good (unknown partition, invalid record, ...): nothing was
                // appended, so the sequence stays for the next batch.
                self.release(&b);
                b.fail(&e);
            }
        }
    }

    fn release(&mut self, b: &Batch) {
        if let Some(st) = self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
            st.in_flight = false;
        }
    }

    /// Sends `b` again after a backoff, or fails it once its retries or the delivery
    /// time are spent. `unknown`: the broker may have appended it.
    ///
    /// A leader change (lost connection, NOT_LEADER_OR_FOLLOWER, no leader, a timeout)
    /// is retried for the whole delivery timeout, so an election is a pause to an HTTP
    /// client, not an error, as with a Kafka client. Other retriable refusals
    /// (NOT_ENOUGH_REPLICAS, a storage error) describe the cluster's state rather than a
    /// moment in it and get `retries`, so the client hears 503 within about a second.
    fn retry_or_fail(&mut self, mut b: Batch, e: ServiceError, unknown: bool) {
        b.attempts += 1;
        let failover = matches!(
            e.code,
            codes::NETWORK_EXCEPTION
                | codes::NOT_LEADER_OR_FOLLOWER
                | codes::LEADER_NOT_AVAILABLE
                | codes::REQUEST_TIMED_OUT
        );
        let spent = (!failover && b.attempts > self.config.retries)
            || b.oldest().elapsed() >= self.config.delivery_timeout;
        if spent {
            self.release(&b);
            if unknown && b.generation == self.generation {
                // A later batch must not reuse this one's sequences: if it was appended,
                // the broker would answer that batch as a duplicate of this one.
                self.retire_producer();
            }
            b.fail(&e);
            return;
        }
        metrics::counter!("strata_gateway_produce_retries_total", "code" => e.code.to_string())
            .increment(1);
        let backoff = Duration::from_millis((100u64 << (b.attempts - 1).min(3)).min(500));
        if let Some(st) = self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
            st.in_flight = false;
            st.not_before = Some(Instant::now() + backoff);
            st.retry = Some(b);
        } else {
            b.fail(&e);
        }
    }

    fn mark_stale_all(&mut self, batches: &[Batch]) {
        for b in batches {
            if let Some(m) = self.topics.get_mut(&b.topic) {
                m.stale = true;
            }
        }
    }

    /// A connection for metadata and InitProducerId: the bootstrap address, else any
    /// broker metadata named.
    async fn meta_call<Req, Resp>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, ServiceError>
    where
        Req: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
        Resp: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion,
    {
        let timeout = self.config.request_timeout;
        if let Some(conn) = self.meta_conn.as_mut() {
            match conn.call(api, version, req, timeout).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    tracing::debug!(error = %e, "gateway producer: metadata connection lost");
                    self.meta_conn = None;
                }
            }
        }
        if let Some(l) = &self.config.local {
            let mut conn =
                KafkaConnection::local(&self.config.bootstrap, l.broker.clone(), CLIENT_ID);
            match conn.call(api, version, req, timeout).await {
                Ok(r) => {
                    self.meta_conn = Some(conn);
                    return Ok(r);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "gateway producer: in-process {api:?} failed")
                }
            }
        }
        let mut addrs = vec![self.config.bootstrap.clone()];
        addrs.extend(
            self.brokers
                .values()
                .filter(|a| **a != self.config.bootstrap)
                .cloned(),
        );
        let mut last = None;
        for addr in addrs {
            match KafkaConnection::connect(&addr, CLIENT_ID, timeout).await {
                Ok(mut conn) => match conn.call(api, version, req, timeout).await {
                    Ok(r) => {
                        self.meta_conn = Some(conn);
                        return Ok(r);
                    }
                    Err(e) => last = Some(e.to_string()),
                },
                Err(e) => last = Some(e.to_string()),
            }
        }
        Err(ServiceError::new(
            codes::LOCAL_ALL_BROKERS_DOWN,
            format!(
                "no broker answered {api:?}: {}",
                last.unwrap_or_else(|| "no address".into())
            ),
        ))
    }

    async fn init_producer_id(&mut self) -> Result<(), ServiceError> {
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = None;
        req.transaction_timeout_ms = i32::MAX;
        req.producer_id = kafka_protocol::messages::ProducerId(-1);
        req.producer_epoch = -1;
        let resp: InitProducerIdResponse = self
            .meta_call(ApiKey::InitProducerId, INIT_PRODUCER_ID_VERSION, &req)
            .await?;
        if resp.error_code != 0 {
            return Err(ServiceError::new(
                i32::from(resp.error_code),
                format!("InitProducerId: error {}", resp.error_code),
            ));
        }
        self.producer = Some((resp.producer_id.0, resp.producer_epoch));
        Ok(())
    }

    async fn refresh_metadata(&mut self, topics: &[Arc<str>]) -> Result<(), ServiceError> {
        let mut req = MetadataRequest::default();
        req.topics = Some(
            topics
                .iter()
                .map(|t| {
                    let mut mt = MetadataRequestTopic::default();
                    mt.name = Some(TopicName(StrBytes::from_string(t.to_string())));
                    mt
                })
                .collect(),
        );
        req.allow_auto_topic_creation = false;
        let resp: MetadataResponse = self
            .meta_call(ApiKey::Metadata, METADATA_VERSION, &req)
            .await?;
        for b in &resp.brokers {
            self.brokers
                .insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        let now = Instant::now();
        for t in &resp.topics {
            let Some(name) = t.name.as_ref() else {
                continue;
            };
            let Some(key) = topics.iter().find(|k| ***k == *name.0.as_str()) else {
                continue;
            };
            if t.error_code != 0 {
                // Unknown topic: partitions with no leader entry fail below.
                self.topics.insert(
                    key.clone(),
                    TopicMeta {
                        fetched: now,
                        leaders: Vec::new(),
                        stale: false,
                    },
                );
                continue;
            }
            let n = t
                .partitions
                .iter()
                .map(|p| p.partition_index + 1)
                .max()
                .unwrap_or(0)
                .max(0) as usize;
            let mut leaders = vec![-1; n];
            for p in &t.partitions {
                if p.partition_index >= 0 {
                    leaders[p.partition_index as usize] =
                        if p.error_code == 0 { p.leader_id.0 } else { -1 };
                }
            }
            self.topics.insert(
                key.clone(),
                TopicMeta {
                    fetched: now,
                    leaders,
                    stale: false,
                },
            );
        }
        Ok(())
    }
}

fn encode(
    records: &[NewRecord],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Bytes {
    batch(
        records,
        Compression::None,
        Some(ProducerFields {
            producer_id,
            producer_epoch,
            base_sequence,
        }),
    )
}

/// Sends one Produce request (acks=all) to `leader`, connecting first if needed.
async fn send(
    leader: i32,
    addr: String,
    conn: Option<KafkaConnection>,
    batches: Vec<Batch>,
    config: ProducerConfig,
) -> Sent {
    let mut req = ProduceRequest::default();
    req.acks = -1;
    let wait = config.delivery_timeout.min(Duration::from_secs(30));
    req.timeout_ms = wait.as_millis() as i32;
    let mut by_topic: Vec<TopicProduceData> = Vec::new();
    for b in &batches {
        let pd = {
            let mut pd = PartitionProduceData::default();
            pd.index = b.partition;
            pd.records = Some(b.encoded.clone());
            pd
        };
        match by_topic.iter_mut().find(|t| *t.name.0.as_str() == *b.topic) {
            Some(t) => t.partition_data.push(pd),
            None => {
                let mut t = TopicProduceData::default();
                t.name = TopicName(StrBytes::from_string(b.topic.to_string()));
                t.partition_data.push(pd);
                by_topic.push(t);
            }
        }
    }
    req.topic_data = by_topic;
    let local = config
        .local
        .as_ref()
        .filter(|l| l.node_id == leader)
        .map(|l| KafkaConnection::local(&addr, l.broker.clone(), CLIENT_ID));
    let mut conn = match conn.or(local) {
        Some(c) => c,
        None => match KafkaConnection::connect(&addr, CLIENT_ID, config.request_timeout).await {
            Ok(c) => c,
            Err(e) => {
                return Sent {
                    leader,
                    conn: None,
                    batches,
                    result: Err(ServiceError::new(codes::NETWORK_EXCEPTION, e.to_string())),
                };
            }
        },
    };
    // The broker answers within timeout_ms; the extra second covers the network.
    let deadline = wait + config.request_timeout.min(Duration::from_secs(1));
    match conn
        .call::<_, ProduceResponse>(ApiKey::Produce, PRODUCE_VERSION, &req, deadline)
        .await
    {
        Ok(resp) => Sent {
            leader,
            conn: Some(conn),
            batches,
            result: Ok(resp),
        },
        Err(e) => Sent {
            leader,
            conn: None,
            batches,
            result: Err(ServiceError::new(codes::NETWORK_EXCEPTION, e.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    //! The producer's idempotence rules against a scripted broker in-process (a
    //! `LocalBroker` answering real Kafka frames): what each Produce attempt carried
    //! (producer id, sequence, records) for each outcome the broker can give.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::VecDeque;

    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse as InitResp;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{BrokerId, RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

    use super::*;

    /// What the broker does with the next Produce request.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// Append (error 0) or refuse with this code.
        Answer(i16),
        /// Append, then lose the connection before answering.
        AppendThenDrop,
    }

    /// One batch as the broker received it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Seen {
        partition: i32,
        producer_id: i64,
        base_sequence: i32,
        count: i32,
    }

    #[derive(Default)]
    struct Fake {
        script: VecDeque<Step>,
        seen: Vec<Seen>,
        next_producer_id: i64,
        next_offset: HashMap<i32, i64>,
    }

    struct FakeBroker(Mutex<Fake>);

    fn frame<R: Encodable + HeaderVersion>(
        correlation: i32,
        api: ApiKey,
        version: i16,
        r: &R,
    ) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i32(0);
        let mut h = ResponseHeader::default();
        h.correlation_id = correlation;
        h.encode(&mut b, api.response_header_version(version))
            .unwrap();
        r.encode(&mut b, version).unwrap();
        let n = (b.len() - 4) as i32;
        b[0..4].copy_from_slice(&n.to_be_bytes());
        b.freeze()
    }

    impl FakeBroker {
        fn handle(&self, mut f: Bytes) -> Option<Bytes> {
            let api = ApiKey::try_from(i16::from_be_bytes([f[0], f[1]])).unwrap();
            let version = i16::from_be_bytes([f[2], f[3]]);
            let h = RequestHeader::decode(&mut f, api.request_header_version(version)).unwrap();
            let c = h.correlation_id;
            let mut st = self.0.lock().unwrap();
            match api {
                ApiKey::InitProducerId => {
                    st.next_producer_id += 1;
                    let mut r = InitResp::default();
                    r.producer_id = kafka_protocol::messages::ProducerId(st.next_producer_id);
                    Some(frame(c, api, version, &r))
                }
                ApiKey::Metadata => {
                    let mut r = MetadataResponse::default();
                    let mut b = MetadataResponseBroker::default();
                    b.node_id = BrokerId(1);
                    b.host = StrBytes::from_static_str("local");
                    r.brokers.push(b);
                    let mut t = MetadataResponseTopic::default();
                    t.name = Some(TopicName(StrBytes::from_static_str("t")));
                    for i in 0..2 {
                        let mut p = MetadataResponsePartition::default();
                        p.partition_index = i;
                        p.leader_id = BrokerId(1);
                        t.partitions.push(p);
                    }
                    r.topics.push(t);
                    Some(frame(c, api, version, &r))
                }
                ApiKey::Produce => {
                    let req = ProduceRequest::decode(&mut f, version).unwrap();
                    let step = st.script.pop_front().unwrap_or(Step::Answer(0));
                    let mut resp = ProduceResponse::default();
                    for t in req.topic_data {
                        let mut tr = TopicProduceResponse::default();
                        tr.name = t.name.clone();
                        for p in t.partition_data {
                            let records = p.records.unwrap();
                            let bh = strata_proto::batch::parse_header(&records).unwrap();
                            st.seen.push(Seen {
                                partition: p.index,
                                producer_id: bh.producer_id,
                                base_sequence: bh.base_sequence,
                                count: bh.record_count,
                            });
                            let code = match step {
                                Step::Answer(code) => code,
                                Step::AppendThenDrop => 0,
                            };
                            let mut pr = PartitionProduceResponse::default();
                            pr.index = p.index;
                            pr.error_code = code;
                            pr.log_append_time_ms = -1;
                            if code == 0 {
                                let next = st.next_offset.entry(p.index).or_default();
                                pr.base_offset = *next;
                                *next += i64::from(bh.record_count);
                            } else {
                                pr.base_offset = -1;
                            }
                            tr.partition_responses.push(pr);
                        }
                        resp.responses.push(tr);
                    }
                    match step {
                        Step::AppendThenDrop => None,
                        Step::Answer(_) => Some(frame(c, api, version, &resp)),
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    impl LocalBroker for FakeBroker {
        fn call(&self, frame: Bytes) -> Pin<Box<dyn Future<Output = Option<Bytes>> + Send>> {
            let r = self.handle(frame);
            Box::pin(std::future::ready(r))
        }
    }

    use std::future::Future;
    use std::pin::Pin;

    fn start(script: &[Step], delivery_timeout: Duration) -> (NativeProducer, Arc<FakeBroker>) {
        let fake = Arc::new(FakeBroker(Mutex::new(Fake {
            script: script.iter().copied().collect(),
            ..Fake::default()
        })));
        let p = NativeProducer::start(ProducerConfig {
            local: Some(LocalLeader {
                node_id: 1,
                broker: fake.clone(),
            }),
            delivery_timeout,
            ..ProducerConfig::new("local:0")
        });
        (p, fake)
    }

    fn records(n: usize, size: usize) -> Vec<ProduceRecord> {
        (0..n)
            .map(|i| ProduceRecord {
                partition: Some(0),
                value: Some(vec![i as u8; size]),
                ..ProduceRecord::default()
            })
            .collect()
    }

    fn seen(f: &FakeBroker) -> Vec<Seen> {
        f.0.lock().unwrap().seen.clone()
    }

    fn offsets(r: &[Result<Produced, ServiceError>]) -> Vec<i64> {
        r.iter().map(|x| x.as_ref().unwrap().offset).collect()
    }

    #[tokio::test]
    async fn a_retried_batch_keeps_its_producer_id_and_sequence() {
        let (p, f) = start(
            &[Step::Answer(6), Step::AppendThenDrop],
            Duration::from_secs(30),
        );
        let r = p.produce("t", 2, records(3, 10)).await;
        // Refused, then appended but unanswered, then answered: the broker saw the same
        // producer id and sequence three times (and deduplicates the third).
        assert!(r.iter().all(Result::is_ok), "{r:?}");
        let s = seen(&f);
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s.iter().all(|x| x == &s[0]), "{s:?}");
        assert_eq!((s[0].base_sequence, s[0].count), (0, 3));
        // The next request continues the sequence.
        p.produce("t", 2, records(2, 10)).await;
        let s = seen(&f);
        assert_eq!(
            (s[3].producer_id, s[3].base_sequence),
            (s[0].producer_id, 3)
        );
    }

    #[tokio::test]
    async fn not_enough_replicas_fails_after_three_retries_and_keeps_the_sequence() {
        let (p, f) = start(&[Step::Answer(19); 4], Duration::from_secs(30));
        let r = p.produce("t", 2, records(2, 10)).await;
        assert!(
            r.iter()
                .all(|x| x.as_ref().err().map(|e| e.code) == Some(19)),
            "{r:?}"
        );
        assert_eq!(seen(&f).len(), 4, "the first attempt and three retries");
        // Refused means not appended: the next batch reuses the sequence.
        let r = p.produce("t", 2, records(1, 10)).await;
        assert_eq!(offsets(&r), vec![0]);
        let s = seen(&f);
        assert_eq!(
            (s[4].producer_id, s[4].base_sequence),
            (s[0].producer_id, 0)
        );
    }

    #[tokio::test]
    async fn an_unknown_outcome_that_fails_retires_the_producer_id() {
        let script = [Step::AppendThenDrop; 100];
        let (p, f) = start(&script, Duration::from_millis(400));
        let r = p.produce("t", 2, records(2, 10)).await;
        assert!(r.iter().all(Result::is_err), "{r:?}");
        f.0.lock().unwrap().script.clear();
        // The failed batch may be in the log: the next one must not be taken for its
        // duplicate, so it comes from a new producer id, at sequence 0.
        let r = p.produce("t", 2, records(2, 10)).await;
        assert!(r.iter().all(Result::is_ok), "{r:?}");
        let s = seen(&f);
        let last = s.last().unwrap();
        assert_ne!(last.producer_id, s[0].producer_id);
        assert_eq!(last.base_sequence, 0);
    }

    #[tokio::test]
    async fn a_refused_sequence_is_sent_again_under_a_new_producer_id() {
        let (p, f) = start(
            &[Step::Answer(0), Step::Answer(45)],
            Duration::from_secs(30),
        );
        p.produce("t", 2, records(2, 10)).await;
        let r = p.produce("t", 2, records(3, 10)).await;
        assert_eq!(offsets(&r), vec![2, 3, 4]);
        let s = seen(&f);
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].base_sequence, 2);
        assert_ne!(s[2].producer_id, s[1].producer_id);
        assert_eq!((s[2].base_sequence, s[2].count), (0, 3));
    }

    #[tokio::test]
    async fn a_batch_over_the_limit_is_split_in_order_with_its_sequence() {
        let (p, f) = start(&[Step::Answer(10)], Duration::from_secs(30));
        let r = p.produce("t", 2, records(8, 100)).await;
        assert_eq!(offsets(&r), (0..8).collect::<Vec<_>>());
        let s = seen(&f);
        assert_eq!(s[0].count, 8);
        let resent: Vec<(i32, i32)> = s[1..].iter().map(|x| (x.base_sequence, x.count)).collect();
        assert!(resent.len() >= 2, "{resent:?}");
        let mut next = 0;
        for (seq, count) in &resent {
            assert_eq!(*seq, next, "{resent:?}");
            next += count;
        }
        assert_eq!(next, 8);
        assert!(s.iter().all(|x| x.producer_id == s[0].producer_id));
    }

    #[tokio::test]
    async fn keyed_records_follow_murmur2_and_bad_partitions_fail_alone() {
        let (p, f) = start(&[], Duration::from_secs(30));
        let mut rs = vec![ProduceRecord {
            partition: Some(7),
            value: Some(b"x".to_vec()),
            ..ProduceRecord::default()
        }];
        for k in ["a", "b", "c", "d"] {
            rs.push(ProduceRecord {
                key: Some(k.as_bytes().to_vec()),
                value: Some(b"v".to_vec()),
                ..ProduceRecord::default()
            });
        }
        let r = p.produce("t", 2, rs).await;
        assert_eq!(
            r[0].as_ref().unwrap_err().code,
            codes::UNKNOWN_TOPIC_OR_PARTITION
        );
        for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
            assert_eq!(
                r[i + 1].as_ref().unwrap().partition,
                partition_for_key(k.as_bytes(), 2)
            );
        }
        assert_eq!(seen(&f).iter().map(|s| s.count).sum::<i32>(), 4);
    }
}
