//! The `strata topic|produce|consume` client commands against a real `strata serve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Broker, cli, strata_bin};

/// Runs `strata ARGS` against `kafka` with `input` on stdin; kills it and fails the test if it
/// has not finished after `limit` (a hang guard, not a performance assertion).
fn run(kafka: &str, args: &[&str], input: &str, limit: Duration) -> Output {
    let mut child = Command::new(strata_bin())
        .args(args)
        .env("STRATA_BOOTSTRAP", kafka)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn strata");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "strata {args:?} still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    writer.join().unwrap();
    child.wait_with_output().unwrap()
}

const LIMIT: Duration = Duration::from_secs(60);

fn ok(out: Output) -> (String, String) {
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The command failed, and its error names `needle`.
fn fails_with(out: Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        !out.status.success(),
        "expected a failure; stderr: {stderr}"
    );
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in: {stderr}");
    }
    stderr
}

fn overrides(describe: &str) -> BTreeMap<String, String> {
    describe
        .lines()
        .filter_map(|l| l.trim().strip_prefix("* "))
        .map(|l| {
            let (k, v) = l.split_once(" = ").unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// A consumed line `partition \t offset \t key \t value`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Rec {
    partition: i32,
    offset: i64,
    key: String,
    value: String,
}

fn parse_full(stdout: &str) -> Vec<Rec> {
    stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4, "{l:?}");
            Rec {
                partition: f[0].parse().unwrap(),
                offset: f[1].parse().unwrap(),
                key: f[2].to_string(),
                value: f[3].to_string(),
            }
        })
        .collect()
}

#[test]
fn topics_produce_and_consume_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    // Without auto-creation (the production setting), so a produce to a topic that does
    // not exist gets the CLI's error instead of creating it.
    let broker = Broker::start(dir.path(), &["--auto-create-topics", "false"]);
    let k = broker.kafka.as_str();

    // create, list, describe
    let (out, _) = ok(cli(
        k,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "segment.bytes=1048576",
        ],
    ));
    assert!(
        out.contains("created topic 'orders' with 3 partitions"),
        "{out}"
    );
    let (out, _) = ok(cli(k, &["topic", "list"]));
    assert!(out.lines().any(|l| l == "orders"), "{out}");
    let (desc, _) = ok(cli(k, &["topic", "describe", "orders"]));
    assert!(desc.contains("partitions 3"), "{desc}");
    let rows: Vec<&str> = desc
        .lines()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .collect();
    assert_eq!(rows.len(), 3, "{desc}");
    for (i, row) in rows.iter().enumerate() {
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(f[0], i.to_string(), "{row}");
        assert_eq!(&f[1..4], &["1", "1", "1"], "leader, replicas, isr: {row}");
    }
    assert_eq!(
        overrides(&desc),
        BTreeMap::from([("segment.bytes".into(), "1048576".into())]),
        "{desc}"
    );
    assert!(
        desc.lines()
            .any(|l| l.trim() == "retention.ms = 604800000  (default)"),
        "{desc}"
    );

    // alter: a new override keeps the earlier one; --delete removes only its key
    let (out, _) = ok(cli(
        k,
        &["topic", "alter", "orders", "--set", "retention.ms=1000"],
    ));
    assert!(out.contains("set retention.ms=1000"), "{out}");
    let (desc, _) = ok(cli(k, &["topic", "describe", "orders"]));
    assert_eq!(
        overrides(&desc),
        BTreeMap::from([
            ("retention.ms".into(), "1000".into()),
            ("segment.bytes".into(), "1048576".into()),
        ]),
        "{desc}"
    );
    // (Back to the default retention before writing data, so nothing can age out.)
    ok(cli(
        k,
        &["topic", "alter", "orders", "--delete", "retention.ms"],
    ));
    let (desc, _) = ok(cli(k, &["topic", "describe", "orders"]));
    assert_eq!(
        overrides(&desc),
        BTreeMap::from([("segment.bytes".into(), "1048576".into())]),
        "{desc}"
    );

    // produce 100 keyed lines: 10 keys, 10 values each, so each key has an order to keep
    let lines: Vec<(String, String)> = (0..100)
        .map(|i| (format!("k{}", i % 10), format!("v{i}")))
        .collect();
    let input: String = lines.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let (_, err) = ok(run(
        k,
        &["produce", "--topic", "orders", "--key-separator", ":"],
        &input,
        LIMIT,
    ));
    assert!(err.contains("delivered 100 of 100 records"), "{err}");

    // consume everything back
    let (out, _) = ok(run(
        k,
        &[
            "consume",
            "--topic",
            "orders",
            "--from",
            "earliest",
            "--exit-at-end",
            "--print-key",
        ],
        "",
        LIMIT,
    ));
    let got: Vec<(String, String)> = out
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    assert_eq!(got.len(), 100, "{out}");
    assert_eq!(
        got.iter().cloned().collect::<BTreeSet<_>>(),
        lines.iter().cloned().collect::<BTreeSet<_>>()
    );
    // Each key's values come back in the order they were written.
    let mut per_key: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (k, v) in &got {
        per_key.entry(k).or_default().push(v[1..].parse().unwrap());
    }
    for (k, vs) in &per_key {
        assert!(vs.windows(2).all(|w| w[0] < w[1]), "{k}: {vs:?}");
    }

    // the same with partitions and offsets: one partition per key, dense offsets
    let full_args = [
        "consume",
        "--topic",
        "orders",
        "--exit-at-end",
        "--print-partition",
        "--print-offset",
        "--print-key",
    ];
    let mut args = full_args.to_vec();
    args.extend(["--from", "earliest"]);
    let (out, _) = ok(run(k, &args, "", LIMIT));
    let all = parse_full(&out);
    assert_eq!(all.len(), 100);
    let mut by_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    let mut key_partition: BTreeMap<String, i32> = BTreeMap::new();
    for r in &all {
        by_partition.entry(r.partition).or_default().push(r.offset);
        let p = *key_partition.entry(r.key.clone()).or_insert(r.partition);
        assert_eq!(p, r.partition, "key {} in two partitions", r.key);
    }
    for (p, offs) in &by_partition {
        assert_eq!(
            *offs,
            (0..offs.len() as i64).collect::<Vec<_>>(),
            "partition {p}"
        );
    }

    // --from offset:N, in every partition and in one
    let n = 3i64;
    let mut args = full_args.to_vec();
    args.extend(["--from", "offset:3"]);
    let (out, _) = ok(run(k, &args, "", LIMIT));
    let mut want: Vec<Rec> = all.iter().filter(|r| r.offset >= n).cloned().collect();
    let mut got = parse_full(&out);
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let p = *by_partition.keys().next().unwrap();
    let ps = p.to_string();
    let mut args = full_args.to_vec();
    args.extend(["--from", "offset:3", "--partition", &ps]);
    let (out, _) = ok(run(k, &args, "", LIMIT));
    let got = parse_full(&out);
    let want: Vec<Rec> = all
        .iter()
        .filter(|r| r.partition == p && r.offset >= n)
        .cloned()
        .collect();
    assert_eq!(got, want);
    // --max-messages stops early
    let (out, _) = ok(run(
        k,
        &[
            "consume",
            "--topic",
            "orders",
            "--from",
            "earliest",
            "--max-messages",
            "7",
        ],
        "",
        LIMIT,
    ));
    assert_eq!(out.lines().count(), 7, "{out}");

    // --from timestamp:MS finds only what was written after MS
    std::thread::sleep(Duration::from_millis(20));
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    std::thread::sleep(Duration::from_millis(20));
    let late = "k1|late0\nk2|late1\nk3|late2\n";
    ok(run(
        k,
        &[
            "produce",
            "--topic",
            "orders",
            "--key-separator",
            "|",
            "--acks",
            "1",
            "--compression",
            "zstd",
        ],
        late,
        LIMIT,
    ));
    let from = format!("timestamp:{ms}");
    let (out, _) = ok(run(
        k,
        &[
            "consume",
            "--topic",
            "orders",
            "--from",
            &from,
            "--exit-at-end",
            "--print-key",
            "--key-separator",
            "|",
        ],
        "",
        LIMIT,
    ));
    let got: BTreeSet<&str> = out.lines().collect();
    assert_eq!(got, late.lines().collect::<BTreeSet<_>>(), "{out}");

    // bad input names its flag
    fails_with(
        run(
            k,
            &["consume", "--topic", "orders", "--from", "sometime"],
            "",
            LIMIT,
        ),
        &[
            "--from",
            "expected earliest, latest, offset:N or timestamp:MS",
        ],
    );
    fails_with(
        run(
            k,
            &["consume", "--topic", "orders", "--partition", "9"],
            "",
            LIMIT,
        ),
        &["--partition 9", "3 partitions"],
    );
    fails_with(
        run(
            k,
            &["produce", "--topic", "orders", "--acks", "2"],
            "",
            LIMIT,
        ),
        &["--acks"],
    );
    fails_with(
        run(
            k,
            &["produce", "--topic", "orders", "--key-separator", ":"],
            "no separator here\n",
            LIMIT,
        ),
        &["line 1", "--key-separator"],
    );
    fails_with(
        run(k, &["produce", "--topic", "nosuch"], "x\n", LIMIT),
        &["--topic nosuch", "does not exist"],
    );
    fails_with(
        run(
            k,
            &["topic", "create", "x", "--config", "retention.ms"],
            "",
            LIMIT,
        ),
        &["--config", "KEY=VALUE"],
    );
    fails_with(
        run(k, &["topic", "create", "orders"], "", LIMIT),
        &["already exists"],
    );
    fails_with(
        run(
            k,
            &["topic", "alter", "orders", "--partitions", "2"],
            "",
            LIMIT,
        ),
        &["--partitions 2", "only be added"],
    );

    // grow, then delete
    let (out, _) = ok(cli(k, &["topic", "alter", "orders", "--partitions", "4"]));
    assert!(out.contains("partitions 3 -> 4"), "{out}");
    let (desc, _) = ok(cli(k, &["topic", "describe", "orders"]));
    assert!(desc.contains("partitions 4"), "{desc}");
    assert_eq!(overrides(&desc).len(), 1, "{desc}");
    let (out, _) = ok(cli(k, &["topic", "delete", "orders"]));
    assert!(out.contains("deleted topic 'orders'"), "{out}");
    let (out, _) = ok(cli(k, &["topic", "list"]));
    assert!(!out.lines().any(|l| l == "orders"), "{out}");
    fails_with(
        run(k, &["topic", "describe", "orders"], "", LIMIT),
        &["does not exist"],
    );
    drop(broker);
}

/// A port nothing listens on: bound, then released.
fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[test]
fn an_unreachable_broker_gives_a_clear_error_quickly() {
    let addr = closed_port();
    let limit = Duration::from_secs(20);
    let cases: [&[&str]; 4] = [
        &["topic", "list"],
        &["topic", "create", "t", "--partitions", "1"],
        &["produce", "--topic", "t"],
        &["consume", "--topic", "t", "--from", "earliest"],
    ];
    for args in cases {
        let err = fails_with(run(&addr, args, "x\n", limit), &["--bootstrap", &addr]);
        assert!(err.contains("cannot reach a broker"), "{args:?}: {err}");
    }

    // Something that accepts connections but never answers (the kernel completes the
    // handshake from the listen backlog): the requests time out after --timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    for args in [
        &["topic", "list", "--timeout", "1s"][..],
        &["consume", "--topic", "t", "--timeout", "1s"][..],
        &["produce", "--topic", "t", "--timeout", "1s"][..],
    ] {
        let err = fails_with(run(&addr, args, "x\n", limit), &["--bootstrap", &addr]);
        assert!(err.contains("--timeout"), "{args:?}: {err}");
    }
    drop(silent);
}
