//! The load generator (strata-benches) drives a real `strata serve`: a tiny produce and
//! consume, each ending with its RESULT line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use clap::Parser;
use common::{Broker, cli};

fn load(args: &[&str]) -> strata_benches::Report {
    let mut argv = vec!["strata-benches"];
    argv.extend_from_slice(args);
    let cli = strata_benches::Cli::try_parse_from(argv).unwrap();
    strata_benches::run(cli.command).unwrap()
}

fn result_json(r: &strata_benches::Report) -> serde_json::Value {
    let line = r.result_line();
    let json = line.strip_prefix("RESULT ").expect("RESULT prefix");
    assert!(!json.contains('\n'), "{line}");
    serde_json::from_str(json).unwrap()
}

#[test]
fn load_generator_produces_and_consumes_against_the_broker() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let k = broker.kafka.as_str();
    let out = cli(k, &["topic", "create", "load", "--partitions", "4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = broker.pid().to_string();
    let disk = dir.path().to_str().unwrap();

    let p = load(&[
        "produce",
        "--bootstrap",
        k,
        "--topic",
        "load",
        "--records",
        "2000",
        "--record-size",
        "256",
        "--keyed",
        "--keys",
        "50",
        "--broker-pid",
        &pid,
        "--no-progress",
        "--disk-dir",
        disk,
    ]);
    assert_eq!(p.records, 2000);
    assert_eq!(p.errors, 0);
    assert!(p.bytes >= 2000 * 256, "{p:?}");
    let l = p.latency.as_ref().unwrap();
    assert!(
        0.0 < l.p50_ms && l.p50_ms <= l.p99_ms && l.p99_ms <= l.p999_ms && l.p999_ms <= l.max_ms,
        "{l:?}"
    );
    assert!(
        p.broker_cpu_seconds.is_some() && p.broker_cpu_s_per_gb.is_some(),
        "{p:?}"
    );
    assert!(p.disk_mb_per_s.unwrap() > 0.0);
    let j = result_json(&p);
    assert_eq!(j["mode"], "produce");
    assert_eq!(j["records"], 2000);

    // A rate-limited run, acks=all, with compression: it still delivers everything.
    let r = load(&[
        "produce",
        "--bootstrap",
        k,
        "--topic",
        "load",
        "--records",
        "200",
        "--rate",
        "2000",
        "--acks",
        "all",
        "--compression",
        "lz4",
        "--no-progress",
    ]);
    assert_eq!(r.records, 200);
    assert!(r.broker_cpu_s_per_gb.is_none());

    let c = load(&[
        "consume",
        "--bootstrap",
        k,
        "--topic",
        "load",
        "--broker-pid",
        &pid,
        "--no-progress",
    ]);
    assert_eq!(c.records, 2200);
    assert_eq!(c.bytes, p.bytes + r.bytes);
    assert!(c.broker_cpu_seconds.is_some());
    assert_eq!(result_json(&c)["mode"], "consume");

    let c = load(&[
        "consume",
        "--bootstrap",
        k,
        "--topic",
        "load",
        "--records",
        "500",
        "--no-progress",
    ]);
    assert_eq!(c.records, 500);
    drop(broker);
}
