//! End to end: a real Kafka client (librdkafka through the rdkafka crate) against the
//! real `strata serve` binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::kafka::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use strata_proto::partitioner::partition_for_key;

/// 100k keyed records over 8 partitions: every key's records come back in order on one
/// partition (Kafka's murmur2 partition), offsets are dense, nothing is missing or extra;
/// the same after a restart.
#[test]
fn keyed_records_keep_their_order_and_partition_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = common::Broker::start(dir.path(), &[]);
    let topic = "keyed";
    create_topic(&broker.kafka, topic, 8, &[("segment.bytes", "1048576")]);

    const N: usize = 100_000;
    const KEYS: usize = 997;
    let (p, d) = producer(
        &broker.kafka,
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("partitioner", "murmur2_random"),
        ],
    );
    let mut seq = vec![0u64; KEYS];
    for i in 0..N {
        let k = i % KEYS;
        let key = format!("key-{k}");
        let value = format!("{key}:{}", seq[k]);
        seq[k] += 1;
        send(&p, topic, Some(key.as_bytes()), value.as_bytes());
        if i % 1000 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    flush(&p);
    assert!(
        d.errors.lock().unwrap().is_empty(),
        "first errors: {:?}",
        d.errors.lock().unwrap().iter().take(3).collect::<Vec<_>>()
    );
    assert_eq!(d.acked.lock().unwrap().len(), N);

    let check = |bootstrap: &str| {
        let got = consume_all(bootstrap, topic, 8, N, Duration::from_secs(120));
        assert_eq!(got.len(), N, "every record comes back");
        // Offsets are dense per partition.
        for (part, recs) in by_partition(&got) {
            for (i, r) in recs.iter().enumerate() {
                assert_eq!(r.offset, i as i64, "partition {part} offsets are dense");
            }
        }
        // Every key on one partition (Kafka's default partitioner), in order.
        let mut next: HashMap<Vec<u8>, (i32, u64)> = HashMap::new();
        let mut grouped: Vec<&Got> = got.iter().collect();
        grouped.sort_by_key(|g| (g.partition, g.offset));
        for g in grouped {
            let key = g.key.clone().expect("keyed");
            assert_eq!(g.partition, partition_for_key(&key, 8), "murmur2 partition");
            let text = String::from_utf8(g.value.clone()).unwrap();
            let (k, s) = text.rsplit_once(':').unwrap();
            assert_eq!(k.as_bytes(), &key[..]);
            let s: u64 = s.parse().unwrap();
            let e = next.entry(key).or_insert((g.partition, 0));
            assert_eq!(e.0, g.partition, "a key stays on one partition");
            assert_eq!(s, e.1, "per-key order, no gaps, no duplicates");
            e.1 += 1;
        }
        assert_eq!(next.len(), KEYS);
    };
    check(&broker.kafka);
    drop(p);
    broker.stop();
    broker.restart();
    check(&broker.kafka);
}

/// kill -9 during a flat-out acks=all produce with idempotence: after the restart every
/// acknowledged record is there, in order, exactly once, and the producer carries on.
#[test]
fn kill_9_during_acks_all_produce_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = common::Broker::start(dir.path(), &[]);
    let topic = "durable";
    // Segments smaller than a producer batch (librdkafka batch.size is 1 MB) would refuse
    // the batches, as Kafka does; 2 MiB still rolls many times.
    create_topic(&broker.kafka, topic, 4, &[("segment.bytes", "2097152")]);
    let bootstrap = broker.kafka.clone();

    const N: u64 = 60_000;
    let (p, d) = producer(
        &bootstrap,
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("linger.ms", "2"),
            ("message.timeout.ms", "120000"),
            ("reconnect.backoff.max.ms", "200"),
        ],
    );
    let sender = std::thread::spawn(move || {
        for i in 0..N {
            let v = format!("{i:012}");
            send(&p, topic, Some(v.as_bytes()), v.as_bytes());
            if i % 500 == 0 {
                p.poll(Duration::ZERO);
            }
        }
        p.flush(Duration::from_secs(120))
            .expect("flush after restart");
    });
    // Let a good part be acknowledged, then kill the broker mid-stream.
    let t0 = Instant::now();
    while d.acked.lock().unwrap().len() < 15_000 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no progress before the kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    broker.kill9();
    let killed_at = Instant::now();
    let acked_before = d.acked.lock().unwrap().len();
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    sender.join().expect("producer thread");

    let errors = d.errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} delivery errors, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    let acked = d.acked.lock().unwrap().clone();
    assert_eq!(
        acked.len() as u64,
        N,
        "every record acknowledged in the end"
    );
    assert!(
        acked.iter().filter(|a| a.at > killed_at).count() > 0,
        "the producer resumed after the restart"
    );
    assert!(acked_before < N as usize, "the kill happened mid-stream");

    let got = consume_all(
        &broker.kafka,
        topic,
        4,
        N as usize,
        Duration::from_secs(120),
    );
    assert_eq!(
        got.len() as u64,
        N,
        "exactly once: no record missing or duplicated"
    );
    let stored: HashMap<(i32, i64), Vec<u8>> = got
        .iter()
        .map(|g| ((g.partition, g.offset), g.value.clone()))
        .collect();
    for a in &acked {
        assert_eq!(
            stored.get(&(a.partition, a.offset)),
            Some(&a.value),
            "acknowledged record at {}/{}",
            a.partition,
            a.offset
        );
    }
    let distinct: HashSet<&Vec<u8>> = got.iter().map(|g| &g.value).collect();
    assert_eq!(distinct.len() as u64, N);
    // In order within each partition: values were sent in increasing order.
    for (_, recs) in by_partition(&got) {
        for w in recs.windows(2) {
            assert!(w[0].value < w[1].value, "order within a partition");
            assert_eq!(w[0].offset + 1, w[1].offset);
        }
    }
}

/// Every compression codec a producer may use round-trips.
#[test]
fn every_producer_codec_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        create_topic(&broker.kafka, &topic, 2, &[]);
        let (p, d) = producer(
            &broker.kafka,
            &[("compression.codec", codec), ("linger.ms", "20")],
        );
        let values: Vec<String> = (0..2000)
            .map(|i| format!("{codec}-{i}-{}", "x".repeat(i % 300)))
            .collect();
        for v in &values {
            send(&p, &topic, None, v.as_bytes());
        }
        flush(&p);
        assert!(d.errors.lock().unwrap().is_empty());
        let got = consume_all(
            &broker.kafka,
            &topic,
            2,
            values.len(),
            Duration::from_secs(60),
        );
        let mut got: Vec<String> = got
            .into_iter()
            .map(|g| String::from_utf8(g.value).unwrap())
            .collect();
        let mut want = values.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "codec {codec}");
    }
}

/// ListOffsets through the client: watermarks and lookup by timestamp.
#[test]
fn offsets_by_time_and_watermarks() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &["--min-segment-bytes", "1"]);
    let topic = "times";
    create_topic(&broker.kafka, topic, 1, &[("segment.bytes", "4096")]);
    let (p, _d) = producer(&broker.kafka, &[("linger.ms", "0")]);
    let base = 1_700_000_000_000i64;
    for i in 0..200i64 {
        let v = format!("v{i}");
        // Explicit timestamps, 10 ms apart.
        loop {
            let rec = rdkafka::producer::BaseRecord::<(), _>::to(topic)
                .payload(v.as_bytes())
                .timestamp(base + i * 10);
            match p.send(rec) {
                Ok(()) => break,
                Err(_) => {
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
    flush(&p);
    let c: BaseConsumer = client_config(&broker.kafka, &[]).create().unwrap();
    let (lo, hi) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!((lo, hi), (0, 200));
    let mut q = TopicPartitionList::new();
    q.add_partition_offset(topic, 0, Offset::Offset(base + 555))
        .unwrap();
    let r = c.offsets_for_times(q, Duration::from_secs(10)).unwrap();
    // The first record at or after base+555 is the one at base+560: offset 56.
    assert_eq!(
        r.find_partition(topic, 0).unwrap().offset(),
        Offset::Offset(56)
    );
    let mut q = TopicPartitionList::new();
    q.add_partition_offset(topic, 0, Offset::Offset(base + 10_000))
        .unwrap();
    let r = c.offsets_for_times(q, Duration::from_secs(10)).unwrap();
    assert_eq!(
        r.find_partition(topic, 0).unwrap().offset(),
        Offset::End,
        "nothing that late"
    );
}

/// The codecs of the batches stored in `dir`'s partition `topic`-0, in log order.
fn stored_codecs(dir: &std::path::Path, topic: &str) -> Vec<strata_proto::batch::Compression> {
    let mut logs: Vec<_> = std::fs::read_dir(dir.join(format!("{topic}-0")))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let mut out = Vec::new();
    for path in logs {
        let bytes = std::fs::read(&path).unwrap();
        // The active segment may be preallocated past its last batch: stop there.
        for b in strata_proto::batch::batches(&bytes) {
            let Ok(b) = b else { break };
            if b.header().record_count == 0 {
                break;
            }
            out.push(b.compression().unwrap());
        }
    }
    out
}

/// The JSON tests/python/compression.py prints (kafka-python).
fn kafka_python(bootstrap: &str, topic: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec![bootstrap, topic];
    all.extend_from_slice(args);
    common::python_json("compression.py", &all)
}

/// compression.type: with a codec set the broker recompresses batches that arrive in
/// another (stored batches are in the topic's codec, records unchanged) and both
/// librdkafka and kafka-python read them back; set with kafka-python's AlterConfigs it
/// applies to the next batches. message.timestamp.before.max.ms refuses a record older
/// than the bound with INVALID_TIMESTAMP.
#[test]
fn the_topics_compression_type_recompresses_and_timestamps_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let topic = "recompressed";
    create_topic(&broker.kafka, topic, 1, &[("compression.type", "zstd")]);
    let values: Vec<String> = (0..600)
        .map(|i| format!("v{i}-{}", "y".repeat(i % 200)))
        .collect();
    let produce = |values: &[String], timestamp: Option<i64>| {
        let (p, d) = producer(
            &broker.kafka,
            &[("compression.codec", "gzip"), ("linger.ms", "20")],
        );
        for v in values {
            let mut r = rdkafka::producer::BaseRecord::<(), str>::to(topic)
                .partition(0)
                .payload(v.as_str());
            if let Some(t) = timestamp {
                r = r.timestamp(t);
            }
            p.send(r).map_err(|(e, _)| e).unwrap();
        }
        flush(&p);
        d.errors.lock().unwrap().clone()
    };
    assert_eq!(produce(&values[..400], None), Vec::<String>::new());
    let codecs = stored_codecs(dir.path(), topic);
    assert!(!codecs.is_empty());
    assert!(
        codecs
            .iter()
            .all(|c| *c == strata_proto::batch::Compression::Zstd),
        "{codecs:?}"
    );
    let v = kafka_python(&broker.kafka, topic, &["consume", "400"]);
    assert_eq!(v["values"], serde_json::json!(values[..400]));

    // kafka-python's AlterConfigs: lz4 from now on, and a bound on old timestamps.
    let v = kafka_python(
        &broker.kafka,
        topic,
        &[
            "alter",
            "compression.type=lz4",
            "message.timestamp.before.max.ms=60000",
        ],
    );
    assert_eq!(v["result"]["topic"][topic], "OK", "{v}");
    assert_eq!(produce(&values[400..], None), Vec::<String>::new());
    let codecs = stored_codecs(dir.path(), topic);
    assert_eq!(
        codecs.last(),
        Some(&strata_proto::batch::Compression::Lz4),
        "{codecs:?}"
    );
    let got = consume_all(
        &broker.kafka,
        topic,
        1,
        values.len(),
        Duration::from_secs(60),
    );
    let got: Vec<String> = got
        .into_iter()
        .map(|g| String::from_utf8(g.value).unwrap())
        .collect();
    assert_eq!(got, values);
    let v = kafka_python(&broker.kafka, topic, &["consume", "600"]);
    assert_eq!(v["values"], serde_json::json!(values));

    // An hour-old record is refused; the log is unchanged.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let errors = produce(&["old".to_string()], Some(now - 3_600_000));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("InvalidTimestamp"), "{errors:?}");
    assert_eq!(
        produce(&["fresh".to_string()], Some(now)),
        Vec::<String>::new()
    );
}
