//! The conformance suite against every backend: the local directory, memory, a real S3
//! server (s3s-fs on loopback), and the full wrapper stack over S3 with faults injected.

use std::sync::Arc;
use std::time::Duration;

use strata_store::testing::{self, Expect, S3Server};
use strata_store::{
    BlobStore, FaultStore, MeteredStore, ObjectBackend, RandomFaults, RetryConfig, RetryStore,
    TimeoutConfig, TimeoutStore,
};

fn s3_server() -> S3Server {
    S3Server::start().unwrap_or_else(|e| {
        panic!("cannot start s3s-fs ({e}); install it with scripts/deps (cargo install s3s-fs@0.14.1 --features binary --locked)")
    })
}

/// Files `{key}#{digits}`: local multipart staging files, which must not outlive an
/// upload.
fn local_staging_files(dir: &std::path::Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once('#'))
                .is_some_and(|(_, digits)| digits.bytes().all(|b| b.is_ascii_digit()))
            {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_directory_passes_the_suite() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let root = dir.path().join("cold");
    let store = ObjectBackend::local(&root)
        .unwrap()
        .with_upload_config(testing::small_parts())
        .unwrap()
        .into_dyn();
    testing::run_suite(store.clone(), scratch.path()).await;
    assert!(
        !testing::update_is_conditional(store.clone()).await,
        "the local filesystem has no compare-and-swap: Update must be Unsupported"
    );

    let faults = FaultStore::new(store);
    let handle = faults.handle();
    let root2 = root.clone();
    let pending = move || local_staging_files(&root2);
    testing::multipart_failure_leaves_nothing(
        Arc::new(faults),
        &handle,
        scratch.path(),
        Some(&pending),
    )
    .await;
    assert_eq!(local_staging_files(&root), 0, "no staging file left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_url_creates_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a/b/cold");
    let store = strata_store::open_url(&format!("file://{}", root.display()))
        .unwrap()
        .into_dyn();
    store
        .put("x/y", "z".into(), strata_store::PutMode::Create)
        .await
        .unwrap();
    assert_eq!(std::fs::read(root.join("x/y")).unwrap(), b"z");
    assert_eq!(store.to_string(), format!("file://{}", root.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_passes_the_suite() {
    let scratch = tempfile::tempdir().unwrap();
    let store = ObjectBackend::memory()
        .with_upload_config(testing::small_parts())
        .unwrap()
        .into_dyn();
    testing::run_suite(store.clone(), scratch.path()).await;
    assert!(
        testing::update_is_conditional(store.clone()).await,
        "memory supports Update"
    );
    let faults = FaultStore::new(store);
    let handle = faults.handle();
    testing::multipart_failure_leaves_nothing(Arc::new(faults), &handle, scratch.path(), None)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_server_passes_the_suite() {
    let server = s3_server();
    let scratch = tempfile::tempdir().unwrap();
    let store = server
        .store("cluster-a")
        .unwrap()
        .with_upload_config(testing::small_parts())
        .unwrap()
        .into_dyn();
    testing::run_suite_expecting(store.clone(), scratch.path(), Expect::S3S_FS).await;
    assert!(
        testing::update_is_conditional(store.clone()).await,
        "S3 supports If-Match"
    );

    let faults = FaultStore::new(store);
    let handle = faults.handle();
    let pending = || server.pending_multipart_uploads() + server.pending_parts();
    testing::multipart_failure_leaves_nothing(
        Arc::new(faults),
        &handle,
        scratch.path(),
        Some(&pending),
    )
    .await;
    assert_eq!(
        server.pending_multipart_uploads(),
        0,
        "no multipart upload left on the server"
    );
    assert_eq!(server.pending_parts(), 0, "no part left on the server");
}

/// s3s-fs checks `If-None-Match: *` before it writes and renames the file into place
/// after, so racing creators can all win; this pins that down so that a fixed server
/// version is noticed (and `Expect::S3S_FS` can go). Sequential Create is refused
/// correctly (the suite checks it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3s_fs_does_not_linearize_racing_creates() {
    let server = s3_server();
    let store = server.store("race").unwrap().into_dyn();
    let mut races_with_several_winners = 0;
    for round in 0..5 {
        let key = format!("manifest-{round}");
        let tasks: Vec<_> = (0..8u8)
            .map(|i| {
                let store = store.clone();
                let key = key.clone();
                tokio::spawn(async move {
                    store
                        .put(
                            &key,
                            vec![i; 256 * 1024].into(),
                            strata_store::PutMode::Create,
                        )
                        .await
                        .is_ok()
                })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap());
        }
        assert!(winners >= 1);
        if winners > 1 {
            races_with_several_winners += 1;
        }
    }
    eprintln!("s3s-fs: {races_with_several_winners} of 5 racing rounds had several Create winners");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_prefixes_isolate_stores_in_one_bucket() {
    let server = s3_server();
    let a = server.store("tenant-a/cold").unwrap().into_dyn();
    let b = server.store("tenant-b").unwrap().into_dyn();
    let root = server.store("").unwrap().into_dyn();
    a.put("k", "a".into(), strata_store::PutMode::Create)
        .await
        .unwrap();
    b.put("k", "b".into(), strata_store::PutMode::Create)
        .await
        .unwrap();
    assert_eq!(a.get("k").await.unwrap(), "a");
    assert_eq!(b.get("k").await.unwrap(), "b");
    let paths: Vec<String> = a
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.path)
        .collect();
    assert_eq!(
        paths,
        vec!["k".to_string()],
        "list is relative to the prefix"
    );
    let mut all: Vec<String> = root
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.path)
        .collect();
    all.sort();
    assert_eq!(
        all,
        vec!["tenant-a/cold/k".to_string(), "tenant-b/k".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_stack_over_s3_passes_the_suite_under_faults() {
    let server = s3_server();
    let scratch = tempfile::tempdir().unwrap();
    let s3 = server
        .store("stack")
        .unwrap()
        .with_upload_config(testing::small_parts())
        .unwrap()
        .into_dyn();
    let faults = FaultStore::new(s3);
    let handle = faults.handle();
    let timeout = TimeoutStore::new(Arc::new(faults), TimeoutConfig::default());
    let retry = RetryStore::new(
        Arc::new(timeout),
        RetryConfig {
            max_attempts: 20,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(20),
            max_elapsed: Duration::from_secs(60),
            seed: Some(42),
        },
    );
    let store: Arc<dyn BlobStore> = Arc::new(MeteredStore::new(Arc::new(retry)));

    // One call in five fails (throttled, transient or timed out, half of them after the
    // request was applied) and one GET body in ten is torn.
    handle.random(RandomFaults::flaky(0x5EED, 0.2));
    testing::run_suite_expecting(store.clone(), scratch.path(), Expect::S3S_FS).await;
    assert!(testing::update_is_conditional(store.clone()).await);
    assert!(
        handle.injected() >= 10,
        "faults were injected: {}",
        handle.injected()
    );
    handle.clear();
    // Ambiguous faults may leave orphan uploads (a CreateMultipartUpload whose answer was
    // "lost" is retried); objects under the staging prefix must not survive.
    let staging = store.list(strata_store::STAGING_PREFIX).await.unwrap();
    assert!(staging.is_empty(), "staging objects left: {staging:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_stack_over_memory_passes_the_suite_under_faults() {
    let scratch = tempfile::tempdir().unwrap();
    let mem = ObjectBackend::memory()
        .with_upload_config(testing::small_parts())
        .unwrap()
        .into_dyn();
    let faults = FaultStore::new(mem);
    let handle = faults.handle();
    let config = strata_store::LayerConfig {
        retry: RetryConfig {
            max_attempts: 20,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(10),
            seed: Some(7),
            ..RetryConfig::default()
        },
        ..Default::default()
    };
    let store = strata_store::layered(Arc::new(faults), config);
    handle.random(RandomFaults::flaky(0xFACE, 0.2));
    testing::run_suite(store.clone(), scratch.path()).await;
    assert!(
        handle.injected() >= 10,
        "faults were injected: {}",
        handle.injected()
    );
}
