//! Idempotent producers: a retried batch is answered with its original offsets and not
//! appended again, out-of-order and fenced batches are refused without changing the log,
//! and all of it survives a clean close, a crash, a damaged snapshot, a truncated tail,
//! and retention.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use strata_log::IoMode;
use strata_log::{
    AppendInfo, Log, LogConfig, LogError, ManualClock, ProducerError, RetentionLimits,
};
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::{Compression, ErrorCode};

const NOW: i64 = 1_700_000_000_000;

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(NOW))
}

/// An idempotent producer's batch of `n` records of about 150 bytes, stamped `ts`.
fn pbatch(pid: i64, epoch: i16, seq: i32, n: usize, ts: i64) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            key: Some(Bytes::from(format!("p{pid}-s{}", seq as usize + i))),
            ..NewRecord::value(vec![b'v'; 150], ts)
        })
        .collect();
    batch(
        &records,
        Compression::None,
        Some(ProducerFields {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        }),
    )
    .to_vec()
}

/// One batch a producer sent, and what the log answered.
#[derive(Clone, Debug)]
struct Sent {
    pid: i64,
    epoch: i16,
    seq: i32,
    n: usize,
    info: AppendInfo,
}

impl Sent {
    /// The same batch again, as a client retry would send it.
    fn retry(&self, log: &Log) -> Result<AppendInfo, LogError> {
        log.append(&mut pbatch(self.pid, self.epoch, self.seq, self.n, NOW), 0)
    }
}

/// Appends the next batch of `pid` (epoch 0), continuing after `history`.
fn send(log: &Log, history: &mut Vec<Sent>, pid: i64, n: usize) -> Sent {
    let seq = history
        .iter()
        .rev()
        .find(|s| s.pid == pid)
        .map_or(0, |s| s.seq + s.n as i32);
    let info = log.append(&mut pbatch(pid, 0, seq, n, NOW), 0).unwrap();
    assert!(!info.duplicate);
    let sent = Sent {
        pid,
        epoch: 0,
        seq,
        n,
        info,
    };
    history.push(sent.clone());
    sent
}

/// Asserts that a retry of `sent` is answered as a duplicate with its original offsets,
/// and that the log did not change.
fn assert_duplicate(log: &Log, sent: &Sent) {
    let (leo, size) = (log.log_end_offset(), log.size_bytes());
    let info = sent.retry(log).unwrap();
    assert!(info.duplicate, "retry of {sent:?} was appended: {info:?}");
    assert_eq!(
        (info.first_offset, info.last_offset),
        (sent.info.first_offset, sent.info.last_offset),
        "retry of {sent:?}"
    );
    assert_eq!(info.max_timestamp, sent.info.max_timestamp);
    assert_eq!(info.record_count, 0);
    assert_eq!(info.log_end_offset, leo);
    assert_eq!((log.log_end_offset(), log.size_bytes()), (leo, size));
}

fn assert_out_of_order(result: Result<AppendInfo, LogError>) {
    match result {
        Err(e @ LogError::Producer(ProducerError::OutOfOrderSequence { .. })) => {
            assert_eq!(e.error_code(), ErrorCode::OutOfOrderSequenceNumber);
            assert!(!e.is_retriable());
        }
        other => panic!("expected OUT_OF_ORDER_SEQUENCE_NUMBER, got {other:?}"),
    }
}

/// The last `k` batches `pid` sent.
fn last_of(history: &[Sent], pid: i64, k: usize) -> Vec<Sent> {
    let mine: Vec<Sent> = history.iter().filter(|s| s.pid == pid).cloned().collect();
    mine[mine.len().saturating_sub(k)..].to_vec()
}

/// Every retry a client can make of `pid`'s batches deduplicates; older retries are out
/// of order; the next batch in sequence is accepted.
fn assert_dedups_recent(log: &Log, history: &mut Vec<Sent>, pid: i64) {
    let mine: Vec<Sent> = history.iter().filter(|s| s.pid == pid).cloned().collect();
    for s in last_of(history, pid, 5) {
        assert_duplicate(log, &s);
    }
    if mine.len() > 5 {
        let (leo, size) = (log.log_end_offset(), log.size_bytes());
        assert_out_of_order(mine[mine.len() - 6].retry(log));
        assert_eq!((log.log_end_offset(), log.size_bytes()), (leo, size));
    }
    let leo = log.log_end_offset();
    let next = send(log, history, pid, 1);
    assert_eq!(next.info.first_offset, leo);
}

fn snapshot_files(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".snapshot")?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v
}

fn snapshot_path(dir: &Path, offset: i64) -> std::path::PathBuf {
    dir.join(format!("{offset:020}.snapshot"))
}

fn a_retried_batch_gets_its_original_offsets_and_appends_nothing(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    log.append(&mut make_batch(2, 10, 1, NOW), 0).unwrap();
    let mut h = Vec::new();
    let a = send(&log, &mut h, 1, 3);
    assert_eq!((a.info.first_offset, a.info.last_offset), (2, 4));
    let b = send(&log, &mut h, 1, 2);
    assert_eq!((b.info.first_offset, b.info.last_offset), (5, 6));
    let stored = read_all(&log, 0);

    assert_duplicate(&log, &a);
    assert_duplicate(&log, &b);
    assert_eq!(read_all(&log, 0), stored, "nothing was written");
    let e = log.producer_entry(1).unwrap();
    assert_eq!((e.epoch(), e.last_sequence(), e.last_offset()), (0, 4, 6));

    // Batches without a producer id are never deduplicated.
    let plain = make_batch(1, 10, 2, NOW);
    let first = log.append(&mut plain.clone(), 0).unwrap();
    let again = log.append(&mut plain.clone(), 0).unwrap();
    assert!(!first.duplicate && !again.duplicate);
    assert_eq!(again.first_offset, first.first_offset + 1);
}

fn out_of_order_and_fenced_batches_are_refused_and_change_nothing(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    log.append(&mut pbatch(1, 1, 0, 2, NOW), 0).unwrap();
    let (leo, size) = (log.log_end_offset(), log.size_bytes());
    let unchanged = |log: &Log| {
        assert_eq!((log.log_end_offset(), log.size_bytes()), (leo, size));
        let e = log.producer_entry(1).unwrap();
        assert_eq!((e.epoch(), e.last_sequence(), e.last_offset()), (1, 1, 1));
    };

    // A gap: sequence 2 was expected.
    assert_out_of_order(log.append(&mut pbatch(1, 1, 5, 1, NOW), 0));
    unchanged(&log);
    // A new epoch must start at 0.
    assert_out_of_order(log.append(&mut pbatch(1, 2, 2, 1, NOW), 0));
    unchanged(&log);
    // A batch with a producer id must come alone (produce v3+).
    let mut two = pbatch(2, 0, 0, 1, NOW);
    two.extend_from_slice(&make_batch(1, 10, 3, NOW));
    let err = log.append(&mut two, 0).unwrap_err();
    assert!(matches!(
        err,
        LogError::ProducerBatchNotAlone { batches: 2 }
    ));
    assert_eq!(err.error_code(), ErrorCode::InvalidRecord);
    unchanged(&log);
    assert!(log.producer_entry(2).is_none());

    // The new epoch at 0 fences the old one.
    let bumped = log.append(&mut pbatch(1, 2, 0, 1, NOW), 0).unwrap();
    assert_eq!(bumped.first_offset, leo);
    let err = log.append(&mut pbatch(1, 1, 2, 1, NOW), 0).unwrap_err();
    assert!(matches!(
        err,
        LogError::Producer(ProducerError::InvalidProducerEpoch {
            epoch: 1,
            current: 2,
            ..
        })
    ));
    assert_eq!(err.error_code(), ErrorCode::InvalidProducerEpoch);
    assert_eq!(log.log_end_offset(), leo + 1);
}

fn producer_state_survives_close_and_open(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut h = Vec::new();
    for i in 0..30 {
        send(&log, &mut h, 1 + i % 3, 1 + i as usize % 3);
    }
    let leo = log.log_end_offset();
    log.close().unwrap();

    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert_eq!(report.producer_snapshot, Some(leo), "{report:?}");
    assert!(report.deleted_producer_snapshots.is_empty());
    for pid in 1..=3 {
        assert_dedups_recent(&log, &mut h, pid);
    }
    assert_out_of_order(log.append(&mut pbatch(1, 0, 1_000, 1, NOW), 0));
}

fn producer_state_survives_an_unclean_drop_by_replaying_the_tail(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut h = Vec::new();
    for _ in 0..3 {
        send(&log, &mut h, 1, 2);
    }
    log.force_roll().unwrap();
    let rolled_at = log.log_end_offset();
    // These two exist only in the log, after the last snapshot.
    for _ in 0..2 {
        send(&log, &mut h, 1, 2);
    }
    assert_eq!(snapshot_files(dir.path()), vec![rolled_at]);
    drop(log); // no close: no snapshot at the log end

    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert_eq!(report.producer_snapshot, Some(rolled_at));
    assert!(log.log_end_offset() > rolled_at);
    // The last five straddle the snapshot: three from it, two replayed.
    assert_dedups_recent(&log, &mut h, 1);

    // Many rolls, then a crash: still only the tail is replayed, and it is enough.
    for i in 0..40 {
        send(&log, &mut h, 1 + i % 2, 1);
    }
    drop(log);
    let (log, report) = open(dir.path(), small_config(mode), &c);
    let active_base = log.segments().last().unwrap().base_offset;
    assert_eq!(report.producer_snapshot, Some(active_base));
    assert_dedups_recent(&log, &mut h, 1);
    assert_dedups_recent(&log, &mut h, 2);
}

fn a_damaged_snapshot_is_ignored_and_the_state_rebuilt_from_the_log(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut h = Vec::new();
    for i in 0..40 {
        send(&log, &mut h, 1 + i % 2, 2);
    }
    log.close().unwrap();
    let snaps = snapshot_files(dir.path());
    assert!(
        snaps.len() >= 3,
        "rolls and close write snapshots: {snaps:?}"
    );
    let (newest, older) = (snaps[snaps.len() - 1], snaps[snaps.len() - 2]);
    // Flip a bit in the newest, tear the one before it.
    let p = snapshot_path(dir.path(), newest);
    let mut bytes = fs::read(&p).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x04;
    fs::write(&p, bytes).unwrap();
    let p = snapshot_path(dir.path(), older);
    let bytes = fs::read(&p).unwrap();
    fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();

    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert_eq!(report.deleted_producer_snapshots, vec![newest, older]);
    assert_eq!(report.producer_snapshot, Some(snaps[snaps.len() - 3]));
    assert_eq!(
        snapshot_files(dir.path()),
        snaps[..snaps.len() - 2].to_vec()
    );
    assert_dedups_recent(&log, &mut h, 1);
    assert_dedups_recent(&log, &mut h, 2);
    drop(log);

    // With every snapshot garbage, the whole log is replayed.
    for s in snapshot_files(dir.path()) {
        fs::write(snapshot_path(dir.path(), s), b"garbage").unwrap();
    }
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert_eq!(report.producer_snapshot, None);
    assert!(snapshot_files(dir.path()).is_empty());
    assert_dedups_recent(&log, &mut h, 1);
    assert_dedups_recent(&log, &mut h, 2);
}

fn a_snapshot_past_a_truncated_tail_is_discarded(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut h = Vec::new();
    for _ in 0..4 {
        send(&log, &mut h, 1, 1);
    }
    let leo = log.log_end_offset();
    let active = log.segments().last().unwrap().clone();
    log.close().unwrap();
    assert!(snapshot_files(dir.path()).contains(&leo));

    // Lose the last batch, as a torn write or a follower truncation would.
    let lost = h.pop().unwrap();
    let cut = active.size_bytes - pbatch(1, 0, lost.seq, lost.n, NOW).len() as u64;
    fs::OpenOptions::new()
        .write(true)
        .open(&active.log_path)
        .unwrap()
        .set_len(cut)
        .unwrap();

    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert_eq!(log.log_end_offset(), leo - 1);
    assert_eq!(report.deleted_producer_snapshots, vec![leo]);
    assert_eq!(
        log.producer_entry(1).unwrap().last_offset(),
        leo - 2,
        "the lost batch is forgotten"
    );
    // The producer's retry of the lost batch is appended, not answered from stale state.
    let info = lost.retry(&log).unwrap();
    assert!(!info.duplicate);
    assert_eq!(info.first_offset, leo - 1);
}

fn state_is_rebuilt_across_many_rolls_and_retention(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        segment_bytes: 2048,
        retention: RetentionLimits {
            ms: None,
            bytes: Some(8 * 1024),
        },
        ..small_config(mode)
    };
    let (log, _) = open(dir.path(), config.clone(), &c);
    let mut h = Vec::new();
    // Producer 9 writes once, early; retention will delete its batches.
    let early = send(&log, &mut h, 9, 2);
    for i in 0..200 {
        send(&log, &mut h, 1 + i % 3, 1 + i as usize % 4);
        if i % 10 == 9 {
            log.apply_retention(&mut |_| true).unwrap();
        }
    }
    let start = log.log_start_offset();
    assert!(
        start > early.info.last_offset,
        "retention passed producer 9"
    );
    let snaps = snapshot_files(dir.path());
    assert_eq!(
        snaps.iter().filter(|&&s| s < start).count(),
        usize::from(!snaps.contains(&start)),
        "only the newest snapshot at or below the log start is kept below it: {snaps:?} start {start}"
    );
    drop(log);

    let (log, report) = open(dir.path(), config, &c);
    assert!(report.producer_snapshot.is_some());
    for pid in 1..=3 {
        assert_dedups_recent(&log, &mut h, pid);
    }
    // Producer state outlives the batches (KIP-360): producer 9 is still known, so its
    // retry deduplicates (to offsets now below the log start) and a gap is refused.
    assert_duplicate(&log, &early);
    assert_out_of_order(log.append(&mut pbatch(9, 0, 5, 1, NOW), 0));
}

fn idle_producers_expire_when_a_snapshot_is_written(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        producer_expiration_ms: 60_000,
        ..small_config(mode)
    };
    assert_eq!(
        base_config(mode).producer_expiration_ms,
        86_400_000,
        "Kafka's producer.id.expiration.ms"
    );
    let (log, _) = open(dir.path(), config, &c);
    log.append(&mut pbatch(1, 0, 0, 1, NOW), 0).unwrap();
    c.advance(60_000);
    log.append(&mut pbatch(2, 0, 0, 1, NOW + 60_000), 0)
        .unwrap();
    assert!(
        log.producer_entry(1).is_some(),
        "expiry happens at snapshots"
    );
    log.force_roll().unwrap();
    assert!(
        log.producer_entry(1).is_none(),
        "idle for producer.id.expiration.ms"
    );
    assert!(log.producer_entry(2).is_some());
    // An expired producer is unknown, so any sequence is accepted.
    let info = log
        .append(&mut pbatch(1, 0, 57, 1, NOW + 60_000), 0)
        .unwrap();
    assert!(!info.duplicate);
    assert_eq!(log.producer_entry(1).unwrap().last_sequence(), 57);
}

both_modes!(
    a_retried_batch_gets_its_original_offsets_and_appends_nothing,
    out_of_order_and_fenced_batches_are_refused_and_change_nothing,
    producer_state_survives_close_and_open,
    producer_state_survives_an_unclean_drop_by_replaying_the_tail,
    a_damaged_snapshot_is_ignored_and_the_state_rebuilt_from_the_log,
    a_snapshot_past_a_truncated_tail_is_discarded,
    state_is_rebuilt_across_many_rolls_and_retention,
    idle_producers_expire_when_a_snapshot_is_written,
);
