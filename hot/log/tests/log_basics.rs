//! Behaviour of the partition log: offsets, reads, rolls, time lookup, retention, flush.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use common::*;
use strata_log::IoMode;
use strata_log::{LogConfig, LogError, ManualClock, RetentionLimits};
use strata_proto::ErrorCode;
use strata_proto::batch::{self, RecordBatch};

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_700_000_000_000))
}

fn appends_get_dense_offsets_and_read_back_byte_for_byte(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert_eq!((report.log_start_offset, report.log_end_offset), (0, 0));
    let mut stored = Vec::new();
    for i in 0..50u64 {
        let n = 1 + (i as usize % 4);
        let mut b = make_batch(n, 80, i, 1000 + i as i64);
        let before = log.log_end_offset();
        let info = log.append(&mut b, 3).unwrap();
        assert_eq!(info.first_offset, before);
        assert_eq!(info.last_offset, before + n as i64 - 1);
        assert_eq!(info.log_end_offset, log.log_end_offset());
        stored.push(b);
    }
    assert!(
        log.segments().len() > 3,
        "small segment.bytes rolls segments"
    );
    let got = read_all(&log, 0);
    assert_eq!(got, stored);
    // Offsets rewritten in the header, epoch stamped, CRC still valid.
    let (b, _) = RecordBatch::parse(&got[10]).unwrap();
    assert_eq!(b.header().partition_leader_epoch, 3);
    b.validate_crc().unwrap();
    // A read from the middle of a batch returns that whole batch first.
    let mid = base_of(&stored[20]) + 1;
    if mid < base_of(&stored[21]) {
        let r = log.read(mid, 1, None).unwrap();
        assert_eq!(
            &r.data[..],
            &stored[20][..],
            "KIP-74: at least one whole batch"
        );
    }
}

fn invalid_batches_are_refused_and_change_nothing(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        max_message_bytes: 2000,
        ..small_config(mode)
    };
    let (log, _) = open(dir.path(), config, &c);
    log.append(&mut make_batch(2, 10, 1, 5), 0).unwrap();
    let leo = log.log_end_offset();
    let size = log.size_bytes();
    let good = make_batch(3, 10, 2, 5);

    let mut bad_crc = good.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    let mut bad_magic = good.clone();
    bad_magic[16] = 1;
    let mut bad_len = good.clone();
    bad_len[8..12].copy_from_slice(&(i32::MAX).to_be_bytes());
    let mut short = good.clone();
    short.truncate(good.len() - 5);
    let mut bad_count = good.clone();
    bad_count[57..61].copy_from_slice(&7i32.to_be_bytes());
    // Fix the CRC so only the count is wrong.
    let crc = crc32c(&bad_count[21..]);
    bad_count[17..21].copy_from_slice(&crc.to_be_bytes());
    let mut too_big = make_batch(1, 3000, 3, 5);
    // A good batch followed by a bad one: all-or-nothing.
    let mut mixed = good.clone();
    mixed.extend_from_slice(&bad_crc);

    let cases: Vec<(&str, Vec<u8>, ErrorCode)> = vec![
        ("bad crc", bad_crc, ErrorCode::CorruptMessage),
        ("magic 1", bad_magic, ErrorCode::UnsupportedForMessageFormat),
        ("bad length", bad_len, ErrorCode::CorruptMessage),
        ("torn", short, ErrorCode::CorruptMessage),
        ("bad record count", bad_count, ErrorCode::InvalidRecord),
        (
            "too large",
            std::mem::take(&mut too_big),
            ErrorCode::MessageTooLarge,
        ),
        ("good then bad", mixed, ErrorCode::CorruptMessage),
        ("empty", vec![], ErrorCode::CorruptMessage),
    ];
    for (name, mut bytes, code) in cases {
        let err = log.append(&mut bytes, 0).expect_err(name);
        assert_eq!(err.error_code(), code, "{name}: {err}");
        assert!(
            matches!(err, LogError::InvalidBatch(_) | LogError::EmptyAppend),
            "{name}: {err}"
        );
        assert_eq!(log.log_end_offset(), leo, "{name}");
        assert_eq!(log.size_bytes(), size, "{name}");
    }
    // The log still works.
    log.append(&mut good.clone(), 0).unwrap();
    assert_eq!(log.log_end_offset(), leo + 3);
}

fn crc32c(b: &[u8]) -> u32 {
    // The same polynomial, computed independently of strata-proto.
    let mut crc = !0u32;
    for &byte in b {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn reads_respect_max_bytes_max_offset_and_range(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 100,
        ..base_config(mode)
    };
    let (log, _) = open(dir.path(), config, &c);
    let mut sizes = Vec::new();
    for i in 0..20 {
        let mut b = make_batch(2, 50, i, 0);
        sizes.push(b.len());
        log.append(&mut b, 0).unwrap();
    }
    // max_bytes fits three batches exactly.
    let three: usize = sizes[..3].iter().sum();
    let r = log.read(0, three + 10, None).unwrap();
    assert_eq!(r.data.len(), three);
    assert_eq!(r.next_offset, 6);
    // max_offset (a high-water mark) cuts at a batch boundary.
    let r = log.read(0, 1 << 20, Some(10)).unwrap();
    assert_eq!(r.next_offset, 10);
    assert_eq!(batch::batches(&r.data).count(), 5);
    let r = log.read(10, 1 << 20, Some(10)).unwrap();
    assert!(r.data.is_empty());
    // At the end: empty. Past it, or below the start: OFFSET_OUT_OF_RANGE.
    assert!(log.read(40, 100, None).unwrap().data.is_empty());
    let e = log.read(41, 100, None).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::OffsetOutOfRange);
    assert!(log.read(-1, 100, None).is_err());
    // Every offset finds the batch containing it through the index.
    for o in 0..40 {
        let r = log.read(o, 1, None).unwrap();
        let (b, _) = RecordBatch::parse(&r.data).unwrap();
        assert!(b.base_offset() <= o && o <= b.last_offset(), "offset {o}");
    }
}

fn segments_roll_on_size_and_age(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        segment_bytes: 1000,
        segment_ms: 60_000,
        ..base_config(mode)
    };
    let (log, _) = open(dir.path(), config, &c);
    let mut b = make_batch(1, 300, 0, 0);
    let one = b.len() as u64;
    log.append(&mut b, 0).unwrap();
    log.append(&mut make_batch(1, 300, 1, 0), 0).unwrap();
    assert_eq!(log.segments().len(), 1);
    log.append(&mut make_batch(1, 300, 2, 0), 0).unwrap();
    let segs = log.segments();
    assert_eq!(segs.len(), 2, "third batch would pass segment.bytes");
    assert!(segs[0].sealed && !segs[1].sealed);
    assert_eq!(segs[0].size_bytes, 2 * one);
    assert_eq!(segs[1].base_offset, 2);
    // A sealed segment is fsynced before it counts: the recovery point reached it.
    assert!(log.recovery_point() >= 2);
    // Age: the next append after segment.ms rolls; so does maybe_roll on an idle log.
    c.advance(60_000);
    log.append(&mut make_batch(1, 10, 3, 0), 0).unwrap();
    assert_eq!(log.segments().len(), 3);
    assert!(!log.maybe_roll().unwrap());
    c.advance(60_000);
    assert!(log.maybe_roll().unwrap());
    assert_eq!(log.segments().len(), 4);
    assert!(log.segments()[2].sealed);
    // A batch set larger than a segment is refused.
    let e = log.append(&mut make_batch(1, 2000, 4, 0), 0).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::RecordListTooLarge);
}

/// index.interval.bytes=0 puts an offset-index entry after every batch; a full index
/// (Kafka's segment.index.bytes) rolls the segment, so one active segment's in-memory
/// indexes stay bounded however small the batches.
fn segments_roll_when_the_index_is_full(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        index_interval_bytes: 0,
        index_max_entries: 4,
        ..base_config(mode)
    };
    let (log, _) = open(dir.path(), config, &c);
    let mut stored = Vec::new();
    for i in 0..20u64 {
        let mut b = make_batch(1, 10, i, 0);
        log.append(&mut b, 0).unwrap();
        stored.push(b);
    }
    // Entries go after the first batch of a segment: 5 batches fill 4 entries.
    let segs = log.segments();
    assert_eq!(segs.len(), 4, "{segs:?}");
    assert!(
        segs.iter()
            .take(3)
            .all(|s| s.sealed && s.next_offset - s.base_offset == 5)
    );
    assert_eq!(read_all(&log, 0), stored);
}

fn timestamp_lookup_matches_a_brute_force_search(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    // Timestamps that wander: mostly rising, sometimes stepping back.
    let mut all: Vec<(i64, i64)> = Vec::new(); // (offset, ts)
    let mut ts = 10_000i64;
    for i in 0..120u64 {
        ts += if i % 7 == 3 { -150 } else { 40 };
        let n = 1 + (i % 3) as usize;
        let base = log.log_end_offset();
        log.append(&mut make_batch(n, 30, i, ts), 0).unwrap();
        for k in 0..n {
            all.push((base + k as i64, ts + k as i64));
        }
    }
    assert!(log.segments().len() > 3);
    for target in (9_000..15_500).step_by(37) {
        let want = all.iter().find(|(_, t)| *t >= target).copied();
        assert_eq!(
            log.offset_for_timestamp(target).unwrap(),
            want,
            "target {target}"
        );
    }
}

fn retention_deletes_old_sealed_segments_only_as_allowed(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let now = c.now();
    let config = LogConfig {
        retention: RetentionLimits {
            ms: Some(3_600_000),
            bytes: None,
        },
        ..small_config(mode)
    };
    let (log, _) = open(dir.path(), config.clone(), &c);
    // Old data (two hours ago), then fresh data.
    for i in 0..30 {
        log.append(&mut make_batch(2, 100, i, now - 7_200_000), 0)
            .unwrap();
    }
    log.force_roll().unwrap();
    for i in 30..60 {
        log.append(&mut make_batch(2, 100, i, now), 0).unwrap();
    }
    let before = log.segments();
    let old: Vec<_> = before
        .iter()
        .filter(|s| s.max_timestamp < now - 3_600_000)
        .collect();
    assert!(old.len() >= 3);
    // The predicate refuses the third old segment: only two go.
    let refuse = old[2].base_offset;
    let out = log
        .apply_retention(&mut |s| s.base_offset != refuse)
        .unwrap();
    assert_eq!(out.deleted.len(), 2);
    assert_eq!(out.blocked_by_predicate, Some(refuse));
    assert_eq!(log.log_start_offset(), refuse);
    assert!(!out.deleted[0].log_path.exists());
    let e = log.read(0, 100, None).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::OffsetOutOfRange);
    // Now allow everything: every old segment goes, no fresh one.
    let out = log.apply_retention(&mut |_| true).unwrap();
    assert_eq!(out.deleted.len(), old.len() - 2);
    let first_fresh = before
        .iter()
        .find(|s| s.max_timestamp >= now - 3_600_000)
        .unwrap();
    assert_eq!(log.log_start_offset(), first_fresh.base_offset);
    // The start survives a restart.
    drop(log);
    let (log, report) = open(dir.path(), config, &c);
    assert_eq!(report.log_start_offset, first_fresh.base_offset);
    assert_eq!(log.log_start_offset(), first_fresh.base_offset);
    assert_eq!(read_all(&log, log.log_start_offset()).len(), 30);
}

fn size_retention_never_deletes_the_active_segment(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        retention: RetentionLimits {
            ms: None,
            bytes: Some(1),
        },
        ..small_config(mode)
    };
    let (log, _) = open(dir.path(), config, &c);
    for i in 0..40 {
        log.append(&mut make_batch(2, 100, i, 0), 0).unwrap();
    }
    log.apply_retention(&mut |_| true).unwrap();
    let segs = log.segments();
    assert_eq!(segs.len(), 1);
    assert!(!segs[0].sealed);
    assert_eq!(log.log_start_offset(), segs[0].base_offset);
    assert_eq!(log.log_end_offset(), 80);
    // Size retention keeps the newest segments within the bound.
    let dir2 = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention: RetentionLimits {
            ms: None,
            bytes: Some(10_000),
        },
        ..small_config(mode)
    };
    let (log, _) = open(dir2.path(), config, &c);
    for i in 0..80 {
        log.append(&mut make_batch(2, 100, i, 0), 0).unwrap();
    }
    log.apply_retention(&mut |_| true).unwrap();
    assert!(log.size_bytes() <= 10_000 + 4096, "{}", log.size_bytes());
    assert!(log.size_bytes() >= 10_000 - 4096);
}

fn flush_policy_by_messages_and_by_time(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        flush_messages: 5,
        flush_ms: 1000,
        ..base_config(mode)
    };
    let (log, _) = open(dir.path(), config, &c);
    log.append(&mut make_batch(3, 10, 0, 0), 0).unwrap();
    assert_eq!(log.recovery_point(), 0);
    log.append(&mut make_batch(2, 10, 1, 0), 0).unwrap();
    assert_eq!(log.recovery_point(), 5, "five records since the last fsync");
    log.append(&mut make_batch(1, 10, 2, 0), 0).unwrap();
    assert_eq!(log.recovery_point(), 5);
    assert!(!log.maybe_flush().unwrap());
    c.advance(1000);
    assert!(log.maybe_flush().unwrap());
    assert_eq!(log.recovery_point(), 6);
    log.append(&mut make_batch(1, 10, 3, 0), 0).unwrap();
    assert_eq!(log.flush().unwrap(), 7);
}

fn clean_reopen_keeps_offsets_and_rescans_only_the_last_segment(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut stored = Vec::new();
    for i in 0..60 {
        let mut b = make_batch(2, 60, i, 1000 + i as i64);
        log.append(&mut b, 1).unwrap();
        stored.push(b);
    }
    let leo = log.log_end_offset();
    let nsegs = log.segments().len();
    log.close().unwrap();
    let before = files_in(dir.path());
    let (log, report) = open(dir.path(), small_config(mode), &c);
    // After a clean close everything is durable: the open writes (and fsyncs) nothing.
    assert_eq!(
        files_in(dir.path()),
        before,
        "a clean reopen changed no file"
    );
    assert_eq!(report.log_end_offset, leo);
    assert!(report.truncations.is_empty() && report.deleted_segments.is_empty());
    assert_eq!(report.scanned_segments.len(), 1, "{report:?}");
    assert_eq!(log.segments().len(), nsegs);
    assert_eq!(read_all(&log, 0), stored);
    // Appends continue densely after a reopen.
    let info = log.append(&mut make_batch(1, 10, 99, 0), 1).unwrap();
    assert_eq!(info.first_offset, leo);
    // And the time index of reopened sealed segments still answers lookups.
    assert_eq!(
        log.offset_for_timestamp(1030).unwrap().map(|x| x.0),
        Some(59),
        "batch 29 holds ts 1029 and 1030"
    );
    // Dropped without close after an append: the next open makes the tail durable and
    // writes the recovery point anew.
    drop(log);
    let rp = dir.path().join("recovery-point");
    let old = fs::metadata(&rp).unwrap().ino();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    assert_ne!(
        fs::metadata(&rp).unwrap().ino(),
        old,
        "recovery point rewritten"
    );
    assert_eq!(log.log_end_offset(), leo + 1);
}

/// Every file in `dir`: name, inode, length and modification time.
fn files_in(dir: &std::path::Path) -> Vec<(String, u64, u64, i64, i64)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
            )
        })
        .collect();
    out.sort();
    out
}

fn damaged_sealed_index_is_rebuilt(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), small_config(mode), &c);
    let mut stored = Vec::new();
    for i in 0..40 {
        let mut b = make_batch(2, 60, i, 1000);
        log.append(&mut b, 1).unwrap();
        stored.push(b);
    }
    let segs = log.segments();
    log.close().unwrap();
    // Scramble the first sealed segment's offset index, delete the second's time index.
    std::fs::write(&segs[0].index_path, [0xAB; 24]).unwrap();
    std::fs::remove_file(&segs[1].time_index_path).unwrap();
    let (log, report) = open(dir.path(), small_config(mode), &c);
    assert!(
        report.rebuilt_indexes.contains(&segs[1].base_offset),
        "{report:?}"
    );
    assert_eq!(read_all(&log, 0), stored);
    assert_eq!(std::fs::metadata(&segs[0].index_path).unwrap().len() % 8, 0);
}

fn log_append_time_stamps_batches(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        log_append_time: true,
        ..base_config(mode)
    };
    let (log, _) = open(dir.path(), config, &c);
    let info = log.append(&mut make_batch(3, 10, 0, 5), 0).unwrap();
    assert_eq!(info.log_append_time, Some(c.now()));
    let r = log.read(0, 1000, None).unwrap();
    let (b, _) = RecordBatch::parse(&r.data).unwrap();
    b.validate_crc().unwrap();
    assert!(
        b.records()
            .unwrap()
            .iter()
            .all(|r| r.unwrap().timestamp == c.now())
    );
}

fn an_empty_log_restarts_at_a_later_offset(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let (log, _) = open(dir.path(), base_config(mode), &c);
    log.reset_empty(500).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
    let info = log.append(&mut make_batch(3, 10, 0, 5), 0).unwrap();
    assert_eq!(info.first_offset, 500);
    assert_eq!(
        log.read(499, 100, None).unwrap_err().error_code(),
        strata_proto::ErrorCode::OffsetOutOfRange
    );
    // A log with data cannot be reset, nor moved backwards.
    assert!(log.reset_empty(1000).is_err());
    drop(log);
    let (log, report) = open(dir.path(), base_config(mode), &c);
    assert!(report.truncations.is_empty());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 503));
    assert_eq!(read_all(&log, 500).len(), 1);
}

trait Now {
    fn now(&self) -> i64;
}
impl Now for ManualClock {
    fn now(&self) -> i64 {
        use strata_log::Clock;
        self.now_ms()
    }
}

both_modes!(
    appends_get_dense_offsets_and_read_back_byte_for_byte,
    invalid_batches_are_refused_and_change_nothing,
    reads_respect_max_bytes_max_offset_and_range,
    segments_roll_on_size_and_age,
    segments_roll_when_the_index_is_full,
    timestamp_lookup_matches_a_brute_force_search,
    retention_deletes_old_sealed_segments_only_as_allowed,
    size_retention_never_deletes_the_active_segment,
    flush_policy_by_messages_and_by_time,
    clean_reopen_keeps_offsets_and_rescans_only_the_last_segment,
    damaged_sealed_index_is_rebuilt,
    log_append_time_stamps_batches,
    an_empty_log_restarts_at_a_later_offset,
);
