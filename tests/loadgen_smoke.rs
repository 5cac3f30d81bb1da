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

#[test]
fn load_generator_drives_the_rest_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let k = broker.kafka.as_str();
    let h = broker.http.as_str();
    for t in ["json", "live"] {
        let out = cli(k, &["topic", "create", t, "--partitions", "2"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The same records through both protocols: the same bytes.
    let common = [
        "--topic",
        "json",
        "--records",
        "1000",
        "--record-size",
        "300",
    ];
    let mut args = vec!["http-produce", "--http", h, "--batch", "100", "--keyed"];
    args.extend_from_slice(&common);
    args.push("--no-progress");
    let w = load(&args);
    let mut args = vec!["produce", "--bootstrap", k, "--json-values", "--keyed"];
    args.extend_from_slice(&common);
    args.push("--no-progress");
    let p = load(&args);
    assert_eq!((w.records, w.errors, p.records), (1000, 0, 1000), "{w:?}");
    assert_eq!(w.bytes, p.bytes);
    assert_eq!(result_json(&w)["mode"], "http-produce");
    let c = load(&[
        "consume",
        "--bootstrap",
        k,
        "--topic",
        "json",
        "--no-progress",
    ]);
    assert_eq!((c.records, c.bytes), (2000, 2 * p.bytes));

    let e = load(&[
        "sse-latency",
        "--bootstrap",
        k,
        "--http",
        h,
        "--topic",
        "live",
        "--rate",
        "500",
        "--duration",
        "2s",
        "--warmup",
        "500ms",
        "--record-size",
        "200",
        "--no-progress",
    ]);
    let end = e.end_to_end.as_ref().unwrap();
    assert_eq!(e.records, 1000);
    assert_eq!(
        (end.kafka.received, end.sse.received),
        (1000, 1000),
        "{e:?}"
    );
    assert_eq!((end.kafka.missed, end.sse.missed), (0, 0));
    assert!(end.p99_added_ms.is_some() && end.acks > 0, "{e:?}");
    assert!(result_json(&e)["end_to_end"]["sse"]["latency"]["p99_ms"].is_number());
    drop(broker);
}
