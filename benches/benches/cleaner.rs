//! The log cleaner's throughput against the disk it runs on (issue 16's figure).
//!
//! Run with `cargo bench -p strata-benches --bench cleaner` (a few minutes on 2 cores).
//! Settings by environment: `CLEANER_MB` (the log's size, default 512), `CLEANER_KEYS`
//! (distinct keys, default 200000), `CLEANER_VALUE` (value bytes, default 1000),
//! `CLEANER_CODEC` (none or lz4, default lz4), `CLEANER_ROUNDS` (default 3),
//! `CLEANER_DIR` (where the logs go, default the system temp dir: put it on the disk
//! to measure).
//!
//! Each round writes a fresh log of updates over the keys (uncompacted: every key is
//! written many times; a batch of 100 records), closes it, evicts its files from the
//! page cache (`posix_fadvise(DONTNEED)`; the machine is shared, so caches are not
//! dropped), and then, in this order (the pass changes the files the copy reads):
//!
//! * `raw`: reads every segment file sequentially (1 MiB reads) and writes the bytes to
//!   a new file in the same directory, fsynced at the end: a raw sequential read plus
//!   write of the same bytes on the same disk (`dd`'s floor for the cleaner's IO);
//! * `clean`: one unthrottled `Log::clean` pass over the reopened log (direct IO, the
//!   broker's default), with a dedupe buffer large enough for every key.
//!
//! Reported: input MB/s of each (the log's bytes over the time), the ratio clean/raw
//! (the target is at least 0.5), what the pass wrote, and the offset map's memory per
//! million keys.

// A benchmark program: a failed IO or a broken log is a bench that cannot run.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use strata_log::{CompactionConfig, IoMode, Log, LogConfig, OffsetMap, SystemClock};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 256 << 20,
        io_mode: IoMode::Direct,
        compaction: Some(CompactionConfig {
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio_ppm: 0,
        }),
        ..LogConfig::default()
    }
}

/// Writes a log of about `mb` MiB of updates over `keys` keys into `dir`.
fn build(dir: &Path, mb: u64, keys: u64, value: usize, codec: Compression) -> u64 {
    let (log, _) = Log::open(dir, config(), Arc::new(SystemClock)).expect("open");
    // Values of pseudo-random bytes, so that the codec neither shrinks nor inflates the
    // log's bytes (a value of one repeated byte compresses a hundredfold, and the pass
    // would then spend its time decompressing, per byte of input).
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut random = move |len: usize| {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            v.extend_from_slice(&state.to_le_bytes());
        }
        v.truncate(len);
        Bytes::from(v)
    };
    let mut n = 0u64;
    while log.size_bytes() < mb << 20 {
        let recs: Vec<NewRecord> = (0..100)
            .map(|_| {
                n += 1;
                // A cheap scramble so keys recur in no simple order.
                let k = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) % keys;
                NewRecord {
                    key: Some(Bytes::from(format!("key-{k:012}"))),
                    value: Some(random(value)),
                    headers: vec![],
                    timestamp: 1_700_000_000_000,
                }
            })
            .collect();
        let mut b = encode(&recs, codec);
        log.append(&mut b, 1).expect("append");
    }
    log.force_roll().expect("roll");
    let size = log.size_bytes();
    log.close().expect("close");
    size
}

/// One batch of `recs` compressed as librdkafka compresses (strata-proto's encoder: LZ4
/// in fast mode without a content checksum). The test builder's encoder (kafka-protocol)
/// writes LZ4HC frames with content checksums, whose verification would then dominate
/// the pass's decompression: not what producers send.
fn encode(recs: &[NewRecord], codec: Compression) -> Vec<u8> {
    let plain = batch(recs, Compression::None, None);
    if codec == Compression::None {
        return plain.to_vec();
    }
    let (b, _) = strata_proto::batch::RecordBatch::parse(&plain).expect("a batch");
    let mut h = *b.header();
    h.attributes |= codec.id();
    let records = b.records().expect("records");
    let kept: Vec<_> = records.iter().map(|r| r.expect("a record")).collect();
    strata_proto::rewrite::rewrite_batch(&h, &kept, None).expect("encode")
}

fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

fn evict(dir: &Path) {
    for p in std::fs::read_dir(dir).unwrap().flatten() {
        if let Ok(f) = std::fs::File::open(p.path()) {
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        }
    }
}

/// Reads every segment file and writes it out again beside it; returns seconds.
fn raw(dir: &Path) -> f64 {
    let out_path = dir.join("raw-copy");
    let t = Instant::now();
    let mut out = std::fs::File::create(&out_path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for p in segment_files(dir) {
        let mut f = std::fs::File::open(&p).unwrap();
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).unwrap();
        }
    }
    out.sync_all().unwrap();
    let secs = t.elapsed().as_secs_f64();
    drop(out);
    std::fs::remove_file(out_path).unwrap();
    secs
}

fn main() {
    let mb: u64 = env("CLEANER_MB", 512);
    let keys: u64 = env("CLEANER_KEYS", 200_000);
    let value: usize = env("CLEANER_VALUE", 1000);
    let rounds: usize = env("CLEANER_ROUNDS", 3);
    let codec = match std::env::var("CLEANER_CODEC").as_deref() {
        Ok("none") => Compression::None,
        _ => Compression::Lz4,
    };
    let base = std::env::var("CLEANER_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    println!(
        "cleaner bench: {mb} MiB log, {keys} keys, {value}-byte values, {codec:?}, {rounds} rounds, in {}",
        base.display()
    );
    let (mut raw_mb_s, mut clean_mb_s) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let size = build(dir.path(), mb, keys, value, codec);
        let run_raw = || {
            evict(dir.path());
            size as f64 / 1e6 / raw(dir.path())
        };
        let run_clean = || {
            evict(dir.path());
            let (log, _) = Log::open(dir.path(), config(), Arc::new(SystemClock)).unwrap();
            let mut map = OffsetMap::with_memory(256 << 20);
            let t = Instant::now();
            let out = log
                .clean(&mut map, 1_700_000_000_000, i64::MAX, &mut |_| {})
                .expect("clean");
            let secs = t.elapsed().as_secs_f64();
            println!(
                "  round {round}: clean read {} MB, wrote {} MB, {} -> {} segments, {} keys, map {} MiB ({:.1} MiB per million keys)",
                out.bytes_read / 1_000_000,
                out.bytes_written / 1_000_000,
                out.segments_before,
                out.segments_after,
                out.keys,
                map.memory_bytes() >> 20,
                map.memory_bytes() as f64 / (1 << 20) as f64 / (out.keys as f64 / 1e6)
            );
            size as f64 / 1e6 / secs
        };
        let r = run_raw();
        let c = run_clean();
        println!(
            "  round {round}: raw read+write {r:.1} MB/s, clean {c:.1} MB/s of input, ratio {:.3}",
            c / r
        );
        raw_mb_s.push(r);
        clean_mb_s.push(c);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (r, c) = (median(&mut raw_mb_s), median(&mut clean_mb_s));
    println!(
        "median: raw read+write {r:.1} MB/s, clean {c:.1} MB/s, ratio {:.3}",
        c / r
    );
}
