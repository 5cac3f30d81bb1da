//! Replication with real processes: three `strata serve` on 127.0.0.1-3, real Kafka
//! clients, kill -9, SIGSTOP and cut links. What a user relies on: an acknowledged
//! (acks=all) record survives the loss of any one broker, is read exactly once at the
//! offset it was acknowledged at, min.insync.replicas refuses writes that would live on
//! one disk, and a leader cut off from the cluster cannot acknowledge anything.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{Cluster, FaultProxy, PartitionView, signal};
use common::kafka::{consume_all, create_topic_rf, producer, send};
use rdkafka::producer::Producer;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, ErrorCode};

fn full_isr(parts: &[PartitionView]) -> bool {
    parts
        .iter()
        .all(|(leader, replicas, isr)| *leader >= 0 && isr.len() == replicas.len())
}

/// The value of record `i` with key `key`: "KEY:I" (I zero-padded).
fn value(key: &str, i: u64) -> String {
    format!("{key}:{i:010}")
}

#[test]
fn killing_leaders_repeatedly_loses_no_acknowledged_record() {
    let mut c = Cluster::start(3, 3, &[]);
    let topic = "chaos";
    let bootstrap = c.bootstrap();
    create_topic_rf(
        &bootstrap,
        topic,
        3,
        3,
        &[("min.insync.replicas", "2"), ("segment.bytes", "1048576")],
    );
    c.wait_for(topic, "a full ISR", Duration::from_secs(30), full_isr);

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let (p, d) = producer(
        &bootstrap,
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "300000"),
            ("request.timeout.ms", "5000"),
            ("retry.backoff.ms", "50"),
            ("retry.backoff.max.ms", "500"),
            ("reconnect.backoff.max.ms", "500"),
            ("queue.buffering.max.messages", "20000"),
        ],
    );
    let sender = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("key-{:02}", i % 40);
                send(&p, topic, Some(key.as_bytes()), value(&key, i).as_bytes());
                i += 1;
                sent.store(i, Ordering::Relaxed);
                if i.is_multiple_of(200) {
                    p.poll(Duration::ZERO);
                }
            }
            p.flush(Duration::from_secs(240))
                .expect("every record delivered after the faults");
        })
    };

    let acked = |d: &common::kafka::Deliveries| d.acked.lock().unwrap().len();
    let wait_progress = |d: &common::kafka::Deliveries, what: &str| {
        let before = acked(d);
        let t0 = Instant::now();
        while acked(d) < before + 2_000 {
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "no produce progress {what} ({} acked, errors {:?})",
                acked(d),
                d.errors.lock().unwrap().first()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_progress(&d, "before the first kill");

    let mut kills = 0;
    let mut stops = 0;
    for round in 0..12 {
        let parts = c.wait_for(topic, "a full ISR", Duration::from_secs(90), full_isr);
        let victim = parts[round % 3].0;
        // Every third round also freezes another broker for a while (SIGSTOP): with the
        // leader dead and it frozen, acks=all waits (min.insync.replicas=2) until it
        // thaws; nothing acknowledged may be lost either way.
        let frozen = (round % 3 == 1).then(|| victim % 3 + 1);
        if let Some(f) = frozen {
            signal(c.broker(f), "-STOP");
            stops += 1;
        }
        eprintln!(
            "round {round}: kill -9 broker {victim}, SIGSTOP {frozen:?}; partitions {parts:?}"
        );
        c.broker(victim).kill9();
        kills += 1;
        std::thread::sleep(Duration::from_millis(700));
        if let Some(f) = frozen {
            std::thread::sleep(Duration::from_millis(1500));
            signal(c.broker(f), "-CONT");
        }
        c.broker(victim).restart();
        wait_progress(
            &d,
            &format!("after killing broker {victim} in round {round}"),
        );
    }
    assert!(kills >= 10 && stops >= 3);
    c.wait_for(topic, "a full ISR", Duration::from_secs(90), full_isr);
    stop.store(true, Ordering::Relaxed);
    sender.join().expect("producer thread");

    let errors = d.errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} delivery errors, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    let acked = d.acked.lock().unwrap().clone();
    let sent = sent.load(Ordering::Relaxed);
    assert_eq!(
        acked.len() as u64,
        sent,
        "every record sent was acknowledged"
    );

    let got = consume_all(&bootstrap, topic, 3, acked.len(), Duration::from_secs(180));
    assert_eq!(
        got.len(),
        acked.len(),
        "exactly once: as many records read as acknowledged"
    );
    // Each acknowledged record is at the offset it was acknowledged at.
    let stored: HashMap<(i32, i64), &[u8]> = got
        .iter()
        .map(|g| ((g.partition, g.offset), g.value.as_slice()))
        .collect();
    assert_eq!(stored.len(), got.len(), "no offset read twice");
    // librdkafka acknowledges some records without an offset (-1001): when a request
    // times out (or its connection dies with a killed broker) and a later batch of the
    // same idempotent producer is acknowledged, the earlier one must have been written
    // ("implicitly acked", rd_kafka_dr_implicit_ack). Those are looked up by value, in
    // the partition they were sent to.
    let placed: HashMap<&[u8], i32> = got
        .iter()
        .map(|g| (g.value.as_slice(), g.partition))
        .collect();
    let mut implicit = 0;
    for a in &acked {
        if a.offset < 0 {
            implicit += 1;
            assert_eq!(
                placed.get(a.value.as_slice()).copied(),
                Some(a.partition),
                "record acknowledged without an offset in partition {} is there",
                a.partition
            );
            continue;
        }
        assert_eq!(
            stored.get(&(a.partition, a.offset)).copied(),
            Some(a.value.as_slice()),
            "record acknowledged at {}/{} is there",
            a.partition,
            a.offset
        );
    }
    let distinct: HashSet<&[u8]> = got.iter().map(|g| g.value.as_slice()).collect();
    assert_eq!(distinct.len(), got.len(), "no record read twice");
    // Per key, records are in the order they were sent.
    let mut by_part = common::kafka::by_partition(&got);
    let mut last: HashMap<Vec<u8>, u64> = HashMap::new();
    for recs in by_part.values_mut() {
        for g in recs.iter() {
            let v = String::from_utf8(g.value.clone()).unwrap();
            let (key, i) = v.split_once(':').unwrap();
            assert_eq!(Some(key.as_bytes()), g.key.as_deref());
            let i: u64 = i.parse().unwrap();
            if let Some(prev) = last.insert(key.as_bytes().to_vec(), i) {
                assert!(prev < i, "key {key}: record {i} after {prev}");
            }
        }
    }
    // The followers fetched through fetch sessions (KIP-227), across every restart.
    let incremental: f64 = (1..=3)
        .map(|b| {
            metric(
                c.broker(b),
                "strata_fetch_requests_total{session=\"incremental\"}",
            )
        })
        .sum();
    assert!(incremental > 0.0, "no incremental fetch");
    eprintln!(
        "{} records acknowledged ({implicit} without an offset) and read back exactly once across {kills} leader kills and {stops} SIGSTOPs",
        acked.len()
    );
}

/// One record, as a raw batch.
fn one_record(v: &'static str) -> Bytes {
    batch(&[NewRecord::value(v, 1)], Compression::None, None)
}

/// A counter or gauge (without labels) from a broker's Prometheus endpoint; 0 if absent.
fn metric(b: &common::Broker, name: &str) -> f64 {
    b.http_get("/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn min_insync_replicas_refuses_acks_all_with_two_brokers_down() {
    // One controller voter (broker 1) so the quorum survives stopping brokers 2 and 3.
    let mut c = Cluster::start(3, 1, &[]);
    let topic = "minisr";
    create_topic_rf(&c.bootstrap(), topic, 3, 3, &[("min.insync.replicas", "2")]);
    let parts = c.wait_for(topic, "a full ISR", Duration::from_secs(30), full_isr);
    let p = parts
        .iter()
        .position(|x| x.0 == 1)
        .expect("broker 1 leads a partition") as i32;
    let b1 = c.nodes[0].kafka.clone();
    assert_eq!(
        common::wire::produce(
            &b1,
            topic,
            p,
            -1,
            one_record("before"),
            Duration::from_secs(10)
        ),
        ErrorCode::None
    );
    // Only the leader answers ListOffsets (a follower's log end and high-water mark
    // lag the leader's): a follower says NOT_LEADER_OR_FOLLOWER, as Kafka does.
    assert_eq!(list_offsets_raw(&b1, topic, p), ErrorCode::None);
    for follower in [1, 2] {
        let addr = c.nodes[follower].kafka.clone();
        assert_eq!(
            list_offsets_raw(&addr, topic, p),
            ErrorCode::NotLeaderOrFollower,
            "broker {} follows partition {p}",
            follower + 1
        );
    }

    c.broker(2).kill9();
    c.broker(3).stop();
    let only_1 = |parts: &[PartitionView]| parts[p as usize].2 == vec![1];
    let wait = |c: &Cluster, what: &str, f: &dyn Fn(&[PartitionView]) -> bool| {
        let t0 = Instant::now();
        loop {
            if let Some(parts) = common::cluster::metadata(&b1, topic)
                && f(&parts)
            {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(100));
            let _ = c;
        }
    };
    wait(&c, "the ISR to shrink to broker 1", &only_1);

    // What an operator sees: `strata topic describe` marks the partition, and broker 1
    // (the leader that shrank the ISR) exports it.
    let out = common::cli(&b1, &["topic", "describe", topic]);
    let desc = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{desc}");
    let row = desc
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&p.to_string()))
        .unwrap_or_else(|| panic!("partition {p} in:\n{desc}"));
    assert!(
        row.contains("UNDER-REPLICATED") && row.split_whitespace().nth(3) == Some("1"),
        "{desc}"
    );
    let t0 = Instant::now();
    while metric(&c.brokers[0], "strata_under_replicated_partitions") < 1.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "under-replicated gauge"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(metric(&c.brokers[0], "strata_isr_shrinks_total") >= 1.0);
    // The controller (broker 1, the only voter) fenced the killed broker for its silence.
    let t0 = Instant::now();
    while metric(&c.brokers[0], "strata_controller_broker_fencings_total") < 1.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the killed broker was never fenced"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    assert_eq!(
        common::wire::produce(
            &b1,
            topic,
            p,
            -1,
            one_record("refused"),
            Duration::from_secs(5)
        ),
        ErrorCode::NotEnoughReplicas,
        "acks=all with the ISR below min.insync.replicas"
    );
    assert_eq!(
        common::wire::produce(
            &b1,
            topic,
            p,
            1,
            one_record("acks1"),
            Duration::from_secs(5)
        ),
        ErrorCode::None,
        "acks=1 still works"
    );
    // A real client sees the same: delivery fails with NOT_ENOUGH_REPLICAS (retriable,
    // so librdkafka would retry it until message.timeout.ms; without retries the
    // broker's error is what the application gets).
    let (prod, d) = producer(
        &b1,
        &[
            ("acks", "all"),
            ("message.timeout.ms", "10000"),
            ("retries", "0"),
        ],
    );
    prod.send(
        rdkafka::producer::BaseRecord::<(), str>::to(topic)
            .partition(p)
            .payload("refused-too"),
    )
    .map_err(|(e, _)| e)
    .unwrap();
    let _ = rdkafka::producer::Producer::flush(&prod, Duration::from_secs(10));
    let errors = d.errors.lock().unwrap().clone();
    assert!(
        errors.len() == 1 && errors[0].contains("NotEnoughReplicas"),
        "{errors:?}"
    );

    // One broker back: the ISR grows to two and acks=all works again.
    c.broker(2).restart();
    wait(&c, "broker 2 to rejoin the ISR", &|parts| {
        parts[p as usize].2.contains(&2) && parts[p as usize].2.contains(&1)
    });
    assert!(metric(&c.brokers[0], "strata_isr_expands_total") >= 1.0);
    assert_eq!(
        common::wire::produce(
            &b1,
            topic,
            p,
            -1,
            one_record("after"),
            Duration::from_secs(10)
        ),
        ErrorCode::None
    );
}

#[test]
fn an_isolated_leader_cannot_acknowledge_acks_all() {
    // Broker 2 reaches the controller (broker 1) and is reached by the other brokers
    // only through proxies; cutting them isolates it while the test still talks to it.
    let nodes = Cluster::plan(3);
    let to_controller = FaultProxy::start("127.0.0.2", &nodes[0].controller);
    let to_kafka = FaultProxy::start("127.0.0.2", &nodes[1].kafka);
    let (voters_via, advertised) = (format!("1@{}", to_controller.addr), to_kafka.addr.clone());
    let c = Cluster::start_with(nodes, 1, &[], |n| {
        if n.id == 2 {
            vec![
                "--controller-voters".into(),
                voters_via.clone(),
                "--advertised-kafka-addr".into(),
                advertised.clone(),
            ]
        } else {
            Vec::new()
        }
    });
    let topic = "isolated";
    // min.insync.replicas=1: even so, the cut-off leader must not acknowledge, as its
    // ISR cannot shrink without the controller.
    create_topic_rf(&c.bootstrap(), topic, 3, 3, &[]);
    let parts = c.wait_for(topic, "a full ISR", Duration::from_secs(30), full_isr);
    let p = parts
        .iter()
        .position(|x| x.0 == 2)
        .expect("broker 2 leads a partition") as i32;
    let direct = c.nodes[1].kafka.clone();
    assert_eq!(
        common::wire::produce(
            &direct,
            topic,
            p,
            -1,
            one_record("acked"),
            Duration::from_secs(10)
        ),
        ErrorCode::None
    );

    to_controller.cut();
    to_kafka.cut();
    let code = common::wire::produce(
        &direct,
        topic,
        p,
        -1,
        one_record("never-acked"),
        Duration::from_secs(8),
    );
    assert_ne!(
        code,
        ErrorCode::None,
        "the isolated leader acknowledged acks=all"
    );
    // Meanwhile the rest of the cluster elected a new leader.
    let others = format!("{},{}", c.nodes[0].kafka, c.nodes[2].kafka);
    let t0 = Instant::now();
    loop {
        if let Some(parts) = common::cluster::metadata(&others, topic)
            && parts[p as usize].0 != 2
            && parts[p as usize].0 >= 0
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no new leader elected"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    to_controller.heal();
    to_kafka.heal();
    // Healed, broker 2 follows the new leader and drops what it alone held.
    c.wait_for(
        topic,
        "a full ISR after healing",
        Duration::from_secs(60),
        full_isr,
    );
    let got = consume_all(&c.bootstrap(), topic, 3, 1, Duration::from_secs(30));
    let values: Vec<&[u8]> = got.iter().map(|g| g.value.as_slice()).collect();
    assert_eq!(values, vec![b"acked".as_slice()]);
    // And broker 2's own log agrees once it is back in the ISR (read from it directly
    // after making it leader again is not needed: the ISR means it caught up; its log
    // end equals the leader's).
    let (lo, hi) = watermarks(&c.bootstrap(), topic, p);
    assert_eq!((lo, hi), (0, 1));
}

use common::kafka::watermarks;

#[test]
fn killing_the_controller_leader_during_topic_creation_creates_it_once_or_not() {
    let mut c = Cluster::start(3, 3, &[]);
    let bootstrap = c.bootstrap();
    create_topic_rf(&bootstrap, "warm", 1, 3, &[]);
    for round in 0..4u64 {
        let name = format!("born-{round}");
        let leader = controller_id(&bootstrap);
        // Any broker takes CreateTopics and forwards it to the controller (KIP-590);
        // ask one that survives, then kill the controller leader under it.
        let survivor = c.nodes[(leader % 3) as usize].kafka.clone();
        let req_name = name.clone();
        let creating = std::thread::spawn(move || create_topic_raw(&survivor, &req_name, 6, 3));
        std::thread::sleep(Duration::from_micros(500 * round));
        c.broker(leader).kill9();
        let first = creating.join().unwrap();
        c.broker(leader).restart();
        assert!(
            matches!(
                first,
                ErrorCode::None
                    | ErrorCode::TopicAlreadyExists
                    | ErrorCode::RequestTimedOut
                    | ErrorCode::NotController
            ),
            "first attempt: {first:?}"
        );
        // Whatever the first answer was, creating it again either succeeds (it was not
        // created) or finds it: never a second topic or a half-made one.
        let admin = common::kafka::admin(&bootstrap);
        let t = rdkafka::admin::NewTopic::new(&name, 6, rdkafka::admin::TopicReplication::Fixed(3));
        let again = futures::executor::block_on(
            admin.create_topics([&t], &rdkafka::admin::AdminOptions::new()),
        )
        .unwrap();
        let created_again = match &again[0] {
            Ok(_) => true,
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => false,
            Err(e) => panic!("second creation failed: {e:?} (first: {first:?})"),
        };
        if first == ErrorCode::None {
            assert!(!created_again, "a topic created twice");
        }
        let parts = c.wait_for(&name, "the topic", Duration::from_secs(60), full_isr);
        assert_eq!(parts.len(), 6, "one topic, with the partitions asked for");
        eprintln!(
            "round {round}: killed controller leader {leader}; first answer {first:?}; created on retry: {created_again}"
        );
    }
}

/// ListOffsets v7 (latest) for one partition, as a consumer sends it: its error code.
fn list_offsets_raw(addr: &str, topic: &str, partition: i32) -> ErrorCode {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use std::io::Write;
    let mut part = ListOffsetsPartition::default();
    part.partition_index = partition;
    part.timestamp = -1;
    let mut t = ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![part];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = kafka_protocol::messages::BrokerId(-1);
    req.topics = vec![t];
    let mut s = common::wire::connect(addr);
    s.write_all(&common::wire::frame(ApiKey::ListOffsets, 7, 1, &req))
        .unwrap();
    let (_, r): (i32, ListOffsetsResponse) =
        common::wire::response(common::wire::read_frame(&mut s).expect("an answer"), 1, 7);
    ErrorCode::from_code(r.topics[0].partitions[0].error_code).unwrap()
}

fn create_topic_raw(addr: &str, name: &str, partitions: i32, rf: i16) -> ErrorCode {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use std::io::Write;
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(name.to_string()));
    t.num_partitions = partitions;
    t.replication_factor = rf;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 30_000;
    let mut s = common::wire::connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&common::wire::frame(ApiKey::CreateTopics, 5, 1, &req))
        .unwrap();
    let (_, r): (i32, CreateTopicsResponse) =
        common::wire::response(common::wire::read_frame(&mut s).expect("an answer"), 1, 5);
    ErrorCode::from_code(r.topics[0].error_code).unwrap()
}

fn controller_id(bootstrap: &str) -> i32 {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
    let addr = bootstrap.split(',').next().unwrap();
    let mut s = common::wire::connect(addr);
    use std::io::Write;
    let t0 = Instant::now();
    loop {
        s.write_all(&common::wire::frame(
            ApiKey::Metadata,
            12,
            1,
            &MetadataRequest::default(),
        ))
        .unwrap();
        let (_, r): (i32, MetadataResponse) =
            common::wire::response(common::wire::read_frame(&mut s).unwrap(), 1, 12);
        if r.controller_id.0 >= 0 {
            return r.controller_id.0;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no controller leader"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
