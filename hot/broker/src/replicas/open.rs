//! Applying metadata to the replicas hosted here (reconcile): which to open (in
//! parallel, recovering their logs), which to make leader or follower, which topics and
//! replicas went away, and which replicas are offline because they cannot be opened.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use strata_controller::{ClusterMetadata, TopicRecord};
use strata_proto::{TopicConfig, TopicId};
use strata_replica::PartitionState;

use super::{HostedTopics, ReplicaManager, TopicState};
use crate::checkpoints;
use crate::error::ApiError;
use crate::partition::Partition;

/// Threads that open partitions at start (and for a new topic's replicas), and flush
/// them at shutdown: that work waits on the disk more than it computes, so more threads
/// than cores overlap it.
pub(super) const OPEN_THREADS: usize = 8;

/// Runs `f` on every item, on up to `threads` scoped threads taking items in turn.
pub(super) fn on_threads<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) + Sync) {
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

impl ReplicaManager {
    /// Applies the cached metadata: opens the replicas assigned here, makes each leader
    /// or follower as metadata says, updates configs, forgets deleted topics.
    pub(super) fn reconcile_locked(
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
    pub(super) fn open_partition(
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
            &self.tiering,
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
    pub(super) fn open_new_partitions(
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
    pub(super) fn note_offline(
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
}
