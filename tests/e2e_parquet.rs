//! Parquet in the bucket, end to end: a topic with parquet.enable=true on the real
//! broker; the offloader writes its sealed segments as Parquet files in the Hive-style
//! layout, and the parquet crate's own reader (not our converter) finds every record,
//! at its offset, with its key, value, headers and timestamp.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::{Int64Type, TimestampMillisecondType};
use common::Broker;
use common::kafka::{create_topic, flush, producer};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;

fn parquet_files(root: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            parquet_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "parquet") {
            out.push(p);
        }
    }
}

/// offset -> (key, value, header value, timestamp), read back with the parquet crate.
fn read_rows(files: &[PathBuf]) -> BTreeMap<i64, (Vec<u8>, Vec<u8>, i64)> {
    let mut rows = BTreeMap::new();
    for f in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let b = batch.unwrap();
            let offsets = b
                .column_by_name("offset")
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone();
            let keys = b.column_by_name("key").unwrap().as_binary::<i32>().clone();
            let values = b
                .column_by_name("value")
                .unwrap()
                .as_binary::<i32>()
                .clone();
            let ts = b.column_by_name("timestamp").unwrap();
            let ts: Vec<i64> = match ts.as_primitive_opt::<TimestampMillisecondType>() {
                Some(t) => t.values().to_vec(),
                None => ts.as_primitive::<Int64Type>().values().to_vec(),
            };
            for (i, &t) in ts.iter().enumerate().take(b.num_rows()) {
                let prev = rows.insert(
                    offsets.value(i),
                    (keys.value(i).to_vec(), values.value(i).to_vec(), t),
                );
                assert!(prev.is_none(), "offset {} in two files", offsets.value(i));
            }
        }
    }
    rows
}

#[test]
fn sealed_segments_become_parquet_files_an_independent_reader_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let url = format!("file://{}", cold.display());
    let broker = Broker::start(&dir.path().join("data"), &["--object-store", &url]);
    let b = broker.kafka.clone();
    create_topic(
        &b,
        "lake",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "16384"),
        ],
    );
    let (p, d) = producer(
        &b,
        &[
            ("acks", "all"),
            ("linger.ms", "2"),
            ("compression.type", "lz4"),
            ("batch.size", "8192"),
        ],
    );
    let n = 3_000i64;
    // Recent timestamps: older ones would be past the topic's 7-day retention, and
    // retention deletes their files (as it should).
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 60_000;
    for i in 0..n {
        let key = format!("k{}", i % 17);
        let value = format!("value-{i}-{}", "x".repeat((i % 50) as usize));
        p.send(
            BaseRecord::<str, str>::to("lake")
                .key(&key)
                .payload(&value)
                .timestamp(base + i)
                .headers(OwnedHeaders::new().insert(Header {
                    key: "h",
                    value: Some("v"),
                })),
        )
        .map_err(|(e, _)| e)
        .unwrap();
        if i % 500 == 0 {
            flush(&p);
        }
    }
    flush(&p);
    assert!(d.errors.lock().unwrap().is_empty());

    // Every sealed segment ends up in Parquet: wait for most of the log.
    let t0 = Instant::now();
    let rows = loop {
        let mut files = Vec::new();
        if cold.exists() {
            parquet_files(&cold, &mut files);
        }
        let rows = read_rows(&files);
        if rows.len() as i64 >= n * 3 / 4 {
            // The layout: .../parquet/topic=lake/partition=0/date=YYYY-MM-DD/F-L.parquet
            for f in &files {
                let s = f.to_string_lossy();
                let (_, rest) = s
                    .split_once("/parquet/topic=lake/partition=0/date=")
                    .unwrap_or_else(|| panic!("layout: {s}"));
                let (date, name) = rest.split_once('/').unwrap();
                assert!(
                    date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-',
                    "date=YYYY-MM-DD: {s}"
                );
                assert!(
                    name.ends_with(".parquet") && name.contains('-'),
                    "{{first}}-{{last}}: {s}"
                );
            }
            break rows;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let ls = std::process::Command::new("find")
                .arg(dir.path())
                .output()
                .unwrap();
            panic!(
                "only {} rows in parquet after a minute:\n{}",
                rows.len(),
                String::from_utf8_lossy(&ls.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    // Contiguous from offset 0, each row the record produced at that offset.
    let last = *rows.keys().last().unwrap();
    assert_eq!(rows.len() as i64, last + 1, "offsets 0..={last} contiguous");
    for (&o, (k, v, ts)) in &rows {
        assert_eq!(k, format!("k{}", o % 17).as_bytes(), "key at {o}");
        assert_eq!(
            v,
            format!("value-{o}-{}", "x".repeat((o % 50) as usize)).as_bytes(),
            "value at {o}"
        );
        assert_eq!(*ts, base + o, "timestamp at {o}");
    }
    // The manifest lists the files, contiguous.
    let mut manifests = Vec::new();
    fn find(root: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(root).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                find(&p, out);
            } else if p.file_name().is_some_and(|n| n == "_manifest.json") {
                out.push(p);
            }
        }
    }
    find(&cold, &mut manifests);
    assert_eq!(manifests.len(), 1, "{manifests:?}");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifests[0]).unwrap()).unwrap();
    assert!(m["next_offset"].as_i64().unwrap() > last, "{m}");
}
