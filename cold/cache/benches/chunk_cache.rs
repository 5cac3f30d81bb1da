//! Sequential catch-up through the chunk cache.
//!
//! Cold: a 256 MiB object read in 1 MiB reads from an empty cache, from a source
//! that charges 20 ms per request plus 256 MiB/s per request (one S3 GET stream
//! in-region; concurrent requests do not slow each other).
//! Compared: read-ahead on (4 chunks), read-ahead off, and the baseline a
//! reader without the cache gets: sequential 8 MiB ranged GETs.
//!
//! Warm: the same reads served from memory, each 1 MiB copied out (as a fetch
//! response is), against a plain memcpy of the same bytes (the local hot read).
//! Also: warm from the disk tier (memory smaller than the object).
//!
//! `cargo bench -p strata-cache --bench chunk_cache`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    ops::Range,
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use strata_cache::{CacheConfig, ChunkCache, ChunkSource, DiskConfig, ReaderId, SourceError};
use tokio::runtime::Runtime;

const MIB: u64 = 1024 * 1024;
const OBJECT: u64 = 256 * MIB;
const READ: u64 = MIB;
const CHUNK: u64 = 8 * MIB;
const LATENCY: Duration = Duration::from_millis(20);
const BANDWIDTH: f64 = 256.0 * MIB as f64; // bytes/s per request

#[derive(Debug)]
struct SimSource {
    data: Bytes,
}

#[async_trait]
impl ChunkSource for SimSource {
    async fn read_range(&self, _key: &str, range: Range<u64>) -> Result<Bytes, SourceError> {
        let len = range.end - range.start;
        tokio::time::sleep(LATENCY + Duration::from_secs_f64(len as f64 / BANDWIDTH)).await;
        Ok(self.data.slice(range.start as usize..range.end as usize))
    }
}

fn object() -> Bytes {
    let mut v = vec![0u8; OBJECT as usize];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (i as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(17) as u8;
    }
    Bytes::from(v)
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn memory_config(readahead_chunks: u32) -> CacheConfig {
    CacheConfig {
        chunk_size: CHUNK,
        memory_capacity: 512 * MIB,
        disk: None,
        readahead_chunks,
        ..CacheConfig::default()
    }
}

/// Reads the whole object sequentially in 1 MiB reads, copying each into `out`
/// (the response buffer), and returns a checksum so nothing is optimised away.
async fn read_all(cache: &ChunkCache, out: &mut [u8]) -> u64 {
    let mut sum = 0u64;
    let mut pos = 0;
    while pos < OBJECT {
        let b = cache
            .read("segment", OBJECT, pos..pos + READ, ReaderId(1))
            .await
            .unwrap();
        out[..b.len()].copy_from_slice(&b);
        sum = sum.wrapping_add(u64::from(out[b.len() - 1]));
        pos += READ;
    }
    sum
}

fn cold(c: &mut Criterion) {
    let rt = runtime();
    let data = object();
    let source = Arc::new(SimSource { data: data.clone() });
    let mut group = c.benchmark_group("cold_256MiB");
    group.throughput(Throughput::Bytes(OBJECT));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));

    group.bench_function("direct_sequential_8MiB_gets", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let mut pos = 0;
                    while pos < OBJECT {
                        let bytes = source
                            .read_range("segment", pos..pos + CHUNK)
                            .await
                            .unwrap();
                        std::hint::black_box(bytes);
                        pos += CHUNK;
                    }
                    total += start.elapsed();
                }
                total
            })
        })
    });

    for (name, readahead) in [("cache_readahead_off", 0), ("cache_readahead_4", 4)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut out = vec![0u8; READ as usize];
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let cache = ChunkCache::new(memory_config(readahead), source.clone())
                            .await
                            .unwrap();
                        let start = Instant::now();
                        std::hint::black_box(read_all(&cache, &mut out).await);
                        total += start.elapsed();
                    }
                    total
                })
            })
        });
    }
    group.finish();
}

fn warm(c: &mut Criterion) {
    let rt = runtime();
    let data = object();
    let source = Arc::new(SimSource { data: data.clone() });
    let mut group = c.benchmark_group("warm_256MiB");
    group.throughput(Throughput::Bytes(OBJECT));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));

    group.bench_function("memcpy_baseline", |b| {
        let mut out = vec![0u8; READ as usize];
        b.iter(|| {
            let mut sum = 0u64;
            for piece in data.chunks(READ as usize) {
                out.copy_from_slice(piece);
                sum = sum.wrapping_add(u64::from(out[piece.len() - 1]));
            }
            std::hint::black_box(sum)
        })
    });

    let cache = rt.block_on(async {
        let cache = ChunkCache::new(memory_config(4), source.clone())
            .await
            .unwrap();
        let mut out = vec![0u8; READ as usize];
        read_all(&cache, &mut out).await;
        cache
    });
    group.bench_function("cache_memory", |b| {
        let mut out = vec![0u8; READ as usize];
        b.iter(|| rt.block_on(read_all(&cache, &mut out)))
    });
    rt.block_on(cache.close()).unwrap();

    // Disk tier: memory holds 64 MiB of the 256 MiB object.
    let dir = tempfile::tempdir().unwrap();
    let disk_cache = rt.block_on(async {
        let config = CacheConfig {
            memory_capacity: 64 * MIB,
            disk: Some(DiskConfig {
                dir: dir.path().to_path_buf(),
                capacity: 2048 * MIB,
                recover: false,
            }),
            ..memory_config(4)
        };
        let cache = ChunkCache::new(config, source.clone()).await.unwrap();
        let mut pos = 0;
        while pos < OBJECT {
            cache
                .read("segment", OBJECT, pos..pos + CHUNK, ReaderId::NONE)
                .await
                .unwrap();
            cache.wait_disk_writes().await;
            pos += CHUNK;
        }
        cache
    });
    group.sample_size(10);
    group.bench_function("cache_disk_tier", |b| {
        let mut out = vec![0u8; READ as usize];
        b.iter(|| rt.block_on(read_all(&disk_cache, &mut out)))
    });
    let stats = disk_cache.stats();
    eprintln!(
        "disk tier run: source_reads={} disk_hits={} memory_hits={} readahead_hits={} misses={}",
        stats.source_reads, stats.disk_hits, stats.memory_hits, stats.readahead_hits, stats.misses
    );
    rt.block_on(disk_cache.close()).unwrap();
    group.finish();
}

criterion_group!(benches, cold, warm);
criterion_main!(benches);
