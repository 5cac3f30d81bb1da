//! The remote tier against a real local log and an in-memory object store: offloaded
//! segments read back byte for byte, manifests reload, fencing, retention, orphans.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_cache::{CacheConfig, ChunkCache, ReaderId};
use strata_log::{Log, LogConfig, ManualClock};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, TopicId};
use strata_store::{BlobStore, ObjectBackend};
use strata_tier::{PartitionKey, RemotePartition, StoreSource, TierError};

const MIB: u64 = 1024 * 1024;

fn key() -> PartitionKey {
    PartitionKey {
        cluster_id: "c".into(),
        topic: "t".into(),
        topic_id: TopicId(uuid::Uuid::from_u128(9)),
        partition: 0,
    }
}

async fn cache(store: &Arc<dyn BlobStore>) -> Arc<ChunkCache> {
    let config = CacheConfig {
        chunk_size: 4 * MIB,
        memory_capacity: 64 * MIB,
        disk: None,
        ..CacheConfig::default()
    };
    Arc::new(
        ChunkCache::new(config, Arc::new(StoreSource(store.clone())))
            .await
            .unwrap(),
    )
}

/// A log with many sealed segments of varied batches; returns it and its batches.
fn build_log(dir: &std::path::Path, batches: usize) -> (Log, Vec<Vec<u8>>) {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let config = LogConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(dir, config, clock).unwrap();
    let mut out = Vec::new();
    for i in 0..batches {
        let recs: Vec<NewRecord> = (0..(1 + i % 5))
            .map(|j| NewRecord {
                key: Some(Bytes::from(format!("k{i}-{j}"))),
                value: Some(Bytes::from(vec![(i * 7 + j) as u8; 100 + (i * 37) % 900])),
                headers: vec![],
                timestamp: 1_000_000 + (i as i64) * 10 + j as i64,
            })
            .collect();
        let codec = [Compression::None, Compression::Lz4, Compression::Zstd][i % 3];
        let mut b = batch(&recs, codec, None).to_vec();
        log.append(&mut b, 3).unwrap();
        out.push(b);
    }
    (log, out)
}

async fn offload_all(remote: &RemotePartition, log: &Log) -> usize {
    let mut n = 0;
    for s in log.segments().into_iter().filter(|s| s.sealed) {
        if remote.is_offloaded(s.base_offset, s.next_offset) {
            continue;
        }
        remote.offload(&s, None, 3).await.unwrap();
        n += 1;
    }
    n
}

#[tokio::test]
async fn offloaded_segments_read_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (log, batches) = build_log(dir.path(), 600);
    let store = ObjectBackend::memory().into_dyn();
    let remote = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let n = offload_all(&remote, &log).await;
    assert!(n >= 5, "several sealed segments offloaded ({n})");
    let end = remote.end_offset().unwrap();
    assert_eq!(remote.log_start_offset(), Some(0));
    // Every offset reads the same batches remotely as locally.
    let mut offset = 0;
    let mut remote_batches = Vec::new();
    while offset < end {
        let r = remote.read(offset, 50_000, ReaderId(1)).await.unwrap();
        let local = log.read(offset, 50_000, None).unwrap();
        assert_eq!(r.data, local.data, "offset {offset}");
        assert_eq!(r.next_offset, local.next_offset);
        for b in strata_proto::batch::batches(&r.data) {
            remote_batches.push(b.unwrap().as_bytes().to_vec());
        }
        offset = r.next_offset;
    }
    assert_eq!(&remote_batches[..], &batches[..remote_batches.len()]);
    // Reads in the middle of batches and with tiny max_bytes.
    for o in (0..end).step_by(13) {
        let r = remote.read(o, 1, ReaderId(2)).await.unwrap();
        let local = log.read(o, 1, None).unwrap();
        assert_eq!(r.data, local.data, "offset {o}");
    }
    assert!(matches!(
        remote.read(end, 100, ReaderId(1)).await,
        Err(TierError::NotRemote { .. })
    ));
    // Time lookups agree with the local log.
    for ts in (999_000..1_005_000).step_by(97) {
        let local = log
            .offset_for_timestamp(ts)
            .unwrap()
            .filter(|(o, _)| *o < end);
        let r = remote.offset_for_timestamp(ts, ReaderId(3)).await.unwrap();
        assert_eq!(r, local, "timestamp {ts}");
    }
}

#[tokio::test]
async fn manifests_reload_and_a_second_writer_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = build_log(dir.path(), 300);
    let store = ObjectBackend::memory().into_dyn();
    let a = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
    a.offload(&sealed[0], None, 3).await.unwrap();
    a.offload(&sealed[1], None, 3).await.unwrap();
    // A second leader loads the same manifest and commits the next segment.
    let b = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    assert_eq!(b.manifest_snapshot(), a.manifest_snapshot());
    b.offload(&sealed[2], None, 4).await.unwrap();
    // The first, unaware, is fenced: it cannot overwrite the newer commit.
    let e = a.offload(&sealed[2], None, 3).await.unwrap_err();
    assert!(matches!(e, TierError::Fenced { .. }), "{e}");
    assert!(a.is_fenced());
    let reloaded = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    assert_eq!(reloaded.end_offset(), Some(sealed[2].next_offset));
    assert_eq!(reloaded.manifest_snapshot().max_epoch(), 4);
    // The fenced upload left orphan objects; cleanup removes exactly those.
    let before = store.list("c").await.unwrap().len();
    let removed = reloaded.cleanup_orphans(Duration::ZERO).await.unwrap();
    assert_eq!(
        removed, 3,
        "the fenced upload's .log, .index and .timeindex"
    );
    assert_eq!(store.list("c").await.unwrap().len(), before - removed);
    // Everything named still reads.
    reloaded
        .read(sealed[2].base_offset, 1000, ReaderId(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn long_histories_load_from_snapshots_and_retention_moves_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = build_log(dir.path(), 3000);
    let store = ObjectBackend::memory().into_dyn();
    let remote = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let n = offload_all(&remote, &log).await;
    assert!(n > 30, "{n}");
    let reloaded = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    assert_eq!(reloaded.manifest_snapshot(), remote.manifest_snapshot());
    // Retention by size keeps the newest segments within the bound.
    let total = remote.remote_bytes();
    let removed = remote
        .apply_retention(2_000_000_000, None, Some(total / 2), 0)
        .await
        .unwrap();
    assert!(!removed.is_empty());
    // As Kafka: delete while what remains stays at or above the bound.
    let biggest = remote
        .manifest_snapshot()
        .segments()
        .iter()
        .map(|s| s.size_bytes)
        .max()
        .unwrap();
    assert!(remote.remote_bytes() >= total / 2 && remote.remote_bytes() < total / 2 + biggest);
    let start = remote.log_start_offset().unwrap();
    assert_eq!(start, removed.last().unwrap().next_offset);
    assert!(matches!(
        remote.read(start - 1, 100, ReaderId(1)).await,
        Err(TierError::NotRemote { .. })
    ));
    remote.read(start, 100, ReaderId(1)).await.unwrap();
    // The removed segments' objects are gone, the rest remain.
    for s in &removed {
        assert!(store.head(&key().segment_object(s, "log")).await.is_err());
    }
    let after = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    assert_eq!(after.log_start_offset(), Some(start));
    // Retention by time: everything older than the cutoff goes.
    let m = after.manifest_snapshot();
    let cutoff_ts = m.segments()[m.len() / 2].max_timestamp;
    after
        .apply_retention(cutoff_ts + 1000, Some(1000), None, 0)
        .await
        .unwrap();
    assert!(
        after
            .manifest_snapshot()
            .segments()
            .iter()
            .all(|s| s.max_timestamp >= cutoff_ts)
    );
}

#[tokio::test]
async fn a_new_leader_cut_elsewhere_offloads_past_the_segment_straddling_the_remote_end() {
    // The old leader offloads its first two segments.
    let dir = tempfile::tempdir().unwrap();
    let (old, _) = build_log(&dir.path().join("old"), 1000);
    let store = ObjectBackend::memory().into_dyn();
    let a = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let sealed: Vec<_> = old.segments().into_iter().filter(|s| s.sealed).collect();
    a.offload(&sealed[0], None, 3).await.unwrap();
    a.offload(&sealed[1], None, 3).await.unwrap();
    let end = sealed[1].next_offset;

    // The new leader holds the same batches (replicated) in segments cut elsewhere.
    let config = LogConfig {
        segment_bytes: 100 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let (new, _) = Log::open(
        &dir.path().join("new"),
        config,
        Arc::new(ManualClock::new(1_000_000)),
    )
    .unwrap();
    let mut offset = 0;
    while offset < old.log_end_offset() {
        let r = old.read(offset, 1, None).unwrap();
        new.append_replicated(&mut r.data.to_vec()).unwrap();
        offset = r.next_offset;
    }
    let b = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let hwm = new.log_end_offset();
    let (straddling, from) = strata_tier::straddling_segment(&new, &b, hwm)
        .expect("the new leader's segments are cut elsewhere");
    assert_eq!(from, end);
    assert!(straddling.base_offset < end && end < straddling.next_offset);
    // Without the re-cut nothing could go up.
    assert!(strata_tier::offload_candidates(&new, &b, hwm).is_empty());

    let tier = strata_tier::Tier::new(
        store.clone(),
        cache(&store).await,
        strata_tier::TierConfig::default(),
    );
    let n = tier.offload_ready(&new, &b, hwm, 4).await.unwrap();
    let last_sealed = new.segments().into_iter().rfind(|s| s.sealed).unwrap();
    let bounds: Vec<_> = new
        .segments()
        .iter()
        .map(|s| (s.base_offset, s.next_offset, s.sealed))
        .collect();
    assert!(
        n >= 2,
        "the re-cut part and the segments after it ({n}; end {end}; new {bounds:?}; remote end {:?})",
        b.end_offset()
    );
    assert_eq!(b.end_offset(), Some(last_sealed.next_offset));
    // The straddling local segment counts as offloaded: local retention may drop it.
    assert!(b.is_offloaded(straddling.base_offset, straddling.next_offset));
    // Nothing is left beside the partition directory.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".recut"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Every batch reads back remotely as the old leader wrote it (remote reads stop at
    // remote segment ends, which now differ from the old leader's: compare batches).
    let batches_of = |data: &[u8]| -> Vec<Vec<u8>> {
        strata_proto::batch::batches(data)
            .map(|b| b.unwrap().as_bytes().to_vec())
            .collect()
    };
    let (mut remote_batches, mut local_batches) = (Vec::new(), Vec::new());
    let mut offset = 0;
    while offset < last_sealed.next_offset {
        let r = b.read(offset, 30_000, ReaderId(1)).await.unwrap();
        remote_batches.extend(batches_of(&r.data));
        offset = r.next_offset;
    }
    let mut offset = 0;
    while offset < last_sealed.next_offset {
        let r = old
            .read(offset, 30_000, Some(last_sealed.next_offset))
            .unwrap();
        local_batches.extend(batches_of(&r.data));
        offset = r.next_offset;
    }
    assert_eq!(remote_batches.len(), local_batches.len());
    assert!(remote_batches == local_batches, "remote batches differ");
    // A reloaded manifest agrees.
    let reloaded = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    assert_eq!(reloaded.end_offset(), Some(last_sealed.next_offset));
}

/// Remote retention that expires every remote segment while the newest one is still on
/// local disk (local retention runs on its own clock): the manifest is empty but keeps
/// its start, the local copy is not offloaded again, and an Add below the start is
/// refused before anything is committed. (CI once saw the re-upload committed: every
/// later load of the manifest failed, and the partition never offloaded again.)
#[tokio::test]
async fn segments_below_an_expired_remote_start_are_never_uploaded_again() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = build_log(dir.path(), 300);
    let store = ObjectBackend::memory().into_dyn();
    let remote = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
    assert!(sealed.len() >= 3);
    remote.offload(&sealed[0], None, 3).await.unwrap();
    remote.offload(&sealed[1], None, 3).await.unwrap();
    let expired = sealed[1].next_offset;
    // Everything remote is older than the bound.
    let gone = remote
        .apply_retention(i64::MAX / 2, Some(1), None, 0)
        .await
        .unwrap();
    assert_eq!(gone.len(), 2);
    assert_eq!(remote.end_offset(), None);
    assert_eq!(remote.start_bound(), expired);
    // The local copies of the expired segments are not candidates; the next one is.
    let hwm = log.log_end_offset();
    let candidates = strata_tier::offload_candidates(&log, &remote, hwm);
    assert_eq!(
        candidates.first().map(|s| s.base_offset),
        Some(sealed[2].base_offset)
    );
    // Offloading an expired segment anyway is refused, and commits nothing.
    let e = remote.offload(&sealed[1], None, 3).await.unwrap_err();
    assert!(
        matches!(
            e,
            TierError::Manifest(strata_tier::ManifestError::BelowStart { .. })
        ),
        "{e}"
    );
    assert!(!remote.is_fenced());
    remote.offload(&sealed[2], None, 3).await.unwrap();
    let reloaded = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    assert_eq!(reloaded.manifest_snapshot(), remote.manifest_snapshot());
    assert_eq!(reloaded.log_start_offset(), Some(sealed[2].base_offset));
}

/// A bucket an older broker left with a delta adding a segment wholly below the remote
/// start (the bug above) still loads: that delta is skipped, the rest applies.
#[tokio::test]
async fn a_delta_adding_an_expired_segment_is_skipped_on_load() {
    let store = ObjectBackend::memory().into_dyn();
    let k = key();
    let seg = |base, next| strata_tier::RemoteSegment {
        base_offset: base,
        next_offset: next,
        size_bytes: 100,
        max_timestamp: 5,
        leader_epoch: 1,
        id: uuid::Uuid::new_v4(),
        has_producer_state: false,
        has_leader_epochs: false,
        has_txn_index: false,
        committed_at_ms: 0,
    };
    let deltas = [
        vec![strata_tier::ManifestOp::Add(seg(0, 10))],
        vec![strata_tier::ManifestOp::Add(seg(10, 20))],
        vec![strata_tier::ManifestOp::AdvanceStart {
            log_start_offset: 20,
        }],
        // What the old broker wrote: 10..20 again, below the start.
        vec![strata_tier::ManifestOp::Add(seg(10, 20))],
        vec![strata_tier::ManifestOp::Add(seg(20, 30))],
    ];
    for (i, ops) in deltas.into_iter().enumerate() {
        let d = strata_tier::Delta {
            seq: i as u64 + 1,
            ops,
        };
        strata_tier::manifest_store::put_delta(&store, &k, &d)
            .await
            .unwrap();
    }
    let m = strata_tier::manifest_store::load(&store, &k).await.unwrap();
    assert_eq!(m.seq(), 5);
    assert_eq!((m.log_start_offset(), m.end_offset()), (Some(20), Some(30)));
    // One delta may expire everything and start again past it.
    let d = strata_tier::manifest_store::prepare(
        &m,
        vec![
            strata_tier::ManifestOp::AdvanceStart {
                log_start_offset: 40,
            },
            strata_tier::ManifestOp::Add(seg(40, 50)),
        ],
    )
    .unwrap();
    let mut m2 = m.clone();
    m2.apply_delta(&d).unwrap();
    assert_eq!(
        (m2.log_start_offset(), m2.end_offset()),
        (Some(40), Some(50))
    );
    // And one straddling the start of an empty manifest keeps the start.
    let d = strata_tier::manifest_store::prepare(
        &m,
        vec![
            strata_tier::ManifestOp::AdvanceStart {
                log_start_offset: 35,
            },
            strata_tier::ManifestOp::Add(seg(30, 40)),
        ],
    )
    .unwrap();
    let mut m3 = m.clone();
    m3.apply_delta(&d).unwrap();
    assert_eq!(
        (m3.log_start_offset(), m3.end_offset()),
        (Some(35), Some(40))
    );
}

/// A log that restarts empty at the remote end (a broker with a fresh data dir, a topic
/// recovered from the bucket) continues the log that offloaded it: a retry of an
/// idempotent batch that is only in the bucket is still a duplicate, and the leader
/// epoch of the last remote batches is in force at the remote end.
#[tokio::test]
async fn a_log_restarted_at_the_remote_end_keeps_the_producers_and_epochs_of_the_bucket() {
    use strata_proto::batch::build::ProducerFields;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let config = LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(&dir.path().join("a"), config.clone(), clock.clone()).unwrap();
    let producer_batch = |seq: i32| {
        let recs = [NewRecord::value(vec![seq as u8; 900], 1_000_000)];
        let fields = ProducerFields {
            producer_id: 77,
            producer_epoch: 0,
            base_sequence: seq,
        };
        batch(&recs, Compression::None, Some(fields)).to_vec()
    };
    // Epoch 3, then epoch 5 from the middle of the log on.
    for seq in 0..60 {
        log.append(&mut producer_batch(seq), if seq < 30 { 3 } else { 5 })
            .unwrap();
    }
    log.force_roll().unwrap();
    let store = ObjectBackend::memory().into_dyn();
    let remote = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
    assert!(sealed.len() > 2);
    for s in &sealed {
        let seg = log.sealed_segment(s.base_offset).unwrap();
        let rs = remote.offload_sealed(&seg, 5).await.unwrap();
        assert!(rs.has_producer_state && rs.has_leader_epochs);
    }
    let end = remote.end_offset().unwrap();
    assert_eq!(end, 60);

    // A reloaded manifest keeps the flags.
    let reopened = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    let state = reopened.end_state().await.unwrap();
    assert!(state.producer_snapshot.is_some());
    let epochs = state.leader_epochs.clone().unwrap();
    assert_eq!(epochs.latest_epoch(), Some(5));

    let (fresh, _) = Log::open(&dir.path().join("b"), config, clock).unwrap();
    fresh.restore_at(end, &state).unwrap();
    assert_eq!((fresh.log_start_offset(), fresh.log_end_offset()), (60, 60));
    assert_eq!(fresh.latest_epoch(), Some(5));
    assert_eq!(fresh.end_offset_for_epoch(5), Some((5, 60)));
    // The last batch (sequence 59, offset 59) is only in the bucket: its retry is a
    // duplicate answered with its original offset; the next sequence appends.
    let dup = fresh.append(&mut producer_batch(59), 5).unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.first_offset, 59);
    let next = fresh.append(&mut producer_batch(60), 5).unwrap();
    assert!(!next.duplicate);
    assert_eq!(next.first_offset, 60);
    // A gap is still a gap.
    assert!(fresh.append(&mut producer_batch(70), 5).is_err());
}

/// The Parquet conversion's remote source reads, from the batch holding any offset of
/// an offloaded segment, exactly the bytes a local read of that range returns.
#[tokio::test]
async fn a_remote_segment_source_reads_from_the_batch_holding_the_cursor() {
    use strata_parquet::ByteSource;
    use strata_tier::parquet_source::RemoteSegmentSource;

    let dir = tempfile::tempdir().unwrap();
    let (log, _) = build_log(dir.path(), 300);
    let store = ObjectBackend::memory().into_dyn();
    let remote = RemotePartition::open(key(), store.clone(), cache(&store).await)
        .await
        .unwrap();
    assert!(offload_all(&remote, &log).await >= 2);
    let segments = remote.manifest_snapshot().segments().to_vec();
    for seg in &segments[..2] {
        for from in (seg.base_offset..seg.next_offset).step_by(7) {
            let src = RemoteSegmentSource::open(store.clone(), None, &remote, seg, from)
                .await
                .unwrap();
            let want = log.read_range(from, seg.next_offset).unwrap();
            assert_eq!(src.len(), want.len() as u64, "from {from}");
            let mut got = Vec::new();
            let mut pos = 0;
            while pos < src.len() {
                let n = (src.len() - pos).min(5000) as usize;
                got.extend_from_slice(&src.read_at(pos, n).await.unwrap());
                pos += n as u64;
            }
            assert_eq!(got, want, "from {from}");
        }
    }
}
