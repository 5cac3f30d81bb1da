//! Crash safety of the cleaner's swap: after a kill at any moment of a pass, the log
//! opens with either the records it had before the pass or those it has after, never a
//! mix, never neither.
//!
//! Two tests: every intermediate state of the swap protocol built by hand from a log
//! and its cleaned copy (the `.cleaned` files written, the `.swap` committed with none,
//! some or all old segments deleted, the indexes renamed), and a child process (this
//! test binary re-run with `STRATA_CLEAN_CRASH_CHILD_DIR`) that cleans while the parent
//! kills it with SIGKILL at random moments. The pass cleans one group of segments (they
//! were rolled small, and all fit one `segment.bytes`), so before and after are the only
//! two states.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use strata_log::{
    CompactionConfig, IoMode, Log, LogConfig, ManualClock, OffsetMap, SLOT_BYTES, SystemClock,
};
use strata_proto::Compression;
use strata_proto::batch;
use strata_proto::batch::build::{NewRecord, batch};

const CHILD_ENV: &str = "STRATA_CLEAN_CRASH_CHILD_DIR";

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 8 << 20,
        index_interval_bytes: 512,
        io_mode: IoMode::Buffered,
        compaction: Some(CompactionConfig {
            delete_retention_ms: 1 << 40,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio_ppm: 0,
        }),
        ..LogConfig::default()
    }
}

type Rec = (i64, Vec<u8>, Option<Vec<u8>>);

fn records(log: &Log) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let r = log.read(at, 1 << 20, None).unwrap();
        for b in batch::batches(&r.data) {
            for rec in b.unwrap().records().unwrap().iter() {
                let rec = rec.unwrap();
                out.push((
                    rec.offset,
                    rec.key.unwrap().to_vec(),
                    rec.value.map(<[u8]>::to_vec),
                ));
            }
        }
        at = r.next_offset;
    }
    out
}

/// A log of 40 small sealed segments of updates over 200 keys (some tombstones).
fn build(dir: &Path) {
    let (log, _) = Log::open(dir, config(), Arc::new(ManualClock::new(1_000))).unwrap();
    for i in 0..4000u32 {
        let recs: Vec<NewRecord> = (0..3)
            .map(|j| {
                let n = i * 3 + j;
                NewRecord {
                    key: Some(Bytes::from(format!("key-{}", (n * 7919) % 200))),
                    value: (n % 23 != 0).then(|| Bytes::from(format!("value-{n}"))),
                    headers: vec![],
                    timestamp: 1_000,
                }
            })
            .collect();
        let mut b = batch(&recs, Compression::Lz4, None).to_vec();
        log.append(&mut b, 1).unwrap();
        if i % 100 == 99 {
            log.force_roll().unwrap();
        }
    }
    log.close().unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn open_records(dir: &Path) -> Vec<Rec> {
    let (log, report) = Log::open(dir, config(), Arc::new(ManualClock::new(1_000))).unwrap();
    assert!(report.truncations.is_empty(), "{report:?}");
    records(&log)
}

/// The log before and after one pass, and the bases of its segments before.
fn before_and_after(root: &Path) -> (Vec<Rec>, Vec<Rec>, Vec<i64>) {
    let pristine = root.join("pristine");
    build(&pristine);
    let cleaned = root.join("cleaned");
    copy_dir(&pristine, &cleaned);
    let before = open_records(&pristine);
    let (log, _) = Log::open(&cleaned, config(), Arc::new(ManualClock::new(1_000))).unwrap();
    let bases: Vec<i64> = log.segments().iter().map(|s| s.base_offset).collect();
    let out = log
        .clean(
            &mut OffsetMap::with_memory(SLOT_BYTES * 10_000),
            1_000,
            i64::MAX,
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(out.segments_after, 1, "one group: {out:?}");
    assert!(out.segments_before > 30, "{out:?}");
    let after = records(&log);
    log.close().unwrap();
    assert!(after.len() < before.len() / 10);
    (before, after, bases)
}

#[test]
fn every_state_of_the_swap_recovers_to_before_or_after() {
    let root = tempfile::tempdir().unwrap();
    let (before, after, bases) = before_and_after(root.path());
    let pristine = root.path().join("pristine");
    let cleaned = root.path().join("cleaned");
    let base = bases[0];
    let name = |b: i64, ext: &str| format!("{b:020}.{ext}");
    let group: Vec<i64> = bases[..bases.len() - 1].to_vec(); // all but the active one
    // Each state: which old segments are left, and where the new files are.
    #[derive(Debug, Clone, Copy)]
    enum State {
        /// The cleaned files written, not committed.
        Cleaned,
        /// `.log.swap` committed; `keep` of the old segments not yet deleted.
        Swapped { keep: usize },
        /// Old segments deleted, the indexes renamed into place, the log still `.swap`.
        IndexesRenamed,
    }
    let states = [
        State::Cleaned,
        State::Swapped { keep: group.len() },
        State::Swapped {
            keep: group.len() / 2,
        },
        State::Swapped { keep: 0 },
        State::IndexesRenamed,
    ];
    for (i, state) in states.into_iter().enumerate() {
        let dir = root.path().join(format!("state-{i}"));
        copy_dir(&pristine, &dir);
        // A pass marks the log as one with offset gaps before it writes anything.
        std::fs::copy(cleaned.join("offset-gaps"), dir.join("offset-gaps")).unwrap();
        let new = |ext: &str| cleaned.join(name(base, ext));
        match state {
            State::Cleaned => {
                for ext in ["log", "index", "timeindex"] {
                    std::fs::copy(new(ext), dir.join(format!("{}.cleaned", name(base, ext))))
                        .unwrap();
                }
            }
            State::Swapped { keep } => {
                std::fs::copy(new("log"), dir.join(format!("{}.swap", name(base, "log")))).unwrap();
                for ext in ["index", "timeindex"] {
                    std::fs::copy(new(ext), dir.join(format!("{}.cleaned", name(base, ext))))
                        .unwrap();
                }
                // Deleted oldest first, as the swap does.
                for b in &group[..group.len() - keep] {
                    for ext in ["log", "index", "timeindex"] {
                        std::fs::remove_file(dir.join(name(*b, ext))).unwrap();
                    }
                }
            }
            State::IndexesRenamed => {
                for b in &group {
                    for ext in ["log", "index", "timeindex"] {
                        std::fs::remove_file(dir.join(name(*b, ext))).unwrap();
                    }
                }
                std::fs::copy(new("log"), dir.join(format!("{}.swap", name(base, "log")))).unwrap();
                for ext in ["index", "timeindex"] {
                    std::fs::copy(new(ext), dir.join(name(base, ext))).unwrap();
                }
            }
        }
        let got = open_records(&dir);
        let want = if matches!(state, State::Cleaned) {
            &before
        } else {
            &after
        };
        assert!(&got == want, "state {state:?}: {} records", got.len());
        // Nothing of the pass is left behind, and a second open agrees.
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
            .collect();
        assert!(leftovers.is_empty(), "{state:?}: {leftovers:?}");
        assert!(&open_records(&dir) == want);
    }
}

/// The child: clean the log in the directory once, slowly (a pause per read), and say so.
#[test]
fn clean_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (log, _) = Log::open(Path::new(&dir), config(), Arc::new(SystemClock)).unwrap();
    let mut map = OffsetMap::with_memory(SLOT_BYTES * 10_000);
    log.clean(&mut map, 1_000, i64::MAX, &mut |_| {
        std::thread::sleep(Duration::from_millis(2))
    })
    .unwrap();
    println!("CLEANED");
}

#[test]
fn a_kill_at_any_moment_of_a_pass_leaves_before_or_after() {
    let root = tempfile::tempdir().unwrap();
    let (before, after, _) = before_and_after(root.path());
    let pristine = root.path().join("pristine");
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let (mut saw_before, mut saw_after) = (0, 0);
    for round in 0..24 {
        let dir = root.path().join(format!("kill-{round}"));
        copy_dir(&pristine, &dir);
        let mut child = Command::new(&exe)
            .args([
                "clean_crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(0..1200)));
        let _ = child.kill();
        let _ = child.wait();
        let got = open_records(&dir);
        if got == before {
            saw_before += 1;
        } else {
            assert!(
                got == after,
                "round {round}: neither before nor after ({} records)",
                got.len()
            );
            saw_after += 1;
        }
    }
    eprintln!("kills: {saw_before} left the log as before, {saw_after} as after");
    assert!(saw_before > 0, "some kills land before the commit");
}
