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

/// The cleaner's settings: the `strata serve` flags, overridden by Kafka's dynamic broker
/// configs of the same names (`log.cleaner.threads`, `.io.max.bytes.per.second`,
/// `.dedupe.buffer.size`, `.backoff.ms`; this broker's own, else the cluster default),
/// which apply without a restart.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Settings {
    threads: usize,
    io_bytes_per_second: u64,
    dedupe_buffer_bytes: usize,
    backoff: Duration,
}

impl Settings {
    fn from_flags(c: &BrokerConfig) -> Settings {
        Settings {
            threads: c.log_cleaner_threads.max(1),
            io_bytes_per_second: c.log_cleaner_io_max_bytes_per_second,
            dedupe_buffer_bytes: c.log_cleaner_dedupe_buffer_bytes,
            backoff: c.log_cleaner_backoff,
        }
    }

    /// These settings with the dynamic configs `md` holds for broker `node`.
    fn with_dynamic(self, md: &strata_controller::ClusterMetadata, node: i32) -> Settings {
        let get = |k: &str| md.broker_config(node, k);
        Settings {
            threads: get("log.cleaner.threads")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .map_or(self.threads, |n| n.max(1)),
            // A double in Kafka; 0 and anything past u64 (Kafka's default,
            // Double.MAX_VALUE) are no cap.
            io_bytes_per_second: get("log.cleaner.io.max.bytes.per.second")
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map_or(self.io_bytes_per_second, |r| {
                    if r >= u64::MAX as f64 { 0 } else { r as u64 }
                }),
            dedupe_buffer_bytes: get("log.cleaner.dedupe.buffer.size")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(self.dedupe_buffer_bytes),
            backoff: get("log.cleaner.backoff.ms")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(self.backoff, Duration::from_millis),
        }
    }

    /// Each thread's share of the offset maps' memory.
    fn per_thread_buffer(&self) -> usize {
        self.dedupe_buffer_bytes / self.threads.max(1)
    }
}

/// Starts the cleaner threads, and the watcher that applies the dynamic configs (more
/// threads start when `log.cleaner.threads` grows; past it, threads idle); all stop when
/// `shutdown` is cancelled.
pub(crate) fn start(
    replicas: &Arc<ReplicaManager>,
    c: &BrokerConfig,
    shutdown: &CancellationToken,
) {
    let flags = Settings::from_flags(c);
    let shared = Arc::new(Shared {
        busy: Mutex::new(HashSet::new()),
        throttle: Throttle::new(flags.io_bytes_per_second),
        settings: Mutex::new(flags),
    });
    let node = c.node_id;
    let (replicas, shutdown) = (replicas.clone(), shutdown.clone());
    let watcher = std::thread::Builder::new()
        // Thread names are cut to 15 bytes: these stay apart.
        .name("strata-cleaning".into())
        .spawn(move || {
            let mut started = 0;
            while !shutdown.is_cancelled() {
                let now = flags.with_dynamic(&replicas.cluster(), node);
                if shared.set(now) {
                    tracing::info!(?now, "log cleaner settings");
                }
                metrics::gauge!("strata_log_cleaner_dedupe_buffer_bytes")
                    .set((now.per_thread_buffer() * now.threads) as f64);
                while started < now.threads {
                    let (replicas, shared, shutdown) =
                        (replicas.clone(), shared.clone(), shutdown.clone());
                    let i = started;
                    let spawned = std::thread::Builder::new()
                        .name(format!("strata-cleaner{i}"))
                        .spawn(move || run(i, replicas, shared, shutdown));
                    if let Err(e) = spawned {
                        tracing::error!(error = %e, "cannot start a log cleaner thread: compacted topics are cleaned by fewer threads");
                        break;
                    }
                    started += 1;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
    if let Err(e) = watcher {
        tracing::error!(error = %e, "cannot start the log cleaner: compacted topics are not cleaned");
    }
}

type Key = (TopicId, PartitionId);

/// What the cleaner threads share.
#[derive(Debug)]
struct Shared {
    /// Partitions a thread is cleaning now.
    busy: Mutex<HashSet<Key>>,
    throttle: Throttle,
    /// The settings in force (the watcher updates them).
    settings: Mutex<Settings>,
}

impl Shared {
    fn settings(&self) -> Settings {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `now` in force; whether it changed anything.
    fn set(&self, now: Settings) -> bool {
        let mut s = self.settings.lock().unwrap_or_else(|e| e.into_inner());
        let changed = *s != now;
        *s = now;
        self.throttle.set_rate(now.io_bytes_per_second);
        changed
    }
}

/// Cleaner thread `index`: cleans while it is one of the `threads` in force, idles past
/// them.
fn run(
    index: usize,
    replicas: Arc<ReplicaManager>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    // Cleaning is background work: the CPU and the disk producers and consumers leave
    // idle. (The IO cap does most to keep producers' latency: benches/compaction.sh.)
    strata_log::priority::lower_this_thread("log cleaner");
    // Allocated when first needed (a broker without compacted topics pays nothing), and
    // again when the dedupe buffer's share changes.
    let mut map: Option<(usize, OffsetMap)> = None;
    while !shutdown.is_cancelled() {
        let settings = shared.settings();
        let worked = index < settings.threads
            && match pick(&replicas, &shared) {
                Some((p, c)) => {
                    let buffer = settings.per_thread_buffer();
                    if map.as_ref().is_none_or(|(b, _)| *b != buffer) {
                        map = Some((buffer, OffsetMap::with_memory(buffer)));
                    }
                    if let Some((_, map)) = map.as_mut() {
                        clean(&p, &c, map, &shared.throttle);
                    }
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
            if index >= settings.threads {
                // Not needed now: give the memory back.
                map = None;
            }
            // Wake up often enough to stop promptly.
            let backoff = settings.backoff;
            let until = Instant::now() + backoff;
            while !shutdown.is_cancelled() && Instant::now() < until {
                std::thread::sleep(
                    Duration::from_millis(100).min(backoff.max(Duration::from_millis(1))),
                );
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
    /// Changed by the dynamic config `log.cleaner.io.max.bytes.per.second`.
    rate: std::sync::atomic::AtomicU64,
    state: Mutex<(f64, Instant)>,
}

impl Throttle {
    fn new(rate: u64) -> Throttle {
        Throttle {
            rate: std::sync::atomic::AtomicU64::new(rate),
            state: Mutex::new((rate as f64, Instant::now())),
        }
    }

    fn set_rate(&self, rate: u64) {
        self.rate.store(rate, std::sync::atomic::Ordering::Relaxed);
    }

    fn take(&self, bytes: u64) {
        let rate = self.rate.load(std::sync::atomic::Ordering::Relaxed);
        if rate == 0 || bytes == 0 {
            return;
        }
        let wait = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let rate = rate as f64;
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
