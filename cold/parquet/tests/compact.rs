//! Small-file compaction through the sink: the rows read back from the manifest's files
//! are the same before and after, files become about the target size, replaced objects
//! are deleted (or kept for the Iceberg publisher), and a crash before the manifest
//! update leaves the partition as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use strata_parquet::compact::plan;
use strata_parquet::{
    CompactPolicy, ConvertOptions, ExpiredObjects, ParquetLayout, ParquetSink, SinkError,
    ValueFormat, ValueSchema, metadata_keys,
};
use strata_proto::Compression;
use strata_store::{BlobStore, ErrorKind, Fault, FaultStore, ObjectBackend, Op};

/// 2023-11-14 22:13:20 UTC: a hundred segments a second apart stay in that day.
const TS0: i64 = 1_700_000_000_000;
const DAY: i64 = 86_400_000;
const TOPIC: &str = "clicks";

fn sink_with(store: Arc<dyn BlobStore>, options: ConvertOptions) -> ParquetSink {
    ParquetSink::new(store, ParquetLayout::new("c1"), options)
}

fn sink(store: Arc<dyn BlobStore>) -> ParquetSink {
    sink_with(store, ConvertOptions::new("ignored", 0))
}

/// Writes `n` one-batch segments of a few records each from offset `base`; returns the
/// offset after them.
async fn write_small(s: &ParquetSink, base: i64, n: usize, seed: u64) -> i64 {
    let mut next = base;
    for i in 0..n {
        let mut seg = SegmentBuilder::starting_at(next);
        let records = varied_records(
            3 + i % 5,
            seed + i as u64,
            TS0 + (next - base) * 1000 + i as i64,
        );
        seg.append_records(&records, Compression::None, None);
        s.write_segment(TOPIC, 0, &seg.bytes).await.unwrap();
        next = seg.next_offset;
    }
    next
}

/// Every row of the partition, reading its manifest's files in order.
async fn all_rows(s: &ParquetSink, store: &Arc<dyn BlobStore>) -> Vec<Row> {
    let mut out = Vec::new();
    for f in s.files(TOPIC, 0).await.unwrap() {
        let bytes = store.get(&f.key).await.unwrap();
        let rows = rows(&bytes);
        assert_eq!(rows.len() as u64, f.rows, "{}", f.key);
        if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
            assert!(a.offset >= f.first_offset && b.offset <= f.last_offset);
            assert_eq!(
                rows.iter().map(|r| r.timestamp).min(),
                Some(f.min_timestamp)
            );
            assert_eq!(
                rows.iter().map(|r| r.timestamp).max(),
                Some(f.max_timestamp)
            );
        }
        out.extend(rows);
    }
    out
}

#[tokio::test]
async fn small_files_become_files_of_the_target_size_with_the_same_rows() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    let end = write_small(&s, 0, 60, 1).await;
    let before = s.manifest(TOPIC, 0).await.unwrap();
    let rows_before = all_rows(&s, &store).await;
    assert_eq!(before.files.len(), 60);
    let total: u64 = before.files.iter().map(|f| f.bytes).sum();
    let target = total / 4;

    // The day is not over: only full groups are rewritten.
    let policy = CompactPolicy::new(target, TS0);
    let done = s
        .compact(TOPIC, 0, &policy, ExpiredObjects::Delete)
        .await
        .unwrap();
    assert!(!done.is_empty());
    let after = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(after.next_offset, Some(end));
    assert_eq!(after.start_offset, before.start_offset);
    assert_eq!(all_rows(&s, &store).await, rows_before);
    for c in &done {
        assert!(c.replaced.len() >= 2);
        let sum: u64 = c.replaced.iter().map(|f| f.bytes).sum();
        assert!(sum <= target, "a group holds at most the target");
        assert_eq!(c.file.first_offset, c.replaced[0].first_offset);
        assert_eq!(c.file.last_offset, c.replaced.last().unwrap().last_offset);
        // The file's own metadata carries the group's offsets.
        let bytes = store.get(&c.file.key).await.unwrap();
        let (_, meta) = read(&bytes);
        let kv = kv(&meta);
        assert_eq!(
            kv[metadata_keys::FIRST_OFFSET],
            c.file.first_offset.to_string()
        );
        assert_eq!(
            kv[metadata_keys::LAST_OFFSET],
            c.file.last_offset.to_string()
        );
        assert_eq!(kv[metadata_keys::TOPIC], TOPIC);
        assert_eq!(bytes.len() as u64, c.file.bytes);
    }
    // Replaced objects are gone; every object left is a manifest entry.
    let listed: Vec<String> = {
        let mut k: Vec<String> = after.files.iter().map(|f| f.key.clone()).collect();
        k.sort();
        k
    };
    assert_eq!(parquet_objects(&store).await, listed);
    // Nothing full is left to rewrite; what is left waits for the day to end.
    assert!(plan(&after, &policy).is_empty());
    let small_left = after.files.len();

    // The day is over: the rest of it is rewritten too.
    let later = CompactPolicy::new(target, TS0 + DAY);
    s.compact(TOPIC, 0, &later, ExpiredObjects::Delete)
        .await
        .unwrap();
    let end_state = s.manifest(TOPIC, 0).await.unwrap();
    assert!(end_state.files.len() < small_left);
    assert!(
        end_state.files.len() <= 6,
        "60 files at a quarter of the total each: about 4 files, got {}",
        end_state.files.len()
    );
    assert_eq!(all_rows(&s, &store).await, rows_before);
    assert!(plan(&end_state, &later).is_empty());
    assert_eq!(parquet_objects(&store).await.len(), end_state.files.len());

    // Forced, with room for everything: rewrites and converted files alike become one.
    write_small(&s, end, 3, 42).await;
    let end = s.manifest(TOPIC, 0).await.unwrap().next_offset.unwrap();
    let rows_now = all_rows(&s, &store).await;
    let all = CompactPolicy {
        force: true,
        ..CompactPolicy::new(u64::MAX / 2, TS0 + DAY)
    };
    s.compact(TOPIC, 0, &all, ExpiredObjects::Delete)
        .await
        .unwrap();
    let one = s.files(TOPIC, 0).await.unwrap();
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(all_rows(&s, &store).await, rows_now);

    // Conversion goes on after the compacted files.
    let end2 = write_small(&s, end, 3, 99).await;
    assert_eq!(s.manifest(TOPIC, 0).await.unwrap().next_offset, Some(end2));
}

#[tokio::test]
async fn kept_objects_and_only_the_files_a_published_table_holds() {
    let store = ObjectBackend::memory().into_dyn();
    let s = sink(store.clone());
    write_small(&s, 0, 20, 7).await;
    let before = s.manifest(TOPIC, 0).await.unwrap();
    let objects_before = parquet_objects(&store).await;
    let policy = CompactPolicy {
        target_bytes: u64::MAX / 2,
        force: true,
        only: Some(before.files[..10].iter().map(|f| f.key.clone()).collect()),
        now_ms: TS0,
    };
    let done = s
        .compact(TOPIC, 0, &policy, ExpiredObjects::Keep)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].replaced, before.files[..10].to_vec());
    let after = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(after.files.len(), 11);
    assert_eq!(after.files[1..], before.files[10..]);
    // Every replaced object is still there, beside the new one.
    let objects = parquet_objects(&store).await;
    assert_eq!(objects.len(), objects_before.len() + 1);
    assert!(objects_before.iter().all(|k| objects.contains(k)));
}

#[tokio::test]
async fn a_crash_before_the_manifest_update_changes_nothing() {
    let inner = ObjectBackend::memory().into_dyn();
    let faults = FaultStore::new(inner.clone());
    let handle = faults.handle();
    let store: Arc<dyn BlobStore> = Arc::new(faults);
    let s = sink(store.clone());
    write_small(&s, 0, 12, 3).await;
    let before = s.manifest(TOPIC, 0).await.unwrap();
    let rows_before = all_rows(&s, &store).await;
    let policy = CompactPolicy {
        force: true,
        ..CompactPolicy::new(u64::MAX / 2, TS0)
    };
    handle.inject(
        Fault::new(ErrorKind::Permanent)
            .op(Op::Put)
            .prefix(s.layout().manifest_key(TOPIC, 0)),
    );
    let e = s
        .compact(TOPIC, 0, &policy, ExpiredObjects::Delete)
        .await
        .unwrap_err();
    assert!(matches!(e, SinkError::Store(_)), "{e}");
    assert_eq!(s.manifest(TOPIC, 0).await.unwrap(), before);
    assert_eq!(all_rows(&s, &store).await, rows_before);
    // The retry writes the same object and commits it.
    let done = s
        .compact(TOPIC, 0, &policy, ExpiredObjects::Delete)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(s.files(TOPIC, 0).await.unwrap().len(), 1);
    assert_eq!(all_rows(&s, &store).await, rows_before);
    assert_eq!(parquet_objects(&inner).await.len(), 1);
}

#[tokio::test]
async fn files_of_another_schema_are_not_merged() {
    let store = ObjectBackend::memory().into_dyn();
    let binary = sink(store.clone());
    let mut json = ConvertOptions::new("ignored", 0);
    json.value_format = ValueFormat::Json(
        ValueSchema::parse(r#"{"fields":[{"name":"n","type":"int64"}]}"#).unwrap(),
    );
    let json = sink_with(store.clone(), json);
    let next = write_small(&binary, 0, 4, 1).await;
    write_small(&json, next, 3, 2).await;
    let policy = CompactPolicy {
        force: true,
        ..CompactPolicy::new(u64::MAX / 2, TS0)
    };
    // The manifest records each file's columns: the plan keeps the two kinds apart.
    let manifest = binary.manifest(TOPIC, 0).await.unwrap();
    assert_ne!(binary.schema_fingerprint(), json.schema_fingerprint());
    assert_eq!(plan(&manifest, &policy), vec![0..4, 4..7]);

    // A manifest from before the fingerprint (entries without one): the plan sees one
    // run of seven, and the rewrite stops where the schema changes.
    let key = binary.layout().manifest_key(TOPIC, 0);
    let mut old: serde_json::Value =
        serde_json::from_slice(&store.get(&key).await.unwrap()).unwrap();
    for f in old["files"].as_array_mut().unwrap() {
        f.as_object_mut().unwrap().remove("schema");
    }
    store
        .put(
            &key,
            bytes::Bytes::from(serde_json::to_vec(&old).unwrap()),
            strata_store::PutMode::Overwrite,
        )
        .await
        .unwrap();
    let manifest = binary.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(plan(&manifest, &policy), vec![0..7]);
    let done = binary
        .compact(TOPIC, 0, &policy, ExpiredObjects::Delete)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].replaced.len(), 4);
    let files = binary.files(TOPIC, 0).await.unwrap();
    assert_eq!(files.len(), 4);
    assert_eq!(files[0].first_offset, 0);
    assert_eq!(files[0].last_offset, next - 1);
}
