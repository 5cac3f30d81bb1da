//! Read-ahead: sequential readers find their next chunks already fetched;
//! random readers trigger none; many readers stay within the global bounds.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use futures::future::join_all;
use strata_cache::{CacheConfig, ReaderId};

const READ: u64 = MIB;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_reader_finds_next_chunks_prefetched() {
    let source = MemSource::new();
    let chunks = 12;
    let size = chunks * CS - 1000; // short last chunk
    let data = source.add_random("seg", size, 20);
    let cache = open(memory_config(32), &source).await;

    let mut pos = 0;
    while pos < size {
        let end = (pos + READ).min(size);
        let got = cache
            .read("seg", size, pos..end, ReaderId(7))
            .await
            .unwrap();
        assert_eq!(got, data.slice(pos as usize..end as usize));
        pos = end;
        // Deterministic: let the prefetches started by this read land before
        // the next read (a real consumer is slower than the source here).
        settle(&cache).await;
    }
    let stats = cache.stats();
    // Chunk 0 is the only cold read; every later chunk was prefetched and handed over.
    assert_eq!(stats.misses, 1, "{stats:?}");
    assert_eq!(stats.readahead_hits, chunks - 1, "{stats:?}");
    assert_eq!(stats.readahead_issued, chunks - 1, "{stats:?}");
    // Every chunk was read from the source exactly once.
    assert_eq!(source.calls(), chunks);
    for c in 0..chunks {
        assert_eq!(source.calls_for("seg", c * CS), 1, "chunk {c}");
    }
    // One lookup per read (1 MiB reads never span 4 MiB chunks); reads within a
    // chunk were served from the chunk the reader holds.
    assert_eq!(stats.hits + stats.misses, size.div_ceil(READ), "{stats:?}");
    assert_eq!(stats.memory_hits, size.div_ceil(READ) - chunks, "{stats:?}");
    assert!(stats.hit_ratio() > 0.95, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_hides_source_latency() {
    // With 20 ms per GET, a sequential reader waits on the first chunk only:
    // later chunks arrive while it reads the previous ones.
    let source = MemSource::new();
    let chunks = 8;
    let size = chunks * CS;
    source.add_random("seg", size, 21);
    source.set_latency(Duration::from_millis(20), 0);
    let cache = open(memory_config(32), &source).await;
    let mut pos = 0;
    while pos < size {
        cache
            .read("seg", size, pos..pos + READ, ReaderId(1))
            .await
            .unwrap();
        pos += READ;
        // The consumer spends some time on each fetch (sending it to the client).
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = cache.stats();
    assert_eq!(source.calls(), chunks, "{stats:?}");
    // Misses are chunk 0 and at most the chunk whose prefetch was still in
    // flight when the reader got there; nothing is read twice.
    assert!(stats.misses <= 2, "{stats:?}");
    assert!(stats.readahead_hits >= chunks - 2, "{stats:?}");
}

#[tokio::test]
async fn random_reader_gets_no_read_ahead() {
    let source = MemSource::new();
    let chunks = 40;
    let size = chunks * CS;
    let data = source.add_random("seg", size, 22);
    let cache = open(memory_config(64), &source).await;
    // Jumps of at least 3 chunks, forwards and backwards.
    let order = [20u64, 5, 33, 9, 27, 1, 38, 14, 30, 17, 3, 24, 11, 36, 0];
    for (i, c) in order.iter().enumerate() {
        let start = c * CS + (i as u64) * 4096;
        let got = cache
            .read("seg", size, start..start + READ, ReaderId(9))
            .await
            .unwrap();
        assert_eq!(got, data.slice(start as usize..(start + READ) as usize));
    }
    settle(&cache).await;
    let stats = cache.stats();
    assert_eq!(stats.readahead_issued, 0, "{stats:?}");
    assert_eq!(source.calls(), order.len() as u64, "only the chunks read");
}

#[tokio::test]
async fn read_ahead_can_be_disabled() {
    let source = MemSource::new();
    let size = 6 * CS;
    source.add_random("seg", size, 23);
    let cache = open(
        CacheConfig {
            readahead_chunks: 0,
            ..memory_config(16)
        },
        &source,
    )
    .await;
    for pos in (0..size).step_by(READ as usize) {
        cache
            .read("seg", size, pos..pos + READ, ReaderId(1))
            .await
            .unwrap();
    }
    let stats = cache.stats();
    assert_eq!(stats.readahead_issued, 0);
    assert_eq!(stats.misses, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_catch_up_readers_stay_within_global_bounds() {
    // 12 readers each scan their own object; the global bounds (4 prefetches in
    // flight, a budget of 8 chunks) hold however many readers there are, and
    // every reader still reads correct bytes.
    let source = MemSource::new();
    let chunks = 6;
    let size = chunks * CS;
    let objects: Vec<_> = (0..12u64)
        .map(|i| {
            let key = format!("seg-{i}");
            let data = source.add_random(&key, size, 100 + i);
            (key, data)
        })
        .collect();
    source.set_latency(Duration::from_millis(5), 0);
    let config = CacheConfig {
        readahead_chunks: 4,
        max_inflight_prefetches: 4,
        readahead_budget_bytes: 8 * CS,
        ..memory_config(128)
    };
    let cache = open(config, &source).await;
    let tasks = objects.into_iter().enumerate().map(|(i, (key, data))| {
        let cache = cache.clone();
        tokio::spawn(async move {
            let mut pos = 0;
            while pos < size {
                let got = cache
                    .read(&key, size, pos..pos + READ, ReaderId(i as u64))
                    .await
                    .unwrap();
                assert_eq!(got, data.slice(pos as usize..(pos + READ) as usize));
                let s = cache.stats();
                assert!(s.readahead_inflight <= 4, "{s:?}");
                assert!(s.readahead_inflight + s.readahead_held <= 8, "{s:?}");
                pos += READ;
            }
        })
    });
    for t in join_all(tasks).await {
        t.unwrap();
    }
    settle(&cache).await;
    let stats = cache.stats();
    // Demand reads (at most 12) plus prefetches (at most 4) at once.
    assert!(source.max_in_flight() <= 16, "{}", source.max_in_flight());
    // No chunk was read twice.
    assert_eq!(source.calls(), 12 * chunks, "{stats:?}");
    assert!(stats.readahead_issued > 0);
}
