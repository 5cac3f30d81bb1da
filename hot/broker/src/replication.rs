//! The broker's replication duties: applying metadata as it changes, stopping the
//! heartbeats ([`crate::lifecycle`]) with the server, leader ticks (ISR shrink), and the replica fetchers that copy leaders' logs
//! to followers over the Kafka protocol (Fetch with a replica id and the last fetched
//! epoch, KIP-320: the leader answers with the diverging epoch, and the follower
//! truncates to where the logs part before it appends, KIP-101/279).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_proto::ErrorCode;
use strata_replica::Role;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::kafka_client::KafkaConnection;
use crate::lifecycle::Lifecycle;
use crate::metadata::MetadataCache;
use crate::partition::Partition;
use crate::replicas::ReplicaManager;
use crate::throttle::Throttles;

/// Fetch version followers use: v12 carries last_fetched_epoch and diverging_epoch with
/// topic names.
/// v15: the fetch carries the follower's broker epoch in ReplicaState (KIP-903), so the
/// leader can refuse an old incarnation's fetches; topics are named by id (v13+).
const REPLICA_FETCH_VERSION: i16 = 15;

/// What the replication duties use: the replicas, the metadata, this broker's
/// registration, the throttles.
#[derive(Debug)]
pub(crate) struct Replication {
    pub replicas: Arc<ReplicaManager>,
    pub metadata: Arc<MetadataCache>,
    pub lifecycle: Arc<Lifecycle>,
    pub throttles: Arc<Throttles>,
    pub config: Arc<BrokerConfig>,
}

impl Replication {
    fn cluster(&self) -> Arc<strata_controller::ClusterMetadata> {
        self.metadata.current()
    }

    fn node_id(&self) -> i32 {
        self.config.node_id
    }
}

/// Starts every replication duty; they stop with `shutdown`.
pub(crate) fn start(broker: &Arc<Replication>, shutdown: &CancellationToken) {
    tokio::spawn(broker.metadata.clone().run(shutdown.clone()));
    tokio::spawn(apply_metadata_changes(broker.clone(), shutdown.clone()));
    // The heartbeats started when the broker registered (`Broker::open`); they end
    // with the server.
    let (lifecycle, shutdown_) = (broker.lifecycle.clone(), shutdown.clone());
    tokio::spawn(async move {
        shutdown_.cancelled().await;
        lifecycle.stop_heartbeats();
    });
    tokio::spawn(leader_ticks(broker.clone(), shutdown.clone()));
    tokio::spawn(fetcher_manager(broker.clone(), shutdown.clone()));
}

async fn apply_metadata_changes(broker: Arc<Replication>, shutdown: CancellationToken) {
    let mut rx = broker.metadata.subscribe();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
        if let Err(e) = broker.replicas.reconcile().await {
            tracing::warn!(error = %e, "cannot apply metadata");
        }
    }
}

/// Leader duties on a timer: the ISR shrinks after replica.lag.time.max.ms.
async fn leader_ticks(broker: Arc<Replication>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut under = 0;
        for p in broker.replicas.partitions() {
            if !p.is_leader() {
                continue;
            }
            if p.is_under_replicated() {
                under += 1;
            }
            match p.tick() {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "leader tick failed")
                }
            }
        }
        metrics::gauge!("strata_under_replicated_partitions").set(under as f64);
        let md = broker.cluster();
        metrics::gauge!("strata_offline_partitions").set(md.offline_partitions().len() as f64);
        metrics::gauge!("strata_controller_is_leader").set(
            if md.controller_leader == Some(broker.node_id() as u64) {
                1.0
            } else {
                0.0
            },
        );
    }
}

fn following(broker: &Replication) -> HashMap<i32, Vec<Arc<Partition>>> {
    let mut by_leader: HashMap<i32, Vec<Arc<Partition>>> = HashMap::new();
    for p in broker.replicas.partitions() {
        if let Role::Follower { leader } = p.role() {
            by_leader.entry(leader).or_default().push(p);
        }
    }
    by_leader
}

/// One fetcher task per leader broker this broker follows partitions of.
async fn fetcher_manager(broker: Arc<Replication>, shutdown: CancellationToken) {
    let mut fetchers: HashMap<i32, CancellationToken> = HashMap::new();
    let mut rx = broker.metadata.subscribe();
    loop {
        let wanted: Vec<i32> = following(&broker).into_keys().collect();
        fetchers.retain(|leader, token| {
            let keep = wanted.contains(leader);
            if !keep {
                token.cancel();
            }
            keep
        });
        for leader in wanted {
            fetchers.entry(leader).or_insert_with(|| {
                let token = shutdown.child_token();
                tokio::spawn(fetcher(broker.clone(), leader, token.clone()));
                token
            });
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = rx.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// Copies the logs of the partitions `leader` leads to their replicas here.
async fn fetcher(broker: Arc<Replication>, leader: i32, token: CancellationToken) {
    let mut conn: Option<KafkaConnection> = None;
    let mut session = FetchSession::default();
    let client_id = format!("strata-replica-fetcher-{}", broker.node_id());
    loop {
        if token.is_cancelled() {
            return;
        }
        let parts = following(&broker).remove(&leader).unwrap_or_default();
        if parts.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let Some(addr) = broker
            .cluster()
            .brokers
            .get(&leader)
            .map(|b| format!("{}:{}", b.host, b.port))
        else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if conn.as_ref().is_none_or(|c| c.addr() != addr) {
            match KafkaConnection::connect_with(
                &addr,
                &client_id,
                Duration::from_secs(3),
                &broker.config.inter_broker_client,
            )
            .await
            {
                // A leader's answer is bounded like a request to this broker: the fetch
                // asks for 16 MiB, and KIP-74 lets one batch (max.message.bytes) exceed it.
                Ok(c) => conn = Some(c.with_max_response_bytes(broker.config.max_request_bytes)),
                Err(e) => {
                    tracing::debug!(leader, error = %e, "cannot reach the leader");
                    tokio::select! {
                        _ = token.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        // Replicas catching up wait while the follower throttle's bucket is empty.
        let (parts, throttled) = follower_throttle(&broker, parts);
        if parts.is_empty() {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            continue;
        }
        let req = session.request(broker.node_id(), broker.lifecycle.broker_epoch(), &parts);
        let r: Result<FetchResponse, _> = tokio::select! {
            _ = token.cancelled() => return,
            r = c.call(ApiKey::Fetch, REPLICA_FETCH_VERSION, &req, Duration::from_secs(10)) => r,
        };
        match r {
            Ok(resp) => {
                session.answered(&resp);
                if !throttled.is_empty() {
                    let bytes: usize = resp
                        .responses
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, p)))
                        .filter(|(id, p)| throttled.contains(&(*id, p.partition_index)))
                        .map(|(_, p)| p.records.as_ref().map_or(0, |r| r.len()))
                        .sum();
                    broker.throttles.follower.record(bytes);
                }
                // Every partition refused (leadership is moving): wait for the metadata
                // instead of asking again at once (Kafka's replica.fetch.backoff.ms).
                if handle_fetch_response(&broker, leader, &parts, resp) {
                    tokio::select! {
                        _ = token.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                }
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "replica fetch failed");
                session.failed();
                conn = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The partitions to fetch now, and which of them are throttled (see `crate::throttle`):
/// when a follower rate is set and its bucket is empty, the throttled ones are left out.
fn follower_throttle(
    broker: &Replication,
    parts: Vec<Arc<Partition>>,
) -> (Vec<Arc<Partition>>, HashSet<(uuid::Uuid, i32)>) {
    let mut throttled = HashSet::new();
    let md = broker.cluster();
    let node = broker.node_id();
    let Some(rate) = broker.throttles.follower.rate(&md, node) else {
        return (parts, throttled);
    };
    let is_throttled = |p: &Partition| {
        md.partition(&p.topic, p.index).is_some_and(|rec| {
            crate::throttle::is_throttled(rec, node, node, &p.config().follower_throttled_replicas)
        })
    };
    let mut admits = None;
    let parts = parts
        .into_iter()
        .filter(|p| {
            if !is_throttled(p) {
                return true;
            }
            let ok = *admits.get_or_insert_with(|| {
                broker
                    .throttles
                    .follower
                    .admits(rate, std::time::Instant::now())
            });
            if ok {
                throttled.insert((p.topic_id.0, p.index));
            }
            ok
        })
        .collect();
    (parts, throttled)
}

/// This follower's side of a fetch session with one leader (KIP-227): the first fetch
/// names every partition and asks for a session; later ones name only partitions whose
/// position, epoch or log start moved, and forget those no longer followed from this
/// leader. Any failure starts over with a full fetch (closing the old session).
#[derive(Default)]
struct FetchSession {
    id: i32,
    /// The next request's epoch: 0 asks for a new session (a full fetch).
    epoch: i32,
    /// What the leader's session holds of each partition (as last sent).
    sent: HashMap<(uuid::Uuid, i32), FetchPartition>,
}

impl FetchSession {
    fn request(&mut self, node: i32, broker_epoch: i64, parts: &[Arc<Partition>]) -> FetchRequest {
        let mut topics: BTreeMap<(Arc<str>, uuid::Uuid), Vec<FetchPartition>> = BTreeMap::new();
        let mut current = std::collections::HashSet::with_capacity(parts.len());
        if self.epoch == 0 {
            self.sent.clear();
        }
        for p in parts {
            let (offset, epoch) = p.fetch_position();
            let mut fp = FetchPartition::default();
            fp.partition = p.index;
            fp.current_leader_epoch = p.leader_epoch();
            fp.fetch_offset = offset;
            fp.last_fetched_epoch = epoch.unwrap_or(-1);
            fp.log_start_offset = p.log().local_start();
            fp.partition_max_bytes = 1 << 20;
            let key = (p.topic_id.0, p.index);
            current.insert(key);
            if self.sent.get(&key) == Some(&fp) {
                continue;
            }
            self.sent.insert(key, fp.clone());
            topics
                .entry((p.topic.clone(), p.topic_id.0))
                .or_default()
                .push(fp);
        }
        let mut forgotten: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
        self.sent.retain(|key, _| {
            let keep = current.contains(key);
            if !keep {
                forgotten.entry(key.0).or_default().push(key.1);
            }
            keep
        });
        let mut req = FetchRequest::default();
        // v15 names the replica in ReplicaState only (replica_id is gone from the wire).
        req.replica_state.replica_id = BrokerId(node);
        req.replica_state.replica_epoch = broker_epoch;
        req.max_wait_ms = 500;
        req.min_bytes = 1;
        req.max_bytes = 16 << 20;
        req.session_id = self.id;
        req.session_epoch = self.epoch;
        req.topics = topics
            .into_iter()
            .map(|((name, id), partitions)| {
                let mut t = FetchTopic::default();
                t.topic = TopicName(StrBytes::from_string(name.to_string()));
                t.topic_id = id;
                t.partitions = partitions;
                t
            })
            .collect();
        req.forgotten_topics_data = forgotten
            .into_iter()
            .map(|(id, partitions)| {
                let mut f = ForgottenTopic::default();
                f.topic_id = id;
                f.partitions = partitions;
                f
            })
            .collect();
        req
    }

    /// The leader answered the request made last (a full one if the epoch is 0).
    fn answered(&mut self, resp: &FetchResponse) {
        if resp.error_code != 0 {
            // The session is gone or out of step (or the whole fetch was refused):
            // start over. FETCH_SESSION_ID_NOT_FOUND means there is nothing to close.
            if resp.error_code == ErrorCode::FetchSessionIdNotFound.code() {
                self.id = 0;
            }
            self.epoch = 0;
        } else if resp.session_id == 0 {
            // No session (the leader's cache is full), or the leader closed it.
            self.id = 0;
            self.epoch = 0;
        } else {
            self.id = resp.session_id;
            self.epoch = crate::fetch_sessions::next_epoch(self.epoch);
        }
    }

    /// The request failed on the way: the next one is full and closes this session.
    fn failed(&mut self) {
        self.epoch = 0;
    }
}

/// Applies a leader's answer; true if it refused every partition it answered (or the
/// whole fetch), so the fetcher waits before asking again. An incremental answer with no
/// partitions (nothing new) is not a refusal.
fn handle_fetch_response(
    broker: &Replication,
    leader: i32,
    parts: &[Arc<Partition>],
    resp: FetchResponse,
) -> bool {
    if resp.error_code != 0 {
        tracing::debug!(leader, error = resp.error_code, "replica fetch refused");
        return resp.error_code != ErrorCode::FetchSessionIdNotFound.code()
            && resp.error_code != ErrorCode::InvalidFetchSessionEpoch.code();
    }
    let answered = resp
        .responses
        .iter()
        .map(|t| t.partitions.len())
        .sum::<usize>();
    let mut any_served = false;
    // By (topic id, partition): a follower of thousands of partitions matches each
    // answer in constant time, not by a walk of all of them.
    let by_id: std::collections::HashMap<_, &Arc<Partition>> =
        parts.iter().map(|p| ((p.topic_id.0, p.index), p)).collect();
    for t in resp.responses {
        for pd in t.partitions {
            let Some(&p) = by_id.get(&(t.topic_id, pd.partition_index)) else {
                continue;
            };
            // Leadership may have moved while the fetch was in flight.
            if p.role() != (Role::Follower { leader }) {
                continue;
            }
            let result = match ErrorCode::from_code(pd.error_code) {
                Some(ErrorCode::None) => {
                    any_served = true;
                    if pd.diverging_epoch.epoch >= 0 {
                        tracing::debug!(topic = %p.topic, partition = p.index, epoch = pd.diverging_epoch.epoch, end_offset = pd.diverging_epoch.end_offset, "the leader says our logs diverge");
                        p.on_diverging_epoch(
                            pd.diverging_epoch.epoch,
                            pd.diverging_epoch.end_offset,
                        )
                    } else {
                        let mut records =
                            pd.records.as_ref().map(|r| r.to_vec()).unwrap_or_default();
                        let r = p.append_replicated(&mut records, pd.high_watermark);
                        // Followers follow the leader's log start (Kafka's
                        // maybeIncrementLogStartOffset): what retention, a checkpoint of
                        // committed offsets, or offload plus local retention dropped there
                        // goes here too.
                        if r.is_ok() && pd.log_start_offset > p.log().local_start() {
                            let to = pd.log_start_offset.min(p.log().log_end());
                            if let Err(e) = p.advance_log_start(to) {
                                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot follow the leader's log start");
                            }
                        }
                        r
                    }
                }
                Some(ErrorCode::OffsetOutOfRange) => {
                    any_served = true;
                    tracing::debug!(topic = %p.topic, partition = p.index, leader_log_start = pd.log_start_offset, "replica fetch out of range");
                    p.on_fetch_out_of_range(pd.log_start_offset, pd.high_watermark)
                }
                // Leadership changed: the metadata will say where to fetch from.
                other => {
                    tracing::debug!(topic = %p.topic, partition = p.index, ?other, code = pd.error_code, "replica fetch error");
                    Ok(())
                }
            };
            if let Err(e) = result {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot apply fetched data");
            }
        }
    }
    let _ = broker;
    answered > 0 && !any_served
}
