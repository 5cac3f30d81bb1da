//! Throughput of `strata_log::Log` against the raw filesystem it sits on.
//!
//! Run with `cargo bench -p strata-benches --bench log` (about a minute on 2 cores;
//! add `-- --quick` for a smoke run).
//!
//! # What is measured
//!
//! * group `append`: append 64 MiB per iteration, one uncompressed batch of 1 KiB
//!   records per `Log::append`, to a fresh log (`segment_bytes` = 256 MiB, so no roll
//!   happens inside the measured writes; default flush policy, so no fsync). Two batch
//!   sizes: `16KiB` and `1MiB` (as many 1 KiB records as fit in that size, so the
//!   "1 MiB" batch stays under Kafka's default `max.message.bytes` of 1 MiB + 12).
//!   The same buffer is appended over and over: the log rewrites only the base offset
//!   and leader epoch in place, which the CRC does not cover, so the batch stays valid.
//!   Both sides write from a buffer that already holds the bytes (for a broker, the
//!   request buffer the socket read filled). The log's extra work is the CRC-32C check
//!   of every byte, the offset rewrite and the index.
//!   Baseline `raw_write/<size>`: the same bytes, in the same chunk sizes, written with
//!   `std::fs::File::write_all` to a fresh file, no fsync.
//! * group `read`: read a 64 MiB log from offset 0 to its end with
//!   `log.read(offset, 1 MiB, None)`, following `next_offset` (one log built of 16 KiB
//!   batches, one of 1 MiB batches). Baseline `raw_read/<batches>`: read that log's own
//!   segment file sequentially with `std::fs::File::read` into one reused 1 MiB buffer.
//!   Both sides read from a WARM page cache: the files were just written and are read
//!   over and over, so this measures the log's CPU/copy overhead, not the disk.
//!
//! Creating and removing directories and files, opening the log and building batches
//! are not timed (`iter_custom`); only the writes or reads are. Every file lives under
//! one temporary directory in `CARGO_TARGET_TMPDIR` (the target dir's filesystem), so
//! the log and its raw baseline hit the same disk. Files written by an iteration are
//! deleted after it, so the disk does not fill up.
//!
//! # Reading the ratios
//!
//! Criterion has no cross-benchmark ratio. Every benchmark sets `Throughput::Bytes`, so
//! criterion prints a `thrpt:` line (low / estimate / high, in GiB/s or MiB/s) for each.
//! Within a group, divide the log's estimate by its baseline's:
//!
//! ```text
//! append ratio (16 KiB) = thrpt(append/log/16KiB) / thrpt(append/raw_write/16KiB)
//! append ratio (1 MiB)  = thrpt(append/log/1MiB)  / thrpt(append/raw_write/1MiB)
//! read ratio            = thrpt(read/log/<batches>) / thrpt(read/raw_read/<batches>)
//! ```
//!
//! A ratio near 1.0 means the log adds little over the bare syscalls; the machine's
//! readings are also in `target/criterion/<group>/<bench>/new/estimates.json` (the
//! `mean.point_estimate` is nanoseconds per iteration of 64 MiB).

use std::fs::File;
use std::hint::black_box;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use strata_log::{Log, LogConfig, SystemClock};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// Bytes written (or read) per measured iteration.
const TOTAL: usize = 64 * MIB;
/// Larger than `TOTAL`, so no segment roll (and its fsync) happens while measuring.
const SEGMENT_BYTES: u64 = 256 * MIB as u64;
const RECORD_VALUE: usize = KIB;
const READ_MAX_BYTES: usize = MIB;
const TIMESTAMP: i64 = 1_700_000_000_000;

/// One uncompressed batch of as many 1 KiB records as fit in `nominal` bytes.
fn build_batch(nominal: usize) -> Vec<u8> {
    let encode = |n: usize| -> Vec<u8> {
        let records: Vec<NewRecord> = (0..n)
            .map(|i| {
                let value: Vec<u8> = (0..RECORD_VALUE).map(|j| (i * 7 + j) as u8).collect();
                NewRecord {
                    key: Some(Bytes::from(format!("key-{i}"))),
                    value: Some(Bytes::from(value)),
                    headers: vec![],
                    timestamp: TIMESTAMP + i as i64,
                }
            })
            .collect();
        batch(&records, Compression::None, None).to_vec()
    };
    let mut n = nominal / RECORD_VALUE;
    loop {
        let b = encode(n);
        if b.len() <= nominal || n == 1 {
            return b;
        }
        n -= 1;
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    }
}

/// The one directory every benchmark writes under: in the target dir's filesystem.
fn bench_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("strata-bench-log-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create the bench directory under CARGO_TARGET_TMPDIR")
}

fn open_log(dir: &Path) -> Log {
    let (log, _report) =
        Log::open(dir, config(), Arc::new(SystemClock)).expect("open a fresh bench log");
    log
}

/// How many whole batches of `batch_len` bytes make up one iteration.
fn batches_per_iter(batch_len: usize) -> usize {
    TOTAL / batch_len
}

fn bench_append(c: &mut Criterion) {
    let root = bench_root();
    let mut group = c.benchmark_group("append");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));

    for (label, nominal) in [("16KiB", 16 * KIB), ("1MiB", MIB)] {
        let prebuilt = build_batch(nominal);
        let count = batches_per_iter(prebuilt.len());
        let bytes = (count * prebuilt.len()) as u64;
        eprintln!(
            "append/{label}: batch of {} bytes, {count} batches = {bytes} bytes per iteration",
            prebuilt.len()
        );
        group.throughput(Throughput::Bytes(bytes));

        group.bench_function(BenchmarkId::new("log", label), |b| {
            let mut buf = prebuilt.clone();
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for i in 0..iters {
                    let dir = root.path().join(format!("append-log-{label}-{i}"));
                    let log = open_log(&dir);
                    let start = Instant::now();
                    for _ in 0..count {
                        black_box(log.append(&mut buf, 0).expect("append"));
                    }
                    elapsed += start.elapsed();
                    drop(log);
                    std::fs::remove_dir_all(&dir).expect("remove the bench log");
                }
                elapsed
            });
        });

        group.bench_function(BenchmarkId::new("raw_write", label), |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for i in 0..iters {
                    let path = root.path().join(format!("append-raw-{label}-{i}"));
                    let mut file = File::create(&path).expect("create the raw file");
                    let start = Instant::now();
                    for _ in 0..count {
                        file.write_all(black_box(&prebuilt))
                            .expect("write the raw file");
                    }
                    elapsed += start.elapsed();
                    drop(file);
                    std::fs::remove_file(&path).expect("remove the raw file");
                }
                elapsed
            });
        });
    }
    group.finish();
}

/// A log of `TOTAL` bytes (rounded down to whole batches) of `nominal`-sized batches.
/// Returns the log and its (only) segment file.
fn build_read_log(root: &Path, label: &str, nominal: usize) -> (Log, PathBuf, u64) {
    let prebuilt = build_batch(nominal);
    let dir = root.join(format!("read-log-{label}"));
    let log = open_log(&dir);
    let mut buf = prebuilt.clone();
    for _ in 0..batches_per_iter(prebuilt.len()) {
        buf.copy_from_slice(&prebuilt);
        log.append(&mut buf, 0)
            .expect("append while building the read log");
    }
    let segments = log.segments();
    assert_eq!(segments.len(), 1, "the read log must fit in one segment");
    let size = log.size_bytes();
    (log, segments[0].log_path.clone(), size)
}

/// Reads the whole log with 1 MiB fetches; returns the bytes read.
fn read_log(log: &Log) -> u64 {
    let end = log.log_end_offset();
    let mut offset = 0;
    let mut total = 0u64;
    while offset < end {
        let r = log.read(offset, READ_MAX_BYTES, None).expect("read");
        total += r.data.len() as u64;
        offset = r.next_offset;
        black_box(r.data);
    }
    total
}

/// Reads the whole file into one reused buffer; returns the bytes read.
fn read_raw(file: &mut File, buf: &mut [u8]) -> u64 {
    let mut total = 0u64;
    loop {
        let n = file.read(buf).expect("read the raw file");
        if n == 0 {
            return total;
        }
        black_box(&buf[..n]);
        total += n as u64;
    }
}

fn bench_read(c: &mut Criterion) {
    let root = bench_root();
    let logs: Vec<(&str, Log, PathBuf, u64)> = [("16KiB-batches", 16 * KIB), ("1MiB-batches", MIB)]
        .into_iter()
        .map(|(label, nominal)| {
            let (log, path, size) = build_read_log(root.path(), label, nominal);
            (label, log, path, size)
        })
        .collect();

    let mut group = c.benchmark_group("read");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));

    // Warm page cache: every file was just written, and each is read (untimed) once here
    // and then many times by criterion's warm-up before any sample is taken.
    let mut buf = vec![0u8; READ_MAX_BYTES];
    for (label, log, segment, size) in &logs {
        assert_eq!(
            read_log(log),
            *size,
            "read/{label} must return the whole log"
        );
        group.throughput(Throughput::Bytes(*size));
        group.bench_function(BenchmarkId::new("log", *label), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(read_log(log));
                }
                start.elapsed()
            });
        });

        // The baseline reads this log's own segment file: same bytes, same file, same
        // (warm) page cache. It must be the same file: how a file was written (16 KiB
        // or 1 MiB writes) changes the page-cache folio sizes and so the read speed.
        {
            let mut file = File::open(segment).expect("open the segment file");
            assert_eq!(read_raw(&mut file, &mut buf), *size);
        }
        group.bench_function(BenchmarkId::new("raw_read", *label), |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let mut file = File::open(segment).expect("open the segment file");
                    let start = Instant::now();
                    black_box(read_raw(&mut file, &mut buf));
                    elapsed += start.elapsed();
                }
                elapsed
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_append, bench_read);
criterion_main!(benches);
