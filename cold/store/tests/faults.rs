//! Faults that matter to users, against a real S3 server (s3s-fs) on loopback: torn
//! bodies, ambiguous timeouts, throttling, a hung or dead server, cancellation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_store::testing::{self, S3Server};
use strata_store::{
    BlobStore, CancellationToken, ErrorKind, Fault, FaultHandle, FaultStore, FileMode, Op, PutMode,
    RetryConfig, RetryStore, TimeoutConfig, TimeoutStore,
};

fn s3_server() -> S3Server {
    S3Server::start().unwrap_or_else(|e| {
        panic!("cannot start s3s-fs ({e}); install it with scripts/deps (cargo install s3s-fs@0.14.1 --features binary --locked)")
    })
}

fn fast_retry(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        max_elapsed: Duration::from_secs(20),
        seed: Some(1),
    }
}

/// retry(timeout(fault(s3))), with the fault handle.
fn stack(
    server: &S3Server,
    prefix: &str,
    timeout: TimeoutConfig,
    retry: RetryConfig,
) -> (Arc<dyn BlobStore>, FaultHandle) {
    let s3 = server
        .store(prefix)
        .expect("open")
        .with_upload_config(testing::small_parts())
        .expect("upload config");
    let faults = FaultStore::new(s3.into_dyn());
    let handle = faults.handle();
    let timeout = TimeoutStore::new(Arc::new(faults), timeout);
    (Arc::new(RetryStore::new(Arc::new(timeout), retry)), handle)
}

/// An independent S3 client (aws-sdk-s3) for checking what is really in the bucket.
fn sdk_client(server: &S3Server) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .endpoint_url(server.endpoint())
        .region(aws_sdk_s3::config::Region::new(testing::REGION))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            testing::ACCESS_KEY,
            testing::SECRET_KEY,
            None,
            None,
            "test",
        ))
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

async fn sdk_keys(client: &aws_sdk_s3::Client, prefix: &str) -> Vec<String> {
    let out = client
        .list_objects_v2()
        .bucket(testing::BUCKET)
        .prefix(prefix)
        .send()
        .await
        .expect("list_objects_v2");
    let mut keys: Vec<String> = out
        .contents()
        .iter()
        .filter_map(|o| o.key().map(String::from))
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_get_body_is_an_error_never_short_data() {
    let server = s3_server();
    let s3 = server.store("torn").unwrap().into_dyn();
    let faults = FaultStore::new(s3);
    let handle = faults.handle();
    let bare: Arc<dyn BlobStore> = Arc::new(faults);
    let data = testing::pattern(1 << 20, 5);
    bare.put("seg.log", data.clone(), PutMode::Overwrite)
        .await
        .unwrap();

    // Without retries: the caller gets a Transient error, not 1 MiB minus 100 bytes.
    handle.truncate_next_gets(1, 100);
    let err = bare.get("seg.log").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    handle.truncate_next_gets(1, 1);
    let err = bare.get_range("seg.log", 1000..500_000).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(err.to_string().contains("short"), "{err}");

    // Through the retry wrapper the torn bodies are retried and the data is whole.
    let retry: Arc<dyn BlobStore> = Arc::new(RetryStore::new(bare, fast_retry(5)));
    handle.truncate_next_gets(3, 4096);
    assert_eq!(retry.get("seg.log").await.unwrap(), data);
    handle.truncate_next_gets(2, 1);
    assert_eq!(
        retry.get_range("seg.log", 7..700_007).await.unwrap(),
        data.slice(7..700_007)
    );
    // More torn bodies than attempts: an error, still never short data.
    handle.truncate_next_gets(10, 1);
    assert_eq!(
        retry.get("seg.log").await.unwrap_err().kind(),
        ErrorKind::Transient
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_put_that_times_out_after_applying_is_retried_without_duplicate_or_loss() {
    let server = s3_server();
    let (store, handle) = stack(
        &server,
        "ambiguous",
        TimeoutConfig::default(),
        fast_retry(5),
    );
    let client = sdk_client(&server);

    // The first attempt is applied, but its answer is a timeout; the retry's Create then
    // finds the object, reads it back, recognises its own bytes and succeeds.
    handle.inject(Fault::new(ErrorKind::Timeout).op(Op::Put).after_call());
    let manifest = testing::pattern(3000, 1);
    let put = store
        .put("p/0/manifest/00000001", manifest.clone(), PutMode::Create)
        .await
        .unwrap();
    assert_eq!(handle.calls(Op::Put), 2, "one timed-out attempt, one retry");
    assert_eq!(store.get("p/0/manifest/00000001").await.unwrap(), manifest);
    assert_eq!(
        sdk_keys(&client, "ambiguous/p/").await,
        vec!["ambiguous/p/0/manifest/00000001".to_string()]
    );
    assert_eq!(
        put.e_tag,
        store.head("p/0/manifest/00000001").await.unwrap().e_tag,
        "the etag is the object's"
    );

    // The same for an Update (If-Match): applied, timed out, retried, PreconditionFailed
    // because our own write changed the etag, resolved by comparing the bytes. The etag
    // returned works for the next Update.
    handle.inject(Fault::new(ErrorKind::Transient).op(Op::Put).after_call());
    let v2 = testing::pattern(3000, 2);
    let put2 = store
        .put(
            "p/0/manifest/00000001",
            v2.clone(),
            PutMode::Update(put.version()),
        )
        .await
        .unwrap();
    assert_eq!(store.get("p/0/manifest/00000001").await.unwrap(), v2);
    store
        .put(
            "p/0/manifest/00000001",
            testing::pattern(10, 3),
            PutMode::Update(put2.version()),
        )
        .await
        .unwrap();

    // A competitor's object is never mistaken for ours: a Create that times out before
    // reaching the server, retried onto someone else's object, is AlreadyExists.
    store
        .put(
            "p/0/manifest/00000002",
            testing::pattern(100, 9),
            PutMode::Create,
        )
        .await
        .unwrap();
    handle.inject(Fault::new(ErrorKind::Timeout).op(Op::Put));
    let err = store
        .put(
            "p/0/manifest/00000002",
            testing::pattern(100, 10),
            PutMode::Create,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert_eq!(
        store.get("p/0/manifest/00000002").await.unwrap(),
        testing::pattern(100, 9)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_completion_that_times_out_is_retried_without_loss() {
    let server = s3_server();
    let (store, handle) = stack(
        &server,
        "ambiguous-mp",
        TimeoutConfig::default(),
        fast_retry(5),
    );
    let scratch = tempfile::tempdir().unwrap();
    let data = testing::pattern(testing::multipart_size(&store.upload_config()), 4);
    let file = scratch.path().join("seg");
    std::fs::write(&file, &data).unwrap();
    for (mode, key) in [(FileMode::Overwrite, "a.log"), (FileMode::Create, "b.log")] {
        handle.inject(
            Fault::new(ErrorKind::Timeout)
                .op(Op::MultipartComplete)
                .after_call(),
        );
        handle.inject(Fault::new(ErrorKind::Throttled).op(Op::PutPart).skip(1));
        store.put_file(key, &file, mode).await.unwrap();
        assert_eq!(store.get(key).await.unwrap(), data, "{mode:?}");
    }
    let keys = sdk_keys(&sdk_client(&server), "").await;
    assert_eq!(
        keys,
        vec![
            "ambiguous-mp/a.log".to_string(),
            "ambiguous-mp/b.log".to_string()
        ]
    );
    assert_eq!(server.pending_multipart_uploads(), 0);
    assert_eq!(server.pending_parts(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_retried_and_succeeds() {
    let server = s3_server();
    let (store, handle) = stack(&server, "throttle", TimeoutConfig::default(), fast_retry(5));
    handle.fail_next(4, ErrorKind::Throttled);
    store.put("k", "v".into(), PutMode::Create).await.unwrap();
    assert_eq!(handle.calls(Op::Put), 5, "four 503 SlowDown, then success");
    handle.fail_next(2, ErrorKind::Throttled);
    assert_eq!(store.get("k").await.unwrap(), "v");

    // Bounded: more throttling than attempts surfaces as Throttled.
    handle.fail_next(5, ErrorKind::Throttled);
    assert_eq!(
        store.get("k").await.unwrap_err().kind(),
        ErrorKind::Throttled
    );
    // Never retried: a permanent error is returned after one attempt.
    let before = handle.calls(Op::Head);
    handle.fail_next(1, ErrorKind::Permanent);
    assert_eq!(
        store.head("k").await.unwrap_err().kind(),
        ErrorKind::Permanent
    );
    assert_eq!(handle.calls(Op::Head), before + 1);
    // NotFound is an answer, not a failure to retry.
    let before = handle.calls(Op::Get);
    assert_eq!(
        store.get("missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(handle.calls(Op::Get), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_server_fails_calls_with_timeout_within_the_deadline() {
    let mut server = s3_server();
    let deadline = Duration::from_millis(500);
    let s3 = server.store("hung").unwrap().into_dyn();
    let timeout: Arc<dyn BlobStore> =
        Arc::new(TimeoutStore::new(s3, TimeoutConfig::uniform(deadline)));
    timeout
        .put("k", "v".into(), PutMode::Overwrite)
        .await
        .unwrap();

    server.pause().unwrap(); // SIGSTOP: connections are accepted by the kernel, nothing answers
    for op in ["get", "head", "put", "list"] {
        let start = Instant::now();
        let r = match op {
            "get" => timeout.get("k").await.map(|_| ()),
            "head" => timeout.head("k").await.map(|_| ()),
            "put" => timeout
                .put("k2", "v".into(), PutMode::Overwrite)
                .await
                .map(|_| ()),
            _ => timeout.list("").await.map(|_| ()),
        };
        let took = start.elapsed();
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Timeout, "{op}");
        // Generous upper bound: the point is "fails", not "hangs for the HTTP client's 30 s".
        assert!(took < deadline * 6, "{op} took {took:?}");
    }

    // With retries, the whole call is bounded by max_elapsed.
    let retry = RetryStore::new(
        timeout.clone(),
        RetryConfig {
            max_elapsed: Duration::from_secs(2),
            ..fast_retry(100)
        },
    );
    let start = Instant::now();
    assert_eq!(retry.get("k").await.unwrap_err().kind(), ErrorKind::Timeout);
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "took {:?}",
        start.elapsed()
    );

    server.resume().unwrap();
    assert_eq!(
        retry.get("k").await.unwrap(),
        "v",
        "works again after SIGCONT"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_is_transient_and_a_restart_keeps_the_data() {
    let mut server = s3_server();
    let s3 = server.store("dead").unwrap().into_dyn();
    let timeout: Arc<dyn BlobStore> = Arc::new(TimeoutStore::new(
        s3,
        TimeoutConfig::uniform(Duration::from_secs(2)),
    ));
    timeout.put("k", "v".into(), PutMode::Create).await.unwrap();
    server.stop(); // SIGKILL
    let err = timeout.get("k").await.unwrap_err();
    assert!(
        err.is_retriable(),
        "a refused connection is retriable: {err}"
    );
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");

    server.restart().unwrap();
    let retry = RetryStore::new(timeout, fast_retry(5));
    assert_eq!(retry.get("k").await.unwrap(), "v");
    let err = retry
        .put("k", "w".into(), PutMode::Create)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_is_cancelled_not_timeout_and_is_not_retried() {
    let mut server = s3_server();
    let token = CancellationToken::new();
    let s3 = server.store("cancel").unwrap().into_dyn();
    let timeout = TimeoutStore::new(s3, TimeoutConfig::uniform(Duration::from_secs(30)))
        .with_cancellation(token.clone());
    let store: Arc<dyn BlobStore> = Arc::new(
        RetryStore::new(Arc::new(timeout), fast_retry(5)).with_cancellation(token.clone()),
    );
    store
        .put("k", "v".into(), PutMode::Overwrite)
        .await
        .unwrap();

    server.pause().unwrap();
    let call = tokio::spawn({
        let store = store.clone();
        async move { store.get("k").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    token.cancel();
    let err = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled, "{err}");
    assert!(!err.is_retriable());
    server.resume().unwrap();

    // A per-call token, for cancelling one request rather than the whole store.
    let one = CancellationToken::new();
    one.cancel();
    let err = strata_store::cancellable(&one, Op::Get, "k", store.get("k"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_put_file_aborts_its_multipart_upload() {
    let server = s3_server();
    let s3 = server
        .store("dropped")
        .unwrap()
        .with_upload_config(testing::small_parts())
        .unwrap();
    let faults = FaultStore::new(s3.into_dyn());
    let handle = faults.handle();
    let store: Arc<dyn BlobStore> = Arc::new(faults);
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("seg");
    std::fs::write(
        &file,
        testing::pattern(testing::multipart_size(&store.upload_config()), 8),
    )
    .unwrap();

    // Parts hang for 10 s; the caller gives up after the upload has started.
    handle.delay(Some(Op::PutPart), Duration::from_secs(10));
    let r = tokio::time::timeout(
        Duration::from_millis(500),
        store.put_file("seg.log", &file, FileMode::Overwrite),
    )
    .await;
    assert!(r.is_err(), "the caller timed out");
    let start = Instant::now();
    while handle.calls(Op::MultipartAbort) == 0 || server.pending_multipart_uploads() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the upload was not aborted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        store.head("seg.log").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_and_credential_errors_name_what_to_fix() {
    let bad = [
        ("s3://", "--object-store 's3://': no bucket"),
        ("s3:///prefix", "no bucket"),
        ("file://", "no directory"),
        ("ftp://host/x", "expected file://DIR or s3://BUCKET/PREFIX"),
    ];
    for (url, want) in bad {
        let err = strata_store::open_url_with_env(url, Vec::<(String, String)>::new()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains(want), "{url}: {err}");
    }

    let server = s3_server();
    let mut env = server.env();
    for (k, v) in &mut env {
        if k == "AWS_SECRET_ACCESS_KEY" {
            *v = "wrong".into();
        }
    }
    let store = strata_store::open_url_with_env(&server.url("x"), env)
        .unwrap()
        .into_dyn();
    let err = store
        .put("k", "v".into(), PutMode::Overwrite)
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Permanent,
        "a 403 is not retried: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_client_sees_what_the_store_wrote() {
    let server = s3_server();
    let client = sdk_client(&server);
    client
        .head_bucket()
        .bucket(testing::BUCKET)
        .send()
        .await
        .expect("the helper's bucket exists for S3 clients");
    client
        .create_bucket()
        .bucket("made-by-sdk")
        .send()
        .await
        .unwrap();

    let store = server
        .store("cluster/topics")
        .unwrap()
        .with_upload_config(testing::small_parts())
        .unwrap()
        .into_dyn();
    let scratch = tempfile::tempdir().unwrap();
    let data = testing::pattern(testing::multipart_size(&store.upload_config()), 2);
    let file = scratch.path().join("seg");
    std::fs::write(&file, &data).unwrap();
    store
        .put_file(
            "t-1/0/segments/00000000000000000000-0-u.log",
            &file,
            FileMode::Create,
        )
        .await
        .unwrap();
    store
        .put("t-1/0/manifest/00000001", "m".into(), PutMode::Create)
        .await
        .unwrap();

    assert_eq!(
        sdk_keys(&client, "cluster/").await,
        vec![
            "cluster/topics/t-1/0/manifest/00000001".to_string(),
            "cluster/topics/t-1/0/segments/00000000000000000000-0-u.log".to_string(),
        ]
    );
    let got = client
        .get_object()
        .bucket(testing::BUCKET)
        .key("cluster/topics/t-1/0/segments/00000000000000000000-0-u.log")
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert!(
        got == data,
        "the SDK reads back the multipart object byte for byte"
    );

    // A bucket the SDK created is usable through the store.
    let mut env = server.env();
    env.push(("AWS_REGION".into(), testing::REGION.into()));
    let other = strata_store::open_url_with_env("s3://made-by-sdk/p", env)
        .unwrap()
        .into_dyn();
    other.put("k", "v".into(), PutMode::Create).await.unwrap();
    assert_eq!(other.get("k").await.unwrap(), "v");
}
