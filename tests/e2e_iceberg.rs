//! Iceberg tables published by the broker (issue 20): a parquet.enable topic's Parquet
//! files are committed to `{cluster}/iceberg/{topic}/` in the bucket, one snapshot per
//! `--iceberg-commit-interval`, and pyiceberg (an independent reader) finds every record
//! produced exactly once through the table's metadata pointer, also after kill -9 of
//! the broker in the middle of converting and committing, many times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Broker;
use common::kafka::{create_topic, flush, producer};
use rdkafka::producer::BaseRecord;
use strata_store::testing::S3Server;

const TOPIC: &str = "lake";

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn value_at(p: i32, o: i64) -> String {
    format!("p{p}-value-{o}-{}", "z".repeat((o % 50) as usize))
}

/// Produces `count` records to each partition of `partitions`, numbered on from what
/// each holds already (`next`), keyed k{o%11}, timestamped `base + o`.
fn produce(bootstrap: &str, partitions: i32, next: &mut BTreeMap<i32, i64>, count: i64, base: i64) {
    produce_in_batches_of(bootstrap, partitions, next, count, base, "8192")
}

/// [`produce`] with the producer's batch.size.
fn produce_in_batches_of(
    bootstrap: &str,
    partitions: i32,
    next: &mut BTreeMap<i32, i64>,
    count: i64,
    base: i64,
    batch_size: &str,
) {
    let (p, d) = producer(
        bootstrap,
        &[
            ("acks", "all"),
            ("linger.ms", "2"),
            ("batch.size", batch_size),
        ],
    );
    for part in 0..partitions {
        let from = *next.entry(part).or_default();
        for o in from..from + count {
            let (key, value) = (format!("k{}", o % 11), value_at(part, o));
            p.send(
                BaseRecord::<str, str>::to(TOPIC)
                    .partition(part)
                    .key(&key)
                    .payload(&value)
                    .timestamp(base + o),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        }
        flush(&p);
        next.insert(part, from + count);
    }
    assert_eq!(*d.errors.lock().unwrap(), Vec::<String>::new());
}

/// The table's directory under the bucket (the one cluster directory holding it).
fn table_dir(cold: &Path) -> Option<PathBuf> {
    std::fs::read_dir(cold)
        .ok()?
        .flatten()
        .map(|e| e.path().join("iceberg").join(TOPIC))
        .find(|d| d.join("metadata").is_dir())
}

/// Per partition, the last offset the table's current snapshot has committed (read from
/// the metadata JSON as any engine would: version hint, then the current snapshot's
/// summary).
fn committed(cold: &Path) -> BTreeMap<i32, i64> {
    let Some(dir) = table_dir(cold) else {
        return BTreeMap::new();
    };
    let Ok(hint) = std::fs::read_to_string(dir.join("metadata/version-hint.text")) else {
        return BTreeMap::new();
    };
    let meta = dir.join(format!("metadata/v{}.metadata.json", hint.trim()));
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(meta).unwrap()).unwrap();
    committed_in(&meta)
}

/// Per partition, the offset the current snapshot of table metadata `meta` has
/// committed (its summary's `strata.partition.{p}.committed-offset`).
fn committed_in(meta: &serde_json::Value) -> BTreeMap<i32, i64> {
    let current = &meta["current-snapshot-id"];
    let Some(snapshot) = meta["snapshots"]
        .as_array()
        .and_then(|s| s.iter().find(|s| &s["snapshot-id"] == current))
    else {
        return BTreeMap::new();
    };
    snapshot["summary"]
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(k, v)| {
            let p = k
                .strip_prefix("strata.partition.")?
                .strip_suffix(".committed-offset")?;
            Some((p.parse().ok()?, v.as_str()?.parse().ok()?))
        })
        .collect()
}

/// Rows by (partition, offset): key, value, timestamp.
type Rows = BTreeMap<(i32, i64), (String, String, i64)>;

/// What pyiceberg reads: the number of files its scan plans, and the rows by
/// (partition, offset), checked to hold each offset once.
fn pyiceberg_rows(cold: &Path) -> (usize, Rows) {
    let dir = table_dir(cold).expect("a table");
    scan_with_pyiceberg(&dir.display().to_string(), &[])
}

/// The Parquet objects of the topic in the bucket.
fn parquet_objects(cold: &Path) -> usize {
    fn walk(dir: &Path, n: &mut usize) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, n);
            } else if path.extension().is_some_and(|x| x == "parquet") {
                *n += 1;
            }
        }
    }
    let mut n = 0;
    for cluster in std::fs::read_dir(cold).into_iter().flatten().flatten() {
        walk(
            &cluster
                .path()
                .join("parquet")
                .join(format!("topic={TOPIC}")),
            &mut n,
        );
    }
    n
}

/// The JSON a script of tests/python prints, run with `args` (its pyiceberg is
/// installed by scripts/deps).
fn pyiceberg(script: &str, args: &[String]) -> serde_json::Value {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::python_json(script, &args)
}

/// pyiceberg's scan of the table at `location` (a local table directory or a metadata
/// location), with FileIO `properties`; or, `location` being a REST catalog's URI, of
/// the table the first of `properties` names (`namespace.table`).
fn scan_with_pyiceberg(location: &str, properties: &[String]) -> (usize, Rows) {
    let mut args = vec![location.to_string()];
    args.extend_from_slice(properties);
    let v = pyiceberg("iceberg_scan.py", &args);
    let mut rows = BTreeMap::new();
    for r in v["rows"].as_array().unwrap() {
        let (p, o) = (r[0].as_i64().unwrap() as i32, r[1].as_i64().unwrap());
        let row = (
            r[2].as_str().unwrap().to_string(),
            r[3].as_str().unwrap().to_string(),
            r[4].as_i64().unwrap(),
        );
        assert!(
            rows.insert((p, o), row).is_none(),
            "pyiceberg read {p}/{o} twice"
        );
    }
    (v["files"].as_u64().unwrap() as usize, rows)
}

/// Every row is what was produced at its partition and offset, and each partition's
/// rows are exactly offsets 0..=committed.
fn check_rows(rows: &Rows, committed: &BTreeMap<i32, i64>, base: i64) {
    for (&(p, o), (k, v, ts)) in rows {
        assert_eq!(k, &format!("k{}", o % 11), "key at {p}/{o}");
        assert_eq!(v, &value_at(p, o), "value at {p}/{o}");
        assert_eq!(*ts, base + o, "timestamp at {p}/{o}");
    }
    for (&p, &last) in committed {
        let offsets: Vec<i64> = rows.keys().filter(|k| k.0 == p).map(|k| k.1).collect();
        assert_eq!(
            offsets,
            (0..=last).collect::<Vec<_>>(),
            "partition {p}: offsets 0..={last}, each once"
        );
    }
}

/// A broker publishing every second to a local directory `cold`, with `extra` flags.
fn start(data: &Path, cold: &Path, extra: &[&str]) -> Broker {
    let url = format!("file://{}", cold.display());
    let mut args = vec![
        "--object-store",
        &url,
        "--min-segment-bytes",
        "1",
        "--iceberg-commit-interval",
        "1s",
    ];
    args.extend_from_slice(extra);
    Broker::start(data, &args)
}

fn create(bootstrap: &str, partitions: i32) {
    create_topic(
        bootstrap,
        TOPIC,
        partitions,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "16384"),
            ("segment.ms", "1000"),
        ],
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn pyiceberg_reads_every_record_once_from_the_published_table() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let broker = start(&dir.path().join("data"), &cold, &[]);
    create(&broker.kafka, 2);
    let base = now_ms() - 3_600_000;
    let mut next = BTreeMap::new();
    produce(&broker.kafka, 2, &mut next, 3_000, base);
    // segment.ms rolls the last segment too: everything produced ends up in the table.
    let want: BTreeMap<i32, i64> = next.iter().map(|(&p, &n)| (p, n - 1)).collect();
    wait_for(
        "the table to hold every record",
        Duration::from_secs(120),
        || committed(&cold) == want,
    );
    let (files, rows) = pyiceberg_rows(&cold);
    assert_eq!(rows.len() as i64, next.values().sum::<i64>());
    check_rows(&rows, &want, base);
    assert!(files >= 4, "{files} files: small segments make many");
    // Commits are batched: far fewer snapshots than files.
    let snapshots = broker
        .metric(&format!(
            "strata_iceberg_commits_total{{topic=\"{TOPIC}\"}}"
        ))
        .unwrap_or(0.0);
    assert!(
        snapshots >= 1.0 && (snapshots as usize) < files,
        "{snapshots} snapshots for {files} files"
    );
    // `strata topic describe` names the table's location.
    let out = common::cli(
        &broker.kafka,
        &["topic", "describe", TOPIC, "--http", &broker.http],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let dir = table_dir(&cold).unwrap().canonicalize().unwrap();
    assert!(
        text.contains(&format!("iceberg table: file://{}", dir.display())),
        "{text}"
    );
}

#[test]
fn kill_9_while_publishing_leaves_no_duplicate_and_no_gap() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let data = dir.path().join("data");
    let mut broker = start(&data, &cold, &[]);
    create(&broker.kafka, 2);
    let base = now_ms() - 3_600_000;
    let mut next = BTreeMap::new();
    for round in 0..5u64 {
        let before = committed(&cold);
        produce(&broker.kafka, 2, &mut next, 800, base);
        // Kill once this round's files start reaching the table, after a varying pause:
        // some kills land between a file and its commit, some in a commit.
        wait_for("a commit of this round", Duration::from_secs(60), || {
            committed(&cold) != before
        });
        std::thread::sleep(Duration::from_millis(150 * round));
        broker.kill9();
        broker.restart();
    }
    let want: BTreeMap<i32, i64> = next.iter().map(|(&p, &n)| (p, n - 1)).collect();
    wait_for("the table to catch up", Duration::from_secs(120), || {
        committed(&cold) == want
    });
    let (_, rows) = pyiceberg_rows(&cold);
    assert_eq!(rows.len() as i64, next.values().sum::<i64>());
    check_rows(&rows, &want, base);
}

/// Parquet retention drops files from the partitions' manifests; the next commit removes
/// them from the table (a delete snapshot), and their objects stay in the bucket as long
/// as a snapshot the table keeps names them: a reader of any kept snapshot, the current
/// one included, never finds a file gone.
#[test]
fn retention_removes_files_from_the_table_before_their_objects_go() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let broker = start(
        &dir.path().join("data"),
        &cold,
        &["--retention-check-interval", "1s"],
    );
    create_topic(
        &broker.kafka,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "16384"),
            ("segment.ms", "1000"),
            ("retention.ms", "20000"),
        ],
    );
    // Timestamps 15 s old: retention takes the files a few seconds after they are
    // converted and committed.
    let base = now_ms() - 15_000;
    let mut next = BTreeMap::new();
    produce(&broker.kafka, 1, &mut next, 2_000, base);
    let last = next[&0] - 1;
    wait_for(
        "the table to hold every record",
        Duration::from_secs(120),
        || committed(&cold).get(&0) == Some(&last),
    );
    // Retention then drops the older files from the table.
    let files = |cold: &Path| -> serde_json::Value {
        pyiceberg(
            "iceberg_files.py",
            &[table_dir(cold).unwrap().display().to_string()],
        )
    };
    wait_for(
        "retention to remove files from the table",
        Duration::from_secs(120),
        || {
            let v = files(&cold);
            v["snapshots"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["operation"] == "delete")
        },
    );
    let v = files(&cold);
    assert!(v["current"].as_i64().unwrap() < next[&0], "{v}");
    for s in v["snapshots"].as_array().unwrap() {
        assert_eq!(s["missing"], serde_json::json!([]), "snapshot {s}");
    }
    // The committed offset never moves back.
    assert_eq!(committed(&cold).get(&0), Some(&last));
}

/// Against a real S3 server (s3s-fs on loopback): the table's commits are conditional
/// puts there, its metadata names `s3://` locations, and pyiceberg reads the table
/// through S3 (pyarrow's S3 file system), every record once.
#[test]
fn the_table_is_published_to_s3_and_pyiceberg_reads_it_from_there() {
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("lake");
    let broker = Broker::start_with_env(
        &dir.path().join("data"),
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
        ],
        &s3.env(),
    );
    create(&broker.kafka, 2);
    let base = now_ms() - 3_600_000;
    let mut next = BTreeMap::new();
    produce(&broker.kafka, 2, &mut next, 1_500, base);
    let want: BTreeMap<i32, i64> = next.iter().map(|(&p, &n)| (p, n - 1)).collect();
    // s3s-fs keeps each object as a file under its root: the test reads the metadata
    // there; pyiceberg goes through S3.
    let objects = s3.root().join(s3.bucket()).join("lake");
    wait_for(
        "the table to hold every record",
        Duration::from_secs(120),
        || committed(&objects) == want,
    );
    let table = table_dir(&objects).unwrap();
    let cluster = table
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .unwrap()
        .to_string_lossy()
        .to_string();
    let hint = std::fs::read_to_string(table.join("metadata/version-hint.text")).unwrap();
    let location = format!(
        "{url}/{cluster}/iceberg/{TOPIC}/metadata/v{}.metadata.json",
        hint.trim()
    );
    let env: BTreeMap<String, String> = s3.env().into_iter().collect();
    let properties = vec![
        format!("s3.endpoint={}", s3.endpoint()),
        format!("s3.access-key-id={}", env["AWS_ACCESS_KEY_ID"]),
        format!("s3.secret-access-key={}", env["AWS_SECRET_ACCESS_KEY"]),
        format!("s3.region={}", env["AWS_REGION"]),
    ];
    let (files, rows) = scan_with_pyiceberg(&location, &properties);
    assert!(files >= 2, "{files} files");
    assert_eq!(rows.len() as i64, next.values().sum::<i64>());
    check_rows(&rows, &want, base);
}

/// Small-file compaction: a topic of tiny segments makes hundreds of tiny Parquet files;
/// the broker rewrites full groups of them as they are committed, `strata tier iceberg
/// compact` the rest, the table takes the new files in replace snapshots with the same
/// rows, a scan filtered on time plans only the files that can match, and once
/// `strata tier iceberg expire` drops the old snapshots the replaced files leave the
/// bucket.
#[test]
fn hundreds_of_small_files_are_compacted_into_a_few_with_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let broker = start(&dir.path().join("data"), &cold, &[]);
    create_topic(
        &broker.kafka,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "2048"),
            ("segment.ms", "1000"),
            ("parquet.target.file.bytes", "524288"),
        ],
    );
    let base = now_ms() - 3_600_000;
    let mut next = BTreeMap::new();
    produce_in_batches_of(&broker.kafka, 1, &mut next, 24_000, base, "1024");
    let want: BTreeMap<i32, i64> = next.iter().map(|(&p, &n)| (p, n - 1)).collect();
    wait_for(
        "the table to hold every record",
        Duration::from_secs(300),
        || committed(&cold) == want,
    );
    let converted = broker
        .metric(&format!("strata_parquet_rows_total{{topic=\"{TOPIC}\"}}"))
        .unwrap_or(0.0);
    assert_eq!(converted as i64, next[&0]);
    // Every segment made a file: hundreds of them. The broker rewrote full groups as
    // they were committed; the objects of the files replaced stay for the snapshots
    // naming them.
    let compacted = broker
        .metric(&format!(
            "strata_parquet_compacted_files_total{{topic=\"{TOPIC}\"}}"
        ))
        .unwrap_or(0.0);
    assert!(compacted > 0.0, "no full group was compacted");
    let small = parquet_objects(&cold);
    assert!(
        small >= 500,
        "{small} Parquet objects: expected 500 or more small files"
    );

    // `strata tier iceberg compact` rewrites what is left, and waits for it.
    let tier = |args: &[&str]| {
        let mut all = vec!["tier", "--http", &broker.http, "iceberg"];
        all.extend_from_slice(args);
        let out = common::cli(&broker.kafka, &all);
        assert!(
            out.status.success(),
            "strata {all:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // A scan of the last quarter of the time range plans only the files whose
    // statistics allow such rows (the broker's rewrites cover disjoint offset and time
    // ranges, so there are several files to choose from).
    let (files_before, rows_before) = pyiceberg_rows(&cold);
    assert_eq!(rows_before.len() as i64, next[&0]);
    let since = base + next[&0] * 3 / 4;
    let (late_files, late_rows) = scan_with_pyiceberg(
        &table_dir(&cold).unwrap().display().to_string(),
        &["--since".to_string(), since.to_string()],
    );
    assert!(
        late_files < files_before,
        "{late_files} of {files_before} files for a quarter of the rows"
    );
    assert_eq!(
        late_rows.len() as i64,
        rows_before.values().filter(|r| r.2 >= since).count() as i64
    );

    // A topic the broker does not have, or one without Parquet, is a clear error.
    for (topic, why) in [
        ("nope", "has no replica on this broker"),
        ("plain", "does not have parquet.enable=true"),
    ] {
        if topic == "plain" {
            create_topic(&broker.kafka, "plain", 1, &[]);
        }
        let out = common::cli(
            &broker.kafka,
            &[
                "tier",
                "--http",
                &broker.http,
                "iceberg",
                "compact",
                "--topic",
                topic,
            ],
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("404") && err.contains(why), "{err}");
    }

    let text = tier(&["compact", "--topic", TOPIC]);
    assert!(text.contains("compacted"), "{text}");
    wait_for(
        "the table to take the compacted files",
        Duration::from_secs(60),
        || {
            let status: serde_json::Value =
                serde_json::from_str(&tier(&["status", "--topic", TOPIC, "--json"])).unwrap();
            status["data_files"] == status["partitions"][0]["files"]
                && status["committed_offsets"]["0"] == want[&0]
        },
    );
    let (files, rows) = pyiceberg_rows(&cold);
    let status = tier(&["status", "--topic", TOPIC]);
    eprintln!(
        "{small} Parquet files of small segments; {files_before} in the table before, {files} after `strata tier iceberg compact`"
    );
    assert!(
        (1..=12).contains(&files),
        "{files} files after compaction: expected a few\n{status}"
    );
    assert_eq!(rows, rows_before);
    assert_eq!(rows.len() as i64, next[&0]);
    check_rows(&rows, &want, base);
    let text = tier(&["status", "--topic", TOPIC]);
    assert!(
        text.contains(&format!("{} records in {files} files", next[&0])),
        "{text}"
    );

    // The replaced files are still in the bucket for the snapshots that name them; once
    // those are expired, only the table's files are left.
    assert!(parquet_objects(&cold) > files);
    let text = tier(&[
        "expire",
        "--topic",
        TOPIC,
        "--max-age",
        "0s",
        "--retain-last",
        "1",
    ]);
    assert!(text.contains("data file(s) deleted"), "{text}");
    assert_eq!(parquet_objects(&cold), files);
    let (_, after) = pyiceberg_rows(&cold);
    assert_eq!(after, rows);
}

/// Produces JSON values `{"user": "u{o}", "n": o[, "country": "c{o % 5}"]}` to partition
/// 0 from `next`.
fn produce_json(bootstrap: &str, next: &mut i64, count: i64, with_country: bool) {
    let (p, d) = producer(
        bootstrap,
        &[("acks", "all"), ("linger.ms", "2"), ("batch.size", "8192")],
    );
    for o in *next..*next + count {
        let value = if with_country {
            format!(r#"{{"user":"u{o}","n":{o},"country":"c{}"}}"#, o % 5)
        } else {
            format!(r#"{{"user":"u{o}","n":{o}}}"#)
        };
        p.send(
            BaseRecord::<str, str>::to(TOPIC)
                .partition(0)
                .payload(&value)
                .timestamp(now_ms()),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    }
    flush(&p);
    *next += count;
    assert_eq!(*d.errors.lock().unwrap(), Vec::<String>::new());
}

/// Schema evolution: a member added (nullable, at the end) to `parquet.value.schema`
/// gives the table a new schema, and pyiceberg reads the records from before and after
/// through it (the older ones with the member null). A change no one schema can read
/// (a member removed) is refused when it is asked for.
#[test]
fn a_member_added_to_the_value_schema_evolves_the_table() {
    member_added_to_the_value_schema_evolves_the_table(false)
}

/// The same through a REST catalog: the evolution is an `add-schema` update.
#[test]
fn a_member_added_to_the_value_schema_evolves_a_rest_catalogs_table() {
    member_added_to_the_value_schema_evolves_the_table(true)
}

fn member_added_to_the_value_schema_evolves_the_table(rest: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let tables = Tables::new(dir.path(), rest);
    let broker = start(&dir.path().join("data"), &cold, &tables.flags());
    let v1 = r#"{"fields":[{"name":"user","type":"utf8"},{"name":"n","type":"int64"}]}"#;
    let v2 = r#"{"fields":[{"name":"user","type":"utf8"},{"name":"n","type":"int64"},{"name":"country","type":"utf8","nullable":true}]}"#;
    create_topic(
        &broker.kafka,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "16384"),
            ("segment.ms", "1000"),
            ("parquet.value.format", "json"),
            ("parquet.value.schema", v1),
        ],
    );
    let mut next = 0;
    produce_json(&broker.kafka, &mut next, 1_000, false);
    let before = next - 1;
    wait_for(
        "the first records in the table",
        Duration::from_secs(120),
        || tables.committed().get(&0) == Some(&before),
    );

    let alter = |schema: &str| {
        common::cli(
            &broker.kafka,
            &[
                "topic",
                "alter",
                TOPIC,
                "--set",
                &format!("parquet.value.schema={schema}"),
            ],
        )
    };
    // Removing a member would leave files no one schema reads: refused.
    let out = alter(r#"{"fields":[{"name":"user","type":"utf8"}]}"#);
    assert!(
        !out.status.success(),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("members cannot be removed"), "{err}");
    let out = alter(v2);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    produce_json(&broker.kafka, &mut next, 1_000, true);
    let last = next - 1;
    wait_for(
        "the later records in the table",
        Duration::from_secs(120),
        || tables.committed().get(&0) == Some(&last),
    );

    let mut args = tables.args(false);
    args.extend(["user", "n", "country"].map(String::from));
    let v = pyiceberg("iceberg_values.py", &args);
    let ids: Vec<i64> = v["schema_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_i64().unwrap())
        .collect();
    // A REST catalog numbers the created table's fields itself; one that numbers them
    // otherwise than the files gets the files' schema as a second one at once.
    let first = if rest { ids.len() - 2 } else { 0 };
    assert_eq!(ids[first..], [first as i64, first as i64 + 1], "{ids:?}");
    assert_eq!(v["current_schema_id"], first + 1);
    assert_eq!(
        v["value_members"],
        serde_json::json!(["user", "n", "country"])
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len() as i64, next);
    let mut seen = std::collections::BTreeSet::new();
    for r in rows {
        let o = r[1].as_i64().unwrap();
        assert!(seen.insert(o), "offset {o} twice");
        let m = &r[2];
        assert_eq!(m["user"], format!("u{o}"), "{r}");
        assert_eq!(m["n"], o, "{r}");
        if o <= before {
            assert!(m["country"].is_null(), "{r}");
        } else {
            assert_eq!(m["country"], format!("c{}", o % 5), "{r}");
        }
    }
}

/// Dead letters: a JSON value that does not fit `parquet.value.schema` is kept whole in
/// `_raw` of the topic's table and, with the reason, in the topic's dead-letter table
/// (`{cluster}/dead_letters/iceberg/{topic}/`), which pyiceberg reads: every misfit
/// exactly once, byte for byte, and nothing that fits.
#[test]
fn values_that_do_not_fit_land_in_the_dead_letter_table() {
    misfits_land_in_the_dead_letter_table(false)
}

/// The same through a REST catalog: the dead-letter table is
/// `{namespace}.dead_letters.{topic}`.
#[test]
fn values_that_do_not_fit_land_in_a_rest_catalogs_dead_letter_table() {
    misfits_land_in_the_dead_letter_table(true)
}

fn misfits_land_in_the_dead_letter_table(rest: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let tables = Tables::new(dir.path(), rest);
    let broker = start(&dir.path().join("data"), &cold, &tables.flags());
    let schema = r#"{"fields":[{"name":"user","type":"utf8"},{"name":"n","type":"int64"}]}"#;
    create_topic(
        &broker.kafka,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "16384"),
            ("segment.ms", "1000"),
            ("parquet.value.format", "json"),
            ("parquet.value.schema", schema),
        ],
    );
    // Every seventh value does not fit: a string where n is an integer, or not JSON.
    let value = |o: i64| match o % 7 {
        3 => format!(r#"{{"user":"u{o}","n":"{o}"}}"#),
        5 if o % 2 == 0 => format!("not json {o}"),
        _ => format!(r#"{{"user":"u{o}","n":{o}}}"#),
    };
    let misfit = |o: i64| o % 7 == 3 || (o % 7 == 5 && o % 2 == 0);
    let (p, d) = producer(
        &broker.kafka,
        &[("acks", "all"), ("linger.ms", "2"), ("batch.size", "8192")],
    );
    const N: i64 = 1_500;
    for o in 0..N {
        p.send(
            BaseRecord::<str, str>::to(TOPIC)
                .partition(0)
                .payload(&value(o))
                .timestamp(now_ms()),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    }
    flush(&p);
    assert_eq!(*d.errors.lock().unwrap(), Vec::<String>::new());
    wait_for(
        "the table to hold every record",
        Duration::from_secs(120),
        || tables.committed().get(&0) == Some(&(N - 1)),
    );
    let want: Vec<i64> = (0..N).filter(|&o| misfit(o)).collect();
    let mut got = Vec::new();
    wait_for(
        "the dead-letter table to hold every misfit",
        Duration::from_secs(60),
        || {
            let v = pyiceberg("iceberg_dead_letters.py", &tables.args(true));
            got = v["rows"].as_array().unwrap().clone();
            got.len() == want.len()
        },
    );
    let mut offsets = Vec::new();
    for r in &got {
        let o = r[1].as_i64().unwrap();
        assert_eq!(r[0], 0);
        assert_eq!(r[2].as_str().unwrap(), value(o), "offset {o} byte for byte");
        assert!(!r[3].as_str().unwrap().is_empty(), "offset {o} says why");
        offsets.push(o);
    }
    offsets.sort();
    assert_eq!(offsets, want, "every misfit once, and nothing that fits");
    // `strata tier iceberg status` names the table and counts its rows.
    let out = common::cli(
        &broker.kafka,
        &[
            "tier",
            "--http",
            &broker.http,
            "iceberg",
            "status",
            "--topic",
            TOPIC,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("dead letters")
            && l.contains(if rest {
                "strata.dead_letters.lake in the Iceberg REST catalog"
            } else {
                "/dead_letters/iceberg/lake"
            })
            && l.contains(&format!(": {} values", want.len()))),
        "{text}"
    );
}

/// A real Iceberg REST catalog (Rustberg, installed by scripts/deps) on loopback, its
/// warehouse a directory of the broker's bucket, its catalog database in `dir`.
struct RestCatalogServer {
    child: std::process::Child,
    uri: String,
}

impl RestCatalogServer {
    fn start(dir: &Path, warehouse: &Path) -> RestCatalogServer {
        let port = common::cluster::free_port("127.0.0.1");
        std::fs::create_dir_all(warehouse).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let binary = strata_store::testing::installed_binary("rustberg", "STRATA_RUSTBERG")
            .expect("rustberg (scripts/deps installs it)");
        let child = Command::new(binary)
            .args([
                "--dev",
                "--insecure-http",
                "--no-auth",
                "--host",
                "127.0.0.1",
            ])
            .args(["--port", &port.to_string()])
            .arg("--warehouse")
            .arg(format!("file://{}", warehouse.display()))
            .arg("--catalog-url")
            .arg(format!("file://{}", dir.display()))
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("rustberg (scripts/deps installs it)");
        let server = RestCatalogServer {
            child,
            uri: format!("http://127.0.0.1:{port}"),
        };
        wait_for("the REST catalog to serve", Duration::from_secs(60), || {
            reqwest::blocking::get(format!("{}/v1/config", server.uri))
                .is_ok_and(|r| r.status().is_success())
        });
        server
    }

    /// The table `namespace.name` as the catalog answers it (`LoadTableResult`), if any.
    fn table(&self, namespace: &str, name: &str) -> Option<serde_json::Value> {
        let config: serde_json::Value = serde_json::from_slice(
            &reqwest::blocking::get(format!("{}/v1/config", self.uri))
                .unwrap()
                .bytes()
                .unwrap(),
        )
        .unwrap();
        let prefix = config["overrides"]["prefix"]
            .as_str()
            .map(|p| format!("/{p}"))
            .unwrap_or_default();
        let r = reqwest::blocking::get(format!(
            "{}/v1{prefix}/namespaces/{namespace}/tables/{name}",
            self.uri
        ))
        .unwrap();
        if r.status().as_u16() == 404 {
            return None;
        }
        assert!(r.status().is_success(), "{}", r.status());
        Some(serde_json::from_slice(&r.bytes().unwrap()).unwrap())
    }

    /// Per partition, the offset the current snapshot of `strata.{TOPIC}` has committed.
    fn committed(&self) -> BTreeMap<i32, i64> {
        match self.table("strata", TOPIC) {
            Some(t) => committed_in(&t["metadata"]),
            None => BTreeMap::new(),
        }
    }
}

/// Where a test's tables are: the bucket's file-system catalog (the `cold` directory
/// under the test's directory), or a REST catalog whose warehouse is in the bucket.
enum Tables {
    Fs(PathBuf),
    Rest(RestCatalogServer),
}

impl Tables {
    fn new(dir: &Path, rest: bool) -> Tables {
        let cold = dir.join("cold");
        if rest {
            Tables::Rest(RestCatalogServer::start(
                &dir.join("catalog"),
                &cold.join("warehouse"),
            ))
        } else {
            Tables::Fs(cold)
        }
    }

    /// The broker's flags for them.
    fn flags(&self) -> Vec<&str> {
        match self {
            Tables::Fs(_) => Vec::new(),
            Tables::Rest(c) => vec!["--iceberg-catalog-uri", &c.uri],
        }
    }

    /// Per partition, the offset the topic's table has committed.
    fn committed(&self) -> BTreeMap<i32, i64> {
        match self {
            Tables::Fs(cold) => committed(cold),
            Tables::Rest(c) => c.committed(),
        }
    }

    /// The arguments naming the topic's table, or its dead-letter table, to the
    /// pyiceberg scripts (tests/python/strata_table.py).
    fn args(&self, dead_letters: bool) -> Vec<String> {
        match self {
            Tables::Fs(cold) => {
                let sub = if dead_letters {
                    "dead_letters/iceberg"
                } else {
                    "iceberg"
                };
                let dir = std::fs::read_dir(cold)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path().join(sub).join(TOPIC))
                    .find(|d| d.join("metadata").is_dir())
                    .expect("a table");
                vec![dir.display().to_string()]
            }
            Tables::Rest(c) => {
                let ns = if dead_letters {
                    "strata.dead_letters"
                } else {
                    "strata"
                };
                vec![c.uri.clone(), format!("{ns}.{TOPIC}")]
            }
        }
    }
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With `--iceberg-catalog-uri`, the tables are committed to a real Iceberg REST catalog
/// (Rustberg): it holds the metadata pointer and writes the metadata, Strata writes the
/// manifests into the table's location in the bucket and points them at its Parquet
/// files. pyiceberg finds the table through the catalog and reads every record once,
/// also after the broker is killed -9 while it publishes; the file-system catalog is not
/// written at all.
#[test]
fn a_rest_catalog_holds_the_tables_and_pyiceberg_reads_them_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let catalog = RestCatalogServer::start(&dir.path().join("catalog"), &cold.join("warehouse"));
    let data = dir.path().join("data");
    let mut broker = start(&data, &cold, &["--iceberg-catalog-uri", &catalog.uri]);
    create(&broker.kafka, 2);
    let base = now_ms() - 3_600_000;
    let mut next = BTreeMap::new();
    for round in 0..3u64 {
        let before = catalog.committed();
        produce(&broker.kafka, 2, &mut next, 800, base);
        wait_for("a commit of this round", Duration::from_secs(60), || {
            catalog.committed() != before
        });
        std::thread::sleep(Duration::from_millis(200 * round));
        broker.kill9();
        broker.restart();
    }
    let want: BTreeMap<i32, i64> = next.iter().map(|(&p, &n)| (p, n - 1)).collect();
    wait_for(
        "the table to hold every record",
        Duration::from_secs(120),
        || catalog.committed() == want,
    );

    // The catalog wrote the metadata in its warehouse, inside the bucket; Strata wrote
    // no file-system table.
    let t = catalog.table("strata", TOPIC).unwrap();
    let location = t["metadata-location"].as_str().unwrap();
    let warehouse = cold.join("warehouse").canonicalize().unwrap();
    assert!(
        location.starts_with(&format!("file://{}/", warehouse.display())),
        "{location}"
    );
    assert_eq!(table_dir(&cold), None, "a file-system table was written");
    assert_eq!(t["metadata"]["properties"]["strata.topic"], TOPIC);

    let (_, rows) = scan_with_pyiceberg(&catalog.uri, &[format!("strata.{TOPIC}")]);
    assert_eq!(rows.len() as i64, next.values().sum::<i64>());
    check_rows(&rows, &want, base);

    // `strata topic describe` names the table in the catalog.
    let out = common::cli(
        &broker.kafka,
        &["topic", "describe", TOPIC, "--http", &broker.http],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "strata.{TOPIC} in the Iceberg REST catalog {}",
            catalog.uri
        )),
        "{text}"
    );
}
