//! Fetch sessions (KIP-227) against the real broker: on the wire, an incremental fetch
//! names only what changed and is answered with only partitions that have news; the
//! session's epoch and id are checked; and kafka-python (which fetches through
//! incremental sessions when offered) reads every record a producer writes while it
//! reads, exactly once and in order. (Followers fetch through sessions too: every
//! replication test runs on them.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use common::kafka::{create_topic, flush, producer, send};
use common::wire;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_proto::ErrorCode;
use strata_proto::batch::build::{NewRecord, batch};

const VERSION: i16 = 12;

fn fetch(
    s: &mut std::net::TcpStream,
    topic: &str,
    session: (i32, i32),
    parts: &[(i32, i64)],
    forget: &[i32],
    max_wait_ms: i32,
) -> FetchResponse {
    let mut req = FetchRequest::default();
    req.replica_id = kafka_protocol::messages::BrokerId(-1);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.session_id = session.0;
    req.session_epoch = session.1;
    if !parts.is_empty() {
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.into()));
        for (p, offset) in parts {
            let mut fp = FetchPartition::default();
            fp.partition = *p;
            fp.fetch_offset = *offset;
            fp.partition_max_bytes = 1 << 20;
            t.partitions.push(fp);
        }
        req.topics.push(t);
    }
    if !forget.is_empty() {
        let mut f = ForgottenTopic::default();
        f.topic = TopicName(StrBytes::from_string(topic.into()));
        f.partitions = forget.to_vec();
        req.forgotten_topics_data.push(f);
    }
    s.write_all(&wire::frame(ApiKey::Fetch, VERSION, 1, &req))
        .unwrap();
    wire::response(wire::read_frame(s).expect("a fetch answer"), 1, VERSION).1
}

/// The partitions an answer carries: (partition, has records, high-water mark).
fn answered(r: &FetchResponse) -> Vec<(i32, bool, i64)> {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            (
                p.partition_index,
                p.records.as_ref().is_some_and(|r| !r.is_empty()),
                p.high_watermark,
            )
        })
        .collect()
}

fn one(addr: &str, topic: &str, partition: i32, v: &'static str) {
    let code = wire::produce(
        addr,
        topic,
        partition,
        1,
        batch(
            &[NewRecord::value(v, 1)],
            strata_proto::Compression::None,
            None,
        ),
        Duration::from_secs(10),
    );
    assert_eq!(code, ErrorCode::None);
}

#[test]
fn an_incremental_fetch_names_and_answers_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    create_topic(&b, "s", 3, &[]);
    one(&b, "s", 0, "a");
    let mut s = wire::connect(&b);

    // A full fetch at epoch 0 creates a session and is answered in full.
    let r = fetch(&mut s, "s", (0, 0), &[(0, 0), (1, 0), (2, 0)], &[], 0);
    assert_eq!(r.error_code, 0);
    let id = r.session_id;
    assert_ne!(id, 0, "the broker created a session");
    assert_eq!(
        answered(&r),
        vec![(0, true, 1), (1, false, 0), (2, false, 0)]
    );

    // The client moved partition 0 past what it read; nothing else changed: an empty
    // answer (after the wait, as nothing arrived).
    let r = fetch(&mut s, "s", (id, 1), &[(0, 1)], &[], 200);
    assert_eq!((r.error_code, r.session_id), (0, id));
    assert_eq!(answered(&r), vec![]);

    // A record arrives in partition 2 while the fetch waits: only partition 2 answers.
    let writer = {
        let b = b.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            one(&b, "s", 2, "b");
        })
    };
    let r = fetch(&mut s, "s", (id, 2), &[], &[], 10_000);
    writer.join().unwrap();
    assert_eq!(answered(&r), vec![(2, true, 1)]);

    // Partition 2 read to its end and partition 1 forgotten: a record in partition 1
    // is no news for this session.
    one(&b, "s", 1, "c");
    let r = fetch(&mut s, "s", (id, 3), &[(2, 1)], &[1], 0);
    assert_eq!(answered(&r), vec![]);

    // An epoch used twice, and a session that does not exist.
    let r = fetch(&mut s, "s", (id, 3), &[], &[], 0);
    assert_eq!(r.error_code, ErrorCode::InvalidFetchSessionEpoch.code());
    let r = fetch(&mut s, "s", (id ^ 0x5a5a, 1), &[], &[], 0);
    assert_eq!(r.error_code, ErrorCode::FetchSessionIdNotFound.code());
    // The failed requests did not move the session: epoch 4 goes on.
    let r = fetch(&mut s, "s", (id, 4), &[(1, 0)], &[], 0);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        answered(&r),
        vec![(1, true, 1)],
        "a partition added back answers"
    );

    // Epoch -1 closes the session: a sessionless full answer, id 0.
    let r = fetch(&mut s, "s", (id, -1), &[(0, 0)], &[], 0);
    assert_eq!((r.error_code, r.session_id), (0, 0));
    assert_eq!(answered(&r), vec![(0, true, 1)]);
    let r = fetch(&mut s, "s", (id, 5), &[], &[], 0);
    assert_eq!(r.error_code, ErrorCode::FetchSessionIdNotFound.code());
}

#[test]
fn a_broker_without_sessions_answers_in_full_with_session_id_0() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &["--fetch-session-cache-slots", "0"]);
    let b = broker.kafka.clone();
    create_topic(&b, "s", 2, &[]);
    let mut s = wire::connect(&b);
    let r = fetch(&mut s, "s", (0, 0), &[(0, 0), (1, 0)], &[], 0);
    assert_eq!((r.error_code, r.session_id), (0, 0));
    assert_eq!(answered(&r).len(), 2);
}

/// A metric's value in the broker's /metrics, 0 if absent.
fn metric(broker: &common::Broker, series: &str) -> f64 {
    broker.metric(series).unwrap_or(0.0)
}

#[test]
fn kafka_python_reads_everything_through_an_incremental_session() {
    const PARTITIONS: i32 = 12;
    const RECORDS: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    create_topic(&b, "py", PARTITIONS, &[]);

    // The producer writes while kafka-python reads: partitions join and leave its
    // fetches (it does not fetch a partition whose records it still holds), and high-
    // water marks move under the session.
    let (p, d) = producer(&b, &[("linger.ms", "5")]);
    let writer = std::thread::spawn(move || {
        for i in 0..RECORDS {
            let key = format!("k{}", i % 97);
            send(
                &p,
                "py",
                Some(key.as_bytes()),
                format!("{key}:{i:06}").as_bytes(),
            );
            if i % 100 == 0 {
                p.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        flush(&p);
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/consume_all.py");
    let out = std::process::Command::new("python3")
        .args([script, &b, "py", &RECORDS.to_string()])
        .output()
        .expect("python3 (run scripts/deps to install kafka-python)");
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "kafka-python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.errors.lock().unwrap().is_empty());
    let acked = d.acked.lock().unwrap().clone();
    assert_eq!(acked.len(), RECORDS);

    let got: Vec<(i32, i64, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Exactly what was acknowledged, each at its offset, each partition in order.
    let want: HashMap<(i32, i64), String> = acked
        .iter()
        .map(|a| {
            (
                (a.partition, a.offset),
                String::from_utf8(a.value.clone()).unwrap(),
            )
        })
        .collect();
    assert_eq!(got.len(), RECORDS, "as many records read as written");
    let mut next: HashMap<i32, i64> = HashMap::new();
    for (partition, offset, value) in &got {
        assert_eq!(want.get(&(*partition, *offset)), Some(value));
        let n = next.entry(*partition).or_insert(0);
        assert_eq!(
            offset, n,
            "partition {partition} read in order, without gaps"
        );
        *n += 1;
    }

    // It did so through a session, mostly with incremental fetches.
    assert!(metric(&broker, "strata_fetch_sessions_created_total") >= 1.0);
    let incremental = metric(
        &broker,
        "strata_fetch_requests_total{session=\"incremental\"}",
    );
    let full = metric(&broker, "strata_fetch_requests_total{session=\"full\"}");
    assert!(
        incremental > full,
        "{incremental} incremental fetches, {full} full ones"
    );
}
