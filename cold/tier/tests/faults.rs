//! Faults between the tier and the object store: throttling, transient errors,
//! timeouts (some after the request was applied), torn GET bodies and failed multipart
//! parts never put a wrong byte in a read, and a crash between upload and manifest
//! commit leaves nothing visible.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_cache::{CacheConfig, ChunkCache, ReaderId};
use strata_log::{Log, LogConfig, ManualClock};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, TopicId};
use strata_store::testing::{S3Server, small_parts};
use strata_store::{
    BlobStore, ErrorKind, Fault, FaultStore, LayerConfig, ObjectBackend, Op, RandomFaults,
    RetryConfig,
};
use strata_tier::{PartitionKey, RemotePartition, StoreSource, TierError};

const MIB: u64 = 1024 * 1024;

fn key(prefix: &str) -> PartitionKey {
    PartitionKey {
        cluster_id: prefix.into(),
        topic: "t".into(),
        topic_id: TopicId(uuid::Uuid::from_u128(5)),
        partition: 0,
    }
}

async fn cache(store: &Arc<dyn BlobStore>) -> Arc<ChunkCache> {
    let config = CacheConfig {
        chunk_size: 4 * MIB,
        memory_capacity: 32 * MIB,
        disk: None,
        ..CacheConfig::default()
    };
    Arc::new(
        ChunkCache::new(config, Arc::new(StoreSource(store.clone())))
            .await
            .unwrap(),
    )
}

/// A log whose sealed segments are over 5 MiB, so they go up in multipart uploads.
fn big_segments(dir: &std::path::Path) -> Log {
    let config = LogConfig {
        segment_bytes: 6 * MIB,
        index_interval_bytes: 4096,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(dir, config, Arc::new(ManualClock::new(1_000))).unwrap();
    for i in 0..220u64 {
        let recs: Vec<NewRecord> = (0..20)
            .map(|j| {
                NewRecord::value(
                    Bytes::from(vec![(i * 31 + j) as u8; 4000 + (i as usize % 7) * 100]),
                    1_000 + i as i64,
                )
            })
            .collect();
        let mut b = batch(&recs, Compression::None, None).to_vec();
        log.append(&mut b, 1).unwrap();
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_yield_correct_bytes_or_a_retriable_error_never_wrong_data() {
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    // Short names: s3s-fs keeps a multipart upload in a file named after the base64 of
    // bucket and key, which overflows 255 bytes for keys over ~130 characters (real S3
    // takes 1024-byte keys).
    let backend = s3
        .store("f")
        .unwrap()
        .with_upload_config(small_parts())
        .unwrap()
        .into_dyn();
    let faults = FaultStore::new(backend);
    let handle = faults.handle();
    let retry = RetryConfig {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        ..RetryConfig::default()
    };
    let store = strata_store::layered(
        Arc::new(faults),
        LayerConfig {
            retry,
            ..LayerConfig::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let log = big_segments(dir.path());
    let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
    assert!(sealed.len() >= 2 && sealed[0].size_bytes > 5 * MIB);
    let remote = RemotePartition::open(key("c"), store.clone(), cache(&store).await)
        .await
        .unwrap();

    // A multipart part that fails for good: the offload fails, nothing is committed,
    // no upload is left pending; the retry (faults gone) succeeds.
    handle.inject(Fault::new(ErrorKind::Permanent).op(Op::PutPart).skip(1));
    let e = remote.offload(&sealed[0], None, 1).await.unwrap_err();
    assert!(matches!(e, TierError::Store(_)), "{e}");
    assert_eq!(remote.end_offset(), None);
    assert_eq!(
        s3.pending_multipart_uploads(),
        0,
        "the failed multipart upload was aborted"
    );
    remote.offload(&sealed[0], None, 1).await.unwrap();

    // A flaky store (20% throttling / transient / timeouts, half after the request was
    // applied, torn bodies): offloads eventually succeed...
    handle.random(RandomFaults::flaky(7, 0.2));
    for s in &sealed[1..] {
        let mut attempts = 0;
        loop {
            match remote.offload(s, None, 1).await {
                Ok(_) => break,
                Err(TierError::Fenced { .. }) => {
                    panic!("an ambiguous commit was taken for a fencing")
                }
                Err(e) => {
                    attempts += 1;
                    assert!(attempts < 20, "offload keeps failing: {e}");
                    // An Add whose delta landed but whose answer was lost is visible now.
                    if remote.is_offloaded(s.base_offset, s.next_offset) {
                        break;
                    }
                }
            }
        }
    }
    // ...and every read returns the local bytes or an error the client retries.
    let end = remote.end_offset().unwrap();
    let (mut ok, mut failed) = (0, 0);
    for round in 0..3 {
        let mut offset = 0;
        while offset < end {
            match remote.read(offset, 1_000_000, ReaderId(round)).await {
                Ok(r) => {
                    let local = log.read(offset, 1_000_000, None).unwrap();
                    assert_eq!(r.data, local.data, "offset {offset}: remote bytes differ");
                    ok += 1;
                    offset = r.next_offset;
                }
                Err(e) => {
                    assert!(
                        e.is_retriable() || e.error_code().is_retriable(),
                        "non-retriable: {e}"
                    );
                    failed += 1;
                    offset += 1;
                }
            }
        }
    }
    assert!(
        ok > 10,
        "reads succeed despite faults ({ok} ok, {failed} failed)"
    );
    assert!(handle.injected() > 0);
}

#[tokio::test]
async fn a_crash_between_upload_and_commit_leaves_no_visible_half_state() {
    let backend = ObjectBackend::memory().into_dyn();
    let faults = FaultStore::new(backend.clone());
    let handle = faults.handle();
    let store: Arc<dyn BlobStore> = Arc::new(faults);
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 32 * 1024,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(dir.path(), config, Arc::new(ManualClock::new(1_000))).unwrap();
    for i in 0..100u64 {
        let mut b = batch(
            &[NewRecord::value(Bytes::from(vec![i as u8; 2000]), 1_000)],
            Compression::None,
            None,
        )
        .to_vec();
        log.append(&mut b, 1).unwrap();
    }
    let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
    let k = key("crash");
    let remote = RemotePartition::open(k.clone(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    remote.offload(&sealed[0], None, 1).await.unwrap();
    // The segment's objects go up, the manifest commit does not (as if the broker died).
    handle.inject(
        Fault::new(ErrorKind::Permanent)
            .op(Op::Put)
            .prefix(k.manifest_prefix()),
    );
    assert!(remote.offload(&sealed[1], None, 1).await.is_err());
    let uploaded = backend.list(&k.segments_prefix()).await.unwrap().len();
    assert_eq!(
        uploaded, 6,
        "two segments' .log, .index and .timeindex are in the bucket"
    );
    // Nothing of the second segment is visible: not to this broker, not to a new one.
    assert_eq!(remote.end_offset(), Some(sealed[0].next_offset));
    assert!(matches!(
        remote.read(sealed[1].base_offset, 100, ReaderId(1)).await,
        Err(TierError::NotRemote { .. })
    ));
    let fresh = RemotePartition::open(k.clone(), backend.clone(), cache(&backend).await)
        .await
        .unwrap();
    assert_eq!(fresh.end_offset(), Some(sealed[0].next_offset));
    // The orphan sweep removes exactly the unnamed objects.
    assert_eq!(fresh.cleanup_orphans(Duration::ZERO).await.unwrap(), 3);
    assert_eq!(backend.list(&k.segments_prefix()).await.unwrap().len(), 3);
    // And the offload succeeds on retry.
    fresh.offload(&sealed[1], None, 1).await.unwrap();
    let local = log.read(sealed[1].base_offset, 100_000, None).unwrap();
    assert_eq!(
        fresh
            .read(sealed[1].base_offset, 100_000, ReaderId(2))
            .await
            .unwrap()
            .data,
        local.data
    );
}
