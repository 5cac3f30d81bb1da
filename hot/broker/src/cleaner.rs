//! The log cleaner's threads (Kafka's `LogCleaner` with `log.cleaner.threads`): each
//! picks the compacted partition hosted here that most needs cleaning (the dirtiest
//! above `min.cleanable.dirty.ratio`, a partition past `max.compaction.lag.ms` first,
//! or one whose tombstones' delete horizon has passed), runs one pass of strata-log's
//! cleaner over it below its high-water mark, and looks again; with nothing to do it
//! waits `--log-cleaner-backoff`. Leaders and followers clean their own copies, as in
//! Kafka. The dedupe buffer is split between the threads, and one IO budget
//! (`--log-cleaner-io-max-bytes-per-second`, read plus written) is shared by them all.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use strata_log::{Cleanable, OffsetMap};
use strata_proto::{PartitionId, TopicId};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::partition::Partition;
use crate::replicas::ReplicaManager;

/// Starts the cleaner threads; they stop when `shutdown` is cancelled.
pub(crate) fn start(
    replicas: &Arc<ReplicaManager>,
    c: &BrokerConfig,
    shutdown: &CancellationToken,
) {
    let threads = c.log_cleaner_threads.max(1);
    let shared = Arc::new(Shared {
        busy: Mutex::new(HashSet::new()),
        throttle: Throttle::new(c.log_cleaner_io_max_bytes_per_second),
    });
    let per_thread = c.log_cleaner_dedupe_buffer_bytes / threads;
    metrics::gauge!("strata_log_cleaner_dedupe_buffer_bytes").set((per_thread * threads) as f64);
    for i in 0..threads {
        let replicas = replicas.clone();
        let shutdown = shutdown.clone();
        let shared = shared.clone();
        let backoff = c.log_cleaner_backoff;
        let spawned = std::thread::Builder::new()
            .name(format!("strata-cleaner-{i}"))
            .spawn(move || run(replicas, shared, per_thread, backoff, shutdown));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start a log cleaner thread: compacted topics are not cleaned");
        }
    }
}

type Key = (TopicId, PartitionId);

/// What the cleaner threads share.
#[derive(Debug)]
struct Shared {
    /// Partitions a thread is cleaning now.
    busy: Mutex<HashSet<Key>>,
    throttle: Throttle,
}

fn run(
    replicas: Arc<ReplicaManager>,
    shared: Arc<Shared>,
    buffer: usize,
    backoff: Duration,
    shutdown: CancellationToken,
) {
    // Cleaning is background work: the CPU and the disk producers and consumers leave
    // idle. (The IO cap does most to keep producers' latency: benches/compaction.sh.)
    strata_log::priority::lower_this_thread("log cleaner");
    // Allocated when first needed: a broker without compacted topics pays nothing.
    let mut map: Option<OffsetMap> = None;
    while !shutdown.is_cancelled() {
        let worked = match pick(&replicas, &shared) {
            Some((p, c)) => {
                let map = map.get_or_insert_with(|| OffsetMap::with_memory(buffer));
                clean(&p, &c, map, &shared.throttle);
                shared
                    .busy
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&(p.topic_id, p.index));
                true
            }
            None => false,
        };
        if !worked {
            // Wake up often enough to stop promptly.
            let until = Instant::now() + backoff;
            while !shutdown.is_cancelled() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100).min(backoff));
            }
        }
    }
}

/// The partition most in need of cleaning that no other thread has, marked busy.
fn pick(replicas: &ReplicaManager, shared: &Shared) -> Option<(Arc<Partition>, Cleanable)> {
    let mut best: Option<(Arc<Partition>, Cleanable)> = None;
    for p in replicas.partitions() {
        let Some(c) = p.cleanable() else { continue };
        let labels = labels(&p);
        metrics::gauge!("strata_log_cleaner_dirty_ratio", &labels).set(c.dirty_ratio);
        metrics::gauge!("strata_log_cleaner_cleaned_offset", &labels).set(c.first_dirty as f64);
        metrics::gauge!("strata_log_cleaner_lag_seconds", &labels).set(lag_seconds(&p, &c));
        if !c.due() {
            continue;
        }
        let better = best
            .as_ref()
            .is_none_or(|(_, b)| (c.lag_due, c.dirty_ratio) > (b.lag_due, b.dirty_ratio));
        if better
            && !shared
                .busy
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&(p.topic_id, p.index))
        {
            best = Some((p, c));
        }
    }
    let (p, c) = best?;
    let fresh = shared
        .busy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((p.topic_id, p.index));
    fresh.then_some((p, c))
}

fn labels(p: &Partition) -> [(&'static str, String); 2] {
    [
        ("topic", p.topic.to_string()),
        ("partition", p.index.to_string()),
    ]
}

fn clean(p: &Partition, before: &Cleanable, map: &mut OffsetMap, throttle: &Throttle) {
    let started = Instant::now();
    let labels = labels(p);
    match p.clean(map, &mut |bytes| throttle.take(bytes)) {
        Ok(out) => {
            p.record_clean(&out, before.lag_due);
            metrics::counter!("strata_log_cleaner_passes_total").increment(1);
            metrics::counter!("strata_log_cleaner_read_bytes_total").increment(out.bytes_read);
            metrics::counter!("strata_log_cleaner_written_bytes_total")
                .increment(out.bytes_written);
            metrics::counter!("strata_log_cleaner_reclaimed_bytes_total", &labels)
                .increment(out.bytes_reclaimed());
            metrics::gauge!("strata_log_cleaner_cleaned_offset", &labels)
                .set(out.cleaned_to as f64);
            if before.lag_due {
                // KIP-354's max.compaction.lag.ms was passed before this pass started.
                metrics::counter!(
                    "strata_log_cleaner_max_compaction_lag_breaches_total",
                    &labels
                )
                .increment(1);
            }
            let secs = started.elapsed().as_secs_f64();
            tracing::info!(
                topic = %p.topic, partition = p.index,
                cleaned_to = out.cleaned_to, keys = out.keys,
                removed = out.records_removed, tombstones_removed = out.tombstones_removed,
                before = out.size_before, after = out.size_after,
                segments = out.segments_before, into = out.segments_after,
                abandoned = out.groups_abandoned,
                read_mb_s = out.bytes_read as f64 / secs.max(1e-6) / 1e6,
                "cleaned"
            );
        }
        Err(e) => {
            metrics::counter!("strata_log_cleaner_errors_total").increment(1);
            tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "log cleaning failed; will retry");
        }
    }
}

/// One compacted partition's cleaner state, for `/v1/cleaner/status` and
/// `strata topic describe`.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionCleanerStatus {
    pub topic: String,
    pub partition: i32,
    /// Cleaned below this offset (the cleaner checkpoint).
    pub cleaned_offset: i64,
    /// Nothing at or above this may be cleaned yet (the active segment, the high-water
    /// mark, min.compaction.lag.ms).
    pub uncleanable_offset: i64,
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
    pub dirty_ratio: f64,
    /// The age of the oldest uncleaned record (0 when nothing is dirty).
    pub lag_seconds: f64,
    /// Whether a pass is due now.
    pub due: bool,
    pub passes: u64,
    pub reclaimed_bytes: u64,
    pub last_pass_ms: Option<i64>,
    pub max_compaction_lag_breaches: u64,
}

/// Every compacted partition hosted here.
#[derive(Clone, Debug, Serialize)]
pub struct CleanerStatus {
    pub partitions: Vec<PartitionCleanerStatus>,
}

/// Every compacted partition's cleaner state here (`strata topic cleaner`).
pub fn status(replicas: &ReplicaManager) -> CleanerStatus {
    let mut partitions: Vec<PartitionCleanerStatus> = replicas
        .partitions()
        .into_iter()
        .filter_map(|p| {
            let c = p.cleanable()?;
            let stats = p.cleaner_stats();
            Some(PartitionCleanerStatus {
                topic: p.topic.to_string(),
                partition: p.index,
                cleaned_offset: c.first_dirty,
                uncleanable_offset: c.uncleanable,
                clean_bytes: c.clean_bytes,
                dirty_bytes: c.dirty_bytes,
                dirty_ratio: c.dirty_ratio,
                lag_seconds: lag_seconds(&p, &c),
                due: c.due(),
                passes: stats.passes,
                reclaimed_bytes: stats.reclaimed_bytes,
                last_pass_ms: stats.last_pass_ms,
                max_compaction_lag_breaches: stats.max_compaction_lag_breaches,
            })
        })
        .collect();
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    CleanerStatus { partitions }
}

/// The age of the oldest uncleaned record, 0 when nothing is dirty.
fn lag_seconds(p: &Partition, c: &Cleanable) -> f64 {
    match c.first_dirty_timestamp {
        Some(t) if c.dirty_bytes > 0 => (p.now_ms() - t).max(0) as f64 / 1e3,
        _ => 0.0,
    }
}

/// One IO budget for every cleaner thread: `rate` bytes a second, in a bucket of one
/// second's worth; a thread that takes more than is there sleeps until it has been
/// earned. 0 is no cap.
#[derive(Debug)]
struct Throttle {
    rate: u64,
    state: Mutex<(f64, Instant)>,
}

impl Throttle {
    fn new(rate: u64) -> Throttle {
        Throttle {
            rate,
            state: Mutex::new((rate as f64, Instant::now())),
        }
    }

    fn take(&self, bytes: u64) {
        if self.rate == 0 || bytes == 0 {
            return;
        }
        let wait = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let rate = self.rate as f64;
            s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * rate).min(rate);
            s.1 = now;
            s.0 -= bytes as f64;
            (s.0 < 0.0).then(|| Duration::from_secs_f64(-s.0 / rate))
        };
        if let Some(w) = wait {
            std::thread::sleep(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_holds_the_rate() {
        let t = Throttle::new(10 << 20);
        let start = Instant::now();
        // A second's worth is in the bucket; the next 5 MiB take about half a second.
        for _ in 0..15 {
            t.take(1 << 20);
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        // No cap: never sleeps (a sleep of u64::MAX bytes would not return).
        Throttle::new(0).take(u64::MAX);
    }
}
