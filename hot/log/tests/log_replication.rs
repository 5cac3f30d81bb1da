//! What replication needs of the log: the leader-epoch cache (KIP-101, KIP-279) kept
//! consistent with the batches through appends, truncation, retention and recovery;
//! follower appends that keep the leader's offsets and epochs; truncation to a batch
//! boundary anywhere in the log (sealed segments, segment bases, the active segment,
//! in direct mode through the tail buffer) after which reads, appends and reopens are
//! exact and the producer state no longer knows the batches above the cut; and
//! truncating fully to restart at another offset.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use strata_log::{IoMode, Log, LogConfig, LogError, ManualClock};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};

const NOW: i64 = 1_700_000_000_000;

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(NOW))
}

/// Direct mode needs a filesystem that takes O_DIRECT: the target dir's, not /tmp's.
fn tempdir(mode: IoMode) -> tempfile::TempDir {
    match mode {
        IoMode::Direct => tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
        IoMode::Buffered => tempfile::tempdir().unwrap(),
    }
}

/// A log's batches as (base offset, bytes), and what their epochs make of the cache.
#[derive(Default, Debug, Clone)]
struct Model {
    batches: Vec<(i64, Vec<u8>)>,
}

impl Model {
    fn end(&self) -> i64 {
        self.batches.last().map_or(0, |(b, v)| {
            b + 1
                + strata_proto::batch::parse_header(v)
                    .unwrap()
                    .last_offset_delta as i64
        })
    }
    fn push(&mut self, base: i64, bytes: Vec<u8>) {
        self.batches.push((base, bytes));
    }
    fn truncate(&mut self, offset: i64) {
        self.batches.retain(|(b, _)| *b < offset);
    }
    fn bytes(&self) -> Vec<Vec<u8>> {
        self.batches.iter().map(|(_, v)| v.clone()).collect()
    }
    /// The cache Kafka's recovery rule builds from the batches' epochs.
    fn epochs(&self) -> Vec<(i32, i64)> {
        let mut out: Vec<(i32, i64)> = Vec::new();
        for (base, v) in &self.batches {
            let e = strata_proto::batch::parse_header(v)
                .unwrap()
                .partition_leader_epoch;
            if out.last().is_none_or(|&(l, _)| e > l) {
                out.push((e, *base));
            }
        }
        out
    }
}

/// Appends `n` batches of 2 records as leader in `epoch`, recording them in `m`.
fn append_n(log: &Log, m: &mut Model, n: usize, epoch: i32, seed: u64) {
    for i in 0..n {
        let mut b = make_batch(2, 300, seed + i as u64, 1000 + i as i64);
        let info = log.append(&mut b, epoch).unwrap();
        assert_eq!(info.first_offset, m.end());
        m.push(info.first_offset, b);
    }
}

fn assert_matches(log: &Log, m: &Model, ctx: &str) {
    assert_eq!(log.log_end_offset(), m.end(), "{ctx}");
    assert!(
        read_all(log, log.log_start_offset()) == m.bytes(),
        "{ctx}: content"
    );
    assert_eq!(epochs(log), m.epochs(), "{ctx}: epochs");
}

fn epoch_cache_follows_appends_and_survives_reopen(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(
        !report.rebuilt_leader_epochs,
        "an empty log has nothing to rebuild"
    );
    assert_eq!(log.latest_epoch(), None);
    assert_eq!(log.end_offset_for_epoch(0), None);
    let mut m = Model::default();
    append_n(&log, &mut m, 5, 0, 0); // 0..10
    append_n(&log, &mut m, 3, 2, 10); // 10..16
    // A new leader assigns its epoch at the log end before appending anything.
    assert_eq!(log.assign_epoch_start(5).unwrap(), 16);
    assert_eq!(log.assign_epoch_start(5).unwrap(), 16, "idempotent");
    assert_eq!(epochs(&log), vec![(0, 0), (2, 10), (5, 16)]);
    append_n(&log, &mut m, 1, 5, 20); // 16..18
    assert_eq!(epochs(&log), vec![(0, 0), (2, 10), (5, 16)]);
    assert_eq!(log.latest_epoch(), Some(5));
    // OffsetsForLeaderEpoch, as Kafka answers it.
    assert_eq!(log.end_offset_for_epoch(0), Some((0, 10)));
    assert_eq!(log.end_offset_for_epoch(1), Some((0, 10)));
    assert_eq!(log.end_offset_for_epoch(2), Some((2, 16)));
    assert_eq!(log.end_offset_for_epoch(4), Some((2, 16)));
    assert_eq!(
        log.end_offset_for_epoch(5),
        Some((5, 18)),
        "the latest ends at the LEO"
    );
    assert_eq!(log.end_offset_for_epoch(6), None);
    assert_eq!(log.end_offset_for_epoch(-1), None);
    // Kafka's checkpoint format.
    let text = fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(text, "0\n3\n0 0\n2 10\n5 16\n");

    // An unclean drop and a clean close both keep it, without a rebuild.
    drop(log);
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(!report.rebuilt_leader_epochs, "{report:?}");
    assert_matches(&log, &m, "after a drop");
    log.close().unwrap();
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(!report.rebuilt_leader_epochs, "{report:?}");
    assert_matches(&log, &m, "after a close");

    // An epoch assigned at the log end survives a reopen (it is where that leader's
    // epoch starts), and truncating to the log end removes it, as Kafka does when the
    // replica follows another leader.
    assert_eq!(log.assign_epoch_start(7).unwrap(), 18);
    drop(log);
    let (log, _) = open(dir.path(), small_config(mode), &c);
    assert_eq!(epochs(&log), vec![(0, 0), (2, 10), (5, 16), (7, 18)]);
    assert_eq!(log.end_offset_for_epoch(6), Some((5, 18)));
    log.truncate_to(18).unwrap();
    assert_eq!(epochs(&log), vec![(0, 0), (2, 10), (5, 16)]);
    assert_matches(&log, &m, "after a truncation to the log end");
}

/// An epoch assignment writes the checkpoint without fsync (the recovery point moves
/// only after a flush that fsyncs it). If a power loss takes that write, the batches of
/// the new epoch are above the recovery point, and recovery puts the entry back from
/// them.
fn an_unsynced_epoch_assignment_lost_with_the_checkpoint_is_recovered(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    // No roll: a roll fsyncs the checkpoint (the recovery point moves).
    let config = LogConfig {
        segment_bytes: 1 << 20,
        ..small_config(mode)
    };
    let (log, _) = open(dir.path(), config.clone(), &c);
    let mut m = Model::default();
    append_n(&log, &mut m, 4, 1, 0);
    log.flush().unwrap();
    let path = dir.path().join("leader-epoch-checkpoint");
    let on_device = fs::read(&path).unwrap();
    let end = m.end();
    assert_eq!(log.assign_epoch_start(3).unwrap(), end);
    append_n(&log, &mut m, 3, 3, 50);
    assert_eq!(epochs(&log), vec![(1, 0), (3, end)]);
    drop(log);
    // The power loss: the file is what the last fsync left.
    fs::write(&path, &on_device).unwrap();
    let (log, report) = open(dir.path(), config, &c);
    assert!(!report.rebuilt_leader_epochs, "{report:?}");
    assert_matches(&log, &m, "after losing the unsynced assignment");
    assert_eq!(log.end_offset_for_epoch(1), Some((1, end)));
}

fn a_missing_damaged_or_inconsistent_epoch_checkpoint_is_rebuilt(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut m = Model::default();
    for e in 0..5 {
        append_n(&log, &mut m, 8, 2 * e, 100 * e as u64);
    }
    assert!(log.segments().len() > 3);
    let want = m.epochs();
    assert_eq!(epochs(&log), want);
    let leo = log.log_end_offset();
    log.close().unwrap();
    let path = dir.path().join("leader-epoch-checkpoint");
    let write = |entries: &[(i32, i64)]| {
        let mut text = format!("0\n{}\n", entries.len());
        for (e, o) in entries {
            text.push_str(&format!("{e} {o}\n"));
        }
        fs::write(&path, text).unwrap();
    };
    let mut one_short = want.clone();
    one_short.remove(0);
    let mut split_last_run = want.clone();
    split_last_run.push((99, leo - 1));
    type Damage<'a> = Box<dyn Fn() + 'a>;
    let damages: Vec<(&str, Damage)> = vec![
        ("missing", Box::new(|| fs::remove_file(&path).unwrap())),
        (
            "garbage",
            Box::new(|| fs::write(&path, b"\x00garbage").unwrap()),
        ),
        (
            "torn",
            Box::new(|| {
                let t = fs::read(&path).unwrap();
                fs::write(&path, &t[..t.len() - 3]).unwrap();
            }),
        ),
        // The log's first batches would have no epoch.
        ("not covering the log start", Box::new(|| write(&one_short))),
        // An epoch starting inside the last batches, which recovery scans.
        (
            "disagreeing with the scanned batches",
            Box::new(|| write(&split_last_run)),
        ),
    ];
    for (what, damage) in damages {
        damage();
        let (log, report) = open(dir.path(), small_config(mode), &c);
        assert!(report.rebuilt_leader_epochs, "{what}: {report:?}");
        assert_eq!(epochs(&log), want, "{what}");
        drop(log);
        // Rewritten: the next open trusts it.
        let (log, report) = open(dir.path(), small_config(mode), &c);
        assert!(!report.rebuilt_leader_epochs, "{what}: {report:?}");
        assert_eq!(epochs(&log), want, "{what}");
        log.close().unwrap();
    }
    // Entries past the log end (a crash before the batches they describe) are dropped
    // without a rebuild.
    let mut beyond = want.clone();
    beyond.push((20, leo + 5));
    write(&beyond);
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(!report.rebuilt_leader_epochs, "{report:?}");
    assert_eq!(epochs(&log), want);
}

fn truncation_across_segment_boundaries(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let config = || small_config(mode);
    let (mut log, _) = open(dir.path(), config(), &c);
    let mut m = Model::default();
    for e in 0..6 {
        append_n(&log, &mut m, 10, e, 1000 * e as u64);
    }
    let segs = log.segments();
    assert!(segs.len() >= 5, "{segs:?}");
    let bases: Vec<i64> = m.batches.iter().map(|(b, _)| *b).collect();
    let last_seg = segs.last().unwrap();
    // Targets, each below the previous: inside the active segment; inside a sealed
    // one; exactly at a sealed segment's base; the first offset of the log.
    let in_active = *bases
        .iter()
        .rev()
        .find(|&&b| b > last_seg.base_offset)
        .unwrap();
    let sealed = &segs[segs.len() - 3];
    let in_sealed = *bases
        .iter()
        .find(|&&b| b > sealed.base_offset && b < sealed.next_offset)
        .unwrap();
    let at_base = segs[1].base_offset;
    for (epoch, target) in (10..).zip([in_active, in_sealed, at_base, 0]) {
        let ctx = format!("truncate to {target}");
        log.truncate_to(target).unwrap();
        m.truncate(target);
        assert_matches(&log, &m, &ctx);
        assert_eq!(log.recovery_point(), target, "{ctx}: durable");
        let segs = log.segments();
        assert!(segs[..segs.len() - 1].iter().all(|s| s.sealed), "{ctx}");
        let active = segs.last().unwrap();
        assert!(!active.sealed);
        assert_eq!(active.next_offset, target);
        for w in segs.windows(2) {
            assert_eq!(w[0].next_offset, w[1].base_offset, "{ctx}: dense");
        }
        for s in &segs {
            assert_eq!(
                fs::metadata(&s.log_path).unwrap().len(),
                s.size_bytes,
                "{ctx}"
            );
        }
        // Appends continue at the cut, in a newer epoch.
        append_n(&log, &mut m, 3, epoch, 50_000 + epoch as u64);
        assert_matches(&log, &m, &format!("{ctx}, then appends"));
        // Reads from every batch return exactly the batches from there.
        for (i, (b, _)) in m.batches.iter().enumerate() {
            let r = log.read(*b, 1, None).unwrap();
            assert!(r.data[..] == m.batches[i].1[..], "{ctx}: read at {b}");
        }
        // A crash (no close) and a clean close both reopen to exactly this.
        drop(log);
        let (l, report) = open(dir.path(), config(), &c);
        assert!(report.truncations.is_empty(), "{ctx}: {report:?}");
        assert!(!report.rebuilt_leader_epochs, "{ctx}: {report:?}");
        assert_matches(&l, &m, &format!("{ctx}, reopened"));
        l.close().unwrap();
        let (l, report) = open(dir.path(), config(), &c);
        assert!(report.truncations.is_empty(), "{ctx}: {report:?}");
        assert_matches(&l, &m, &format!("{ctx}, closed and reopened"));
        log = l;
    }
    // The time index of a segment cut while sealed still answers lookups.
    let (log, _) = open(dir.path(), config(), &c);
    assert!(log.offset_for_timestamp(0).unwrap().is_some());
}

fn truncation_refuses_non_boundaries_and_out_of_range(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut m = Model::default();
    for i in 0..40 {
        let mut b = make_batch(3, 50, i, 1000);
        let info = log.append(&mut b, 1).unwrap();
        m.push(info.first_offset, b);
    }
    let segs = log.segments();
    let files = |dir: &Path| {
        let mut v: Vec<(String, u64)> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = files(dir.path());
    let leo = log.log_end_offset();
    for (target, inside) in [
        (1, 0),
        (leo - 1, leo - 3),
        (segs[1].base_offset + 2, segs[1].base_offset),
    ] {
        match log.truncate_to(target) {
            Err(LogError::NotBatchBoundary {
                offset,
                batch_base,
                batch_next,
            }) => assert_eq!(
                (offset, batch_base, batch_next),
                (target, inside, inside + 3)
            ),
            other => panic!("truncate to {target}: {other:?}"),
        }
    }
    assert!(matches!(
        log.truncate_to(leo + 1),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        log.truncate_to(-1),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        files(dir.path()),
        before,
        "refused truncations change nothing"
    );
    assert_eq!(log.segments(), segs);
    assert_matches(&log, &m, "after refusals");
    // With the log start inside a batch: below it is out of range; the start itself
    // is a valid target (nothing visible stays, so no batch is split).
    log.advance_log_start(4).unwrap();
    assert!(matches!(
        log.truncate_to(3),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        log.truncate_to(5),
        Err(LogError::NotBatchBoundary { .. })
    ));
    log.truncate_to(6).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (4, 6));
    assert_eq!(epochs(&log), vec![(1, 4)]);
    log.truncate_to(4).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (4, 4));
    assert!(epochs(&log).is_empty());
    assert_eq!(log.segments().len(), 1);
    assert!(log.read(4, 100, None).unwrap().data.is_empty());
}

fn replicated_appends_keep_the_leaders_offsets_and_epochs(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut m = Model::default();
    // One fetch: three batches, two epochs.
    let fetched = [
        leader_batch(0, 1, 3, 40, 1, 1000),
        leader_batch(3, 1, 2, 40, 2, 1001),
        leader_batch(5, 4, 1, 40, 3, 5000),
    ];
    let mut buf = fetched.concat();
    let info = log.append_replicated(&mut buf).unwrap();
    assert_eq!(
        (info.first_offset, info.last_offset, info.log_end_offset),
        (0, 5, 6)
    );
    assert_eq!((info.record_count, info.max_timestamp), (6, 5000));
    assert!(!info.duplicate && info.log_append_time.is_none());
    assert!(buf == fetched.concat(), "nothing is rewritten");
    for (b, v) in [(0, &fetched[0]), (3, &fetched[1]), (5, &fetched[2])] {
        m.push(b, v.clone());
    }
    assert_matches(&log, &m, "first fetch");
    assert_eq!(epochs(&log), vec![(1, 0), (4, 5)]);
    // Many more, rolling segments as appends do.
    let mut epoch = 4;
    for i in 0..60u64 {
        if i % 17 == 16 {
            epoch += 3;
        }
        let base = m.end();
        let b = leader_batch(
            base,
            epoch,
            1 + (i % 3) as usize,
            80,
            10 + i,
            2000 + i as i64,
        );
        log.append_replicated(&mut b.clone()).unwrap();
        m.push(base, b);
    }
    assert!(log.segments().len() > 3);
    assert_matches(&log, &m, "many fetches");
    drop(log);
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(
        report.truncations.is_empty() && !report.rebuilt_leader_epochs,
        "{report:?}"
    );
    assert_matches(&log, &m, "reopened");
    // The leader path continues the same log.
    append_n(&log, &mut m, 2, epoch + 1, 900);
    assert_matches(&log, &m, "then as leader");
}

fn replicated_appends_must_continue_the_log(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut m = Model::default();
    append_n(&log, &mut m, 3, 2, 0);
    let (leo, size) = (log.log_end_offset(), log.size_bytes());
    let unchanged = |log: &Log| {
        assert_eq!((log.log_end_offset(), log.size_bytes()), (leo, size));
        assert!(read_all(log, 0) == m.bytes());
    };
    // Behind the log end (an overlap). Ahead of it is a gap the leader's cleaner left,
    // and is taken (below).
    for base in [leo - 1, 0] {
        match log.append_replicated(&mut leader_batch(base, 2, 1, 10, 1, 0)) {
            Err(LogError::UnexpectedAppendOffset { expected, found }) => {
                assert_eq!((expected, found), (leo, base))
            }
            other => panic!("base {base}: {other:?}"),
        }
        unchanged(&log);
    }
    // An overlap between two batches of one fetch.
    let mut two = [
        leader_batch(leo, 2, 2, 10, 1, 0),
        leader_batch(leo + 1, 2, 1, 10, 2, 0),
    ]
    .concat();
    assert!(matches!(
        log.append_replicated(&mut two),
        Err(LogError::UnexpectedAppendOffset { expected, found }) if expected == leo + 2 && found == leo + 1
    ));
    unchanged(&log);
    // A damaged batch (the CRC covers the records) and a torn one.
    let mut bad = leader_batch(leo, 2, 2, 10, 1, 0);
    let n = bad.len();
    bad[n - 3] ^= 0xFF;
    assert!(matches!(
        log.append_replicated(&mut bad),
        Err(LogError::InvalidBatch(_))
    ));
    let mut torn = leader_batch(leo, 2, 2, 10, 1, 0);
    torn.truncate(torn.len() - 1);
    assert!(matches!(
        log.append_replicated(&mut torn),
        Err(LogError::InvalidBatch(_))
    ));
    assert!(matches!(
        log.append_replicated(&mut []),
        Err(LogError::EmptyAppend)
    ));
    unchanged(&log);
    assert_eq!(epochs(&log), vec![(2, 0)]);

    // Gaps (a compacted leader's log): after the log end and between two batches of
    // one fetch. Offsets in a gap read as the next batch; the log reopens as it was.
    let gap = [
        leader_batch(leo + 4, 2, 2, 10, 1, 0),
        leader_batch(leo + 9, 2, 1, 10, 2, 0),
    ];
    let info = log.append_replicated(&mut gap.concat()).unwrap();
    assert_eq!(
        (info.first_offset, info.log_end_offset),
        (leo + 4, leo + 10)
    );
    for (from, want) in [(leo, &gap[0]), (leo + 3, &gap[0]), (leo + 7, &gap[1])] {
        let r = log.read(from, 1, None).unwrap();
        assert!(r.data[..] == want[..], "read at {from}");
    }
    drop(log);
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(log.log_end_offset(), leo + 10);
    let mut want = m.bytes();
    want.extend(gap.iter().cloned());
    assert!(read_all(&log, 0) == want);
}

/// An idempotent producer's batch of `n` records.
fn pbatch(pid: i64, seq: i32, n: usize) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            key: Some(Bytes::from(format!("p{pid}-s{}", seq as usize + i))),
            ..NewRecord::value(vec![b'v'; 100], NOW)
        })
        .collect();
    batch(
        &records,
        Compression::None,
        Some(ProducerFields {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
        }),
    )
    .to_vec()
}

fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".snapshot")?.parse().ok()
        })
        .collect();
    v.sort();
    v
}

fn replicated_producer_batches_update_the_state_without_checks(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    // Two batches of one producer in one fetch, with a sequence gap the leader
    // accepted (its state had expired, say): a follower does not check.
    let mut a = pbatch(7, 0, 2);
    strata_proto::batch::set_base_offset(&mut a, 0);
    let mut b = pbatch(7, 10, 3);
    strata_proto::batch::set_base_offset(&mut b, 2);
    let mut fetched = [a, b.clone()].concat();
    log.append_replicated(&mut fetched).unwrap();
    let e = log.producer_entry(7).unwrap();
    assert_eq!((e.last_sequence(), e.last_offset()), (12, 4));
    // Once this replica leads, a retry of the batch the old leader accepted is a
    // duplicate: the producer state lives in the log.
    let info = log.append(&mut pbatch(7, 10, 3), 5).unwrap();
    assert!(info.duplicate);
    assert_eq!((info.first_offset, info.last_offset), (2, 4));
    let info = log.append(&mut pbatch(7, 13, 1), 5).unwrap();
    assert!(!info.duplicate);
    assert_eq!(info.first_offset, 5);
}

fn producer_state_follows_truncation(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    // Sequences 0..=5, one record each at offsets 0..=5; rolls leave snapshots at 2
    // and 4.
    for seq in 0..6 {
        let info = log.append(&mut pbatch(1, seq, 1), 0).unwrap();
        assert_eq!(info.first_offset, seq as i64);
        if seq == 1 || seq == 3 {
            log.force_roll().unwrap();
        }
    }
    assert_eq!(snapshot_offsets(dir.path()), vec![2, 4]);
    log.truncate_to(3).unwrap();
    assert_eq!(
        snapshot_offsets(dir.path()),
        vec![2],
        "the snapshot above the cut describes batches that are gone"
    );
    let e = log.producer_entry(1).unwrap();
    assert_eq!((e.last_sequence(), e.last_offset()), (2, 2));
    // The batch above the cut is no longer a duplicate: it is appended again, at 3.
    drop(log);
    let (log, _) = open(dir.path(), small_config(mode), &c);
    assert_eq!(
        log.producer_entry(1).unwrap().last_sequence(),
        2,
        "after a reopen"
    );
    let info = log.append(&mut pbatch(1, 3, 1), 1).unwrap();
    assert!(!info.duplicate);
    assert_eq!(info.first_offset, 3);
    // The batch below it still is.
    let info = log.append(&mut pbatch(1, 2, 1), 1).unwrap();
    assert!(info.duplicate);
    assert_eq!(info.first_offset, 2);
    // And sequence 5 would be a gap now.
    assert!(matches!(
        log.append(&mut pbatch(1, 5, 1), 1),
        Err(LogError::Producer(_))
    ));
    // Truncating everything forgets the producer (its batches are gone; no snapshot at
    // or below 0 holds it).
    log.truncate_to(0).unwrap();
    assert!(log.producer_entry(1).is_none());
    assert!(snapshot_offsets(dir.path()).is_empty());
}

fn truncate_fully_and_start_at_restarts_empty(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    for seq in 0..30 {
        log.append(&mut pbatch(3, seq, 1), 2).unwrap();
        if seq % 10 == 9 {
            log.force_roll().unwrap();
        }
    }
    assert!(log.segments().len() > 2 && !snapshot_offsets(dir.path()).is_empty());
    for start in [45, 7] {
        log.truncate_fully_and_start_at(start).unwrap();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (start, start)
        );
        assert_eq!(log.recovery_point(), start);
        let segs = log.segments();
        assert_eq!(segs.len(), 1);
        assert_eq!((segs[0].base_offset, segs[0].size_bytes), (start, 0));
        assert!(epochs(&log).is_empty() && log.producer_state().is_empty());
        assert!(snapshot_offsets(dir.path()).is_empty());
        assert!(log.read(start, 100, None).unwrap().data.is_empty());
        assert!(matches!(
            log.read(start - 1, 100, None),
            Err(LogError::OffsetOutOfRange { .. })
        ));
    }
    // A follower continues from the leader's batches.
    let b = leader_batch(7, 9, 2, 30, 1, 0);
    log.append_replicated(&mut b.clone()).unwrap();
    assert_eq!(epochs(&log), vec![(9, 7)]);
    drop(log);
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(
        report.truncations.is_empty() && !report.rebuilt_leader_epochs,
        "{report:?}"
    );
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (7, 9));
    assert!(read_all(&log, 7) == vec![b]);
    assert_eq!(epochs(&log), vec![(9, 7)]);
}

fn a_moving_log_start_moves_the_first_epoch_entry(mode: IoMode) {
    let dir = tempdir(mode);
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut m = Model::default();
    for e in 0..4 {
        append_n(&log, &mut m, 10, e, 100 * e as u64);
    }
    // Into epoch 1's batches (20..40): epoch 0 goes, epoch 1 starts at the new start.
    log.advance_log_start(25).unwrap();
    assert_eq!(epochs(&log), vec![(1, 25), (2, 40), (3, 60)]);
    assert_eq!(
        log.end_offset_for_epoch(0),
        Some((0, 25)),
        "below the first epoch"
    );
    drop(log);
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(!report.rebuilt_leader_epochs, "{report:?}");
    assert_eq!(epochs(&log), vec![(1, 25), (2, 40), (3, 60)]);
    // Retention deleting whole segments does the same.
    log.set_config(LogConfig {
        retention: strata_log::RetentionLimits {
            ms: None,
            bytes: Some(1),
        },
        ..small_config(mode)
    });
    let out = log.apply_retention(&mut |_| true).unwrap();
    assert!(!out.deleted.is_empty());
    let start = log.log_start_offset();
    let want: Vec<(i32, i64)> = {
        let mut c = strata_log::LeaderEpochCache::from_entries(
            [(1, 25), (2, 40), (3, 60)]
                .map(|(epoch, start_offset)| strata_log::EpochEntry {
                    epoch,
                    start_offset,
                })
                .to_vec(),
        )
        .unwrap();
        c.truncate_from_start(start);
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    };
    assert_eq!(epochs(&log), want);
    assert_eq!(want[0].1, start);
}

both_modes!(
    an_unsynced_epoch_assignment_lost_with_the_checkpoint_is_recovered,
    epoch_cache_follows_appends_and_survives_reopen,
    a_missing_damaged_or_inconsistent_epoch_checkpoint_is_rebuilt,
    truncation_across_segment_boundaries,
    truncation_refuses_non_boundaries_and_out_of_range,
    replicated_appends_keep_the_leaders_offsets_and_epochs,
    replicated_appends_must_continue_the_log,
    replicated_producer_batches_update_the_state_without_checks,
    producer_state_follows_truncation,
    truncate_fully_and_start_at_restarts_empty,
    a_moving_log_start_moves_the_first_epoch_entry,
);

/// Direct mode: truncating inside the active segment, inside the tail buffer's windows
/// and before them, and at the segment's base, leaves a file that ends exactly at the
/// cut; reads, appends (whose first block is reloaded from the file) and a reopen all
/// see exactly the log.
#[test]
fn truncation_into_the_active_segment_in_direct_mode_is_exact() {
    let dir = tempdir(IoMode::Direct);
    let c = clock();
    let config = || LogConfig {
        segment_bytes: 1 << 20,
        // Batches are stamped in 1970: no time-based roll.
        segment_ms: i64::MAX,
        index_interval_bytes: 512,
        tail_cache_bytes: 8 * 1024,
        ..base_config(IoMode::Direct)
    };
    let (mut log, _) = open(dir.path(), config(), &c);
    assert_eq!(
        log.io_mode(),
        IoMode::Direct,
        "the target dir takes O_DIRECT"
    );
    let mut m = Model::default();
    let mut epoch = 0;
    let append = |log: &Log, m: &mut Model, n: usize, epoch: i32| {
        for i in 0..n {
            // About 700 bytes: windows of 4 KiB switch every few appends.
            let mut b = make_batch(1 + i % 3, 200 + (i * 37) % 300, m.end() as u64, 1000);
            let info = log.append(&mut b, epoch).unwrap();
            m.push(info.first_offset, b);
        }
    };
    append(&log, &mut m, 40, epoch);
    assert_eq!(log.segments().len(), 1, "all in the active segment");
    let bases: Vec<i64> = m.batches.iter().map(|(b, _)| *b).collect();
    // Two batches back (inside the windows), then far back (before them), then the
    // segment's base.
    for target in [bases[bases.len() - 2], bases[5], 0] {
        let ctx = format!("truncate to {target}");
        log.truncate_to(target).unwrap();
        m.truncate(target);
        let seg = log.segments().last().unwrap().clone();
        assert_eq!(
            fs::metadata(&seg.log_path).unwrap().len(),
            seg.size_bytes,
            "{ctx}: the file ends at the cut, padding included"
        );
        assert_matches(&log, &m, &ctx);
        epoch += 1;
        append(&log, &mut m, 15, epoch);
        assert_matches(&log, &m, &format!("{ctx}, then appends"));
        // Every batch read alone, and reads that cross the cut.
        for (b, v) in &m.batches {
            let r = log.read(*b, 1, None).unwrap();
            assert!(r.data[..] == v[..], "{ctx}: read at {b}");
        }
        let all = m.bytes().concat();
        assert_eq!(log.segments().len(), 1, "{ctx}: still one segment");
        let r = log.read(0, all.len(), None).unwrap();
        assert_eq!(r.data.len(), all.len(), "{ctx}: one read of everything");
        assert!(r.data[..] == all[..], "{ctx}: one read of everything");
        drop(log);
        let (l, report) = open(dir.path(), config(), &c);
        assert!(report.truncations.is_empty(), "{ctx}: {report:?}");
        assert_matches(&l, &m, &format!("{ctx}, reopened"));
        assert_eq!(l.io_mode(), IoMode::Direct);
        log = l;
    }
}
