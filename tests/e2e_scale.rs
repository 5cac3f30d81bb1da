//! Scale on one broker: partitions are not bounded by the open-file limit.
//!
//! A broker started under a 1,024-descriptor limit (soft and hard, set with `prlimit`
//! on the child, so it cannot raise it) serves 2,000 partitions: an rdkafka producer
//! writes to every one of them and an rdkafka consumer reads every record back, the
//! broker never holds more segment descriptors than its cache allows, and after a
//! clean restart under the same limit everything reads back again.
//!
//! 10,000 partitions on one broker restart intact after a clean stop and after kill -9:
//! the end offset of every partition (one ListOffsets request per topic) and the
//! records of a sample (kcat) are what was acknowledged; after the clean
//! stop no partition recovers anything, after kill -9 only those with records past
//! their last flush do (`strata_partition_opens_total{recovery}`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::kafka::*;
use rdkafka::producer::{BaseProducer, BaseRecord};
use strata_proto::ErrorCode;

const PARTITIONS: i32 = 2_000;
const NOFILE: u64 = 1_024;

/// Descriptors the process `pid` has open.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A metric's value in the broker's /metrics.
fn metric(broker: &common::Broker, name: &str) -> f64 {
    broker
        .metric(name)
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn value(p: i32, i: usize) -> Vec<u8> {
    format!("partition {p} record {i}").into_bytes()
}

/// Sends one record to every partition `0..partitions` of `topic` (retrying while
/// librdkafka's queue is full); the caller flushes.
fn send_to_all(
    p: &BaseProducer<Deliveries>,
    topic: &str,
    partitions: i32,
    v: impl Fn(i32) -> Vec<u8>,
) {
    for part in 0..partitions {
        let v = v(part);
        loop {
            match p.send(
                BaseRecord::<[u8], [u8]>::to(topic)
                    .partition(part)
                    .payload(&v[..]),
            ) {
                Ok(()) => break,
                Err((e, _)) => {
                    assert!(
                        e.to_string().contains("Queue full"),
                        "send to {topic}/{part}: {e}"
                    );
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
}

fn check_all(bootstrap: &str, per_partition: usize) {
    let got = consume_all(
        bootstrap,
        "wide",
        PARTITIONS,
        PARTITIONS as usize * per_partition,
        Duration::from_secs(180),
    );
    let parts = by_partition(&got);
    assert_eq!(
        parts.len(),
        PARTITIONS as usize,
        "every partition read back"
    );
    for p in 0..PARTITIONS {
        let recs = &parts[&p];
        let values: Vec<Vec<u8>> = recs.iter().map(|g| g.value.clone()).collect();
        let want: Vec<Vec<u8>> = (0..per_partition).map(|i| value(p, i)).collect();
        assert_eq!(values, want, "partition {p}");
        let offsets: Vec<i64> = recs.iter().map(|g| g.offset).collect();
        assert_eq!(offsets, (0..per_partition as i64).collect::<Vec<_>>());
    }
}

#[test]
fn a_broker_limited_to_1024_descriptors_serves_2000_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = common::Broker::start_with_nofile(dir.path(), NOFILE, &[]);
    let b = broker.kafka.clone();
    create_topic(&b, "wide", PARTITIONS, &[]);

    // Two rounds of one record to every partition, each round a flush: the second
    // round appends to segments whose descriptors the first round's later partitions
    // evicted.
    let per_partition = 2;
    let (p, deliveries) = producer(&b, &[("linger.ms", "20"), ("acks", "all")]);
    for i in 0..per_partition {
        send_to_all(&p, "wide", PARTITIONS, |part| value(part, i));
        flush(&p);
    }
    assert_eq!(
        *deliveries.errors.lock().unwrap(),
        Vec::<String>::new(),
        "every record acknowledged"
    );
    check_all(&b, per_partition);

    // The default segment-descriptor budget is half the limit.
    let capacity = metric(&broker, "strata_log_segment_files_capacity");
    assert_eq!(capacity, (NOFILE / 2) as f64);
    let open = metric(&broker, "strata_log_segment_files_open");
    assert!(
        open <= capacity,
        "{open} segment files open, capacity {capacity}"
    );
    let opens = metric(&broker, "strata_log_segment_file_opens_total");
    assert!(
        opens > capacity,
        "the partitions took turns with the descriptors ({opens} opens)"
    );
    let now = fds(broker.pid());
    assert!(now < NOFILE as usize, "{now} descriptors open");

    // A clean restart under the same limit opens every partition again.
    broker.stop();
    broker.restart();
    check_all(&broker.kafka, per_partition);
    assert!(fds(broker.pid()) < NOFILE as usize);
}

const TOPICS: usize = 4;
const WIDE: i32 = 2_500;
/// The partitions of each topic whose records an rdkafka consumer reads back.
const SAMPLE: [i32; 4] = [0, 1, 1_249, 2_499];

fn record(topic: usize, p: i32, i: i64) -> Vec<u8> {
    format!("t{topic}/{p}#{i}").into_bytes()
}

/// Every partition of topic `t` ends at `records(t)`, and the sampled ones hold exactly
/// the records written.
fn check_10k(bootstrap: &str, records: impl Fn(usize) -> i64, when: &str) {
    for t in 0..TOPICS {
        let records = records(t);
        let ends = common::wire::end_offsets(bootstrap, &format!("r{t}"), WIDE);
        for (p, (code, end)) in ends.iter().enumerate() {
            assert_eq!(*code, ErrorCode::None, "{when}: r{t}/{p}");
            assert_eq!(
                *end, records,
                "{when}: r{t}/{p} ends at {end}, not {records}"
            );
        }
    }
    // The sample is read by kcat (librdkafka in a process of its own per partition).
    for t in 0..TOPICS {
        for p in SAMPLE {
            let out = std::process::Command::new("kcat")
                .args(["-b", bootstrap, "-C", "-t", &format!("r{t}"), "-p"])
                .arg(p.to_string())
                .args(["-o", "beginning", "-e", "-q", "-f", "%o %s\n"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{when}: kcat r{t}/{p}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let got: Vec<String> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            let want: Vec<String> = (0..records(t))
                .map(|i| format!("{i} {}", String::from_utf8(record(t, p, i)).unwrap()))
                .collect();
            assert_eq!(got, want, "{when}: r{t}/{p}");
        }
    }
}

#[test]
fn ten_thousand_partitions_restart_intact_after_a_clean_stop_and_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    // A session shorter than opening 10,000 partitions takes (in a debug build): the
    // broker heartbeats while it opens them, so the controller never fences it. (It
    // used to heartbeat only once it listened, and right after a restart its own
    // Metadata left it out as fenced: clients found no broker.)
    let mut broker = common::Broker::start(dir.path(), &["--broker-session-timeout", "2s"]);
    let b = broker.kafka.clone();
    for t in 0..TOPICS {
        create_topic(&b, &format!("r{t}"), WIDE, &[]);
    }
    // Each creation reached the broker as a delta of the metadata (the commands since
    // its version), not as the whole metadata of every partition again.
    let updates = |kind: &str| {
        broker
            .metric(&format!("strata_metadata_updates_total{{kind=\"{kind}\"}}"))
            .unwrap_or(0.0)
    };
    assert!(
        updates("delta") >= TOPICS as f64,
        "{} deltas",
        updates("delta")
    );
    assert_eq!(updates("full"), 0.0, "whole metadata sent after the start");
    let produce_round = |bootstrap: &str, topics: std::ops::Range<usize>, i: i64| {
        let (p, deliveries) = producer(bootstrap, &[("linger.ms", "20"), ("acks", "all")]);
        for t in topics.clone() {
            send_to_all(&p, &format!("r{t}"), WIDE, |part| record(t, part, i));
        }
        flush(&p);
        assert_eq!(*deliveries.errors.lock().unwrap(), Vec::<String>::new());
        assert_eq!(
            deliveries.acked.lock().unwrap().len(),
            topics.len() * WIDE as usize
        );
    };
    produce_round(&b, 0..TOPICS, 0);
    check_10k(&b, |_| 1, "before any restart");

    broker.stop();
    // One checkpoint file for the broker, none per partition.
    let file = std::fs::read_to_string(broker.data_dir.join("partition-checkpoints")).unwrap();
    let entries = file.lines().count() - 3;
    assert!(entries >= 10_000, "{entries} entries");
    let own: Vec<_> = std::fs::read_dir(&broker.data_dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.path().join("recovery-point").exists() || e.path().join("high-watermark").exists()
        })
        .map(|e| e.file_name())
        .collect();
    assert!(
        own.is_empty(),
        "partitions with checkpoint files of their own: {own:?}"
    );
    broker.restart();
    check_10k(&broker.kafka, |_| 1, "after a clean stop");
    assert_eq!(fencings(&broker), 0.0, "the controller fenced the broker");
    // A clean stop left every partition durable: no open recovered anything (the
    // internal topics' partitions count too: at least 10,000 opens).
    let clean = opens(&broker, "none");
    assert!(clean >= 10_000.0, "{clean} clean opens");
    assert_eq!(opens(&broker, "tail"), 0.0, "opens that recovered a tail");

    // Acknowledged records, in topic r0 only, that only the page cache and the device
    // hold: kill -9. Only r0's partitions have a tail to recover.
    produce_round(&broker.kafka, 0..1, 1);
    broker.kill9();
    // While the restarted broker opens its partitions it already answers, with a
    // per-partition error clients retry on, never "unknown".
    let answers = while_restarting(&mut broker, "r3");
    let loading: Vec<_> = answers
        .iter()
        .filter(|codes| codes.contains(&ErrorCode::NotLeaderOrFollower))
        .collect();
    assert!(
        !loading.is_empty(),
        "no answer while the partitions were opening: {answers:?}"
    );
    for codes in &answers {
        assert!(
            codes
                .iter()
                .all(|c| matches!(c, ErrorCode::None | ErrorCode::NotLeaderOrFollower)),
            "{codes:?}"
        );
    }
    check_10k(
        &broker.kafka,
        |t| if t == 0 { 2 } else { 1 },
        "after kill -9",
    );
    assert_eq!(fencings(&broker), 0.0, "the controller fenced the broker");
    assert_eq!(
        opens(&broker, "tail"),
        WIDE as f64,
        "opens that recovered a tail"
    );
    assert_eq!(opens(&broker, "none"), clean - WIDE as f64);
}

/// Restarts `broker`, asking for the end offsets of every partition of `topic` over and
/// over while it starts: the set of error codes of each answer it gave.
fn while_restarting(
    broker: &mut common::Broker,
    topic: &str,
) -> Vec<std::collections::HashSet<ErrorCode>> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (addr, topic) = (broker.kafka.clone(), topic.to_string());
    let poller = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(ends) = common::wire::try_end_offsets(&addr, &topic, WIDE) {
                    answers.push(ends.iter().map(|(code, _)| *code).collect());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            answers
        })
    };
    broker.restart();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap()
}

/// `strata_partition_opens_total{recovery="..."}`, 0 if absent.
fn opens(broker: &common::Broker, recovery: &str) -> f64 {
    broker
        .metric(&format!(
            "strata_partition_opens_total{{recovery=\"{recovery}\"}}"
        ))
        .unwrap_or(0.0)
}

/// How often this broker's controller fenced a broker (`strata_controller_broker_fencings_total`),
/// 0 if never.
fn fencings(broker: &common::Broker) -> f64 {
    broker
        .metric("strata_controller_broker_fencings_total")
        .unwrap_or(0.0)
}

/// A clean stop leaves the clean-shutdown marker, and the next start CRC-scans only the
/// last index interval of each active segment (`strata_partition_open_scanned_bytes_total`);
/// after kill -9 there is no marker and every active segment is scanned whole. Every
/// record reads back in order both times.
#[test]
fn a_clean_restart_scans_only_the_tail_of_each_active_segment() {
    const PARTS: i32 = 4;
    const PER: usize = 2_000;
    let record = |part: i32, i: usize| {
        let mut v = format!("partition {part} record {i} ").into_bytes();
        v.resize(1024, b'.');
        v
    };
    let dir = tempfile::tempdir().unwrap();
    let mut broker = common::Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    create_topic(&b, "tails", PARTS, &[]);
    let (p, deliveries) = producer(
        &b,
        &[("linger.ms", "5"), ("batch.size", "16384"), ("acks", "all")],
    );
    for i in 0..PER {
        send_to_all(&p, "tails", PARTS, |part| record(part, i));
    }
    flush(&p);
    assert_eq!(*deliveries.errors.lock().unwrap(), Vec::<String>::new());
    assert_eq!(deliveries.acked.lock().unwrap().len(), PER * PARTS as usize);
    let data = (PER * PARTS as usize * 1024) as f64;
    let check = |bootstrap: &str, when: &str| {
        let got = consume_all(
            bootstrap,
            "tails",
            PARTS,
            PER * PARTS as usize,
            Duration::from_secs(120),
        );
        let parts = by_partition(&got);
        for part in 0..PARTS {
            let values: Vec<Vec<u8>> = parts[&part].iter().map(|g| g.value.clone()).collect();
            let want: Vec<Vec<u8>> = (0..PER).map(|i| record(part, i)).collect();
            assert!(values == want, "{when}: partition {part} differs");
        }
    };

    broker.stop();
    let marker = broker.data_dir.join("clean-shutdown");
    assert!(marker.exists(), "a clean stop leaves the marker");
    broker.restart();
    assert!(!marker.exists(), "the start takes the marker");
    let scanned = metric(&broker, "strata_partition_open_scanned_bytes_total");
    assert!(
        scanned < data / 20.0,
        "a clean start scanned {scanned} bytes of {data}"
    );
    check(&broker.kafka, "after a clean stop");

    broker.kill9();
    assert!(!marker.exists());
    broker.restart();
    let scanned = metric(&broker, "strata_partition_open_scanned_bytes_total");
    assert!(
        scanned >= data,
        "after kill -9 every active segment is scanned whole: {scanned} of {data}"
    );
    check(&broker.kafka, "after kill -9");
}
