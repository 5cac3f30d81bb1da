//! Compacted topics against the real `strata serve`: librdkafka writes a changelog, the
//! broker's cleaner compacts it, and kafka-python (an independent client) reads back
//! exactly the latest value of every key at its original offset; a consumer that starts
//! inside a removed range gets the next surviving record; keyless records are refused
//! with Kafka's error; cleanup.policy=compact keeps old records that compact,delete
//! expires by time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::Broker;
use common::kafka::{client_config, create_topic, flush, producer, send};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

/// Flags that make the cleaner look often, unthrottled, and allow small segments.
const FLAGS: &[&str] = &[
    "--log-cleaner-backoff",
    "200ms",
    "--log-cleaner-io-max-bytes-per-second",
    "0",
    "--min-segment-bytes",
    "65536",
    "--retention-check-interval",
    "1s",
];

fn metric(b: &Broker, name: &str, topic: &str) -> Option<f64> {
    let want = format!("topic=\"{topic}\"");
    b.http_get("/metrics").lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix('{')?;
        if !rest.contains(&want) {
            return None;
        }
        l.rsplit(' ').next()?.parse().ok()
    })
}

fn watermarks(bootstrap: &str, topic: &str) -> (i64, i64) {
    let c: BaseConsumer = client_config(bootstrap, &[]).create().unwrap();
    c.fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap()
}

/// Bytes of the partition's segment files.
fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every record of partition 0, read by kafka-python: (offset, key, value).
type Read = Vec<(i64, Option<String>, Option<String>)>;

fn read_with_kafka_python(bootstrap: &str, topic: &str) -> Read {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/read_partition.py"
    );
    let out = Command::new("python3")
        .args([script, bootstrap, topic, "0"])
        .output()
        .expect("python3 (run scripts/deps to install kafka-python)");
    assert!(
        out.status.success(),
        "kafka-python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_changelog_keeps_the_latest_value_of_every_key() {
    const UPDATES: usize = 1_000_000;
    const KEYS: usize = 10_000;
    const DELETED: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), FLAGS);
    let b = broker.kafka.clone();
    let topic = "changelog";
    create_topic(
        &b,
        topic,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "1048576"),
            // The active segment is never cleaned: roll it soon after the writes stop.
            ("segment.ms", "2000"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "3600000"),
        ],
    );
    let (p, d) = producer(
        &b,
        &[
            ("linger.ms", "20"),
            ("batch.size", "262144"),
            ("compression.type", "lz4"),
            ("enable.idempotence", "true"),
        ],
    );
    let mut latest: HashMap<String, Option<String>> = HashMap::new();
    for i in 0..UPDATES {
        let key = format!("key-{}", i % KEYS);
        let value = format!("value-{i}");
        send(&p, topic, Some(key.as_bytes()), value.as_bytes());
        latest.insert(key, Some(value));
        if i % 10_000 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    // Tombstones for some keys: they stay (delete.retention.ms is an hour) and their
    // earlier values go.
    for k in 0..DELETED {
        let key = format!("key-{}", k * 7);
        p.send(BaseRecord::<[u8], [u8]>::to(topic).key(key.as_bytes()))
            .map_err(|(e, _)| e)
            .unwrap();
        latest.insert(key, None);
    }
    flush(&p);
    assert!(
        d.errors.lock().unwrap().is_empty(),
        "{:?}",
        d.errors.lock().unwrap()
    );
    let end = (UPDATES + DELETED) as i64;
    assert_eq!(watermarks(&b, topic).1, end);
    let part_dir = dir.path().join(format!("{topic}-0"));
    let before = log_bytes(&part_dir);

    wait_for(
        "the cleaner to reach the log end",
        Duration::from_secs(180),
        || {
            metric(&broker, "strata_log_cleaner_cleaned_offset", topic)
                .is_some_and(|o| o >= end as f64)
        },
    );
    let after = log_bytes(&part_dir);
    assert!(
        after * 20 < before,
        "the log shrank from {before} to {after} bytes"
    );
    assert!(metric(&broker, "strata_log_cleaner_reclaimed_bytes_total", topic).unwrap() > 0.0);
    // `strata topic describe` shows the cleaner's state from the broker's HTTP address.
    let out = common::cli(&b, &["topic", "describe", topic, "--http", &broker.http]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row = text
        .lines()
        .skip_while(|l| !l.starts_with("cleaner ("))
        .nth(2)
        .unwrap_or_else(|| panic!("a cleaner row in:\n{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols[0], cols[2]), ("0", &*end.to_string()), "{text}");
    assert!(
        cols[4].parse::<u64>().unwrap() > 0,
        "bytes reclaimed: {text}"
    );

    // kafka-python from offset 0: one record per key, its latest, at increasing offsets.
    let got = read_with_kafka_python(&b, topic);
    assert_eq!(got.len(), KEYS, "one record per key");
    let mut seen: HashMap<String, Option<String>> = HashMap::new();
    for w in got.windows(2) {
        assert!(w[0].0 < w[1].0, "offsets increase");
    }
    for (_, k, v) in &got {
        assert!(
            seen.insert(k.clone().unwrap(), v.clone()).is_none(),
            "{k:?} twice"
        );
    }
    assert_eq!(seen, latest);
    assert_eq!(got.iter().filter(|r| r.2.is_none()).count(), DELETED);
    // The latest value of key-1 was written at offset UPDATES - KEYS + 1 and is still there.
    let one = got
        .iter()
        .find(|r| r.1.as_deref() == Some("key-1"))
        .unwrap();
    assert_eq!(one.0, (UPDATES - KEYS + 1) as i64);

    // A consumer that starts inside a removed range gets the next surviving record.
    let removed = got[0].0 - 1;
    assert!(removed > 0);
    let c: BaseConsumer = client_config(&b, &[("group.id", "compaction-probe")])
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(removed))
        .unwrap();
    c.assign(&tpl).unwrap();
    let t0 = Instant::now();
    let first = loop {
        assert!(t0.elapsed() < Duration::from_secs(20), "nothing read");
        if let Some(m) = c.poll(Duration::from_millis(500)) {
            break m.unwrap().offset();
        }
    };
    assert_eq!(first, got[0].0);

    // `strata log dump` of the stopped broker's partition shows the removed ranges.
    drop(c);
    let mut broker = broker;
    broker.stop();
    let out = Command::new(common::strata_bin())
        .args(["log", "dump"])
        .arg(&part_dir)
        .args(["--max-batches", "5"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("gap ") && l.contains("removed by compaction")),
        "{text}"
    );
}

#[test]
fn keyless_records_are_refused_and_compact_keeps_what_compact_delete_expires() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), FLAGS);
    let b = broker.kafka.clone();
    create_topic(&b, "compacted", 1, &[("cleanup.policy", "compact")]);

    // A record without a key: Kafka's INVALID_RECORD, and nothing is appended.
    let (p, d) = producer(&b, &[("retries", "0")]);
    send(&p, "compacted", None, b"no key");
    flush(&p);
    let errors = d.errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("InvalidRecord"), "{errors:?}");
    assert_eq!(watermarks(&b, "compacted"), (0, 0));

    // Records an hour old in a compact topic and a compact,delete topic with a minute of
    // retention: retention expires the second, never the first.
    let hour_ago = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;
    for (topic, policy) in [("kept", "compact"), ("expiring", "compact,delete")] {
        create_topic(
            &b,
            topic,
            1,
            &[
                ("cleanup.policy", policy),
                ("retention.ms", "60000"),
                ("segment.ms", "500"),
            ],
        );
        for i in 0..10 {
            let key = format!("k{i}");
            p.send(
                BaseRecord::to(topic)
                    .key(key.as_bytes())
                    .payload("old".as_bytes())
                    .timestamp(hour_ago),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        }
        p.flush(Duration::from_secs(10)).unwrap();
    }
    wait_for(
        "compact,delete to expire its old segment",
        Duration::from_secs(60),
        || watermarks(&b, "expiring").0 == 10,
    );
    // By then the compact-only topic has rolled and been through retention checks too.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(watermarks(&b, "kept"), (0, 10));
    assert_eq!(read_with_kafka_python(&b, "kept").len(), 10);
}
