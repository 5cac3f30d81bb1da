//! [`ChunkCache`]: the read path from object storage through foyer.

use std::{
    collections::HashMap,
    fmt,
    fs::{File, OpenOptions, TryLockError},
    ops::Range,
    path::Path,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use bytes::{Bytes, BytesMut};
use foyer::{
    BlockEngineConfig, DeviceBuilder, EvictionConfig, FsDeviceBuilder, HybridCache,
    HybridCacheBuilder, HybridCachePolicy, LruConfig, PsyncIoEngineConfig, RecoverMode,
    S3FifoConfig, Source,
};
use futures::{
    FutureExt,
    future::{BoxFuture, Shared, try_join_all},
};
use tokio::{runtime::Handle, sync::oneshot, time::Instant};

use crate::{
    config::{CHUNKS_PER_BLOCK, CacheConfig, ENTRY_OVERHEAD, EvictionPolicy},
    error::{CacheError, Result},
    foyer_metrics::MetricsFacadeRegistry,
    key::ChunkKey,
    readahead::{PrefetchTicket, Prefetched, ReaderId, TicketId, Tracker, TrackerConfig},
    source::{ChunkSource, SourceError},
    stats::{CacheStats, Counters, HitTier},
};

/// A cache of fixed-size chunks of immutable objects, in memory and on local
/// disk, in front of a [`ChunkSource`].
///
/// - Reads are cut into chunks `[i * chunk_size, (i + 1) * chunk_size)`; a chunk
///   is read from the source whole, once, however many readers want it at the
///   same time (single flight), and a failed read is returned to all of them and
///   not cached. Disk-tier loads are single-flight too (foyer's `get`).
/// - A reader (see [`ReaderId`]) that reads sequentially gets the next chunks
///   prefetched, within per-reader and global bounds.
/// - Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct ChunkCache {
    inner: Arc<Inner>,
}

struct Inner {
    config: CacheConfig,
    hybrid: HybridCache<ChunkKey, Bytes>,
    source: Arc<dyn ChunkSource>,
    tracker: Mutex<Tracker>,
    /// Source reads in flight, one per chunk (single flight): later misses for
    /// the same chunk wait on the first one's result.
    inflight: Mutex<HashMap<ChunkKey, SharedFetch>>,
    counters: Arc<Counters>,
    /// Source reads and prefetch tasks run here: the runtime the cache was built in, which should
    /// be the remote-read runtime, not the one serving local fetches (KIP-405).
    runtime: Handle,
    /// Exclusive lock on the disk directory, released by `close` or drop.
    dir_lock: Mutex<Option<File>>,
}

impl fmt::Debug for ChunkCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkCache")
            .field("config", &self.inner.config)
            .field("source", &self.inner.source)
            .finish_non_exhaustive()
    }
}

/// How one shared source read failed; every waiter gets a clone.
#[derive(Debug, Clone, thiserror::Error)]
enum FetchError {
    #[error(transparent)]
    Source(SourceError),
    #[error("source returned {actual} bytes, expected {expected}")]
    WrongLength { expected: u64, actual: u64 },
    /// The task reading the source was cancelled (runtime shutting down).
    #[error("source read aborted")]
    Aborted,
}

/// One source read of one chunk, awaited by every reader that missed it.
type SharedFetch = Shared<BoxFuture<'static, std::result::Result<Bytes, FetchError>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded state stays consistent across a panic in another holder (no
    // multi-step invariants are left half-done by the code under these locks
    // that could panic), so recover instead of propagating the poison.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ChunkCache {
    /// Opens the cache: builds the memory tier and, if configured, opens (and
    /// recovers) the disk tier. Must be called within a tokio runtime; the
    /// cache's background work (foyer's fetches and flushes, prefetches) runs on it.
    pub async fn new(config: CacheConfig, source: Arc<dyn ChunkSource>) -> Result<Self> {
        config.validate()?;
        crate::stats::describe();

        let chunk = config.chunk_size as usize;
        let memory_capacity = config.memory_capacity as usize;
        // Each shard evicts on its own with `capacity / shards`; keep shards big
        // enough (64 chunks) that S3-FIFO's small queue (10%) holds several chunks.
        let shards = (memory_capacity / (64 * chunk)).clamp(1, 8);
        let eviction: EvictionConfig = match config.eviction {
            EvictionPolicy::S3Fifo => S3FifoConfig::default().into(),
            EvictionPolicy::Lru => LruConfig::default().into(),
        };
        let builder = HybridCacheBuilder::<ChunkKey, Bytes>::new()
            .with_name("strata_cache")
            .with_metrics_registry(Box::new(MetricsFacadeRegistry))
            // Chunks reach the disk when memory evicts them (and on close), so a
            // chunk read once and evicted costs one disk write, and a scan that
            // stays in memory costs none.
            .with_policy(HybridCachePolicy::WriteOnEviction)
            .with_flush_on_close(true)
            .memory(memory_capacity)
            .with_shards(shards)
            .with_eviction_config(eviction)
            // foyer's default weighter counts entries, not bytes.
            .with_weighter(|k: &ChunkKey, v: &Bytes| k.object.len() + v.len())
            .storage();

        let (hybrid, dir_lock) = match &config.disk {
            None => (builder.build().await.map_err(CacheError::Internal)?, None),
            Some(disk) => {
                let open_err = |message: String| CacheError::Open {
                    dir: disk.dir.display().to_string(),
                    message,
                };
                std::fs::create_dir_all(&disk.dir).map_err(|e| open_err(e.to_string()))?;
                let dir_lock = lock_dir(&disk.dir).map_err(open_err)?;
                let device = FsDeviceBuilder::new(&disk.dir)
                    .with_capacity(disk.capacity as usize)
                    .build()
                    .map_err(|e| open_err(e.to_string()))?;
                // A foyer block holds CHUNKS_PER_BLOCK chunks; the flush buffer holds
                // a block's worth, so a full chunk always fits (foyer silently skips
                // entries that do not fit its buffer or a block).
                let write_buffer = CHUNKS_PER_BLOCK as usize * (chunk + ENTRY_OVERHEAD as usize);
                let engine = BlockEngineConfig::new(device)
                    .with_block_size(config.block_size() as usize)
                    .with_buffer_pool_size(write_buffer)
                    .with_submit_queue_size_threshold(2 * write_buffer);
                let recover = if disk.recover {
                    RecoverMode::Quiet
                } else {
                    RecoverMode::None
                };
                let hybrid = builder
                    .with_io_engine_config(PsyncIoEngineConfig::new())
                    .with_engine_config(engine)
                    .with_recover_mode(recover)
                    .build()
                    .await
                    .map_err(|e| open_err(e.to_string()))?;
                (hybrid, Some(dir_lock))
            }
        };

        let tracker = Tracker::new(TrackerConfig {
            chunk_size: config.chunk_size,
            readahead_chunks: u64::from(config.readahead_chunks),
            max_inflight: u64::from(config.max_inflight_prefetches),
            budget_chunks: config.readahead_budget_chunks(),
            max_readers: config.max_readers,
            idle_timeout: config.reader_idle_timeout,
        });
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                hybrid,
                source,
                tracker: Mutex::new(tracker),
                inflight: Mutex::new(HashMap::new()),
                counters: Arc::new(Counters::default()),
                runtime: Handle::current(),
                dir_lock: Mutex::new(dir_lock),
            }),
        })
    }

    /// The configuration the cache was opened with.
    pub fn config(&self) -> &CacheConfig {
        &self.inner.config
    }

    /// Exactly the bytes `range` of object `key`, whose size is `object_size`.
    ///
    /// One zero-copy slice of a cached chunk when `range` lies within one chunk;
    /// a new buffer only when it spans chunks. An empty range within the object
    /// is `Ok` and empty without any source read; a range past `object_size` is
    /// [`CacheError::OutOfRange`].
    ///
    /// Dropping the returned future does not cancel the chunk reads it started:
    /// other readers may be waiting on them, and their result is cached.
    pub async fn read(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        reader: ReaderId,
    ) -> Result<Bytes> {
        if range.start > range.end || range.end > object_size {
            return Err(CacheError::OutOfRange {
                key: key.to_owned(),
                range,
                object_size,
            });
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let inner = &self.inner;
        let cs = inner.config.chunk_size;
        let object: Arc<str> = Arc::from(key);
        let (first, last) = (range.start / cs, (range.end - 1) / cs);

        let plan = lock(&inner.tracker).begin_read(
            reader,
            &object,
            object_size,
            range.clone(),
            Instant::now(),
            |c| inner.hybrid.memory().contains(&inner.chunk_key(&object, c)),
        );
        inner.counters.hit(HitTier::Memory, plan.current_hits);
        inner.counters.hit(HitTier::Readahead, plan.readahead_hits);
        inner
            .counters
            .readahead(plan.prefetch.len() as u64, plan.throttled);
        for ticket in plan.prefetch {
            Inner::spawn_prefetch(inner, object.clone(), object_size, ticket);
        }

        let counters = &inner.counters;
        let lookups =
            plan.held
                .into_iter()
                .zip(plan.waits)
                .zip(first..=last)
                .map(|((held, wait), c)| {
                    let object = &object;
                    async move {
                        if let Some(bytes) = held {
                            return Ok(bytes);
                        }
                        if let Some(wait) = wait {
                            // The reader caught up with its own read-ahead: wait for
                            // it. Having waited on the source makes it a miss.
                            if let Ok(Some(prefetched)) = wait.await {
                                if prefetched.from_source {
                                    counters.miss();
                                } else {
                                    counters.hit(HitTier::Readahead, 1);
                                }
                                return Ok(prefetched.bytes);
                            }
                            // It failed: look the chunk up (and retry the source) below.
                        }
                        let (bytes, _) =
                            inner.lookup(object, object_size, c, Lookup::Demand).await?;
                        Ok(bytes)
                    }
                });
        let chunks = try_join_all(lookups).await?;
        // Chunks held by the reader were cut for the object size it passed
        // before; a caller that changes its mind about the size gets an error,
        // not a panic or wrong bytes.
        for (chunk, c) in chunks.iter().zip(first..=last) {
            let expected = inner.chunk_range(c, object_size);
            if chunk.len() as u64 != expected.end - expected.start {
                return Err(CacheError::SizeMismatch {
                    key: key.to_owned(),
                    chunk: c,
                    object_size,
                    expected: expected.end - expected.start,
                    actual: chunk.len() as u64,
                });
            }
        }
        if let Some(tail) = chunks.last() {
            lock(&inner.tracker).end_read(reader, plan.generation, last, tail.clone());
        }

        let offset_in_first = (range.start - first * cs) as usize;
        let len = (range.end - range.start) as usize;
        if let [only] = chunks.as_slice() {
            return Ok(only.slice(offset_in_first..offset_in_first + len));
        }
        let mut out = BytesMut::with_capacity(len);
        let mut skip = offset_in_first;
        for chunk in &chunks {
            let take = (chunk.len() - skip).min(len - out.len());
            out.extend_from_slice(&chunk[skip..skip + take]);
            skip = 0;
        }
        Ok(out.freeze())
    }

    /// Counters and occupancy, including the hit ratio for `strata tier status`.
    pub fn stats(&self) -> CacheStats {
        let inner = &self.inner;
        let mut stats = inner.counters.snapshot();
        stats.memory_used_bytes = inner.hybrid.memory().usage() as u64;
        stats.memory_capacity_bytes = inner.hybrid.memory().capacity() as u64;
        if inner.hybrid.is_hybrid() {
            let disk = inner.hybrid.statistics();
            stats.disk_capacity_bytes = inner.hybrid.storage().device().capacity() as u64;
            stats.disk_write_bytes = disk.disk_write_bytes() as u64;
            stats.disk_read_bytes = disk.disk_read_bytes() as u64;
        }
        let t = lock(&inner.tracker).stats();
        stats.readers = t.readers;
        stats.readahead_inflight = t.inflight;
        stats.readahead_held = t.held;
        stats
    }

    /// Waits until every chunk handed to the disk tier so far is written (or
    /// dropped: foyer skips disk writes when its write queue is full, which
    /// only costs a later source read). For orderly shutdown and tests; reads
    /// never need it.
    pub async fn wait_disk_writes(&self) {
        if self.inner.hybrid.is_hybrid() {
            self.inner.hybrid.storage().wait().await;
        }
    }

    /// Flushes the memory tier to disk (so a restart over the same directory
    /// finds it), waits for pending disk writes, and releases the directory.
    /// Reads after `close` still work from memory and the source, but nothing
    /// more reaches the disk.
    pub async fn close(&self) -> Result<()> {
        self.inner
            .hybrid
            .close()
            .await
            .map_err(CacheError::Internal)?;
        lock(&self.inner.dir_lock).take();
        Ok(())
    }
}

impl Inner {
    fn chunk_key(&self, object: &Arc<str>, index: u64) -> ChunkKey {
        ChunkKey {
            object: object.clone(),
            chunk_size: self.config.chunk_size,
            index,
        }
    }

    fn chunk_range(&self, index: u64, object_size: u64) -> Range<u64> {
        let cs = self.config.chunk_size;
        index * cs..((index + 1) * cs).min(object_size)
    }

    /// One chunk: memory, else disk (foyer), else one source read shared by
    /// every concurrent caller. Demand lookups count as hits or misses;
    /// prefetches do not.
    async fn lookup(
        self: &Arc<Self>,
        object: &Arc<str>,
        object_size: u64,
        index: u64,
        lookup: Lookup,
    ) -> Result<(Bytes, Source)> {
        let key = self.chunk_key(object, index);
        let range = self.chunk_range(index, object_size);
        let (bytes, source) = loop {
            match self.hybrid.get(&key).await {
                Ok(Some(entry)) => break (entry.value().clone(), entry.source()),
                Ok(None) => {}
                // A disk-tier read error: the source still has the bytes.
                Err(e) => tracing::warn!(object = %object, chunk = index, error = %e,
                    "disk cache read failed, reading the source"),
            }
            // Single flight: join the read in flight, or start one. Checking
            // memory again under the lock closes the gap between a fetch's
            // insert and its removal from `inflight`.
            let (fetch, leader) = {
                let mut inflight = lock(&self.inflight);
                if let Some(fetch) = inflight.get(&key) {
                    (fetch.clone(), false)
                } else if self.hybrid.memory().contains(&key) {
                    continue;
                } else {
                    let fetch = self.start_fetch(key.clone(), range.clone());
                    inflight.insert(key.clone(), fetch.clone());
                    (fetch, true)
                }
            };
            let bytes = fetch.await.map_err(|e| fetch_error(e, &key, &range))?;
            if !leader {
                // We waited on a read another reader started: the chunk is
                // shared, which is the reuse S3-FIFO should see, but foyer only
                // counts an access on a hit. Register one. (A get whose entry is
                // dropped at once, not `touch`: foyer 0.22's `touch` takes a
                // reference it never releases, which pins the entry under LRU.)
                drop(self.hybrid.memory().get(&key));
            }
            break (bytes, Source::Outer);
        };
        if lookup == Lookup::Demand {
            match source {
                Source::Memory => self.counters.hit(HitTier::Memory, 1),
                Source::Disk => self.counters.hit(HitTier::Disk, 1),
                Source::Outer => self.counters.miss(),
            }
        }
        let expected = range.end - range.start;
        if bytes.len() as u64 != expected {
            return Err(CacheError::SizeMismatch {
                key: object.to_string(),
                chunk: index,
                object_size,
                expected,
                actual: bytes.len() as u64,
            });
        }
        Ok((bytes, source))
    }

    /// Starts the one source read of a chunk, in its own task so that a
    /// cancelled reader does not cancel it for the others. The task inserts the
    /// chunk before waking the waiters: the insert is where memory evicts, and
    /// where evicted chunks are handed to the disk tier, so when a read returns
    /// its evictions are already queued for disk (`wait_disk_writes` relies on
    /// it). foyer's own `get_or_fetch` wakes waiters first and hands evictions to
    /// the disk tier afterwards, which made disk-tier writes racy to observe.
    fn start_fetch(self: &Arc<Self>, key: ChunkKey, range: Range<u64>) -> SharedFetch {
        let this = self.clone();
        let task = self.runtime.spawn(async move {
            let result = this.read_source(&key.object, range).await;
            if let Ok(bytes) = &result {
                this.hybrid.insert(key.clone(), bytes.clone());
            }
            lock(&this.inflight).remove(&key);
            result
        });
        async move { task.await.unwrap_or(Err(FetchError::Aborted)) }
            .boxed()
            .shared()
    }

    /// One ranged read, checked for length.
    async fn read_source(
        &self,
        object: &str,
        range: Range<u64>,
    ) -> std::result::Result<Bytes, FetchError> {
        self.counters.source_read();
        let expected = range.end - range.start;
        match self.source.read_range(object, range).await {
            Ok(bytes) if bytes.len() as u64 == expected => {
                self.counters.source_bytes(expected);
                Ok(bytes)
            }
            Ok(bytes) => {
                self.counters.source_error();
                Err(FetchError::WrongLength {
                    expected,
                    actual: bytes.len() as u64,
                })
            }
            Err(e) => {
                self.counters.source_error();
                Err(FetchError::Source(e))
            }
        }
    }

    fn spawn_prefetch(
        this: &Arc<Self>,
        object: Arc<str>,
        object_size: u64,
        ticket: PrefetchTicket,
    ) {
        let PrefetchTicket { id, tx } = ticket;
        let mut guard = PrefetchGuard {
            inner: this.clone(),
            id: Some(id),
            tx: Some(tx),
        };
        this.runtime.spawn(async move {
            let Some(chunk) = guard.id.as_ref().map(|id| id.chunk) else {
                return;
            };
            let inner = guard.inner.clone();
            // Another reader may have loaded it since the plan: then its reader
            // finds it in memory, and a lookup here would count a false access.
            let key = inner.chunk_key(&object, chunk);
            if inner.hybrid.memory().contains(&key) {
                guard.finish(None);
                return;
            }
            let result = inner
                .lookup(&object, object_size, chunk, Lookup::Prefetch)
                .await;
            if let Err(e) = &result {
                tracing::debug!(object = %object, chunk, error = %e, "read-ahead failed");
            }
            guard.finish(result.ok().map(|(bytes, source)| Prefetched {
                bytes,
                from_source: source == Source::Outer,
            }));
        });
    }
}

/// Why a chunk is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// A reader needs it now: counts as a hit or a miss.
    Demand,
    /// Read-ahead: counts neither.
    Prefetch,
}

/// Reports a prefetch's end, to a read waiting on it and to the tracker,
/// exactly once, even if the task is dropped (runtime shutdown), so neither a
/// waiting read nor the in-flight bound is left hanging.
struct PrefetchGuard {
    inner: Arc<Inner>,
    id: Option<TicketId>,
    tx: Option<oneshot::Sender<Option<Prefetched>>>,
}

impl PrefetchGuard {
    fn finish(&mut self, prefetched: Option<Prefetched>) {
        let bytes = prefetched.as_ref().map(|p| p.bytes.clone());
        if let Some(tx) = self.tx.take() {
            // No receiver left is fine: nobody was waiting.
            let _ = tx.send(prefetched);
        }
        if let Some(id) = self.id.take() {
            lock(&self.inner.tracker).prefetch_done(&id, bytes);
        }
    }
}

impl Drop for PrefetchGuard {
    fn drop(&mut self) {
        self.finish(None);
    }
}

fn fetch_error(e: FetchError, key: &ChunkKey, range: &Range<u64>) -> CacheError {
    match e {
        FetchError::Source(source) => CacheError::Source {
            key: key.object.to_string(),
            chunk: key.index,
            source,
        },
        FetchError::WrongLength { expected, actual } => CacheError::WrongLength {
            key: key.object.to_string(),
            chunk: key.index,
            range: range.clone(),
            expected,
            actual,
        },
        FetchError::Aborted => CacheError::Source {
            key: key.object.to_string(),
            chunk: key.index,
            source: SourceError::transient("source read aborted (runtime shutting down)"),
        },
    }
}

/// Takes an exclusive lock on the cache directory: two caches writing the same
/// foyer files would corrupt each other's blocks.
fn lock_dir(dir: &Path) -> std::result::Result<File, String> {
    let path = dir.join("strata-cache.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(format!(
            "{} is locked: another cache has this directory open",
            path.display()
        )),
        Err(TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}
