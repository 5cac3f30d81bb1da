//! Direct mode specifics: buffered reads stay coherent with `O_DIRECT` writes, the tail
//! cache serves exactly the bytes (inside it and across its start), and the zero padding
//! of direct writes is cut at seal, close and recovery without being reported as lost
//! data, while anything else after the last batch still is.
//!
//! These tests write under `CARGO_TARGET_TMPDIR` (the target dir's filesystem, a disk
//! filesystem that takes `O_DIRECT`), not the system temp dir, which may be anything.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use common::*;
use strata_log::{IoMode, Log, LogConfig, ManualClock};
use strata_proto::batch;

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_700_000_000_000))
}

/// Direct mode with a tail cache of two 4 KiB windows.
fn tiny_cache() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 256,
        tail_cache_bytes: 8 * 1024,
        ..base_config(IoMode::Direct)
    }
}

fn open_direct(dir: &Path, config: LogConfig) -> Log {
    let (log, report) = Log::open(dir, config, clock()).unwrap();
    assert!(!report.lost_data(), "{report:?}");
    assert_eq!(
        log.io_mode(),
        IoMode::Direct,
        "this filesystem takes O_DIRECT"
    );
    log
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

/// An `O_DIRECT` write rewrites the partial last block; a buffered fd that cached that
/// block before must see the new bytes after, and so must the log's own reads from the
/// file once the tail cache has moved on.
#[test]
fn buffered_reads_see_direct_writes() {
    let dir = tempdir();
    let log = open_direct(dir.path(), tiny_cache());
    let path = log.segments()[0].log_path.clone();
    let mut a = make_batch(1, 100, 1, 0);
    log.append(&mut a, 0).unwrap();
    // Another fd reads (and so caches) the file's first block: A, then zeros.
    let other = fs::File::open(&path).unwrap();
    let mut block = vec![0u8; 4096];
    other.read_exact_at(&mut block, 0).unwrap();
    assert_eq!(&block[..a.len()], &a[..]);
    assert!(block[a.len()..].iter().all(|&b| b == 0), "zero padding");

    // B lands in the same block, rewritten with O_DIRECT.
    let mut b = make_batch(2, 100, 2, 0);
    log.append(&mut b, 0).unwrap();
    other.read_exact_at(&mut block, 0).unwrap();
    assert_eq!(&block[..a.len()], &a[..]);
    assert_eq!(
        &block[a.len()..a.len() + b.len()],
        &b[..],
        "read after write"
    );
    assert_eq!(fs::read(&path).unwrap().len() as u64, 4096);

    // Move the cache well past the first block, then read A and B through the log:
    // from the file, through the same page cache the other fd filled.
    let mut stored = vec![a, b];
    while log.size_bytes() < 32 * 1024 {
        let mut c = make_batch(3, 500, stored.len() as u64, 0);
        log.append(&mut c, 0).unwrap();
        stored.push(c);
    }
    assert_eq!(read_all(&log, 0), stored);
    let r = log.read(0, 1, None).unwrap();
    assert_eq!(&r.data[..], &stored[0][..]);
}

/// Reads that start inside the cache, before it, and end inside it, return exactly the
/// appended bytes; and reads inside the cache come from memory: after the file's bytes
/// are overwritten behind the log's back, the cached range still reads as appended
/// while a range far before it reads what the file now holds.
#[test]
fn reads_inside_and_across_the_tail_cache_return_exactly_the_bytes() {
    let dir = tempdir();
    let config = LogConfig {
        tail_cache_bytes: 16 * 1024, // two 8 KiB windows
        ..tiny_cache()
    };
    let log = open_direct(dir.path(), config);
    let mut stored: Vec<(i64, Vec<u8>)> = Vec::new();
    for i in 0..150u64 {
        // Mostly small batches, some larger than a window (written in pieces).
        let (n, size) = if i % 17 == 5 {
            (12, 1000)
        } else {
            (1 + (i % 3) as usize, 40 + (i as usize * 37) % 900)
        };
        let mut b = make_batch(n, size, i, 1000 + i as i64);
        let info = log.append(&mut b, 4).unwrap();
        stored.push((info.first_offset, b));
        // Every batch reads back at once (from the cache).
        let r = log.read(info.first_offset, 1, None).unwrap();
        assert_eq!(&r.data[..], &stored.last().unwrap().1[..]);
    }
    let all: Vec<Vec<u8>> = stored.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(read_all(&log, 0), all);
    // From every batch, with limits that end inside the cache, across it, or past it.
    let total: usize = all.iter().map(Vec::len).sum();
    for (k, (offset, _)) in stored.iter().enumerate() {
        for max_bytes in [1, 3000, 9000, 20_000, total] {
            let r = log.read(*offset, max_bytes, None).unwrap();
            let got: Vec<&[u8]> = batch::batches(&r.data)
                .map(|b| b.unwrap().as_bytes())
                .collect();
            assert!(!got.is_empty());
            for (g, want) in got.iter().zip(&all[k..]) {
                assert_eq!(g, &&want[..], "read at {offset} max {max_bytes}");
            }
        }
    }

    // Overwrite, in the file only, the payload ends of the last batch (in the cache)
    // and of a batch more than two windows before the end (not in it).
    let seg = log.segments()[0].clone();
    let end = seg.size_bytes;
    let mut pos = 0u64;
    let mut starts = Vec::new();
    for (_, b) in &stored {
        starts.push(pos);
        pos += b.len() as u64;
    }
    // The cache holds at most two windows (16 KiB) and the partial block before them.
    let old = (0..stored.len())
        .rev()
        .find(|&k| starts[k] + (stored[k].1.len() as u64) + 16_384 + 4096 < end)
        .unwrap();
    let old_end = starts[old] + stored[old].1.len() as u64;
    let raw = OpenOptions::new().write(true).open(&seg.log_path).unwrap();
    raw.write_all_at(&[0xAA; 8], end - 8).unwrap();
    raw.write_all_at(&[0xAA; 8], old_end - 8).unwrap();
    raw.sync_all().unwrap();
    let last = stored.last().unwrap();
    let r = log.read(last.0, 1, None).unwrap();
    assert_eq!(
        &r.data[..],
        &last.1[..],
        "the newest bytes come from the cache"
    );
    let r = log.read(stored[old].0, 1, None).unwrap();
    assert_eq!(
        &r.data[r.data.len() - 8..],
        &[0xAA; 8],
        "older bytes from the file"
    );
}

/// Seal and close leave every file exactly as long as its batches; a log that stopped
/// without closing leaves zero padding, which the next open cuts without calling it a
/// truncation. Zeros beyond the next block boundary, or anything not zero, are not
/// padding and are reported.
#[test]
fn padding_is_cut_at_seal_close_and_recovery_and_only_padding_is_silent() {
    let dir = tempdir();
    let config = LogConfig {
        segment_bytes: 10_000,
        ..tiny_cache()
    };
    let log = open_direct(dir.path(), config.clone());
    let mut stored = Vec::new();
    for i in 0..80u64 {
        let mut b = make_batch(2, 300, i, 0);
        log.append(&mut b, 0).unwrap();
        stored.push(b);
    }
    let segs = log.segments();
    assert!(segs.len() > 3);
    for s in &segs[..segs.len() - 1] {
        assert_eq!(
            file_len(&s.log_path),
            s.size_bytes,
            "sealed segments are trimmed"
        );
    }
    let active = segs.last().unwrap().clone();
    assert_eq!(
        !active.size_bytes.is_multiple_of(4096),
        file_len(&active.log_path) > active.size_bytes
    );
    assert_eq!(file_len(&active.log_path) % 4096, 0, "padded to a block");

    // An unclean stop: the padding stays, and the reopen cuts it silently.
    drop(log);
    assert!(file_len(&active.log_path) > active.size_bytes);
    let (log, report) = Log::open(dir.path(), config.clone(), clock()).unwrap();
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(file_len(&active.log_path), active.size_bytes);
    assert_eq!(read_all(&log, 0), stored);

    // A clean close trims too.
    let mut b = make_batch(1, 10, 99, 0);
    log.append(&mut b, 0).unwrap();
    stored.push(b);
    let active = log.segments().last().unwrap().clone();
    log.close().unwrap();
    assert_eq!(file_len(&active.log_path), active.size_bytes);

    // Zeros past the next block boundary are not a direct write's padding.
    let raw = OpenOptions::new()
        .write(true)
        .open(&active.log_path)
        .unwrap();
    raw.set_len(active.size_bytes.next_multiple_of(4096) + 1)
        .unwrap();
    let (log, report) = Log::open(dir.path(), config.clone(), clock()).unwrap();
    assert_eq!(report.truncations.len(), 1, "{report:?}");
    assert_eq!(read_all(&log, 0), stored);
    drop(log);

    // Nor is a non-zero byte inside what would be padding.
    let size = active.size_bytes;
    if !size.is_multiple_of(4096) {
        let raw = OpenOptions::new()
            .write(true)
            .open(&active.log_path)
            .unwrap();
        raw.set_len(size.next_multiple_of(4096)).unwrap();
        raw.write_all_at(&[1], size.next_multiple_of(4096) - 1)
            .unwrap();
        let (log, report) = Log::open(dir.path(), config, clock()).unwrap();
        assert_eq!(report.truncations.len(), 1, "{report:?}");
        assert_eq!(read_all(&log, 0), stored);
    }
}

/// A roll keeps the sealed segment's tail readable from the cache, and the new segment
/// starts its own window: reads on both sides of the roll are exact.
#[test]
fn reads_across_a_roll_are_exact() {
    let dir = tempdir();
    let config = LogConfig {
        segment_bytes: 6000,
        ..tiny_cache()
    };
    let log = open_direct(dir.path(), config);
    let mut stored = Vec::new();
    for i in 0..120u64 {
        let mut b = make_batch(1 + (i % 4) as usize, 150, i, 0);
        let info = log.append(&mut b, 0).unwrap();
        stored.push(b);
        if info.first_offset > 0 {
            // The batch before this one, possibly the sealed segment's last.
            let prev = log.read(info.first_offset - 1, 1, None).unwrap();
            assert_eq!(&prev.data[..], &stored[stored.len() - 2][..]);
        }
    }
    assert!(log.segments().len() > 5);
    assert_eq!(read_all(&log, 0), stored);
}
