//! The `strata group list|describe|reset-offsets` commands against a real `strata serve`
//! and real rdkafka consumer groups.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Output;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::kafka::{Deliveries, client_config, create_topic, flush, producer};
use common::{Broker, cli};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;
const PER_PARTITION: i64 = 30;
const GROUP: &str = "billing";

fn ok(out: Output) -> String {
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    stdout
}

/// The command failed (not a panic: exit code 1 or clap's 2), and its error names every needle.
fn fails_with(out: Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "expected a clean failure, got {:?}; stderr: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in: {stderr}");
    }
    stderr
}

/// One row of `group describe`.
#[derive(Debug, Clone)]
struct Row {
    committed: Option<i64>,
    log_start: i64,
    log_end: i64,
    lag: Option<i64>,
    lag_age_h: Option<f64>,
    headroom: String,
}

fn num(s: &str) -> Option<i64> {
    (s != "-").then(|| s.parse().unwrap())
}

fn parse_hours(s: &str) -> Option<f64> {
    s.strip_suffix('h').map(|h| h.parse().unwrap())
}

/// Partition -> row of the describe table for TOPIC.
fn rows(describe: &str) -> BTreeMap<i32, Row> {
    rows_of(describe, TOPIC)
}

/// Partition -> row of the describe table for `topic`.
fn rows_of(describe: &str, topic: &str) -> BTreeMap<i32, Row> {
    describe
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 9 || f[0] != topic || f[1].parse::<i32>().is_err() {
                return None;
            }
            Some((
                f[1].parse().unwrap(),
                Row {
                    committed: num(f[2]),
                    log_start: f[3].parse().unwrap(),
                    log_end: f[4].parse().unwrap(),
                    lag: num(f[5]),
                    lag_age_h: parse_hours(f[6]),
                    headroom: f[7].to_string(),
                },
            ))
        })
        .collect()
}

fn describe(k: &str) -> (String, BTreeMap<i32, Row>) {
    let out = ok(cli(k, &["group", "describe", GROUP, "--topic", TOPIC]));
    let r = rows(&out);
    assert_eq!(r.len(), PARTITIONS as usize, "{out}");
    (out, r)
}

fn committed(r: &BTreeMap<i32, Row>) -> Vec<Option<i64>> {
    r.values().map(|r| r.committed).collect()
}

fn group_consumer(k: &str) -> BaseConsumer {
    let c: BaseConsumer = client_config(
        k,
        &[
            ("group.id", GROUP),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ],
    )
    .create()
    .expect("consumer");
    c.subscribe(&[TOPIC]).expect("subscribe");
    c
}

/// Polls until `done` holds on the (partition, offset) pairs read so far.
fn read_until(
    c: &BaseConsumer,
    got: &mut Vec<(i32, i64)>,
    what: &str,
    done: impl Fn(&[(i32, i64)]) -> bool,
) {
    let t0 = Instant::now();
    while !done(got) {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out: {what}");
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.expect("consume");
            got.push((m.partition(), m.offset()));
        }
    }
}

/// Runs a reset with --execute, retrying while the broker still counts a member that is
/// leaving (at most a session timeout).
fn reset_execute(k: &str, args: &[&str]) -> String {
    let mut full = vec!["group", "reset-offsets", GROUP, "--topic", TOPIC];
    full.extend_from_slice(args);
    full.push("--execute");
    let t0 = Instant::now();
    loop {
        let out = cli(k, &full);
        if out.status.success() {
            return String::from_utf8(out.stdout).unwrap();
        }
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            stderr.contains("active member") && t0.elapsed() < Duration::from_secs(20),
            "{full:?}: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Record i of partition p carries timestamp base + i s + p * 100 ms.
fn ts(base: i64, p: i32, i: i64) -> i64 {
    base + i * 1000 + i64::from(p) * 100
}

fn produce(k: &str, base: i64) {
    let (p, d): (BaseProducer<Deliveries>, Deliveries) =
        producer(k, &[("acks", "all"), ("linger.ms", "1")]);
    for part in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let v = format!("p{part}-{i}");
            let rec = BaseRecord::<(), [u8]>::to(TOPIC)
                .partition(part)
                .payload(v.as_bytes())
                .timestamp(ts(base, part, i));
            p.send(rec).map_err(|(e, _)| e).expect("send");
        }
    }
    flush(&p);
    assert!(d.errors.lock().unwrap().is_empty());
    assert_eq!(
        d.acked.lock().unwrap().len(),
        (PER_PARTITION * i64::from(PARTITIONS)) as usize
    );
}

#[test]
fn describe_shows_lag_and_reset_offsets_moves_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let k = broker.kafka.as_str();
    create_topic(k, TOPIC, PARTITIONS, &[]);
    // Records an hour old, a second apart.
    let base = now_ms() - 3_600_000;
    produce(k, base);

    // The group reads part of the topic (some records of every partition) and commits.
    let c = group_consumer(k);
    let mut got = Vec::new();
    read_until(&c, &mut got, "some records of every partition", |g| {
        g.len() >= 40 && (0..PARTITIONS).all(|p| g.iter().any(|x| x.0 == p))
    });
    c.commit_consumer_state(CommitMode::Sync).expect("commit");
    drop(c);
    let mut expected = BTreeMap::new();
    for (p, o) in &got {
        let e = expected.entry(*p).or_insert(0);
        *e = (*e).max(o + 1);
    }

    // describe: committed offsets, log end, lag, lag age, headroom.
    let (out, r) = describe(k);
    let retention_h = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("retention of {TOPIC}: ")))
        .unwrap_or_else(|| panic!("no retention line: {out}"))
        .to_string();
    for (p, row) in &r {
        let want = expected[p];
        assert_eq!(row.committed, Some(want), "partition {p}: {out}");
        assert_eq!(row.log_start, 0, "{out}");
        assert_eq!(row.log_end, PER_PARTITION, "{out}");
        assert_eq!(row.lag, Some(PER_PARTITION - want), "partition {p}: {out}");
        if want < PER_PARTITION {
            // The first unconsumed record is about an hour old.
            let age = row.lag_age_h.unwrap_or_else(|| panic!("no lag age: {out}"));
            let expect_h = (now_ms() - ts(base, *p, want)) as f64 / 3_600_000.0;
            assert!(
                (age - expect_h).abs() < 0.05,
                "age {age} vs {expect_h}: {out}"
            );
            // HEADROOM = retention - age (or never).
            if retention_h.starts_with("never") {
                assert_eq!(row.headroom, "never", "{out}");
            } else {
                let ret = parse_hours(retention_h.split_whitespace().next().unwrap()).unwrap();
                let head = parse_hours(&row.headroom).unwrap();
                assert!((ret - age - head).abs() < 0.05, "{out}");
            }
        }
    }
    assert!(!out.contains("OUT OF RETENTION"), "{out}");

    // Without --topic and with no members: every topic the group committed offsets for
    // (OffsetFetch for all topics), the same rows.
    let out = ok(cli(k, &["group", "describe", GROUP]));
    assert!(out.contains("no active members"), "{out}");
    let all = rows(&out);
    assert_eq!(committed(&all), committed(&r), "{out}");
    assert_eq!(
        all.values().map(|r| r.lag).collect::<Vec<_>>(),
        r.values().map(|r| r.lag).collect::<Vec<_>>(),
        "{out}"
    );

    // list shows the group (once the broker answers ListGroups).
    let out = cli(k, &["group", "list"]);
    if out.status.success() {
        let list = String::from_utf8(out.stdout).unwrap();
        assert!(
            list.lines()
                .any(|l| l.split_whitespace().next() == Some(GROUP)),
            "{list}"
        );
    } else {
        // Only acceptable while the broker lacks ListGroups.
        fails_with(out, &["does not support listing groups"]);
    }

    // A dry run changes nothing.
    let before = committed(&r);
    let plan = ok(cli(
        k,
        &[
            "group",
            "reset-offsets",
            GROUP,
            "--topic",
            TOPIC,
            "--to-earliest",
        ],
    ));
    assert!(plan.contains("dry run: add --execute to apply"), "{plan}");
    let plan_rows: Vec<Vec<&str>> = plan
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 4 && f[0] == TOPIC)
        .collect();
    assert_eq!(plan_rows.len(), PARTITIONS as usize, "{plan}");
    for f in &plan_rows {
        let p: i32 = f[1].parse().unwrap();
        assert_eq!(f[2], expected[&p].to_string(), "{plan}");
        assert_eq!(f[3], "0", "{plan}");
    }
    assert_eq!(committed(&describe(k).1), before);

    // --execute moves every partition to the log start.
    let out = reset_execute(k, &["--to-earliest"]);
    assert!(out.contains("reset the committed offsets"), "{out}");
    let (out, r) = describe(k);
    for row in r.values() {
        assert_eq!(row.committed, Some(row.log_start), "{out}");
        assert_eq!(row.lag, Some(PER_PARTITION), "{out}");
    }

    // A member of the group now reads everything from the beginning.
    let c = group_consumer(k);
    let mut got = Vec::new();
    let total = (PER_PARTITION * i64::from(PARTITIONS)) as usize;
    read_until(&c, &mut got, "all records again", |g| g.len() >= total);
    for p in 0..PARTITIONS {
        let offs: Vec<i64> = got.iter().filter(|x| x.0 == p).map(|x| x.1).collect();
        assert_eq!(
            offs,
            (0..PER_PARTITION).collect::<Vec<_>>(),
            "partition {p}"
        );
    }

    // While it is a member, a reset is refused with what to do.
    let deadline = Instant::now() + Duration::from_secs(20);
    let stderr = loop {
        let _ = c.poll(Duration::from_millis(100));
        let out = cli(
            k,
            &[
                "group",
                "reset-offsets",
                GROUP,
                "--topic",
                TOPIC,
                "--to-latest",
                "--execute",
            ],
        );
        assert!(
            !out.status.success(),
            "reset with an active member succeeded"
        );
        let stderr = String::from_utf8(out.stderr).unwrap();
        if stderr.contains("active member") || Instant::now() > deadline {
            break stderr;
        }
    };
    assert!(stderr.contains("stop them first"), "{stderr}");
    // With the member present, describe shows it and needs no --topic.
    let out = ok(cli(k, &["group", "describe", GROUP]));
    if !out.contains("members and state unknown") {
        assert!(out.contains("MEMBER-ID"), "{out}");
        assert!(out.contains(&format!("{TOPIC}:")), "assignment: {out}");
        assert_eq!(rows(&out).len(), PARTITIONS as usize, "{out}");
    }
    drop(c);

    // --to-timestamp: the first record at or after the time, per partition.
    let ms = base + 10_150;
    let want: Vec<Option<i64>> = (0..PARTITIONS)
        .map(|p| (0..PER_PARTITION).find(|&i| ts(base, p, i) >= ms))
        .collect();
    assert_eq!(want, vec![Some(11), Some(11), Some(10)]);
    // --to-datetime with the same instant plans the same offsets.
    let rfc =
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string();
    let plan = ok(cli(
        k,
        &[
            "group",
            "reset-offsets",
            GROUP,
            "--topic",
            TOPIC,
            "--to-datetime",
            &rfc,
        ],
    ));
    let planned: Vec<Option<i64>> = plan
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 4 && f[0] == TOPIC)
        .map(|f| num(f[3]))
        .collect();
    assert_eq!(planned, want, "{plan}");
    reset_execute(k, &["--to-timestamp", &ms.to_string()]);
    let (out, r) = describe(k);
    assert_eq!(committed(&r), want, "{out}");
    for (p, row) in &r {
        let c = want[*p as usize].unwrap();
        assert_eq!(row.lag, Some(PER_PARTITION - c), "{out}");
    }

    // --to-offset beyond the end is clamped to the log end; --shift-by moves back.
    reset_execute(k, &["--to-offset", "1000"]);
    assert_eq!(
        committed(&describe(k).1),
        vec![Some(PER_PARTITION); PARTITIONS as usize]
    );
    reset_execute(k, &["--shift-by", "-5"]);
    assert_eq!(
        committed(&describe(k).1),
        vec![Some(PER_PARTITION - 5); PARTITIONS as usize]
    );
}

#[test]
fn bad_input_fails_cleanly_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let k = broker.kafka.as_str();
    create_topic(k, TOPIC, PARTITIONS, &[]);
    let reset = |extra: &[&str]| {
        let mut a = vec!["group", "reset-offsets", GROUP];
        a.extend_from_slice(extra);
        cli(k, &a)
    };

    // Two --to-* flags.
    fails_with(
        reset(&["--topic", TOPIC, "--to-earliest", "--to-latest"]),
        &["--to-earliest", "--to-latest"],
    );
    fails_with(
        reset(&["--topic", TOPIC, "--to-offset", "3", "--to-timestamp", "5"]),
        &["--to-offset", "--to-timestamp"],
    );
    // No --to-* flag, no --topic.
    fails_with(reset(&["--topic", TOPIC]), &["--to-earliest"]);
    fails_with(reset(&["--to-earliest"]), &["--topic"]);
    // Unknown topic, partition out of range, bad time.
    fails_with(
        reset(&["--topic", "nope", "--to-earliest"]),
        &["--topic nope", "does not exist"],
    );
    fails_with(
        reset(&["--topic", &format!("{TOPIC}:7"), "--to-earliest"]),
        &["--topic orders:7", "3 partitions"],
    );
    fails_with(
        reset(&["--topic", TOPIC, "--to-datetime", "yesterday"]),
        &["--to-datetime", "RFC 3339"],
    );
    // --shift-by needs a committed offset.
    fails_with(
        reset(&["--topic", TOPIC, "--shift-by", "-1"]),
        &["--shift-by", "no committed offset"],
    );

    // A group that does not exist.
    fails_with(
        cli(k, &["group", "describe", "ghost", "--topic", TOPIC]),
        &["group 'ghost' does not exist"],
    );
    fails_with(
        cli(k, &["group", "describe", "ghost"]),
        &["group 'ghost' does not exist", "no committed offsets"],
    );
    fails_with(
        cli(k, &["group", "describe", "ghost", "--topic", "nope"]),
        &["--topic nope", "does not exist"],
    );

    // No broker: an error that says what to check, quickly.
    let t0 = Instant::now();
    let out = std::process::Command::new(common::strata_bin())
        .args(["group", "describe", GROUP, "--topic", TOPIC])
        .args(["--bootstrap", "127.0.0.1:1", "--timeout", "2s"])
        .output()
        .unwrap();
    fails_with(out, &["cannot reach a broker", "--bootstrap"]);
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn describe_flags_a_group_whose_committed_offset_fell_out_of_retention() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        dir.path(),
        &[
            "--retention-check-interval",
            "200ms",
            "--min-segment-bytes",
            "1",
        ],
    );
    let k = broker.kafka.as_str();
    let topic = "aging";
    create_topic(
        k,
        topic,
        1,
        &[("retention.ms", "3600000"), ("segment.bytes", "1024")],
    );
    // Two-hour-old records (past the one-hour retention), one batch each so segments roll,
    // then fresh ones that stay.
    let (p, d) = producer(k, &[("acks", "all"), ("linger.ms", "0")]);
    let old = now_ms() - 7_200_000;
    let value = vec![b'x'; 300];
    for i in 0..20i64 {
        let ts = if i < 15 { old + i } else { now_ms() };
        let rec = BaseRecord::<(), [u8]>::to(topic)
            .partition(0)
            .payload(&value[..])
            .timestamp(ts);
        p.send(rec).map_err(|(e, _)| e).expect("send");
        flush(&p);
    }
    assert!(d.errors.lock().unwrap().is_empty());

    // The group committed offset 2 (a standalone commit), then stopped.
    let g: BaseConsumer = client_config(k, &[("group.id", "lagger")])
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(2))
        .unwrap();
    // A broker that just started may still be loading the offsets partition.
    let t0 = Instant::now();
    while let Err(e) = g.commit(&tpl, CommitMode::Sync) {
        assert!(t0.elapsed() < Duration::from_secs(30), "commit: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(g);

    // Retention deletes the old segments; describe then shouts.
    let t0 = Instant::now();
    let out = loop {
        let out = ok(cli(k, &["group", "describe", "lagger", "--topic", topic]));
        if out.contains("OUT-OF-RETENTION") {
            break out;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "retention never passed offset 2: {out}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(out.contains("WARNING: OUT OF RETENTION: aging-0"), "{out}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with(topic))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[2], "2", "{out}");
    assert!(row[3].parse::<i64>().unwrap() > 2, "log start: {out}");
    assert_eq!(row[7], "OUT-OF-RETENTION", "{out}");
}

/// A group whose consumers are gone keeps its committed offsets: `group describe` without
/// --topic finds every topic it committed offsets for (one OffsetFetch for all topics, as
/// Kafka's kafka-consumer-groups.sh), with each partition's committed offset and lag, and
/// leaves out the topics it never committed for.
#[test]
fn describe_without_topic_lists_every_committed_offset_of_a_group_without_members() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let k = broker.kafka.as_str();
    create_topic(k, TOPIC, PARTITIONS, &[]);
    create_topic(k, "refunds", 2, &[]);
    create_topic(k, "unrelated", 1, &[]);
    produce(k, now_ms() - 60_000);
    let (p, d) = producer(k, &[("acks", "all"), ("linger.ms", "1")]);
    for (topic, partitions, n) in [("refunds", 2, 10), ("unrelated", 1, 5)] {
        for part in 0..partitions {
            for _ in 0..n {
                let rec = BaseRecord::<(), [u8]>::to(topic)
                    .partition(part)
                    .payload(&b"r"[..]);
                p.send(rec).map_err(|(e, _)| e).expect("send");
            }
        }
    }
    flush(&p);
    assert!(d.errors.lock().unwrap().is_empty());

    // Standalone commits (the group never had a member), then nobody.
    let g: BaseConsumer = client_config(k, &[("group.id", "audit")]).create().unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for (topic, part, offset) in [(TOPIC, 0, 7), (TOPIC, 2, PER_PARTITION), ("refunds", 1, 4)] {
        tpl.add_partition_offset(topic, part, rdkafka::Offset::Offset(offset))
            .unwrap();
    }
    // A broker that just started may still be loading the offsets partition.
    let t0 = Instant::now();
    while let Err(e) = g.commit(&tpl, CommitMode::Sync) {
        assert!(t0.elapsed() < Duration::from_secs(30), "commit: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(g);

    let out = ok(cli(k, &["group", "describe", "audit"]));
    assert!(out.contains("no active members"), "{out}");
    let orders = rows_of(&out, TOPIC);
    assert_eq!(
        committed(&orders),
        vec![Some(7), None, Some(PER_PARTITION)],
        "{out}"
    );
    assert_eq!(
        orders.values().map(|r| r.lag).collect::<Vec<_>>(),
        vec![Some(PER_PARTITION - 7), None, Some(0)],
        "{out}"
    );
    assert!(orders.values().all(|r| r.log_end == PER_PARTITION), "{out}");
    let refunds = rows_of(&out, "refunds");
    assert_eq!(committed(&refunds), vec![None, Some(4)], "{out}");
    assert_eq!(
        refunds
            .values()
            .map(|r| (r.log_end, r.lag))
            .collect::<Vec<_>>(),
        vec![(10, None), (10, Some(6))],
        "{out}"
    );
    assert!(rows_of(&out, "unrelated").is_empty(), "{out}");
    assert!(out.contains("retention of refunds: "), "{out}");

    // --topic still narrows it down.
    let out = ok(cli(
        k,
        &["group", "describe", "audit", "--topic", "refunds"],
    ));
    assert!(rows_of(&out, TOPIC).is_empty(), "{out}");
    assert_eq!(committed(&rows_of(&out, "refunds")), vec![None, Some(4)]);
}
