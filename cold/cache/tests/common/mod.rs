//! An in-memory [`ChunkSource`] for the tests: holds objects, counts calls, and
//! can be paused, delayed, made to fail or to return the wrong length.

#![allow(dead_code, clippy::unwrap_used)]

use std::{
    collections::{HashMap, VecDeque},
    ops::Range,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use rand::{Rng, RngExt, SeedableRng, rngs::StdRng};
use strata_cache::{CacheConfig, ChunkCache, ChunkSource, DiskConfig, EvictionPolicy, SourceError};
use tokio::sync::watch;

pub const MIB: u64 = 1024 * 1024;
/// Chunk size used by most tests: the smallest allowed, to keep objects small.
pub const CS: u64 = 4 * MIB;

/// An injected fault for the next read(s).
#[derive(Debug, Clone)]
pub enum Fault {
    Fail(SourceError),
    /// Return this many bytes fewer than asked (a truncated body).
    Truncate(usize),
    /// Return one byte more than asked.
    Extend,
}

#[derive(Debug, Default)]
pub struct MemSource {
    objects: Mutex<HashMap<String, Bytes>>,
    calls: AtomicU64,
    bytes: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    per_range: Mutex<HashMap<(String, u64), u64>>,
    faults: Mutex<VecDeque<Fault>>,
    /// Per-request latency and bandwidth (bytes/s, 0 = unlimited).
    latency: Mutex<(Duration, u64)>,
    /// While `true`, reads wait (after counting themselves) until it turns `false`.
    paused: Mutex<Option<watch::Sender<bool>>>,
}

impl MemSource {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds an object of `size` pseudo-random bytes (seeded by `seed`) and
    /// returns it. Cheap even in debug builds: a 1 MiB random block repeated,
    /// every 4 KiB stamped with its offset and the seed, so that no two 4 KiB
    /// pieces of any objects are equal and a misplaced byte range shows.
    pub fn add_random(&self, key: &str, size: u64, seed: u64) -> Bytes {
        let mut block = vec![0u8; 1 << 20];
        StdRng::seed_from_u64(seed).fill_bytes(&mut block);
        let mut data = vec![0u8; size as usize];
        for (i, out) in data.chunks_mut(block.len()).enumerate() {
            out.copy_from_slice(&block[..out.len()]);
            for (j, page) in out.chunks_mut(4096).enumerate() {
                let offset = (i * block.len() + j * 4096) as u64;
                let mut stamp = [0u8; 16];
                stamp[..8].copy_from_slice(&offset.to_le_bytes());
                stamp[8..].copy_from_slice(&seed.to_le_bytes());
                let n = stamp.len().min(page.len());
                page[..n].copy_from_slice(&stamp[..n]);
            }
        }
        let data = Bytes::from(data);
        self.add(key, data.clone());
        data
    }

    pub fn add(&self, key: &str, data: Bytes) {
        self.objects.lock().unwrap().insert(key.to_owned(), data);
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(SeqCst)
    }

    pub fn bytes_read(&self) -> u64 {
        self.bytes.load(SeqCst)
    }

    pub fn max_in_flight(&self) -> u64 {
        self.max_in_flight.load(SeqCst)
    }

    /// Source reads of the chunk starting at `start` of `key`.
    pub fn calls_for(&self, key: &str, start: u64) -> u64 {
        *self
            .per_range
            .lock()
            .unwrap()
            .get(&(key.to_owned(), start))
            .unwrap_or(&0)
    }

    /// Source reads of any range of `key`.
    pub fn calls_for_key(&self, key: &str) -> u64 {
        self.per_range
            .lock()
            .unwrap()
            .iter()
            .filter(|((k, _), _)| k == key)
            .map(|(_, n)| n)
            .sum()
    }

    pub fn inject(&self, fault: Fault) {
        self.faults.lock().unwrap().push_back(fault);
    }

    pub fn set_latency(&self, latency: Duration, bytes_per_sec: u64) {
        *self.latency.lock().unwrap() = (latency, bytes_per_sec);
    }

    /// Makes reads wait until [`MemSource::resume`].
    pub fn pause(&self) {
        let (tx, _rx) = watch::channel(true);
        *self.paused.lock().unwrap() = Some(tx);
    }

    pub fn resume(&self) {
        if let Some(tx) = self.paused.lock().unwrap().take() {
            let _ = tx.send(false);
        }
    }
}

#[async_trait]
impl ChunkSource for MemSource {
    async fn read_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, SourceError> {
        self.calls.fetch_add(1, SeqCst);
        *self
            .per_range
            .lock()
            .unwrap()
            .entry((key.to_owned(), range.start))
            .or_default() += 1;
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.max_in_flight.fetch_max(now, SeqCst);
        let result = self.read_inner(key, range).await;
        self.in_flight.fetch_sub(1, SeqCst);
        result
    }
}

impl MemSource {
    async fn read_inner(&self, key: &str, range: Range<u64>) -> Result<Bytes, SourceError> {
        let rx = self
            .paused
            .lock()
            .unwrap()
            .as_ref()
            .map(|tx| tx.subscribe());
        if let Some(mut rx) = rx {
            let _ = rx.wait_for(|paused| !paused).await;
        }
        let (latency, bandwidth) = *self.latency.lock().unwrap();
        let len = range.end - range.start;
        let mut delay = latency;
        if bandwidth > 0 {
            delay += Duration::from_secs_f64(len as f64 / bandwidth as f64);
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let fault = self.faults.lock().unwrap().pop_front();
        if let Some(Fault::Fail(e)) = fault {
            return Err(e);
        }
        let data = self
            .objects
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .ok_or_else(|| SourceError::not_found(format!("no object {key}")))?;
        if range.end > data.len() as u64 || range.start > range.end {
            return Err(SourceError::permanent(format!(
                "range {range:?} outside {key} of {}",
                data.len()
            )));
        }
        let out = data.slice(range.start as usize..range.end as usize);
        self.bytes.fetch_add(out.len() as u64, SeqCst);
        Ok(match fault {
            Some(Fault::Truncate(n)) => out.slice(..out.len().saturating_sub(n)),
            Some(Fault::Extend) => {
                let mut v = out.to_vec();
                v.push(0);
                Bytes::from(v)
            }
            _ => out,
        })
    }
}

/// A memory-only config with `CS` chunks and `memory_chunks` of memory.
pub fn memory_config(memory_chunks: u64) -> CacheConfig {
    CacheConfig {
        chunk_size: CS,
        memory_capacity: memory_chunks * CS,
        disk: None,
        eviction: EvictionPolicy::S3Fifo,
        ..CacheConfig::default()
    }
}

/// A config with a disk tier in `dir`.
pub fn disk_config(memory_chunks: u64, disk_bytes: u64, dir: &Path) -> CacheConfig {
    CacheConfig {
        disk: Some(DiskConfig {
            dir: dir.to_path_buf(),
            capacity: disk_bytes,
            recover: true,
        }),
        ..memory_config(memory_chunks)
    }
}

pub async fn open(config: CacheConfig, source: &Arc<MemSource>) -> ChunkCache {
    ChunkCache::new(config, source.clone())
        .await
        .expect("open cache")
}

/// Waits until no prefetch is in flight, so that tests do not race read-ahead.
pub async fn settle(cache: &ChunkCache) {
    for _ in 0..10_000 {
        if cache.stats().readahead_inflight == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("prefetches did not finish: {:?}", cache.stats());
}

/// A random range of `size`, biased towards chunk boundaries and the ends.
pub fn random_range(rng: &mut StdRng, size: u64) -> Range<u64> {
    let pick = |rng: &mut StdRng| -> u64 {
        match rng.random_range(0..4) {
            0 => {
                let boundary = rng.random_range(0..=size / CS) * CS;
                (boundary + rng.random_range(0..3))
                    .saturating_sub(1)
                    .min(size)
            }
            1 => size - rng.random_range(0..=size.min(10)),
            _ => rng.random_range(0..=size),
        }
    };
    let (a, b) = (pick(rng), pick(rng));
    a.min(b)..a.max(b)
}
