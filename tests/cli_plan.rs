//! `strata plan` as an operator runs it: the exact command line gives the seed's
//! figures as JSON, the edge cases are said plainly, a TOML file gives the same inputs,
//! and a bad input names its flag.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use serde_json::Value;

const SEED: &[&str] = &[
    "plan",
    "--events-per-sec",
    "1000000",
    "--event-bytes",
    "1000",
    "--replication-factor",
    "3",
    "--retention",
    "7d",
    "--local-retention",
    "1d",
    "--partitions",
    "200",
    "--consumer-groups",
    "4",
    "--consumers",
    "200",
    "--consumer-rate",
    "30000",
    "--lag",
    "24h",
    "--broker-write-budget",
    "150MB/s",
];

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::strata_bin())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (ok, out, err) = run(&all);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// Within `rel` of `want` (the seed rounds: "~1.8 PB" is 1.8144 PB).
fn about(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want
}

/// The seed's figures: 1 GB/s in, 3 GB/s replicated, ~20 brokers, 86.4 TB a day raw,
/// ~259 TB replicated (259.2), ~1.8 PB for 7 days (1.8144), a day's lag drained in ~4.8 h
/// (17,280 s exactly), 200 readers at most.
#[test]
fn the_seeds_command_gives_the_seeds_figures() {
    let v = json(SEED);
    assert_eq!(num(&v, "ingress_bytes_per_sec"), 1e9);
    assert_eq!(num(&v, "replicated_bytes_per_sec"), 3e9);
    assert_eq!(num(&v, "brokers_for_writes"), 20.0);
    assert_eq!(num(&v, "raw_bytes_per_day"), 86.4e12);
    assert!(about(num(&v, "replicated_bytes_per_day"), 259e12, 0.001));
    assert!(about(num(&v, "retained_bytes"), 1.8e15, 0.01));
    assert!(about(num(&v, "catch_up_seconds"), 4.8 * 3600.0, 1e-9));
    assert_eq!(num(&v, "partition_parallelism_cap"), 200.0);
    // Tiering: one day on local disk per broker instead of seven, one copy in the bucket.
    let local = num(&v, "local_bytes_per_broker");
    assert!(about(local, 259.2e12 / 20.0, 1e-9), "{local}");
    assert!(about(
        num(&v, "local_bytes_per_broker_without_tiering"),
        7.0 * local,
        1e-9
    ));
    assert!(about(num(&v, "bucket_bytes"), 604.8e12, 1e-9));
    // The manifest is measured from strata-tier's encoding: some bytes per segment.
    let manifest = num(&v, "manifest_bytes_per_partition");
    let segments = num(&v, "segments_per_partition");
    assert!(
        manifest > segments * 16.0 && manifest < segments * 1024.0,
        "{manifest}"
    );

    // The text form says the same.
    let (ok, out, err) = run(SEED);
    assert!(ok, "{err}");
    for want in [
        "1.0 GB/s", "3.0 GB/s", "86.4 TB", "259.2 TB", "1.8 PB", "4.8 h",
    ] {
        assert!(out.contains(want), "{want} not in:\n{out}");
    }
}

#[test]
fn lag_beyond_retention_and_too_many_consumers_are_said_plainly() {
    let mut args = SEED.to_vec();
    let lag = args.iter().position(|a| *a == "--lag").unwrap();
    args[lag + 1] = "8d";
    let v = json(&args);
    let status = v["catch_up"]["status"].as_str().unwrap();
    assert!(status.starts_with("data already lost"), "{status}");
    let (_, out, _) = run(&args);
    assert!(out.contains("data already lost"), "{out}");

    let mut args = SEED.to_vec();
    let consumers = args.iter().position(|a| *a == "--consumers").unwrap();
    args[consumers + 1] = "300";
    let v = json(&args);
    assert_eq!(v["catch_up"]["capped_by_partitions"], true);
    assert_eq!(v["catch_up"]["consumers_effective"], 200);
    let (_, out, _) = run(&args);
    assert!(out.contains("capped at 200"), "{out}");
    // The same drain as 200 consumers: the extra 100 have no partition.
    assert!(about(num(&v, "catch_up_seconds"), 17_280.0, 1e-9));

    let mut args = SEED.to_vec();
    args[consumers + 1] = "20";
    let v = json(&args);
    assert!(v["catch_up_seconds"].is_null(), "{v}");
    assert!(
        v["catch_up"]["status"]
            .as_str()
            .unwrap()
            .starts_with("never drains")
    );
}

#[test]
fn a_toml_file_gives_the_same_plan_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plan.toml");
    std::fs::write(
        &file,
        "events-per-sec = 1000000\nevent-bytes = 1000\nreplication-factor = 3\n\
         retention = \"7d\"\nlocal-retention = \"1d\"\npartitions = 200\n\
         consumer-groups = 4\nconsumers = 200\nconsumer-rate = 30000\nlag = \"24h\"\n\
         broker-write-budget = \"150MB/s\"\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let from_file = json(&["plan", "--config", path]);
    let from_flags = json(SEED);
    assert_eq!(from_file, from_flags);
    let v = json(&["plan", "--config", path, "--replication-factor", "2"]);
    assert_eq!(num(&v, "replicated_bytes_per_sec"), 2e9);

    std::fs::write(&file, "events-per-second = 5\n").unwrap();
    let (ok, _, err) = run(&["plan", "--config", path]);
    assert!(!ok);
    assert!(err.contains("unknown key 'events-per-second'"), "{err}");
}

#[test]
fn bad_inputs_name_their_flag() {
    for (args, flag) in [
        (vec!["plan", "--partitions", "0"], "--partitions"),
        (vec!["plan", "--retention", "forever"], "--retention"),
        (
            vec!["plan", "--broker-write-budget", "lots"],
            "--broker-write-budget",
        ),
        (vec!["plan", "--events-per-sec=-5"], "--events-per-sec"),
        // The model would step through billions of one-byte chunks.
        (
            vec!["plan", "--simulate", "--chunk-bytes", "1"],
            "--chunk-bytes",
        ),
        (
            vec!["plan", "--simulate", "--read-ahead", "100000"],
            "--read-ahead",
        ),
    ] {
        let (ok, _, err) = run(&args);
        assert!(!ok, "{args:?} was accepted");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// The simulation runs from the same command and reports a drain; with the tier fast
/// enough it agrees with the arithmetic.
#[test]
fn the_simulation_runs_from_the_command_line() {
    let v = json(&[
        "plan",
        "--events-per-sec",
        "10000",
        "--partitions",
        "8",
        "--consumers",
        "4",
        "--consumer-rate",
        "10000",
        "--lag",
        "10m",
        "--local-retention",
        "1m",
        "--chunk-bytes",
        "1MB",
        "--simulate",
    ]);
    let sim = &v["simulation"]["result"];
    let drained = sim["drain_secs"].as_f64().unwrap();
    let planned = num(&v, "catch_up_seconds");
    assert!(about(drained, planned, 0.05), "{drained} vs {planned}");
    assert!(sim["gets"].as_u64().unwrap() > 0, "{sim}");
}

/// `--from-cluster` against a real broker: a group that committed and stopped, on a
/// topic kept an hour, loses data in a little under an hour at today's trend and in a
/// little under half an hour with retention halved; the produce rate is measured while
/// a producer writes; a retention far below the group's lag loses data at once.
#[test]
fn from_a_live_cluster_it_tells_when_a_stopped_group_loses_data() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{BaseRecord, Producer};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let b = common::Broker::start(dir.path(), &[]);
    common::kafka::create_topic(&b.kafka, "events", 2, &[("retention.ms", "3600000")]);
    let (p, _) = common::kafka::producer(&b.kafka, &[("acks", "all")]);
    let payload = vec![b'x'; 100];
    for i in 0..200 {
        p.send(
            BaseRecord::<(), _>::to("events")
                .partition(i % 2)
                .payload(&payload),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
    // The group commits offset 10 of both partitions and never moves again.
    let c: BaseConsumer = common::kafka::client_config(&b.kafka, &[("group.id", "slow")])
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for part in 0..2 {
        tpl.add_partition_offset("events", part, rdkafka::Offset::Offset(10))
            .unwrap();
    }
    c.commit(&tpl, CommitMode::Sync).unwrap();
    drop(c);
    // The broker exports lag every 5 s.
    let http = reqwest::blocking::Client::new();
    let t0 = Instant::now();
    while !http
        .get(format!("http://{}/metrics", b.http))
        .send()
        .and_then(|r| r.text())
        .is_ok_and(|t| t.contains("strata_group_retention_headroom_seconds{group=\"slow\""))
    {
        assert!(t0.elapsed() < Duration::from_secs(30), "no lag exported");
        std::thread::sleep(Duration::from_millis(250));
    }

    // A producer keeps writing while the plan samples.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let kafka = b.kafka.clone();
        std::thread::spawn(move || {
            let (p, _) = common::kafka::producer(&kafka, &[("acks", "all")]);
            let payload = vec![b'y'; 100];
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..20 {
                    let _ = p.send(BaseRecord::<(), _>::to("events").payload(&payload));
                }
                p.poll(Duration::from_millis(0));
                std::thread::sleep(Duration::from_millis(20));
            }
            p.flush(Duration::from_secs(30)).unwrap();
        })
    };
    let live = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--from-cluster",
            "--bootstrap",
            b.kafka.as_str(),
            "--http",
            b.http.as_str(),
            "--sample",
            "2s",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let args = live(&[]);
    let v = json(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let topic = v["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == "events")
        .unwrap_or_else(|| panic!("events in {v}"))
        .clone();
    assert_eq!(topic["retention_secs"], 3600.0, "{topic}");
    let rate = num(&topic, "records_per_sec");
    assert!(rate > 10.0, "{topic}");
    let per_record = num(&topic, "bytes_per_sec") / rate;
    assert!(
        (100.0..400.0).contains(&per_record),
        "{per_record} bytes a record"
    );
    let g = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == "slow")
        .unwrap_or_else(|| panic!("slow in {v}"))
        .clone();
    let loses = num(&g, "loses_data_in_secs");
    assert!((3000.0..3600.0).contains(&loses), "{g}");
    let halved = num(&g, "loses_data_in_secs_scaled");
    assert!((1200.0..1800.0).contains(&halved), "{g}");
    assert!(num(&v["plan"], "ingress_bytes_per_sec") > 0.0, "{v}");

    // One group asked for by name; a group without offsets is named in the error.
    let args = live(&["--group", "slow", "--json"]);
    let (ok, out, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{err}");
    let only: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(only["groups"].as_array().unwrap().len(), 1, "{only}");
    let args = live(&["--group", "nobody"]);
    let (ok, _, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok);
    assert!(
        err.contains("group 'nobody' has no committed offsets"),
        "{err}"
    );

    let args = live(&["--retention-factor", "0.001"]);
    let (ok, out, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{err}");
    assert!(out.contains("group slow is"), "{out}");
    assert!(
        out.contains("with retention x0.001 it would lose data at once"),
        "{out}"
    );
    assert!(out.contains("plan for today's workload"), "{out}");
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}
