//! Unit tests of the open log: direct IO and its fall-backs.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;

use bytes::Bytes;
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};

use super::*;
use crate::clock::ManualClock;
use crate::direct_read;
use crate::tail;
use crate::tail::refuse::{self, Refusal};

fn make_batch(seed: u8) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..3)
        .map(|i| NewRecord::value(vec![seed.wrapping_add(i); 700], 1000))
        .map(|r| NewRecord {
            key: Some(Bytes::from_static(b"k")),
            ..r
        })
        .collect();
    batch(&records, Compression::None, None).to_vec()
}

/// With direct IO refused (at open, or at the first write behind an open that
/// worked), the log writes through the page cache: every append succeeds, nothing
/// is padded, and a reopen finds exactly the data.
fn falls_back_to_buffered(refusal: Refusal) {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe");
    fs::write(&probe, b"").unwrap();
    let direct_works = tail::open_direct(&probe).unwrap().is_some();
    let config = LogConfig {
        segment_bytes: 8000,
        io_mode: IoMode::Direct,
        ..LogConfig::default()
    };
    let clock = Arc::new(ManualClock::new(0));
    refuse::set(Some(refusal));
    let (log, _) = Log::open(dir.path(), config.clone(), clock.clone()).unwrap();
    let mut stored = Vec::new();
    for i in 0..20u8 {
        let mut b = make_batch(i);
        log.append(&mut b, 0).unwrap();
        stored.extend_from_slice(&b);
        assert_eq!(log.io_mode(), IoMode::Buffered);
    }
    assert!(log.segments().len() > 2, "rolled, and stayed buffered");
    for s in log.segments() {
        let len = fs::metadata(&s.log_path).unwrap().len();
        assert_eq!(len, s.size_bytes, "buffered writes leave no padding");
    }
    let g = log.read_lock();
    assert!(g.direct_refused && !g.direct_written);
    assert_eq!(g.tail.allocated(), 0, "no tail buffer");
    drop(g);
    drop(log);
    refuse::set(None);
    // Reopened where O_DIRECT works: the same bytes, and direct IO again.
    let (log, report) = Log::open(dir.path(), config, clock).unwrap();
    assert!(report.truncations.is_empty(), "{report:?}");
    let mut got = Vec::new();
    let mut offset = 0;
    while offset < log.log_end_offset() {
        let r = log.read(offset, 1 << 20, None).unwrap();
        got.extend_from_slice(&r.data);
        offset = r.next_offset;
    }
    assert!(got == stored);
    if direct_works {
        assert_eq!(log.io_mode(), IoMode::Direct);
    }
}

/// Appends batches of about 2.2 KB (so that segments of 8000 bytes end off a block
/// boundary) until the log has more than four segments; returns them.
fn fill(log: &Log) -> Vec<Vec<u8>> {
    let mut stored = Vec::new();
    for i in 0..20u8 {
        let mut b = make_batch(i);
        log.append(&mut b, 0).unwrap();
        stored.push(b);
    }
    assert!(log.segments().len() > 4);
    stored
}

fn read_everything(log: &Log) -> Vec<u8> {
    let mut got = Vec::new();
    let mut offset = 0;
    while offset < log.log_end_offset() {
        let r = log.read(offset, 1 << 20, None).unwrap();
        assert!(!r.data.is_empty());
        got.extend_from_slice(&r.data);
        offset = r.next_offset;
    }
    got
}

/// Direct mode with segments of 8000 bytes and a tail cache of two 4 KiB windows.
fn small_direct() -> LogConfig {
    LogConfig {
        segment_bytes: 8000,
        tail_cache_bytes: 8192,
        io_mode: IoMode::Direct,
        ..LogConfig::default()
    }
}

/// How many of this process's fds are open on files under `dir`.
fn fds_under(dir: &Path) -> usize {
    let dir = dir.canonicalize().unwrap();
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&dir)))
        .count()
}

/// In direct mode every byte outside the tail cache is read with O_DIRECT, from
/// sealed segments, from the active one, and after a reopen; in buffered mode nothing
/// is. Each segment holds at most two fds (from the process-wide cache, `files`): its
/// ordinary one and one O_DIRECT one, which the active segment shares between appends
/// and reads. A reopen opens only what recovery scans (the active segment); a sealed
/// segment's fd is opened by its first read.
#[test]
fn direct_mode_reads_with_o_direct_through_at_most_one_more_fd_per_segment() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let (log, _) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
    if log.io_mode() != IoMode::Direct {
        eprintln!("the temp dir refuses O_DIRECT: nothing to test");
        return;
    }
    let stored = fill(&log).concat();
    let segments = log.segments().len();
    assert!(fds_under(dir.path()) <= 2 * segments);
    let before = direct_read::stats::direct_bytes();
    assert!(read_everything(&log) == stored);
    let direct = direct_read::stats::direct_bytes() - before;
    // Everything but what the cache holds (at most 12 KiB), at least once.
    assert!(direct + 12 * 1024 >= stored.len() as u64, "{direct}");
    assert!(fds_under(dir.path()) <= 2 * segments);
    assert!(!log.read_lock().direct_reads_refused.load(Ordering::Relaxed));
    drop(log);
    assert_eq!(fds_under(dir.path()), 0, "a dropped log's fds are closed");

    // Reopened: only the active segment (scanned, and opened for direct appends) has
    // fds until the others are read, and then each has its two (a read takes the
    // ordinary one under the log's lock too, for what O_DIRECT cannot read).
    let (log, _) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
    assert_eq!(fds_under(dir.path()), 2);
    let before = direct_read::stats::direct_bytes();
    assert!(read_everything(&log) == stored);
    // The tail cache starts empty: every byte comes from the file.
    assert!(direct_read::stats::direct_bytes() - before >= stored.len() as u64);
    assert_eq!(fds_under(dir.path()), 2 * segments);
    drop(log);
    assert_eq!(fds_under(dir.path()), 0);

    // Buffered mode reads through the page cache only.
    let buffered = LogConfig {
        io_mode: IoMode::Buffered,
        ..small_direct()
    };
    let (log, _) = Log::open(dir.path(), buffered, clock).unwrap();
    let before = direct_read::stats::direct_bytes();
    assert!(read_everything(&log) == stored);
    assert_eq!(direct_read::stats::direct_bytes(), before);
    assert_eq!(fds_under(dir.path()), segments);
}

/// With O_DIRECT reads refused (at the first read, or at the open of a segment's
/// read-only O_DIRECT fd), reads fall back to the page cache at once, for sealed
/// segments and the active one, and return exactly the bytes; appends stay direct,
/// and segments sealed after the refusal read the same way. A reopen where direct
/// reads work reads directly again.
fn direct_reads_fall_back_to_buffered(refusal: Refusal) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let (log, _) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
    if log.io_mode() != IoMode::Direct {
        eprintln!("the temp dir refuses O_DIRECT: nothing to test");
        return;
    }
    let mut stored = fill(&log);
    drop(log);
    refuse::set(Some(refusal));
    // Reopened, so sealed segments open their O_DIRECT fd on first read (where
    // `ReadOpen` refuses); the active segment's is the append fd (where `Read`
    // refuses its first read).
    let (log, report) = Log::open(dir.path(), small_direct(), clock.clone()).unwrap();
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(log.io_mode(), IoMode::Direct, "appends stay direct");
    let before = direct_read::stats::direct_bytes();
    assert!(read_everything(&log) == stored.concat());
    assert!(log.read_lock().direct_reads_refused.load(Ordering::Relaxed));
    // More segments, sealed after the refusal.
    for i in 20..30u8 {
        let mut b = make_batch(i);
        log.append(&mut b, 0).unwrap();
        stored.push(b);
        let r = log.read(log.log_end_offset() - 3, 1, None).unwrap();
        assert_eq!(&r.data[..], &stored.last().unwrap()[..]);
    }
    assert_eq!(log.io_mode(), IoMode::Direct);
    assert!(read_everything(&log) == stored.concat());
    assert_eq!(direct_read::stats::direct_bytes(), before, "no direct read");
    drop(log);

    refuse::set(None);
    let (log, report) = Log::open(dir.path(), small_direct(), clock).unwrap();
    assert!(report.truncations.is_empty(), "{report:?}");
    let before = direct_read::stats::direct_bytes();
    assert!(read_everything(&log) == stored.concat());
    assert!(direct_read::stats::direct_bytes() > before);
    assert!(!log.read_lock().direct_reads_refused.load(Ordering::Relaxed));
}

#[test]
fn refused_direct_reads_fall_back_to_buffered() {
    direct_reads_fall_back_to_buffered(Refusal::Read);
}

#[test]
fn refused_direct_read_opens_fall_back_to_buffered() {
    direct_reads_fall_back_to_buffered(Refusal::ReadOpen);
}

#[test]
fn refused_direct_open_falls_back_to_buffered() {
    falls_back_to_buffered(Refusal::Open);
}

#[test]
fn refused_first_direct_write_falls_back_to_buffered() {
    falls_back_to_buffered(Refusal::Write);
}

/// A sealed segment's span, read in pieces of any size and from any position, gives
/// exactly what `read_range` gives, in both IO modes; the span starts at the batch
/// holding `from` and ends before the batch holding `end`; the active segment, and a
/// range past a sealed segment's end, are refused.
#[test]
fn sealed_spans_read_in_pieces_what_read_range_reads() {
    for mode in [IoMode::Buffered, IoMode::Direct] {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let config = LogConfig {
            io_mode: mode,
            ..small_direct()
        };
        let (log, _) = Log::open(dir.path(), config, clock).unwrap();
        fill(&log);
        let segments = log.segments();
        for s in segments.iter().filter(|s| s.sealed) {
            let whole = log.sealed_span(s.base_offset, s.next_offset).unwrap();
            assert_eq!(whole.len(), s.size_bytes);
            // From each batch, to the end and to the next batch.
            let mut from = s.base_offset;
            while from < s.next_offset {
                let want = log.read_range(from, s.next_offset).unwrap();
                let span = log.sealed_span(from, s.next_offset).unwrap();
                assert_eq!(span.len(), want.len() as u64);
                for piece in [1usize, 100, 4096, 1 << 20] {
                    let mut got = Vec::new();
                    let mut pos = 0u64;
                    while pos < span.len() {
                        let b = log.read_sealed(&span, pos, piece).unwrap();
                        assert!(!b.is_empty());
                        got.extend_from_slice(&b);
                        pos += b.len() as u64;
                    }
                    assert_eq!(got, want, "{mode:?} from {from} in pieces of {piece}");
                }
                let first = log.read(from, 1, None).unwrap();
                if first.next_offset < s.next_offset {
                    let span = log.sealed_span(s.base_offset, first.next_offset).unwrap();
                    let want = log.read_range(s.base_offset, first.next_offset).unwrap();
                    let got = log.read_sealed(&span, 0, 1 << 20).unwrap();
                    assert_eq!(&got[..], &want[..]);
                }
                from = first.next_offset;
            }
            assert!(log.sealed_span(s.base_offset, s.next_offset + 1).is_err());
        }
        let active = segments.last().unwrap();
        assert!(!active.sealed);
        assert!(
            log.sealed_span(active.base_offset, log.log_end_offset())
                .is_err()
        );
    }
}

/// Through the page cache, a read of a sealed segment may wait on the device (it may
/// have left the page cache; its index may not be loaded) and one of the active
/// segment's newest bytes may not.
#[test]
fn buffered_reads_of_sealed_segments_may_wait() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 8000,
        io_mode: IoMode::Buffered,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(dir.path(), config, Arc::new(ManualClock::new(0))).unwrap();
    for i in 0..6 {
        log.append(&mut make_batch(i), 0).unwrap();
    }
    let segs = log.segments();
    assert!(segs.len() >= 2, "{segs:?}");
    assert!(log.read_may_wait(segs[0].base_offset));
    assert!(!log.read_may_wait(log.log_end_offset() - 1));
    assert!(
        !log.read_may_wait(log.log_end_offset() + 10),
        "nothing there"
    );
}
