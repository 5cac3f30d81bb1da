//! The disk tier: chunks evicted from memory are re-read from disk, and a cache
//! reopened over the same directory finds them again.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use strata_cache::{CacheError, ReaderId};

const DISK: u64 = 256 * MIB;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_evicted_from_memory_come_back_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let source = MemSource::new();
    let chunks = 12;
    let size = chunks * CS - 333;
    let data = source.add_random("seg", size, 30);
    // Memory holds 2 chunks; disk holds all 12.
    let cache = open(disk_config(2, DISK, dir.path()), &source).await;
    for c in 0..chunks {
        let range = c * CS..((c + 1) * CS).min(size);
        let got = cache
            .read("seg", size, range.clone(), ReaderId::NONE)
            .await
            .unwrap();
        assert_eq!(got, data.slice(range.start as usize..range.end as usize));
        // Evictions hand chunks to foyer's flusher; let it write them, so the
        // test does not depend on its queue bound.
        cache.wait_disk_writes().await;
    }
    assert_eq!(source.calls(), chunks);
    let before = cache.stats();
    assert!(before.disk_write_bytes >= (chunks - 2) * CS, "{before:?}");

    let got = cache
        .read("seg", size, 0..size, ReaderId::NONE)
        .await
        .unwrap();
    assert_eq!(got, data);
    assert_eq!(source.calls(), chunks, "re-read served without the source");
    let after = cache.stats();
    assert!(
        after.disk_hits - before.disk_hits >= chunks - 2,
        "most chunks came from disk: {after:?}"
    );
    cache.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_reader_reads_ahead_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let source = MemSource::new();
    let chunks = 12;
    let size = chunks * CS;
    let data = source.add_random("seg", size, 34);
    let cache = open(disk_config(2, DISK, dir.path()), &source).await;
    for c in 0..chunks {
        cache
            .read("seg", size, c * CS..c * CS + 1, ReaderId::NONE)
            .await
            .unwrap();
        cache.wait_disk_writes().await;
    }
    let warm = cache.stats();
    // A consumer catching up over chunks that are on disk (memory holds 2).
    let mut pos = 0;
    while pos < size {
        let got = cache
            .read("seg", size, pos..pos + MIB, ReaderId(5))
            .await
            .unwrap();
        assert_eq!(got, data.slice(pos as usize..(pos + MIB) as usize));
        pos += MIB;
    }
    settle(&cache).await;
    let stats = cache.stats();
    assert_eq!(source.calls(), chunks, "no source read: {stats:?}");
    assert_eq!(stats.misses, warm.misses, "{stats:?}");
    assert!(stats.readahead_issued > 0, "{stats:?}");
    cache.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopened_cache_recovers_the_disk_tier() {
    let dir = tempfile::tempdir().unwrap();
    let chunks = 10;
    let size = chunks * CS;
    let first = MemSource::new();
    let data = first.add_random("seg", size, 31);
    {
        let cache = open(disk_config(4, DISK, dir.path()), &first).await;
        for c in 0..chunks {
            cache
                .read("seg", size, c * CS..c * CS + 10, ReaderId::NONE)
                .await
                .unwrap();
            cache.wait_disk_writes().await;
        }
        // close() also flushes what is still in memory.
        cache.close().await.unwrap();
    }
    // A new process: empty memory, a source that counts from zero.
    let second = MemSource::new();
    second.add("seg", data.clone());
    let cache = open(disk_config(4, DISK, dir.path()), &second).await;
    let got = cache
        .read("seg", size, 0..size, ReaderId::NONE)
        .await
        .unwrap();
    assert_eq!(got, data);
    assert_eq!(second.calls(), 0, "every chunk recovered from disk");
    assert_eq!(cache.stats().disk_hits, chunks);
    cache.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let size = 3 * CS;
    let source = MemSource::new();
    source.add_random("seg", size, 32);
    let cache = open(disk_config(4, DISK, dir.path()), &source).await;
    cache
        .read("seg", size, 0..size, ReaderId::NONE)
        .await
        .unwrap();
    cache.close().await.unwrap();
    drop(cache);

    let mut config = disk_config(4, DISK, dir.path());
    if let Some(disk) = config.disk.as_mut() {
        disk.recover = false;
    }
    let cache = open(config, &source).await;
    cache
        .read("seg", size, 0..size, ReaderId::NONE)
        .await
        .unwrap();
    assert_eq!(source.calls(), 6, "nothing recovered");
    cache.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_chunk_size_never_serves_old_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let size = 4 * CS;
    let source = MemSource::new();
    let data = source.add_random("seg", size, 33);
    let cache = open(disk_config(4, 2 * DISK, dir.path()), &source).await;
    cache
        .read("seg", size, 0..size, ReaderId::NONE)
        .await
        .unwrap();
    cache.close().await.unwrap();
    drop(cache);

    let mut config = disk_config(4, 2 * DISK, dir.path());
    config.chunk_size = 2 * CS;
    config.memory_capacity = 4 * 2 * CS;
    let cache = open(config, &source).await;
    let got = cache
        .read("seg", size, 0..size, ReaderId::NONE)
        .await
        .unwrap();
    assert_eq!(got, data);
    cache.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cache_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let source = MemSource::new();
    let cache = open(disk_config(4, DISK, dir.path()), &source).await;
    let err = strata_cache::ChunkCache::new(disk_config(4, DISK, dir.path()), source.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, CacheError::Open { .. }), "{err}");
    // close() releases the directory.
    cache.close().await.unwrap();
    let again = open(disk_config(4, DISK, dir.path()), &source).await;
    again.close().await.unwrap();
}
