//! Admission and eviction: one big sequential scan must not flush the chunks
//! that other readers keep re-reading.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use strata_cache::{CacheConfig, EvictionPolicy, ReaderId};

/// Hot chunks read twice by two readers, then a one-pass scan 3x the memory
/// tier by a third reader, then the hot chunks again. Returns the source reads
/// of the hot object (8 = the hot set survived, 16 = it was flushed).
async fn hot_set_source_reads_after_scan(eviction: EvictionPolicy) -> u64 {
    let source = MemSource::new();
    let hot_chunks = 8;
    let hot_size = hot_chunks * CS;
    let hot = source.add_random("hot", hot_size, 40);
    let memory_chunks = 40;
    let scan_chunks = 3 * memory_chunks;
    let scan_size = scan_chunks * CS;
    source.add_random("scan", scan_size, 41);
    let cache = open(
        CacheConfig {
            eviction,
            ..memory_config(memory_chunks)
        },
        &source,
    )
    .await;

    // Two consumer groups read the hot object (interleaved, as they would).
    for c in 0..hot_chunks {
        for reader in [ReaderId(1), ReaderId(2)] {
            let range = c * CS..c * CS + MIB;
            let got = cache
                .read("hot", hot_size, range.clone(), reader)
                .await
                .unwrap();
            assert_eq!(got, hot.slice(range.start as usize..range.end as usize));
        }
    }
    settle(&cache).await;
    assert_eq!(source.calls_for_key("hot"), hot_chunks);

    // One catch-up consumer scans a big segment in 1 MiB reads, with read-ahead.
    let mut pos = 0;
    while pos < scan_size {
        cache
            .read("scan", scan_size, pos..pos + MIB, ReaderId(3))
            .await
            .unwrap();
        pos += MIB;
    }
    settle(&cache).await;
    assert_eq!(
        source.calls_for_key("scan"),
        scan_chunks,
        "scan read each chunk once"
    );

    for c in 0..hot_chunks {
        let range = c * CS..c * CS + MIB;
        let got = cache
            .read("hot", hot_size, range.clone(), ReaderId(4))
            .await
            .unwrap();
        assert_eq!(got, hot.slice(range.start as usize..range.end as usize));
    }
    source.calls_for_key("hot")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_does_not_flush_reused_chunks() {
    assert_eq!(
        hot_set_source_reads_after_scan(EvictionPolicy::S3Fifo).await,
        8,
        "S3-FIFO keeps the re-read chunks through the scan"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lru_control_is_flushed_by_the_scan() {
    // The control: the same workload under LRU loses the hot set, which shows
    // the test above measures something.
    assert_eq!(
        hot_set_source_reads_after_scan(EvictionPolicy::Lru).await,
        16
    );
}
