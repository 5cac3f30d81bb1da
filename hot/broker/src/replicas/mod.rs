//! The replica manager (Kafka's `ReplicaManager`): the partitions this broker hosts,
//! kept in line with the controller's metadata (which replicas live here, who leads
//! them, with which epochs and ISRs), their AlterPartition requests, checkpoints, local
//! housekeeping and the attachment of their remote tier.
//!
//! * `open`: applying metadata (reconcile): opening, recovering and taking offline
//!   the replicas assigned here;
//! * `files`: partition directories, the checkpoint file and a clean stop;
//! * `traffic`: sampling traffic, and the hottest partitions and keys.

mod files;
mod open;
mod traffic;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use strata_controller::{ClusterMetadata, ControllerApi};
use strata_log::Clock;
use strata_proto::{ErrorCode, TopicConfig, TopicId};
use strata_replica::{AlterPartitionError, AlterPartitionRequest, CommittedIsr};
use strata_tier::{PartitionKey, Tiering};

use crate::checkpoints;
use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::lifecycle::Lifecycle;
use crate::metadata::MetadataCache;
use crate::partition::{AlterPartitionSender, Partition};

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

/// The partitions hosted here, and what keeps them in line with the metadata.
#[derive(Debug)]
pub struct ReplicaManager {
    config: Arc<BrokerConfig>,
    metadata: Arc<MetadataCache>,
    clock: Arc<dyn Clock>,
    /// This broker's registration (its epoch goes with every AlterPartition).
    lifecycle: Arc<Lifecycle>,
    /// The tier: partitions' tiered logs and remote tiers come from it.
    tiering: Arc<Tiering>,
    topics: RwLock<HostedTopics>,
    /// Serialises the application of metadata to local state, and holds the metadata
    /// last applied (a topic whose record did not change since is not looked at again).
    reconcile_lock: tokio::sync::Mutex<Option<Arc<ClusterMetadata>>>,
    /// Counts reconciles: the coordinators watch it to load what is led here now
    /// without waiting for their next tick.
    reconciled: tokio::sync::watch::Sender<u64>,
    /// Local bytes of tiered partitions, refreshed by housekeeping (for the disk cap).
    tiered_local_bytes: AtomicU64,
    /// Partitions send their AlterPartition requests here ([`Self::new`] starts the
    /// task that forwards them to the controller).
    alter_partitions: AlterPartitionSender,
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
}

impl ReplicaManager {
    /// A manager of no partitions yet, over `config.data_dir` (whose clean-stop marker
    /// it takes: from here on the logs change). Starts the task that forwards the
    /// partitions' AlterPartition requests to the controller (it ends with the manager).
    pub fn new(
        config: Arc<BrokerConfig>,
        metadata: Arc<MetadataCache>,
        clock: Arc<dyn Clock>,
        lifecycle: Arc<Lifecycle>,
        tiering: Arc<Tiering>,
    ) -> Arc<ReplicaManager> {
        let (alter_partitions, mut alter_rx) = tokio::sync::mpsc::unbounded_channel();
        // The marker goes (durably) before any log opens: from here on they change.
        let clean_stop = checkpoints::take_clean_shutdown(&config.data_dir);
        let saved_checkpoints = std::sync::Mutex::new(checkpoints::read(&config.data_dir));
        let replicas = Arc::new(ReplicaManager {
            config,
            metadata,
            clock,
            lifecycle,
            tiering,
            topics: RwLock::new(HostedTopics::default()),
            reconcile_lock: tokio::sync::Mutex::new(None),
            reconciled: tokio::sync::watch::Sender::new(0),
            tiered_local_bytes: AtomicU64::new(0),
            alter_partitions,
            saved_checkpoints,
            clean_stop,
            checkpoint_lock: Default::default(),
            loaded: Default::default(),
        });
        // Ends when the manager is dropped (the partitions' senders go with it).
        let weak = Arc::downgrade(&replicas);
        tokio::spawn(async move {
            while let Some((p, req)) = alter_rx.recv().await {
                let Some(replicas) = weak.upgrade() else {
                    return;
                };
                replicas.send_alter_partition(p, req);
            }
        });
        replicas
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

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// The cluster metadata as this broker last saw it.
    pub fn cluster(&self) -> Arc<ClusterMetadata> {
        self.metadata.current()
    }

    pub fn controller(&self) -> &Arc<dyn ControllerApi> {
        self.metadata.controller()
    }

    pub fn cluster_id(&self) -> String {
        self.cluster().cluster_id.clone()
    }

    /// Fetches the metadata after a change this broker asked the controller for, and
    /// applies it, so the change is visible here when the request is answered.
    pub async fn refresh_and_apply(&self) -> Result<(), ApiError> {
        self.metadata.refresh().await?;
        self.reconcile().await
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
        // Offsets and transaction partitions may be led here now: their coordinators
        // load them without waiting for their next tick.
        self.reconciled.send_modify(|n| *n += 1);
        self.attach_remotes().await;
        Ok(())
    }

    /// The partition count of the internal topic `name` (compacted, `segment.bytes` of
    /// --offsets-topic-segment-bytes), creating it with `partitions` on first use: the
    /// coordinators' state topics, `__consumer_offsets` and `__transaction_state`.
    pub async fn internal_topic_partitions(
        &self,
        name: &str,
        partitions: i32,
    ) -> Result<i32, ApiError> {
        if let Some(t) = self.cluster().topic(name) {
            return Ok(t.partitions.len() as i32);
        }
        let configs = [
            ("cleanup.policy".to_string(), "compact".to_string()),
            (
                "segment.bytes".to_string(),
                self.config.offsets_topic_segment_bytes.to_string(),
            ),
        ]
        .into_iter()
        .collect();
        match self
            .controller()
            .create_topic(name, partitions, -1, configs)
            .await
        {
            Ok(_) => {}
            Err(e) if e.error_code() == ErrorCode::TopicAlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        self.refresh_and_apply().await?;
        self.cluster()
            .topic(name)
            .map(|t| t.partitions.len() as i32)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("{name} is being created; retry"),
                )
            })
    }

    /// A receiver that changes after every reconcile (the coordinators' loaders wait on
    /// it: an internal topic's partition may be led here now).
    pub fn watch_reconciled(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reconciled.subscribe()
    }

    /// The partitions of `topic` this broker leads, with their leader epochs: what a
    /// coordinator of an internal topic (`__consumer_offsets`, `__transaction_state`)
    /// should have loaded.
    pub fn led_partitions(&self, topic: &str) -> std::collections::HashMap<i32, i32> {
        self.topic(topic)
            .map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.is_leader())
                    .map(|p| (p.index, p.leader_epoch()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether partition `index` of `topic` is led here, or named as led here by the
    /// metadata even if this broker has not applied it yet (another request may be
    /// opening the partitions right now): a coordinator's client should wait, not look
    /// elsewhere.
    pub fn leads_or_will_lead(&self, topic: &str, index: i32) -> bool {
        self.partition(topic, index).is_some_and(|p| p.is_leader())
            || self
                .cluster()
                .topic(topic)
                .and_then(|t| t.partition(index))
                .is_some_and(|p| p.leader == self.node_id())
    }

    /// Sends an AlterPartition request to the controller in the background and feeds the
    /// answer back to the replica (an unanswered request would block ISR changes).
    fn send_alter_partition(&self, p: Arc<Partition>, req: AlterPartitionRequest) {
        {
            let controller = self.controller().clone();
            let metadata = self.metadata.clone();
            let (node, epoch) = (self.node_id(), self.lifecycle.broker_epoch());
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

    pub fn partition_key(&self, p: &Partition) -> PartitionKey {
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
        if self.tiering.tier().is_none() {
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
    pub fn forget_remote_objects(&self, t: &TopicState) {
        if !t.config.remote_storage_enable {
            return;
        }
        let cluster = t
            .storage_cluster_id
            .clone()
            .unwrap_or_else(|| self.cluster_id());
        self.tiering.delete_topic(cluster, t.name.to_string(), t.id);
    }

    /// Counts bytes just appended to a tiered partition, so the disk cap sees them
    /// before the next housekeeping pass recounts.
    pub fn note_tiered_append(&self, bytes: u64) {
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
    pub fn check_disk_cap(&self, p: &Partition) -> Result<(), ApiError> {
        let cap = self.tiering.local_disk_cap();
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

    /// Periodic work: rolls by segment.ms, flushes by flush.ms, retention, checkpoints.
    pub fn housekeeping(&self, retention: bool, checkpoint: bool) {
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

    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }
}
