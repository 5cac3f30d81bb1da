//! Byte-for-byte correctness of reads through the cache.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use rand::{SeedableRng, rngs::StdRng};
use strata_cache::{CacheError, ReaderId};

#[tokio::test]
async fn random_ranges_match_the_source() {
    let source = MemSource::new();
    // 5 full chunks and a short last one.
    let size = 5 * CS + 123_457;
    let data = source.add_random("obj", size, 1);
    let cache = open(memory_config(4), &source).await;
    let mut rng = StdRng::seed_from_u64(2);
    for i in 0..300 {
        let range = random_range(&mut rng, size);
        let reader = ReaderId(i % 3);
        let got = cache
            .read("obj", size, range.clone(), reader)
            .await
            .unwrap();
        assert_eq!(
            got,
            data.slice(range.start as usize..range.end as usize),
            "range {range:?}"
        );
    }
}

#[tokio::test]
async fn edge_ranges() {
    let source = MemSource::new();
    let size = 3 * CS + 10;
    let data = source.add_random("obj", size, 3);
    let cache = open(memory_config(8), &source).await;
    let slice = |r: std::ops::Range<u64>| data.slice(r.start as usize..r.end as usize);
    let cases = [
        0..size,            // whole object, spans all chunks
        CS - 1..CS + 1,     // two bytes across a boundary
        CS..2 * CS,         // exactly one chunk
        3 * CS..size,       // exactly the short last chunk
        size - 1..size,     // last byte
        0..1,               // first byte
        CS - 5..3 * CS + 5, // spans four chunks, into the short one
    ];
    for range in cases {
        let got = cache
            .read("obj", size, range.clone(), ReaderId::NONE)
            .await
            .unwrap();
        assert_eq!(got, slice(range.clone()), "range {range:?}");
    }
}

#[tokio::test]
async fn empty_range_reads_nothing() {
    let source = MemSource::new();
    let size = CS + 1;
    source.add_random("obj", size, 4);
    let cache = open(memory_config(4), &source).await;
    for at in [0, 7, CS, size] {
        let got = cache.read("obj", size, at..at, ReaderId(1)).await.unwrap();
        assert!(got.is_empty());
    }
    assert_eq!(source.calls(), 0);
}

#[tokio::test]
#[allow(clippy::reversed_empty_ranges)]
async fn out_of_range_is_an_error() {
    let source = MemSource::new();
    let size = CS + 1;
    source.add_random("obj", size, 5);
    let cache = open(memory_config(4), &source).await;
    for range in [0..size + 1, size..size + 1, size + 5..size + 9, 10..5] {
        let err = cache
            .read("obj", size, range.clone(), ReaderId(1))
            .await
            .unwrap_err();
        assert!(
            matches!(err, CacheError::OutOfRange { .. }),
            "{range:?}: {err}"
        );
        assert!(!err.is_retriable());
    }
    assert_eq!(source.calls(), 0);
}

#[tokio::test]
async fn single_chunk_reads_are_zero_copy() {
    let source = MemSource::new();
    let size = 2 * CS;
    source.add_random("obj", size, 6);
    let cache = open(memory_config(4), &source).await;
    let a = cache
        .read("obj", size, 100..200, ReaderId::NONE)
        .await
        .unwrap();
    let b = cache
        .read("obj", size, 150..300, ReaderId::NONE)
        .await
        .unwrap();
    // Both are slices of the same cached chunk buffer.
    assert_eq!(unsafe_free_offset(&a, &b), 50);
    assert_eq!(source.calls(), 1);
}

/// `b`'s start minus `a`'s start in memory (both slices of one buffer).
fn unsafe_free_offset(a: &bytes::Bytes, b: &bytes::Bytes) -> isize {
    (b.as_ptr() as isize) - (a.as_ptr() as isize)
}

#[tokio::test]
async fn caller_size_mismatch_is_detected() {
    let source = MemSource::new();
    let size = CS + 100;
    source.add_random("obj", size, 7);
    let cache = open(memory_config(4), &source).await;
    cache
        .read("obj", size, CS..CS + 10, ReaderId::NONE)
        .await
        .unwrap();
    // Same object, claimed larger: the cached last chunk is too short for it.
    let err = cache
        .read("obj", size + 50, CS..CS + 10, ReaderId::NONE)
        .await
        .unwrap_err();
    assert!(matches!(err, CacheError::SizeMismatch { .. }), "{err}");
}

#[tokio::test]
async fn invalid_configs_are_refused() {
    let source = MemSource::new();
    let mut config = memory_config(4);
    config.chunk_size = 1024 * 1024;
    let err = strata_cache::ChunkCache::new(config, source.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, CacheError::Config(_)), "{err}");
    let mut config = memory_config(4);
    config.memory_capacity = CS;
    assert!(strata_cache::ChunkCache::new(config, source).await.is_err());
}
