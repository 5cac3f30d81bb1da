//! The metrics wrapper records requests, bytes, errors and latency by operation. Its own
//! test binary, because it installs the process-wide metrics recorder.

use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use strata_store::{
    BlobStore, ErrorKind, FaultStore, MeteredStore, ObjectBackend, PutMode, RetryConfig, RetryStore,
};

type Snap = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn counter(snapshot: &Snap, name: &str, labels: &[(&str, &str)]) -> u64 {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    want.sort();
    snapshot
        .iter()
        .filter(|(key, _, _, _)| key.key().name() == name)
        .filter(|(key, _, _, _)| {
            let mut got: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            got.sort();
            got == want
        })
        .map(|(_, _, _, v)| match v {
            DebugValue::Counter(n) => *n,
            DebugValue::Histogram(h) => h.len() as u64,
            DebugValue::Gauge(_) => 0,
        })
        .sum()
}

#[tokio::test]
async fn metered_store_counts_requests_bytes_errors_retries_and_latency() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this test binary");
    strata_store::describe_metrics();

    let faults = FaultStore::new(ObjectBackend::memory().into_dyn());
    let handle = faults.handle();
    let retry = RetryStore::new(
        Arc::new(faults),
        RetryConfig {
            initial_backoff: Duration::from_millis(1),
            seed: Some(3),
            ..RetryConfig::default()
        },
    );
    let store: Arc<dyn BlobStore> = Arc::new(MeteredStore::new(Arc::new(retry)));

    store
        .put("a", vec![0u8; 1000].into(), PutMode::Create)
        .await
        .unwrap();
    handle.fail_next(2, ErrorKind::Throttled);
    assert_eq!(store.get_range("a", 10..110).await.unwrap().len(), 100);
    assert_eq!(
        store.get("missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );

    // One snapshot: taking it drains the recorder.
    let snap: Snap = snapshotter.snapshot().into_vec();
    let s = &snap;
    assert_eq!(
        counter(
            s,
            "strata_store_requests_total",
            &[("op", "put"), ("outcome", "ok")]
        ),
        1
    );
    assert_eq!(
        counter(
            s,
            "strata_store_requests_total",
            &[("op", "get_range"), ("outcome", "ok")]
        ),
        1
    );
    assert_eq!(
        counter(
            s,
            "strata_store_requests_total",
            &[("op", "get"), ("outcome", "not_found")]
        ),
        1
    );
    assert_eq!(
        counter(
            s,
            "strata_store_errors_total",
            &[("op", "get"), ("kind", "not_found")]
        ),
        1
    );
    assert_eq!(
        counter(
            s,
            "strata_store_bytes_total",
            &[("op", "put"), ("direction", "out")]
        ),
        1000
    );
    assert_eq!(
        counter(
            s,
            "strata_store_bytes_total",
            &[("op", "get_range"), ("direction", "in")]
        ),
        100
    );
    assert_eq!(
        counter(
            s,
            "strata_store_retries_total",
            &[("op", "get_range"), ("kind", "throttled")]
        ),
        2
    );
    assert_eq!(
        counter(s, "strata_store_request_seconds", &[("op", "put")]),
        1,
        "one latency sample"
    );
}
