//! The broker's side of consumer groups: one [`GroupCoordinator`] per partition of
//! `__consumer_offsets` this broker leads, loaded from that partition's log when it
//! becomes leader and dropped when it stops leading; committed offsets are appended to
//! the partition (acks=all) before they are acknowledged, so they are durable and
//! replicated like data. The partitions are compacted (cleanup.policy=compact, the
//! broker's log cleaner), which keeps each partition to its live state plus what was
//! written since the last pass; offsets of groups that have been empty for
//! `--offsets-retention` are deleted with tombstones (KIP-211).
//!
//! * `offsets`: appending commits (group commit) and expiring offsets;
//! * `load`: loading and unloading shards as leadership moves, and the coordinator loop;
//! * `lag`: each group's lag, its trend and the time to the retention edge.

mod lag;
mod load;
mod offsets;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_group::{Completion, GroupConfig, GroupCoordinator};
use strata_log::Clock;
use strata_proto::ErrorCode;
use tokio::sync::oneshot;

use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::replicas::ReplicaManager;
use offsets::Item;

pub use lag::{Lag, retention_headroom};
pub(crate) use offsets::Apply;

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
    /// Every committed offset of every group: (group, topic, partition, offset).
    pub fn live_offsets(&self) -> Vec<(String, String, i32, strata_group::CommittedOffset)> {
        self.coordinator
            .list_groups()
            .into_iter()
            .flat_map(|(g, _, _)| {
                self.coordinator
                    .offsets(&g)
                    .into_iter()
                    .map(move |(t, p, c)| (g.clone(), t, p, c))
            })
            .collect()
    }

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

/// The group coordinator service: the shards of the offsets partitions led here.
pub struct Groups {
    replicas: Arc<ReplicaManager>,
    clock: Arc<dyn Clock>,
    config: Arc<BrokerConfig>,
    shards: Mutex<HashMap<i32, Shard>>,
    /// Wakes the coordinator loop at once when metadata changed (an offsets partition
    /// led here now): clients asking meanwhile get COORDINATOR_LOAD_IN_PROGRESS, and
    /// librdkafka gives a commit only a few quick retries.
    wake: tokio::sync::Notify,
    /// Told whenever shards were loaded (a request waiting for its group's load).
    loads: tokio::sync::Notify,
    tickets: AtomicU64,
    /// Per offsets partition: commits waiting for the next append, and whether an
    /// append is in flight.
    appends: Mutex<HashMap<i32, (Vec<Item>, bool)>>,
    /// The lag figures of the groups coordinated here (their trend and what /metrics
    /// shows).
    lag: lag::LagTracker,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("loaded", &self.loaded())
            .finish_non_exhaustive()
    }
}

impl Groups {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        clock: Arc<dyn Clock>,
        config: Arc<BrokerConfig>,
    ) -> Groups {
        Groups {
            replicas,
            clock,
            config,
            shards: Default::default(),
            wake: Default::default(),
            loads: Default::default(),
            tickets: Default::default(),
            appends: Default::default(),
            lag: Default::default(),
        }
    }

    pub(crate) fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Runs `f` on the shard of offsets partition `partition`, or answers
    /// NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
    pub(crate) fn with_shard<T>(
        &self,
        partition: i32,
        f: impl FnOnce(&mut Shard) -> T,
    ) -> Result<T, ApiError> {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        match shards.get_mut(&partition) {
            Some(s) => Ok(f(s)),
            None => {
                // Leading it, or named its leader by the metadata (becoming leader,
                // or loading): the client should wait, not look elsewhere.
                Err(
                    if self.replicas.leads_or_will_lead(OFFSETS_TOPIC, partition) {
                        ApiError::new(
                            ErrorCode::CoordinatorLoadInProgress,
                            "the group's offsets are loading; retry",
                        )
                    } else {
                        ApiError::new(
                            ErrorCode::NotCoordinator,
                            "this broker is not the group's coordinator; find it again",
                        )
                    },
                )
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

    /// A transaction's marker landed in offsets partition `partition` at
    /// `marker_offset`: its pending offset commits are applied or dropped.
    pub(crate) fn complete_txn(
        &self,
        partition: i32,
        producer_id: i64,
        commit: bool,
        marker_offset: i64,
    ) {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = shards.get_mut(&partition) {
            let done = s
                .coordinator
                .complete_txn(producer_id, commit, marker_offset);
            if !done.is_empty() {
                tracing::debug!(
                    partition,
                    producer_id,
                    commit,
                    offsets = done.len(),
                    "transactional offset commits ended"
                );
            }
        }
    }

    pub(super) fn loaded(&self) -> Vec<(i32, i32)> {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(p, s)| (*p, s.epoch))
            .collect()
    }

    /// The offsets partition of `group`, creating `__consumer_offsets` on first use.
    pub(crate) async fn offsets_partition_for(&self, group: &str) -> Result<i32, ApiError> {
        // Compacted: the cleaner keeps the latest commit per group and partition (and
        // the latest membership per group) and drops the rest.
        let count = self
            .replicas
            .internal_topic_partitions(OFFSETS_TOPIC, self.config.offsets_topic_partitions)
            .await?;
        let partition = strata_group::partition_for(group, count);
        // A group whose partition is led here but still loading (just created, or
        // leadership just moved here): wait for the load, bounded, rather than answer
        // COORDINATOR_LOAD_IN_PROGRESS, which librdkafka retries for only ~300 ms before
        // failing a commit. Loads take milliseconds; this covers a busy machine.
        // Led here by the metadata, even if this broker has not applied it yet (another
        // request may be opening the partitions right now).
        if !self.is_loaded(partition) && self.replicas.leads_or_will_lead(OFFSETS_TOPIC, partition)
        {
            self.await_loaded(partition, Duration::from_secs(5)).await;
        }
        Ok(partition)
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

impl Groups {
    /// Has the coordinator loop look at leadership now (after a metadata change).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    fn is_loaded(&self, partition: i32) -> bool {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&partition)
    }

    /// Waits (up to `timeout`) until offsets partition `partition` is loaded here.
    async fn await_loaded(&self, partition: i32, timeout: Duration) {
        crate::coordinator::await_load(
            &self.loads,
            || self.is_loaded(partition),
            || self.wake(),
            timeout,
        )
        .await
    }
}
