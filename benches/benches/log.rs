//! Throughput of `strata_log::Log` against the raw filesystem it sits on.
//!
//! Run with `cargo bench -p strata-benches --bench log` (about two minutes on 2 cores;
//! add `-- --quick` for a smoke run).
//!
//! # What is measured
//!
//! * group `append`: append 64 MiB per iteration, one uncompressed batch of 1 KiB
//!   records per `Log::append`, to a fresh log (`segment_bytes` = 256 MiB, so no roll
//!   happens inside the measured writes; default flush policy, so no fsync). Two batch
//!   sizes: `16KiB` and `1MiB` (as many 1 KiB records as fit in that size, so the
//!   "1 MiB" batch stays under Kafka's default `max.message.bytes` of 1 MiB + 12).
//!   Two logs: `log_direct` (`IoMode::Direct`, the default: `O_DIRECT` writes through
//!   the tail buffer) and `log_buffered` (`IoMode::Buffered`: through the page cache).
//!   The same buffer is appended over and over: the log rewrites only the base offset
//!   and leader epoch in place, which the CRC does not cover, so the batch stays valid.
//!   Both sides write from a buffer that already holds the bytes (for a broker, the
//!   request buffer the socket read filled). The log's extra work is the CRC-32C check
//!   of every byte, the offset rewrite and the index.
//!   Baselines: `raw_write/<size>`: the same bytes, in the same chunk sizes, written
//!   with `std::fs::File::write_all` to a fresh file, no fsync; `raw_write_direct/<size>`:
//!   the same number of writes of the batch rounded up to 4 KiB, from one aligned buffer
//!   to a fresh file opened with `O_DIRECT` (what `dd oflag=direct` does: the floor for
//!   the direct log, which also copies each batch into its buffer and rewrites the
//!   partial last block).
//! * group `read`: read a 64 MiB log, written in direct mode, from offset 0 to its end
//!   with `log.read(offset, 1 MiB, None)`, following `next_offset` (logs built of 16 KiB
//!   batches and of 1 MiB batches). `log_pread/<batches>`: a log with the default tail
//!   cache (4 MiB), switched to `IoMode::Buffered` after it was written (reads follow
//!   the mode at once), so nearly every read is a `pread` through the page cache;
//!   `log_cache/<batches>`: a log whose tail cache holds all of it (`tail_cache_bytes` =
//!   2 x 64 MiB), so every read is a copy from that memory, as a tail consumer's is.
//!   Baseline `raw_read/<batches>`: read the pread log's segment file sequentially with
//!   `std::fs::File::read` into one reused 1 MiB buffer. The page cache is WARM: direct
//!   writes leave nothing there, but the untimed first pass and criterion's warm-up
//!   read every file, so this measures the log's CPU/copy overhead, not the disk. (In
//!   direct mode reads outside the tail cache bypass the page cache, warm or not: that
//!   is what `cold_log_direct` measures.)
//! * group `read`, COLD: the same 64 MiB logs, written with `O_DIRECT` (so the page
//!   cache never held them) and closed, read from offset 0 to the end once per
//!   iteration, as a consumer catching up does. The machine is shared, so caches are
//!   not dropped: instead every segment file is evicted with
//!   `posix_fadvise(POSIX_FADV_DONTNEED)` (untimed) before each iteration, which the
//!   fsync at close made possible (only clean pages are evicted).
//!   `cold_log_direct/<batches>`: `IoMode::Direct` reads (`O_DIRECT`, aligned, into the
//!   log's own buffers); `cold_log_buffered/<batches>`: `IoMode::Buffered` reads
//!   (`pread` through the page cache, which allocates every page on first touch);
//!   baselines `cold_raw_direct/<batches>`: the segment file read sequentially with
//!   `O_DIRECT` in 1 MiB aligned reads into one aligned buffer (`dd iflag=direct
//!   bs=1M`), and `cold_raw_buffered/<batches>`: the same file read with
//!   `std::fs::File::read` into a reused 1 MiB buffer (`dd bs=1M`).
//!   Caveat for the buffered ones: the pages evicted before an iteration go back to the
//!   free lists and the iteration's page-cache fill reuses them at once, which is cheap.
//!   A broker whose page cache grows by gigabytes takes pages the VM has not touched
//!   lately, whose first touch costs far more: on the 2-core VM these were measured on,
//!   `dd bs=1M` reading a just-direct-written 2 GB file cost 1.67 CPU-s per GB, and 1.7
//!   for an evicted 1 GiB file once the freed pages had gone cold, against 0.13 to 0.2
//!   here. So the buffered cold numbers are a lower bound of their CPU cost (and their
//!   throughput an upper bound); the direct ones do not depend on it.
//!
//! # CPU per GB
//!
//! Criterion measures wall time. Each benchmark also reads this process's user and
//! system CPU time (`/proc/self/stat`) around every timed loop and, when it finishes,
//! prints to stderr the CPU seconds per GB (10^9 bytes) over all of its timed loops:
//!
//! ```text
//! cpu append/log_direct/1MiB: 0.312 CPU-s/GB (user 0.190, sys 0.122) over 3.4 GB
//! ```
//!
//! Kernel work done by other threads is not in it: for buffered writes, the flusher
//! threads' writeback (ext4's delayed block allocation included) and page reclaim run
//! in kernel threads, so buffered numbers are a lower bound of what the machine spends.
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
//! append ratio, direct   = thrpt(append/log_direct/<size>)   / thrpt(append/raw_write_direct/<size>)
//! append ratio, buffered = thrpt(append/log_buffered/<size>) / thrpt(append/raw_write/<size>)
//! read ratio             = thrpt(read/log_pread/<batches>)   / thrpt(read/raw_read/<batches>)
//! cold read ratio, direct   = thrpt(read/cold_log_direct/<b>)   / thrpt(read/cold_raw_direct/<b>)
//! cold read ratio, buffered = thrpt(read/cold_log_buffered/<b>) / thrpt(read/cold_raw_buffered/<b>)
//! ```
//!
//! A ratio near 1.0 means the log adds little over the bare syscalls; the machine's
//! readings are also in `target/criterion/<group>/<bench>/new/estimates.json` (the
//! `mean.point_estimate` is nanoseconds per iteration of 64 MiB).

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use strata_log::{DEFAULT_TAIL_CACHE_BYTES, IoMode, Log, LogConfig, SystemClock};
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

fn config(io_mode: IoMode) -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        io_mode,
        ..LogConfig::default()
    }
}

/// `O_DIRECT` for `OpenOptionsExt::custom_flags` (the benches have no libc binding):
/// its value differs between architectures.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
const O_DIRECT: i32 = 0o40000;
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
const O_DIRECT: i32 = 0o200000;

/// Direct IO alignment: file positions, lengths and buffer addresses.
const BLOCK: usize = 4096;

/// This process's (user, system) CPU time in clock ticks.
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // Fields after the command name (which may hold spaces, so split after its ')'):
    // state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("a /proc stat line") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> u64 { fields[n - 3].parse().expect("a tick count") };
    (field(14), field(15))
}

/// /proc reports CPU times in USER_HZ, which the kernel ABI fixes at 100 per second.
const TICKS_PER_SEC: f64 = 100.0;

/// CPU time and bytes over every timed loop of one benchmark.
#[derive(Default)]
struct CpuTally {
    user: u64,
    sys: u64,
    bytes: u64,
}

impl CpuTally {
    /// Runs `f` (one timed loop that moves `bytes` bytes) and adds its CPU time.
    fn measure<T>(&mut self, bytes: u64, f: impl FnOnce() -> T) -> T {
        let (u0, s0) = cpu_ticks();
        let out = f();
        let (u1, s1) = cpu_ticks();
        self.user += u1 - u0;
        self.sys += s1 - s0;
        self.bytes += bytes;
        out
    }

    /// Prints CPU-s per GB to stderr (nothing if the benchmark did not run).
    fn report(&self, name: &str) {
        if self.bytes == 0 {
            return;
        }
        let gb = self.bytes as f64 / 1e9;
        let (user, sys) = (
            self.user as f64 / TICKS_PER_SEC / gb,
            self.sys as f64 / TICKS_PER_SEC / gb,
        );
        eprintln!(
            "cpu {name}: {:.3} CPU-s/GB (user {user:.3}, sys {sys:.3}) over {gb:.1} GB",
            user + sys
        );
    }
}

/// A buffer of `len` bytes whose start is `BLOCK`-aligned in memory, as `O_DIRECT`
/// needs; `data` is copied to its start and the rest is zeros.
struct AlignedBuf {
    mem: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(data: &[u8], len: usize) -> Self {
        let mut mem = vec![0u8; len + BLOCK];
        let off = (BLOCK - mem.as_ptr().addr() % BLOCK) % BLOCK;
        mem[off..off + data.len()].copy_from_slice(data);
        AlignedBuf { mem, off, len }
    }
    fn bytes(&self) -> &[u8] {
        &self.mem[self.off..self.off + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.off..self.off + self.len]
    }
}

/// The one directory every benchmark writes under: in the target dir's filesystem.
fn bench_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("strata-bench-log-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create the bench directory under CARGO_TARGET_TMPDIR")
}

fn open_log(dir: &Path, config: LogConfig) -> Log {
    let (log, _report) =
        Log::open(dir, config, Arc::new(SystemClock)).expect("open a fresh bench log");
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

        for (name, mode) in [
            ("log_direct", IoMode::Direct),
            ("log_buffered", IoMode::Buffered),
        ] {
            let mut tally = CpuTally::default();
            group.bench_function(BenchmarkId::new(name, label), |b| {
                let mut buf = prebuilt.clone();
                b.iter_custom(|iters| {
                    let mut elapsed = Duration::ZERO;
                    for i in 0..iters {
                        let dir = root.path().join(format!("append-{name}-{label}-{i}"));
                        let log = open_log(&dir, config(mode));
                        if mode == IoMode::Direct {
                            assert_eq!(log.io_mode(), IoMode::Direct, "O_DIRECT refused");
                        }
                        let start = Instant::now();
                        tally.measure(bytes, || {
                            for _ in 0..count {
                                black_box(log.append(&mut buf, 0).expect("append"));
                            }
                        });
                        elapsed += start.elapsed();
                        drop(log);
                        std::fs::remove_dir_all(&dir).expect("remove the bench log");
                    }
                    elapsed
                });
            });
            tally.report(&format!("append/{name}/{label}"));
        }

        let mut tally = CpuTally::default();
        group.bench_function(BenchmarkId::new("raw_write", label), |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for i in 0..iters {
                    let path = root.path().join(format!("append-raw-{label}-{i}"));
                    let mut file = File::create(&path).expect("create the raw file");
                    let start = Instant::now();
                    tally.measure(bytes, || {
                        for _ in 0..count {
                            file.write_all(black_box(&prebuilt))
                                .expect("write the raw file");
                        }
                    });
                    elapsed += start.elapsed();
                    drop(file);
                    std::fs::remove_file(&path).expect("remove the raw file");
                }
                elapsed
            });
        });
        tally.report(&format!("append/raw_write/{label}"));

        let mut tally = CpuTally::default();
        let chunk = prebuilt.len().next_multiple_of(BLOCK);
        let aligned = AlignedBuf::new(&prebuilt, chunk);
        group.bench_function(BenchmarkId::new("raw_write_direct", label), |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for i in 0..iters {
                    let path = root.path().join(format!("append-raw-direct-{label}-{i}"));
                    let file = OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .custom_flags(O_DIRECT)
                        .open(&path)
                        .expect("create the raw file with O_DIRECT");
                    let start = Instant::now();
                    tally.measure(bytes, || {
                        for k in 0..count {
                            file.write_all_at(black_box(aligned.bytes()), (k * chunk) as u64)
                                .expect("write the raw file with O_DIRECT");
                        }
                    });
                    elapsed += start.elapsed();
                    drop(file);
                    std::fs::remove_file(&path).expect("remove the raw file");
                }
                elapsed
            });
        });
        tally.report(&format!("append/raw_write_direct/{label}"));
    }
    group.finish();
}

/// A log of `TOTAL` bytes (rounded down to whole batches) of `nominal`-sized batches,
/// written in direct mode with a tail cache of `tail_cache_bytes`. Returns the log and
/// its (only) segment file.
fn build_read_log(
    root: &Path,
    label: &str,
    nominal: usize,
    tail_cache_bytes: usize,
) -> (Log, PathBuf, u64) {
    let prebuilt = build_batch(nominal);
    let dir = root.join(format!("read-log-{label}-{tail_cache_bytes}"));
    let config = LogConfig {
        tail_cache_bytes,
        ..config(IoMode::Direct)
    };
    let log = open_log(&dir, config);
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
    let mut group = c.benchmark_group("read");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));

    let mut buf = vec![0u8; READ_MAX_BYTES];
    for (label, nominal) in [("16KiB-batches", 16 * KIB), ("1MiB-batches", MIB)] {
        // Built one batch size at a time, so only one whole-log cache is in memory.
        let pread = build_read_log(root.path(), label, nominal, DEFAULT_TAIL_CACHE_BYTES);
        // Read through the (warm) page cache: see the module docs.
        pread.0.set_config(LogConfig {
            io_mode: IoMode::Buffered,
            ..pread.0.config()
        });
        let cached = build_read_log(root.path(), label, nominal, 2 * TOTAL);
        let (_, segment, size) = &pread;
        group.throughput(Throughput::Bytes(*size));
        for (name, (log, _, size)) in [("log_pread", &pread), ("log_cache", &cached)] {
            // Warm page cache: direct writes left none, so read every file (untimed)
            // once here; criterion's warm-up reads it again before any sample.
            assert_eq!(
                read_log(log),
                *size,
                "read/{name}/{label} must return the whole log"
            );
            let mut tally = CpuTally::default();
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        tally.measure(*size, || black_box(read_log(log)));
                    }
                    start.elapsed()
                });
            });
            tally.report(&format!("read/{name}/{label}"));
        }

        // The baseline reads the pread log's own segment file: same bytes, same file,
        // same (warm) page cache. It must be the same file: how a file was written
        // changes the page-cache folio sizes and so the read speed.
        // The file is the log's bytes and, as the log is still open, the zero padding
        // of its last direct write (under 4 KiB).
        {
            let mut file = File::open(segment).expect("open the segment file");
            let len = file.metadata().expect("stat the segment file").len();
            assert!(len - *size < 4096);
            assert_eq!(read_raw(&mut file, &mut buf), len);
        }
        let mut tally = CpuTally::default();
        group.bench_function(BenchmarkId::new("raw_read", label), |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let mut file = File::open(segment).expect("open the segment file");
                    let start = Instant::now();
                    tally.measure(*size, || black_box(read_raw(&mut file, &mut buf)));
                    elapsed += start.elapsed();
                }
                elapsed
            });
        });
        tally.report(&format!("read/raw_read/{label}"));
        drop((pread, cached));
        bench_read_cold(&mut group, root.path(), label, nominal);
    }
    group.finish();
}

/// Drops `path`'s clean pages from the page cache.
fn evict(path: &Path) {
    let file = File::open(path).expect("open a file to evict");
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)
        .expect("posix_fadvise(DONTNEED)");
}

/// Checks, with util-linux's `fincore` where it is installed, that [`evict`] left
/// nothing of `path` in the page cache.
fn check_evicted(path: &Path) {
    let Ok(out) = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
    else {
        eprintln!("no fincore: cannot check that the page cache is cold");
        return;
    };
    let resident = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(resident, "0", "{} still in the page cache", path.display());
}

/// Reads the whole file with `O_DIRECT`, in `buf`-sized aligned reads; returns the bytes
/// read.
fn read_raw_direct(file: &File, buf: &mut AlignedBuf) -> u64 {
    let mut total = 0u64;
    loop {
        let n = file
            .read_at(buf.bytes_mut(), total)
            .expect("read the raw file with O_DIRECT");
        black_box(&buf.bytes()[..n]);
        total += n as u64;
        // Short only at the end of the file (which need not be block-aligned).
        if n < buf.len {
            return total;
        }
    }
}

/// The cold reads (see the module docs): a log of `nominal`-sized batches written with
/// `O_DIRECT` and closed, then read with nothing of it in the page cache.
fn bench_read_cold(
    group: &mut BenchmarkGroup<'_, WallTime>,
    root: &Path,
    label: &str,
    nominal: usize,
) {
    let (log, _, size) = build_read_log(
        root,
        &format!("cold-{label}"),
        nominal,
        DEFAULT_TAIL_CACHE_BYTES,
    );
    let dir = log.dir().to_path_buf();
    let segment = log.segments()[0].log_path.clone();
    log.close().expect("close the cold log");
    evict(&segment);
    check_evicted(&segment);
    assert_eq!(std::fs::metadata(&segment).expect("stat").len(), size);
    group.throughput(Throughput::Bytes(size));

    for (name, mode) in [
        ("cold_log_direct", IoMode::Direct),
        ("cold_log_buffered", IoMode::Buffered),
    ] {
        // Opening scans the segment through the page cache: evicted before each read.
        let log = open_log(&dir, config(mode));
        assert_eq!(log.io_mode(), mode, "O_DIRECT refused");
        let mut tally = CpuTally::default();
        group.bench_function(BenchmarkId::new(name, label), |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    evict(&segment);
                    let start = Instant::now();
                    let n = tally.measure(size, || read_log(&log));
                    elapsed += start.elapsed();
                    assert_eq!(n, size, "read/{name}/{label} must return the whole log");
                }
                elapsed
            });
        });
        tally.report(&format!("read/{name}/{label}"));
    }

    let mut tally = CpuTally::default();
    let mut buf = AlignedBuf::new(&[], READ_MAX_BYTES);
    group.bench_function(BenchmarkId::new("cold_raw_direct", label), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                evict(&segment);
                let file = OpenOptions::new()
                    .read(true)
                    .custom_flags(O_DIRECT)
                    .open(&segment)
                    .expect("open the segment file with O_DIRECT");
                let start = Instant::now();
                let n = tally.measure(size, || read_raw_direct(&file, &mut buf));
                elapsed += start.elapsed();
                assert_eq!(n, size);
            }
            elapsed
        });
    });
    tally.report(&format!("read/cold_raw_direct/{label}"));

    let mut tally = CpuTally::default();
    let mut buf = vec![0u8; READ_MAX_BYTES];
    group.bench_function(BenchmarkId::new("cold_raw_buffered", label), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                evict(&segment);
                let mut file = File::open(&segment).expect("open the segment file");
                let start = Instant::now();
                let n = tally.measure(size, || read_raw(&mut file, &mut buf));
                elapsed += start.elapsed();
                assert_eq!(n, size);
            }
            elapsed
        });
    });
    tally.report(&format!("read/cold_raw_buffered/{label}"));
    std::fs::remove_dir_all(&dir).expect("remove the cold log");
}

criterion_group!(benches, bench_append, bench_read);
criterion_main!(benches);
