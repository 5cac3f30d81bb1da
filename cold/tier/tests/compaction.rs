//! Compaction of a compacted topic's remote tier: after the local cleaner has moved,
//! a remote pass rewrites the uploaded segments so that a reader from offset 0 (the
//! bucket, then local disk) sees what a fully local compacted log would hold, the
//! bucket holds fewer bytes, and the manifest stays contiguous; a crash between writing
//! the merged objects and committing the manifest leaves nothing visible, and the orphan
//! sweep removes what it left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_cache::{CacheConfig, ChunkCache, ReaderId};
use strata_log::{CompactionConfig, Log, LogConfig, ManualClock, OffsetMap, SLOT_BYTES};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, TopicId};
use strata_store::testing::S3Server;
use strata_store::{BlobStore, ErrorKind, Fault, FaultStore, ObjectBackend, Op};
use strata_tier::compaction::{RemoteCleanSettings, RemoteCleaner};
use strata_tier::{PartitionKey, RemotePartition, StoreSource, TieredLog};

const NOW: i64 = 1_000_000;

fn key() -> PartitionKey {
    PartitionKey {
        cluster_id: "c".into(),
        topic: "changelog".into(),
        topic_id: TopicId(uuid::Uuid::from_u128(77)),
        partition: 0,
    }
}

async fn cache(store: &Arc<dyn BlobStore>) -> Arc<ChunkCache> {
    let config = CacheConfig {
        chunk_size: 4 << 20,
        memory_capacity: 32 << 20,
        disk: None,
        ..CacheConfig::default()
    };
    Arc::new(
        ChunkCache::new(config, Arc::new(StoreSource(store.clone())))
            .await
            .unwrap(),
    )
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 512,
        compaction: Some(CompactionConfig {
            delete_retention_ms: 1 << 40,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio_ppm: 0,
        }),
        ..LogConfig::default()
    }
}

/// Writes `rounds` updates of keys 0..keys (values "r{round}-k{key}"), rolling.
fn write(log: &Log, round: u32, keys: u32) {
    for k in 0..keys {
        let recs = [NewRecord {
            key: Some(Bytes::from(format!("key-{k}"))),
            value: Some(Bytes::from(format!("r{round}-k{k}-{}", "x".repeat(200)))),
            headers: vec![],
            timestamp: NOW,
        }];
        log.append(&mut batch(&recs, Compression::None, None).to_vec(), 1)
            .unwrap();
    }
    log.force_roll().unwrap();
}

/// Cleans the local log, offloads what is cleaned, and lets local retention drop it.
async fn clean_offload_and_drop(log: &TieredLog, remote: &RemotePartition) {
    let local = log.local();
    local
        .clean(
            &mut OffsetMap::with_memory(SLOT_BYTES * 10_000),
            NOW,
            i64::MAX,
            &mut |_| {},
        )
        .unwrap();
    let bound = local.offload_bound(local.log_end_offset());
    for s in local.segments() {
        if !s.sealed || s.next_offset > bound || remote.is_offloaded(s.base_offset, s.next_offset) {
            continue;
        }
        if remote.end_offset().is_some_and(|e| e != s.base_offset) {
            continue;
        }
        let sealed = local.sealed_segment(s.base_offset).unwrap();
        remote.offload_sealed(&sealed, 1).await.unwrap();
    }
    let end = remote.end_offset().unwrap();
    local.advance_log_start(end).unwrap();
}

/// Every record a reader from offset 0 gets: remote below the local start, then local.
async fn read_all(log: &TieredLog, remote: &RemotePartition) -> Vec<(i64, String, String)> {
    let mut out = Vec::new();
    let mut at = remote.log_start_offset().unwrap();
    let end = log.local().log_end_offset();
    while at < end {
        let (data, next) = if at < log.local().log_start_offset() {
            let r = remote.read(at, 64 * 1024, ReaderId(1)).await.unwrap();
            (r.data, r.next_offset)
        } else {
            let r = log.local().read(at, 64 * 1024, None).unwrap();
            (r.data, r.next_offset)
        };
        assert!(next > at, "no progress at {at}");
        for b in strata_proto::batch::batches(&data) {
            let b = b.unwrap();
            b.validate_crc().unwrap();
            for r in b.records().unwrap().iter() {
                let r = r.unwrap();
                if r.offset >= at {
                    out.push((
                        r.offset,
                        String::from_utf8(r.key.unwrap().to_vec()).unwrap(),
                        String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                    ));
                }
            }
        }
        at = next;
    }
    out
}

fn settings() -> RemoteCleanSettings {
    RemoteCleanSettings {
        map_bytes: SLOT_BYTES * 10_000,
        segment_bytes: 64 * 1024,
        index_interval: 512,
        delete_retention_ms: 1 << 40,
        leader_epoch: 1,
        now_ms: NOW,
    }
}

async fn setup(
    store: Arc<dyn BlobStore>,
    dir: &std::path::Path,
) -> (Arc<TieredLog>, Arc<RemotePartition>) {
    let (log, _) = Log::open(dir, config(), Arc::new(ManualClock::new(NOW))).unwrap();
    let log = Arc::new(TieredLog::new(
        log,
        "changelog".into(),
        key().topic_id,
        0,
        None,
    ));
    let remote = Arc::new(
        RemotePartition::open(key(), store.clone(), cache(&store).await)
            .await
            .unwrap(),
    );
    log.attach_remote(remote.clone());
    // Three rounds of updates of 60 keys, each cleaned, offloaded and dropped locally:
    // the bucket then holds three versions of every key.
    for round in 0..3 {
        write(log.local(), round, 60);
        clean_offload_and_drop(&log, &remote).await;
    }
    // A fourth round stays local (not yet cleaned).
    write(log.local(), 3, 30);
    log.local()
        .clean(
            &mut OffsetMap::with_memory(SLOT_BYTES * 10_000),
            NOW,
            i64::MAX,
            &mut |_| {},
        )
        .unwrap();
    (log, remote)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_pass_leaves_what_a_local_compacted_log_would_hold() {
    let store = ObjectBackend::memory().into_dyn();
    let dir = tempfile::tempdir().unwrap();
    let (log, remote) = setup(store.clone(), &dir.path().join("p")).await;
    let before = remote.remote_bytes();
    let segments_before = remote.manifest_snapshot().segments().len();
    let stale = read_all(&log, &remote).await;
    assert!(
        stale.len() > 90,
        "the bucket still holds old versions: {}",
        stale.len()
    );

    // The objects the pass will replace are older than a second when it does.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut cleaner = RemoteCleaner::default();
    assert!(cleaner.due(&log));
    let out = cleaner.run(&log, settings()).await.unwrap().unwrap();
    assert!(
        out.segments_before > 0 && out.bytes_after < out.bytes_before,
        "{out:?}"
    );
    assert!(!cleaner.due(&log), "nothing new since");
    assert!(cleaner.run(&log, settings()).await.unwrap().is_none());
    assert!(
        remote.remote_bytes() * 2 < before,
        "{} -> {}",
        before,
        remote.remote_bytes()
    );
    assert!(remote.manifest_snapshot().segments().len() < segments_before);

    // One record per key, its latest, at its original offset, in offset order.
    let got = read_all(&log, &remote).await;
    let mut latest: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for (o, k, v) in &stale {
        latest.insert(k.clone(), (*o, v.clone()));
    }
    let mut want: Vec<(i64, String, String)> =
        latest.into_iter().map(|(k, (o, v))| (o, k, v)).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(got.len(), 60);
    // The manifest is contiguous and readable by a fresh broker.
    let fresh = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let segs = fresh.manifest_snapshot().segments().to_vec();
    for w in segs.windows(2) {
        assert_eq!(w[0].next_offset, w[1].base_offset);
    }
    assert_eq!(fresh.end_offset(), remote.end_offset());
    // The replaced objects are older than a one-second grace but were replaced within
    // it: the sweep leaves them (reads may still be on them), then removes them.
    let listed = store.list(&key().segments_prefix()).await.unwrap().len();
    assert_eq!(
        remote
            .cleanup_orphans(Duration::from_secs(1))
            .await
            .unwrap(),
        0
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let removed = remote
        .cleanup_orphans(Duration::from_secs(1))
        .await
        .unwrap();
    assert!(removed > 0);
    assert_eq!(
        store.list(&key().segments_prefix()).await.unwrap().len(),
        listed - removed
    );
    assert_eq!(read_all(&log, &remote).await, want);
}

/// Against a real S3 server (s3s-fs on loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_replacement_commits_leaves_nothing_visible() {
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    let backend = s3.store("cc").unwrap().into_dyn();
    let faults = FaultStore::new(backend.clone());
    let handle = faults.handle();
    let store: Arc<dyn BlobStore> = Arc::new(faults);
    let dir = tempfile::tempdir().unwrap();
    let (log, remote) = setup(store.clone(), &dir.path().join("p")).await;
    let before = read_all(&log, &remote).await;
    let objects = backend.list(&key().segments_prefix()).await.unwrap().len();
    // The merged objects go up; the manifest commit and the clean-up deletes do not (as
    // if the broker died between them).
    handle.inject(
        Fault::new(ErrorKind::Permanent)
            .op(Op::Put)
            .prefix(key().manifest_prefix()),
    );
    handle.inject(Fault::new(ErrorKind::Permanent).op(Op::Delete).times(1000));
    let mut cleaner = RemoteCleaner::default();
    assert!(cleaner.run(&log, settings()).await.is_err());
    handle.clear();
    let left = backend.list(&key().segments_prefix()).await.unwrap().len();
    assert!(
        left > objects,
        "merged objects were written: {objects} -> {left}"
    );
    // Nothing changed for a reader, here or on a fresh broker.
    assert_eq!(read_all(&log, &remote).await, before);
    let fresh = RemotePartition::open(key(), backend.clone(), cache(&backend).await)
        .await
        .unwrap();
    assert_eq!(fresh.manifest_snapshot(), remote.manifest_snapshot());
    // The orphans go with the sweep; the pass succeeds on retry.
    assert_eq!(
        fresh.cleanup_orphans(Duration::ZERO).await.unwrap(),
        left - objects
    );
    let out = cleaner.run(&log, settings()).await.unwrap().unwrap();
    assert!(out.segments_before > 0, "{out:?}");
    assert_eq!(read_all(&log, &remote).await.len(), 60);
}
