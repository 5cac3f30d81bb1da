//! Log compaction against a model: random keyed writes (values, tombstones, several
//! idempotent producers and their retries), cleaner passes at random points with the
//! clock moving, reopens; after each step the log is read from every offset and checked
//! against what compaction may and may not remove.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use proptest::prelude::*;
use strata_log::{
    Clock, CompactionConfig, IoMode, Log, LogConfig, ManualClock, OffsetMap, SLOT_BYTES,
};
use strata_proto::Compression;
use strata_proto::batch;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};

const DELETE_RETENTION_MS: i64 = 10_000;

fn compacted(mode: IoMode, segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 256,
        tail_cache_bytes: 16 * 1024,
        compaction: Some(CompactionConfig {
            delete_retention_ms: DELETE_RETENTION_MS,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio_ppm: 0,
        }),
        ..base_config(mode)
    }
}

/// A record as read back: offset, key, value (`None`: a tombstone).
type Rec = (i64, Vec<u8>, Option<Vec<u8>>);

/// Every record of the log, in the order reads return them, and every batch's range.
fn read_records(log: &Log, from: i64) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut at = from;
    let end = log.log_end_offset();
    while at < end {
        let r = log.read(at, 64 * 1024, None).expect("read");
        assert!(!r.data.is_empty(), "nothing at {at} below the end {end}");
        assert!(r.next_offset > at);
        for b in batch::batches(&r.data) {
            let b = b.expect("whole batches");
            b.validate_crc().expect("crc");
            for rec in b.records().unwrap().iter() {
                let rec = rec.unwrap();
                if rec.offset >= from {
                    out.push((
                        rec.offset,
                        rec.key.unwrap().to_vec(),
                        rec.value.map(<[u8]>::to_vec),
                    ));
                }
            }
        }
        at = r.next_offset;
    }
    out
}

fn keyed_batch(
    records: &[(u8, Option<String>)],
    ts: i64,
    producer: Option<ProducerFields>,
) -> Vec<u8> {
    let recs: Vec<NewRecord> = records
        .iter()
        .map(|(k, v)| NewRecord {
            key: Some(Bytes::from(format!("key-{k}"))),
            value: v.clone().map(Bytes::from),
            headers: vec![],
            timestamp: ts,
        })
        .collect();
    batch(&recs, Compression::None, producer).to_vec()
}

fn clean(log: &Log, map: &mut OffsetMap, now: i64) -> strata_log::CleanOutcome {
    log.clean(map, now, log.log_end_offset(), &mut |_| {})
        .expect("clean")
}

fn updates_over_keys(mode: IoMode) {
    let dir = tempdir(mode);
    let clock = Arc::new(ManualClock::new(1_000_000));
    let (log, _) = open(dir.path(), compacted(mode, 8 * 1024), &clock);
    // 2,000 updates over 50 keys, 1 to 5 records a batch.
    let mut written: Vec<(i64, u8, String)> = Vec::new();
    let mut i = 0usize;
    while written.len() < 2000 {
        let n = 1 + i % 5;
        let recs: Vec<(u8, Option<String>)> = (0..n)
            .map(|j| ((((i * 7 + j * 13) % 50) as u8), Some(format!("v{i}-{j}"))))
            .collect();
        let info = log
            .append(&mut keyed_batch(&recs, 1_000_000, None), 1)
            .unwrap();
        for (j, (k, v)) in recs.into_iter().enumerate() {
            written.push((info.first_offset + j as i64, k, v.unwrap()));
        }
        i += 1;
    }
    log.force_roll().unwrap();
    let before = log.size_bytes();
    let end = log.log_end_offset();
    let mut map = OffsetMap::with_memory(SLOT_BYTES * 1000);
    let out = clean(&log, &mut map, 1_000_000);
    assert_eq!(out.cleaned_to, end, "{out:?}");
    assert_eq!(out.keys, 50);
    assert!(
        out.bytes_reclaimed() > 0 && out.records_removed > 1900,
        "{out:?}"
    );
    let after = log.size_bytes();
    assert!(after * 10 < before, "{before} -> {after} bytes");
    // Exactly the latest value of each key, at its original offset, in offset order.
    let mut latest: BTreeMap<u8, (i64, String)> = BTreeMap::new();
    for (o, k, v) in &written {
        latest.insert(*k, (*o, v.clone()));
    }
    let mut want: Vec<Rec> = latest
        .iter()
        .map(|(k, (o, v))| {
            (
                *o,
                format!("key-{k}").into_bytes(),
                Some(v.clone().into_bytes()),
            )
        })
        .collect();
    want.sort();
    let got = read_records(&log, 0);
    assert_eq!(got, want);
    // A read from inside a removed range gets the next surviving record.
    let survivors: BTreeSet<i64> = want.iter().map(|r| r.0).collect();
    for o in (0..end).step_by(37) {
        let next = survivors.range(o..).next().copied();
        assert_eq!(read_records(&log, o).first().map(|r| r.0), next, "from {o}");
    }
    // The log reopens as it was, and goes on taking appends.
    drop(log);
    let (log, report) = open(dir.path(), compacted(mode, 8 * 1024), &clock);
    assert!(
        report.truncations.is_empty() && report.deleted_segments.is_empty(),
        "{report:?}"
    );
    assert_eq!(read_records(&log, 0), want);
    assert_eq!(log.log_end_offset(), end);
    let info = log
        .append(&mut keyed_batch(&[(1, Some("again".into()))], 1, None), 1)
        .unwrap();
    assert_eq!(info.first_offset, end);
}

fn tombstones_go_after_delete_retention(mode: IoMode) {
    let dir = tempdir(mode);
    let clock = Arc::new(ManualClock::new(0));
    let (log, _) = open(dir.path(), compacted(mode, 4 * 1024), &clock);
    for i in 0..40u8 {
        log.append(
            &mut keyed_batch(&[(i % 4, Some(format!("v{i}")))], 5, None),
            1,
        )
        .unwrap();
    }
    // Key 0 and key 1 are deleted.
    let t = log
        .append(&mut keyed_batch(&[(0, None), (1, None)], 5, None), 1)
        .unwrap();
    log.force_roll().unwrap();
    let mut map = OffsetMap::with_memory(SLOT_BYTES * 100);
    clean(&log, &mut map, 1_000);
    let keys = |log: &Log| -> Vec<(Vec<u8>, bool)> {
        read_records(log, 0)
            .into_iter()
            .map(|(_, k, v)| (k, v.is_some()))
            .collect()
    };
    // The tombstones stay (their horizon is now 1,000 + delete.retention.ms), the
    // values of the deleted keys are gone.
    assert_eq!(
        keys(&log),
        vec![
            (b"key-2".to_vec(), true),
            (b"key-3".to_vec(), true),
            (b"key-0".to_vec(), false),
            (b"key-1".to_vec(), false),
        ]
    );
    let tombstones: Vec<i64> = read_records(&log, 0)
        .iter()
        .filter(|r| r.2.is_none())
        .map(|r| r.0)
        .collect();
    assert_eq!(tombstones, vec![t.first_offset, t.first_offset + 1]);
    // Not yet past the horizon: a pass keeps them.
    let c = log
        .cleanable(1_000 + DELETE_RETENTION_MS - 1, i64::MAX)
        .unwrap()
        .unwrap();
    assert!(!c.due(), "{c:?}");
    clean(&log, &mut map, 1_000 + DELETE_RETENTION_MS - 1);
    assert_eq!(keys(&log).len(), 4);
    // Past it: the log is due, and the pass removes them.
    let c = log
        .cleanable(1_000 + DELETE_RETENTION_MS, i64::MAX)
        .unwrap()
        .unwrap();
    assert!(c.due() && c.horizon_due, "{c:?}");
    let out = clean(&log, &mut map, 1_000 + DELETE_RETENTION_MS);
    assert_eq!(out.tombstones_removed, 2, "{out:?}");
    assert_eq!(
        keys(&log),
        vec![(b"key-2".to_vec(), true), (b"key-3".to_vec(), true)]
    );
    // The segment still ends where it did: the header of its last batch stayed.
    assert_eq!(log.log_end_offset(), t.last_offset + 1);
}

fn an_idempotent_producers_last_batch_keeps_its_header(mode: IoMode) {
    let dir = tempdir(mode);
    let clock = Arc::new(ManualClock::new(0));
    let (log, _) = open(dir.path(), compacted(mode, 4 * 1024), &clock);
    let fields = |seq| ProducerFields {
        producer_id: 77,
        producer_epoch: 0,
        base_sequence: seq,
    };
    let mut last = Vec::new();
    for seq in 0..5 {
        last = keyed_batch(&[(1, Some(format!("p{seq}")))], 5, Some(fields(seq)));
        log.append(&mut last.clone(), 1).unwrap();
    }
    // Later writes of the same key by another producer supersede all of them.
    for i in 0..30 {
        log.append(&mut keyed_batch(&[(1, Some(format!("x{i}")))], 5, None), 1)
            .unwrap();
    }
    log.force_roll().unwrap();
    let mut map = OffsetMap::with_memory(SLOT_BYTES * 100);
    clean(&log, &mut map, 100);
    assert_eq!(read_records(&log, 0).len(), 1);
    // The producer's retry of its last batch is still a duplicate, after a reopen too.
    let dup = log.append(&mut last.clone(), 1).unwrap();
    assert!(dup.duplicate && dup.first_offset == 4, "{dup:?}");
    drop(log);
    let (log, _) = open(dir.path(), compacted(mode, 4 * 1024), &clock);
    let dup = log.append(&mut last.clone(), 1).unwrap();
    assert!(dup.duplicate && dup.first_offset == 4, "{dup:?}");
    let next = log
        .append(
            &mut keyed_batch(&[(1, Some("p5".into()))], 5, Some(fields(5))),
            1,
        )
        .unwrap();
    assert!(!next.duplicate);
}

fn a_small_dedupe_buffer_cleans_in_several_passes(mode: IoMode) {
    let dir = tempdir(mode);
    let clock = Arc::new(ManualClock::new(0));
    let (log, _) = open(dir.path(), compacted(mode, 4 * 1024), &clock);
    // 300 keys, each written three times, in three rounds.
    for round in 0..3 {
        for k in 0..300u16 {
            let recs = [NewRecord {
                key: Some(Bytes::from(format!("key-{k}"))),
                value: Some(Bytes::from(format!("r{round}"))),
                headers: vec![],
                timestamp: 5,
            }];
            log.append(&mut batch(&recs, Compression::None, None).to_vec(), 1)
                .unwrap();
        }
    }
    log.force_roll().unwrap();
    let end = log.log_end_offset();
    // Room for 90 keys: a pass maps 90 records and cleans up to there.
    let mut map = OffsetMap::with_memory(SLOT_BYTES * 100);
    let mut passes = 0;
    loop {
        let out = clean(&log, &mut map, 10);
        passes += 1;
        assert!(out.keys <= 90, "{out:?}");
        if out.cleaned_to == end {
            break;
        }
        assert!(passes < 20, "no progress: {out:?}");
    }
    assert!(passes >= 10, "{passes} passes");
    let got = read_records(&log, 0);
    assert_eq!(got.len(), 300);
    assert!(got.iter().all(|r| r.2.as_deref() == Some(&b"r2"[..])));
}

both_modes!(
    updates_over_keys,
    tombstones_go_after_delete_retention,
    an_idempotent_producers_last_batch_keeps_its_header,
    a_small_dedupe_buffer_cleans_in_several_passes,
);

fn tempdir(_mode: IoMode) -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

// ---- the model ----

#[derive(Clone, Debug)]
enum Op {
    /// Records of (key, value or tombstone) from producer `p` (0: not idempotent).
    Write {
        p: u8,
        recs: Vec<(u8, bool)>,
    },
    /// A retry of producer `p`'s last batch: must be a duplicate.
    Retry {
        p: u8,
    },
    /// A cleaner pass `advance` ms later, with a map of `slots` slots, after rolling or
    /// not.
    Clean {
        advance: i64,
        slots: usize,
        roll: bool,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, prop::collection::vec((0u8..12, prop::bool::weighted(0.85)), 1..6))
            .prop_map(|(p, recs)| Op::Write { p, recs }),
        1 => (1u8..3).prop_map(|p| Op::Retry { p }),
        3 => (0i64..8_000, prop_oneof![Just(20usize), Just(1000)], any::<bool>())
            .prop_map(|(advance, slots, roll)| Op::Clean { advance, slots, roll }),
        1 => Just(Op::Reopen),
    ]
}

struct Model {
    /// Every record ever written: offset -> (key, value).
    records: BTreeMap<i64, (Vec<u8>, Option<Vec<u8>>)>,
    /// The highest cleaner checkpoint so far.
    cleaned_to: i64,
    /// When a pass first passed each tombstone (its offset below the checkpoint).
    passed_at: HashMap<i64, i64>,
    /// Each producer's next sequence and last batch.
    producers: HashMap<u8, (i32, Vec<u8>)>,
}

fn check(log: &Log, m: &Model, before: &BTreeSet<i64>, now: i64) -> BTreeSet<i64> {
    let got = read_records(log, log.log_start_offset());
    // Increasing offsets; each record is the one written there.
    for w in got.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "offsets increase: {} then {}",
            w[0].0,
            w[1].0
        );
    }
    for (o, k, v) in &got {
        let (mk, mv) = m.records.get(o).expect("a record that was written");
        assert!(mk == k && mv == v, "record at {o} changed");
    }
    let present: BTreeSet<i64> = got.iter().map(|r| r.0).collect();
    let mut latest: HashMap<&[u8], i64> = HashMap::new();
    for (o, (k, _)) in &m.records {
        latest.insert(k, *o);
    }
    for (o, (k, v)) in &m.records {
        let is_latest = latest[&k[..]] == *o;
        if *o >= m.cleaned_to {
            assert!(
                present.contains(o),
                "{o} is above the cleaned offset {}",
                m.cleaned_to
            );
        } else if is_latest && v.is_some() {
            assert!(present.contains(o), "{o} is its key's latest value");
        } else if !is_latest {
            let sup = latest[&k[..]];
            if sup < m.cleaned_to {
                assert!(
                    !present.contains(o),
                    "{o} is superseded by {sup}, both cleaned"
                );
            }
        }
        // A tombstone goes only once its delete horizon has passed.
        if v.is_none() && before.contains(o) && !present.contains(o) && is_latest {
            let passed = m.passed_at.get(o).copied().expect("passed by a pass");
            assert!(
                now >= passed + DELETE_RETENTION_MS,
                "tombstone {o} removed at {now}, first passed at {passed}"
            );
        }
    }
    // A read from any offset starts at the first record at or after it.
    for o in (log.log_start_offset()..log.log_end_offset()).step_by(3) {
        let first = read_records(log, o).first().map(|r| r.0);
        assert_eq!(first, present.range(o..).next().copied(), "read from {o}");
    }
    present
}

fn run(mode: IoMode, ops: Vec<Op>) {
    let dir = tempdir(mode);
    let clock = Arc::new(ManualClock::new(1_000_000));
    let config = compacted(mode, 2048);
    let (mut log, _) = open(dir.path(), config.clone(), &clock);
    let mut m = Model {
        records: BTreeMap::new(),
        cleaned_to: 0,
        passed_at: HashMap::new(),
        producers: HashMap::new(),
    };
    let mut present = BTreeSet::new();
    let mut seq = 0u32;
    for op in ops {
        match op {
            Op::Write { p, recs } => {
                let recs: Vec<(u8, Option<String>)> = recs
                    .into_iter()
                    .map(|(k, live)| {
                        seq += 1;
                        (k, live.then(|| format!("v{seq}")))
                    })
                    .collect();
                let fields = (p > 0).then(|| ProducerFields {
                    producer_id: p as i64,
                    producer_epoch: 0,
                    base_sequence: m.producers.get(&p).map_or(0, |x| x.0),
                });
                let b = keyed_batch(&recs, clock.now_ms(), fields);
                let info = log.append(&mut b.clone(), 1).unwrap();
                assert!(!info.duplicate);
                if p > 0 {
                    let next = fields.unwrap().base_sequence + recs.len() as i32;
                    m.producers.insert(p, (next, b));
                }
                for (j, (k, v)) in recs.into_iter().enumerate() {
                    let o = info.first_offset + j as i64;
                    m.records.insert(
                        o,
                        (format!("key-{k}").into_bytes(), v.map(String::into_bytes)),
                    );
                    present.insert(o);
                }
            }
            Op::Retry { p } => {
                if let Some((_, last)) = m.producers.get(&p) {
                    let r = log.append(&mut last.clone(), 1).unwrap();
                    assert!(r.duplicate, "producer {p}'s retry");
                }
            }
            Op::Clean {
                advance,
                slots,
                roll,
            } => {
                clock.advance(advance);
                if roll {
                    log.force_roll().unwrap();
                }
                let now = clock.now_ms();
                let mut map = OffsetMap::with_memory(SLOT_BYTES * slots);
                let out = log
                    .clean(&mut map, now, log.log_end_offset(), &mut |_| {})
                    .unwrap();
                if out.cleaned_to > m.cleaned_to {
                    for (o, (_, v)) in m.records.range(m.cleaned_to..out.cleaned_to) {
                        if v.is_none() {
                            m.passed_at.entry(*o).or_insert(now);
                        }
                    }
                    m.cleaned_to = out.cleaned_to;
                }
                present = check(&log, &m, &present, now);
            }
            Op::Reopen => {
                drop(log);
                let (l, report) = open(dir.path(), config.clone(), &clock);
                assert!(report.truncations.is_empty(), "{report:?}");
                log = l;
                let now = clock.now_ms();
                present = check(&log, &m, &present, now);
            }
        }
    }
    let now = clock.now_ms();
    check(&log, &m, &present, now);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn compaction_keeps_what_it_must_and_removes_only_what_it_may(
        ops in prop::collection::vec(op(), 1..60),
        direct in any::<bool>(),
    ) {
        run(if direct { IoMode::Direct } else { IoMode::Buffered }, ops);
    }
}
