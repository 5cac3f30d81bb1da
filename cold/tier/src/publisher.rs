//! The Iceberg publisher: every parquet.enable topic whose partition 0 this broker leads
//! is committed to its Iceberg table once per `--iceberg-commit-interval`, and its
//! orphaned Parquet objects are swept hourly. Started by `strata serve`'s wiring next
//! to the broker, which tells it (each tick) which topics it hosts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_proto::TopicId;
use tokio_util::sync::CancellationToken;

use crate::tiering::{HostedTopic, Tiering};

/// Runs the publisher until `shutdown`: each tick (the tier's round interval), the
/// topics `hosted` names are published as their interval comes. Nothing without an
/// object store engines can read, or with `--iceberg-commit-interval 0`.
pub fn spawn(
    tiering: Arc<Tiering>,
    hosted: impl Fn() -> Vec<HostedTopic> + Send + 'static,
    now_ms: impl Fn() -> i64 + Send + 'static,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Some(every) = tiering.round_interval() else {
            return;
        };
        if !tiering.publishing() {
            return;
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut state = Publishing::default();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            publish_tables(&tiering, &hosted(), now_ms(), &mut state);
        }
    })
}

/// When each topic's table was last published, and the publishing task in flight.
#[derive(Default)]
struct Publishing {
    last: HashMap<TopicId, Instant>,
    /// When each topic's orphaned Parquet objects were last swept
    /// (`crate::iceberg::remove_orphans`, hourly: a LIST of the topic's files).
    swept: HashMap<TopicId, Instant>,
    running: HashMap<TopicId, tokio::task::JoinHandle<()>>,
}

/// How often a publisher sweeps its topic's orphaned Parquet objects.
const ORPHAN_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// Iceberg: the leader of partition 0 of each parquet.enable topic commits the topic's
/// new Parquet files (every partition's) to its table, one snapshot per
/// `--iceberg-commit-interval` ([`crate::iceberg::publish`]). Each topic's round runs
/// as a task of its own, one at a time per topic, so a slow bucket (a round reads every
/// partition's manifest) holds up neither the other topics nor the archivers. A
/// failure is logged and retried at the next interval.
fn publish_tables(tiering: &Tiering, topics: &[HostedTopic], now_ms: i64, state: &mut Publishing) {
    let interval = tiering.tables().commit_interval;
    if interval.is_zero() {
        return;
    }
    state
        .last
        .retain(|id, _| topics.iter().any(|t| t.id == *id));
    state
        .swept
        .retain(|id, _| topics.iter().any(|t| t.id == *id));
    state.running.retain(|_, task| !task.is_finished());
    for t in topics.iter().filter(|t| t.config.parquet_enable) {
        if t.leads_first().is_none() {
            continue;
        }
        if state.running.contains_key(&t.id)
            || state
                .last
                .get(&t.id)
                .is_some_and(|at| at.elapsed() < interval)
        {
            continue;
        }
        state.last.insert(t.id, Instant::now());
        let sweep = state
            .swept
            .get(&t.id)
            .is_none_or(|at| at.elapsed() >= ORPHAN_SWEEP_INTERVAL);
        if sweep {
            state.swept.insert(t.id, Instant::now());
        }
        let Some(catalog) = tiering.table_catalog(&t.cluster_id) else {
            return;
        };
        let (id, t) = (t.id, t.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let name = t.name.to_string();
            match crate::iceberg::publish(&catalog, &name, t.partition_count, &t.config).await {
                Ok(Some(done)) => {
                    metrics::counter!("strata_iceberg_commits_total", "topic" => name.clone())
                        .increment(1);
                    metrics::counter!("strata_iceberg_files_added_total", "topic" => name.clone())
                        .increment(done.added_files as u64);
                    metrics::histogram!("strata_iceberg_commit_seconds")
                        .record(started.elapsed().as_secs_f64());
                    tracing::debug!(topic = %name, version = done.version, added = done.added_files, removed = done.removed_files, "committed to the Iceberg table");
                }
                Ok(None) => {}
                Err(e) => {
                    metrics::counter!("strata_iceberg_failures_total", "topic" => name.clone())
                        .increment(1);
                    tracing::warn!(topic = %name, error = %e, "Iceberg commit failed; the next interval retries");
                }
            }
            if sweep
                && let Err(e) = crate::iceberg::remove_orphans(
                    &catalog,
                    &name,
                    t.partition_count,
                    now_ms - crate::iceberg::ORPHAN_GRACE_MS,
                )
                .await
            {
                tracing::warn!(topic = %name, error = %e, "sweeping orphaned Parquet objects failed; the next sweep retries");
            }
        });
        state.running.insert(id, task);
    }
}
