//! The broker: the partitions hosted here, kept in line with the controller's metadata
//! (which replicas live here, who leads them, with which epochs and ISRs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use strata_controller::{
    BrokerRegistration, ClusterMetadata, ControllerApi, Endpoint, TopicRecord,
};
use strata_log::Clock;
use strata_proto::{TopicConfig, TopicId};
use strata_replica::{AlterPartitionError, AlterPartitionRequest, CommittedIsr, PartitionState};
use strata_tier::{PartitionKey, Tier};

use crate::checkpoints;
use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::metadata::MetadataCache;
use crate::partition::{AlterPartitionSender, Partition, read_topic_id};

/// Threads that open partitions at start (and for a new topic's replicas), and flush
/// them at shutdown: that work waits on the disk more than it computes, so more threads
/// than cores overlap it.
const OPEN_THREADS: usize = 8;

/// Runs `f` on every item, on up to `threads` scoped threads taking items in turn.
fn on_threads<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(items.len()) {
            scope.spawn(|| {
                while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                    f(item);
                }
            });
        }
    });
}

/// A topic, and the partitions of it this broker hosts.
#[derive(Debug)]
pub struct TopicState {
    pub name: Arc<str>,
    pub id: TopicId,
    pub overrides: BTreeMap<String, String>,
    pub config: TopicConfig,
    /// The partitions with a replica here (any role), in index order.
    pub partitions: Vec<Arc<Partition>>,
    /// The topic's partition count in the cluster.
    pub partition_count: i32,
    /// The cluster id the topic's objects are stored under (a recovered topic keeps the
    /// one it was written under).
    pub storage_cluster_id: Option<String>,
    /// Replicas assigned here that could not be opened (a corrupt or unreadable
    /// directory, no file descriptors left), with the reason: offline, answered with
    /// KAFKA_STORAGE_ERROR, retried at each reconcile. The topic's other partitions serve.
    pub offline: BTreeMap<i32, String>,
}

/// The topics with a replica here (or assigned here and offline), by name and by id.
#[derive(Debug, Default)]
struct HostedTopics {
    by_name: BTreeMap<Arc<str>, Arc<TopicState>>,
    by_id: std::collections::HashMap<TopicId, Arc<TopicState>>,
}

impl HostedTopics {
    fn new(by_name: BTreeMap<Arc<str>, Arc<TopicState>>) -> HostedTopics {
        let by_id = by_name.values().map(|t| (t.id, t.clone())).collect();
        HostedTopics { by_name, by_id }
    }
}

/// The hosted state of `rec`'s topic if applying `rec` would not change it: the record
/// is the one applied last time, and every replica of it assigned here is open (an
/// offline one is retried at every reconcile).
fn unchanged<'a>(
    rec: &Arc<TopicRecord>,
    existing: Option<&'a Arc<TopicState>>,
    last: Option<&ClusterMetadata>,
) -> Option<&'a Arc<TopicState>> {
    let state = existing?;
    let before = last?.topics.get(&rec.name)?;
    // Usually the same record: a change copies only the topics it touches.
    let same = Arc::ptr_eq(before, rec) || before == rec;
    (state.offline.is_empty() && same).then_some(state)
}

impl TopicState {
    /// The hosted replica of partition `index`, if any (`partitions` is sorted by
    /// index: a lookup is a binary search, not a walk of a 2,500-partition topic).
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        self.partitions
            .binary_search_by_key(&index, |p| p.index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }

    /// The error for a request to partition `index` when no replica of it is open here:
    /// KAFKA_STORAGE_ERROR if its replica here is offline, NOT_LEADER_OR_FOLLOWER if the
    /// topic has it (on other brokers), UNKNOWN_TOPIC_OR_PARTITION otherwise.
    pub fn missing_partition_code(&self, index: i32) -> strata_proto::ErrorCode {
        if self.offline.contains_key(&index) {
            strata_proto::ErrorCode::KafkaStorageError
        } else if index >= 0 && index < self.partition_count {
            strata_proto::ErrorCode::NotLeaderOrFollower
        } else {
            strata_proto::ErrorCode::UnknownTopicOrPartition
        }
    }
}

/// A topic as a request names it.
#[derive(Clone, Copy, Debug)]
pub enum TopicRef<'a> {
    Name(&'a str),
    Id(TopicId),
}

/// Producer ids are reserved from the controller in blocks, as Kafka's ProducerIdManager
/// does.
const PRODUCER_ID_BLOCK: i64 = 1000;

/// The broker's shared state. One per process; every connection holds an `Arc`.
#[derive(Debug)]
pub struct Broker {
    pub(crate) config: BrokerConfig,
    pub(crate) metadata: Arc<MetadataCache>,
    pub(crate) clock: Arc<dyn Clock>,
    topics: RwLock<HostedTopics>,
    /// Serialises the application of metadata to local state, and holds the metadata
    /// last applied (a topic whose record did not change since is not looked at again).
    reconcile_lock: tokio::sync::Mutex<Option<Arc<ClusterMetadata>>>,
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
    /// Every listener's advertised address (registered with the controller).
    advertised: Vec<Endpoint>,
    /// This broker's registration epoch with the controller.
    broker_epoch: AtomicI64,
    /// Stops the heartbeats, which start as soon as the broker registers (before its
    /// partitions open: opening thousands can outlast the session timeout) and end
    /// with the server ([`crate::Server`]) or when the broker is dropped.
    pub(crate) heartbeats_stop: tokio_util::sync::CancellationToken,
    /// Fetch sessions (KIP-227).
    pub(crate) fetch_sessions: crate::api::fetch_session::FetchSessions,
    /// Tiered storage, when an object store is configured.
    pub(crate) tier: Option<Arc<Tier>>,
    /// Local bytes of tiered partitions, refreshed by housekeeping (for the disk cap).
    tiered_local_bytes: AtomicU64,
    /// The coordinators of the consumer groups whose offsets partitions this broker leads.
    pub(crate) groups: crate::groups::Groups,
    /// The transaction coordinator of the `__transaction_state` partitions led here.
    pub(crate) txns: crate::txns::Txns,
    /// Partitions send their AlterPartition requests here ([`Broker::open`] starts the
    /// task that forwards them to the controller).
    alter_partitions: AlterPartitionSender,
    /// The authorizer over the current metadata's ACLs.
    pub(crate) authz: crate::api::AuthzCache,
    /// Client quotas: what each user and client id used.
    pub(crate) quotas: crate::quota::Quotas,
    /// Replication throttles for replicas catching up (as leader, and as follower).
    pub(crate) leader_throttle: crate::throttle::Throttle,
    pub(crate) follower_throttle: crate::throttle::Throttle,
    /// What the checkpoint file held at start for partitions not opened yet (each entry
    /// is taken by the partition's first open).
    saved_checkpoints: std::sync::Mutex<std::collections::HashMap<String, checkpoints::Entry>>,
    /// The last stop was clean (`checkpoints::take_clean_shutdown`): the saved entries
    /// describe the logs exactly, active segments' indexes included.
    clean_stop: bool,
    /// One checkpoint file write at a time (housekeeping, shutdown).
    checkpoint_lock: std::sync::Mutex<()>,
    /// The first reconcile has opened every replica assigned here ([`Self::load`]):
    /// until then the checkpoint file is not rewritten (it would lose the entries of
    /// partitions not open yet) and a stop is not marked clean.
    loaded: std::sync::atomic::AtomicBool,
    /// Partitions asked to compact their small Parquet files at their next round
    /// (`strata tier iceberg compact`).
    pub(crate) compaction_requests: std::sync::Mutex<std::collections::HashSet<(TopicId, i32)>>,
}

impl Broker {
    /// Joins the cluster: fetches metadata from the controller, registers this broker
    /// (at `advertised`) and removes directories of deleted topics. The replicas
    /// metadata assigns here open with [`Self::load`], which the caller may run while
    /// the server ([`crate::Server`], with the background duties) already answers:
    /// requests for a partition still opening get NOT_LEADER_OR_FOLLOWER
    /// ([`Self::missing_partition_code`]) and clients retry.
    pub async fn open(
        config: BrokerConfig,
        controller: Arc<dyn ControllerApi>,
        clock: Arc<dyn Clock>,
        tier: Option<Arc<Tier>>,
        advertised: Vec<Endpoint>,
    ) -> Result<Arc<Broker>, ApiError> {
        if !advertised
            .iter()
            .any(|e| e.name == config.inter_broker_listener.name())
        {
            return Err(ApiError::new(
                strata_proto::ErrorCode::InvalidRequest,
                format!(
                    "the inter-broker listener {} is not among the listeners",
                    config.inter_broker_listener
                ),
            ));
        }
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            ApiError::new(
                strata_proto::ErrorCode::KafkaStorageError,
                format!("cannot create data dir {}: {e}", config.data_dir.display()),
            )
        })?;
        // Every crate that reads records (the log, the tier, Parquet, the coordinators)
        // decompresses through strata-proto under this one cap.
        strata_proto::compression::set_max_decompressed_bytes(
            config.limits.max_decompressed_batch_bytes,
        );
        let metadata =
            Arc::new(MetadataCache::connect(controller, config.controller_timeout).await?);
        let (alter_partitions, mut alter_rx) = tokio::sync::mpsc::unbounded_channel();
        let txn_config = strata_txn::TxnConfig {
            transaction_max_timeout_ms: config
                .transaction_max_timeout
                .as_millis()
                .min(i32::MAX as u128) as i32,
            transactional_id_expiration_ms: config.transactional_id_expiration.as_millis() as i64,
            txn_state_partitions: config.transaction_state_partitions,
        };
        let fetch_sessions = crate::api::fetch_session::FetchSessions::new(
            config.fetch_session_slots,
            config.fetch_session_partitions,
        );
        // The marker goes (durably) before any log opens: from here on they change.
        let clean_stop = checkpoints::take_clean_shutdown(&config.data_dir);
        let saved_checkpoints = std::sync::Mutex::new(checkpoints::read(&config.data_dir));
        let broker = Arc::new(Broker {
            saved_checkpoints,
            clean_stop,
            loaded: Default::default(),
            compaction_requests: Default::default(),
            checkpoint_lock: Default::default(),
            config,
            metadata,
            clock,
            topics: RwLock::new(HostedTopics::default()),
            reconcile_lock: tokio::sync::Mutex::new(None),
            producer_ids: tokio::sync::Mutex::new((0, 0)),
            advertised,
            broker_epoch: AtomicI64::new(-1),
            heartbeats_stop: tokio_util::sync::CancellationToken::new(),
            fetch_sessions,
            tier,
            tiered_local_bytes: AtomicU64::new(0),
            groups: crate::groups::Groups::default(),
            txns: crate::txns::Txns::new(txn_config),
            alter_partitions,
            authz: Default::default(),
            quotas: Default::default(),
            leader_throttle: crate::throttle::Throttle::new(crate::throttle::Side::Leader),
            follower_throttle: crate::throttle::Throttle::new(crate::throttle::Side::Follower),
        });
        // Ends when the broker is dropped (the partitions' senders go with it).
        let weak = Arc::downgrade(&broker);
        tokio::spawn(async move {
            while let Some((p, req)) = alter_rx.recv().await {
                let Some(broker) = weak.upgrade() else { return };
                broker.send_alter_partition(p, req);
            }
        });
        broker.register().await?;
        tokio::spawn(crate::replication::heartbeats(
            Arc::downgrade(&broker),
            broker.heartbeats_stop.clone(),
        ));
        broker.remove_stray_directories();
        Ok(broker)
    }

    /// Opens and recovers every replica metadata assigns here (the first reconcile; in
    /// parallel, see `open_new_partitions`). Until it returns, partitions not open yet
    /// answer NOT_LEADER_OR_FOLLOWER.
    pub async fn load(&self) -> Result<(), ApiError> {
        self.reconcile().await?;
        self.loaded.store(true, Ordering::Release);
        // Entries no open took belong to partitions no longer assigned here.
        self.saved_checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    /// Whether [`Self::load`] has opened every replica assigned here.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Registers with the controller (again after a fencing or a controller restart
    /// that forgot us); the new broker epoch fences requests made under the old one.
    pub(crate) async fn register(&self) -> Result<(), ApiError> {
        let (host, port) = self.advertised();
        let rec = self
            .controller()
            .register_broker(BrokerRegistration {
                broker_id: self.node_id(),
                host,
                port,
                rack: None,
                listeners: self.advertised.clone(),
            })
            .await?;
        self.broker_epoch.store(rec.epoch, Ordering::Release);
        self.metadata.refresh().await?;
        tracing::info!(
            broker = self.node_id(),
            epoch = rec.epoch,
            "registered with the controller"
        );
        Ok(())
    }

    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    pub fn controller(&self) -> &Arc<dyn ControllerApi> {
        self.metadata.controller()
    }

    /// The cluster metadata as this broker last saw it.
    pub fn cluster(&self) -> Arc<ClusterMetadata> {
        self.metadata.current()
    }

    /// Fetches the metadata after a change this broker asked the controller for, and
    /// applies it, so the change is visible here when the request is answered.
    pub(crate) async fn refresh_and_apply(self: &Arc<Self>) -> Result<(), ApiError> {
        self.metadata.refresh().await?;
        self.reconcile().await
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    pub fn cluster_id(&self) -> String {
        self.cluster().cluster_id.clone()
    }

    pub fn advertised(&self) -> (String, u16) {
        let name = self.config.inter_broker_listener.name();
        self.advertised
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.host.clone(), e.port))
            .unwrap_or_default()
    }

    pub fn topic(&self, name: &str) -> Option<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_name
            .get(name)
            .cloned()
    }

    pub fn topic_by_id(&self, id: TopicId) -> Option<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .get(&id)
            .cloned()
    }

    /// The error for a request to partition `index` of a topic (by name or by id) this
    /// broker hosts no open replica of, as Kafka's `getPartitionOrError`: what
    /// [`TopicState::missing_partition_code`] says if the topic is hosted here;
    /// NOT_LEADER_OR_FOLLOWER if the cluster has the partition (another broker's, or
    /// one still opening here after a start: the client refreshes its metadata and
    /// retries); UNKNOWN_TOPIC_OR_PARTITION otherwise.
    pub fn missing_partition_code(
        &self,
        state: Option<&TopicState>,
        topic: TopicRef<'_>,
        index: i32,
    ) -> strata_proto::ErrorCode {
        if let Some(s) = state {
            return s.missing_partition_code(index);
        }
        let md = self.cluster();
        let rec = match topic {
            TopicRef::Name(name) => md.topics.get(name).map(|t| &**t),
            TopicRef::Id(id) => md.topic_by_id(id),
        };
        match rec {
            Some(r) if index >= 0 && (index as usize) < r.partitions.len() => {
                strata_proto::ErrorCode::NotLeaderOrFollower
            }
            _ => strata_proto::ErrorCode::UnknownTopicOrPartition,
        }
    }

    pub fn topics(&self) -> Vec<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_name
            .values()
            .cloned()
            .collect()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.topic(topic)?.partition(index).cloned()
    }

    /// Every hosted partition.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.topics()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect()
    }

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        self.config.data_dir.join(format!("{topic}-{index}"))
    }

    /// Brings local partitions in line with the metadata and attaches the remote tier of
    /// tiered partitions.
    pub async fn reconcile(&self) -> Result<(), ApiError> {
        {
            let mut last = self.reconcile_lock.lock().await;
            let md = self.cluster();
            // Opening partitions reads and may recover their directories: done where it
            // cannot stall the other connections' tasks on this worker.
            crate::blocking::may_wait("reconcile", || self.reconcile_locked(&md, last.as_deref()))?;
            *last = Some(md);
        }
        // Offsets partitions may be led here now: load their groups without waiting for
        // the coordinator loop's next tick.
        self.groups.wake();
        self.txns.wake();
        self.attach_remotes().await;
        Ok(())
    }

    /// Sends an AlterPartition request to the controller in the background and feeds the
    /// answer back to the replica (an unanswered request would block ISR changes).
    fn send_alter_partition(&self, p: Arc<Partition>, req: AlterPartitionRequest) {
        {
            let controller = self.controller().clone();
            let metadata = self.metadata.clone();
            let (node, epoch) = (self.node_id(), self.broker_epoch());
            let p = p.clone();
            tokio::spawn(async move {
                let mut req = req;
                loop {
                    let creq = strata_controller::AlterPartitionRequest {
                        broker: node,
                        broker_epoch: epoch,
                        topic_id: p.topic_id,
                        partition: p.index,
                        leader_epoch: req.leader_epoch,
                        partition_epoch: req.partition_epoch,
                        new_isr: req.new_isr.clone(),
                    };
                    let result = match controller.alter_partition(creq).await {
                        Ok(rec) => Ok(CommittedIsr {
                            leader_epoch: rec.leader_epoch,
                            partition_epoch: rec.partition_epoch,
                            isr: rec.isr,
                        }),
                        Err(e) => {
                            tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "AlterPartition failed");
                            Err(AlterPartitionError::from(e.error_code()))
                        }
                    };
                    if result.is_ok() {
                        let _ = metadata.refresh().await;
                    }
                    match p.on_alter_partition_response(&req, result) {
                        Ok(mut more) if !more.is_empty() => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            req = more.remove(0);
                        }
                        Ok(_) => return,
                        Err(e) => {
                            tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "applying an AlterPartition answer failed");
                            return;
                        }
                    }
                }
            });
        }
    }

    pub fn tier(&self) -> Option<&Arc<Tier>> {
        self.tier.as_ref()
    }

    pub(crate) fn partition_key(&self, p: &Partition) -> PartitionKey {
        let stored_under = self
            .topic(&p.topic)
            .filter(|t| t.id == p.topic_id)
            .and_then(|t| t.storage_cluster_id.clone());
        PartitionKey {
            cluster_id: stored_under.unwrap_or_else(|| self.cluster_id()),
            topic: p.topic.to_string(),
            topic_id: p.topic_id,
            partition: p.index,
        }
    }

    /// Opens the remote tier (loads the manifest) of every tiered partition that has
    /// none yet. A store that cannot be reached now is retried by the next call (the
    /// offloader calls this on every tick); the partition keeps serving local data and
    /// keeps its local segments meanwhile.
    pub async fn attach_remotes(&self) {
        if self.tier.is_none() {
            return;
        }
        for t in self.topics() {
            if !t.config.remote_storage_enable {
                continue;
            }
            for p in &t.partitions {
                if p.remote().is_some() {
                    continue;
                }
                let key = self.partition_key(p);
                match p
                    .log()
                    .open_remote(key, |end| p.reset_high_watermark(end))
                    .await
                {
                    Ok(()) => {}
                    Err(e @ strata_tier::AttachError::Align(_)) => {
                        tracing::warn!(topic = %t.name, partition = p.index, error = %e, "cannot align the local log with the remote tier");
                    }
                    Err(e) => {
                        tracing::warn!(topic = %t.name, partition = p.index, error = %e, "cannot attach the remote tier; will retry");
                        metrics::counter!("strata_tier_manifest_load_failures_total").increment(1);
                    }
                }
            }
        }
    }

    /// A deleted tiered topic's objects are deleted from the bucket in the background
    /// (as Kafka deletes a topic's remote segments), its catalog entry with them.
    pub(crate) fn forget_remote_objects(&self, t: &TopicState) {
        let Some(tier) = self.tier.clone() else {
            return;
        };
        if !t.config.remote_storage_enable {
            return;
        }
        let cluster = t
            .storage_cluster_id
            .clone()
            .unwrap_or_else(|| self.cluster_id());
        let (name, id) = (t.name.to_string(), t.id);
        tokio::spawn(async move {
            match strata_tier::catalog::delete_topic(tier.store(), &cluster, &name, id).await {
                Ok(n) => {
                    tracing::info!(topic = %name, objects = n, "deleted the topic's objects from the object store")
                }
                Err(e) => {
                    tracing::warn!(topic = %name, error = %e, "cannot delete the topic's objects; delete them by hand")
                }
            }
        });
    }

    /// Counts bytes just appended to a tiered partition, so the disk cap sees them
    /// before the next housekeeping pass recounts.
    pub(crate) fn note_tiered_append(&self, bytes: u64) {
        self.tiered_local_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Local bytes of tiered partitions: exact as of the last housekeeping pass, plus
    /// what was appended since.
    pub fn tiered_local_bytes(&self) -> u64 {
        self.tiered_local_bytes.load(Ordering::Relaxed)
    }

    /// Refuses a produce when tiered partitions' local data passed the configured cap:
    /// the object store is down or slow and uploads back up (KAFKA-19952). Producers get
    /// a retriable storage error instead of the disk filling up.
    pub(crate) fn check_disk_cap(&self, p: &Partition) -> Result<(), ApiError> {
        let Some(tier) = &self.tier else {
            return Ok(());
        };
        let cap = tier.config().local_disk_cap_bytes;
        if cap == 0 || !p.tiered() {
            return Ok(());
        }
        let used = self.tiered_local_bytes();
        if used >= cap {
            metrics::counter!("strata_tier_disk_cap_refusals_total").increment(1);
            return Err(ApiError::new(
                strata_proto::ErrorCode::KafkaStorageError,
                format!(
                    "local disk cap reached ({used} of {cap} bytes): offload to object storage is behind; check `strata tier status` and the object store"
                ),
            ));
        }
        Ok(())
    }

    /// Applies the cached metadata: opens the replicas assigned here, makes each leader
    /// or follower as metadata says, updates configs, forgets deleted topics.
    fn reconcile_locked(
        &self,
        md: &ClusterMetadata,
        last: Option<&ClusterMetadata>,
    ) -> Result<(), ApiError> {
        let node = self.node_id();
        let current = self
            .topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_name
            .clone();
        let mut opened = self.open_new_partitions(md, last, &current);
        let mut next: BTreeMap<Arc<str>, Arc<TopicState>> = BTreeMap::new();
        let mut removed = Vec::new();
        let mut moved_away = Vec::new();
        for (name, state) in &current {
            match md.topics.get(name.as_ref()) {
                Some(t) if t.id == state.id => {}
                _ => removed.push(state.clone()),
            }
        }
        for rec in md.topics.values() {
            let existing = current.get(rec.name.as_str()).filter(|s| s.id == rec.id);
            if let Some(state) = unchanged(rec, existing, last) {
                next.insert(state.name.clone(), state.clone());
                continue;
            }
            let name: Arc<str> = Arc::from(rec.name.as_str());
            let mut partitions = Vec::new();
            let mut offline = BTreeMap::new();
            let local = rec
                .partitions
                .iter()
                .filter(|pr| pr.replicas.contains(&node));
            // One topic's bad config (written by an older version, say) takes that
            // topic's replicas offline, not the broker.
            let config = match TopicConfig::resolve(&rec.configs) {
                Ok(c) => c,
                Err(e) => {
                    for pr in local {
                        self.note_offline(
                            existing,
                            &rec.name,
                            pr.partition,
                            format!("its config is invalid: {e}"),
                            &mut offline,
                        );
                    }
                    next.insert(
                        name.clone(),
                        Arc::new(TopicState {
                            name,
                            id: rec.id,
                            overrides: rec.configs.clone(),
                            config: TopicConfig::default(),
                            partitions,
                            partition_count: rec.partitions.len() as i32,
                            storage_cluster_id: rec.storage_cluster_id.clone(),
                            offline,
                        }),
                    );
                    continue;
                }
            };
            for pr in local {
                let p = match existing.and_then(|s| s.partition(pr.partition)) {
                    Some(p) => {
                        if existing.is_some_and(|s| s.overrides != rec.configs) {
                            p.set_config(config.clone(), self.config.log_config(&config));
                        }
                        p.clone()
                    }
                    None => {
                        let result = match opened.remove(&(name.clone(), pr.partition)) {
                            Some(r) => r,
                            None => self.open_partition(&name, rec.id, pr.partition, &config),
                        };
                        match result {
                            Ok((p, report)) => {
                                // How many opens found everything durable (a clean stop)
                                // and how many had to recover a tail.
                                let recovery = if report.clean { "none" } else { "tail" };
                                metrics::counter!("strata_partition_opens_total", "recovery" => recovery)
                                    .increment(1);
                                // What the opens CRC-scanned (after a clean stop, only the
                                // active segments' last index intervals).
                                metrics::counter!("strata_partition_open_scanned_bytes_total")
                                    .increment(report.scanned_bytes);
                                if !report.truncations.is_empty() {
                                    tracing::warn!(topic = %rec.name, partition = pr.partition, ?report.truncations, "partition recovered with truncation");
                                }
                                if existing.is_some_and(|s| s.offline.contains_key(&pr.partition)) {
                                    tracing::info!(topic = %rec.name, partition = pr.partition, "offline partition opened");
                                }
                                p
                            }
                            Err(e) => {
                                let reason = match &e {
                                    strata_log::LogError::Io { source, .. }
                                        if crate::resources::is_out_of_files(source) =>
                                    {
                                        format!("{e}: {}", crate::resources::out_of_files_hint())
                                    }
                                    _ => e.to_string(),
                                };
                                self.note_offline(
                                    existing,
                                    &rec.name,
                                    pr.partition,
                                    reason,
                                    &mut offline,
                                );
                                continue;
                            }
                        }
                    }
                };
                if pr.leader >= 0 {
                    let state = PartitionState {
                        leader: pr.leader,
                        leader_epoch: pr.leader_epoch,
                        partition_epoch: pr.partition_epoch,
                        replicas: pr.replicas.clone(),
                        isr: pr.isr.clone(),
                    };
                    p.apply_state(node, &state)?;
                }
                partitions.push(p);
            }
            partitions.sort_by_key(|p| p.index);
            // Replicas this broker no longer holds (a reassignment moved them away): their
            // files go, as a deleted topic's do.
            if let Some(state) = existing {
                for p in &state.partitions {
                    if !partitions.iter().any(|q| q.index == p.index) {
                        tracing::info!(topic = %rec.name, partition = p.index, "removing a replica reassigned away from this broker");
                        moved_away.push((state.clone(), p.index));
                    }
                }
            }
            next.insert(
                name.clone(),
                Arc::new(TopicState {
                    name,
                    id: rec.id,
                    overrides: rec.configs.clone(),
                    config,
                    partitions,
                    partition_count: rec.partitions.len() as i32,
                    storage_cluster_id: rec.storage_cluster_id.clone(),
                    offline,
                }),
            );
        }
        let offline: usize = next.values().map(|t| t.offline.len()).sum();
        metrics::gauge!("strata_offline_partitions").set(offline as f64);
        *self.topics.write().unwrap_or_else(|e| e.into_inner()) = HostedTopics::new(next);
        for t in removed {
            self.remove_topic_files(&t);
        }
        for (t, index) in moved_away {
            self.remove_partition_files(&t.name, t.id, index);
        }
        Ok(())
    }

    /// Opens one replica's log (recovering it).
    fn open_partition(
        &self,
        name: &Arc<str>,
        id: TopicId,
        partition: i32,
        config: &TopicConfig,
    ) -> Result<(Arc<Partition>, strata_log::RecoveryReport), strata_log::LogError> {
        let dir = self.partition_dir(name, partition);
        let saved = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| {
                self.saved_checkpoints
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(n)
            })
            .filter(|e| e.topic_id == id)
            .map(|entry| checkpoints::Saved {
                entry,
                clean_stop: self.clean_stop,
            });
        Partition::open(
            &dir,
            name.clone(),
            id,
            partition,
            config.clone(),
            self.clock.clone(),
            self.config.log_config(config),
            self.node_id(),
            self.tier.clone(),
            self.alter_partitions.clone(),
            saved,
        )
    }

    /// Opens, in parallel, every replica assigned here that is not open yet (at start:
    /// all of them). Opening is mostly waiting on the disk (directory listings, index and
    /// checkpoint reads, the active segment's scan), so [`OPEN_THREADS`] threads overlap
    /// it; reconcile then takes the results in order. A topic whose config does not
    /// resolve is left to reconcile, which takes it offline.
    #[allow(clippy::type_complexity)] // one result per (topic, partition)
    fn open_new_partitions(
        &self,
        md: &ClusterMetadata,
        last: Option<&ClusterMetadata>,
        current: &BTreeMap<Arc<str>, Arc<TopicState>>,
    ) -> std::collections::HashMap<
        (Arc<str>, i32),
        Result<(Arc<Partition>, strata_log::RecoveryReport), strata_log::LogError>,
    > {
        let node = self.node_id();
        let mut jobs = Vec::new();
        for rec in md.topics.values() {
            let existing = current.get(rec.name.as_str()).filter(|s| s.id == rec.id);
            if unchanged(rec, existing, last).is_some() {
                continue;
            }
            let Ok(config) = TopicConfig::resolve(&rec.configs) else {
                continue;
            };
            let name: Arc<str> = Arc::from(rec.name.as_str());
            for pr in rec
                .partitions
                .iter()
                .filter(|pr| pr.replicas.contains(&node))
            {
                if existing.and_then(|s| s.partition(pr.partition)).is_none() {
                    jobs.push((name.clone(), rec.id, pr.partition, config.clone()));
                }
            }
        }
        let results = std::sync::Mutex::new(std::collections::HashMap::new());
        if jobs.len() < 2 {
            // Nothing to overlap: reconcile opens it itself.
            return results.into_inner().unwrap_or_default();
        }
        on_threads(&jobs, OPEN_THREADS, |(name, id, partition, config)| {
            let r = self.open_partition(name, *id, *partition, config);
            results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((name.clone(), *partition), r);
        });
        results.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a replica that cannot be opened: logged (once per reason, not at every
    /// reconcile), answered with KAFKA_STORAGE_ERROR.
    fn note_offline(
        &self,
        existing: Option<&Arc<TopicState>>,
        topic: &str,
        partition: i32,
        reason: String,
        offline: &mut BTreeMap<i32, String>,
    ) {
        if existing.and_then(|s| s.offline.get(&partition)) != Some(&reason) {
            tracing::error!(
                topic,
                partition,
                dir = %self.partition_dir(topic, partition).display(),
                %reason,
                "partition offline: its replica here cannot be opened; requests for it get KAFKA_STORAGE_ERROR, the broker's other partitions serve, and opening is retried at each metadata change"
            );
        }
        offline.insert(partition, reason);
    }

    /// Deletes a removed topic's directories: renamed at once (so a topic created again
    /// with the same name starts empty), removed in the background. Readers holding a
    /// partition keep reading their open files until they finish.
    fn remove_topic_files(&self, t: &TopicState) {
        for p in &t.partitions {
            self.remove_partition_files(&t.name, t.id, p.index);
        }
    }

    /// Renames a partition's directory out of the way (a crash after it leaves nothing
    /// to reopen) and deletes it in the background.
    fn remove_partition_files(&self, topic: &str, id: TopicId, index: i32) {
        let dir = self.partition_dir(topic, index);
        let doomed = self
            .config
            .data_dir
            .join(format!("{topic}-{index}.{id}-delete"));
        if let Err(e) = std::fs::rename(&dir, &doomed) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot rename deleted partition directory");
            return;
        }
        std::thread::spawn(move || {
            if let Err(e) = std::fs::remove_dir_all(&doomed) {
                tracing::warn!(dir = %doomed.display(), error = %e, "cannot remove deleted partition directory");
            }
        });
    }

    /// Removes partition directories that metadata no longer names (a deletion cut short
    /// by a crash, or a topic deleted and re-created while this broker was down).
    fn remove_stray_directories(&self) {
        let md = self.cluster();
        let Ok(entries) = std::fs::read_dir(&self.config.data_dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if !path.is_dir() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with("-delete") {
                let _ = std::fs::remove_dir_all(&path);
                continue;
            }
            let Some((topic, index)) = name.rsplit_once('-') else {
                continue;
            };
            let Ok(index) = index.parse::<i32>() else {
                continue;
            };
            // A replica reassigned away while this broker was down is not kept either.
            let node = self.node_id();
            let keep = md.topics.get(topic).is_some_and(|t| {
                t.partition(index)
                    .is_some_and(|p| p.replicas.contains(&node))
                    && read_topic_id(&path).is_none_or(|id| id == t.id)
            });
            if !keep && read_topic_id(&path).is_some() {
                tracing::info!(dir = %path.display(), "removing the directory of a deleted topic");
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }

    /// Hands out a new producer id (InitProducerId for an idempotent producer).
    pub(crate) async fn next_producer_id(&self) -> Result<i64, ApiError> {
        let mut g = self.producer_ids.lock().await;
        if g.0 >= g.1 {
            let first = self
                .controller()
                .allocate_producer_ids(PRODUCER_ID_BLOCK)
                .await?;
            *g = (first, first + PRODUCER_ID_BLOCK);
        }
        let id = g.0;
        g.0 += 1;
        Ok(id)
    }

    /// Periodic work: rolls by segment.ms, flushes by flush.ms, retention, checkpoints.
    pub(crate) fn housekeeping(&self, retention: bool, checkpoint: bool) {
        let tiered: u64 = self
            .topics()
            .iter()
            .filter(|t| t.config.remote_storage_enable)
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.log().local_bytes())
            .sum();
        self.tiered_local_bytes.store(tiered, Ordering::Relaxed);
        metrics::gauge!("strata_tier_local_bytes").set(tiered as f64);
        for t in self.topics() {
            for p in &t.partitions {
                p.housekeeping(retention);
            }
        }
        if checkpoint {
            self.checkpoint_partitions();
        }
    }

    /// Writes every hosted partition's recovery point and high-water mark to the one
    /// checkpoint file (`crate::checkpoints`), then lets the partitions drop their own
    /// checkpoint files. A failure is logged (the next interval tries again) and
    /// returned as `false`, as is a call before [`Self::load`] finished (which writes
    /// nothing: the file still holds the values of the partitions not open yet).
    pub fn checkpoint_partitions(&self) -> bool {
        if !self.loaded() {
            return false;
        }
        let _one = self
            .checkpoint_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let started = std::time::Instant::now();
        let partitions = self.partitions();
        let mut entries = Vec::with_capacity(partitions.len());
        let mut taken = Vec::with_capacity(partitions.len());
        for p in &partitions {
            let Some(name) = p.dir_name() else { continue };
            let (entry, rp) = p.checkpoint_entry();
            entries.push((name.to_string(), entry));
            taken.push((p, rp));
        }
        if let Err(e) = checkpoints::write(&self.config.data_dir, &entries) {
            tracing::warn!(dir = %self.config.data_dir.display(), error = %e, "cannot write the partition checkpoint file: a restart rescans more");
            return false;
        }
        for (p, rp) in taken {
            p.checkpoint_saved(rp);
        }
        metrics::histogram!("strata_checkpoint_seconds").record(started.elapsed().as_secs_f64());
        true
    }

    /// Readies every partition for the stop (flush, index fsync, producer snapshot),
    /// checkpoints them, and if all of that worked, marks the stop clean
    /// (`checkpoints::CLEAN_SHUTDOWN`). Call once nothing writes to the logs any more.
    pub fn shutdown(&self) {
        // Each partition's flush and checkpoints wait on fsyncs: overlapped on
        // OPEN_THREADS threads (5,000 partitions: 5.2 s → 2.5 s, benchmarks.md).
        let partitions: Vec<Arc<Partition>> = self
            .topics()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect();
        let failed = std::sync::atomic::AtomicBool::new(false);
        on_threads(&partitions, OPEN_THREADS, |p| {
            if !p.prepare_shutdown() {
                failed.store(true, Ordering::Relaxed);
            }
        });
        if self.checkpoint_partitions()
            && !failed.load(Ordering::Relaxed)
            && let Err(e) = checkpoints::write_clean_shutdown(&self.config.data_dir)
        {
            tracing::warn!(dir = %self.config.data_dir.display(), error = %e, "cannot write the clean-shutdown marker: the next start scans every active segment whole");
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }
}
