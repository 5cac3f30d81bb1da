//! Tiered storage benchmarks.
//!
//! * `manifest/lookup_*`: offset and timestamp lookups in a manifest of 100,000 segments
//!   (target: well under 10 µs).
//! * `manifest/commit/{history}`: committing one more segment (a create-only delta put to
//!   an in-memory store, and applying it) after 1k, 10k and 100k commits: the cost must
//!   stay flat as the history grows. Every 256th commit also writes a snapshot, O(n);
//!   criterion's mean includes that amortised share, the median shows the common case.
//! * `catchup/*` (needs s3s-fs, installed by scripts/deps): reading 64 MiB of offloaded
//!   segments from offset 0 to the end in 1 MiB fetches, through a real S3 server on
//!   loopback: `hot` is the same reads from the local log (the baseline for `warm`),
//!   `raw_get` is plain sequential 8 MiB ranged GETs of the same objects through the
//!   store (the baseline for `cold`), `warm` is the tier with a cache already holding
//!   every chunk, `cold` the tier with an empty cache (read-ahead on). Ratios:
//!   warm/hot >= 0.8 and cold/raw_get >= 0.8 are the figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use strata_cache::{CacheConfig, ChunkCache, ReaderId};
use strata_log::{Log, LogConfig, SystemClock};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, TopicId};
use strata_store::{BlobStore, ObjectBackend};
use strata_tier::manifest::{Manifest, ManifestOp, RemoteSegment};
use strata_tier::{PartitionKey, RemotePartition, StoreSource, manifest_store};

const MIB: u64 = 1024 * 1024;

fn seg(i: u64) -> RemoteSegment {
    RemoteSegment {
        base_offset: (i * 1000) as i64,
        next_offset: (i * 1000 + 1000) as i64,
        size_bytes: 8 * MIB,
        max_timestamp: 1_600_000_000_000 + (i as i64) * 1000 + ((i * 7919) % 500) as i64,
        leader_epoch: 1,
        id: uuid::Uuid::from_u128(i as u128 + 1),
        has_producer_state: true,
        has_leader_epochs: false,
        has_txn_index: false,
        committed_at_ms: 0,
    }
}

fn key(c: &str) -> PartitionKey {
    PartitionKey {
        cluster_id: c.into(),
        topic: "bench".into(),
        topic_id: TopicId(uuid::Uuid::from_u128(1)),
        partition: 0,
    }
}

fn manifest_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("manifest");
    let mut m = Manifest::new();
    for i in 0..100_000 {
        m.apply(&ManifestOp::Add(seg(i))).expect("contiguous");
    }
    let mut x: u64 = 12345;
    g.bench_function("lookup_offset_100k", |b| {
        b.iter(|| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            std::hint::black_box(m.find_offset((x % 100_000_000) as i64));
        })
    });
    g.bench_function("lookup_timestamp_100k", |b| {
        b.iter(|| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            std::hint::black_box(m.find_timestamp(1_600_000_000_000 + (x % 100_000_000) as i64));
        })
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for history in [1_000u64, 10_000, 100_000] {
        let store: Arc<dyn BlobStore> = ObjectBackend::memory().into_dyn();
        let k = key(&format!("h{history}"));
        let mut m = Manifest::new();
        rt.block_on(async {
            for i in 0..history {
                manifest_store::commit(&store, &k, &mut m, vec![ManifestOp::Add(seg(i))])
                    .await
                    .expect("commit");
            }
        });
        let mut next = history;
        g.bench_with_input(BenchmarkId::new("commit", history), &history, |b, _| {
            b.iter(|| {
                rt.block_on(manifest_store::commit(
                    &store,
                    &k,
                    &mut m,
                    vec![ManifestOp::Add(seg(next))],
                ))
                .expect("commit");
                next += 1;
            })
        });
    }
    g.finish();
}

/// Reads [0, end) through `read`, 1 MiB at a time; returns bytes read.
async fn drain<F, Fut>(end: i64, mut read: F) -> u64
where
    F: FnMut(i64) -> Fut,
    Fut: std::future::Future<Output = (Bytes, i64)>,
{
    let mut offset = 0;
    let mut n = 0;
    while offset < end {
        let (data, next) = read(offset).await;
        n += data.len() as u64;
        offset = next;
    }
    n
}

fn catchup_benches(c: &mut Criterion) {
    let Ok(s3) = strata_store::testing::S3Server::start() else {
        eprintln!("catchup benches skipped: s3s-fs is not installed (scripts/deps installs it)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 16 * MIB,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(dir.path(), config, Arc::new(SystemClock)).expect("log");
    let value = Bytes::from(vec![7u8; 1024]);
    let recs: Vec<NewRecord> = (0..256)
        .map(|_| NewRecord::value(value.clone(), 1))
        .collect();
    let template = batch(&recs, Compression::None, None).to_vec();
    while log.size_bytes() < 64 * MIB + 16 * MIB {
        let mut b = template.clone();
        log.append(&mut b, 1).expect("append");
    }
    let store: Arc<dyn BlobStore> = s3.store("bench").expect("s3 store").into_dyn();
    let k = key("catchup");
    let new_cache = |store: Arc<dyn BlobStore>| async move {
        let config = CacheConfig {
            chunk_size: 8 * MIB,
            memory_capacity: 256 * MIB,
            disk: None,
            ..CacheConfig::default()
        };
        Arc::new(
            ChunkCache::new(config, Arc::new(StoreSource(store)))
                .await
                .expect("cache"),
        )
    };
    let remote = rt.block_on(async {
        let r = RemotePartition::open(k.clone(), store.clone(), new_cache(store.clone()).await)
            .await
            .expect("open");
        for s in log.segments().into_iter().filter(|s| s.sealed) {
            r.offload(&s, None, 1).await.expect("offload");
        }
        r
    });
    let end = remote.end_offset().expect("offloaded");
    let segments = remote.manifest_snapshot().segments().to_vec();
    let total: u64 = segments.iter().map(|s| s.size_bytes).sum();
    let mut g = c.benchmark_group("catchup");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Bytes(total));
    g.bench_function("hot", |b| {
        b.iter(|| {
            let mut offset = 0;
            while offset < end {
                let r = log.read(offset, MIB as usize, None).expect("read");
                offset = r.next_offset;
            }
        })
    });
    g.bench_function("raw_get", |b| {
        b.iter(|| {
            rt.block_on(async {
                for s in &segments {
                    let key = k.segment_object(s, "log");
                    let mut at = 0;
                    while at < s.size_bytes {
                        let to = (at + 8 * MIB).min(s.size_bytes);
                        std::hint::black_box(store.get_range(&key, at..to).await.expect("get"));
                        at = to;
                    }
                }
            })
        })
    });
    // Warm: one pass fills the cache, then every pass is served from memory.
    rt.block_on(drain(end, |o| {
        let r = &remote;
        async move {
            let x = r.read(o, MIB as usize, ReaderId(1)).await.expect("read");
            (x.data, x.next_offset)
        }
    }));
    g.bench_function("warm", |b| {
        b.iter(|| {
            rt.block_on(drain(end, |o| {
                let r = &remote;
                async move {
                    let x = r.read(o, MIB as usize, ReaderId(2)).await.expect("read");
                    (x.data, x.next_offset)
                }
            }))
        })
    });
    g.bench_function("cold", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let cold = rt.block_on(async {
                    RemotePartition::open(k.clone(), store.clone(), new_cache(store.clone()).await)
                        .await
                        .expect("open")
                });
                let t = Instant::now();
                rt.block_on(drain(end, |o| {
                    let r = &cold;
                    async move {
                        let x = r.read(o, MIB as usize, ReaderId(3)).await.expect("read");
                        (x.data, x.next_offset)
                    }
                }));
                spent += t.elapsed();
            }
            spent
        })
    });
    g.finish();
}

criterion_group!(benches, manifest_benches, catchup_benches);
criterion_main!(benches);
