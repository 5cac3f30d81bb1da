//! Concurrent misses for one chunk share one source read; failures reach every
//! waiter and are not cached.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use futures::future::join_all;
use strata_cache::{CacheError, ReaderId, SourceError, SourceErrorKind};

async fn wait_for_calls(source: &MemSource, n: u64) {
    for _ in 0..5_000 {
        if source.calls() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("source saw {} calls, expected {n}", source.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_share_one_source_read() {
    let source = MemSource::new();
    let size = 3 * CS;
    let data = source.add_random("obj", size, 10);
    let cache = open(memory_config(8), &source).await;

    source.pause();
    let readers = (0..32u64).map(|i| {
        let cache = cache.clone();
        // Different sub-ranges of chunk 1, different readers.
        let range = CS + i * 1000..CS + i * 1000 + 5000;
        tokio::spawn(async move {
            (
                range.clone(),
                cache.read("obj", size, range, ReaderId(i)).await,
            )
        })
    });
    let handles: Vec<_> = readers.collect();
    // The leader's read is at the source; give every other reader time to join it.
    wait_for_calls(&source, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    source.resume();
    for handle in join_all(handles).await {
        let (range, got) = handle.unwrap();
        assert_eq!(
            got.unwrap(),
            data.slice(range.start as usize..range.end as usize)
        );
    }
    assert_eq!(
        source.calls(),
        1,
        "one source read for 32 concurrent misses"
    );
    let stats = cache.stats();
    assert_eq!(stats.misses, 32, "all 32 waited on the source: {stats:?}");
    assert_eq!(stats.source_reads, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_reaches_every_waiter_and_is_not_cached() {
    let source = MemSource::new();
    let size = 2 * CS;
    let data = source.add_random("obj", size, 11);
    let cache = open(memory_config(8), &source).await;

    source.inject(Fault::Fail(SourceError::transient("503 SlowDown")));
    source.pause();
    let handles: Vec<_> = (0..8u64)
        .map(|i| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.read("obj", size, i..i + 10, ReaderId::NONE).await })
        })
        .collect();
    wait_for_calls(&source, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    source.resume();
    for handle in join_all(handles).await {
        let err = handle.unwrap().unwrap_err();
        match &err {
            CacheError::Source { chunk, source, .. } => {
                assert_eq!(*chunk, 0);
                assert_eq!(source.kind(), SourceErrorKind::Transient);
                assert_eq!(source.message(), "503 SlowDown");
            }
            other => panic!("unexpected error {other}"),
        }
        assert!(err.is_retriable());
    }
    assert_eq!(source.calls(), 1);

    // Not cached: the next read goes to the source again and succeeds.
    let got = cache
        .read("obj", size, 0..10, ReaderId::NONE)
        .await
        .unwrap();
    assert_eq!(got, data.slice(0..10));
    assert_eq!(source.calls(), 2);
    assert_eq!(cache.stats().source_errors, 1);
}

#[tokio::test]
async fn permanent_errors_are_not_retriable() {
    let source = MemSource::new();
    let cache = open(memory_config(4), &source).await;
    let err = cache
        .read("missing", CS, 0..10, ReaderId::NONE)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CacheError::Source { source, .. } if source.kind() == SourceErrorKind::NotFound),
        "{err}"
    );
    assert!(!err.is_retriable());
}

#[tokio::test]
async fn wrong_length_is_an_error_never_a_short_chunk() {
    let source = MemSource::new();
    let size = 2 * CS + 77;
    let data = source.add_random("obj", size, 12);
    let cache = open(memory_config(8), &source).await;

    for fault in [
        Fault::Truncate(1),
        Fault::Truncate(CS as usize),
        Fault::Extend,
    ] {
        source.inject(fault.clone());
        let err = cache
            .read("obj", size, CS + 5..CS + 50, ReaderId::NONE)
            .await
            .unwrap_err();
        assert!(
            matches!(err, CacheError::WrongLength { chunk: 1, expected, .. } if expected == CS),
            "{fault:?}: {err}"
        );
        assert!(err.is_retriable());
    }
    // The short last chunk too.
    source.inject(Fault::Truncate(10));
    let err = cache
        .read("obj", size, size - 5..size, ReaderId::NONE)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CacheError::WrongLength {
                chunk: 2,
                expected: 77,
                actual: 67,
                ..
            }
        ),
        "{err}"
    );

    // Nothing bad was cached: correct bytes now.
    let calls = source.calls();
    let got = cache
        .read("obj", size, 0..size, ReaderId::NONE)
        .await
        .unwrap();
    assert_eq!(got, data);
    assert_eq!(source.calls(), calls + 3, "all three chunks read afresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_reader_does_not_cancel_the_shared_read() {
    let source = MemSource::new();
    let size = CS;
    let data = source.add_random("obj", size, 13);
    let cache = open(memory_config(4), &source).await;
    source.pause();
    let first = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.read("obj", size, 0..10, ReaderId::NONE).await })
    };
    wait_for_calls(&source, 1).await;
    first.abort();
    let second = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.read("obj", size, 10..20, ReaderId::NONE).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    source.resume();
    assert_eq!(second.await.unwrap().unwrap(), data.slice(10..20));
    assert_eq!(source.calls(), 1);
}
