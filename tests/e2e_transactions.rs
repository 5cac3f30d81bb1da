//! Transactions against the real `strata serve` with librdkafka's transactional
//! producer: a read_committed consumer sees every record of a committed transaction,
//! none of an aborted one and nothing of an open one until it commits; a second
//! producer with the same transactional.id fences the first and aborts what it left
//! open; the coordinator aborts a transaction past its transaction.timeout.ms; offsets
//! sent to a transaction are committed with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::Broker;
use common::kafka::{client_config, create_topic};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const T: Duration = Duration::from_secs(30);

fn txn_producer(bootstrap: &str, id: &str, extra: &[(&str, &str)]) -> BaseProducer {
    let mut c = client_config(bootstrap, &[("transactional.id", id)]);
    for (k, v) in extra {
        c.set(*k, *v);
    }
    let p: BaseProducer = c.create().expect("producer");
    p.init_transactions(T).expect("init_transactions");
    p
}

fn send_values(p: &BaseProducer, topic: &str, values: impl IntoIterator<Item = String>) {
    for v in values {
        send_one(p, topic, v.as_bytes(), v.as_bytes());
    }
    p.flush(T).expect("flush");
}

/// Sends one record, waiting while the client's queue is full.
fn send_one(p: &BaseProducer, topic: &str, key: &[u8], value: &[u8]) {
    loop {
        match p.send(BaseRecord::<[u8], [u8]>::to(topic).key(key).payload(value)) {
            Ok(()) => return,
            Err((e, _)) => {
                assert!(
                    matches!(
                        e,
                        rdkafka::error::KafkaError::MessageProduction(
                            rdkafka::types::RDKafkaErrorCode::QueueFull
                        )
                    ),
                    "send: {e}"
                );
                p.poll(Duration::from_millis(10));
            }
        }
    }
}

/// Every value a consumer with `isolation` reads from the start of `topic` until
/// nothing new arrives for `quiet`.
fn read_values(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: &str,
    quiet: Duration,
) -> Vec<String> {
    let c: BaseConsumer = client_config(
        bootstrap,
        &[
            ("group.id", "reader"),
            ("enable.auto.commit", "false"),
            ("isolation.level", isolation),
        ],
    )
    .create()
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    // The first record may take a while on a loaded machine (the client connects and
    // looks up offsets first): nothing for 10 s means nothing is there.
    let start = Instant::now();
    let mut last = None::<Instant>;
    loop {
        match last {
            None if start.elapsed() >= quiet.max(Duration::from_secs(10)) => break,
            Some(l) if l.elapsed() >= quiet => break,
            _ => {}
        }
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.expect("consume");
            out.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
            last = Some(Instant::now());
        }
    }
    out
}

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

#[test]
fn read_committed_sees_committed_never_aborted_and_open_only_once_committed() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), &[]);
    create_topic(&b.kafka, "ledger", 3, &[]);
    let p = txn_producer(&b.kafka, "ledger-writer", &[]);

    p.begin_transaction().unwrap();
    send_values(&p, "ledger", (0..90).map(|i| format!("c{i}")));
    p.commit_transaction(T).expect("commit");

    p.begin_transaction().unwrap();
    send_values(&p, "ledger", (0..40).map(|i| format!("a{i}")));
    p.abort_transaction(T).expect("abort");

    p.begin_transaction().unwrap();
    send_values(&p, "ledger", (0..20).map(|i| format!("o{i}")));
    // Open: flushed to the partitions, not committed.
    let committed: Vec<String> = (0..90).map(|i| format!("c{i}")).collect();
    let got = read_values(
        &b.kafka,
        "ledger",
        3,
        "read_committed",
        Duration::from_secs(3),
    );
    assert_eq!(got.len(), 90, "exactly the committed records: {got:?}");
    assert_eq!(set(&got), set(&committed));
    // read_uncommitted sees everything written, aborted and open included.
    let all = read_values(
        &b.kafka,
        "ledger",
        3,
        "read_uncommitted",
        Duration::from_secs(3),
    );
    assert_eq!(all.len(), 150);

    p.commit_transaction(T).expect("commit the open one");
    let got = read_values(
        &b.kafka,
        "ledger",
        3,
        "read_committed",
        Duration::from_secs(3),
    );
    let mut want = committed.clone();
    want.extend((0..20).map(|i| format!("o{i}")));
    assert_eq!(got.len(), 110);
    assert_eq!(set(&got), set(&want));
    assert!(!got.iter().any(|v| v.starts_with('a')), "no aborted record");
}

#[test]
fn kafka_python_commits_aborts_and_is_fenced_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), &[]);
    create_topic(&b.kafka, "py-ledger", 2, &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/transactions.py");
    let out = std::process::Command::new("python3")
        .args([script, &b.kafka, "py-ledger"])
        .output()
        .expect("python3 (run scripts/deps to install kafka-python)");
    assert!(
        out.status.success(),
        "kafka-python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        v["fenced"].as_bool().unwrap(),
        "the first producer was fenced"
    );
    let got = strings("read_committed");
    assert_eq!(got.len(), 35, "{got:?}");
    assert_eq!(set(&got), set(&strings("committed")));
    // Everything written is in the log: 30 + 20 aborted + 10 aborted by the fence + 5.
    assert_eq!(v["read_uncommitted"].as_u64(), Some(65));
    // librdkafka reads the same.
    let got = read_values(
        &b.kafka,
        "py-ledger",
        2,
        "read_committed",
        Duration::from_secs(3),
    );
    assert_eq!(set(&got), set(&strings("committed")));
}

#[test]
fn a_second_producer_fences_the_first_and_aborts_its_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), &[]);
    create_topic(&b.kafka, "orders", 2, &[]);
    let zombie = txn_producer(&b.kafka, "order-writer", &[]);
    zombie.begin_transaction().unwrap();
    send_values(&zombie, "orders", (0..10).map(|i| format!("z{i}")));

    // The same transactional.id again: the zombie's transaction is aborted.
    let p = txn_producer(&b.kafka, "order-writer", &[]);
    let err = zombie
        .commit_transaction(T)
        .expect_err("the zombie is fenced");
    let rdkafka::error::KafkaError::Transaction(e) = &err else {
        panic!("not a transaction error: {err}");
    };
    assert!(e.is_fatal(), "a fenced producer's error is fatal: {err}");

    p.begin_transaction().unwrap();
    send_values(&p, "orders", (0..10).map(|i| format!("n{i}")));
    p.commit_transaction(T).unwrap();
    let got = read_values(
        &b.kafka,
        "orders",
        2,
        "read_committed",
        Duration::from_secs(3),
    );
    assert_eq!(
        set(&got),
        set(&(0..10).map(|i| format!("n{i}")).collect::<Vec<_>>())
    );
}

#[test]
fn the_coordinator_aborts_a_transaction_past_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), &[]);
    create_topic(&b.kafka, "slow", 1, &[]);
    let p = txn_producer(
        &b.kafka,
        "slow-writer",
        &[("transaction.timeout.ms", "2000")],
    );
    p.begin_transaction().unwrap();
    send_values(&p, "slow", (0..5).map(|i| format!("s{i}")));
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        p.commit_transaction(T).is_err(),
        "the transaction was aborted"
    );
    // The records are aborted: the last stable offset moved past them, and
    // read_committed skips them.
    let got = read_values(
        &b.kafka,
        "slow",
        1,
        "read_committed",
        Duration::from_secs(3),
    );
    assert!(got.is_empty(), "{got:?}");
    let all = read_values(
        &b.kafka,
        "slow",
        1,
        "read_uncommitted",
        Duration::from_secs(3),
    );
    assert_eq!(all.len(), 5);
}

#[test]
fn offsets_sent_to_a_transaction_commit_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), &[]);
    create_topic(&b.kafka, "in", 1, &[]);
    create_topic(&b.kafka, "out", 1, &[]);
    let (plain, _) = common::kafka::producer(&b.kafka, &[]);
    for i in 0..30 {
        common::kafka::send(&plain, "in", None, format!("in{i}").as_bytes());
    }
    common::kafka::flush(&plain);

    let consumer: BaseConsumer = client_config(
        &b.kafka,
        &[
            ("group.id", "pipeline"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
        ],
    )
    .create()
    .unwrap();
    consumer.subscribe(&["in"]).unwrap();
    let p = txn_producer(&b.kafka, "pipeline-writer", &[]);
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen < 30 && Instant::now() < deadline {
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap();
        let v = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
        p.begin_transaction().unwrap();
        send_values(&p, "out", [v.replace("in", "out")]);
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset("in", 0, Offset::Offset(m.offset() + 1))
            .unwrap();
        let meta = consumer.group_metadata().unwrap();
        p.send_offsets_to_transaction(&offsets, &meta, T)
            .expect("send_offsets_to_transaction");
        // Every third is aborted: its output and its offset go.
        if seen % 3 == 2 {
            p.abort_transaction(T).unwrap();
            // Read it again from the last committed offset.
            consumer
                .seek("in", 0, Offset::Offset(m.offset()), Duration::from_secs(5))
                .unwrap();
            seen += 1;
            continue;
        }
        p.commit_transaction(T).expect("commit");
        seen += 1;
    }
    // Drain: keep going until every input has a committed output.
    let out = read_values(&b.kafka, "out", 1, "read_committed", Duration::from_secs(3));
    let committed = consumer
        .committed_offsets(
            {
                let mut t = TopicPartitionList::new();
                t.add_partition("in", 0);
                t
            },
            Duration::from_secs(10),
        )
        .unwrap();
    let at = match committed.find_partition("in", 0).unwrap().offset() {
        Offset::Offset(o) => o,
        other => panic!("no committed offset: {other:?}"),
    };
    // The committed offset is exactly past the inputs whose output committed: each
    // committed output's input is below it, and no input below it lacks its output.
    let outs: BTreeSet<String> = set(&out);
    assert_eq!(out.len(), outs.len(), "no output twice");
    for i in 0..at {
        assert!(
            outs.contains(&format!("out{i}")),
            "input {i} is below the committed offset {at} but has no output: {outs:?}"
        );
    }
    assert!(outs.iter().all(|o| o[3..].parse::<i64>().unwrap() < at));
}

const PIPELINE_CHILD_ENV: &str = "STRATA_TXN_PIPELINE_BOOTSTRAP";

/// The pipeline process of the chaos test (this test binary run again with
/// `STRATA_TXN_PIPELINE_BOOTSTRAP` set): consumes `in` read_committed, writes one output
/// per input to `out` and the consumed offsets in the same transaction, and exits on
/// any error (the parent restarts it, as a supervisor would).
#[test]
fn pipeline_child() {
    let Ok(bootstrap) = std::env::var(PIPELINE_CHILD_ENV) else {
        return;
    };
    let consumer: BaseConsumer = client_config(
        &bootstrap,
        &[
            ("group.id", "pipeline"),
            ("group.instance.id", "pipeline-member"),
            ("session.timeout.ms", "6000"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
        ],
    )
    .create()
    .unwrap();
    consumer.subscribe(&["in"]).unwrap();
    let p = txn_producer(
        &bootstrap,
        "pipeline-tx",
        &[
            ("transaction.timeout.ms", "20000"),
            ("request.timeout.ms", "5000"),
        ],
    );
    loop {
        let mut batch = Vec::new();
        let until = Instant::now() + Duration::from_millis(300);
        while batch.len() < 25 && Instant::now() < until {
            match consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => batch.push((
                    m.partition(),
                    m.offset(),
                    m.key().unwrap().to_vec(),
                    m.payload().unwrap().to_vec(),
                )),
                Some(Err(e)) => panic!("consume: {e}"),
                None => {}
            }
        }
        if batch.is_empty() {
            continue;
        }
        p.begin_transaction().unwrap();
        for (_, _, k, v) in &batch {
            let out = [b"out-".as_slice(), v].concat();
            send_one(&p, "out", k, &out);
        }
        let mut next: std::collections::BTreeMap<i32, i64> = std::collections::BTreeMap::new();
        for (part, offset, _, _) in &batch {
            let e = next.entry(*part).or_insert(0);
            *e = (*e).max(offset + 1);
        }
        let mut offsets = TopicPartitionList::new();
        for (part, o) in next {
            offsets
                .add_partition_offset("in", part, Offset::Offset(o))
                .unwrap();
        }
        p.send_offsets_to_transaction(&offsets, &consumer.group_metadata().unwrap(), T)
            .expect("send_offsets_to_transaction");
        p.commit_transaction(T).expect("commit");
        // Paced, so the chaos below meets it mid-way.
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_read_process_write_pipeline_outputs_each_input_once_through_kills() {
    use common::cluster::Cluster;
    const INPUTS: usize = 6_000;
    let mut c = Cluster::start(3, 3, &[]);
    let bootstrap = c.bootstrap();
    for t in ["in", "out"] {
        common::kafka::create_topic_rf(&bootstrap, t, 3, 3, &[("min.insync.replicas", "2")]);
    }
    let full_isr = |parts: &[common::cluster::PartitionView]| {
        parts
            .iter()
            .all(|(l, r, isr)| *l > 0 && isr.len() == r.len())
    };
    c.wait_for("in", "a full ISR", Duration::from_secs(60), full_isr);
    c.wait_for("out", "a full ISR", Duration::from_secs(60), full_isr);
    let (plain, d) = common::kafka::producer(
        &bootstrap,
        &[("acks", "all"), ("enable.idempotence", "true")],
    );
    for i in 0..INPUTS {
        let v = format!("v{i}");
        common::kafka::send(
            &plain,
            "in",
            Some(format!("k{}", i % 97).as_bytes()),
            v.as_bytes(),
        );
    }
    common::kafka::flush(&plain);
    assert!(d.errors.lock().unwrap().is_empty());

    let exe = std::env::current_exe().unwrap();
    let spawn = || {
        std::process::Command::new(&exe)
            .args([
                "pipeline_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PIPELINE_CHILD_ENV, &bootstrap)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let committed_total = || -> i64 {
        let c: BaseConsumer = client_config(&bootstrap, &[("group.id", "pipeline")])
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition("in", p);
        }
        match c.committed_offsets(tpl, Duration::from_secs(10)) {
            Ok(t) => t
                .elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) => o,
                    _ => 0,
                })
                .sum(),
            Err(_) => -1,
        }
    };
    let mut child = spawn();
    let (mut pipeline_kills, mut broker_kills) = (0, 0);
    let mut round = 0;
    let mut last_known = -1i64;
    // Chaos while the pipeline works: alternately kill -9 the pipeline (restarted at
    // once) and a broker (a partition leader or the transaction coordinator; restarted
    // after a moment).
    while round < 8 {
        std::thread::sleep(Duration::from_millis(2500));
        if let Ok(Some(_)) = child.try_wait() {
            child = spawn();
        }
        if round % 2 == 0 {
            let _ = child.kill();
            let _ = child.wait();
            child = spawn();
            pipeline_kills += 1;
        } else {
            let victim = 1 + (round / 2) % 3;
            c.broker(victim).kill9();
            std::thread::sleep(Duration::from_millis(1500));
            c.broker(victim).restart();
            broker_kills += 1;
        }
        let done = committed_total();
        eprintln!("round {round}: committed {done}");
        // -1: not readable while a broker is down.
        last_known = last_known.max(done);
        round += 1;
    }
    assert!(
        (0..INPUTS as i64).contains(&last_known),
        "the faults came while the pipeline worked (it had committed {last_known} of {INPUTS})"
    );
    // Then let it finish: every input's offset committed.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            child = spawn();
        }
        if committed_total() == INPUTS as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pipeline did not finish: {} of {INPUTS} committed",
            committed_total()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(pipeline_kills >= 4 && broker_kills >= 4);

    // read_committed: exactly one output per input.
    let out = read_values(
        &bootstrap,
        "out",
        3,
        "read_committed",
        Duration::from_secs(5),
    );
    let mut counts = std::collections::HashMap::new();
    for v in &out {
        *counts.entry(v.clone()).or_insert(0) += 1;
    }
    let dup: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        dup.is_empty(),
        "outputs duplicated: {:?}",
        &dup[..dup.len().min(10)]
    );
    let missing: Vec<usize> = (0..INPUTS)
        .filter(|i| !counts.contains_key(&format!("out-v{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "inputs without output: {:?}",
        &missing[..missing.len().min(10)]
    );
    assert_eq!(out.len(), INPUTS);
}

#[test]
fn strata_txn_lists_describes_and_aborts_a_hanging_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), &[]);
    create_topic(&b.kafka, "hang", 1, &[]);
    let p = txn_producer(&b.kafka, "hanger", &[("transaction.timeout.ms", "600000")]);
    p.begin_transaction().unwrap();
    send_values(&p, "hang", (0..5).map(|i| format!("h{i}")));
    // Plain records after the open transaction: read_committed waits behind it.
    let (plain, _) = common::kafka::producer(&b.kafka, &[]);
    for i in 0..3 {
        common::kafka::send(&plain, "hang", None, format!("after{i}").as_bytes());
    }
    common::kafka::flush(&plain);
    assert!(
        read_values(
            &b.kafka,
            "hang",
            1,
            "read_committed",
            Duration::from_secs(2)
        )
        .is_empty()
    );

    let run = |args: &[&str]| {
        let out = common::cli(&b.kafka, args);
        assert!(
            out.status.success(),
            "strata {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let list = run(&["txn", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("hanger") && l.contains("Ongoing")),
        "{list}"
    );
    let desc = run(&["txn", "describe", "hanger"]);
    assert!(
        desc.contains("Ongoing") && desc.contains("hang [0]"),
        "{desc}"
    );
    let producers = run(&[
        "txn",
        "describe-producers",
        "--topic",
        "hang",
        "--partition",
        "0",
    ]);
    let line = producers
        .lines()
        .find(|l| l.contains("open transaction from 0"))
        .unwrap_or_else(|| panic!("{producers}"));
    let pid = line.split_whitespace().nth(1).unwrap();

    // The hanging transaction aborted by hand: the plain records become readable, the
    // transaction's never.
    run(&[
        "txn",
        "abort",
        "--topic",
        "hang",
        "--partition",
        "0",
        "--producer-id",
        pid,
    ]);
    let got = read_values(
        &b.kafka,
        "hang",
        1,
        "read_committed",
        Duration::from_secs(2),
    );
    assert_eq!(got, vec!["after0", "after1", "after2"]);
    let out = common::cli(&b.kafka, &["txn", "describe", "nobody"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TransactionalIdNotFound"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
