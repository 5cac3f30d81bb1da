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

/// The topics' Parquet files under `root` (not the dead-letter files, which have their
/// own tree, `{cluster}/dead_letters/`, and columns).
fn parquet_files(root: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| n == "dead_letters") {
            continue;
        }
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
    let broker = Broker::start(
        &dir.path().join("data"),
        &["--object-store", &url, "--min-segment-bytes", "1"],
    );
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
    // A file is PUT before the manifest names it: the last one read may be a moment
    // ahead of the manifest.
    wait_for(
        "the manifest to name the last file",
        Duration::from_secs(30),
        || {
            let m: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&manifests[0]).unwrap()).unwrap();
            m["next_offset"].as_i64().unwrap() > last
        },
    );
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn tier_status(b: &Broker, topic: &str, partition: i64) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&b.http_get("/v1/tier/status")).unwrap();
    v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == topic && p["partition"] == partition)
        .cloned()
        .expect("partition in the tier status")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn value_at(o: i64) -> String {
    format!("value-{o}-{}", "y".repeat((o % 40) as usize))
}

/// Produces `count` records numbered from `from` (key k{o%17}, value value_at(o)).
fn produce_numbered(bootstrap: &str, topic: &str, from: i64, count: i64, base_ts: i64) {
    let (p, d) = producer(
        bootstrap,
        &[("acks", "all"), ("linger.ms", "2"), ("batch.size", "8192")],
    );
    for o in from..from + count {
        let key = format!("k{}", o % 17);
        let value = value_at(o);
        p.send(
            BaseRecord::<str, str>::to(topic)
                .key(&key)
                .payload(&value)
                .timestamp(base_ts + o),
        )
        .map_err(|(e, _)| e)
        .unwrap();
        if o % 500 == 0 {
            flush(&p);
        }
    }
    flush(&p);
    assert!(d.errors.lock().unwrap().is_empty());
}

/// The rows under `root`, checked against what produce_numbered wrote: every offset at
/// most once (read_rows panics on a second), with its key, value and timestamp.
fn checked_rows(root: &Path, base_ts: i64) -> BTreeMap<i64, (Vec<u8>, Vec<u8>, i64)> {
    let mut files = Vec::new();
    if root.exists() {
        parquet_files(root, &mut files);
    }
    let rows = read_rows(&files);
    for (&o, (k, v, ts)) in &rows {
        assert_eq!(k, format!("k{}", o % 17).as_bytes(), "key at {o}");
        assert_eq!(v, value_at(o).as_bytes(), "value at {o}");
        assert_eq!(*ts, base_ts + o, "timestamp at {o}");
    }
    rows
}

/// A topic tiers for a while without Parquet, so its first segments leave the local
/// disk; parquet.enable is then set and conversion starts at the local log start. The
/// backfill command (against a real S3 server) converts what only the bucket holds, with
/// its progress, and afterwards the files cover the log from offset 0 without a gap or a
/// duplicate.
#[test]
fn backfill_converts_segments_offloaded_before_parquet_was_enabled() {
    use strata_store::testing::S3Server;
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("strata");
    let broker = Broker::start_with_env(
        &dir.path().join("data"),
        "127.0.0.1:0",
        &[
            "--object-store",
            &url,
            "--cache-disk",
            "0",
            "--retention-check-interval",
            "1s",
            "--min-segment-bytes",
            "1",
        ],
        &s3.env(),
    );
    let b = broker.kafka.clone();
    create_topic(
        &b,
        "late",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", "16384"),
            ("local.retention.bytes", "40000"),
        ],
    );
    let base = now_ms() - 60_000;
    produce_numbered(&b, "late", 0, 3_000, base);
    wait_for(
        "offload and local retention",
        Duration::from_secs(60),
        || {
            let s = tier_status(&broker, "late", 0);
            s["local_start_offset"].as_i64().unwrap() > 1_000
                && s["remote_start_offset"].as_i64() == Some(0)
        },
    );

    let strata = |args: &[&str]| {
        let out = std::process::Command::new(common::strata_bin())
            .args(args)
            .args(["--bootstrap", &b])
            .args(if args[0] == "tier" {
                vec!["--http", broker.http.as_str()]
            } else {
                vec![]
            })
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, out) = strata(&["topic", "alter", "late", "--set", "parquet.enable=true"]);
    assert!(ok, "{out}");
    produce_numbered(&b, "late", 3_000, 1_000, base);
    let root = s3.root();
    // Conversion starts at the local log start: the bucket's first offsets are missing.
    wait_for("the first Parquet files", Duration::from_secs(60), || {
        !checked_rows(&root, base).is_empty()
    });
    let before = checked_rows(&root, base);
    let first = *before.keys().next().unwrap();
    assert!(
        first > 1_000,
        "conversion began at the local log start, not {first}"
    );

    let target = tier_status(&broker, "late", 0)["remote_end_offset"]
        .as_i64()
        .unwrap();
    let (ok, out) = strata(&["tier", "parquet", "backfill", "--topic", "late"]);
    assert!(ok, "backfill failed: {out}");
    assert!(
        out.contains("every offloaded offset is in a Parquet file"),
        "{out}"
    );

    let rows = checked_rows(&root, base);
    let last = *rows.keys().last().unwrap();
    assert!(
        last + 1 >= target,
        "converted up to {last}, offloaded up to {target}"
    );
    assert_eq!(
        rows.keys().next(),
        Some(&0),
        "the files start at the log start"
    );
    assert_eq!(rows.len() as i64, last + 1, "offsets 0..={last} contiguous");
    let s = tier_status(&broker, "late", 0);
    assert_eq!(s["parquet_start_offset"].as_i64(), Some(0), "{s}");
    assert!(s["parquet_backfill_next"].is_null(), "{s}");

    // A second run has nothing to do and says so.
    let (ok, out) = strata(&["tier", "parquet", "backfill", "--topic", "late"]);
    assert!(ok, "{out}");

    // A topic that does not tier: a clear error naming what to do.
    create_topic(&b, "plain", 1, &[]);
    let (ok, out) = strata(&["tier", "parquet", "backfill", "--topic", "plain"]);
    assert!(!ok);
    assert!(out.contains("remote.storage.enable"), "{out}");
}

/// kill -9 of the broker while it converts, three times: afterwards no offset is in two
/// files and none is missing.
#[test]
fn kill_9_during_conversion_leaves_no_duplicate_or_missing_offset() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let url = format!("file://{}", cold.display());
    let mut broker = Broker::start(
        &dir.path().join("data"),
        &["--object-store", &url, "--min-segment-bytes", "1"],
    );
    let b = broker.kafka.clone();
    create_topic(
        &b,
        "crashy",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "16384"),
        ],
    );
    let base = now_ms() - 60_000;
    let per_round = 4_000;
    let mut produced = 0;
    for round in 0..3u64 {
        // Kill while files are being written: once the first of this round's files is
        // there, after a varying pause.
        let have = checked_rows(&cold, base).len();
        produce_numbered(&broker.kafka, "crashy", produced, per_round, base);
        produced += per_round;
        wait_for("conversion under way", Duration::from_secs(60), || {
            checked_rows(&cold, base).len() > have
        });
        std::thread::sleep(Duration::from_millis(37 * round));
        broker.kill9();
        broker.restart();
    }
    assert_eq!(broker.kafka, b);
    // Everything sealed ends up converted once.
    wait_for("conversion to catch up", Duration::from_secs(90), || {
        checked_rows(&cold, base).len() as i64 >= produced * 3 / 4
    });
    let rows = checked_rows(&cold, base);
    let last = *rows.keys().last().unwrap();
    assert_eq!(rows.keys().next(), Some(&0));
    assert_eq!(rows.len() as i64, last + 1, "offsets 0..={last} contiguous");
}

type JsonRow = (Option<String>, Option<f64>, Option<i64>, Option<Vec<u8>>);

/// parquet.value.format=json with a schema: values become typed columns, and one that
/// does not fit is kept whole in `_raw` (its typed columns null) without blocking the
/// partition; the files still hold every offset.
#[test]
fn json_values_become_typed_columns_and_misfits_land_in_raw() {
    use arrow::array::{Array, StructArray};
    use arrow::datatypes::Float64Type;

    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let url = format!("file://{}", cold.display());
    let broker = Broker::start(
        &dir.path().join("data"),
        &["--object-store", &url, "--min-segment-bytes", "1"],
    );
    let b = broker.kafka.clone();
    let schema = r#"{"fields":[{"name":"user","type":"utf8"},{"name":"amount","type":"float64"},{"name":"n","type":"int64","nullable":true}]}"#;
    create_topic(
        &b,
        "orders",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("parquet.value.format", "json"),
            ("parquet.value.schema", schema),
            ("segment.bytes", "16384"),
        ],
    );
    let (p, d) = producer(
        &b,
        &[("acks", "all"), ("linger.ms", "2"), ("batch.size", "8192")],
    );
    let n = 2_000i64;
    let value = |o: i64| -> String {
        match o % 100 {
            7 => "{not json".to_string(),
            8 => r#"{"user":"u","amount":"not a number"}"#.to_string(),
            _ => format!(
                r#"{{"user":"u{}","amount":{}.5,"n":{o},"extra":true}}"#,
                o % 13,
                o
            ),
        }
    };
    for o in 0..n {
        let v = value(o);
        p.send(BaseRecord::<str, str>::to("orders").key("k").payload(&v))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    flush(&p);
    assert!(
        d.errors.lock().unwrap().is_empty(),
        "{:?}",
        d.errors.lock().unwrap().first()
    );

    // offset -> (user, amount, n, _raw)
    let mut seen: BTreeMap<i64, JsonRow> = BTreeMap::new();
    wait_for("JSON rows in Parquet", Duration::from_secs(60), || {
        let mut files = Vec::new();
        if cold.exists() {
            parquet_files(&cold, &mut files);
        }
        seen.clear();
        for f in &files {
            let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
                .unwrap()
                .build()
                .unwrap();
            for batch in reader {
                let b = batch.unwrap();
                let offsets = b
                    .column_by_name("offset")
                    .unwrap()
                    .as_primitive::<Int64Type>();
                let v: &StructArray = b.column_by_name("value").unwrap().as_struct();
                let user = v.column_by_name("user").unwrap().as_string::<i32>();
                let amount = v
                    .column_by_name("amount")
                    .unwrap()
                    .as_primitive::<Float64Type>();
                let num = v.column_by_name("n").unwrap().as_primitive::<Int64Type>();
                let raw = b.column_by_name("_raw").unwrap().as_binary::<i32>();
                for i in 0..b.num_rows() {
                    let typed = !v.is_null(i);
                    let prev = seen.insert(
                        offsets.value(i),
                        (
                            (typed && !user.is_null(i)).then(|| user.value(i).to_string()),
                            (typed && !amount.is_null(i)).then(|| amount.value(i)),
                            (typed && !num.is_null(i)).then(|| num.value(i)),
                            (!raw.is_null(i)).then(|| raw.value(i).to_vec()),
                        ),
                    );
                    assert!(prev.is_none(), "offset {} twice", offsets.value(i));
                }
            }
        }
        seen.len() as i64 >= n / 2
    });
    let last = *seen.keys().last().unwrap();
    assert_eq!(seen.len() as i64, last + 1, "offsets 0..={last} contiguous");
    let mut misfits = 0;
    for (&o, (user, amount, num, raw)) in &seen {
        if o % 100 == 7 || o % 100 == 8 {
            misfits += 1;
            assert_eq!(raw.as_deref(), Some(value(o).as_bytes()), "_raw at {o}");
            assert_eq!(
                (user, amount, num),
                (&None, &None, &None),
                "typed columns at {o}"
            );
        } else {
            assert_eq!(raw, &None, "no _raw at {o}");
            assert_eq!(
                user.as_deref(),
                Some(format!("u{}", o % 13).as_str()),
                "user at {o}"
            );
            assert_eq!(*amount, Some(o as f64 + 0.5), "amount at {o}");
            assert_eq!(*num, Some(o), "n at {o}");
        }
    }
    assert!(misfits >= 2, "the misfits were converted too");
    let metrics = broker.http_get("/metrics");
    assert!(
        metrics.contains("strata_parquet_raw_values_total"),
        "misfits are counted"
    );
}

/// The base offset of the partition's active (highest) local segment: every offset
/// below it is in a sealed segment.
fn active_segment_base(partition_dir: &Path) -> i64 {
    std::fs::read_dir(partition_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".log")?.parse::<i64>().ok()
        })
        .max()
        .expect("a segment file")
}

/// Starts a broker on `kafka` (the address of one that just stopped), retrying while the
/// port lingers.
fn start_again(data: &Path, kafka: &str, extra: &[&str]) -> Broker {
    let mut attempt = 0;
    loop {
        match std::panic::catch_unwind(|| Broker::start_on(data, kafka, extra)) {
            Ok(b) => return b,
            Err(e) if attempt == 50 => std::panic::resume_unwind(e),
            Err(_) => attempt += 1,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A batch that can no longer be converted: among good records, one zstd batch whose
/// record decompresses to 2 MiB is produced (under the default cap) into the active
/// segment; the broker restarts with --max-decompressed-batch-bytes 1MiB, so once that
/// segment seals its conversion fails on that batch. The batch's offset becomes a dead
/// letter in the manifest (and in /v1/tier/status and the metrics), every good record
/// around it, in the same segment, is in a Parquet file at its offset, conversion
/// reaches the sealed end of the log, and local retention moves past the segment.
#[test]
fn a_batch_that_cannot_be_converted_is_set_aside_and_conversion_goes_on() {
    use strata_proto::Compression;
    use strata_proto::batch::build::{NewRecord, batch};

    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let data = dir.path().join("data");
    let url = format!("file://{}", cold.display());
    let flags = [
        "--object-store",
        &url,
        "--min-segment-bytes",
        "1",
        "--retention-check-interval",
        "1s",
    ];
    let mut broker = Broker::start(&data, &flags);
    let b = broker.kafka.clone();
    create_topic(
        &b,
        "poison",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            // Everything produced before the restart stays in the active segment.
            ("segment.bytes", "65536"),
            ("local.retention.bytes", "70000"),
        ],
    );
    let base = now_ms() - 60_000;
    produce_numbered(&b, "poison", 0, 200, base);
    let bad_offset = 200;
    let bomb = batch(
        &[NewRecord::value(vec![b'z'; 2 << 20], base + bad_offset)],
        Compression::Zstd,
        None,
    );
    assert!(bomb.len() < 64 << 10, "{} bytes compressed", bomb.len());
    assert_eq!(
        common::wire::produce(&b, "poison", 0, -1, bomb, Duration::from_secs(30)),
        strata_proto::ErrorCode::None
    );
    produce_numbered(&b, "poison", bad_offset + 1, 199, base);
    let partition_dir = data.join("poison-0");
    assert_eq!(
        active_segment_base(&partition_dir),
        0,
        "nothing sealed before the restart"
    );
    broker.stop();

    let mut capped = flags.to_vec();
    capped.extend(["--max-decompressed-batch-bytes", "1MiB"]);
    let broker = start_again(&data, &b, &capped);
    let total = 4_000;
    produce_numbered(&broker.kafka, "poison", 400, total - 400, base);

    wait_for(
        "conversion past the dead letter to the sealed end, and local retention",
        Duration::from_secs(120),
        || {
            let s = tier_status(&broker, "poison", 0);
            let sealed = active_segment_base(&partition_dir);
            sealed > bad_offset
                && s["parquet_next_offset"].as_i64() == Some(sealed)
                && s["remote_end_offset"].as_i64() == Some(sealed)
                && s["local_start_offset"].as_i64().unwrap() > bad_offset
        },
    );
    let sealed = active_segment_base(&partition_dir);
    let s = tier_status(&broker, "poison", 0);
    assert_eq!(s["parquet_dead_letters"].as_i64(), Some(1), "{s}");
    let last = &s["parquet_last_dead_letter"];
    assert_eq!(last["first_offset"].as_i64(), Some(bad_offset), "{s}");
    assert_eq!(last["last_offset"].as_i64(), Some(bad_offset), "{s}");
    let reason = last["reason"].as_str().unwrap();
    assert!(
        reason.contains("decompress to more than 1048576 bytes"),
        "{reason}"
    );

    // Every good record below the sealed end is in a file at its offset (the bad
    // batch's segment included: only its one offset is missing), each once.
    let rows = checked_rows(&cold, base);
    let want: Vec<i64> = (0..sealed).filter(|&o| o != bad_offset).collect();
    assert_eq!(rows.keys().copied().collect::<Vec<_>>(), want);

    // The manifest names the dead letter.
    let manifest = cold.join(format!(
        "{}/parquet/topic=poison/partition=0/_manifest.json",
        broker_cluster_dir(&cold)
    ));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    let letters = m["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{m}");
    assert_eq!(letters[0]["first_offset"].as_i64(), Some(bad_offset));
    assert_eq!(letters[0]["last_offset"].as_i64(), Some(bad_offset));
    assert_eq!(letters[0]["reason"].as_str(), Some(reason));
    assert!(letters[0]["at_ms"].as_i64().unwrap() > base);
    assert_eq!(m["next_offset"].as_i64(), Some(sealed), "{m}");
    let files = m["files"].as_array().unwrap();
    assert!(
        files
            .iter()
            .any(|f| f["last_offset"].as_i64() == Some(bad_offset - 1))
            && files
                .iter()
                .any(|f| f["first_offset"].as_i64() == Some(bad_offset + 1)),
        "the good batches on both sides of the bad one are in files: {m}"
    );

    let metrics = broker.http_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("strata_parquet_dead_letters_total{topic=\"poison\"} 1")),
        "the dead letter is counted:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("parquet"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The directory of the one cluster under the bucket root (`{cluster_id}`).
fn broker_cluster_dir(cold: &Path) -> String {
    let dirs: Vec<String> = std::fs::read_dir(cold)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("parquet").is_dir())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}
