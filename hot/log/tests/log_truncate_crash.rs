//! Crash tests of truncation: a child process appends (as leader, with an idempotent
//! producer, and as follower), truncates to batch boundaries, sometimes restarts the
//! log fully, in a loop, and is killed with SIGKILL at random moments, often in the
//! middle of a truncation. After each kill the log reopens consistent: dense offsets,
//! every batch the one the child wrote at that offset, nothing lost that the child was
//! told is durable, and a leader-epoch cache and producer state equal to the ones
//! rebuilt from the batches alone.
//!
//! The child is this same test binary, re-run with `STRATA_TRUNCATE_CHILD_DIR` (and the
//! IO mode in `STRATA_TRUNCATE_CHILD_MODE`) set; it reports on stdout.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use rand::{RngExt, SeedableRng};
use strata_log::{IoMode, Log, LogConfig, ManualClock};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::batch::{self, RecordBatch};

const CHILD_ENV: &str = "STRATA_TRUNCATE_CHILD_DIR";
const CHILD_MODE_ENV: &str = "STRATA_TRUNCATE_CHILD_MODE";
const PID: i64 = 42;
/// Both processes run on this clock, so no producer expires.
const NOW: i64 = 1_700_000_000_000;

fn config(mode: IoMode) -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        segment_ms: i64::MAX,
        index_interval_bytes: 512,
        tail_cache_bytes: 16 * 1024,
        ..base_config(mode)
    }
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(NOW))
}

/// A plain batch whose content depends only on the offset it is appended at.
fn batch_for(offset: i64) -> Vec<u8> {
    make_batch(
        1 + (offset % 4) as usize,
        40 + (offset % 331) as usize,
        offset as u64,
        NOW,
    )
}

/// The producer's batch of `n` records from sequence `seq`.
fn pbatch(seq: i32, n: usize) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            key: Some(Bytes::from(format!("s{}", seq as usize + i))),
            ..NewRecord::value(vec![b'p'; 90], NOW)
        })
        .collect();
    batch(
        &records,
        Compression::None,
        Some(ProducerFields {
            producer_id: PID,
            producer_epoch: 0,
            base_sequence: seq,
        }),
    )
    .to_vec()
}

/// The bases of every batch from `from` on.
fn batch_bases(log: &Log) -> Vec<i64> {
    read_all(log, log.log_start_offset())
        .iter()
        .map(|b| base_of(b))
        .collect()
}

/// The child: append, truncate, now and then restart fully, forever.
#[test]
fn truncate_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mode = match std::env::var(CHILD_MODE_ENV).as_deref() {
        Ok("buffered") => IoMode::Buffered,
        _ => IoMode::Direct,
    };
    let (log, _) = Log::open(Path::new(&dir), config(mode), clock()).expect("child open");
    let mut rng = rand::rngs::StdRng::seed_from_u64(std::process::id() as u64);
    let mut epoch = log.latest_epoch().unwrap_or(0);
    let mut bases = batch_bases(&log);
    loop {
        epoch += 1;
        for _ in 0..rng.random_range(1..30) {
            let offset = log.log_end_offset();
            let info = match rng.random_range(0..10) {
                0..=2 => {
                    let seq = log.producer_entry(PID).map_or(0, |e| e.last_sequence() + 1);
                    let n = rng.random_range(1..4);
                    log.append(&mut pbatch(seq, n), epoch)
                        .expect("child producer append")
                }
                3..=4 => {
                    let mut b = batch_for(offset);
                    batch::set_base_offset(&mut b, offset);
                    batch::set_partition_leader_epoch(&mut b, epoch);
                    log.append_replicated(&mut b)
                        .expect("child replicated append")
                }
                _ => log
                    .append(&mut batch_for(offset), epoch)
                    .expect("child append"),
            };
            assert!(!info.duplicate);
            bases.push(info.first_offset);
        }
        if rng.random_bool(0.3) {
            println!("DURABLE {}", log.flush().expect("child flush"));
        }
        if rng.random_bool(0.04) {
            let t = log.log_end_offset() + 3;
            println!("TRUNCATING_FULLY {t}");
            log.truncate_fully_and_start_at(t)
                .expect("child truncate fully");
            bases.clear();
            println!("DURABLE {t}");
        } else {
            // A few batches back: into the active segment, often into sealed ones.
            let start = log.log_start_offset();
            let candidates: Vec<i64> = bases.iter().copied().filter(|&b| b >= start).collect();
            let back = rng.random_range(0..candidates.len().min(25));
            let t = candidates[candidates.len() - 1 - back];
            println!("TRUNCATING {t}");
            log.truncate_to(t).expect("child truncate");
            bases.retain(|&b| b < t);
            println!("DURABLE {t}");
        }
    }
}

#[test]
fn kill_9_during_truncation_reopens_consistent_direct() {
    kill_9_during_truncation(IoMode::Direct);
}

#[test]
fn kill_9_during_truncation_reopens_consistent_buffered() {
    kill_9_during_truncation(IoMode::Buffered);
}

/// Copies the log directory without the files `skip` names, and opens the copy.
fn open_copy_without(
    dir: &Path,
    mode: IoMode,
    skip: &dyn Fn(&str) -> bool,
) -> (Log, tempfile::TempDir) {
    let copy = tempfile::tempdir_in(dir.parent().unwrap()).unwrap();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if !skip(&name) {
            fs::copy(e.path(), copy.path().join(&name)).unwrap();
        }
    }
    let (log, _) = Log::open(copy.path(), config(mode), clock()).unwrap();
    (log, copy)
}

fn kill_9_during_truncation(mode: IoMode) {
    let dir = match mode {
        IoMode::Direct => tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
        IoMode::Buffered => tempfile::tempdir().unwrap(),
    };
    let exe = std::env::current_exe().unwrap();
    let seed: u64 = std::env::var("STRATA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (set STRATA_TEST_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut mid_truncation = 0;
    let mut max_leo = 0;
    let mut leo = 0;
    for round in 0..24 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "truncate_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env(
                CHILD_MODE_ENV,
                match mode {
                    IoMode::Direct => "direct",
                    IoMode::Buffered => "buffered",
                },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness prints too.
                if line.starts_with("DURABLE ") || line.starts_with("TRUNCATING") {
                    let _ = tx.send(line);
                }
            }
        });
        let first = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("child reports progress");
        std::thread::sleep(Duration::from_micros(rng.random_range(0..200_000)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        // What the child was told is durable: everything below `bound`, unless a full
        // restart was under way (then a prefix of any length may be left).
        let mut bound = Some(leo);
        let mut truncating = false;
        for line in std::iter::once(first).chain(rx.try_iter()) {
            let (what, v) = line.split_once(' ').unwrap();
            let v: i64 = v.trim().parse().unwrap();
            match what {
                "DURABLE" => {
                    bound = Some(v);
                    truncating = false;
                }
                "TRUNCATING" => {
                    bound = bound.map(|b| b.min(v));
                    truncating = true;
                }
                "TRUNCATING_FULLY" => {
                    bound = None;
                    truncating = true;
                }
                other => panic!("child said {other}"),
            }
        }
        mid_truncation += truncating as usize;

        let ctx = format!("round {round} (killed mid-truncation: {truncating})");
        let (log, report) = Log::open(dir.path(), config(mode), clock()).unwrap();
        if mode == IoMode::Direct {
            assert!(report.truncations.is_empty(), "{ctx}: {report:?}");
        }
        leo = log.log_end_offset();
        max_leo = max_leo.max(leo);
        if let Some(b) = bound {
            assert!(
                leo >= b,
                "{ctx}: durable up to {b} but the log ends at {leo}: {report:?}"
            );
        }
        // Every batch is the one the child appended at that offset, in rising epochs.
        let mut offset = log.log_start_offset();
        let mut last_epoch = -1;
        for b in read_all(&log, log.log_start_offset()) {
            let (rb, _) = RecordBatch::parse(&b).unwrap();
            let h = rb.header();
            assert_eq!(h.base_offset, offset, "{ctx}: dense");
            let mut want = if h.producer_id == PID {
                pbatch(h.base_sequence, h.record_count as usize)
            } else {
                batch_for(offset)
            };
            batch::set_base_offset(&mut want, offset);
            batch::set_partition_leader_epoch(&mut want, h.partition_leader_epoch);
            assert!(b == want, "{ctx}: batch at {offset} differs");
            assert!(h.partition_leader_epoch >= last_epoch, "{ctx}: epochs rise");
            last_epoch = h.partition_leader_epoch;
            offset = rb.next_offset();
        }
        assert_eq!(offset, leo, "{ctx}");
        // The epoch cache and the producer state are what the batches alone give
        // (an entry at the log end is an epoch whose first batch the kill prevented).
        let (rebuilt, _copy) =
            open_copy_without(dir.path(), mode, &|n| n == "leader-epoch-checkpoint");
        let mut got = epochs(&log);
        got.retain(|&(_, o)| o < leo);
        assert_eq!(got, epochs(&rebuilt), "{ctx}: leader-epoch cache");
        drop(rebuilt);
        let (rebuilt, _copy) = open_copy_without(dir.path(), mode, &|n| n.ends_with(".snapshot"));
        assert_eq!(
            log.producer_state(),
            rebuilt.producer_state(),
            "{ctx}: producer state"
        );
        drop(rebuilt);
        drop(log);
        // A second open finds nothing more to repair.
        let (log, report) = Log::open(dir.path(), config(mode), clock()).unwrap();
        assert!(
            report.truncations.is_empty() && !report.rebuilt_leader_epochs,
            "{ctx}: {report:?}"
        );
        assert_eq!(log.log_end_offset(), leo);
    }
    eprintln!("{mid_truncation} of 24 kills landed during a truncation; the log reached {max_leo}");
    assert!(max_leo > 0);
}
