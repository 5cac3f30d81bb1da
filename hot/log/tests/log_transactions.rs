//! Transactions in the partition log (KIP-98): transactional batches open a producer's
//! transaction, markers end it, the last stable offset stays at the first offset of the
//! oldest transaction not yet stable, and ABORTs are indexed per segment (`.txnindex`)
//! so a read_committed fetch gets the aborted transactions of its range. All of it
//! survives a clean close, a crash that loses the index files, a truncation and
//! retention.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use std::collections::BTreeMap;
use strata_log::txn_index::AbortedTxn;

use strata_log::{
    CompactionConfig, IoMode, Log, LogConfig, LogError, ManualClock, OffsetMap, ProducerError,
    RetentionLimits, SLOT_BYTES,
};
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::control::{Marker, MarkerKind};
use strata_proto::{Compression, ErrorCode};

const NOW: i64 = 1_700_000_000_000;

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(NOW))
}

/// A producer's batch of `n` records; transactional when `txn`.
fn pbatch(pid: i64, epoch: i16, seq: i32, n: usize, txn: bool) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            key: Some(Bytes::from(format!("p{pid}-{}", seq as usize + i))),
            ..NewRecord::value(vec![b'v'; 200], NOW)
        })
        .collect();
    let mut b = batch(
        &records,
        Compression::None,
        Some(ProducerFields {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        }),
    )
    .to_vec();
    if txn {
        strata_proto::batch::set_transactional(&mut b);
    }
    b
}

fn marker(pid: i64, epoch: i16, kind: MarkerKind) -> Marker {
    Marker {
        kind,
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch: 0,
        timestamp: NOW,
    }
}

fn txn_config(mode: IoMode) -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        ..small_config(mode)
    }
}

/// Producer 1 commits, producer 2 aborts, producer 3 is left open: returns
/// (first offset of 2's transaction, 2's marker, first offset of 3's transaction).
fn three_transactions(log: &Log) -> (i64, i64, i64) {
    log.append(&mut pbatch(1, 0, 0, 2, true), 0).unwrap();
    let first2 = log
        .append(&mut pbatch(2, 0, 0, 3, true), 0)
        .unwrap()
        .first_offset;
    log.append(&mut pbatch(1, 0, 2, 2, true), 0).unwrap();
    log.append(&mut pbatch(9, 0, 0, 1, false), 0).unwrap();
    log.append(&mut pbatch(2, 0, 3, 2, true), 0).unwrap();
    log.append_marker(&marker(1, 0, MarkerKind::Commit), 0)
        .unwrap();
    let abort = log
        .append_marker(&marker(2, 0, MarkerKind::Abort), 0)
        .unwrap()
        .first_offset;
    let first3 = log
        .append(&mut pbatch(3, 0, 0, 2, true), 0)
        .unwrap()
        .first_offset;
    log.append(&mut pbatch(9, 0, 1, 4, false), 0).unwrap();
    (first2, abort, first3)
}

fn lso_and_aborts(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let (log, _) = open(dir.path(), txn_config(mode), &clock);
    let (first2, abort, first3) = three_transactions(&log);
    let leo = log.log_end_offset();
    assert!(log.segments().len() > 2, "the transactions span segments");

    // Producer 1's transaction starts at 0: the LSO stays there until its marker is
    // below the high-water mark.
    assert_eq!(log.last_stable_offset(leo), first3);
    assert_eq!(
        log.last_stable_offset(abort),
        first2,
        "1's commit marker is below it, 2's abort not yet"
    );
    assert_eq!(log.last_stable_offset(3), 0);
    log.prune_stable_transactions(leo);
    assert_eq!(log.last_stable_offset(leo), first3);

    let expected = AbortedTxn {
        producer_id: 2,
        first_offset: first2,
        last_offset: abort,
        last_stable_offset: abort + 1,
    };
    // Kafka's entry: the LSO after the abort is where the oldest still-open
    // transaction starts (none was open then: just past the marker).
    assert_eq!(log.aborted_transactions(0, leo), vec![expected]);
    assert_eq!(log.aborted_transactions(first2, first2 + 1), vec![expected]);
    assert_eq!(log.aborted_transactions(abort, leo), vec![expected]);
    assert_eq!(log.aborted_transactions(abort + 1, leo), vec![]);
    assert_eq!(
        log.aborted_transactions(0, first2),
        vec![],
        "starts at the upper bound"
    );

    // A clean close and reopen.
    log.close().unwrap();
    let (log, _) = open(dir.path(), txn_config(mode), &clock);
    assert_eq!(log.aborted_transactions(0, leo), vec![expected]);
    assert_eq!(
        log.last_stable_offset(leo),
        first3,
        "3's transaction is still open"
    );

    // A crash that lost every aborted-transaction index and every producer snapshot:
    // recovery rebuilds both from the batches.
    drop(log);
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if name.ends_with(".txnindex") || name.ends_with(".snapshot") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let (log, _) = open(dir.path(), txn_config(mode), &clock);
    assert_eq!(log.aborted_transactions(0, leo), vec![expected]);
    assert_eq!(log.last_stable_offset(leo), first3);
    assert_eq!(
        log.producer_entry(3).unwrap().current_txn_first_offset(),
        Some(first3)
    );

    // A truncation below the abort marker takes the entry, and 2's transaction is
    // open again.
    log.truncate_to(abort).unwrap();
    assert_eq!(log.aborted_transactions(0, abort), vec![]);
    assert_eq!(log.last_stable_offset(abort), first2);
    log.prune_stable_transactions(abort);
    assert_eq!(log.last_stable_offset(abort), first2);
    assert_eq!(
        log.producer_entry(2).unwrap().current_txn_first_offset(),
        Some(first2)
    );
    log.close().unwrap();
    let (log, _) = open(dir.path(), txn_config(mode), &clock);
    assert_eq!(log.aborted_transactions(0, abort), vec![]);
    assert_eq!(log.last_stable_offset(abort), first2);
}

fn what_transactions_refuse(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let (log, _) = open(dir.path(), txn_config(mode), &clock);
    log.append(&mut pbatch(1, 3, 0, 2, true), 0).unwrap();
    let leo = log.log_end_offset();
    // A non-transactional batch in the middle of the producer's transaction.
    let err = log.append(&mut pbatch(1, 3, 2, 1, false), 0).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::Producer(ProducerError::ExpectedTransactional { producer_id: 1 })
        ),
        "{err:?}"
    );
    assert_eq!(err.error_code(), ErrorCode::InvalidTxnState);
    // A marker from an older epoch.
    let err = log
        .append_marker(&marker(1, 2, MarkerKind::Commit), 0)
        .unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::InvalidProducerEpoch);
    // A producer may not write control batches itself.
    let mut control = marker(1, 3, MarkerKind::Commit).encode();
    let err = log.append(&mut control, 0).unwrap_err();
    assert!(matches!(err, LogError::ControlBatchFromProducer), "{err:?}");
    assert_eq!(err.error_code(), ErrorCode::InvalidRecord);
    assert_eq!(log.log_end_offset(), leo, "nothing refused was appended");
    // A marker for a transaction that wrote nothing here is taken (the coordinator
    // sends one to every partition the transaction added).
    log.append_marker(&marker(1, 3, MarkerKind::Commit), 0)
        .unwrap();
    log.append_marker(&marker(4, 0, MarkerKind::Abort), 0)
        .unwrap();
    let hw = log.log_end_offset();
    assert_eq!(log.last_stable_offset(hw), hw);
    let aborts = log.aborted_transactions(0, hw);
    assert_eq!(aborts.len(), 1);
    assert_eq!((aborts[0].producer_id, aborts[0].first_offset), (4, hw - 1));
    // A producer with an open transaction does not expire.
    log.append(&mut pbatch(5, 0, 0, 1, true), 0).unwrap();
    clock.advance(10 * 86_400_000);
    log.checkpoint().unwrap();
    assert!(log.producer_entry(5).is_some());
}

fn retention_takes_the_index_with_its_segment(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let (log, _) = open(dir.path(), txn_config(mode), &clock);
    log.append(&mut pbatch(2, 0, 0, 3, true), 0).unwrap();
    log.append_marker(&marker(2, 0, MarkerKind::Abort), 0)
        .unwrap();
    for i in 0..20 {
        log.append(&mut pbatch(9, 0, i * 2, 2, false), 0).unwrap();
    }
    let count = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".txnindex"))
            .count()
    };
    assert_eq!(count(), 1);
    log.set_config(LogConfig {
        retention: RetentionLimits {
            bytes: Some(1),
            ms: None,
        },
        ..txn_config(mode)
    });
    log.apply_retention(&mut |_| true).unwrap();
    assert_eq!(count(), 0);
    assert_eq!(
        log.aborted_transactions(log.log_start_offset(), log.log_end_offset()),
        vec![]
    );
}

/// (producer id, transactional, control) of a batch.
type BatchKind = (i64, bool, bool);

/// A keyed batch of one record `key` = `value` from `pid`; transactional when `txn`.
fn keyed(pid: i64, seq: i32, key: &str, value: &str, txn: bool) -> Vec<u8> {
    let records = [NewRecord {
        key: Some(Bytes::from(key.to_string())),
        ..NewRecord::value(format!("{value}-{}", "y".repeat(100)), NOW)
    }];
    let mut b = batch(
        &records,
        Compression::None,
        Some(ProducerFields {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
        }),
    )
    .to_vec();
    if txn {
        strata_proto::batch::set_transactional(&mut b);
    }
    b
}

/// What a read_committed consumer reading the whole log keeps, latest per key (Kafka's
/// consumer: a producer's batches from an aborted transaction's first offset up to its
/// marker are dropped, control batches skipped); and the producers and kinds of the
/// batches still in the log holding records: (producer, transactional, control). (A
/// producer's last batch stays as an empty header, as Kafka keeps it.)
fn committed_view(log: &Log) -> (BTreeMap<String, String>, Vec<BatchKind>) {
    let end = log.log_end_offset();
    let aborted = log.aborted_transactions(log.log_start_offset(), end);
    let mut latest = BTreeMap::new();
    let mut batches = Vec::new();
    for bytes in read_all(log, log.log_start_offset()) {
        let (b, _) = strata_proto::batch::RecordBatch::parse(&bytes).unwrap();
        let h = *b.header();
        if h.record_count > 0 {
            batches.push((h.producer_id, h.is_transactional(), h.is_control()));
        }
        if h.is_control() {
            continue;
        }
        let dropped = h.is_transactional()
            && aborted.iter().any(|a| {
                a.producer_id == h.producer_id
                    && a.first_offset <= h.base_offset
                    && h.base_offset < a.last_offset
            });
        if dropped {
            continue;
        }
        for r in b.records().unwrap().iter() {
            let r = r.unwrap();
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            latest.insert(
                String::from_utf8(r.key.unwrap().to_vec()).unwrap(),
                v.split('-').next().unwrap().to_string(),
            );
        }
    }
    (latest, batches)
}

fn cleaning_removes_aborted_data_then_the_markers(mode: IoMode) {
    const RETENTION: i64 = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let config = LogConfig {
        segment_bytes: 4096,
        compaction: Some(CompactionConfig {
            delete_retention_ms: RETENTION,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio_ppm: 0,
        }),
        ..small_config(mode)
    };
    let (log, _) = open(dir.path(), config.clone(), &clock);
    // Producer 1 commits, producer 2 aborts (overwriting the same keys, so a cleaner
    // that took its records for values would drop 1's), producer 3 writes plain records.
    let mut seq = [0i32; 4];
    for round in 0..6 {
        for k in 0..5 {
            let key = format!("k{k}");
            let s = seq[1];
            seq[1] += 1;
            log.append(&mut keyed(1, s, &key, &format!("c{round}"), true), 0)
                .unwrap();
            let s = seq[2];
            seq[2] += 1;
            log.append(&mut keyed(2, s, &key, &format!("a{round}"), true), 0)
                .unwrap();
        }
        let s = seq[3];
        seq[3] += 1;
        log.append(
            &mut keyed(3, s, &format!("p{round}"), &format!("p{round}"), false),
            0,
        )
        .unwrap();
        log.append_marker(&marker(1, 0, MarkerKind::Commit), 0)
            .unwrap();
        log.append_marker(&marker(2, 0, MarkerKind::Abort), 0)
            .unwrap();
    }
    log.force_roll().unwrap();
    let (view, batches) = committed_view(&log);
    assert_eq!(view.get("k3").map(String::as_str), Some("c5"));
    assert!(batches.iter().any(|&(p, t, c)| p == 2 && t && !c));
    let aborts_before = log.aborted_transactions(0, log.log_end_offset()).len();
    assert_eq!(aborts_before, 6);

    let clean = |now: i64| {
        log.clean(
            &mut OffsetMap::with_memory(SLOT_BYTES * 1000),
            now,
            log.log_end_offset(),
            &mut |_| {},
        )
        .unwrap()
    };
    // Pass 1: the aborted data goes, its markers stay (with their index entries: the
    // pass removed data of theirs); each key keeps its latest committed value.
    let out = clean(NOW);
    assert!(out.records_removed > 0, "{out:?}");
    let (after, batches) = committed_view(&log);
    assert_eq!(after, view, "what read_committed sees is unchanged");
    assert!(
        !batches.iter().any(|&(p, _, c)| p == 2 && !c),
        "no data batch of the aborted transactions is left: {batches:?}"
    );
    let aborts = batches.iter().filter(|&&(p, _, c)| p == 2 && c).count();
    assert_eq!(aborts, 6, "the ABORT markers stay this pass");
    assert_eq!(log.aborted_transactions(0, log.log_end_offset()).len(), 6);
    // Only the last round's committed data remains of producer 1 (the keys were
    // overwritten), so only its COMMIT marker must stay; the others may go once their
    // horizon has passed.
    let reopen = |log: Log| {
        drop(log);
        open(dir.path(), config.clone(), &clock).0
    };
    let log = reopen(log);
    assert_eq!(committed_view(&log).0, view, "the same after a crash");
    assert_eq!(log.aborted_transactions(0, log.log_end_offset()).len(), 6);
    let clean = |log: &Log, now: i64| {
        log.clean(
            &mut OffsetMap::with_memory(SLOT_BYTES * 1000),
            now,
            log.log_end_offset(),
            &mut |_| {},
        )
        .unwrap()
    };
    // Pass 2: nothing of the aborted transactions is left, so their markers may go:
    // they get their delete horizon, and stay until it passes.
    clean(&log, NOW + 1);
    let markers = |log: &Log| {
        let (_, b) = committed_view(log);
        (
            b.iter().filter(|&&(p, _, c)| p == 2 && c).count(),
            b.iter().filter(|&&(p, _, c)| p == 1 && c).count(),
        )
    };
    assert_eq!(markers(&log).0, 6, "within delete.retention.ms");
    // Pass 3, past the horizon: the ABORT markers and their entries are gone (the last
    // one stays as an empty batch: producer 2's last batch); COMMIT markers of
    // transactions with no data left are gone, the last one's stays.
    clean(&log, NOW + 1 + RETENTION + 1);
    let (aborts, commits) = markers(&log);
    assert!(aborts <= 1, "{aborts} ABORT markers left");
    assert!(commits <= 1, "{commits} COMMIT markers left");
    let (view_after, batches) = committed_view(&log);
    assert_eq!(view_after, view);
    assert!(
        batches.iter().any(|&(p, _, c)| p == 1 && c),
        "the last commit's marker stays"
    );
    let left = log.aborted_transactions(0, log.log_end_offset());
    assert!(left.is_empty(), "entries left: {left:?}");
    let log = reopen(log);
    assert_eq!(committed_view(&log).0, view);
    assert!(log.aborted_transactions(0, log.log_end_offset()).is_empty());
    // A pending index without its swap (a pass that had not committed) is removed.
    let stray = dir
        .path()
        .join(format!("{:020}.txnindex.pending", log.log_start_offset()));
    std::fs::write(&stray, [0u8; 34]).unwrap();
    let log = reopen(log);
    assert!(!stray.exists());
    assert_eq!(committed_view(&log).0, view);
}

both_modes!(
    lso_and_aborts,
    what_transactions_refuse,
    retention_takes_the_index_with_its_segment,
    cleaning_removes_aborted_data_then_the_markers
);
