//! Direct mode specifics: buffered reads stay coherent with `O_DIRECT` writes, the tail
//! cache serves exactly the bytes (inside it and across its start), `O_DIRECT` reads of
//! sealed segments and of the active segment before the cache return exactly the file's
//! bytes at any alignment (stitched exactly to the cache's), also while appends and
//! rolls run, and the zero padding of direct writes is cut at seal, close and recovery
//! without being reported as lost data, while anything else after the last batch still
//! is.
//!
//! These tests write under `CARGO_TARGET_TMPDIR` (the target dir's filesystem, a disk
//! filesystem that takes `O_DIRECT`), not the system temp dir, which may be anything.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use strata_log::{IoMode, Log, LogConfig, ManualClock, SegmentInfo};
use strata_proto::batch::{self, HEADER_LEN};

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

/// Batch sizes that put batch boundaries, and segment ends, anywhere in a block.
fn varied_batch(i: u64) -> Vec<u8> {
    let (n, size) = match i % 11 {
        3 => (4, 1200),
        7 => (1, 5000),
        _ => (1 + (i % 3) as usize, 30 + (i as usize * 211) % 1400),
    };
    make_batch(n, size, i, 1000 + i as i64)
}

/// Where each stored batch starts in its segment, by first offset.
fn positions(stored: &[(i64, Vec<u8>)], segs: &[SegmentInfo]) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut seg = 0;
    for (offset, b) in stored {
        while *offset >= segs[seg].next_offset {
            seg += 1;
            pos = 0;
        }
        out.push((seg, pos));
        pos += b.len() as u64;
    }
    out
}

/// Reads from every batch with limits from one byte to past the segment's end, and
/// checks that exactly the stored batches come back, none past the segment's end.
fn check_every_read(log: &Log, stored: &[(i64, Vec<u8>)]) {
    let segs = log.segments();
    for (k, (offset, _)) in stored.iter().enumerate() {
        let seg = segs
            .iter()
            .find(|s| s.base_offset <= *offset && *offset < s.next_offset)
            .unwrap();
        for max_bytes in [1, 700, 4096, 5000, 20_000, 1 << 20] {
            let r = log.read(*offset, max_bytes, None).unwrap();
            let mut n = 0;
            for (b, (want_offset, want)) in batch::batches(&r.data).zip(&stored[k..]) {
                let b = b.unwrap();
                assert_eq!(b.base_offset(), *want_offset);
                assert!(
                    b.as_bytes() == &want[..],
                    "read at {offset} max {max_bytes}"
                );
                n += b.as_bytes().len();
            }
            assert_eq!(n, r.data.len(), "whole stored batches only");
            assert!(r.next_offset <= seg.next_offset, "one segment per read");
            if max_bytes == 1 << 20 {
                assert_eq!(r.next_offset, seg.next_offset, "up to the segment's end");
            }
        }
    }
}

/// Sealed segments (whose files end off a block boundary) read with `O_DIRECT` return
/// exactly the stored batches from any batch, with any limit, up to and including the
/// segment's last byte; the same after a reopen, where each sealed segment opens its
/// `O_DIRECT` fd on first read. And the bytes come from the file, at their exact
/// positions: bytes overwritten behind the log's back across a block boundary, and at
/// the very end of a segment, read back as overwritten.
#[test]
fn direct_reads_of_sealed_segments_return_exactly_the_bytes() {
    let dir = tempdir();
    let config = LogConfig {
        segment_bytes: 10_000,
        ..tiny_cache()
    };
    let log = open_direct(dir.path(), config.clone());
    let mut stored = Vec::new();
    for i in 0..150u64 {
        let mut b = varied_batch(i);
        let info = log.append(&mut b, 3).unwrap();
        stored.push((info.first_offset, b));
    }
    let segs = log.segments();
    assert!(segs.len() > 10);
    assert!(
        segs.iter().filter(|s| s.size_bytes % 4096 != 0).count() > 5,
        "segment ends off a block boundary"
    );
    check_every_read(&log, &stored);
    drop(log);
    let log = open_direct(dir.path(), config);
    check_every_read(&log, &stored);

    // In a sealed segment far from the cache: overwrite 10 record bytes across a 4 KiB
    // boundary, and the segment's last 3 bytes (read() checks framing, not CRCs).
    let segs = log.segments();
    let at = positions(&stored, &segs);
    let (k, boundary) = (0..stored.len())
        .filter(|&k| at[k].0 + 3 < segs.len())
        .find_map(|k| {
            let (start, len) = (at[k].1, stored[k].1.len() as u64);
            let boundary = (start + HEADER_LEN as u64 + 20).next_multiple_of(4096);
            (boundary + 20 < start + len).then_some((k, boundary))
        })
        .unwrap();
    let seg = &segs[at[k].0];
    let raw = OpenOptions::new().write(true).open(&seg.log_path).unwrap();
    raw.write_all_at(&[0xEE; 10], boundary - 5).unwrap();
    raw.write_all_at(&[0xDD; 3], seg.size_bytes - 3).unwrap();
    raw.sync_all().unwrap();
    let r = log.read(stored[k].0, 1, None).unwrap();
    let start = at[k].1;
    let mut want = stored[k].1.clone();
    let rel = (boundary - 5 - start) as usize;
    want[rel..rel + 10].fill(0xEE);
    assert!(
        r.data[..] == want[..],
        "the file's bytes, at their positions"
    );
    let last = (0..stored.len())
        .rev()
        .find(|&j| at[j].0 == at[k].0)
        .unwrap();
    let r = log.read(stored[last].0, 1 << 20, None).unwrap();
    let mut want = stored[last].1.clone();
    let n = want.len();
    want[n - 3..].fill(0xDD);
    assert!(r.data[..] == want[..], "up to the segment's last byte");
}

/// In the active segment, bytes before the tail cache are read with `O_DIRECT` and the
/// cache's are copied, stitched at a block boundary: with every record byte in the file
/// flipped behind the log's back, each read returns the flipped bytes up to one block
/// boundary (at most three blocks before the end: two 4 KiB windows and a partial
/// block) and the appended ones from there, whatever the read's start and length.
#[test]
fn direct_reads_of_the_active_segment_stitch_file_and_cache_exactly() {
    let dir = tempdir();
    let log = open_direct(dir.path(), tiny_cache());
    let mut stored = Vec::new();
    for i in 0..120u64 {
        let mut b = varied_batch(i);
        let info = log.append(&mut b, 3).unwrap();
        stored.push((info.first_offset, b));
    }
    assert_eq!(log.segments().len(), 1);
    check_every_read(&log, &stored);
    let orig: Vec<u8> = stored.iter().flat_map(|(_, b)| b.clone()).collect();
    let size = orig.len() as u64;
    let mut header = vec![false; orig.len()];
    let mut pos = 0;
    for (_, b) in &stored {
        header[pos..pos + HEADER_LEN].fill(true);
        pos += b.len();
    }
    let flipped: Vec<u8> = orig
        .iter()
        .zip(&header)
        .map(|(&b, &h)| if h { b } else { b ^ 0x5A })
        .collect();
    let path = log.segments()[0].log_path.clone();
    let raw = OpenOptions::new().write(true).open(&path).unwrap();
    raw.write_all_at(&flipped, 0).unwrap();
    raw.sync_all().unwrap();

    // Where the cache starts, as the whole segment read shows it.
    let whole = log.read(0, size as usize, None).unwrap();
    assert_eq!(whole.data.len() as u64, size);
    let c = (0..orig.len())
        .find(|&p| !header[p] && whole.data[p] == orig[p])
        .unwrap() as u64;
    // A block boundary, with only header bytes (never flipped) between it and `c`.
    let cache_start = (c / 4096) * 4096;
    assert!(
        (cache_start..c).all(|p| header[p as usize]),
        "the cache starts at a block boundary"
    );
    assert!(
        cache_start <= (size / 4096) * 4096,
        "the partial block is cached"
    );
    assert!(cache_start + 3 * 4096 >= size, "{cache_start} of {size}");
    let expect = |p: u64| -> u8 {
        if p < cache_start {
            flipped[p as usize]
        } else {
            orig[p as usize]
        }
    };
    assert!((0..size).all(|p| whole.data[p as usize] == expect(p)));
    // From every batch, with limits that end before the cache, inside it, or at the end.
    let mut start = 0u64;
    for (offset, b) in &stored {
        for max_bytes in [1, 3000, 9000, size as usize] {
            let r = log.read(*offset, max_bytes, None).unwrap();
            assert!(!r.data.is_empty());
            for (i, &byte) in r.data.iter().enumerate() {
                assert_eq!(
                    byte,
                    expect(start + i as u64),
                    "read at {offset} max {max_bytes}"
                );
            }
        }
        start += b.len() as u64;
    }
}

/// Readers racing appends, window switches, partial-block rewrites and rolls read
/// exactly what was appended: every batch framed, CRC-valid, and at its offset.
#[test]
fn concurrent_direct_reads_during_appends_and_rolls_are_exact() {
    let dir = tempdir();
    let config = LogConfig {
        segment_bytes: 30_000,
        ..tiny_cache()
    };
    let log = Arc::new(open_direct(dir.path(), config));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (log, done) = (log.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut x = r + 1;
                while !done.load(Ordering::Relaxed) || reads < 100 {
                    let end = log.log_end_offset();
                    if end == 0 {
                        continue;
                    }
                    // Mostly the newest offsets, some older ones.
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let back = if x % 4 == 0 {
                        (x >> 33) % 400
                    } else {
                        (x >> 33) % 8
                    };
                    let offset = (end - 1 - back as i64).max(0);
                    let r = log
                        .read(offset, 1 + (x >> 20) as usize % 20_000, None)
                        .unwrap();
                    let mut next = None;
                    for b in batch::batches(&r.data) {
                        let b = b.unwrap();
                        b.validate_crc().unwrap();
                        assert!(next.is_none_or(|n| n == b.base_offset()), "dense");
                        next = Some(b.next_offset());
                    }
                    assert!(next.unwrap() > offset);
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for i in 0..600u64 {
        let mut b = varied_batch(i);
        log.append(&mut b, 1).unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 100);
    }
    assert!(log.segments().len() > 10);
}
