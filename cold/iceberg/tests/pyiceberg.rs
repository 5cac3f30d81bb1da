//! Publishes real strata-parquet files (2 partitions over 2 days, plus one file whose
//! rows cross midnight) to a table on the local file system in two snapshots, then has
//! pyiceberg read it back (`python/check_table.py`): every record exactly once, the
//! schema, and fewer files planned for a one-day time filter. A second table has files
//! appended, deleted and replaced, then snapshots expired (`python/check_live.py`):
//! pyiceberg reads exactly the live files, and each kept snapshot by time travel.
//! pyiceberg is installed by scripts/deps; without it this test fails and says so.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;
use strata_iceberg::{Catalog, PartitionSpec, summary_keys};
use strata_parquet::{ConvertOptions, ParquetLayout, ValueFormat, convert_segment, file_schema};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::batch::set_base_offset;
use strata_store::{BlobStore, ObjectBackend, PutMode};

const TOPIC: &str = "orders";
/// 2024-01-01T00:00:00Z.
const DAY0_MS: i64 = 1_704_067_200_000;
const DAY_MS: i64 = 86_400_000;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A segment of `records` in batches of 4 from `base`; returns it with its last offset.
fn segment(records: &[NewRecord], base: i64) -> (Vec<u8>, i64) {
    let mut seg = Vec::new();
    let mut next = base;
    for chunk in records.chunks(4) {
        let start = seg.len();
        seg.extend_from_slice(&batch(chunk, Compression::Zstd, None));
        set_base_offset(&mut seg[start..], next);
        next += chunk.len() as i64;
    }
    (seg, next - 1)
}

struct Written {
    /// The file's key in the store.
    path: String,
    expected: Vec<serde_json::Value>,
    last: i64,
}

/// Converts `n` records of `partition` from offset `base`, timestamps from `ts0` every
/// `step` ms, and stores the file under the sink's layout.
async fn write_file(
    store: &Arc<dyn BlobStore>,
    partition: i32,
    base: i64,
    n: usize,
    ts0: i64,
    step: i64,
    legacy: bool,
) -> Written {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| {
            let off = base + i as i64;
            NewRecord {
                key: (i % 3 != 0).then(|| Bytes::from(format!("k{partition}-{off}"))),
                value: (i % 5 != 4).then(|| Bytes::from(vec![partition as u8, off as u8, 0xff, 0])),
                headers: (0..i % 3)
                    .map(|h| {
                        (
                            format!("h{h}"),
                            (h == 0).then(|| Bytes::from(format!("v{off}"))),
                        )
                    })
                    .collect(),
                timestamp: ts0 + i as i64 * step,
            }
        })
        .collect();
    let (seg, last) = segment(&records, base);
    let opts = ConvertOptions::new(TOPIC, partition);
    let mut file = convert_segment(&seg, &opts).unwrap();
    assert_eq!(file.summary.rows, n as u64);
    if legacy {
        file.bytes = common::without_field_ids(&file.bytes, &opts);
    }
    let key = ParquetLayout::new("c1").file_key(TOPIC, partition, ts0, base, last);
    store
        .put(&key, Bytes::from(file.bytes), PutMode::Overwrite)
        .await
        .unwrap();
    let expected = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({
                "partition": partition,
                "offset": base + i as i64,
                "timestamp_ms": r.timestamp,
                "key": r.key.as_deref().map(hex),
                "value": r.value.as_deref().map(hex),
                "headers": r.headers.iter().map(|(k, v)| json!([k, v.as_deref().map(hex)])).collect::<Vec<_>>(),
            })
        })
        .collect();
    Written {
        path: key,
        expected,
        last,
    }
}

fn require_pyiceberg() {
    let ok = Command::new("python3")
        .args(["-c", "import pyiceberg, pyarrow"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "python3 with pyiceberg and pyarrow is required for this test: run scripts/deps \
         (it installs pyiceberg==0.12.0)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_reads_every_record_once_and_prunes_by_day() {
    require_pyiceberg();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let store = ObjectBackend::local(&root).unwrap().into_dyn();
    let catalog = Catalog::new(store.clone(), &format!("file://{}", root.display()), "lake");

    let mut table = catalog
        .create_table(TOPIC, &file_schema(&ValueFormat::Binary))
        .await
        .unwrap();
    assert!(table.last_committed_offsets().is_empty());

    let mut expected = Vec::new();
    // Snapshot 1: day 0 of both partitions.
    let mut files = Vec::new();
    let mut next = BTreeMap::new();
    for p in [0, 1] {
        let w = write_file(
            &store,
            p,
            0,
            30 + p as usize * 7,
            DAY0_MS + 3_600_000,
            60_000,
            false,
        )
        .await;
        next.insert(p, w.last + 1);
        expected.extend(w.expected);
        files.push(catalog.data_file(&w.path).await.unwrap());
    }
    assert!(
        files.iter().all(|f| f.day == Some(19723)),
        "2024-01-01 is day 19723"
    );
    let s1 = table.append(files).await.unwrap();
    assert_eq!(s1.summary["operation"], "append");
    assert_eq!(s1.summary[&summary_keys::last_offset(1)], "36");
    assert_eq!(
        table.last_committed_offsets(),
        BTreeMap::from([(0, 29), (1, 36)])
    );

    // A publisher that restarts reloads and resumes after the committed offsets.
    let mut table = catalog.load_table(TOPIC).await.unwrap();
    assert_eq!(table.version(), 2);
    let resume = table.last_committed_offsets();
    // Snapshot 2: day 1 of both partitions, and for partition 0 a file crossing into day 2.
    let mut files = Vec::new();
    for p in [0, 1] {
        let base = resume[&p] + 1;
        assert_eq!(base, next[&p]);
        // Partition 1's file is as strata-parquet wrote it before field ids: pyiceberg
        // reads it through the table's name mapping.
        let w = write_file(
            &store,
            p,
            base,
            20 + p as usize,
            DAY0_MS + DAY_MS + 1000 * p as i64,
            90_000,
            p == 1,
        )
        .await;
        next.insert(p, w.last + 1);
        expected.extend(w.expected);
        files.push(catalog.data_file(&w.path).await.unwrap());
    }
    let w = write_file(
        &store,
        0,
        next[&0],
        12,
        DAY0_MS + 2 * DAY_MS - 5_000,
        1_000,
        false,
    )
    .await;
    expected.extend(w.expected);
    let crossing = catalog.data_file(&w.path).await.unwrap();
    assert_eq!(crossing.day, None);
    assert_eq!(
        PartitionSpec::of(&crossing),
        PartitionSpec::partition_only()
    );
    files.push(crossing);
    let s2 = table.append(files).await.unwrap();
    assert_eq!(s2.summary["total-data-files"], "5");
    assert_eq!(s2.summary["total-records"], expected.len().to_string());
    assert_eq!(
        table.last_committed_offsets(),
        BTreeMap::from([(0, w.last), (1, next[&1] - 1)])
    );

    let expected_path = root.join("expected.json");
    std::fs::write(&expected_path, serde_json::to_vec(&expected).unwrap()).unwrap();
    let metadata = table
        .metadata_location()
        .strip_prefix("file://")
        .unwrap()
        .to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/check_table.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&metadata)
        .arg(&expected_path)
        .arg(DAY0_MS.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "check_table.py failed:\n{stdout}\n{stderr}"
    );
    for check in [
        "schema ok",
        "records ok",
        "pruning ok",
        "filtered records ok",
    ] {
        assert!(
            stdout.contains(check),
            "missing '{check}' in:\n{stdout}\n{stderr}"
        );
    }
    println!("{stdout}");
}

/// Runs `python/check_live.py` on the table's current metadata and returns its output.
fn check_live(
    table: &strata_iceberg::Table,
    root: &std::path::Path,
    expected: &serde_json::Value,
) -> String {
    let expected_path = root.join("expected-live.json");
    std::fs::write(&expected_path, serde_json::to_vec(expected).unwrap()).unwrap();
    let metadata = table
        .metadata_location()
        .strip_prefix("file://")
        .unwrap()
        .to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/check_live.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&metadata)
        .arg(&expected_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "check_live.py failed:\n{stdout}\n{stderr}"
    );
    for check in ["live files ok", "snapshots ok"] {
        assert!(
            stdout.contains(check),
            "missing '{check}' in:\n{stdout}\n{stderr}"
        );
    }
    println!("{stdout}");
    stdout
}

/// Appends four files, deletes one (retention) and replaces two by one holding the same
/// rows (compaction); pyiceberg reads exactly the live files' rows, and every snapshot's
/// rows by time travel. Then expiry keeps only the current snapshot: the table still
/// loads and reads the same with the removed files gone from disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_reads_only_live_files_after_delete_replace_and_expiry() {
    use strata_iceberg::Operation;

    require_pyiceberg();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let store = ObjectBackend::local(&root).unwrap().into_dyn();
    let catalog = Catalog::new(store.clone(), &format!("file://{}", root.display()), "lake");
    let mut table = catalog
        .create_table(TOPIC, &file_schema(&ValueFormat::Binary))
        .await
        .unwrap();
    let (ts, step) = (DAY0_MS + 3_600_000, 60_000);
    // Partition 0 in three files; the first two are 15 records each, so one file of 30
    // from offset 0 generates the same records (keys, values, headers repeat every 15).
    let a = write_file(&store, 0, 0, 15, ts, step, false).await;
    let b = write_file(&store, 0, 15, 15, ts + 15 * step, step, false).await;
    let c = write_file(&store, 0, 30, 10, ts + 30 * step, step, false).await;
    let p1 = write_file(&store, 1, 0, 20, ts, step, false).await;
    let ab = write_file(&store, 0, 0, 30, ts, step, false).await;
    assert_eq!(
        ab.expected,
        [a.expected.clone(), b.expected.clone()].concat(),
        "the compacted file holds the same rows"
    );
    let df = |w: &Written| {
        let catalog = catalog.clone();
        let path = w.path.clone();
        async move { catalog.data_file(&path).await.unwrap() }
    };
    let uri = |w: &Written| catalog.uri(&w.path);
    let keys = |ws: &[&Written]| -> Vec<serde_json::Value> {
        ws.iter()
            .flat_map(|w| w.expected.iter())
            .map(|r| json!([r["partition"], r["offset"]]))
            .collect()
    };

    let s1 = table
        .append(vec![df(&a).await, df(&b).await, df(&p1).await])
        .await
        .unwrap();
    let s2 = table.append(vec![df(&c).await]).await.unwrap();
    let s3 = table
        .commit(vec![], &[uri(&p1)], Operation::Delete)
        .await
        .unwrap();
    let s4 = table
        .commit(vec![df(&ab).await], &[uri(&a), uri(&b)], Operation::Replace)
        .await
        .unwrap();
    assert_eq!(s4.summary["total-data-files"], "2");
    assert_eq!(s4.summary["total-records"], "40");
    // Neither the delete nor the replace moved a committed offset.
    assert_eq!(
        table.last_committed_offsets(),
        BTreeMap::from([(0, c.last), (1, p1.last)])
    );

    let live_rows: Vec<serde_json::Value> =
        [&ab, &c].iter().flat_map(|w| w.expected.clone()).collect();
    let live_files = json!([uri(&ab), uri(&c)]);
    let snapshots = json!([
        {"id": s1.snapshot_id, "operation": "append", "keys": keys(&[&a, &b, &p1])},
        {"id": s2.snapshot_id, "operation": "append", "keys": keys(&[&a, &b, &p1, &c])},
        {"id": s3.snapshot_id, "operation": "delete", "keys": keys(&[&a, &b, &c])},
        {"id": s4.snapshot_id, "operation": "replace", "keys": keys(&[&ab, &c])},
    ]);
    let out = check_live(
        &table,
        &root,
        &json!({"rows": live_rows, "files": live_files, "snapshots": snapshots}),
    );
    assert!(out.contains("live files ok: 2 files, 40 rows"), "{out}");

    // Expire all but the current snapshot. The removed files are handed back, no longer
    // needed by any snapshot: delete them as their owner would.
    let expired = table.expire_snapshots(i64::MAX, 1).await.unwrap();
    assert_eq!(
        expired.snapshot_ids,
        [s1.snapshot_id, s2.snapshot_id, s3.snapshot_id]
    );
    let mut returned = expired.data_files.clone();
    returned.sort();
    let mut want = vec![uri(&a), uri(&b), uri(&p1)];
    want.sort();
    assert_eq!(returned, want);
    assert!(expired.not_deleted.is_empty(), "{expired:?}");
    for l in expired.manifest_lists.iter().chain(&expired.manifests) {
        let path = l.strip_prefix("file://").unwrap();
        assert!(!std::path::Path::new(path).exists(), "{path} deleted");
    }
    for w in [&a, &b, &p1] {
        store.delete(&w.path).await.unwrap();
    }
    let table = catalog.load_table(TOPIC).await.unwrap();
    assert_eq!(table.metadata().snapshots.len(), 1);
    let snapshots = json!([
        {"id": s4.snapshot_id, "operation": "replace", "keys": keys(&[&ab, &c])},
    ]);
    check_live(
        &table,
        &root,
        &json!({"rows": live_rows, "files": live_files, "snapshots": snapshots}),
    );
}
