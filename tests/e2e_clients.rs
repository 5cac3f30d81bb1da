//! Other Kafka clients against `strata serve`: kafka-python (pure Python, its own
//! protocol code) and kcat built on Debian's librdkafka 2.0 (an older protocol
//! negotiation than the rdkafka crate's 2.12). Both are installed by scripts/deps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

fn require(cmd: &str, args: &[&str]) {
    let ok = Command::new(cmd)
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{cmd} {}` failed: run scripts/deps to install the test dependencies",
        args.join(" ")
    );
}

#[test]
fn kafka_python_produces_consumes_and_administers() {
    require("python3", &["-c", "import kafka, snappy, zstandard, lz4"]);
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/kafka_python_smoke.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(&broker.kafka)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kafka-python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("kafka-python OK: 2500 records"), "{stdout}");
}

#[test]
fn kcat_on_an_older_librdkafka_round_trips() {
    require("kcat", &["-V"]);
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(
        dir.path(),
        &["--auto-create-topics", "true", "--default-partitions", "2"],
    );
    let lines: Vec<String> = (0..300)
        .map(|i| format!("key{}:value-{i}", i % 7))
        .collect();
    let mut p = Command::new("kcat")
        .args([
            "-b",
            &broker.kafka,
            "-P",
            "-t",
            "kc",
            "-K",
            ":",
            "-z",
            "lz4",
            "-X",
            "acks=all",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin
        .take()
        .unwrap()
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kcat produce: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("kcat")
        .args([
            "-b",
            &broker.kafka,
            "-C",
            "-t",
            "kc",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k:%s\n",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kcat consume: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let mut want = lines.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // Metadata listing through the old client.
    let out = Command::new("kcat")
        .args(["-b", &broker.kafka, "-L", "-t", "kc"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("topic \"kc\" with 2 partitions"), "{text}");
}
