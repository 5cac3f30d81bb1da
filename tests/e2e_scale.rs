//! Scale on one broker: partitions are not bounded by the open-file limit.
//!
//! A broker started under a 1,024-descriptor limit (soft and hard, set with `prlimit`
//! on the child, so it cannot raise it) serves 2,000 partitions: an rdkafka producer
//! writes to every one of them and an rdkafka consumer reads every record back, the
//! broker never holds more segment descriptors than its cache allows, and after a
//! clean restart under the same limit everything reads back again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::kafka::*;
use rdkafka::producer::BaseRecord;

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
    let body = broker.http_get("/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn value(p: i32, i: usize) -> Vec<u8> {
    format!("partition {p} record {i}").into_bytes()
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
        for part in 0..PARTITIONS {
            let v = value(part, i);
            loop {
                match p.send(
                    BaseRecord::<[u8], [u8]>::to("wide")
                        .partition(part)
                        .payload(&v[..]),
                ) {
                    Ok(()) => break,
                    Err((e, _)) => {
                        assert!(
                            e.to_string().contains("Queue full"),
                            "send to partition {part}: {e}"
                        );
                        p.poll(Duration::from_millis(10));
                    }
                }
            }
        }
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
