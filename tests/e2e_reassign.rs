//! Partition reassignment (KIP-455) with real processes: three `strata serve`, then a
//! fourth, real clients (rdkafka producing acks=all and consuming; kafka-python's admin
//! client; the `strata partition reassign` CLI). What an operator relies on: replicas
//! move to the new broker while traffic flows, nothing acknowledged is lost, every key's
//! records stay in order, a controller kill -9 mid-way does not lose the reassignment,
//! a cancel puts a partition back, and the old brokers drop the replicas they gave up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, PartitionView};
use common::kafka::{client_config, create_topic_rf, producer, send};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "moving";

/// A record the consumer read: partition, offset, key, value.
type Read = (i32, i64, Vec<u8>, Vec<u8>);
const PARTITIONS: i32 = 8;

fn full_isr(parts: &[PartitionView]) -> bool {
    parts
        .iter()
        .all(|(leader, replicas, isr)| *leader >= 0 && isr.len() == replicas.len())
}

/// The topic the load writes: 8 partitions at RF=3, min.insync.replicas=2, fully in sync.
fn create_moving_topic(c: &Cluster) {
    create_topic_rf(
        &c.bootstrap(),
        TOPIC,
        PARTITIONS,
        3,
        &[("min.insync.replicas", "2"), ("segment.bytes", "1048576")],
    );
    c.wait_for(TOPIC, "a full ISR", Duration::from_secs(30), full_isr);
}

fn wait(what: &str, timeout: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The controller leader's node id, from Metadata.
fn controller_id(bootstrap: &str) -> i32 {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
    use std::io::Write;
    let t0 = Instant::now();
    loop {
        for addr in bootstrap.split(',') {
            let Ok(mut s) = std::net::TcpStream::connect(addr) else {
                continue;
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let frame = common::wire::frame(ApiKey::Metadata, 12, 1, &MetadataRequest::default());
            if s.write_all(&frame).is_err() {
                continue;
            }
            let Some(bytes) = common::wire::read_frame(&mut s) else {
                continue;
            };
            let (_, r): (i32, MetadataResponse) = common::wire::response(bytes, 1, 12);
            if r.controller_id.0 >= 0 {
                return r.controller_id.0;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no controller leader"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The brokers a client's metadata lists (the live ones).
fn listed_brokers(bootstrap: &str) -> Vec<i32> {
    let consumer: BaseConsumer = client_config(bootstrap, &[]).create().unwrap();
    consumer
        .fetch_metadata(None, Duration::from_secs(5))
        .map(|md| md.brokers().iter().map(|b| b.id()).collect())
        .unwrap_or_default()
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "strata failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An acks=all idempotent producer writing "KEY:I" under 40 keys, and a consumer reading
/// every partition from the beginning, both all along.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    deliveries: common::kafka::Deliveries,
    sender: std::thread::JoinHandle<()>,
    read: Arc<Mutex<Vec<Read>>>,
    done_reading: Arc<AtomicBool>,
    reader: std::thread::JoinHandle<()>,
}

impl Load {
    fn start(b: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (p, deliveries) = producer(
            b,
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
                    send(
                        &p,
                        TOPIC,
                        Some(key.as_bytes()),
                        format!("{key}:{i:010}").as_bytes(),
                    );
                    i += 1;
                    sent.store(i, Ordering::Relaxed);
                    if i.is_multiple_of(100) {
                        p.poll(Duration::ZERO);
                        // About 5,000 records a second: enough to move, not to swamp
                        // 2 cores.
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                p.flush(Duration::from_secs(240))
                    .expect("every record delivered");
            })
        };
        let read: Arc<Mutex<Vec<Read>>> = Arc::default();
        let done_reading = Arc::new(AtomicBool::new(false));
        let reader = {
            let (read, done, b) = (read.clone(), done_reading.clone(), b.to_string());
            std::thread::spawn(move || {
                let consumer: BaseConsumer = client_config(
                    &b,
                    &[
                        ("group.id", "reassign-reader"),
                        ("enable.auto.commit", "false"),
                    ],
                )
                .create()
                .unwrap();
                let mut tpl = TopicPartitionList::new();
                for p in 0..PARTITIONS {
                    tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
                        .unwrap();
                }
                consumer.assign(&tpl).unwrap();
                while !done.load(Ordering::Relaxed) {
                    match consumer.poll(Duration::from_millis(100)) {
                        Some(Ok(m)) => read.lock().unwrap().push((
                            m.partition(),
                            m.offset(),
                            m.key().unwrap_or_default().to_vec(),
                            m.payload().unwrap_or_default().to_vec(),
                        )),
                        Some(Err(e)) => eprintln!("consumer: {e}"),
                        None => {}
                    }
                }
            })
        };
        Load {
            stop,
            sent,
            deliveries,
            sender,
            read,
            done_reading,
            reader,
        }
    }

    fn acked(&self) -> usize {
        self.deliveries.acked.lock().unwrap().len()
    }

    /// Waits until `more` records more than now are acknowledged.
    fn wait_acked(&self, more: usize) {
        let before = self.acked();
        wait("produce progress", Duration::from_secs(60), || {
            self.acked() >= before + more
        });
    }

    /// Stops producing; every record sent was acknowledged, and the consumer read each
    /// acknowledged record once, nothing else, every key's records in the order sent.
    fn finish(self) {
        self.wait_acked(1_000);
        self.stop.store(true, Ordering::Relaxed);
        self.sender.join().unwrap();
        let errors = self.deliveries.errors.lock().unwrap().clone();
        assert!(
            errors.is_empty(),
            "delivery errors: {:?}",
            &errors[..errors.len().min(3)]
        );
        let acked = self.deliveries.acked.lock().unwrap().clone();
        assert_eq!(acked.len() as u64, self.sent.load(Ordering::Relaxed));
        wait(
            "the consumer to read everything",
            Duration::from_secs(120),
            || self.read.lock().unwrap().len() >= acked.len(),
        );
        std::thread::sleep(Duration::from_millis(500));
        self.done_reading.store(true, Ordering::Relaxed);
        self.reader.join().unwrap();
        let read = self.read.lock().unwrap().clone();
        let values: HashSet<&[u8]> = read.iter().map(|r| r.3.as_slice()).collect();
        assert_eq!(values.len(), read.len(), "no record read twice");
        for a in &acked {
            assert!(
                values.contains(a.value.as_slice()),
                "acknowledged record {} missing",
                String::from_utf8_lossy(&a.value)
            );
        }
        assert_eq!(
            read.len(),
            acked.len(),
            "nothing read that was not acknowledged"
        );
        // Per key, in the order sent; per partition, offsets increase.
        let mut last_i: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut last_offset: HashMap<i32, i64> = HashMap::new();
        for (partition, offset, key, value) in &read {
            if let Some(prev) = last_offset.insert(*partition, *offset) {
                assert!(
                    prev < *offset,
                    "partition {partition}: offset {offset} after {prev}"
                );
            }
            let v = String::from_utf8(value.clone()).unwrap();
            let (k, i) = v.split_once(':').unwrap();
            assert_eq!(k.as_bytes(), key.as_slice());
            let i: u64 = i.parse().unwrap();
            if let Some(prev) = last_i.insert(key.clone(), i) {
                assert!(prev < i, "key {k}: record {i} after {prev}");
            }
        }
    }
}

#[test]
fn replicas_move_to_a_new_broker_under_load_through_a_controller_failover_and_a_cancel() {
    let nodes = Cluster::plan(4);
    let fourth = nodes[3].clone();
    let mut c = Cluster::start_with(nodes[..3].to_vec(), 3, &[], |_| Vec::new());
    let b = c.bootstrap();
    create_moving_topic(&c);

    let load = Load::start(&b);
    load.wait_acked(2_000);

    // Broker 4 joins. A plan balances the topic over 1-4: a quarter of the replicas (6
    // of 24) move to broker 4, and it leads two partitions.
    c.add(fourth, &[]);
    let b4 = c.bootstrap();
    let out = common::cli(
        &b4,
        &[
            "partition",
            "reassign",
            "--generate",
            "--brokers",
            "1,2,3,4",
            "--topic",
            TOPIC,
        ],
    );
    let plan_text = ok(&out);
    let plan: serde_json::Value = serde_json::from_str(plan_text.trim()).unwrap();
    let planned: Vec<(i32, Vec<i32>)> = plan["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p["topic"], TOPIC);
            (
                p["partition"].as_i64().unwrap() as i32,
                serde_json::from_value(p["replicas"].clone()).unwrap(),
            )
        })
        .collect();
    let on_4: usize = planned.iter().filter(|(_, r)| r.contains(&4)).count();
    assert_eq!(on_4, 6, "{plan}");
    let plan_file = c.dir.path().join("plan.json");
    std::fs::write(&plan_file, &plan_text).unwrap();
    let plan_arg = plan_file.to_str().unwrap();

    // Broker 4 is down when the plan goes in: the reassignment waits for it (it cannot
    // catch up), and stays listed.
    c.broker(4).kill9();
    // Clients (kafka-python among them) are told of it until its session expires.
    wait("broker 4 fenced", Duration::from_secs(30), || {
        !listed_brokers(&b).contains(&4)
    });
    ok(&common::cli(
        &b,
        &["partition", "reassign", "--plan", plan_arg, "--no-wait"],
    ));
    let listed = common::python_json("admin_reassign.py", &[&b, "list"]);
    for (p, replicas) in &planned {
        let r = &listed[format!("{TOPIC}/{p}")];
        assert_eq!(r["adding"], serde_json::json!([4]), "{listed}");
        let all: Vec<i32> = serde_json::from_value(r["replicas"].clone()).unwrap();
        assert_eq!(
            &all[..replicas.len()],
            &replicas[..],
            "target first: {listed}"
        );
    }

    // kill -9 of the controller leader mid-reassignment: the next one has it too.
    let old = controller_id(&b);
    eprintln!("killing controller leader {old}");
    c.broker(old).kill9();
    let others: String = c
        .nodes
        .iter()
        .filter(|n| n.id != old && n.id != 4)
        .map(|n| n.kafka.clone())
        .collect::<Vec<_>>()
        .join(",");
    wait("a new controller leader", Duration::from_secs(60), || {
        let id = controller_id(&others);
        id != old
    });
    c.broker(old).restart();
    let listed = common::python_json("admin_reassign.py", &[&b, "list"]);
    assert_eq!(
        listed.as_object().unwrap().len(),
        planned.len(),
        "every reassignment survives the failover: {listed}"
    );

    // kafka-python cancels one partition's move: it goes back to its replicas.
    let (cancelled, _) = planned[0].clone();
    let before = c.partitions(TOPIC).unwrap()[cancelled as usize].1.clone();
    let r = common::python_json(
        "admin_reassign.py",
        &[&b, "alter", TOPIC, &cancelled.to_string(), "cancel"],
    );
    assert_eq!(
        r[format!("{TOPIC}/{cancelled}")],
        serde_json::Value::Null,
        "{r}"
    );
    let listed = common::python_json("admin_reassign.py", &[&b, "list"]);
    assert!(
        listed.get(format!("{TOPIC}/{cancelled}")).is_none(),
        "{listed}"
    );
    let after = c.partitions(TOPIC).unwrap()[cancelled as usize].1.clone();
    assert!(!after.contains(&4), "cancelled: {after:?} (was {before:?})");
    // Cancelling again: nothing to cancel.
    let r = common::python_json(
        "admin_reassign.py",
        &[&b, "alter", TOPIC, &cancelled.to_string(), "cancel"],
    );
    assert_eq!(
        r[format!("{TOPIC}/{cancelled}")],
        "NoReassignmentInProgressError",
        "{r}"
    );

    // Broker 4 returns; the plan runs to the end (the CLI resubmits it, the cancelled
    // partition included, and waits with its progress bar).
    c.broker(4).restart();
    let out = ok(&common::cli(
        &b4,
        &["partition", "reassign", "--plan", plan_arg],
    ));
    assert!(out.contains("6 partition(s) reassigned"), "{out}");
    let parts = c.wait_for(TOPIC, "a full ISR", Duration::from_secs(60), full_isr);
    for (p, replicas) in &planned {
        assert_eq!(&parts[*p as usize].1, replicas, "partition {p}: {parts:?}");
    }
    let on_4 = parts.iter().filter(|(_, r, _)| r.contains(&4)).count();
    assert_eq!(on_4, 6);
    assert!(
        common::python_json("admin_reassign.py", &[&b4, "list"])
            .as_object()
            .unwrap()
            .is_empty()
    );
    // The brokers that gave a replica up dropped its files.
    wait(
        "moved-away replicas deleted",
        Duration::from_secs(30),
        || {
            parts.iter().enumerate().all(|(p, (_, replicas, _))| {
                (1..=4).all(|id| {
                    let dir = c.brokers[id as usize - 1]
                        .data_dir
                        .join(format!("{TOPIC}-{p}"));
                    dir.exists() == replicas.contains(&id)
                })
            })
        },
    );

    // Traffic went on throughout; stop it and check every acknowledged record.
    load.finish();
}

/// `--throttle` caps the copy of a moving replica at its rate (Kafka's
/// leader/follower.replication.throttled.rate): 8 MB at 1 MB/s cannot move in under 4 s
/// whatever the machine (a slow one only takes longer), the brokers count what they
/// throttled, DescribeConfigs shows the rate while it is set, and the CLI removes it
/// once the move is done.
#[test]
fn a_throttled_reassignment_copies_no_faster_than_its_rate() {
    let c = Cluster::start(2, 1, &[]);
    let b = c.bootstrap();
    let admin = common::kafka::admin(&b);
    let t = rdkafka::admin::NewTopic::new(
        "slow",
        1,
        rdkafka::admin::TopicReplication::Variable(&[&[1]]),
    );
    let r = futures::executor::block_on(
        admin.create_topics([&t], &rdkafka::admin::AdminOptions::new()),
    )
    .unwrap();
    assert_eq!(r[0], Ok("slow".to_string()));
    let (p, d) = producer(&b, &[("acks", "all"), ("linger.ms", "20")]);
    // 8,000 records of 1 KiB of varied bytes.
    for i in 0..8_000u32 {
        let v: Vec<u8> = (0..1024u32)
            .map(|j| (i.wrapping_mul(31) ^ j) as u8)
            .collect();
        send(&p, "slow", None, &v);
    }
    p.flush(Duration::from_secs(60)).unwrap();
    assert_eq!(d.acked.lock().unwrap().len(), 8_000);

    let plan = c.dir.path().join("slow.json");
    std::fs::write(
        &plan,
        r#"{"version":1,"partitions":[{"topic":"slow","partition":0,"replicas":[1,2]}]}"#,
    )
    .unwrap();
    let t0 = Instant::now();
    let child = std::process::Command::new(common::strata_bin())
        .args([
            "partition",
            "reassign",
            "--plan",
            plan.to_str().unwrap(),
            "--throttle",
            "1MB/s",
        ])
        .env("STRATA_BOOTSTRAP", &b)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While it moves, the rate is what DescribeConfigs shows for the broker.
    wait("the throttle to be set", Duration::from_secs(30), || {
        let v = common::python_json("admin_configs.py", &[&b, "broker", "1"]);
        v["leader.replication.throttled.rate"] == "1000000"
    });
    let out = child.wait_with_output().unwrap();
    let elapsed = t0.elapsed();
    let text = ok(&out);
    assert!(text.contains("1 partition(s) reassigned"), "{text}");
    assert!(text.contains("replication throttle removed"), "{text}");
    assert!(
        elapsed >= Duration::from_secs(4),
        "8 MB moved in {elapsed:?} under a 1 MB/s throttle"
    );
    c.wait_for(
        "slow",
        "both replicas in sync",
        Duration::from_secs(30),
        |p| p[0].1 == [1, 2] && p[0].2.len() == 2,
    );
    let throttled = c.brokers[0]
        .metric("strata_replication_throttled_bytes_total{side=\"leader\"}")
        .unwrap_or(0.0)
        + c.brokers[1]
            .metric("strata_replication_throttled_bytes_total{side=\"follower\"}")
            .unwrap_or(0.0);
    assert!(throttled >= 8.0e6, "throttled bytes counted: {throttled}");
    let v = common::python_json("admin_configs.py", &[&b, "broker", "1"]);
    assert_eq!(
        v["leader.replication.throttled.rate"],
        i64::MAX.to_string(),
        "{v}"
    );
}

/// `strata cluster decommission` drains a broker while producers and consumers run: the
/// broker ends with no replica, every partition fully replicated on the others, nothing
/// acknowledged lost. Once its process is stopped it is unregistered for good; started
/// again, it joins as a new broker, and `strata cluster add` gives it its share.
#[test]
fn a_decommissioned_broker_is_drained_under_load_unregistered_and_added_back() {
    let mut c = Cluster::start(4, 3, &[]);
    let b = c.bootstrap();
    create_moving_topic(&c);
    let on = |parts: &[PartitionView], id: i32| parts.iter().filter(|p| p.1.contains(&id)).count();
    assert!(on(&c.partitions(TOPIC).unwrap(), 4) > 0);
    let load = Load::start(&b);
    load.wait_acked(2_000);

    // Broker 4 is running: drained, then left registered with a hint.
    let out = ok(&common::cli(&b, &["cluster", "decommission", "4"]));
    assert!(out.contains("partition(s) reassigned"), "{out}");
    assert!(out.contains("stop its process"), "{out}");
    let parts = c.wait_for(TOPIC, "a full ISR", Duration::from_secs(60), full_isr);
    assert_eq!(on(&parts, 4), 0, "{parts:?}");
    assert!(
        parts.iter().all(|p| p.1.len() == 3 && p.2.len() == 3),
        "{parts:?}"
    );
    // Its directories went with its replicas.
    wait(
        "broker 4's replicas deleted",
        Duration::from_secs(30),
        || (0..PARTITIONS).all(|p| !c.brokers[3].data_dir.join(format!("{TOPIC}-{p}")).exists()),
    );
    // Still running: it cannot be unregistered yet.
    let out = common::cli(&b, &["cluster", "unregister", "4"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stop its process"),
        "{out:?}"
    );
    load.wait_acked(1_000);

    // Stopped, it is unregistered; a second time it is not registered.
    c.broker(4).kill9();
    wait("broker 4 fenced", Duration::from_secs(30), || {
        !listed_brokers(&b).contains(&4)
    });
    let out = ok(&common::cli(&b, &["cluster", "decommission", "4"]));
    assert!(out.contains("broker 4 unregistered"), "{out}");
    let out = common::cli(&b, &["cluster", "unregister", "4"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("BrokerIdNotRegistered"),
        "{out:?}"
    );
    let brokers = ok(&common::cli(&b, &["cluster", "brokers"]));
    assert_eq!(brokers.lines().count(), 3, "{brokers}");

    // Started again it registers afresh, empty; `cluster add` gives it a quarter.
    c.broker(4).restart();
    wait("broker 4 back", Duration::from_secs(30), || {
        listed_brokers(&b).contains(&4)
    });
    let out = ok(&common::cli(&b, &["cluster", "add"]));
    assert!(out.contains("partition(s) reassigned"), "{out}");
    let parts = c.wait_for(TOPIC, "a full ISR", Duration::from_secs(60), full_isr);
    assert_eq!(on(&parts, 4), 6, "{parts:?}");
    load.finish();
}

/// A tiered partition whose older records are only in the bucket moves to another
/// broker: the new replica starts from the leader's local log start, the bucket keeps
/// the rest, and after the move the new leader serves every offset from 0 (the bucket's
/// part included) and goes on offloading.
#[test]
fn a_tiered_partition_moves_with_its_older_records_left_in_the_bucket() {
    let c = Cluster::start(2, 1, &["--retention-check-interval", "1s"]);
    let b = c.bootstrap();
    let admin = common::kafka::admin(&b);
    let t = rdkafka::admin::NewTopic::new(
        "tiered",
        1,
        rdkafka::admin::TopicReplication::Variable(&[&[1]]),
    )
    .set("remote.storage.enable", "true")
    .set("segment.bytes", "1048576")
    .set("local.retention.ms", "1000");
    let r = futures::executor::block_on(
        admin.create_topics([&t], &rdkafka::admin::AdminOptions::new()),
    )
    .unwrap();
    assert_eq!(r[0], Ok("tiered".to_string()));
    let value = |i: u64| format!("{i:08}").repeat(256).into_bytes();
    let produce = |from: u64, n: u64| {
        let (p, d) = producer(&b, &[("acks", "all"), ("enable.idempotence", "true")]);
        for i in from..from + n {
            send(&p, "tiered", None, &value(i));
        }
        p.flush(Duration::from_secs(60)).unwrap();
        assert_eq!(d.acked.lock().unwrap().len() as u64, n);
    };
    let status = |broker: usize| -> serde_json::Value {
        let v: serde_json::Value =
            serde_json::from_str(&c.brokers[broker].http_get("/v1/tier/status")).unwrap();
        v["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["topic"] == "tiered")
            .cloned()
            .unwrap_or_default()
    };
    produce(0, 3_000);
    wait(
        "older records offloaded and gone from local disk",
        Duration::from_secs(90),
        || status(0)["local_start_offset"].as_i64().unwrap_or(0) > 1_500,
    );

    let plan = c.dir.path().join("tiered.json");
    std::fs::write(
        &plan,
        r#"{"version":1,"partitions":[{"topic":"tiered","partition":0,"replicas":[2]}]}"#,
    )
    .unwrap();
    let out = ok(&common::cli(
        &b,
        &["partition", "reassign", "--plan", plan.to_str().unwrap()],
    ));
    assert!(out.contains("1 partition(s) reassigned"), "{out}");
    c.wait_for("tiered", "broker 2 leading", Duration::from_secs(30), |p| {
        p[0].0 == 2 && p[0].1 == [2]
    });
    // Every offset from 0, the bucket's part through the new leader.
    let got = common::kafka::consume_all(&b, "tiered", 1, 3_000, Duration::from_secs(120));
    assert_eq!(got.len(), 3_000);
    for g in &got {
        assert_eq!(g.value, value(g.offset as u64), "offset {}", g.offset);
    }
    // The new leader goes on offloading what is produced next.
    produce(3_000, 1_500);
    wait("the new leader offloads", Duration::from_secs(90), || {
        status(1)["remote_end_offset"].as_i64().unwrap_or(0) > 3_000
    });
    let got = common::kafka::consume_all(&b, "tiered", 1, 4_500, Duration::from_secs(120));
    assert_eq!(got.len(), 4_500);
    for g in &got {
        assert_eq!(g.value, value(g.offset as u64), "offset {}", g.offset);
    }
}
