//! Tiered storage end to end: the real `strata serve` offloading to a real S3 server
//! (s3s-fs on loopback), checked with an independent S3 client (aws-sdk-s3), and read
//! back through a real Kafka consumer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::kafka::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use strata_store::testing::S3Server;

const MIB: usize = 1024 * 1024;

fn s3() -> S3Server {
    S3Server::start().expect("s3s-fs is installed by scripts/deps")
}

fn start(dir: &Path, s3: &S3Server, prefix: &str, extra: &[&str]) -> common::Broker {
    let url = s3.url(prefix);
    let mut args = vec![
        "--object-store",
        url.as_str(),
        "--cache-disk",
        "0",
        "--remote-chunk",
        "4MiB",
        "--orphan-grace",
        "0s",
    ];
    args.extend_from_slice(extra);
    common::Broker::start_with_env(dir, "127.0.0.1:0", &args, &s3.env())
}

fn status(b: &common::Broker, topic: &str) -> Value {
    let v: Value = serde_json::from_str(&b.http_get("/v1/tier/status")).unwrap();
    v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == topic)
        .cloned()
        .expect("partition in status")
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn dir_bytes(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}

fn value(i: u64, size: usize) -> Vec<u8> {
    let mut v = format!("{i:010}:").into_bytes();
    v.resize(size, (i % 251) as u8);
    v
}

/// Reads `n` records of partition 0 from offset 0 and checks each is `value(i)`.
fn check_all(bootstrap: &str, topic: &str, n: u64, size: usize) {
    check_from(bootstrap, topic, 0, n, size)
}

/// Reads partition 0's records `from..n` and checks each is `value(i)`.
fn check_from(bootstrap: &str, topic: &str, from: u64, n: u64, size: usize) {
    let c: BaseConsumer = client_config(
        bootstrap,
        &[
            ("group.id", "unused"),
            ("enable.auto.commit", "false"),
            ("fetch.max.bytes", "4194304"),
        ],
    )
    .create()
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(from as i64))
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut next = from;
    let deadline = Instant::now() + Duration::from_secs(180);
    while next < n {
        assert!(Instant::now() < deadline, "consumed only {next} of {n}");
        match c.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                assert_eq!(m.offset() as u64, next, "offsets in order, none skipped");
                assert!(
                    m.payload().unwrap() == &value(next, size)[..],
                    "record {next} is what was produced"
                );
                next += 1;
            }
            Some(Err(e)) => panic!("consume error at {next}: {e}"),
            None => {}
        }
    }
}

fn produce(bootstrap: &str, topic: &str, from: u64, n: u64, size: usize) {
    let (p, d) = producer(
        bootstrap,
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "120000"),
        ],
    );
    for i in from..from + n {
        send(&p, topic, None, &value(i, size));
    }
    flush(&p);
    let errors = d.errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} errors, first {:?}",
        errors.len(),
        errors.first()
    );
    assert_eq!(d.acked.lock().unwrap().len() as u64, n);
}

/// 200 MB through a topic with 8 MiB segments and 32 MiB of local retention: local disk
/// stays bounded, the bucket holds the sealed segments, and a consumer from offset 0
/// reads every record in order, the first ones from the bucket.
#[test]
fn offload_bounds_local_disk_and_cold_reads_return_every_record() {
    let s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &s3,
        "e2e",
        &["--retention-check-interval", "1s"],
    );
    let topic = "cold";
    create_topic(
        &broker.kafka,
        topic,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", &(8 * MIB).to_string()),
            ("local.retention.bytes", &(32 * MIB).to_string()),
        ],
    );
    const SIZE: usize = 10 * 1024;
    const N: u64 = 20_000; // 200 MB
    produce(&broker.kafka, topic, 0, N, SIZE);
    // Offload catches up and local retention trims the local copy.
    wait_for(
        "offload and local retention",
        Duration::from_secs(120),
        || {
            let s = status(&broker, topic);
            s["offload_lag_bytes"] == 0
                && s["local_bytes"].as_u64().unwrap() <= (32 + 8 + 1) as u64 * MIB as u64
        },
    );
    let s = status(&broker, topic);
    let remote_end = s["remote_end_offset"].as_i64().unwrap();
    let local_start = s["local_start_offset"].as_i64().unwrap();
    assert!(
        local_start > 0 && local_start <= remote_end,
        "the local copy starts inside the remote range: {s}"
    );
    assert_eq!(s["remote_start_offset"], 0);
    let part_dir = dir.path().join(format!("{topic}-0"));
    assert!(
        dir_bytes(&part_dir) <= (32 + 8 + 2) as u64 * MIB as u64,
        "local disk bounded: {}",
        dir_bytes(&part_dir)
    );
    // An independent client sees the segments in the bucket.
    let objects = common::bucket::objects(&s3, "e2e/");
    let logs: Vec<_> = objects
        .iter()
        .filter(|(k, _)| k.contains("/segments/") && k.ends_with(".log"))
        .collect();
    assert!(
        logs.len() >= 20,
        "sealed segments in the bucket: {}",
        logs.len()
    );
    assert_eq!(
        logs.iter().map(|(_, n)| *n as u64).sum::<u64>(),
        s["remote_bytes"].as_u64().unwrap()
    );
    assert!(objects.iter().any(|(k, _)| k.contains("/manifest/")));
    assert!(
        objects
            .iter()
            .any(|(k, _)| k == "e2e/_catalog/topics/cold.json")
    );
    // Earliest is the remote start (KIP-405); every record reads back in order.
    let c: BaseConsumer = client_config(&broker.kafka, &[]).create().unwrap();
    assert_eq!(
        c.fetch_watermarks(topic, 0, Duration::from_secs(10))
            .unwrap(),
        (0, N as i64)
    );
    check_all(&broker.kafka, topic, N, SIZE);
    let v: Value = serde_json::from_str(&broker.http_get("/v1/tier/status")).unwrap();
    assert!(
        v["cache_misses"].as_u64().unwrap() > 0,
        "the first reads came from the bucket"
    );
    let out = std::process::Command::new(common::strata_bin())
        .args(["tier", "status", "--http", &broker.http, "--topic", topic])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.contains("cache hit ratio")
            && table
                .lines()
                .any(|l| l.starts_with("cold") && l.contains("yes")),
        "{table}"
    );
    let metrics = broker.http_get("/metrics");
    assert!(
        metrics.contains("strata_tier_uploaded_segments_total"),
        "tier metrics exported"
    );
}

/// The S3 server is down for a while during produce: producing continues, nothing that
/// is not offloaded is deleted locally, offload catches up afterwards, nothing is lost.
#[test]
fn an_s3_outage_delays_offload_but_loses_nothing() {
    let mut s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &s3,
        "outage",
        &["--retention-check-interval", "1s"],
    );
    let topic = "outage";
    create_topic(
        &broker.kafka,
        topic,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", &MIB.to_string()),
            ("local.retention.bytes", &(2 * MIB).to_string()),
        ],
    );
    const SIZE: usize = 4096;
    produce(&broker.kafka, topic, 0, 2_000, SIZE);
    wait_for("the first offload", Duration::from_secs(60), || {
        status(&broker, topic)["offload_lag_bytes"] == 0
    });
    s3.stop();
    // 16 MB more while the bucket is unreachable.
    produce(&broker.kafka, topic, 2_000, 4_000, SIZE);
    std::thread::sleep(Duration::from_secs(3));
    let s = status(&broker, topic);
    assert!(
        s["offload_lag_bytes"].as_u64().unwrap() > 8 * MIB as u64,
        "offload is behind: {s}"
    );
    assert!(
        s["local_start_offset"].as_i64().unwrap() <= s["remote_end_offset"].as_i64().unwrap(),
        "nothing deleted locally that is not offloaded: {s}"
    );
    assert!(
        s["local_bytes"].as_u64().unwrap() > 8 * MIB as u64,
        "local retention waits: {s}"
    );
    s3.restart().unwrap();
    wait_for("offload to catch up", Duration::from_secs(90), || {
        let s = status(&broker, topic);
        s["offload_lag_bytes"] == 0 && s["local_bytes"].as_u64().unwrap() <= 4 * MIB as u64
    });
    check_all(&broker.kafka, topic, 6_000, SIZE);
}

/// A broker whose data dir is gone, pointed at the same bucket, recovers the topic with
/// `strata topic recover`: every offloaded record reads back and offsets continue.
#[test]
fn a_topic_recovers_from_the_bucket_alone() {
    let s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let mut first = start(dir.path(), &s3, "recover", &[]);
    let topic = "precious";
    create_topic(
        &first.kafka,
        topic,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", &MIB.to_string()),
            ("segment.ms", "1000"),
            ("retention.ms", "-1"),
        ],
    );
    const SIZE: usize = 2048;
    const N: u64 = 3_000;
    produce(&first.kafka, topic, 0, N, SIZE);
    // segment.ms seals the last segment too, so everything reaches the bucket.
    wait_for("everything offloaded", Duration::from_secs(60), || {
        status(&first, topic)["remote_end_offset"] == N
    });
    first.stop();
    drop(first);
    let fresh = tempfile::tempdir().unwrap();
    let second = start(fresh.path(), &s3, "recover", &[]);
    let out = common::cli(&second.kafka, &["topic", "recover", topic]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("recovered topic 'precious' with 1 partitions")
    );
    let c: BaseConsumer = client_config(&second.kafka, &[]).create().unwrap();
    assert_eq!(
        c.fetch_watermarks(topic, 0, Duration::from_secs(10))
            .unwrap(),
        (0, N as i64)
    );
    check_all(&second.kafka, topic, N, SIZE);
    // New records continue the offsets.
    produce(&second.kafka, topic, N, 100, SIZE);
    check_all(&second.kafka, topic, N + 100, SIZE);
    // Recovering a topic the bucket does not have is a clear error.
    let out = common::cli(&second.kafka, &["topic", "recover", "never-existed"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no topic 'never-existed'"));
}

/// retention.ms expiry removes remote segments and their manifest entries; consumers
/// then see the new log start.
#[test]
fn retention_expires_remote_segments_and_moves_the_log_start() {
    let s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &s3,
        "expire",
        &["--retention-check-interval", "1s"],
    );
    let topic = "expiring";
    create_topic(
        &broker.kafka,
        topic,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", &MIB.to_string()),
            ("retention.ms", "3600000"),
            ("local.retention.ms", "1000"),
        ],
    );
    // Old records (two hours ago), then fresh ones.
    let old_ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 7_200_000;
    let (p, d) = producer(&broker.kafka, &[("linger.ms", "5")]);
    for i in 0..2_000u64 {
        loop {
            let v = value(i, 2048);
            let rec = rdkafka::producer::BaseRecord::<(), _>::to(topic)
                .payload(&v)
                .timestamp(old_ts + i as i64);
            match p.send(rec) {
                Ok(()) => break,
                Err(_) => {
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
    flush(&p);
    assert_eq!(d.acked.lock().unwrap().len(), 2000);
    produce(&broker.kafka, topic, 2_000, 1_000, 2048);
    // The old segments are offloaded (local retention waits for that), then expire.
    wait_for(
        "remote retention to move the start",
        Duration::from_secs(90),
        || {
            status(&broker, topic)["remote_start_offset"]
                .as_i64()
                .is_some_and(|s| s >= 1_500)
        },
    );
    // Until every expired segment is gone: the start stays put for a few passes (one a
    // second).
    let mut last = -1;
    let mut stable_since = Instant::now();
    wait_for(
        "remote retention to finish",
        Duration::from_secs(60),
        || {
            let now = status(&broker, topic)["remote_start_offset"]
                .as_i64()
                .unwrap();
            if now != last {
                last = now;
                stable_since = Instant::now();
            }
            stable_since.elapsed() > Duration::from_secs(4)
        },
    );
    let s = status(&broker, topic);
    let start_offset = s["remote_start_offset"].as_i64().unwrap();
    assert!(start_offset <= 2_000, "fresh records are kept: {s}");
    let c: BaseConsumer = client_config(&broker.kafka, &[]).create().unwrap();
    let (lo, hi) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!((lo, hi), (start_offset, 3_000));
    // A consumer asking for offset 0 is told it is out of range and resets to the start.
    let c: BaseConsumer = client_config(
        &broker.kafka,
        &[
            ("group.id", "x"),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
        ],
    )
    .create()
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(0))
        .unwrap();
    c.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        assert!(Instant::now() < deadline);
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            break m.offset();
        }
    };
    assert_eq!(first, start_offset);
    // The expired segments' objects are gone from the bucket.
    let logs = common::bucket::objects(&s3, "expire/")
        .into_iter()
        .filter(|(k, _)| k.ends_with(".log"))
        .count();
    assert_eq!(
        logs as u64,
        status(&broker, topic)["remote_segments"].as_u64().unwrap()
    );
}

/// With the object store down, local data of tiered topics stops at --local-disk-cap:
/// producers get a retriable storage error instead of the disk filling up, and produce
/// again once offload has caught up.
#[test]
fn the_local_disk_cap_refuses_producers_while_offload_is_stuck() {
    let mut s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &s3,
        "cap",
        &[
            "--local-disk-cap",
            "6MiB",
            "--retention-check-interval",
            "1s",
        ],
    );
    let topic = "capped";
    create_topic(
        &broker.kafka,
        topic,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", &MIB.to_string()),
            ("local.retention.bytes", &MIB.to_string()),
        ],
    );
    wait_for("the remote tier to attach", Duration::from_secs(30), || {
        status(&broker, topic)["remote_start_offset"].is_null()
    });
    s3.stop();
    let (p, d) = producer(
        &broker.kafka,
        &[("message.timeout.ms", "4000"), ("linger.ms", "5")],
    );
    for i in 0..4_000u64 {
        send(&p, topic, None, &value(i, 4096));
    }
    let _ = rdkafka::producer::Producer::flush(&p, Duration::from_secs(20));
    let errors = d.errors.lock().unwrap().clone();
    let acked = d.acked.lock().unwrap().len();
    assert!(
        !errors.is_empty(),
        "producers are refused once the cap is reached ({acked} acked)"
    );
    assert!(
        errors
            .iter()
            .all(|e| e.contains("Storage") || e.contains("timed out")),
        "{:?}",
        &errors[..errors.len().min(3)]
    );
    let local = status(&broker, topic)["local_bytes"].as_u64().unwrap();
    assert!(
        local < 8 * MIB as u64,
        "local data stopped near the cap: {local}"
    );
    // The store comes back: offload catches up, local retention frees space, producing works.
    s3.restart().unwrap();
    wait_for("offload to catch up", Duration::from_secs(60), || {
        let s = status(&broker, topic);
        s["offload_lag_bytes"] == 0 && s["local_bytes"].as_u64().unwrap() < 3 * MIB as u64
    });
    std::thread::sleep(Duration::from_secs(1));
    let start_offset = status(&broker, topic)["local_end_offset"].as_u64().unwrap();
    produce(&broker.kafka, topic, start_offset, 200, 4096);
}

/// A compacted topic with remote.storage.enable: segments go up once cleaned, local
/// retention drops them, and the remote tier's cleaner compacts the bucket, so that
/// kafka-python reading from offset 0 (from the bucket, then local disk) gets the latest
/// value of every key, once, at its original offset, and the bucket holds a fraction of
/// what was written.
#[test]
fn a_tiered_compacted_topic_is_compacted_in_the_bucket() {
    const KEYS: u64 = 2_000;
    const ROUNDS: u64 = 4;
    let s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &s3,
        "compacted",
        &[
            "--retention-check-interval",
            "1s",
            "--min-segment-bytes",
            "65536",
            "--log-cleaner-backoff",
            "200ms",
            "--log-cleaner-io-max-bytes-per-second",
            "0",
        ],
    );
    let topic = "tc";
    create_topic(
        &broker.kafka,
        topic,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("remote.storage.enable", "true"),
            ("local.retention.bytes", "1"),
            ("segment.bytes", "65536"),
            ("segment.ms", "1000"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    );
    // Every key written ROUNDS times: "r{round}:k{key}" padded to 300 bytes.
    // Batches well under segment.bytes (librdkafka's default batch.size is 1 MB).
    let (p, d) = common::kafka::producer(
        &broker.kafka,
        &[("linger.ms", "5"), ("batch.size", "16384")],
    );
    for round in 0..ROUNDS {
        for k in 0..KEYS {
            let key = format!("key-{k}");
            let mut v = format!("r{round}:k{k}:").into_bytes();
            v.resize(300, b'.');
            common::kafka::send(&p, topic, Some(key.as_bytes()), &v);
        }
        common::kafka::flush(&p);
        // Each round goes up (cleaned locally first, which finds nothing to remove:
        // its keys are all new there) and leaves local disk (but for its last segment,
        // which local retention keeps) before the next is written, so the bucket gets
        // every version and only the remote pass can compact them.
        wait_for("the round to be offloaded", Duration::from_secs(60), || {
            let s = status(&broker, topic);
            s["remote_end_offset"]
                .as_u64()
                .is_some_and(|e| e >= (round + 1) * KEYS)
                && s["local_start_offset"].as_u64().unwrap() > round * KEYS
        });
    }
    assert!(
        d.errors.lock().unwrap().is_empty(),
        "{:?}",
        d.errors.lock().unwrap().first()
    );
    let written = KEYS * ROUNDS * 300;

    // kafka-python from offset 0 until it reads one record per key: the latest.
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/read_partition.py"
    );
    let mut got = Vec::new();
    wait_for(
        "the bucket to hold one value per key",
        Duration::from_secs(150),
        || {
            let out = std::process::Command::new("python3")
                .args([script, &broker.kafka, topic, "0"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            got = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<(i64, String, String)>(l).unwrap())
                .collect();
            let s = status(&broker, topic);
            got.len() as u64 == KEYS && s["local_start_offset"].as_i64().unwrap() > 0
        },
    );
    for w in got.windows(2) {
        assert!(w[0].0 < w[1].0, "offsets increase");
    }
    let mut keys = std::collections::HashSet::new();
    for (o, k, v) in &got {
        let n: u64 = k.strip_prefix("key-").unwrap().parse().unwrap();
        assert!(keys.insert(n), "key {n} twice");
        assert!(
            v.starts_with(&format!("r{}:k{n}:", ROUNDS - 1)),
            "{k} at {o}: {v}"
        );
        // The last round wrote key n at offset (ROUNDS - 1) * KEYS + n.
        assert_eq!(*o as u64, (ROUNDS - 1) * KEYS + n);
    }
    // Most of it was read from the bucket, which holds a fraction of what was written.
    let s = status(&broker, topic);
    assert!(
        s["local_start_offset"].as_i64().unwrap() > (KEYS * (ROUNDS - 1)) as i64,
        "{s}"
    );
    // The replaced objects go once --orphan-grace (0s here) has passed.
    let segment_bytes = || -> u64 {
        common::bucket::objects(&s3, "")
            .iter()
            .filter(|(k, _)| k.contains("/tc-") && k.ends_with(".log"))
            .map(|(_, size)| *size as u64)
            .sum()
    };
    wait_for(
        "the replaced objects to go",
        Duration::from_secs(30),
        || segment_bytes() * 2 < written,
    );
    let compacted = broker.http_get("/metrics").lines().find_map(|l| {
        l.strip_prefix("strata_tier_compacted_bytes_total ")?
            .parse::<f64>()
            .ok()
    });
    assert!(compacted.is_some_and(|b| b > 0.0), "{compacted:?}");
}

#[test]
fn read_committed_from_the_bucket_sees_exactly_the_committed_records() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    const ROUNDS: usize = 12;
    const PER_TXN: usize = 60;
    let s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &s3,
        "transactions",
        &[
            "--retention-check-interval",
            "1s",
            "--min-segment-bytes",
            "65536",
        ],
    );
    let topic = "tx-tier";
    create_topic(
        &broker.kafka,
        topic,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("local.retention.bytes", "1"),
            ("segment.bytes", "65536"),
            ("segment.ms", "1000"),
        ],
    );
    let p: BaseProducer = client_config(&broker.kafka, &[("transactional.id", "tier-writer")])
        .create()
        .unwrap();
    let t = Duration::from_secs(30);
    p.init_transactions(t).unwrap();
    let mut committed = Vec::new();
    for round in 0..ROUNDS {
        for (kind, commit) in [("c", true), ("a", false)] {
            p.begin_transaction().unwrap();
            for i in 0..PER_TXN {
                let v = format!("{kind}{round}-{i}:{}", ".".repeat(400));
                p.send(BaseRecord::<[u8], [u8]>::to(topic).payload(v.as_bytes()))
                    .unwrap();
                if commit {
                    committed.push(v);
                }
            }
            p.flush(t).unwrap();
            if commit {
                p.commit_transaction(t).unwrap();
            } else {
                p.abort_transaction(t).unwrap();
            }
        }
    }
    // Every transaction has ended, so everything up to the last segment goes up, and the
    // early segments (aborted transactions among them) leave local disk.
    wait_for(
        "the aborts to be offloaded",
        Duration::from_secs(90),
        || {
            let s = status(&broker, topic);
            s["remote_end_offset"]
                .as_u64()
                .is_some_and(|e| e as usize >= ROUNDS * PER_TXN)
                && s["local_start_offset"].as_u64().unwrap() as usize >= ROUNDS * PER_TXN
        },
    );
    let indexes = common::bucket::objects(&s3, "transactions")
        .into_iter()
        .filter(|(k, _)| k.ends_with(".txnindex"))
        .count();
    assert!(
        indexes > 0,
        "aborted-transaction indexes went up with their segments"
    );

    // From offset 0, through the bucket: exactly the committed records, in order.
    let c: BaseConsumer = client_config(
        &broker.kafka,
        &[
            ("group.id", "tier-reader"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ],
    )
    .create()
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut got = Vec::new();
    // Until nothing new for 5 s (20 s for the first record, on a loaded machine).
    let mut last = Instant::now() + Duration::from_secs(15);
    while last.elapsed() < Duration::from_secs(5)
        || (got.len() < committed.len() && last.elapsed() < Duration::from_secs(30))
    {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            got.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
            last = Instant::now();
        }
    }
    assert_eq!(got.len(), committed.len(), "{} records read", got.len());
    assert!(
        got == committed,
        "the committed records, in order, and nothing aborted"
    );
}

/// The JSON tests/python/admin_records.py prints (kafka-python's admin client).
fn kafka_python_admin(bootstrap: &str, topic: &str, args: &[&str]) -> Value {
    let mut all = vec![bootstrap, topic];
    all.extend_from_slice(args);
    common::python_json("admin_records.py", &all)
}

/// DeleteRecords (KIP-107) through kafka-python's admin client, on a tiered partition
/// whose older records are only in the bucket: the log start moves to the offset asked
/// for, the bucket's segments wholly below it go, a consumer from the earliest offset
/// starts there and reads everything after it, and the start holds across a kill -9.
/// DescribeLogDirs reports the partition's bytes on local disk and in the bucket.
#[test]
fn delete_records_moves_the_log_start_in_the_bucket_too() {
    let s3 = s3();
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(
        dir.path(),
        &s3,
        "trim",
        &["--retention-check-interval", "1s"],
    );
    let topic = "trimmed";
    create_topic(
        &broker.kafka,
        topic,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", &MIB.to_string()),
            ("local.retention.ms", "1000"),
        ],
    );
    const N: u64 = 3_000;
    const SIZE: usize = 2048;
    produce(&broker.kafka, topic, 0, N, SIZE);
    // The older records leave local disk once offloaded.
    wait_for(
        "local retention after offload",
        Duration::from_secs(90),
        || {
            status(&broker, topic)["local_start_offset"]
                .as_i64()
                .unwrap()
                > 1_500
        },
    );
    let before = status(&broker, topic);
    assert_eq!(before["remote_start_offset"], 0, "{before}");
    let segments_before = before["remote_segments"].as_u64().unwrap();

    let v = kafka_python_admin(&broker.kafka, topic, &["describe"]);
    let dirs = v["dirs"].as_object().unwrap();
    let local_dir = dir.path().canonicalize().unwrap().display().to_string();
    let local = dirs
        .get(&local_dir)
        .unwrap_or_else(|| panic!("{local_dir} in {v}"));
    let remote = dirs
        .get(&s3.url("trim"))
        .unwrap_or_else(|| panic!("the bucket in {v}"));
    assert!(local["0"].as_i64().unwrap() > 0, "{v}");
    assert_eq!(
        remote["0"].as_u64().unwrap(),
        before["remote_bytes"].as_u64().unwrap(),
        "{v}"
    );
    assert!(v["usable"][&local_dir].as_i64().unwrap() > 0, "{v}");

    // Deleting past the high watermark is refused.
    let v = kafka_python_admin(&broker.kafka, topic, &["delete", &(N + 1).to_string()]);
    assert_eq!(v["error"], "OffsetOutOfRangeError", "{v}");
    // Deleting below 1,000, which only the bucket holds.
    let v = kafka_python_admin(&broker.kafka, topic, &["delete", "1000"]);
    assert_eq!(v["low_watermark"], 1000, "{v}");
    let after = status(&broker, topic);
    assert_eq!(after["remote_start_offset"], 1000, "{after}");
    assert!(
        after["remote_segments"].as_u64().unwrap() < segments_before,
        "segments wholly below the start leave the bucket: {before} {after}"
    );
    let earliest = |b: &common::Broker| {
        let c: BaseConsumer = client_config(&b.kafka, &[]).create().unwrap();
        c.fetch_watermarks(topic, 0, Duration::from_secs(10))
            .unwrap()
            .0
    };
    assert_eq!(earliest(&broker), 1000);
    check_from(&broker.kafka, topic, 1000, N, SIZE);

    // The start is durable.
    broker.kill9();
    broker.restart();
    assert_eq!(earliest(&broker), 1000);
    check_from(&broker.kafka, topic, 1000, N, SIZE);

    // Everything (-1: up to the high watermark), including records not offloaded yet;
    // offload carries on after it with what comes next.
    let v = kafka_python_admin(&broker.kafka, topic, &["delete", "-1"]);
    assert_eq!(v["low_watermark"], N, "{v}");
    assert_eq!(earliest(&broker), N as i64);
    produce(&broker.kafka, topic, N, 1_000, SIZE);
    wait_for("offload after the delete", Duration::from_secs(90), || {
        status(&broker, topic)["remote_end_offset"]
            .as_i64()
            .is_some_and(|e| e > N as i64)
    });
    check_from(&broker.kafka, topic, N, N + 1_000, SIZE);
}
