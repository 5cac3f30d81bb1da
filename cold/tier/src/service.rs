//! The broker-wide tier service: the store, the chunk cache, and the limits shared by
//! every partition (upload concurrency and rate, remote-read concurrency).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_cache::{CacheStats, ChunkCache};
use strata_log::{Log, LogError, RecutSegment, SegmentInfo};
use strata_proto::Offset;
use strata_store::BlobStore;
use tokio::sync::{Mutex, Semaphore};

use crate::error::TierError;
use crate::layout::PartitionKey;
use crate::remote::RemotePartition;

/// Tier settings (the `strata serve` flags behind them are named in parentheses).
#[derive(Clone, Debug)]
pub struct TierConfig {
    /// Segment uploads in flight across all partitions (--offload-concurrency).
    pub upload_concurrency: usize,
    /// Upload rate cap in bytes per second, 0 for none (--offload-bytes-per-sec).
    pub upload_bytes_per_sec: u64,
    /// How often partitions are checked for sealed segments to offload.
    pub offload_interval: Duration,
    /// Remote reads in flight across all fetches (their own bounded pool, KIP-405).
    pub remote_read_concurrency: usize,
    /// Objects no manifest names, older than this, are deleted by the orphan sweep.
    pub orphan_grace: Duration,
    /// How often the orphan sweep runs.
    pub orphan_sweep_interval: Duration,
    /// Local bytes of tiered partitions beyond which producers are refused (the object
    /// store is down and uploads back up), 0 for no cap (--local-disk-cap-bytes).
    pub local_disk_cap_bytes: u64,
}

impl Default for TierConfig {
    fn default() -> Self {
        TierConfig {
            upload_concurrency: 2,
            upload_bytes_per_sec: 0,
            offload_interval: Duration::from_millis(500),
            remote_read_concurrency: 16,
            orphan_grace: Duration::from_secs(3600),
            orphan_sweep_interval: Duration::from_secs(3600),
            local_disk_cap_bytes: 0,
        }
    }
}

/// Paces uploads to a byte rate (a token bucket that may go into debt by one segment).
#[derive(Debug)]
struct RateLimiter {
    bytes_per_sec: u64,
    state: Mutex<(Instant, f64)>,
}

impl RateLimiter {
    async fn acquire(&self, bytes: u64) {
        if self.bytes_per_sec == 0 {
            return;
        }
        let wait = {
            let mut g = self.state.lock().await;
            let now = Instant::now();
            let rate = self.bytes_per_sec as f64;
            // Refill, up to one second's worth of burst.
            let tokens = (g.1 + now.duration_since(g.0).as_secs_f64() * rate).min(rate);
            let left = tokens - bytes as f64;
            *g = (now, left);
            if left < 0.0 {
                Duration::from_secs_f64(-left / rate)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The tier service.
#[derive(Debug)]
pub struct Tier {
    store: Arc<dyn BlobStore>,
    cache: Arc<ChunkCache>,
    config: TierConfig,
    uploads: Semaphore,
    reads: Semaphore,
    rate: RateLimiter,
}

impl Tier {
    pub fn new(store: Arc<dyn BlobStore>, cache: Arc<ChunkCache>, config: TierConfig) -> Tier {
        Tier {
            uploads: Semaphore::new(config.upload_concurrency.max(1)),
            reads: Semaphore::new(config.remote_read_concurrency.max(1)),
            rate: RateLimiter {
                bytes_per_sec: config.upload_bytes_per_sec,
                state: Mutex::new((Instant::now(), 0.0)),
            },
            store,
            cache,
            config,
        }
    }

    pub fn store(&self) -> &Arc<dyn BlobStore> {
        &self.store
    }

    pub fn config(&self) -> &TierConfig {
        &self.config
    }

    /// The chunk cache remote reads go through.
    pub fn cache(&self) -> &Arc<ChunkCache> {
        &self.cache
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Loads a partition's manifest.
    pub async fn open_partition(&self, key: PartitionKey) -> Result<RemotePartition, TierError> {
        RemotePartition::open(key, self.store.clone(), self.cache.clone()).await
    }

    /// A permit for one remote read: remote reads run on their own bounded pool so a
    /// flood of catch-up fetches cannot take every task slot from local ones.
    pub async fn read_permit(&self) -> tokio::sync::SemaphorePermit<'_> {
        // The semaphore is never closed.
        self.reads
            .acquire()
            .await
            .expect("the remote-read semaphore is never closed")
    }

    /// Offloads, in order, the sealed segments of `log` that are wholly below `hwm` and
    /// not yet remote. Stops at the first failure (the next call retries it). Returns
    /// how many segments were offloaded.
    pub async fn offload_ready(
        &self,
        log: &Log,
        remote: &RemotePartition,
        hwm: Offset,
        leader_epoch: i32,
    ) -> Result<usize, TierError> {
        let mut done = 0;
        // After a leader change the local segments may be cut elsewhere than the
        // previous leader's (each replica rolls on its own): one then straddles the
        // remote end. Its part above the end goes up as a segment of its own.
        if let Some((seg, from)) = straddling_segment(log, remote, hwm) {
            let _permit = self
                .uploads
                .acquire()
                .await
                .expect("the upload semaphore is never closed");
            let cut = recut(log, &seg, from, &recut_dir(log.dir(), from))?;
            self.rate.acquire(cut.segment().info.size_bytes).await;
            tracing::info!(dir = %log.dir().display(), from, to = seg.next_offset, "offloading the part of a local segment above the remote end");
            let result = remote.offload_sealed(cut.segment(), leader_epoch).await;
            // Deletes the re-cut segment's directory.
            drop(cut);
            result?;
            done += 1;
        }
        for seg in offload_candidates(log, remote, hwm) {
            let _permit = self
                .uploads
                .acquire()
                .await
                .expect("the upload semaphore is never closed");
            self.rate.acquire(seg.size_bytes).await;
            // Gone only if the log dropped it meanwhile (its start moved past it).
            let sealed = log.sealed_segment(seg.base_offset).ok_or_else(|| {
                TierError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{}: no longer in the log", seg.log_path.display()),
                ))
            })?;
            let started = Instant::now();
            remote.offload_sealed(&sealed, leader_epoch).await?;
            metrics::histogram!("strata_tier_upload_seconds")
                .record(started.elapsed().as_secs_f64());
            done += 1;
        }
        Ok(done)
    }
}

/// Sealed local segments that continue the remote range and lie below `hwm`.
pub fn offload_candidates(log: &Log, remote: &RemotePartition, hwm: Offset) -> Vec<SegmentInfo> {
    let mut next = remote.end_offset();
    // With every remote segment expired, local ones wholly below the remote start
    // are expired too (retention moves the local start after them): never re-upload.
    let bound = remote.start_bound();
    let mut out = Vec::new();
    for s in log.segments() {
        if !s.sealed || s.next_offset > hwm {
            break;
        }
        if next.is_none() && s.next_offset <= bound {
            continue;
        }
        match next {
            Some(n) if s.next_offset <= n => continue,
            // A local segment straddling the remote end cannot be offloaded without
            // re-cutting it; it stays local (only after a leader change with divergent
            // segment boundaries).
            Some(n) if s.base_offset != n => break,
            _ => {}
        }
        next = Some(s.next_offset);
        out.push(s);
    }
    out
}

/// The sealed local segment below `hwm` that starts below the remote end and ends
/// past it, with the remote end.
pub fn straddling_segment(
    log: &Log,
    remote: &RemotePartition,
    hwm: Offset,
) -> Option<(SegmentInfo, Offset)> {
    let end = remote.end_offset()?;
    log.segments()
        .into_iter()
        .take_while(|s| s.sealed && s.next_offset <= hwm)
        .find(|s| s.base_offset < end && end < s.next_offset)
        .map(|s| (s, end))
}

/// Where a re-cut segment is built: beside the partition directory (a name no topic
/// directory can have), never inside it, where recovery would see it.
fn recut_dir(partition_dir: &Path, from: Offset) -> PathBuf {
    let name = partition_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    partition_dir
        .parent()
        .unwrap_or(partition_dir)
        .join(format!(".recut.{name}.{from}"))
}

/// Copies the batches of `seg` from offset `from` on into a standalone sealed segment
/// in `dir` ([`Log::recut`]). `from` is the remote end, a batch boundary in every
/// in-sync replica's log (they hold the same batches below the high-water mark); if it
/// is not one here the copy fails and nothing is uploaded. The returned segment owns
/// `dir`, which is deleted when it is dropped (and on an error).
pub fn recut(
    log: &Log,
    seg: &SegmentInfo,
    from: Offset,
    dir: &Path,
) -> Result<RecutSegment, TierError> {
    log.recut(seg, from, dir).map_err(|e| match e {
        LogError::NoBatch { offset, end } => TierError::Corrupt {
            key: seg.log_path.display().to_string(),
            reason: format!("no batch at offset {offset} below {end}"),
        },
        // The re-cut segment itself is missing.
        LogError::Corrupt { path, reason, .. } if path == dir => TierError::Corrupt {
            key: path.display().to_string(),
            reason,
        },
        e => TierError::Log(e),
    })
}
