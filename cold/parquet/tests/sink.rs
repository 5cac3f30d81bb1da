//! The object-store sink: files read back with the parquet crate's own reader, exactly
//! once per offset range across crashes and retries, retention, and the key layout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use strata_parquet::sink::utc_date;
use strata_parquet::{
    ConvertError, ConvertOptions, ParquetLayout, ParquetSink, SinkError, WrittenFile, scan_markers,
};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields};
use strata_store::{BlobStore, ErrorKind, Fault, FaultStore, ObjectBackend, Op};

const TS0: i64 = 1_700_000_000_000;
const TOPIC: &str = "orders";

fn sink(store: Arc<dyn BlobStore>) -> ParquetSink {
    ParquetSink::new(
        store,
        ParquetLayout::new("pre/c1"),
        ConvertOptions::new("ignored", 0),
    )
}

/// A segment of a few batches of `codec` starting at `base`, some with a producer id;
/// returns it, the rows it should become and the offset after it.
fn segment(codec: Compression, base: i64, partition: i32, seed: u64) -> (Vec<u8>, Vec<Row>, i64) {
    let mut seg = SegmentBuilder::starting_at(base);
    let mut want = Vec::new();
    for b in 0..3u64 {
        let records = varied_records(
            5 + (b as usize * 13) % 20,
            seed * 10 + b,
            TS0 + (seed * 10 + b) as i64 * 1000,
        );
        let producer = (b == 1).then_some(ProducerFields {
            producer_id: 9000 + seed as i64,
            producer_epoch: 1,
            base_sequence: 10 * b as i32,
        });
        let first = seg.append_records(&records, codec, producer);
        for (i, r) in records.iter().enumerate() {
            let p = producer.map(|p| (p.producer_id, p.base_sequence + i as i32));
            want.push(expected_row(partition, first + i as i64, r, p));
        }
    }
    (seg.bytes, want, seg.next_offset)
}

/// Three consecutive segments of `codec` from `base`.
fn three_segments(codec: Compression, base: i64, partition: i32) -> Vec<(Vec<u8>, Vec<Row>)> {
    let mut next = base;
    (0..3)
        .map(|i| {
            let (bytes, rows, after) = segment(codec, next, partition, i + 1);
            next = after;
            (bytes, rows)
        })
        .collect()
}

fn backends() -> Vec<(Arc<dyn BlobStore>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    vec![
        (ObjectBackend::memory().into_dyn(), None),
        (
            ObjectBackend::local(dir.path()).unwrap().into_dyn(),
            Some(dir),
        ),
    ]
}

#[tokio::test]
async fn every_codec_round_trips_through_the_store_and_the_parquet_reader() {
    for (store, _dir) in backends() {
        for (p, codec) in CODECS.into_iter().enumerate() {
            let p = p as i32;
            let s = sink(store.clone());
            let segs = three_segments(codec, 1_000, p);
            let mut written: Vec<WrittenFile> = Vec::new();
            for (bytes, _) in &segs {
                written.push(s.write_segment(TOPIC, p, bytes).await.unwrap().unwrap());
            }

            // Each file read back independently of the converter.
            let mut all = Vec::new();
            for ((_, want), w) in segs.iter().zip(&written) {
                let body = store.get(&w.key).await.unwrap();
                assert_eq!(body.len() as u64, w.bytes);
                let got = rows(&body);
                assert_eq!(got.len() as u64, w.rows, "{codec:?}");
                assert_eq!(&got, want, "{codec:?} {store}");
                assert_eq!(w.first_offset, want[0].offset);
                assert_eq!(w.last_offset, want.last().unwrap().offset);
                assert_eq!(
                    w.min_timestamp,
                    want.iter().map(|r| r.timestamp).min().unwrap()
                );
                assert_eq!(
                    w.max_timestamp,
                    want.iter().map(|r| r.timestamp).max().unwrap()
                );
                all.extend(got);
            }
            let records: usize = segs.iter().map(|(_, r)| r.len()).sum();
            assert_eq!(all.len(), records);
            assert_eq!(all[0].offset, 1_000);
            assert!(all.windows(2).all(|w| w[1].offset == w[0].offset + 1));
            assert!(
                written
                    .windows(2)
                    .all(|w| w[1].first_offset == w[0].last_offset + 1)
            );

            // The manifest names exactly those files, in offset order.
            let files = s.files(TOPIC, p).await.unwrap();
            let keys: Vec<&str> = files.iter().map(|f| f.key.as_str()).collect();
            let want_keys: Vec<&str> = written.iter().map(|w| w.key.as_str()).collect();
            assert_eq!(keys, want_keys);
            assert_eq!(files[2].rows, written[2].rows);
            let m = s.manifest(TOPIC, p).await.unwrap();
            assert_eq!(m.next_offset, Some(written[2].last_offset + 1));
        }
        // Nothing but files and manifests: no temporary objects left behind.
        let all = store.list("").await.unwrap();
        assert_eq!(all.len(), CODECS.len() * 4, "{store}: {all:?}");
        assert!(
            all.iter()
                .all(|m| m.path.ends_with(".parquet") || m.path.ends_with("/_manifest.json"))
        );

        // The topic listing merges the partitions.
        let s = sink(store.clone());
        assert_eq!(s.partitions(TOPIC).await.unwrap(), vec![0, 1, 2, 3, 4]);
        let merged = s.topic_files(TOPIC).await.unwrap();
        assert_eq!(merged.len(), CODECS.len() * 3);
        assert!(
            merged
                .windows(2)
                .all(|w| (w[0].partition, w[0].entry.first_offset)
                    < (w[1].partition, w[1].entry.first_offset))
        );
        assert!(s.topic_files("other").await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_crash_between_the_file_and_the_manifest_writes_no_duplicate() {
    for (inner, _dir) in backends() {
        let faults = FaultStore::new(inner.clone());
        let handle = faults.handle();
        let store: Arc<dyn BlobStore> = Arc::new(faults);
        let s = sink(store.clone());
        let segs = three_segments(Compression::Lz4, 0, 0);
        let (a, b, c) = (&segs[0].0, &segs[1].0, &segs[2].0);
        let manifest = s.layout().manifest_key(TOPIC, 0);

        s.write_segment(TOPIC, 0, a).await.unwrap().unwrap();

        // B's file goes up, its manifest update fails: a crash in between.
        handle.inject(
            Fault::new(ErrorKind::Permanent)
                .op(Op::Put)
                .prefix(manifest.clone()),
        );
        let e = s.write_segment(TOPIC, 0, b).await.unwrap_err();
        assert!(matches!(e, SinkError::Store(_)), "{e}");
        assert_eq!(parquet_objects(&inner).await.len(), 2);
        assert_eq!(s.files(TOPIC, 0).await.unwrap().len(), 1);

        // C cannot go before B.
        let e = s.write_segment(TOPIC, 0, c).await.unwrap_err();
        let b_first = segs[1].1[0].offset;
        let c_first = segs[2].1[0].offset;
        assert!(
            matches!(e, SinkError::NotContiguous { expected, got } if expected == b_first && got == c_first),
            "{e}"
        );
        assert!(!e.is_retryable());

        // The retry of B overwrites the same object, then C.
        let wb = s.write_segment(TOPIC, 0, b).await.unwrap().unwrap();
        s.write_segment(TOPIC, 0, c).await.unwrap().unwrap();

        // A manifest update applied whose answer was lost: the retry skips.
        handle.inject(
            Fault::new(ErrorKind::Timeout)
                .op(Op::Put)
                .prefix(manifest.clone())
                .after_call(),
        );
        let (d, _, _) = segment(Compression::Lz4, segs[2].1.last().unwrap().offset + 1, 0, 9);
        assert!(s.write_segment(TOPIC, 0, &d).await.is_err());
        assert_eq!(s.write_segment(TOPIC, 0, &d).await.unwrap(), None);

        // Re-runs of everything already done are skipped.
        for (seg, _) in &segs {
            assert_eq!(s.write_segment(TOPIC, 0, seg).await.unwrap(), None);
        }

        // One object per range, every offset exactly once.
        let objects = parquet_objects(&inner).await;
        assert_eq!(objects.len(), 4, "{objects:?}");
        let files = s.files(TOPIC, 0).await.unwrap();
        let mut keys: Vec<String> = files.iter().map(|f| f.key.clone()).collect();
        keys.sort();
        assert_eq!(keys, objects);
        assert_eq!(files[1], {
            let mut e = files[1].clone();
            e.key = wb.key.clone();
            e
        });
        let mut offsets = Vec::new();
        for f in &files {
            offsets.extend(
                rows(&inner.get(&f.key).await.unwrap())
                    .iter()
                    .map(|r| r.offset),
            );
        }
        let end = files.last().unwrap().last_offset;
        assert_eq!(offsets, (0..=end).collect::<Vec<_>>());
        assert!(
            files
                .windows(2)
                .all(|w| w[1].first_offset == w[0].last_offset + 1)
        );
    }
}

#[tokio::test]
async fn overlapping_and_gapped_segments_are_refused() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let (a, _, after_a) = segment(Compression::None, 100, 0, 1);
    // The first segment of an empty manifest may start anywhere.
    s.write_segment(TOPIC, 0, &a).await.unwrap().unwrap();
    let (gap, _, _) = segment(Compression::None, after_a + 5, 0, 2);
    let e = s.write_segment(TOPIC, 0, &gap).await.unwrap_err();
    assert!(
        matches!(e, SinkError::NotContiguous { expected, got } if expected == after_a && got == after_a + 5)
    );
    // Straddling the end: part done, part not.
    let (overlap, _, _) = segment(Compression::None, after_a - 3, 0, 3);
    let e = s.write_segment(TOPIC, 0, &overlap).await.unwrap_err();
    assert!(matches!(e, SinkError::NotContiguous { got, .. } if got == after_a - 3));
    // Not a segment at all.
    let e = s.write_segment(TOPIC, 0, &[]).await.unwrap_err();
    assert!(matches!(e, SinkError::Convert(_)), "{e}");
    assert_eq!(parquet_objects(&store).await.len(), 1);
}

#[tokio::test]
async fn a_segment_of_control_records_writes_no_file_but_advances() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let (a, _, after_a) = segment(Compression::Gzip, 0, 0, 1);
    s.write_segment(TOPIC, 0, &a).await.unwrap().unwrap();

    // A committed transaction's marker alone, then an aborted transaction with its marker.
    let mut ctl = SegmentBuilder::starting_at(after_a);
    ctl.append(&control_batch(77, COMMIT));
    ctl.append(&txn_batch(78, 0, &["x", "y"], Compression::Zstd));
    ctl.append(&control_batch(78, ABORT));
    assert_eq!(s.write_segment(TOPIC, 0, &ctl.bytes).await.unwrap(), None);
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(m.next_offset, Some(ctl.next_offset));
    assert_eq!(m.files.len(), 1);
    assert_eq!(parquet_objects(&store).await.len(), 1);

    // The next segment follows the markers.
    let (b, want, _) = segment(Compression::Gzip, ctl.next_offset, 0, 2);
    let w = s.write_segment(TOPIC, 0, &b).await.unwrap().unwrap();
    assert_eq!(w.first_offset, ctl.next_offset);
    assert_eq!(rows(&store.get(&w.key).await.unwrap()), want);
    // And the segment before it is still refused out of order, or skipped when re-run.
    assert_eq!(s.write_segment(TOPIC, 0, &ctl.bytes).await.unwrap(), None);
}

#[tokio::test]
async fn expire_deletes_exactly_the_files_below_the_log_start() {
    for (store, _dir) in backends() {
        let s = sink(store.clone());
        let segs = three_segments(Compression::Snappy, 0, 2);
        let mut written = Vec::new();
        for (seg, _) in &segs {
            written.push(s.write_segment(TOPIC, 2, seg).await.unwrap().unwrap());
        }
        // Nothing is wholly below the first file's last offset.
        assert_eq!(s.expire(TOPIC, 2, written[0].last_offset).await.unwrap(), 0);
        assert_eq!(parquet_objects(&store).await.len(), 3);
        // Inside the second file: only the first goes.
        let mid = written[1].first_offset + 1;
        assert_eq!(s.expire(TOPIC, 2, mid).await.unwrap(), 1);
        assert_eq!(
            parquet_objects(&store).await,
            vec![written[1].key.clone(), written[2].key.clone()]
        );
        let files = s.files(TOPIC, 2).await.unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].key, written[1].key);
        // Exactly at the start of the third: the second goes; running again does nothing.
        assert_eq!(
            s.expire(TOPIC, 2, written[2].first_offset).await.unwrap(),
            1
        );
        assert_eq!(
            s.expire(TOPIC, 2, written[2].first_offset).await.unwrap(),
            0
        );
        assert_eq!(parquet_objects(&store).await, vec![written[2].key.clone()]);
        // Progress is kept: the next segment still has to follow the third.
        let m = s.manifest(TOPIC, 2).await.unwrap();
        assert_eq!(m.next_offset, Some(written[2].last_offset + 1));
        let (d, _, _) = segment(Compression::Snappy, written[2].last_offset + 1, 2, 7);
        s.write_segment(TOPIC, 2, &d).await.unwrap().unwrap();
        // Everything.
        assert_eq!(s.expire(TOPIC, 2, i64::MAX).await.unwrap(), 2);
        assert!(parquet_objects(&store).await.is_empty());
        assert!(s.files(TOPIC, 2).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn keys_follow_the_layout_with_the_first_records_date() {
    // 2024-02-29T23:59:59Z: the first record. The second is a day earlier (the minimum),
    // the third the next day (the maximum): the key takes the first record's day.
    let first = 1_709_251_199_000;
    let records = vec![
        NewRecord::value("a", first),
        NewRecord::value("b", first - 86_400_000),
        NewRecord::value("c", first + 2_000),
    ];
    assert_eq!(utc_date(first), "2024-02-29");
    for (store, _dir) in backends() {
        let s = ParquetSink::new(
            store.clone(),
            ParquetLayout::new(""),
            ConvertOptions::new("x", 0),
        );
        let mut seg = SegmentBuilder::starting_at(41);
        seg.append_records(&records, Compression::Zstd, None);
        let w = s
            .write_segment("t.v1_x-y", 12, &seg.bytes)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            w.key,
            "parquet/topic=t.v1_x-y/partition=12/date=2024-02-29/00000000000000000041-00000000000000000043.parquet"
        );
        assert_eq!(
            (w.min_timestamp, w.max_timestamp),
            (first - 86_400_000, first + 2_000)
        );
        assert_eq!(parquet_objects(&store).await, vec![w.key.clone()]);
        assert!(
            store
                .head("parquet/topic=t.v1_x-y/partition=12/_manifest.json")
                .await
                .is_ok()
        );
        // The file's own metadata names the topic and partition of the call.
        let (_, meta) = read(&store.get(&w.key).await.unwrap());
        let kv = kv(&meta);
        assert_eq!(kv["strata.topic"], "t.v1_x-y");
        assert_eq!(kv["strata.partition"], "12");
    }
}

#[tokio::test]
async fn a_concurrent_writer_is_refused_by_the_conditional_manifest_update() {
    let inner = ObjectBackend::memory().into_dyn();
    let slow = FaultStore::new(inner.clone());
    slow.handle()
        .delay(Some(Op::Put), Duration::from_millis(300));
    let slow = sink(Arc::new(slow));
    let fast = sink(inner.clone());
    let segs = three_segments(Compression::None, 0, 0);
    fast.write_segment(TOPIC, 0, &segs[0].0).await.unwrap();

    // Both read the manifest after A; the fast one commits B first.
    let (a, b) = tokio::join!(
        slow.write_segment(TOPIC, 0, &segs[1].0),
        fast.write_segment(TOPIC, 0, &segs[1].0)
    );
    assert!(b.unwrap().is_some());
    let e = a.unwrap_err();
    assert!(matches!(e, SinkError::Conflict { .. }), "{e}");
    assert!(e.is_retryable());
    // Its retry sees B done.
    assert_eq!(
        slow.write_segment(TOPIC, 0, &segs[1].0).await.unwrap(),
        None
    );
    assert_eq!(fast.files(TOPIC, 0).await.unwrap().len(), 2);
    assert_eq!(parquet_objects(&inner).await.len(), 2);
}

#[tokio::test]
async fn a_corrupt_manifest_is_reported() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let key = s.layout().manifest_key(TOPIC, 0);
    store
        .put(&key, "not json".into(), strata_store::PutMode::Overwrite)
        .await
        .unwrap();
    let (a, _, _) = segment(Compression::None, 0, 0, 1);
    let e = s.write_segment(TOPIC, 0, &a).await.unwrap_err();
    assert!(matches!(e, SinkError::BadManifest { .. }), "{e}");
    assert!(parquet_objects(&store).await.is_empty());
}

#[tokio::test]
async fn a_transaction_open_at_the_end_waits_for_the_next_segments_markers() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let mut seg = SegmentBuilder::starting_at(0);
    seg.append(&txn_batch(5, 0, &["t-1", "t-2"], Compression::Snappy));
    seg.append_records(&[NewRecord::value("plain", TS0)], Compression::None, None);
    let e = s.write_segment(TOPIC, 0, &seg.bytes).await.unwrap_err();
    assert!(
        matches!(
            e,
            SinkError::Convert(ConvertError::PendingTransaction { .. })
        ),
        "{e}"
    );
    assert!(e.is_retryable());
    assert!(parquet_objects(&store).await.is_empty());
    assert_eq!(s.manifest(TOPIC, 0).await.unwrap().next_offset, None);

    let mut next = SegmentBuilder::starting_at(seg.next_offset);
    next.append(&control_batch(5, COMMIT));
    let markers = scan_markers(&next.bytes).unwrap();
    let w = s
        .write_segment_with_markers(TOPIC, 0, &seg.bytes, &markers)
        .await
        .unwrap()
        .unwrap();
    let values: Vec<_> = rows(&store.get(&w.key).await.unwrap())
        .into_iter()
        .map(|r| r.value.unwrap())
        .collect();
    assert_eq!(
        values,
        [b"t-1".to_vec(), b"t-2".to_vec(), b"plain".to_vec()]
    );
    assert_eq!(s.write_segment(TOPIC, 0, &next.bytes).await.unwrap(), None);
    assert_eq!(
        s.manifest(TOPIC, 0).await.unwrap().next_offset,
        Some(next.next_offset)
    );
}

/// Backfill below where the files start: it continues its cursor, skips a retry, refuses
/// a gap, converts only the batches below the start of a segment that runs past it, and
/// moves the start down when it arrives; the files then cover every offset once.
#[tokio::test]
async fn a_backfill_fills_in_below_the_start_exactly_once() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let (a, _, after_a) = segment(Compression::Lz4, 0, 0, 1);
    let (b, _, after_b) = segment(Compression::Zstd, after_a, 0, 2);
    let (c, _, after_c) = segment(Compression::None, after_b, 0, 3);
    // Conversion began at b.
    s.write_segment(TOPIC, 0, &b).await.unwrap().unwrap();
    s.write_segment(TOPIC, 0, &c).await.unwrap().unwrap();
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(m.covered_start(), Some(after_a));

    let (first, done) = s.write_backfill(TOPIC, 0, &a[..]).await.unwrap();
    assert!(done, "a reaches the start");
    assert!(first.is_some());
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!((m.covered_start(), m.backfill), (Some(0), None));
    assert_eq!(m.next_offset, Some(after_c));
    let offsets: Vec<(i64, i64)> = m
        .files
        .iter()
        .map(|f| (f.first_offset, f.last_offset))
        .collect();
    assert_eq!(
        offsets,
        vec![
            (0, after_a - 1),
            (after_a, after_b - 1),
            (after_b, after_c - 1)
        ]
    );
    // A retry of the same segment changes nothing.
    let (again, done) = s.write_backfill(TOPIC, 0, &a[..]).await.unwrap();
    assert!(again.is_none() && done);
    assert_eq!(parquet_objects(&store).await.len(), 3);

    // In steps, on a fresh partition: two segments below, the second running past the
    // start (only its batches below the start are converted).
    let (x, _, after_x) = segment(Compression::Snappy, 1000, 1, 4);
    let (y, _, after_y) = segment(Compression::Gzip, after_x, 1, 5);
    let (z, _, after_z) = segment(Compression::None, after_y, 1, 6);
    s.write_segment(TOPIC, 1, &z).await.unwrap().unwrap();
    let mut yz = y.clone();
    yz.extend_from_slice(&z);
    // The first backfill segment may start anywhere below (the remote log start).
    s.write_backfill(TOPIC, 1, &x).await.unwrap();
    let e = s.write_backfill(TOPIC, 1, &z).await.unwrap();
    assert_eq!(e.0, None, "nothing of z is below the start");
    let m = s.manifest(TOPIC, 1).await.unwrap();
    assert_eq!(m.backfill.map(|c| (c.from, c.next)), Some((1000, after_x)));
    // A gap after the cursor is refused, and writes no file.
    let files = parquet_objects(&store).await.len();
    let (gap, _, _) = segment(Compression::None, after_x + 2, 1, 7);
    assert!(matches!(
        s.write_backfill(TOPIC, 1, &gap).await.unwrap_err(),
        SinkError::NotContiguous { .. }
    ));
    assert_eq!(parquet_objects(&store).await.len(), files);
    let (w, done) = s.write_backfill(TOPIC, 1, &yz).await.unwrap();
    assert!(done);
    let w = w.unwrap();
    assert_eq!((w.first_offset, w.last_offset), (after_x, after_y - 1));
    let m = s.manifest(TOPIC, 1).await.unwrap();
    assert_eq!(
        (m.covered_start(), m.backfill, m.next_offset),
        (Some(1000), None, Some(after_z))
    );
}

/// Batch header bytes before the records (RecordBatch v2).
const BATCH_HEADER: usize = 61;

/// A segment from `base`: good records, a batch whose CRC no longer matches, a zstd
/// batch whose one record decompresses to 2 MiB (past the 1 MiB cap the tests set),
/// good records again, and a last good batch. Returns it, the rows of the good batches,
/// the bad batches' offset range, the offset after the segment and where the good bytes
/// after the bad batches begin.
fn segment_with_bad_batches(base: i64) -> (Vec<u8>, Vec<Row>, (i64, i64), i64, usize) {
    strata_proto::compression::set_max_decompressed_bytes(1 << 20);
    let mut seg = SegmentBuilder::starting_at(base);
    let mut want = Vec::new();
    let mut good = |seg: &mut SegmentBuilder, seed: u64, codec| {
        let records = varied_records(7, seed, TS0 + seed as i64 * 1000);
        let first = seg.append_records(&records, codec, None);
        for (i, r) in records.iter().enumerate() {
            want.push(expected_row(0, first + i as i64, r, None));
        }
    };
    good(&mut seg, 1, Compression::Lz4);
    let at = seg.bytes.len();
    let records = varied_records(3, 2, TS0 + 2000);
    let bad_first = seg.append_records(&records, Compression::None, None);
    seg.bytes[at + BATCH_HEADER + 3] ^= 0x5a;
    let bomb = NewRecord::value(vec![b'x'; 2 << 20], TS0 + 3000);
    seg.append_records(&[bomb], Compression::Zstd, None);
    let bad_last = seg.next_offset - 1;
    let tail_at = seg.bytes.len();
    good(&mut seg, 4, Compression::None);
    good(&mut seg, 5, Compression::Zstd);
    (
        seg.bytes,
        want,
        (bad_first, bad_last),
        seg.next_offset,
        tail_at,
    )
}

/// The rows of every file the manifest names, in order.
async fn manifest_rows(s: &ParquetSink, store: &Arc<dyn BlobStore>, p: i32) -> Vec<Row> {
    let mut out = Vec::new();
    for f in s.files(TOPIC, p).await.unwrap() {
        out.extend(rows(&store.get(&f.key).await.unwrap()));
    }
    out
}

/// Bad batches (a CRC mismatch, records past the decompression cap) among good ones: the
/// good batches around them are written, the two bad ones become one dead letter that
/// moves the next offset past them; a dead-letter commit that was applied but whose
/// answer was lost (a crash) is not recorded twice on the retry, which skips nothing
/// more; the manifest round-trips with its dead letters.
#[tokio::test]
async fn bad_batches_become_one_dead_letter_and_the_good_ones_around_them_convert() {
    for (inner, dir) in backends() {
        let faults = FaultStore::new(inner.clone());
        let handle = faults.handle();
        let store: Arc<dyn BlobStore> = Arc::new(faults);
        let s = sink(store.clone());
        let manifest_key = s.layout().manifest_key(TOPIC, 0);
        // The local directory answers a conditional update with Unsupported, and the
        // sink then overwrites: one more PUT per commit after the first.
        let puts_before_the_dead_letter = if dir.is_some() { 2 } else { 1 };
        let (seg, want, (bad_first, bad_last), end, tail_at) = segment_with_bad_batches(100);

        // The plain write fails on the data, not retryably: what used to stall.
        let e = s.write_segment(TOPIC, 0, &seg).await.unwrap_err();
        assert!(e.is_bad_data() && !e.is_retryable(), "{e}");

        // The first file's manifest update goes through, the dead letter's is applied
        // but its answer is lost.
        handle.inject(
            Fault::new(ErrorKind::Timeout)
                .op(Op::Put)
                .prefix(manifest_key.clone())
                .skip(puts_before_the_dead_letter)
                .after_call(),
        );
        let e = s
            .write_segment_or_dead_letter(TOPIC, 0, &seg, 100..end)
            .await
            .unwrap_err();
        assert!(e.is_retryable() && !e.is_bad_data(), "{e}");
        let m = s.manifest(TOPIC, 0).await.unwrap();
        assert_eq!(
            m.next_offset,
            Some(bad_last + 1),
            "the dead letter was applied"
        );
        assert_eq!(m.dead_letters.len(), 1);

        // The retry, from where the manifest says the files end (as the offloader reads
        // it), records nothing twice and writes the rest.
        let out = s
            .write_segment_or_dead_letter(TOPIC, 0, &seg[tail_at..], bad_last + 1..end)
            .await
            .unwrap();
        assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
        assert_eq!(out.files.len(), 1, "the good batches after the bad ones");
        assert_eq!(
            (out.files[0].first_offset, out.files[0].last_offset),
            (bad_last + 1, end - 1)
        );
        // And again, the whole segment: nothing at all.
        let again = s
            .write_segment_or_dead_letter(TOPIC, 0, &seg, 100..end)
            .await
            .unwrap();
        assert_eq!(again, strata_parquet::SegmentOutcome::default());
        assert!(
            s.dead_letter(TOPIC, 0, bad_first, bad_last, "again")
                .await
                .unwrap()
                .is_none()
        );

        let m = s.manifest(TOPIC, 0).await.unwrap();
        assert_eq!(m.next_offset, Some(end));
        assert_eq!(m.start_offset, Some(100));
        assert_eq!(m.dead_letters.len(), 1, "{:?}", m.dead_letters);
        let d = &m.dead_letters[0];
        assert_eq!((d.first_offset, d.last_offset), (bad_first, bad_last));
        assert!(d.reason.contains("CRC mismatch"), "{}", d.reason);
        assert!(d.reason.contains("the first of 2 batches"), "{}", d.reason);
        assert!(d.at_ms > TS0, "{}", d.at_ms);
        let ranges: Vec<(i64, i64)> = m
            .files
            .iter()
            .map(|f| (f.first_offset, f.last_offset))
            .collect();
        assert_eq!(ranges, vec![(100, bad_first - 1), (bad_last + 1, end - 1)]);
        // Every good record at its offset, once; nothing of the bad batches.
        assert_eq!(manifest_rows(&s, &inner, 0).await, want);
        assert_eq!(parquet_objects(&inner).await.len(), 2);

        // The manifest as stored round-trips, dead letters included.
        let raw = inner.get(&manifest_key).await.unwrap();
        let parsed: strata_parquet::Manifest = serde_json::from_slice(&raw).unwrap();
        assert_eq!(parsed, m);
        let json: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(json["dead_letters"][0]["first_offset"], bad_first);
        assert_eq!(json["dead_letters"][0]["last_offset"], bad_last);

        // The next segment continues after it.
        let (next, _, _) = segment(Compression::Gzip, end, 0, 6);
        assert!(s.write_segment(TOPIC, 0, &next).await.unwrap().is_some());
    }
}

/// The dead letter on its own: it must start where the files end, moves the next
/// offset, is recorded once, and a manifest written before dead letters existed loads
/// (and keeps loading once it has them).
#[tokio::test]
async fn a_dead_letter_continues_the_files_exactly_once_and_old_manifests_load() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let key = s.layout().manifest_key(TOPIC, 0);
    // A manifest as the previous version wrote it: no dead_letters field.
    let old = serde_json::json!({
        "format": 1,
        "topic": TOPIC,
        "partition": 0,
        "next_offset": 50,
        "files": [{
            "key": "pre/c1/parquet/topic=orders/partition=0/date=2023-11-14/x.parquet",
            "first_offset": 0, "last_offset": 49,
            "min_timestamp": TS0, "max_timestamp": TS0, "rows": 50, "bytes": 1000
        }],
        "start_offset": 0
    });
    store
        .put(
            &key,
            serde_json::to_vec(&old).unwrap().into(),
            strata_store::PutMode::Overwrite,
        )
        .await
        .unwrap();
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert!(m.dead_letters.is_empty());
    assert_eq!((m.next_offset, m.files.len()), (Some(50), 1));
    // Written back without dead letters, the manifest keeps its old shape.
    assert!(!serde_json::to_string(&m).unwrap().contains("dead_letters"));

    // Not where the files end: refused.
    let e = s.dead_letter(TOPIC, 0, 60, 69, "bad").await.unwrap_err();
    assert!(
        matches!(
            e,
            SinkError::NotContiguous {
                expected: 50,
                got: 60
            }
        ),
        "{e}"
    );
    let e = s.dead_letter(TOPIC, 0, 40, 69, "bad").await.unwrap_err();
    assert!(matches!(e, SinkError::NotContiguous { .. }), "{e}");
    let d = s
        .dead_letter(TOPIC, 0, 50, 59, "batch at offset 50: CRC mismatch")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.first_offset, d.last_offset), (50, 59));
    // A retry (the commit went through, the answer did not): nothing more.
    assert!(
        s.dead_letter(TOPIC, 0, 50, 59, "x")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        s.dead_letter(TOPIC, 0, 55, 59, "x")
            .await
            .unwrap()
            .is_none()
    );
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(m.next_offset, Some(60));
    assert_eq!(m.dead_letters, vec![d.clone()]);
    assert_eq!(m.files.len(), 1);
    let (seg, _, after) = segment(Compression::Snappy, 60, 0, 3);
    s.write_segment(TOPIC, 0, &seg).await.unwrap().unwrap();
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!((m.next_offset, m.dead_letters.len()), (Some(after), 1));

    // A fresh partition may begin with one.
    assert!(
        s.dead_letter(TOPIC, 1, 7, 9, "bad")
            .await
            .unwrap()
            .is_some()
    );
    let m1 = s.manifest(TOPIC, 1).await.unwrap();
    assert_eq!((m1.start_offset, m1.next_offset), (Some(7), Some(10)));

    // Dead letters expire with the log start, as files do.
    assert_eq!(s.expire(TOPIC, 1, 10).await.unwrap(), 0);
    assert!(s.manifest(TOPIC, 1).await.unwrap().dead_letters.is_empty());
    assert_eq!(s.expire(TOPIC, 0, 55).await.unwrap(), 1);
    assert_eq!(s.manifest(TOPIC, 0).await.unwrap().dead_letters, vec![d]);
}

/// Bytes that stop framing part-way (a torn segment): the batches before are written,
/// the rest of the segment's range is one dead letter. What is not the data's fault
/// still fails, with nothing set aside.
#[tokio::test]
async fn a_torn_segment_keeps_what_frames_and_other_errors_still_fail() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let (a, want, after_a) = segment(Compression::Lz4, 0, 0, 1);
    let (b, _, after_b) = segment(Compression::None, after_a, 0, 2);
    let mut torn = a.clone();
    torn.extend_from_slice(&b[..40]);
    let out = s
        .write_segment_or_dead_letter(TOPIC, 0, &torn, 0..after_b)
        .await
        .unwrap();
    assert_eq!(out.files.len(), 1);
    assert_eq!(out.dead_letters.len(), 1);
    let d = &out.dead_letters[0];
    assert_eq!((d.first_offset, d.last_offset), (after_a, after_b - 1));
    assert!(d.reason.contains("does not frame"), "{}", d.reason);
    assert_eq!(manifest_rows(&s, &store, 0).await, want);
    assert_eq!(
        s.manifest(TOPIC, 0).await.unwrap().next_offset,
        Some(after_b)
    );

    // A pending transaction is not bad data: retryable, nothing recorded.
    let mut seg = SegmentBuilder::starting_at(after_b);
    seg.append(&txn_batch(5, 0, &["t-1"], Compression::None));
    let e = s
        .write_segment_or_dead_letter(TOPIC, 0, &seg.bytes, after_b..seg.next_offset)
        .await
        .unwrap_err();
    assert!(e.is_retryable() && !e.is_bad_data(), "{e}");
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!((m.next_offset, m.dead_letters.len()), (Some(after_b), 1));

    // Nor is the store being down.
    let faults = FaultStore::new(store.clone());
    let handle = faults.handle();
    let down = sink(Arc::new(faults));
    let (bad, _, _, end, _) = segment_with_bad_batches(after_b);
    handle.inject(Fault::new(ErrorKind::Timeout).op(Op::Put).times(100));
    let e = down
        .write_segment_or_dead_letter(TOPIC, 0, &bad, after_b..end)
        .await
        .unwrap_err();
    assert!(e.is_retryable() && !e.is_bad_data(), "{e}");
    assert_eq!(
        s.manifest(TOPIC, 0).await.unwrap().next_offset,
        Some(after_b)
    );
}

/// Below the files' start (a backfill), bad batches become dead letters that continue
/// the backfill's cursor, and the start moves down when it arrives.
#[tokio::test]
async fn a_backfill_sets_bad_batches_aside_too() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let (below, want, (bad_first, bad_last), end, _) = segment_with_bad_batches(0);
    let (top, _, after_top) = segment(Compression::None, end, 0, 9);
    s.write_segment(TOPIC, 0, &top).await.unwrap().unwrap();
    let (out, done) = s
        .write_backfill_or_dead_letter(TOPIC, 0, &below, 0..end)
        .await
        .unwrap();
    assert!(done);
    assert_eq!(out.files.len(), 2);
    assert_eq!(out.dead_letters.len(), 1);
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(
        (m.covered_start(), m.backfill, m.next_offset),
        (Some(0), None, Some(after_top))
    );
    let d = &m.dead_letters[0];
    assert_eq!((d.first_offset, d.last_offset), (bad_first, bad_last));
    let got = manifest_rows(&s, &store, 0).await;
    assert_eq!(&got[..want.len()], &want[..]);
    // A retry: nothing more.
    let (again, done) = s
        .write_backfill_or_dead_letter(TOPIC, 0, &below, 0..end)
        .await
        .unwrap();
    assert!(done && again == strata_parquet::SegmentOutcome::default());
    assert_eq!(s.manifest(TOPIC, 0).await.unwrap().dead_letters.len(), 1);
}
