//! The producer task: the state it owns alone (partitions, leaders, connections,
//! the producer id) and its loop, which takes requests' records in, starts Produce
//! requests and completes them, and fails records past the delivery timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use strata_client::KafkaConnection;
use tokio::sync::mpsc;

use super::ProducerConfig;
use super::accumulator::{PartitionState, Pending};
use super::metadata::TopicMeta;
use super::send::Sent;
use crate::service::{ServiceError, codes};

/// The producer task's state.
pub(super) struct Engine {
    pub(super) config: ProducerConfig,
    pub(super) partitions: HashMap<(Arc<str>, i32), PartitionState>,
    pub(super) topics: HashMap<Arc<str>, TopicMeta>,
    pub(super) brokers: HashMap<i32, String>,
    /// Idle connections by leader.
    pub(super) conns: HashMap<i32, Vec<KafkaConnection>>,
    pub(super) meta_conn: Option<KafkaConnection>,
    /// Requests in flight by leader.
    pub(super) in_flight: HashMap<i32, usize>,
    pub(super) producer: Option<(i64, i16)>,
    pub(super) generation: u64,
    /// When InitProducerId or metadata last failed: wait before asking again.
    pub(super) backoff_until: Option<Instant>,
    pub(super) last_error: Option<ServiceError>,
    pub(super) last_expire: Instant,
}

impl Engine {
    pub(super) fn new(config: ProducerConfig) -> Engine {
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

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Vec<Pending>>) {
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
}
