//! Transactions through the tier (issue 17 item 5), against s3s-fs: segments go up only
//! below the last stable offset, each with its aborted-transaction index, and a
//! read_committed reader from offset 0 of a partition whose early segments are only in
//! the bucket gets the same aborted transactions, and so the same committed records, as
//! from a log that never left local disk.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use strata_cache::{CacheConfig, ChunkCache, ReaderId};
use strata_log::txn_index::AbortedTxn;
use strata_log::{Log, LogConfig, ManualClock};
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::control::{Marker, MarkerKind};
use strata_proto::{Compression, TopicId};
use strata_store::BlobStore;
use strata_store::testing::S3Server;
use strata_tier::{PartitionKey, RemotePartition, StoreSource, TieredLog};

const NOW: i64 = 1_000_000;

fn key() -> PartitionKey {
    PartitionKey {
        cluster_id: "c".into(),
        topic: "ledger".into(),
        topic_id: TopicId(uuid::Uuid::from_u128(78)),
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

/// A partition's log in `dir`, not tiered yet, with small segments.
fn open_log(dir: &std::path::Path, segment_bytes: u64) -> TieredLog {
    let config = LogConfig {
        segment_bytes,
        index_interval_bytes: 512,
        ..LogConfig::default()
    };
    let (local, _) = Log::open(&dir.join("p"), config, Arc::new(ManualClock::new(NOW))).unwrap();
    TieredLog::new(local, "ledger".into(), key().topic_id, 0, None)
}

/// Producer `pid`'s next sequence number.
fn next_seq(seq: &mut [i32; 4], pid: usize) -> i32 {
    seq[pid] += 1;
    seq[pid] - 1
}

/// A batch of one record `value` from producer `pid`; transactional when `txn`.
fn record(pid: i64, seq: i32, value: &str, txn: bool) -> Vec<u8> {
    let recs = [NewRecord {
        key: Some(Bytes::from(format!("k-{value}"))),
        value: Some(Bytes::from(format!("{value}-{}", "x".repeat(300)))),
        headers: vec![],
        timestamp: NOW,
    }];
    let mut b = batch(
        &recs,
        Compression::None,
        Some(ProducerFields {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
        }),
    )
    .to_vec();
    if txn {
        strata_proto::batch::set_transactional(&mut b);
    }
    b
}

fn end(log: &Log, pid: i64, kind: MarkerKind) {
    let m = Marker {
        kind,
        producer_id: pid,
        producer_epoch: 0,
        coordinator_epoch: 0,
        timestamp: NOW,
    };
    log.append_marker(&m, 1).unwrap();
}

/// What a read_committed consumer keeps of `[from, to)` (Kafka's consumer logic): the
/// values of data batches, skipping control batches and the batches of a producer from
/// an aborted transaction's first offset up to its marker.
/// (Reads below the local start go to the remote partition itself: this log has no
/// `Tier` and its read pool.)
async fn read_committed(
    log: &TieredLog,
    remote: &RemotePartition,
    from: i64,
    to: i64,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        let data = if log.waits_on_remote(at) {
            remote.read(at, 8 * 1024, ReaderId(1)).await.unwrap().data
        } else {
            log.read(at, 8 * 1024, Some(to), 1).await.unwrap()
        };
        let end = strata_proto::batch::batches(&data)
            .last()
            .unwrap()
            .unwrap()
            .next_offset();
        let aborted = log.aborted_transactions(at, end).await.unwrap();
        let (values, _, next) = consume(&data, &aborted);
        out.extend(values);
        at = next;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_from_the_bucket_sees_exactly_the_committed_records() {
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    let store: Arc<dyn BlobStore> = s3.store("txn").unwrap().into_dyn();
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(dir.path(), 2048);
    let remote = Arc::new(
        RemotePartition::open(key(), store.clone(), cache(&store).await)
            .await
            .unwrap(),
    );
    log.attach_remote(remote.clone());

    // Rounds of three producers interleaved: 1 commits, 2 aborts, 3 writes plain
    // (idempotent, no transaction). Producer 2's aborts span segments.
    let mut expected = Vec::new();
    let mut seq = [0i32; 4];
    let mut next = |pid: usize| next_seq(&mut seq, pid);
    for round in 0..12 {
        for i in 0..2 {
            let v = format!("c{round}.{i}");
            log.local()
                .append(&mut record(1, next(1), &v, true), 1)
                .unwrap();
            expected.push(v);
            let v = format!("a{round}.{i}");
            log.local()
                .append(&mut record(2, next(2), &v, true), 1)
                .unwrap();
            let v = format!("p{round}.{i}");
            log.local()
                .append(&mut record(3, next(3), &v, false), 1)
                .unwrap();
            expected.push(v);
        }
        end(log.local(), 1, MarkerKind::Commit);
        end(log.local(), 2, MarkerKind::Abort);
    }
    // A transaction still open at the end: the last stable offset stops there.
    let open_first = log.local().log_end_offset();
    log.local()
        .append(&mut record(1, next(1), "open", true), 1)
        .unwrap();
    log.local().force_roll().unwrap();
    let hw = log.local().log_end_offset();
    let lso = log.last_stable_offset(hw);
    assert_eq!(lso, open_first);
    let all_aborts = log.local().aborted_transactions(0, lso);
    assert_eq!(all_aborts.len(), 12);

    // Offload what is below the offload bound (the LSO), then drop it locally.
    let bound = log.local().offload_bound(hw);
    assert_eq!(bound, lso, "nothing at or above the LSO goes up");
    let mut uploaded = 0;
    for s in log.local().segments() {
        if !s.sealed || s.next_offset > bound {
            continue;
        }
        let sealed = log.local().sealed_segment(s.base_offset).unwrap();
        let rs = remote.offload_sealed(&sealed, 1).await.unwrap();
        assert_eq!(rs.has_txn_index, !sealed.aborted.is_empty());
        uploaded += 1;
    }
    assert!(uploaded > 3, "{uploaded} segments uploaded");
    let remote_end = remote.end_offset().unwrap();
    assert!(remote_end <= lso && remote_end > 0);
    assert!(
        log.local()
            .segments()
            .iter()
            .any(|s| s.base_offset < lso && s.next_offset > lso),
        "the segment holding the open transaction stays local"
    );
    log.local().advance_log_start(remote_end).unwrap();
    assert!(log.waits_on_remote(0));

    // The index objects are in the bucket, in Kafka's format.
    let manifest = remote.manifest_snapshot();
    let with_index: Vec<_> = manifest
        .segments()
        .iter()
        .filter(|s| s.has_txn_index)
        .collect();
    assert!(!with_index.is_empty());
    let mut from_bucket = BTreeSet::new();
    for s in &with_index {
        let k = remote.key().segment_object(s, "txnindex");
        let bytes = store.get(&k).await.unwrap();
        for e in strata_log::txn_index::decode(&bytes).unwrap() {
            from_bucket.insert(e.last_offset);
        }
    }

    // From the bucket then local disk, the same aborted transactions as the whole log
    // had, for any range.
    let got = log.aborted_transactions(0, lso).await.unwrap();
    assert_eq!(got, all_aborts);
    for e in &got {
        if e.last_offset < remote_end {
            assert!(
                from_bucket.contains(&e.last_offset),
                "{e:?} is in the bucket"
            );
        }
    }
    for from in [0, remote_end / 2, remote_end - 1, remote_end, lso - 1] {
        let want: Vec<AbortedTxn> = all_aborts
            .iter()
            .filter(|a| a.last_offset >= from)
            .copied()
            .collect();
        assert_eq!(
            log.aborted_transactions(from, lso).await.unwrap(),
            want,
            "from {from}"
        );
    }

    // A read_committed reader from 0 sees exactly the committed and plain records.
    assert_eq!(read_committed(&log, &remote, 0, lso).await, expected);
    // A fresh remote partition (another broker, empty index cache) answers the same.
    let fresh = Arc::new(
        RemotePartition::open(key(), store.clone(), cache(&store).await)
            .await
            .unwrap(),
    );
    let (part, _) = fresh
        .aborted_transactions(0, lso, remote_end)
        .await
        .unwrap();
    assert_eq!(
        part,
        all_aborts
            .iter()
            .filter(|a| a.last_offset < remote_end)
            .copied()
            .collect::<Vec<_>>()
    );
}

/// What a consumer keeps of the batches in `data` (Kafka's consumer logic, given the
/// aborted transactions of the range): the values of its data batches outside aborted
/// transactions; and the aborted data batches it was sent.
fn consume(data: &[u8], aborted: &[AbortedTxn]) -> (Vec<String>, usize, i64) {
    let (mut values, mut aborted_sent, mut next) = (Vec::new(), 0, -1);
    for b in strata_proto::batch::batches(data) {
        let b = b.unwrap();
        let h = b.header();
        next = b.next_offset();
        if h.is_control() {
            continue;
        }
        if h.is_transactional()
            && aborted.iter().any(|a| {
                a.producer_id == h.producer_id
                    && a.first_offset <= h.base_offset
                    && h.base_offset < a.last_offset
            })
        {
            aborted_sent += 1;
            continue;
        }
        for r in b.records().unwrap().iter() {
            let v = String::from_utf8(r.unwrap().value.unwrap().to_vec()).unwrap();
            values.push(v.split('-').next().unwrap().to_string());
        }
    }
    (values, aborted_sent, next)
}

/// A read_committed fetch of the local log leaves out aborted transactions' batches and
/// keeps the markers, in any piece and limit sizes: a consumer reading the whole log
/// through it gets exactly the committed and plain records, in order, and is sent an
/// aborted batch only when a read found nothing else below the last stable offset
/// (then the last one, so it moves on).
#[test]
fn read_committed_reads_leave_out_aborted_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(dir.path(), 8192);
    let mut seq = [0i32; 4];
    let mut next = |pid: usize| next_seq(&mut seq, pid);
    let mut expected = Vec::new();
    for round in 0..6 {
        // Producer 2 aborts a long transaction (it spans segments), interleaved with
        // producer 1's committed one and producer 3's plain records.
        for i in 0..30 {
            let v = format!("a{round}.{i}");
            log.local()
                .append(&mut record(2, next(2), &v, true), 1)
                .unwrap();
            if i % 10 == 0 {
                let v = format!("c{round}.{i}");
                log.local()
                    .append(&mut record(1, next(1), &v, true), 1)
                    .unwrap();
                expected.push(v);
                let v = format!("p{round}.{i}");
                log.local()
                    .append(&mut record(3, next(3), &v, false), 1)
                    .unwrap();
                expected.push(v);
            }
        }
        end(log.local(), 2, MarkerKind::Abort);
        end(log.local(), 1, MarkerKind::Commit);
    }
    // At the end, producer 2 aborts again, but producer 1 opens a transaction before
    // the abort marker: the last stable offset stops in the middle of aborted data
    // whose marker is above it.
    let tail_first = log.local().log_end_offset();
    for i in 0..5 {
        let v = format!("z{i}");
        log.local()
            .append(&mut record(2, next(2), &v, true), 1)
            .unwrap();
    }
    let open_first = log.local().log_end_offset();
    log.local()
        .append(&mut record(1, next(1), "open", true), 1)
        .unwrap();
    end(log.local(), 2, MarkerKind::Abort);
    let hw = log.local().log_end_offset();
    let lso = log.last_stable_offset(hw);
    assert_eq!(lso, open_first);

    for (max_bytes, piece) in [
        (1, 1),
        (700, 700),
        (4096, 1024),
        (64 << 10, 8 << 10),
        (1 << 20, 1 << 20),
    ] {
        let mut got = Vec::new();
        let mut at = 0;
        let mut fallbacks = 0;
        while at < lso {
            let pieces = log.read_local_committed(at, max_bytes, lso, piece).unwrap();
            assert!(
                !pieces.is_empty(),
                "no progress at {at} ({max_bytes}/{piece})"
            );
            let data: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
            let aborted = log.local().aborted_transactions(at, lso);
            let (values, aborted_sent, next) = consume(&data, &aborted);
            if aborted_sent > 0 {
                // Only the last aborted batch, and only when nothing else was found.
                assert_eq!((aborted_sent, values.len()), (1, 0), "at {at}");
                fallbacks += 1;
            }
            assert!(next > at);
            got.extend(values);
            at = next;
        }
        assert_eq!(got, expected, "{max_bytes}/{piece}");
        assert_eq!(at, lso);
        // The tail's aborted batches sit below the LSO without their marker.
        assert!(fallbacks >= 1 && tail_first < lso, "{max_bytes}/{piece}");
    }
}
