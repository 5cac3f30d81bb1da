//! The send path: which ready partitions go to which leader in one Produce request
//! (acks=all), the request itself over a connection (or the in-process broker), and
//! reading its answer back into each batch's records.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_client::KafkaConnection;

use super::accumulator::Batch;
use super::engine::Engine;
use super::{CLIENT_ID, ProducerConfig};
use crate::service::{Produced, ServiceError, codes};

const PRODUCE_VERSION: i16 = 9;

/// A partition's answer in a Produce response.
struct Answer {
    code: i16,
    base: i64,
    append_time: i64,
    message: Option<String>,
}

/// The outcome of one Produce request to one leader.
pub(super) struct Sent {
    pub(super) leader: i32,
    pub(super) conn: Option<KafkaConnection>,
    pub(super) batches: Vec<Batch>,
    pub(super) result: Result<ProduceResponse, ServiceError>,
}

impl Engine {
    /// Sends a request to every idle leader that has a partition with work.
    pub(super) async fn start_requests(
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

    pub(super) fn complete(&mut self, sent: Sent) {
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

    pub(super) fn release(&mut self, b: &Batch) {
        if let Some(st) = self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
            st.in_flight = false;
        }
    }
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
        None => match KafkaConnection::connect_with(
            &addr,
            CLIENT_ID,
            config.request_timeout,
            &config.security,
        )
        .await
        {
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
