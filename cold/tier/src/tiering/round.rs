//! One scheduling round over the partitions the broker hosts: an archiver for each
//! tiered or Parquet partition (dropped with the partition), manifest reloads, offloads
//! (concurrently across partitions, on the tier's upload pool), Parquet, lag metrics,
//! and on their own intervals remote retention, remote compaction and the orphan sweep;
//! and the tiered topics' descriptors in the bucket.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use strata_proto::TopicId;

use super::{HostedPartition, HostedTopic, Tiering};
use crate::archiver::{Archiver, Leadership};
use crate::catalog::TopicDescriptor;
use crate::service::Tier;

/// What the rounds remember between them.
#[derive(Debug)]
pub(super) struct Rounds {
    /// One archiver per partition that tiers or writes Parquet.
    archivers: HashMap<(TopicId, i32), Archiver>,
    /// The descriptor last written per topic.
    described: HashMap<TopicId, TopicDescriptor>,
    last_retention: Instant,
    last_sweep: Instant,
}

impl Default for Rounds {
    fn default() -> Self {
        Rounds {
            archivers: HashMap::new(),
            described: HashMap::new(),
            last_retention: Instant::now(),
            last_sweep: Instant::now(),
        }
    }
}

/// The broker-side settings a round needs.
#[derive(Clone, Copy, Debug)]
pub struct RoundSettings {
    /// How often remote retention runs (--retention-check-interval).
    pub retention_check_interval: Duration,
    /// The offset map memory of one remote compaction pass.
    pub cleaner_map_bytes: usize,
}

type Key = (TopicId, i32);

fn key_of(t: &HostedTopic, p: &HostedPartition) -> Key {
    (t.id, p.index())
}

impl Tiering {
    /// One round over `topics` (the tiered or Parquet topics hosted here, with their
    /// hosted partitions): what each step does is [`Archiver`]'s. A partition no longer
    /// in `topics` (moved away, deleted) loses its archiver. Nothing without an object
    /// store.
    pub async fn round(&self, topics: &[HostedTopic], settings: RoundSettings, now_ms: i64) {
        let Some(tier) = self.tier.clone() else {
            return;
        };
        let config = tier.config().clone();
        let mut guard = self.rounds.lock().await;
        let rounds = &mut *guard;
        write_descriptors(&tier, topics, &mut rounds.described).await;
        let hosted: Vec<(&HostedTopic, &HostedPartition)> = topics
            .iter()
            .filter(|t| t.config.remote_storage_enable || t.config.parquet_enable)
            .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
            .collect();
        let archivers = &mut rounds.archivers;
        archivers.retain(|k, _| hosted.iter().any(|(t, p)| key_of(t, p) == *k));
        for (t, p) in &hosted {
            archivers.entry(key_of(t, p)).or_default();
        }
        let tiered: Vec<(&HostedTopic, &HostedPartition)> = hosted
            .iter()
            .filter(|(t, _)| t.config.remote_storage_enable)
            .copied()
            .collect();
        for (t, p) in &tiered {
            let lead = p.leadership();
            let a = archivers.entry(key_of(t, p)).or_default();
            if let Err(e) = a.reload_manifest(&p.log, lead).await {
                tracing::warn!(topic = %t.name, partition = p.index(), error = %e, "cannot reload the remote manifest after becoming leader; will retry")
            }
        }
        // Only the leader offloads and applies remote retention; it does so once it has
        // read the manifest as of its own epoch.
        let now = Instant::now();
        let leading: Vec<(&HostedTopic, &HostedPartition)> = tiered
            .iter()
            .filter(|(t, p)| archivers[&key_of(t, p)].leads(p.leadership()))
            .copied()
            .collect();
        let ready: Vec<(&HostedTopic, &HostedPartition, Leadership)> = leading
            .iter()
            .map(|(t, p)| (*t, *p, p.leadership()))
            .filter(|(t, p, lead)| archivers[&key_of(t, p)].offload_due(&p.log, *lead, now))
            .collect();
        let results = futures::future::join_all(ready.iter().map(|(t, p, lead)| {
            let a = &archivers[&key_of(t, p)];
            a.offload(&tier, &p.log, *lead)
        }))
        .await;
        for ((t, p, _), r) in ready.iter().zip(results) {
            let a = archivers.entry(key_of(t, p)).or_default();
            if let (Some(delay), Err(e)) = (a.offload_finished(&p.log, &r), &r) {
                tracing::warn!(topic = %t.name, partition = p.index(), error = %e, retry_in = ?delay, "offload failed; local segments are kept until it succeeds");
            }
        }
        metrics::gauge!("strata_tier_partitions_in_backoff")
            .set(archivers.values().filter(|a| a.in_backoff()).count() as f64);
        // Parquet for warehouse loaders: leaders convert their sealed segments in order;
        // followers read how far that got (local retention waits for it).
        for (t, p) in hosted.iter().filter(|(t, _)| t.config.parquet_enable) {
            let key = t.key(p);
            let published = self
                .publishing()
                .then(|| self.table_catalog(&key.cluster_id))
                .flatten();
            let a = archivers.entry(key_of(t, p)).or_default();
            let compact_now = self.compaction_requested(t.id, p.index());
            let done = a
                .parquet(
                    &tier,
                    &key,
                    &p.log,
                    p.leadership(),
                    &p.config(),
                    published.as_ref(),
                    compact_now,
                )
                .await;
            if compact_now {
                self.compaction_finished(t.id, p.index());
            }
            p.log
                .note_parquet_round(done.as_ref().map(|_| ()).map_err(|e| e.to_string()), now_ms);
            if let Err(e) = done {
                tracing::warn!(topic = %t.name, partition = p.index(), error = %e, "parquet conversion failed; local segments are kept until it succeeds");
                metrics::counter!("strata_parquet_failures_total", "topic" => t.name.to_string())
                    .increment(1);
            }
        }
        for (t, p) in &leading {
            archivers[&key_of(t, p)].publish_lag(&p.log, now_ms);
        }
        if rounds.last_retention.elapsed() >= settings.retention_check_interval {
            rounds.last_retention = Instant::now();
            for (t, p) in &leading {
                let a = &archivers[&key_of(t, p)];
                if let Err(e) = a.apply_retention(&p.log, &p.config(), now_ms).await {
                    tracing::warn!(topic = %t.name, partition = p.index(), error = %e, "remote retention failed");
                }
            }
        }
        // Compacted topics: the remote tier's cleaner, after the local one has moved
        // (each pass in its own task, one at a time per partition).
        for (t, p) in &leading {
            let config = p.config();
            if config.cleanup_policy.compacts() {
                archivers[&key_of(t, p)]
                    .delete_retired(&p.log, tier.config().orphan_grace)
                    .await;
                archivers[&key_of(t, p)].compact_remote(
                    &p.log,
                    p.leadership(),
                    &config,
                    settings.cleaner_map_bytes,
                    now_ms,
                );
            }
        }
        if rounds.last_sweep.elapsed() >= config.orphan_sweep_interval {
            rounds.last_sweep = Instant::now();
            crate::archiver::sweep_staging(&tier, config.orphan_grace).await;
            for (t, p) in &leading {
                let a = &archivers[&key_of(t, p)];
                if let Err(e) = a.sweep_orphans(&p.log, config.orphan_grace).await {
                    tracing::warn!(topic = %t.name, partition = p.index(), error = %e, "orphan sweep failed");
                }
            }
        }
    }
}

/// Keeps each tiered topic's descriptor in the bucket current (recovery reads it).
/// (Written by the leader of partition 0, so one broker writes it.)
async fn write_descriptors(
    tier: &Tier,
    topics: &[HostedTopic],
    described: &mut HashMap<TopicId, TopicDescriptor>,
) {
    for t in topics
        .iter()
        .filter(|t| t.config.remote_storage_enable)
        .filter(|t| t.leads_first().is_some())
    {
        let d = TopicDescriptor {
            version: 1,
            cluster_id: t.cluster_id.clone(),
            topic: t.name.to_string(),
            topic_id: t.id,
            partitions: t.partition_count,
            configs: t.overrides.clone(),
        };
        if described.get(&t.id) != Some(&d) {
            match crate::catalog::write(tier.store(), &d).await {
                Ok(()) => {
                    described.insert(t.id, d);
                }
                Err(e) => {
                    tracing::warn!(topic = %t.name, error = %e, "cannot write the topic's descriptor to the object store")
                }
            }
        }
    }
}
