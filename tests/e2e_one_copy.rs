//! One copy in the bucket (issue 20, part 5): a topic with
//! `remote.storage.format=parquet` keeps only its Parquet files (and Iceberg table) in
//! the bucket, no raw segments, and Kafka fetches below the local log start are
//! answered by re-encoding record batches from the files. Against a real S3 server
//! (s3s-fs): librdkafka and kafka-python consumers from offset 0 read exactly what was
//! produced (offsets, keys, values, headers, timestamps), ListOffsets by time finds
//! records that are only in the files, pyiceberg reads the same rows, and after kill -9
//! the broker serves them again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Broker;
use common::kafka::{client_config, create_topic, flush, producer};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use strata_store::testing::S3Server;

const TOPIC: &str = "onecopy";
const PARTITIONS: i32 = 2;
const N: i64 = 3_000;

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What a consumer should read at partition `p`, offset `o`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    key: Option<String>,
    value: Option<String>,
    timestamp: i64,
    headers: Vec<(String, Option<String>)>,
}

fn record(p: i32, o: i64, base: i64) -> Rec {
    Rec {
        key: (o % 17 != 3).then(|| format!("k{}", o % 13)),
        value: (o % 29 != 5).then(|| format!("p{p}-v{o}-{}", "x".repeat((o % 90) as usize))),
        timestamp: base + o,
        headers: match o % 3 {
            0 => vec![],
            1 => vec![("trace".into(), Some(format!("t{o}")))],
            _ => vec![("a".into(), Some("1".into())), ("b".into(), None)],
        },
    }
}

fn produce(bootstrap: &str, base: i64) {
    let (p, d) = producer(
        bootstrap,
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("batch.size", "16384"),
            ("compression.type", "lz4"),
        ],
    );
    for part in 0..PARTITIONS {
        for o in 0..N {
            let r = record(part, o, base);
            let mut headers = OwnedHeaders::new();
            for (k, v) in &r.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: v.as_deref(),
                });
            }
            let mut br = BaseRecord::<str, str>::to(TOPIC)
                .partition(part)
                .timestamp(r.timestamp)
                .headers(headers);
            if let Some(k) = &r.key {
                br = br.key(k);
            }
            if let Some(v) = &r.value {
                br = br.payload(v);
            }
            p.send(br).map_err(|(e, _)| e).unwrap();
        }
        flush(&p);
    }
    assert_eq!(*d.errors.lock().unwrap(), Vec::<String>::new());
    assert_eq!(d.acked.lock().unwrap().len() as i64, N * PARTITIONS as i64);
}

fn status(b: &Broker) -> Vec<Value> {
    let v: Value = serde_json::from_str(&b.http_get("/v1/tier/status")).unwrap();
    v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["topic"] == TOPIC)
        .cloned()
        .collect()
}

fn start(data: &Path, s3: &S3Server) -> Broker {
    let url = s3.url("one");
    Broker::start_with_env(
        data,
        "127.0.0.1:0",
        &[
            "--object-store",
            &url,
            "--min-segment-bytes",
            "1",
            "--iceberg-commit-interval",
            "1s",
            "--cache-disk",
            "0",
            "--remote-chunk",
            "4MiB",
            "--retention-check-interval",
            "1s",
        ],
        &s3.env(),
    )
}

/// Every record of the topic through librdkafka, from offset 0, by partition.
fn read_rdkafka(bootstrap: &str) -> BTreeMap<i32, Vec<(i64, Rec)>> {
    let c: BaseConsumer = client_config(
        bootstrap,
        &[
            ("group.id", "unused"),
            ("enable.auto.commit", "false"),
            ("max.partition.fetch.bytes", "65536"),
        ],
    )
    .create()
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Offset(0))
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out: BTreeMap<i32, Vec<(i64, Rec)>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while out.values().map(Vec::len).sum::<usize>() < (N * PARTITIONS as i64) as usize {
        assert!(Instant::now() < deadline, "rdkafka read too few in time");
        match c.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                let headers = m.headers().map_or(vec![], |h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), text(h.value)))
                        .collect()
                });
                out.entry(m.partition()).or_default().push((
                    m.offset(),
                    Rec {
                        key: text(m.key()),
                        value: text(m.payload()),
                        timestamp: m.timestamp().to_millis().unwrap(),
                        headers,
                    },
                ));
            }
            Some(Err(e)) => panic!("consume error: {e}"),
            None => {}
        }
    }
    out
}

/// One partition through kafka-python, from offset 0.
fn read_kafka_python(bootstrap: &str, p: i32) -> Vec<(i64, Rec)> {
    let out = Command::new("python3")
        .arg(format!(
            "{}/tests/python/read_records.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args([bootstrap, TOPIC, &p.to_string()])
        .output()
        .expect("python3 with kafka-python (scripts/deps)");
    assert!(
        out.status.success(),
        "kafka-python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let text = |v: &Value| v.as_str().map(str::to_string);
            (
                v[0].as_i64().unwrap(),
                Rec {
                    key: text(&v[1]),
                    value: text(&v[2]),
                    timestamp: v[3].as_i64().unwrap(),
                    headers: v[4]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|h| (h[0].as_str().unwrap().to_string(), text(&h[1])))
                        .collect(),
                },
            )
        })
        .collect()
}

fn check(p: i32, got: &[(i64, Rec)], base: i64, who: &str) {
    assert_eq!(got.len() as i64, N, "{who}: partition {p} record count");
    for (i, (o, r)) in got.iter().enumerate() {
        assert_eq!(
            *o, i as i64,
            "{who}: partition {p} offsets in order, none skipped"
        );
        assert_eq!(r, &record(p, *o, base), "{who}: partition {p} offset {o}");
    }
}

/// The bucket's object keys under `prefix`, listed by an independent client.
fn bucket_keys(s3: &S3Server, prefix: &str) -> Vec<(String, u64)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, u64)>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let key = path.strip_prefix(root).unwrap().display().to_string();
                out.push((key, e.metadata().map_or(0, |m| m.len())));
            }
        }
    }
    // s3s-fs keeps each object as a file under its root; its in-flight multipart
    // uploads live elsewhere.
    let root = s3.root().join(s3.bucket());
    let mut out = Vec::new();
    walk(&root, &root.join(prefix), &mut out);
    out
}

/// pyiceberg's rows of the topic's table (over S3), by (partition, offset): key, value,
/// timestamp.
type Scanned = BTreeMap<(i32, i64), (Option<String>, Option<String>, i64)>;

fn scan_with_pyiceberg(s3: &S3Server, url: &str, objects: &Path) -> Option<Scanned> {
    let table = std::fs::read_dir(objects)
        .ok()?
        .flatten()
        .map(|e| e.path().join("iceberg").join(TOPIC))
        .find(|d| d.join("metadata/version-hint.text").is_file())?;
    let cluster = table
        .parent()?
        .parent()?
        .file_name()?
        .to_string_lossy()
        .to_string();
    let hint = std::fs::read_to_string(table.join("metadata/version-hint.text")).ok()?;
    let env: BTreeMap<String, String> = s3.env().into_iter().collect();
    let out = Command::new("python3")
        .arg(format!(
            "{}/tests/python/iceberg_scan.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(format!(
            "{url}/{cluster}/iceberg/{TOPIC}/metadata/v{}.metadata.json",
            hint.trim()
        ))
        .arg(format!("s3.endpoint={}", s3.endpoint()))
        .arg(format!("s3.access-key-id={}", env["AWS_ACCESS_KEY_ID"]))
        .arg(format!(
            "s3.secret-access-key={}",
            env["AWS_SECRET_ACCESS_KEY"]
        ))
        .arg(format!("s3.region={}", env["AWS_REGION"]))
        .output()
        .expect("python3 (scripts/deps installs pyiceberg)");
    assert!(
        out.status.success(),
        "pyiceberg: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut rows = BTreeMap::new();
    for r in v["rows"].as_array().unwrap() {
        let text = |v: &Value| v.as_str().map(str::to_string);
        let key = (r[0].as_i64().unwrap() as i32, r[1].as_i64().unwrap());
        let row = (text(&r[2]), text(&r[3]), r[4].as_i64().unwrap());
        assert!(
            rows.insert(key, row).is_none(),
            "pyiceberg read {key:?} twice"
        );
    }
    Some(rows)
}

#[test]
fn a_one_copy_topic_keeps_only_parquet_and_every_client_reads_it_back() {
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = start(&data, &s3);
    create_topic(
        &broker.kafka,
        TOPIC,
        PARTITIONS,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("remote.storage.format", "parquet"),
            ("segment.bytes", "65536"),
            ("segment.ms", "1000"),
            ("local.retention.bytes", "0"),
        ],
    );
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;
    produce(&broker.kafka, base);

    // Conversion catches up and local retention deletes every converted segment: all
    // that was produced is now only in the Parquet files.
    wait_for(
        "the local logs to be empty",
        Duration::from_secs(120),
        || {
            status(&broker)
                .iter()
                .all(|s| s["local_start_offset"] == N && s["parquet_next_offset"] == N)
        },
    );
    for s in status(&broker) {
        assert_eq!(s["remote_format"], "parquet", "{s}");
        assert_eq!(s["remote_segments"], 0, "no raw segment offloaded: {s}");
        assert!(s["parquet_bytes"].as_u64().unwrap() > 0, "{s}");
    }
    // The bucket holds the Parquet files and the table, and no raw segment.
    let keys = bucket_keys(&s3, "one");
    assert!(
        keys.iter().any(|(k, _)| k.ends_with(".parquet")),
        "{keys:?}"
    );
    let raw: Vec<_> = keys
        .iter()
        .filter(|(k, _)| k.contains("/segments/") || k.contains("/manifest/"))
        .collect();
    assert!(raw.is_empty(), "raw segment objects in the bucket: {raw:?}");

    // Earliest is offset 0 (KIP-405), KIP-1005's earliest-local is the local start.
    let c: BaseConsumer = client_config(&broker.kafka, &[]).create().unwrap();
    for p in 0..PARTITIONS {
        assert_eq!(
            c.fetch_watermarks(TOPIC, p, Duration::from_secs(10))
                .unwrap(),
            (0, N)
        );
    }
    // ListOffsets by time finds a record that is only in the files.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 1, Offset::Offset(base + 1234))
        .unwrap();
    let found = c.offsets_for_times(tpl, Duration::from_secs(10)).unwrap();
    assert_eq!(
        found.find_partition(TOPIC, 1).unwrap().offset(),
        Offset::Offset(1234)
    );

    // librdkafka and kafka-python read exactly what was produced.
    let got = read_rdkafka(&broker.kafka);
    for p in 0..PARTITIONS {
        check(p, &got[&p], base, "rdkafka");
        check(
            p,
            &read_kafka_python(&broker.kafka, p),
            base,
            "kafka-python",
        );
    }
    let v: Value = serde_json::from_str(&broker.http_get("/v1/tier/status")).unwrap();
    assert!(
        v["cache_misses"].as_u64().unwrap() > 0,
        "the reads came from the bucket"
    );

    // pyiceberg reads the same rows from the same files.
    let url = s3.url("one");
    let objects = s3.root().join(s3.bucket()).join("one");
    let mut rows = None;
    wait_for(
        "the Iceberg table to hold every record",
        Duration::from_secs(120),
        || {
            rows = scan_with_pyiceberg(&s3, &url, &objects)
                .filter(|r| r.len() as i64 == N * PARTITIONS as i64);
            rows.is_some()
        },
    );
    for ((p, o), (key, value, ts)) in rows.unwrap() {
        let want = record(p, o, base);
        assert_eq!(
            (key, value, ts),
            (want.key, want.value, want.timestamp),
            "{p}/{o}"
        );
    }

    // Going back to raw segments would leave a hole: refused, with the reason.
    let out = common::cli(
        &broker.kafka,
        &[
            "topic",
            "alter",
            TOPIC,
            "--set",
            "remote.storage.format=segments",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot go from parquet back to segments"),
        "{err}"
    );

    // After kill -9 the broker serves the files again (it reads their manifest on the
    // first fetch below its local start).
    broker.kill9();
    broker.restart();
    check(
        0,
        &read_kafka_python(&broker.kafka, 0),
        base,
        "kafka-python after kill -9",
    );
}

#[test]
fn one_copy_needs_parquet_and_binary_values() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let url = format!("file://{}", cold.display());
    let broker = Broker::start(&dir.path().join("data"), &["--object-store", &url]);
    let create = |configs: &[&str]| {
        let mut args = vec!["topic", "create", "t1"];
        for c in configs {
            args.extend(["--config", c]);
        }
        common::cli(&broker.kafka, &args)
    };
    let out = create(&[
        "remote.storage.enable=true",
        "remote.storage.format=parquet",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs remote.storage.enable=true and parquet.enable=true"),
        "{err}"
    );
    let out = create(&[
        "remote.storage.enable=true",
        "parquet.enable=true",
        "parquet.value.format=json",
        r#"parquet.value.schema={"fields":[{"name":"n","type":"int64","nullable":true}]}"#,
        "remote.storage.format=parquet",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs parquet.value.format=binary"), "{err}");
    let out = create(&["remote.storage.format=columns"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be segments or parquet"), "{err}");
}

/// Remote retention of a one-copy topic works on its Parquet files: records older than
/// retention.ms leave the log (the log start moves past their files, which leave the
/// bucket), the newer ones are still read from the files.
#[test]
fn retention_expires_the_files_of_a_one_copy_topic() {
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with_env(
        &dir.path().join("data"),
        "127.0.0.1:0",
        &[
            "--object-store",
            &s3.url("ret"),
            "--min-segment-bytes",
            "1",
            "--iceberg-commit-interval",
            "0",
            "--cache-disk",
            "0",
            "--retention-check-interval",
            "1s",
        ],
        &s3.env(),
    );
    create_topic(
        &broker.kafka,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("remote.storage.format", "parquet"),
            ("segment.bytes", "16384"),
            ("segment.ms", "1000"),
            ("local.retention.bytes", "0"),
            ("retention.ms", "3600000"),
        ],
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // 500 records two hours old, then (in later segments) 500 new ones.
    let (p, d) = producer(&broker.kafka, &[("acks", "all"), ("linger.ms", "2")]);
    let send = |o: i64, ts: i64| {
        let v = format!("v{o}");
        p.send(
            BaseRecord::<str, str>::to(TOPIC)
                .partition(0)
                .payload(&v)
                .timestamp(ts),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    };
    for o in 0..500 {
        send(o, now - 7_200_000 + o);
    }
    flush(&p);
    // segment.ms rolls the last old segment: the new records start a segment of their
    // own, and so a file.
    wait_for("the old records in files", Duration::from_secs(60), || {
        status(&broker)[0]["parquet_next_offset"] == 500
    });
    for o in 500..1000 {
        send(o, now + o);
    }
    flush(&p);
    assert_eq!(*d.errors.lock().unwrap(), Vec::<String>::new());

    // The old records' files go; the log starts at the first new record's file.
    let c: BaseConsumer = client_config(&broker.kafka, &[]).create().unwrap();
    wait_for(
        "retention to move the log start",
        Duration::from_secs(120),
        || {
            let (low, high) = c
                .fetch_watermarks(TOPIC, 0, Duration::from_secs(10))
                .unwrap();
            let s = &status(&broker)[0];
            low >= 500 && high == 1000 && s["local_start_offset"] == 1000
        },
    );
    let (low, _) = c
        .fetch_watermarks(TOPIC, 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!(low, 500, "the first new record starts a file");
    let parquet: Vec<String> = bucket_keys(&s3, "ret")
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.ends_with(".parquet"))
        .collect();
    assert!(!parquet.is_empty());
    for k in &parquet {
        let first: i64 = k.rsplit('/').next().unwrap()[..20].parse().unwrap();
        assert!(first >= 500, "an expired file is still in the bucket: {k}");
    }
    // Every record from the new log start is read back, from the files.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .unwrap();
    let c: BaseConsumer = client_config(
        &broker.kafka,
        &[("group.id", "unused"), ("enable.auto.commit", "false")],
    )
    .create()
    .unwrap();
    c.assign(&tpl).unwrap();
    let mut next = 500;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < 1000 {
        assert!(Instant::now() < deadline, "read only up to {next}");
        if let Some(m) = c.poll(Duration::from_millis(500)) {
            let m = m.unwrap();
            assert_eq!(m.offset(), next);
            assert_eq!(m.payload().unwrap(), format!("v{next}").as_bytes());
            next += 1;
        }
    }
}
