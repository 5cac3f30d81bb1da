//! What a new user and stricter clients trip over (issue 36), each against the real
//! binary as a user would meet it: the CLI, a Kafka client, curl-like HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::kafka::{create_topic, flush, producer, send};
use common::{Broker, cli};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The broker's cluster id, as REST v3 names it.
fn cluster_id(b: &Broker) -> String {
    let v: serde_json::Value = serde_json::from_str(&b.http_get("/v3/clusters")).unwrap();
    v["data"][0]["cluster_id"].as_str().unwrap().to_string()
}

/// Creates topic `lake` with a JSON value schema through librdkafka's admin client: the
/// error code the broker answered.
fn create_with(bootstrap: &str, schema: &str) -> Result<(), rdkafka::types::RDKafkaErrorCode> {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let admin = common::kafka::admin(bootstrap);
    let topic = NewTopic::new("lake", 1, TopicReplication::Fixed(1))
        .set("remote.storage.enable", "true")
        .set("parquet.enable", "true")
        .set("parquet.value.format", "json")
        .set("parquet.value.schema", schema);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = rt
        .block_on(admin.create_topics(&[topic], &AdminOptions::new()))
        .unwrap();
    results
        .into_iter()
        .try_for_each(|r| r.map(|_| ()).map_err(|(_, e)| e))
}

/// A `parquet.value.schema` that does not parse is refused when it is set (CreateTopics
/// from the CLI and over REST v3, AlterConfigs), naming the bad member and what is
/// allowed, instead of failing every conversion afterwards.
#[test]
fn an_invalid_parquet_value_schema_is_refused_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let k = broker.kafka.clone();
    // `strata topic create lake` with a typed JSON value schema.
    let create = |schema: &str| {
        let setting = format!("parquet.value.schema={schema}");
        cli(
            &k,
            &[
                "topic",
                "create",
                "lake",
                "--config",
                "remote.storage.enable=true",
                "--config",
                "parquet.enable=true",
                "--config",
                "parquet.value.format=json",
                "--config",
                &setting,
            ],
        )
    };
    for (schema, says) in [
        (
            r#"{"fields":[{"name":"a","type":"int"}]}"#,
            "fields[0]: unknown type 'int'",
        ),
        (
            r#"{"fields":[{"name":"a","type":"integer"}]}"#,
            "unknown type 'integer'",
        ),
        (
            r#"{"fields":[{"name":"a","type":"utf8","nulable":true}]}"#,
            "unknown field `nulable`",
        ),
        (
            r#"{"fields":[]}"#,
            "fields: a struct needs at least one field",
        ),
    ] {
        let out = create(schema);
        assert!(!out.status.success(), "{schema} was accepted");
        let err = stderr(&out);
        assert!(err.contains(says), "{schema}: {err}");
        // On the wire: INVALID_CONFIG (librdkafka's admin client).
        assert_eq!(
            create_with(&k, schema).unwrap_err(),
            rdkafka::types::RDKafkaErrorCode::InvalidConfig,
            "{schema}"
        );
    }
    // The allowed types are listed.
    let out = create(r#"{"fields":[{"name":"a","type":"int"}]}"#);
    assert!(
        stderr(&out).contains("utf8, int64, float64, bool, timestamp_ms, struct, list"),
        "{}",
        stderr(&out)
    );
    // A good schema is taken; changing it to a bad one is refused and changes nothing.
    let out = create(r#"{"fields":[{"name":"a","type":"int64"}]}"#);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(
        &k,
        &[
            "topic",
            "alter",
            "lake",
            "--set",
            r#"parquet.value.schema={"fields":[{"name":"a","type":"int"}]}"#,
        ],
    );
    assert!(!out.status.success(), "the alter was accepted");
    assert!(
        stderr(&out).contains("unknown type 'int'"),
        "{}",
        stderr(&out)
    );
    let out = cli(&k, &["topic", "describe", "lake"]);
    assert!(
        stdout(&out).contains(r#""type":"int64""#),
        "{}",
        stdout(&out)
    );

    // REST v3: 400 with the broker's reason.
    let url = format!(
        "http://{}/v3/clusters/{}/topics",
        broker.http,
        cluster_id(&broker)
    );
    let body = serde_json::json!({
        "topic_name": "lake2",
        "configs": [
            {"name": "remote.storage.enable", "value": "true"},
            {"name": "parquet.enable", "value": "true"},
            {"name": "parquet.value.format", "value": "json"},
            {"name": "parquet.value.schema", "value": r#"{"fields":[{"name":"a","type":"int"}]}"#},
        ],
    });
    let resp = reqwest::blocking::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let text = resp.text().unwrap();
    assert!(text.contains("unknown type 'int'"), "{text}");
}

/// A Parquet conversion that keeps failing shows in `strata tier status`, in `strata
/// topic describe --http` and on /healthz, and clears when the fault is gone. The fault:
/// a plain file where the topic's Parquet directory goes in the (local) object store, so
/// every write under it fails.
#[test]
fn a_stuck_parquet_conversion_shows_and_clears() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("cold");
    let url = format!("file://{}", cold.display());
    let broker = Broker::start(
        &dir.path().join("data"),
        &["--object-store", &url, "--min-segment-bytes", "1"],
    );
    let k = broker.kafka.clone();
    let cluster = cluster_id(&broker);
    let blocker = cold.join(&cluster).join("parquet").join("topic=stuck");
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, b"not a directory").unwrap();
    create_topic(
        &k,
        "stuck",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("segment.bytes", "16384"),
        ],
    );
    let (p, d) = producer(
        &k,
        &[("acks", "all"), ("linger.ms", "2"), ("batch.size", "8192")],
    );
    for i in 0..2_000 {
        send(
            &p,
            "stuck",
            None,
            format!("value-{i:06}-{}", "x".repeat(40)).as_bytes(),
        );
    }
    flush(&p);
    assert!(
        d.errors.lock().unwrap().is_empty(),
        "{:?}",
        d.errors.lock().unwrap()
    );

    let status = || -> serde_json::Value {
        serde_json::from_str(&broker.http_get("/v1/tier/status")).unwrap()
    };
    let error_of = |v: &serde_json::Value| {
        v["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["topic"] == "stuck")
            .and_then(|p| p["parquet_error"].as_str().map(str::to_string))
    };
    let t0 = Instant::now();
    let error = loop {
        if let Some(e) = error_of(&status()) {
            break e;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no failure reported: {}",
            status()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(!error.is_empty());
    let health = broker.http_get("/healthz");
    assert!(health.starts_with("ok\n"), "{health}");
    assert!(
        health.contains("degraded: the Parquet conversion of stuck-0 has failed"),
        "{health}"
    );
    let out = cli(&k, &["tier", "status", "--http", &broker.http]);
    assert!(stdout(&out).contains("PARQUET STUCK"), "{}", stdout(&out));
    // The store as the user named it, not the broker's retry/timeout/metrics layers.
    assert!(
        stdout(&out).contains(&format!("object store {url} ")),
        "{}",
        stdout(&out)
    );
    let out = cli(&k, &["topic", "describe", "stuck", "--http", &broker.http]);
    assert!(
        stdout(&out).contains("partition 0: PARQUET STUCK"),
        "{}",
        stdout(&out)
    );

    // The fault gone, the next round converts and the reports clear.
    std::fs::remove_file(&blocker).unwrap();
    let t0 = Instant::now();
    while error_of(&status()).is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "still failing: {}",
            status()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(broker.http_get("/healthz"), "ok\n");
}

/// `strata topic create` says what is wrong with a name before asking a broker, in the
/// words of the rule; a name the broker reserves is said to be reserved, not invalid.
#[test]
fn topic_names_are_refused_with_the_rule_or_as_reserved() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    for name in ["__consumer_offsets", "__transaction_state"] {
        let out = cli(&broker.kafka, &["topic", "create", name]);
        assert!(!out.status.success(), "{name} was created");
        assert!(
            stderr(&out).contains(&format!("'{name}' is reserved for the broker")),
            "{}",
            stderr(&out)
        );
    }
    for (name, says) in [
        (
            "bad name",
            "only ASCII letters, digits, '.', '_' and '-' are allowed",
        ),
        ("..", "'.' and '..' are not allowed"),
    ] {
        let out = cli(&broker.kafka, &["topic", "create", name]);
        assert!(!out.status.success(), "{name} was created");
        let err = stderr(&out);
        assert!(err.contains(says), "{err}");
        assert!(
            err.contains("a name is 1 to 249 characters of [a-zA-Z0-9._-]"),
            "{err}"
        );
    }
    let long = "x".repeat(250);
    let out = cli(&broker.kafka, &["topic", "create", &long]);
    assert!(
        stderr(&out).contains("longer than 249 characters"),
        "{}",
        stderr(&out)
    );
}

/// `strata consume --from offset:N` past a partition's end says so (with the range) and
/// fails, as the REST read answers 416; at the end it waits for new records; below the
/// start it starts at the start and says so.
#[test]
fn consume_from_an_offset_past_the_end_fails_with_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let k = broker.kafka.clone();
    create_topic(&k, "ten", 1, &[]);
    let (p, _) = producer(&k, &[("acks", "all")]);
    for i in 0..10 {
        send(&p, "ten", None, format!("r{i}").as_bytes());
    }
    flush(&p);
    let out = cli(
        &k,
        &[
            "consume",
            "--topic",
            "ten",
            "--from",
            "offset:99999",
            "--exit-at-end",
        ],
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--from offset:99999: partition 0 of 'ten' holds offsets 0 to 9"),
        "{}",
        stderr(&out)
    );
    let out = cli(
        &k,
        &[
            "consume",
            "--topic",
            "ten",
            "--from",
            "offset:7",
            "--exit-at-end",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "r7\nr8\nr9\n");
    // The end itself is a place to wait from: nothing to print, and no error.
    let out = cli(
        &k,
        &[
            "consume",
            "--topic",
            "ten",
            "--from",
            "offset:10",
            "--exit-at-end",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("consumed 0 records"),
        "{}",
        stderr(&out)
    );
}

/// segment.bytes takes Kafka 3.x's range (down to 14 bytes): 10,000 one-batch segments
/// keep the broker's open segment files within `--log-open-files`, and every record reads
/// back from the start.
#[test]
fn ten_thousand_tiny_segments_stay_within_the_descriptor_budget() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broker = Broker::start(&data, &["--log-open-files", "64"]);
    let k = broker.kafka.clone();
    // Kafka 3.x's floor is accepted (a batch larger than the segment size is refused, as
    // Kafka refuses it: RECORD_BATCH_TOO_LARGE)...
    create_topic(&k, "floor", 1, &[("segment.bytes", "14")]);
    // ...and a topic of one-batch segments (a one-record batch is about 75 bytes).
    create_topic(&k, "tiny", 1, &[("segment.bytes", "100")]);
    const N: usize = 10_000;
    let (p, d) = producer(
        &k,
        &[
            ("acks", "1"),
            ("linger.ms", "0"),
            ("batch.num.messages", "1"),
        ],
    );
    for i in 0..N {
        send(&p, "tiny", None, format!("{i:06}").as_bytes());
        if i % 200 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    flush(&p);
    let errors = d.errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        errors.first()
    );
    let segments = std::fs::read_dir(data.join("tiny-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(
        segments >= N / 2,
        "only {segments} segments for {N} batches"
    );
    let open = |b: &Broker| b.metric("strata_log_segment_files_open").unwrap();
    assert!(
        open(&broker) <= 64.0,
        "{} segment files open",
        open(&broker)
    );
    let got = common::kafka::consume_all(&k, "tiny", 1, N, Duration::from_secs(120));
    assert_eq!(got.len(), N, "every record reads back");
    assert!(
        open(&broker) <= 64.0,
        "{} segment files open",
        open(&broker)
    );
    let fds = std::fs::read_dir(format!("/proc/{}/fd", broker.pid()))
        .unwrap()
        .count();
    assert!(
        fds < 1_000,
        "{fds} descriptors open for {segments} segments"
    );
}

/// KIP-467: a batch in which some records break a per-record rule (keyless records to a
/// compacted topic) is refused with `record_errors` naming those records, so a client
/// (kafka-python here, Produce v8+) tells the application which records were bad and
/// why, and the application sends the others again.
#[test]
fn a_batch_with_bad_records_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let k = broker.kafka.clone();
    create_topic(&k, "keyed", 1, &[("cleanup.policy", "compact")]);
    let v = common::python_json("record_errors.py", &[&k, "keyed", "2,5"]);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        let i = r["index"].as_i64().unwrap();
        let error = r["error"].as_str().unwrap();
        assert_eq!(r["ok"], false, "the batch is refused whole: {r}");
        if i == 2 || i == 5 {
            assert!(
                error.contains("Compacted topic cannot accept message without key"),
                "record {i}: {error}"
            );
        } else {
            // The client read record_errors: the others are told they were only part
            // of a bad batch (kafka-python's words, as the Java client's).
            assert!(
                error.contains("part of a batch") && !error.contains("without key"),
                "record {i}: {error}"
            );
        }
    }
    // Nothing of the refused batch was stored; the good records sent again are.
    let v = common::python_json("record_errors.py", &[&k, "keyed", ""]);
    assert!(v.as_array().unwrap().iter().all(|r| r["ok"] == true), "{v}");
    let got = common::kafka::consume_all(&k, "keyed", 1, 6, Duration::from_secs(30));
    assert_eq!(got.len(), 6);
}

/// The threads of the broker process whose name starts with `prefix`.
fn threads_named(b: &Broker, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", b.pid()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// Kafka's dynamic broker configs that Strata has a counterpart for (the log cleaner's)
/// change a running broker through AlterConfigs (kafka-python's admin client), show in
/// DescribeConfigs as dynamic, and take effect without a restart; a key that cannot
/// change is refused naming it. Kafka 3.x's deprecated topic configs are taken without
/// effect.
#[test]
fn dynamic_broker_configs_apply_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let k = broker.kafka.clone();
    assert_eq!(threads_named(&broker, "strata-cleaner"), 1);
    let set = common::python_json(
        "broker_configs.py",
        &[
            &k,
            "1",
            "log.cleaner.threads=3",
            "log.cleaner.dedupe.buffer.size=33554432",
            "log.cleaner.io.max.bytes.per.second=1048576",
            "log.cleaner.backoff.ms=1000",
        ],
    );
    assert_eq!(set["error_code"], 0, "{set}");
    let described = common::python_json("admin_configs.py", &[&k, "broker", "1"]);
    assert_eq!(described["log.cleaner.threads"], "3", "{described}");
    assert_eq!(described["log.cleaner.backoff.ms"], "1000", "{described}");
    // Applied: two more cleaner threads, and the offset maps' memory is the new budget.
    let t0 = Instant::now();
    while threads_named(&broker, "strata-cleaner") < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no new cleaner threads"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let t0 = Instant::now();
    while broker.metric("strata_log_cleaner_dedupe_buffer_bytes") != Some(33_554_430.0) {
        // 32 MiB split three ways, rounded down per thread.
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{:?}",
            broker.metric("strata_log_cleaner_dedupe_buffer_bytes")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // What Strata has no counterpart for, or cannot change running, is refused by name.
    let refused = common::python_json("broker_configs.py", &[&k, "1", "num.io.threads=8"]);
    assert_ne!(refused["error_code"], 0, "{refused}");
    assert!(
        refused["error_message"]
            .as_str()
            .unwrap()
            .contains("broker config 'num.io.threads' cannot change while the broker runs"),
        "{refused}"
    );
    let bad = common::python_json("broker_configs.py", &[&k, "1", "log.cleaner.threads=0"]);
    assert!(
        bad["error_message"]
            .as_str()
            .unwrap()
            .contains("log.cleaner.threads is a thread count"),
        "{bad}"
    );
    // Deprecated topic configs of Kafka 3.x: taken, said to do nothing.
    let out = cli(
        &k,
        &[
            "topic",
            "create",
            "old",
            "--config",
            "message.format.version=2.8",
            "--config",
            "message.downconversion.enable=false",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("note: message.format.version is deprecated"),
        "{}",
        stderr(&out)
    );
    let described = common::python_json("admin_configs.py", &[&k, "topic", "old"]);
    assert_eq!(described["message.format.version"], "2.8", "{described}");
}

/// /openapi.json lists every path the HTTP address serves: the gateway's and the
/// broker's own (/metrics, /v1/...).
#[test]
fn the_openapi_document_lists_the_brokers_own_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let doc: serde_json::Value = serde_json::from_str(&broker.http_get("/openapi.json")).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/metrics",
        "/v1/tier/status",
        "/v1/partitions/hot",
        "/v1/cleaner/status",
        "/v1/tier/iceberg/{topic}",
        "/v1/tier/iceberg/{topic}/compact",
        "/v1/tier/iceberg/{topic}/expire",
        "/topics",
        "/healthz",
    ] {
        assert!(paths.contains_key(p), "{p} is not in /openapi.json");
    }
    // Each documented broker path answers as documented (here: no such topic).
    let status = |path: &str| {
        reqwest::blocking::Client::new()
            .post(format!("http://{}{path}", broker.http))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status("/v1/tier/iceberg/nope/compact"), 404);
}
