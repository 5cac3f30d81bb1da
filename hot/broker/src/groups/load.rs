//! Loading: a shard per offsets partition led here, read from the partition's log when
//! it becomes leader (once its high-water mark covers the log) and dropped when it
//! stops leading; and the coordinator loop that keeps them so and ticks them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use strata_group::GroupCoordinator;
use tokio_util::sync::CancellationToken;

use super::{Groups, OFFSETS_TOPIC, Shard, group_config};
use crate::error::ApiError;
use crate::partition::Partition;

/// Reads an offsets partition's log into a new coordinator.
fn load(p: &Partition, now: i64) -> Result<GroupCoordinator, ApiError> {
    let mut coordinator = GroupCoordinator::new(group_config());
    // What does not decode is skipped, logged and counted: one bad record (or batch)
    // must never keep every group of this partition from loading.
    let skip = |what: &str, offset: i64, error: &dyn std::fmt::Display| {
        metrics::counter!("strata_group_load_skipped_total", "what" => what.to_string())
            .increment(1);
        tracing::warn!(partition = p.index, offset, error = %error, "skipping an unreadable offsets {what}");
    };
    crate::coordinator::read_log(p, p.log().log_end(), |data, at| {
        for b in strata_proto::batch::batches(data) {
            let b = match b {
                Ok(b) => b,
                Err(e) => {
                    // The rest of this read does not frame; go on after it.
                    skip("batch", at, &e);
                    break;
                }
            };
            let h = *b.header();
            // A transaction's marker decides its offset commits (TxnOffsetCommit).
            if h.is_control() {
                match strata_proto::control::marker_kind(&b) {
                    Ok(Some(kind)) => coordinator.replay_marker(
                        h.producer_id,
                        kind == strata_proto::control::MarkerKind::Commit,
                        h.base_offset,
                    ),
                    Ok(None) => {}
                    Err(e) => skip("marker", h.base_offset, &e),
                }
                continue;
            }
            let records = match b.records() {
                Ok(r) => r,
                Err(e) => {
                    skip("batch", b.base_offset(), &e);
                    continue;
                }
            };
            for rec in records.iter() {
                let rec = match rec {
                    Ok(r) => r,
                    Err(e) => {
                        skip("batch", b.base_offset(), &e);
                        break;
                    }
                };
                let Some(key) = rec.key else { continue };
                let replayed = if h.is_transactional() {
                    coordinator.replay_txn(h.producer_id, key, rec.value, rec.offset)
                } else {
                    coordinator.replay(key, rec.value)
                };
                if let Err(e) = replayed {
                    skip("record", rec.offset, &e);
                }
            }
        }
    })?;
    // Restored members get a full session from now: their heartbeats went to the
    // previous coordinator.
    coordinator.loaded(now);
    Ok(coordinator)
}

impl Groups {
    /// Keeps the shards in line with the offsets partitions this broker leads, and ticks
    /// them (session and rebalance timeouts); until `shutdown`.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        let mut reconciled = self.replicas.watch_reconciled();
        let mut last_lag = self.clock.now_ms();
        let mut last_expiry = last_lag;
        let mut warned = std::collections::HashSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = interval.tick() => {}
                _ = self.wake.notified() => {}
                // Offsets partitions may be led here now: load them at once.
                _ = reconciled.changed() => {}
            }
            if self.clock.now_ms() - last_lag >= 5_000 {
                last_lag = self.clock.now_ms();
                let g = self.clone();
                let mut w = std::mem::take(&mut warned);
                warned = tokio::task::spawn_blocking(move || {
                    super::lag::export_lag(&g, &mut w);
                    w
                })
                .await
                .unwrap_or_default();
            }
            let loads = crate::coordinator::loads(&self.replicas, OFFSETS_TOPIC, &self.loaded());
            // Drop what this broker no longer leads (or leads in a newer epoch: reload).
            for p in &loads.unload {
                self.shards
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(p);
                tracing::info!(partition = p, "unloaded the groups of an offsets partition");
            }
            // Every partition to load now, read in one blocking task (one hop, not one per
            // partition: clients wait with COORDINATOR_LOAD_IN_PROGRESS meanwhile).
            if !loads.load.is_empty() {
                self.load_shards(loads.load).await;
            }
            self.tick(&mut last_expiry);
        }
    }

    /// Reads the shards of `to_load` (index, epoch, partition) from their logs.
    async fn load_shards(&self, to_load: Vec<(i32, i32, Arc<Partition>)>) {
        let now = self.clock.now_ms();
        let results = tokio::task::spawn_blocking(move || {
            to_load
                .into_iter()
                .map(|(index, epoch, p)| (index, epoch, load(&p, now)))
                .collect::<Vec<_>>()
        })
        .await;
        match results {
            Ok(results) => {
                for (index, epoch, loaded) in results {
                    match loaded {
                        Ok(coordinator) => {
                            self.shards
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
                        Err(e) => {
                            tracing::warn!(partition = index, error = %e.message, "cannot load an offsets partition")
                        }
                    }
                }
                self.loads.notify_waiters();
            }
            Err(e) => tracing::warn!(error = %e, "offsets load panicked"),
        }
    }

    /// One tick of every shard (session and rebalance timeouts); writes the groups
    /// that became Stable, and every offsets retention check interval deletes expired
    /// offsets.
    fn tick(self: &Arc<Self>, last_expiry: &mut i64) {
        let now = self.clock.now_ms();
        let mut persist = Vec::new();
        let expire =
            now - *last_expiry >= self.config.offsets_retention_check_interval.as_millis() as i64;
        if expire {
            *last_expiry = now;
        }
        let mut shard_indexes = Vec::new();
        {
            let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
            for (&index, s) in shards.iter_mut() {
                let done = s.coordinator.tick(now);
                s.deliver(done);
                // Groups that became Stable (or Empty after Stable) since the last tick:
                // their members are written, so a new coordinator keeps them.
                let records = s.coordinator.take_persist();
                if !records.is_empty() {
                    persist.push((index, records));
                }
                shard_indexes.push(index);
            }
        }
        for (index, records) in persist {
            let b = self.clone();
            tokio::spawn(async move {
                let n = records.len();
                if let Err(e) = b
                    .append_offsets_records(
                        index,
                        records.into_iter().map(|(k, v)| (k, Some(v))).collect(),
                        None,
                    )
                    .await
                {
                    // Only the membership is lost: if the coordinator moves before the
                    // next generation is written, the members rejoin.
                    tracing::warn!(partition = index, groups = n, error = %e.message, "cannot write group membership; after a coordinator move the members rejoin");
                }
            });
        }
        if expire {
            for index in shard_indexes {
                let b = self.clone();
                tokio::spawn(async move {
                    match b.expire_offsets(index, now).await {
                        Ok(0) => {}
                        Ok(n) => {
                            metrics::counter!("strata_group_offsets_expired_total")
                                .increment(n as u64);
                            tracing::info!(
                                partition = index,
                                records = n,
                                "deleted expired committed offsets (offsets retention)"
                            );
                        }
                        Err(e) => {
                            tracing::warn!(partition = index, error = %e.message, "cannot delete expired offsets; the next check retries");
                        }
                    }
                });
            }
        }
    }
}
