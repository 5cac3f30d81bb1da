//! Test support for this crate and the crates above it (feature `testing`).
//!
//! - The conformance suite: async functions taking an `Arc<dyn BlobStore>` that check the
//!   trait's contract. Every backend, and every wrapper stack, must pass them, so a new
//!   one is held to the same contract as the others (after object_store's
//!   `integration.rs`). Each function works under its own random
//!   prefix, so several may run at once against one store; [`run_suite`] runs them all.
//! - [`S3Server`]: a real S3 server process (s3s-fs) on loopback.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use strata_store::testing::S3Server;
//! use strata_store::{ErrorKind, FaultStore, BlobStore};
//! let server = S3Server::start()?;
//! let s3 = server.store("cluster-1").expect("open").into_dyn();
//! let faults = FaultStore::new(s3);
//! let handle = faults.handle();
//! handle.fail_next(2, ErrorKind::Throttled); // two 503 SlowDown answers
//! let store: Arc<dyn BlobStore> = Arc::new(faults);
//! // ... wrap in RetryStore and run the code under test; or pass server.env() to a
//! // strata binary; server.pause() / resume() / stop() / restart() for outages.
//! # Ok(()) }
//! ```
//!
//! Assertions panic with a message naming the store and the check.

mod s3_server;

use std::sync::Arc;

use bytes::Bytes;

pub use s3_server::{ACCESS_KEY, BUCKET, REGION, S3Server, SECRET_KEY, installed_binary};

use crate::error::{ErrorKind, Result};
use crate::fault::FaultHandle;
use crate::store::{BlobStore, FileMode, ObjectMeta, PutMode, UploadConfig};

/// An upload configuration with the smallest parts S3 accepts, so that multipart tests
/// need only a few MiB.
pub fn small_parts() -> UploadConfig {
    UploadConfig {
        multipart_threshold: crate::MIN_PART_SIZE + 1,
        part_size: crate::MIN_PART_SIZE,
        max_in_flight: 2,
    }
}

/// A fresh prefix for one test, so tests sharing a store do not see each other.
pub fn unique_prefix(test: &str) -> String {
    format!("conformance/{test}-{}", uuid::Uuid::new_v4().simple())
}

/// `n` bytes of a pattern that differs at every offset within 2^32, so a shifted or
/// misplaced range is caught.
pub fn pattern(n: usize, seed: u32) -> Bytes {
    let mut v = Vec::with_capacity(n);
    let mut x = seed.wrapping_mul(0x9E37_79B9) | 1;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.push((x >> 24) as u8);
    }
    v.into()
}

fn expect_kind<T: std::fmt::Debug>(
    store: &dyn BlobStore,
    what: &str,
    r: Result<T>,
    kinds: &[ErrorKind],
) {
    match r {
        Ok(v) => panic!("{store}: {what}: expected {kinds:?}, got Ok({v:?})"),
        Err(e) => assert!(
            kinds.contains(&e.kind()),
            "{store}: {what}: expected {kinds:?}, got {e}"
        ),
    }
}

fn ok<T>(store: &dyn BlobStore, what: &str, r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{store}: {what}: {e}"),
    }
}

fn paths(mut metas: Vec<ObjectMeta>) -> Vec<String> {
    metas.sort_by(|a, b| a.path.cmp(&b.path));
    metas.into_iter().map(|m| m.path).collect()
}

/// What a backend promises beyond the trait's sequential contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// Concurrent conditional writes to one key are linearized: of several racing
    /// `Create` puts exactly one wins. True of AWS S3, MinIO, the local directory and
    /// memory. Not of s3s-fs 0.14, which checks `If-None-Match` before it streams the
    /// body and renames the file into place after, so racing creators can all succeed
    /// (sequential conditional writes are checked correctly).
    pub atomic_conditional_writes: bool,
}

impl Expect {
    /// What AWS S3, MinIO, the local directory and memory promise.
    pub const STRICT: Expect = Expect {
        atomic_conditional_writes: true,
    };
    /// What s3s-fs promises.
    pub const S3S_FS: Expect = Expect {
        atomic_conditional_writes: false,
    };
}

/// Runs every check that needs nothing but the store, for a backend that promises
/// [`Expect::STRICT`]. `scratch` is a local directory for the files `put_file` uploads.
pub async fn run_suite(store: Arc<dyn BlobStore>, scratch: &std::path::Path) {
    run_suite_expecting(store, scratch, Expect::STRICT).await;
}

/// [`run_suite`] for a backend that promises `expect`.
pub async fn run_suite_expecting(
    store: Arc<dyn BlobStore>,
    scratch: &std::path::Path,
    expect: Expect,
) {
    put_get_head_delete(store.clone()).await;
    missing_objects(store.clone()).await;
    overwrite_replaces(store.clone()).await;
    create_refuses_existing(store.clone()).await;
    concurrent_create(store.clone(), 8, expect).await;
    update_is_conditional(store.clone()).await;
    ranges(store.clone()).await;
    empty_objects(store.clone()).await;
    keys_with_levels_and_odd_characters(store.clone()).await;
    invalid_keys(store.clone()).await;
    list_prefixes(store.clone()).await;
    put_file_small(store.clone(), scratch).await;
    put_file_multipart(store.clone(), scratch).await;
    put_file_multipart_create(store.clone(), scratch).await;
}

/// put, get, head and delete of one object; delete is idempotent.
pub async fn put_get_head_delete(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let key = format!("{}/object.log", unique_prefix("basic"));
    let data = pattern(100_000, 1);
    let put = ok(
        s,
        "put",
        store.put(&key, data.clone(), PutMode::Overwrite).await,
    );
    assert_eq!(
        ok(s, "get", store.get(&key).await),
        data,
        "{s}: get returns what was put"
    );
    let meta = ok(s, "head", store.head(&key).await);
    assert_eq!(meta.path, key, "{s}: head path");
    assert_eq!(meta.size, data.len() as u64, "{s}: head size");
    assert!(meta.e_tag.is_some(), "{s}: head has an etag");
    if put.e_tag.is_some() {
        assert_eq!(meta.e_tag, put.e_tag, "{s}: put and head agree on the etag");
    }
    let age = std::time::SystemTime::now()
        .duration_since(meta.last_modified)
        .unwrap_or_default();
    assert!(
        age < std::time::Duration::from_secs(600),
        "{s}: last_modified is recent ({age:?} ago)"
    );
    ok(s, "delete", store.delete(&key).await);
    expect_kind(
        s,
        "get after delete",
        store.get(&key).await,
        &[ErrorKind::NotFound],
    );
    ok(s, "delete again (idempotent)", store.delete(&key).await);
}

/// get, get_range and head of a missing object are NotFound; delete of one succeeds.
pub async fn missing_objects(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let key = format!("{}/nothing-here", unique_prefix("missing"));
    expect_kind(
        s,
        "get missing",
        store.get(&key).await,
        &[ErrorKind::NotFound],
    );
    expect_kind(
        s,
        "get_range missing",
        store.get_range(&key, 0..10).await,
        &[ErrorKind::NotFound],
    );
    expect_kind(
        s,
        "head missing",
        store.head(&key).await,
        &[ErrorKind::NotFound],
    );
    ok(s, "delete missing", store.delete(&key).await);
}

/// An Overwrite put replaces the object and its etag.
pub async fn overwrite_replaces(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let key = format!("{}/k", unique_prefix("overwrite"));
    ok(
        s,
        "put 1",
        store.put(&key, pattern(1000, 1), PutMode::Overwrite).await,
    );
    let first = ok(s, "head 1", store.head(&key).await);
    ok(
        s,
        "put 2",
        store.put(&key, pattern(500, 2), PutMode::Overwrite).await,
    );
    assert_eq!(
        ok(s, "get", store.get(&key).await),
        pattern(500, 2),
        "{s}: second put wins"
    );
    let second = ok(s, "head 2", store.head(&key).await);
    assert_eq!(second.size, 500, "{s}: size after overwrite");
    assert_ne!(
        first.e_tag, second.e_tag,
        "{s}: a new object has a new etag"
    );
}

/// A Create put refuses an existing object with AlreadyExists and leaves it untouched.
pub async fn create_refuses_existing(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let key = format!("{}/manifest", unique_prefix("create"));
    ok(
        s,
        "create",
        store.put(&key, pattern(10, 1), PutMode::Create).await,
    );
    expect_kind(
        s,
        "second create",
        store.put(&key, pattern(10, 2), PutMode::Create).await,
        &[ErrorKind::AlreadyExists],
    );
    assert_eq!(
        ok(s, "get", store.get(&key).await),
        pattern(10, 1),
        "{s}: the first create stays"
    );
}

/// `n` concurrent Create puts of one key: exactly one succeeds (at least one if the
/// backend does not linearize conditional writes), the others get AlreadyExists, and
/// the object is a winner's.
pub async fn concurrent_create(store: Arc<dyn BlobStore>, n: u32, expect: Expect) {
    let s = store.as_ref();
    let key = format!("{}/manifest", unique_prefix("race"));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(async move {
                (
                    i,
                    store
                        .put(&key, pattern(64 * 1024, i + 100), PutMode::Create)
                        .await,
                )
            })
        })
        .collect();
    let mut winners = vec![];
    for t in tasks {
        let (i, r) = t.await.expect("task");
        match r {
            Ok(_) => winners.push(i),
            Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{s}: loser {i}: {e}"),
        }
    }
    if expect.atomic_conditional_writes {
        assert_eq!(
            winners.len(),
            1,
            "{s}: exactly one concurrent Create wins, got {winners:?}"
        );
    } else {
        assert!(!winners.is_empty(), "{s}: some concurrent Create wins");
    }
    let got = ok(s, "get", store.get(&key).await);
    assert!(
        winners.iter().any(|w| got == pattern(64 * 1024, w + 100)),
        "{s}: the object is a winner's"
    );
}

/// Update with the current etag succeeds; with a stale one it is PreconditionFailed and
/// changes nothing; on a missing object it fails. On a backend without conditional
/// update (the local filesystem) every Update is Unsupported, and this returns `false`.
pub async fn update_is_conditional(store: Arc<dyn BlobStore>) -> bool {
    let s = store.as_ref();
    let key = format!("{}/manifest", unique_prefix("update"));
    let v1 = ok(
        s,
        "put v1",
        store.put(&key, pattern(100, 1), PutMode::Overwrite).await,
    );
    let v1 = if v1.e_tag.is_some() {
        v1.version()
    } else {
        ok(s, "head", store.head(&key).await).version()
    };
    let v2 = match store
        .put(&key, pattern(100, 2), PutMode::Update(v1.clone()))
        .await
    {
        Ok(v2) => v2,
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            expect_kind(
                s,
                "stale update",
                store.put(&key, pattern(100, 3), PutMode::Update(v1)).await,
                &[ErrorKind::Unsupported],
            );
            assert_eq!(
                ok(s, "get", store.get(&key).await),
                pattern(100, 1),
                "{s}: unsupported update wrote nothing"
            );
            return false;
        }
        Err(e) => panic!("{s}: update with the current etag: {e}"),
    };
    expect_kind(
        s,
        "update with a stale etag",
        store.put(&key, pattern(100, 3), PutMode::Update(v1)).await,
        &[ErrorKind::PreconditionFailed],
    );
    assert_eq!(
        ok(s, "get", store.get(&key).await),
        pattern(100, 2),
        "{s}: the refused update wrote nothing"
    );
    ok(
        s,
        "update with the new etag",
        store
            .put(&key, pattern(100, 4), PutMode::Update(v2.version()))
            .await,
    );
    let missing = format!("{key}-missing");
    expect_kind(
        s,
        "update of a missing object",
        store
            .put(&missing, pattern(1, 1), PutMode::Update(v2.version()))
            .await,
        &[ErrorKind::PreconditionFailed, ErrorKind::NotFound],
    );
    true
}

/// Ranges return exactly the requested bytes: first byte, last byte, whole object,
/// middle; a range past the end is InvalidInput; an empty range is empty.
pub async fn ranges(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let key = format!("{}/segment.log", unique_prefix("ranges"));
    let n = 300_001u64;
    let data = pattern(n as usize, 7);
    ok(
        s,
        "put",
        store.put(&key, data.clone(), PutMode::Overwrite).await,
    );
    for r in [
        0..1,
        n - 1..n,
        0..n,
        12_345..200_000,
        65_536..131_072,
        n - 17..n,
    ] {
        let got = ok(s, "get_range", store.get_range(&key, r.clone()).await);
        assert_eq!(got.len() as u64, r.end - r.start, "{s}: range {r:?} length");
        assert!(
            got == data.slice(r.start as usize..r.end as usize),
            "{s}: range {r:?} bytes"
        );
    }
    assert!(
        ok(s, "empty range", store.get_range(&key, 5..5).await).is_empty(),
        "{s}: empty range"
    );
    expect_kind(
        s,
        "range past the end",
        store.get_range(&key, n - 1..n + 1).await,
        &[ErrorKind::InvalidInput],
    );
    expect_kind(
        s,
        "range starting past the end",
        store.get_range(&key, n + 10..n + 20).await,
        &[ErrorKind::InvalidInput],
    );
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 10..5;
    expect_kind(
        s,
        "reversed range",
        store.get_range(&key, reversed).await,
        &[ErrorKind::InvalidInput],
    );
}

/// Empty objects exist, have size 0 and read back empty.
pub async fn empty_objects(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let key = format!("{}/empty", unique_prefix("empty"));
    ok(
        s,
        "put empty",
        store.put(&key, Bytes::new(), PutMode::Create).await,
    );
    assert!(
        ok(s, "get empty", store.get(&key).await).is_empty(),
        "{s}: empty get"
    );
    assert_eq!(
        ok(s, "head empty", store.head(&key).await).size,
        0,
        "{s}: empty size"
    );
    expect_kind(
        s,
        "range of an empty object",
        store.get_range(&key, 0..1).await,
        &[ErrorKind::InvalidInput],
    );
    let listed = ok(
        s,
        "list",
        store.list(key.rsplit_once('/').map_or("", |p| p.0)).await,
    );
    assert_eq!(
        paths(listed),
        vec![key.clone()],
        "{s}: empty objects are listed"
    );
}

/// Keys with several levels and characters that need escaping in URLs and paths
/// round-trip through put, get, head and list.
pub async fn keys_with_levels_and_odd_characters(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let prefix = unique_prefix("keys");
    let names = [
        "a/b/c/d/e/f/g/h.log",
        "topics/orders-7f3a/0/segments/00000000000000001234-5-uuid.log",
        "with space/and+plus=equals&amp;/x",
        "unicode/ünïcødé-✓/日本",
        "punct/!$'()*,;:@~_-.[]{}",
        "percent/100%25/a%2Fb",
        "parquet/topic=orders/partition=3/date=2025-01-01/0-99.parquet",
    ];
    for (i, name) in names.iter().enumerate() {
        let key = format!("{prefix}/{name}");
        ok(
            s,
            &format!("put {key:?}"),
            store
                .put(&key, pattern(10 + i, i as u32), PutMode::Overwrite)
                .await,
        );
        assert_eq!(
            ok(s, "get", store.get(&key).await),
            pattern(10 + i, i as u32),
            "{s}: get {key:?}"
        );
        assert_eq!(
            ok(s, "head", store.head(&key).await).path,
            key,
            "{s}: head path of {key:?}"
        );
    }
    let mut want: Vec<String> = names.iter().map(|n| format!("{prefix}/{n}")).collect();
    want.sort();
    assert_eq!(
        paths(ok(s, "list", store.list(&prefix).await)),
        want,
        "{s}: list returns the keys as written"
    );
    for key in want {
        ok(s, "delete", store.delete(&key).await);
    }
    assert!(
        ok(s, "list", store.list(&prefix).await).is_empty(),
        "{s}: all deleted"
    );
}

/// Keys that are empty, start or end with '/', or have empty, `.` or `..` segments are
/// InvalidInput.
pub async fn invalid_keys(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    for key in ["", "/a", "a/", "a//b", "a/./b", "a/../b", "..", "a/\u{1}b"] {
        expect_kind(
            s,
            &format!("put {key:?}"),
            store
                .put(key, Bytes::from_static(b"x"), PutMode::Overwrite)
                .await,
            &[ErrorKind::InvalidInput],
        );
        expect_kind(
            s,
            &format!("get {key:?}"),
            store.get(key).await,
            &[ErrorKind::InvalidInput],
        );
    }
}

/// list(prefix) returns the objects under the directory-like prefix, with sizes, and not
/// those whose key merely starts with the same characters; a missing prefix lists
/// nothing.
pub async fn list_prefixes(store: Arc<dyn BlobStore>) {
    let s = store.as_ref();
    let p = unique_prefix("list");
    for (key, n) in [
        ("a/1", 1usize),
        ("a/2", 2),
        ("a/sub/3", 3),
        ("ab/4", 4),
        ("b", 5),
    ] {
        ok(
            s,
            "put",
            store
                .put(&format!("{p}/{key}"), pattern(n, 0), PutMode::Overwrite)
                .await,
        );
    }
    let listed = ok(s, "list a", store.list(&format!("{p}/a")).await);
    let mut sizes: Vec<(String, u64)> = listed.iter().map(|m| (m.path.clone(), m.size)).collect();
    sizes.sort();
    assert_eq!(
        sizes,
        vec![
            (format!("{p}/a/1"), 1),
            (format!("{p}/a/2"), 2),
            (format!("{p}/a/sub/3"), 3)
        ],
        "{s}: list is per directory and carries sizes"
    );
    assert_eq!(
        ok(s, "list all", store.list(&p).await).len(),
        5,
        "{s}: list of the parent"
    );
    assert!(
        ok(s, "list missing", store.list(&format!("{p}/zzz")).await).is_empty(),
        "{s}: missing prefix"
    );
}

async fn write_file(dir: &std::path::Path, name: &str, data: &[u8]) -> std::path::PathBuf {
    let path = dir.join(format!("{name}-{}", uuid::Uuid::new_v4().simple()));
    tokio::fs::write(&path, data)
        .await
        .expect("write scratch file");
    path
}

/// put_file below the multipart threshold: one put, Create refuses an existing object.
pub async fn put_file_small(store: Arc<dyn BlobStore>, scratch: &std::path::Path) {
    let s = store.as_ref();
    let key = format!("{}/small.index", unique_prefix("file-small"));
    let data = pattern(4096, 3);
    let file = write_file(scratch, "small", &data).await;
    ok(
        s,
        "put_file",
        store.put_file(&key, &file, FileMode::Create).await,
    );
    assert_eq!(
        ok(s, "get", store.get(&key).await),
        data,
        "{s}: small file round-trips"
    );
    // Other bytes: a retried Create that finds identical bytes takes them for its own
    // earlier attempt (see RetryStore), so the refusal is checked with different ones.
    let other = write_file(scratch, "small2", &pattern(4096, 4)).await;
    expect_kind(
        s,
        "put_file Create again",
        store.put_file(&key, &other, FileMode::Create).await,
        &[ErrorKind::AlreadyExists],
    );
    assert_eq!(
        ok(s, "get", store.get(&key).await),
        data,
        "{s}: the first object stays"
    );
    let _ = tokio::fs::remove_file(&other).await;
    let missing = scratch.join("does-not-exist");
    expect_kind(
        s,
        "put_file of a missing file",
        store.put_file(&key, &missing, FileMode::Overwrite).await,
        &[ErrorKind::InvalidInput],
    );
    let _ = tokio::fs::remove_file(&file).await;
}

/// The size of the multipart test file: three and a half parts.
pub fn multipart_size(config: &UploadConfig) -> usize {
    (config.part_size * 3 + config.part_size / 2).max(config.multipart_threshold + 1) as usize
}

/// A file several parts large round-trips byte for byte (whole and at part boundaries),
/// and overwriting it with Overwrite works.
pub async fn put_file_multipart(store: Arc<dyn BlobStore>, scratch: &std::path::Path) {
    let s = store.as_ref();
    let config = store.upload_config();
    let key = format!(
        "{}/00000000000000000000-0-x.log",
        unique_prefix("file-multi")
    );
    let n = multipart_size(&config);
    let data = pattern(n, 11);
    let file = write_file(scratch, "multi", &data).await;
    ok(
        s,
        "put_file",
        store.put_file(&key, &file, FileMode::Overwrite).await,
    );
    let got = ok(s, "get", store.get(&key).await);
    assert!(
        got.len() == n && got == data,
        "{s}: multipart object round-trips ({} of {n} bytes)",
        got.len()
    );
    let ps = config.part_size;
    for r in [
        ps - 3..ps + 3,
        2 * ps - 1..2 * ps + 1,
        n as u64 - 5..n as u64,
    ] {
        let got = ok(
            s,
            "range across a part boundary",
            store.get_range(&key, r.clone()).await,
        );
        assert!(
            got == data.slice(r.start as usize..r.end as usize),
            "{s}: range {r:?}"
        );
    }
    let data2 = pattern(n - 1000, 12);
    tokio::fs::write(&file, &data2)
        .await
        .expect("rewrite scratch file");
    ok(
        s,
        "put_file overwrite",
        store.put_file(&key, &file, FileMode::Overwrite).await,
    );
    assert!(
        ok(s, "get", store.get(&key).await) == data2,
        "{s}: multipart overwrite"
    );
    let _ = tokio::fs::remove_file(&file).await;
    ok(s, "delete", store.delete(&key).await);
}

/// A multipart put_file in Create mode creates a new object and refuses an existing one
/// with AlreadyExists, leaving it untouched.
pub async fn put_file_multipart_create(store: Arc<dyn BlobStore>, scratch: &std::path::Path) {
    let s = store.as_ref();
    let config = store.upload_config();
    let prefix = unique_prefix("file-create");
    let key = format!("{prefix}/seg.log");
    let n = multipart_size(&config);
    let data = pattern(n, 21);
    let file = write_file(scratch, "create", &data).await;
    ok(
        s,
        "put_file Create",
        store.put_file(&key, &file, FileMode::Create).await,
    );
    assert!(
        ok(s, "get", store.get(&key).await) == data,
        "{s}: created multipart object"
    );
    let other = write_file(scratch, "create2", &pattern(n, 22)).await;
    expect_kind(
        s,
        "put_file Create over an existing object",
        store.put_file(&key, &other, FileMode::Create).await,
        &[ErrorKind::AlreadyExists],
    );
    assert!(
        ok(s, "get", store.get(&key).await) == data,
        "{s}: the existing object is untouched"
    );
    assert_eq!(
        paths(ok(s, "list", store.list(&prefix).await)),
        vec![key.clone()],
        "{s}: nothing else under the prefix"
    );
    let staging = ok(s, "list staging", store.list(crate::STAGING_PREFIX).await);
    assert!(
        staging.is_empty(),
        "{s}: no staging objects left: {:?}",
        paths(staging)
    );
    let _ = tokio::fs::remove_file(&file).await;
    let _ = tokio::fs::remove_file(&other).await;
}

/// With `faults` controlling a [`crate::FaultStore`] inside `store` (and no retry
/// wrapper between them), a put_file whose `nth` part fails returns that error, leaves
/// no object at the key and aborts the upload. `pending_uploads`, where the backend can
/// tell (s3s-fs: [`S3Server::pending_multipart_uploads`]), must be back to its value
/// before the upload.
pub async fn multipart_failure_leaves_nothing(
    store: Arc<dyn BlobStore>,
    faults: &FaultHandle,
    scratch: &std::path::Path,
    pending_uploads: Option<&(dyn Fn() -> usize + Sync)>,
) {
    let s = store.as_ref();
    let config = store.upload_config();
    let key = format!("{}/seg.log", unique_prefix("file-fail"));
    let data = pattern(multipart_size(&config), 31);
    let file = write_file(scratch, "fail", &data).await;
    let before = pending_uploads.map(|f| f());
    let aborts = faults.calls(crate::Op::MultipartAbort);
    for mode in [FileMode::Overwrite, FileMode::Create] {
        faults.fail_part(3, ErrorKind::Permanent);
        expect_kind(
            s,
            "put_file with a failing part",
            store.put_file(&key, &file, mode).await,
            &[ErrorKind::Permanent],
        );
        expect_kind(
            s,
            "head after the failed upload",
            store.head(&key).await,
            &[ErrorKind::NotFound],
        );
    }
    assert_eq!(
        faults.calls(crate::Op::MultipartAbort),
        aborts + 2,
        "{s}: each failed upload was aborted"
    );
    faults.inject(crate::Fault::new(ErrorKind::Permanent).op(crate::Op::MultipartComplete));
    expect_kind(
        s,
        "put_file with a failing complete",
        store.put_file(&key, &file, FileMode::Overwrite).await,
        &[ErrorKind::Permanent],
    );
    expect_kind(
        s,
        "head after the failed complete",
        store.head(&key).await,
        &[ErrorKind::NotFound],
    );
    assert_eq!(
        faults.calls(crate::Op::MultipartAbort),
        aborts + 3,
        "{s}: a failed complete is aborted"
    );
    if let (Some(f), Some(before)) = (pending_uploads, before) {
        assert_eq!(f(), before, "{s}: no multipart upload left pending");
    }
    let staging = ok(s, "list staging", store.list(crate::STAGING_PREFIX).await);
    assert!(
        staging.is_empty(),
        "{s}: no staging objects left: {:?}",
        paths(staging)
    );
    let _ = tokio::fs::remove_file(&file).await;
}
