//! The `strata log` tools against a real partition directory.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use strata_log::{Log, LogConfig, SystemClock};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};

fn strata() -> Command {
    Command::new(env!("CARGO_BIN_EXE_strata"))
}

#[test]
fn inspect_and_dump_a_partition_directory() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 400,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
    for i in 0..10 {
        let r = NewRecord {
            key: Some(Bytes::from(format!("key{i}"))),
            ..NewRecord::value(vec![b'x'; 100], 1_000 + i)
        };
        let mut b = batch(&[r], Compression::Zstd, None).to_vec();
        log.append(&mut b, 0).unwrap();
    }
    log.close().unwrap();

    let out = strata()
        .args(["log", "inspect"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("log end offset    10"), "{text}");
    assert!(text.contains("sealed") && text.contains("active"), "{text}");

    let out = strata()
        .args([
            "log",
            "dump",
            "--records",
            "--from",
            "3",
            "--max-batches",
            "2",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("baseOffset")).count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("baseOffset 3 ")
            && text.contains("compression Zstd")
            && text.contains("crcValid true"),
        "{text}"
    );
    assert!(
        text.contains("  offset 4 timestamp 1004 key key4 value 100 bytes"),
        "{text}"
    );
}

#[test]
fn a_bad_directory_gets_a_clear_error() {
    let out = strata()
        .args(["log", "inspect", "/definitely/not/here"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a directory") && err.contains("partition directory"),
        "{err}"
    );
}

/// `strata log dump … | head -1`: when the reader of standard output goes away, the
/// command stops quietly with success (as a Unix tool does), not with a panic.
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    for i in 0..50 {
        let mut b = batch(
            &[NewRecord::value(vec![b'x'; 10], i)],
            Compression::None,
            None,
        )
        .to_vec();
        log.append(&mut b, 0).unwrap();
    }
    log.close().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = strata()
        .args(["log", "dump", "--records"])
        .arg(dir.path())
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
