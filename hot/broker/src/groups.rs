//! The broker's side of consumer groups: one [`GroupCoordinator`] per partition of
//! `__consumer_offsets` this broker leads, loaded from that partition's log when it
//! becomes leader and dropped when it stops leading; committed offsets are appended to
//! the partition (acks=all) before they are acknowledged, so they are durable and
//! replicated like data.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strata_group::{Completion, GroupConfig, GroupCoordinator};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, ErrorCode};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::error::ApiError;
use crate::partition::Partition;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The coordinator of the groups of one offsets partition.
pub(crate) struct Shard {
    pub coordinator: GroupCoordinator,
    /// Requests waiting for a rebalance to finish, by ticket.
    waiters: HashMap<u64, oneshot::Sender<Completion>>,
    /// The leader epoch the shard was loaded in.
    epoch: i32,
}

impl Shard {
    /// Hands finished long polls to their waiting requests.
    pub fn deliver(&mut self, completions: Vec<Completion>) {
        for c in completions {
            let ticket = match &c {
                Completion::Join(t, _) | Completion::Sync(t, _) => *t,
            };
            if let Some(tx) = self.waiters.remove(&ticket) {
                let _ = tx.send(c);
            }
        }
    }

    /// Registers a request waiting for its answer.
    pub fn wait(&mut self, ticket: u64) -> oneshot::Receiver<Completion> {
        let (tx, rx) = oneshot::channel();
        self.waiters.insert(ticket, tx);
        rx
    }
}

#[derive(Default)]
pub struct Groups {
    shards: Mutex<HashMap<i32, Shard>>,
    tickets: AtomicU64,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("loaded", &self.loaded())
            .finish_non_exhaustive()
    }
}

impl Groups {
    pub(crate) fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Runs `f` on the shard of offsets partition `partition`, or answers
    /// NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
    pub(crate) fn with_shard<T>(
        &self,
        broker: &Broker,
        partition: i32,
        f: impl FnOnce(&mut Shard) -> T,
    ) -> Result<T, ApiError> {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        match shards.get_mut(&partition) {
            Some(s) => Ok(f(s)),
            None => {
                let leads = broker
                    .partition(OFFSETS_TOPIC, partition)
                    .is_some_and(|p| p.is_leader());
                Err(if leads {
                    ApiError::new(
                        ErrorCode::CoordinatorLoadInProgress,
                        "the group's offsets are loading; retry",
                    )
                } else {
                    ApiError::new(
                        ErrorCode::NotCoordinator,
                        "this broker is not the group's coordinator; find it again",
                    )
                })
            }
        }
    }

    /// Every group this broker coordinates: (id, protocol type, state).
    pub(crate) fn list(&self) -> Vec<(String, String, &'static str)> {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|s| s.coordinator.list_groups())
            .collect()
    }

    fn loaded(&self) -> Vec<(i32, i32)> {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(p, s)| (*p, s.epoch))
            .collect()
    }
}

/// Kafka's defaults, with the initial rebalance delay shortened (3 s in Kafka; a new
/// group here waits 300 ms for more members before its first generation).
fn group_config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 300,
        ..GroupConfig::default()
    }
}

impl Broker {
    /// The offsets partition of `group`, creating `__consumer_offsets` on first use.
    pub(crate) async fn offsets_partition_for(
        self: &Arc<Self>,
        group: &str,
    ) -> Result<i32, ApiError> {
        let count = match self.cluster().topic(OFFSETS_TOPIC) {
            Some(t) => t.partitions.len() as i32,
            None => {
                let configs = [("cleanup.policy", "compact")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                match self
                    .controller()
                    .create_topic(
                        OFFSETS_TOPIC,
                        self.config.offsets_topic_partitions,
                        -1,
                        configs,
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.error_code() == ErrorCode::TopicAlreadyExists => {}
                    Err(e) => return Err(e.into()),
                }
                self.refresh_and_apply().await?;
                self.cluster()
                    .topic(OFFSETS_TOPIC)
                    .map(|t| t.partitions.len() as i32)
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::CoordinatorNotAvailable,
                            "the offsets topic is being created; retry",
                        )
                    })?
            }
        };
        Ok(strata_group::partition_for(group, count))
    }

    /// Appends records to offsets partition `partition` as its leader and waits until
    /// every in-sync replica has them.
    pub(crate) async fn append_offsets_records(
        &self,
        partition: i32,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), ApiError> {
        let p = self
            .partition(OFFSETS_TOPIC, partition)
            .filter(|p| p.is_leader())
            .ok_or_else(|| ApiError::new(ErrorCode::NotCoordinator, "not the coordinator"))?;
        let now = self.clock.now_ms();
        let recs: Vec<NewRecord> = records
            .into_iter()
            .map(|(k, v)| NewRecord {
                key: Some(k),
                value: v,
                headers: vec![],
                timestamp: now,
            })
            .collect();
        let mut b = batch(&recs, Compression::None, None).to_vec();
        let (info, alters, epoch) = p.append(&mut b).map_err(|e| {
            ApiError::new(
                if e.is_retriable() {
                    ErrorCode::CoordinatorNotAvailable
                } else {
                    e.error_code()
                },
                e.to_string(),
            )
        })?;
        if !alters.is_empty() {
            self.send_alter_partitions(p.clone(), alters);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        match crate::api::wait_for_replicas(&p, info.last_offset + 1, epoch, deadline).await {
            ErrorCode::None => Ok(()),
            ErrorCode::NotLeaderOrFollower => Err(ApiError::new(
                ErrorCode::NotCoordinator,
                "leadership of the group's offsets moved",
            )),
            ErrorCode::RequestTimedOut => Err(ApiError::new(
                ErrorCode::RequestTimedOut,
                "the commit was not replicated in time",
            )),
            code => Err(ApiError::new(code, "the commit was not replicated")),
        }
    }
}

/// Reads an offsets partition's log into a new coordinator.
fn load(p: &Partition) -> Result<GroupCoordinator, ApiError> {
    let mut coordinator = GroupCoordinator::new(group_config());
    let end = p.log.log_end_offset();
    let mut at = p.log.log_start_offset();
    while at < end {
        let r = p.log.read(at, 1 << 20, None)?;
        if r.data.is_empty() || r.next_offset <= at {
            break;
        }
        for b in strata_proto::batch::batches(&r.data) {
            let b = b.map_err(|e| ApiError::new(ErrorCode::CorruptMessage, e.to_string()))?;
            let records = b
                .records()
                .map_err(|e| ApiError::new(ErrorCode::CorruptMessage, e.to_string()))?;
            for rec in records.iter() {
                let rec =
                    rec.map_err(|e| ApiError::new(ErrorCode::CorruptMessage, e.to_string()))?;
                let Some(key) = rec.key else { continue };
                if let Err(e) = coordinator.replay(key, rec.value) {
                    tracing::warn!(partition = p.index, error = %e, "skipping an unreadable offsets record");
                }
            }
        }
        at = r.next_offset;
    }
    Ok(coordinator)
}

/// Keeps the shards in line with the offsets partitions this broker leads, and ticks
/// them (session and rebalance timeouts).
pub(crate) async fn run(broker: Arc<Broker>, shutdown: CancellationToken) {
    let mut interval = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        let led: HashMap<i32, i32> = broker
            .topic(OFFSETS_TOPIC)
            .map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.is_leader())
                    .map(|p| (p.index, p.leader_epoch()))
                    .collect()
            })
            .unwrap_or_default();
        let loaded = broker.groups.loaded();
        // Drop what this broker no longer leads (or leads in a newer epoch: reload).
        for (p, epoch) in &loaded {
            if led.get(p) != Some(epoch) {
                broker
                    .groups
                    .shards
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(p);
                tracing::info!(partition = p, "unloaded the groups of an offsets partition");
            }
        }
        for (&index, &epoch) in &led {
            if loaded.iter().any(|&(p, e)| p == index && e == epoch) {
                continue;
            }
            let Some(p) = broker.partition(OFFSETS_TOPIC, index) else {
                continue;
            };
            // Load only once the high-water mark covers the log (what the previous
            // leader acknowledged is committed here too).
            if p.high_watermark() < p.log.log_end_offset() {
                continue;
            }
            let b = broker.clone();
            let loaded = tokio::task::spawn_blocking(move || load(&p)).await;
            match loaded {
                Ok(Ok(coordinator)) => {
                    b.groups
                        .shards
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(
                            index,
                            Shard {
                                coordinator,
                                waiters: HashMap::new(),
                                epoch,
                            },
                        );
                    tracing::info!(
                        partition = index,
                        epoch,
                        "loaded the groups of an offsets partition"
                    );
                }
                Ok(Err(e)) => {
                    tracing::warn!(partition = index, error = %e.message, "cannot load an offsets partition")
                }
                Err(e) => tracing::warn!(partition = index, error = %e, "offsets load panicked"),
            }
        }
        let now = broker.clock.now_ms();
        let mut shards = broker
            .groups
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for s in shards.values_mut() {
            let done = s.coordinator.tick(now);
            s.deliver(done);
        }
    }
}
