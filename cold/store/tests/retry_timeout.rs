//! The retry and timeout wrappers on the in-memory backend, in tokio's paused (virtual)
//! time: deterministic, and no test waits for real backoffs.

use std::sync::Arc;
use std::time::Duration;

use strata_store::{
    BlobStore, CancellationToken, ErrorKind, Fault, FaultHandle, FaultStore, ObjectBackend, Op,
    PutMode, RetryConfig, RetryStore, TimeoutConfig, TimeoutStore,
};
use tokio::time::Instant;

fn faulty() -> (Arc<dyn BlobStore>, FaultHandle) {
    let faults = FaultStore::new(ObjectBackend::memory().into_dyn());
    let handle = faults.handle();
    (Arc::new(faults), handle)
}

fn config(seed: u64) -> RetryConfig {
    RetryConfig {
        max_attempts: 6,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(2),
        max_elapsed: Duration::from_secs(30),
        seed: Some(seed),
    }
}

#[tokio::test(start_paused = true)]
async fn retries_stop_after_max_attempts() {
    let (inner, handle) = faulty();
    let store = RetryStore::new(inner, config(1));
    handle.fail_next(100, ErrorKind::Transient);
    assert_eq!(
        store.head("k").await.unwrap_err().kind(),
        ErrorKind::Transient
    );
    assert_eq!(handle.calls(Op::Head), 6);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_within_max_elapsed() {
    let (inner, handle) = faulty();
    let store = RetryStore::new(
        inner,
        RetryConfig {
            max_attempts: 1000,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(4),
            max_elapsed: Duration::from_secs(20),
            seed: Some(2),
        },
    );
    handle.fail_next(10_000, ErrorKind::Throttled);
    let start = Instant::now();
    assert_eq!(
        store.get("k").await.unwrap_err().kind(),
        ErrorKind::Throttled
    );
    assert!(
        start.elapsed() <= Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert!(
        handle.calls(Op::Get) > 5,
        "it did retry: {}",
        handle.calls(Op::Get)
    );
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_backoff_schedule() {
    let mut schedules = vec![];
    for seed in [9, 9, 10] {
        let (inner, handle) = faulty();
        let store = RetryStore::new(inner, config(seed));
        handle.fail_next(5, ErrorKind::Throttled);
        let start = Instant::now();
        store
            .put("k", "v".into(), PutMode::Overwrite)
            .await
            .unwrap();
        schedules.push(start.elapsed());
    }
    assert_eq!(schedules[0], schedules[1]);
    assert_ne!(schedules[0], schedules[2]);
}

#[tokio::test(start_paused = true)]
async fn only_throttled_transient_and_timeout_are_retried() {
    use ErrorKind::*;
    for kind in [
        NotFound,
        AlreadyExists,
        PreconditionFailed,
        Unsupported,
        InvalidInput,
        Cancelled,
        Permanent,
    ] {
        let (inner, handle) = faulty();
        let store = RetryStore::new(inner, config(3));
        handle.fail_next(1, kind);
        assert_eq!(store.head("k").await.unwrap_err().kind(), kind);
        assert_eq!(handle.calls(Op::Head), 1, "{kind:?} was retried");
    }
    for kind in [Throttled, Transient, Timeout] {
        let (inner, handle) = faulty();
        inner
            .put("k", "v".into(), PutMode::Overwrite)
            .await
            .unwrap();
        let store = RetryStore::new(inner, config(3));
        handle.fail_next(1, kind);
        store.head("k").await.unwrap();
        assert_eq!(handle.calls(Op::Head), 2, "{kind:?} was not retried");
    }
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_backoff_is_cancelled() {
    let (inner, handle) = faulty();
    let token = CancellationToken::new();
    let store = Arc::new(
        RetryStore::new(
            inner,
            RetryConfig {
                initial_backoff: Duration::from_secs(10),
                max_backoff: Duration::from_secs(10),
                ..config(4)
            },
        )
        .with_cancellation(token.clone()),
    );
    handle.fail_next(100, ErrorKind::Throttled);
    let call = tokio::spawn({
        let store = store.clone();
        async move { store.get("k").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    token.cancel();
    assert_eq!(
        call.await.unwrap().unwrap_err().kind(),
        ErrorKind::Cancelled
    );
}

#[tokio::test(start_paused = true)]
async fn deadlines_scale_with_the_payload() {
    let (inner, handle) = faulty();
    let config = TimeoutConfig {
        transfer_base: Duration::from_secs(1),
        min_throughput: 1024 * 1024,
        head: Duration::from_millis(300),
        ..TimeoutConfig::default()
    };
    let store = TimeoutStore::new(inner, config.clone());
    // Every call takes 2.5 s.
    handle.delay(None, Duration::from_millis(2500));
    let start = Instant::now();
    assert_eq!(
        store.head("k").await.unwrap_err().kind(),
        ErrorKind::Timeout
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(300),
        "a HEAD gets its own deadline"
    );
    // 1 s + 4 MiB at 1 MiB/s = 5 s: a 4 MiB put has time; a 1 KiB put does not.
    store
        .put("big", vec![0u8; 4 << 20].into(), PutMode::Overwrite)
        .await
        .unwrap();
    let start = Instant::now();
    assert_eq!(
        store
            .put("small", vec![0u8; 1024].into(), PutMode::Overwrite)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Timeout
    );
    assert!(start.elapsed() < Duration::from_millis(1100));
    assert_eq!(config.for_transfer(4 << 20), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn path_prefix_and_op_filters_pick_the_calls_that_fail() {
    let (inner, handle) = faulty();
    handle.inject(
        Fault::new(ErrorKind::Permanent)
            .op(Op::Put)
            .prefix("manifests/")
            .times(2),
    );
    inner
        .put("segments/a", "x".into(), PutMode::Overwrite)
        .await
        .unwrap();
    assert!(
        inner
            .put("manifests/1", "x".into(), PutMode::Overwrite)
            .await
            .is_err()
    );
    inner.get("segments/a").await.unwrap();
    assert!(
        inner
            .put("manifests/2", "x".into(), PutMode::Overwrite)
            .await
            .is_err()
    );
    inner
        .put("manifests/3", "x".into(), PutMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(handle.injected(), 2);
    assert_eq!(handle.pending(), 0);
}
