//! Streaming conversion against the in-memory one it replaced, on the same segment file
//! and the same local-directory store, in the same run: throughput and peak memory.
//!
//! `cargo bench -p strata-parquet --bench stream`. The segment is 256 MiB of 1 KiB
//! event-like values in uncompressed batches of 64 records (STRATA_BENCH_MIB changes
//! the size), written to a temporary file, as a sealed segment is on disk.
//!
//! - in-memory (before): read the whole file (`read_range` did), `convert_segment` into
//!   a `Vec`, one PUT;
//! - streaming (now): `ParquetSink::write_source` over the file read 4 MiB at a time,
//!   two passes, row groups uploaded in 8 MiB parts.
//!
//! Both use the default options (128 MiB row groups). Peak memory is what the process
//! allocates above its baseline (a counting global allocator, sampled every 100 µs), so
//! it includes the row group in the writer. Each is timed three times, alternately; the
//! ratios are printed (the machine is noisy, absolute figures mean little).
#![allow(clippy::unwrap_used, missing_docs)]

use std::alloc::System;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use strata_parquet::{
    ByteSource, ConvertOptions, ParquetLayout, ParquetSink, SourceError, convert_segment,
};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::batch::set_base_offset;
use strata_store::{ObjectBackend, PutMode};

mod common;
use common::value;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn live() -> usize {
    let s = GLOBAL.stats();
    s.bytes_allocated.saturating_sub(s.bytes_deallocated)
}

static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Runs `f`, returning its result, its time and the peak allocation above the start.
fn measured<T>(f: impl FnOnce() -> T) -> (T, Duration, usize) {
    let before = live();
    PEAK.store(before, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let sampler = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            PEAK.fetch_max(live(), Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(100));
        }
    });
    let t = Instant::now();
    let out = f();
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    (
        out,
        took,
        PEAK.load(Ordering::Relaxed).saturating_sub(before),
    )
}

/// A segment file, read with `pread` as the log's span is.
struct FileSource {
    file: std::fs::File,
    len: u64,
}

#[async_trait]
impl ByteSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes, SourceError> {
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, pos)
            .map_err(|e| SourceError::new(true, e))?;
        Ok(Bytes::from(buf))
    }
}

/// Writes the segment to `path` batch by batch; returns its size and record count.
fn write_segment(path: &std::path::Path, mib: usize) -> (u64, usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let (mut size, mut rows, mut g) = (0usize, 0usize, 1u64);
    while size < mib << 20 {
        let records: Vec<NewRecord> = (0..64)
            .map(|j| NewRecord {
                key: Some(Bytes::from(format!("user-{}", (rows + j) % 10_000))),
                value: Some(Bytes::from(value(&mut g, rows + j))),
                headers: Vec::new(),
                timestamp: 1_700_000_000_000 + (rows + j) as i64,
            })
            .collect();
        let mut b = batch(&records, Compression::None, None).to_vec();
        set_base_offset(&mut b, rows as i64);
        f.write_all(&b).unwrap();
        size += b.len();
        rows += 64;
    }
    f.flush().unwrap();
    (size as u64, rows)
}

fn main() {
    let mib: usize = std::env::var("STRATA_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let dir = tempfile::tempdir().unwrap();
    let seg_path = dir.path().join("segment.log");
    let (size, rows) = write_segment(&seg_path, mib);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store_dir = dir.path().join("store");
    let store = ObjectBackend::local(&store_dir).unwrap().into_dyn();
    let opts = ConvertOptions::new("bench", 0);

    let in_memory = |round: usize| {
        let bytes = std::fs::read(&seg_path).unwrap();
        let file = convert_segment(&bytes, &opts).unwrap();
        drop(bytes);
        let len = file.bytes.len();
        rt.block_on(store.put(
            &format!("old/{round}.parquet"),
            Bytes::from(file.bytes),
            PutMode::Overwrite,
        ))
        .unwrap();
        len
    };
    let streaming = |round: usize| {
        let src = FileSource {
            file: std::fs::File::open(&seg_path).unwrap(),
            len: size,
        };
        // A fresh partition each round: the sink skips what its manifest has.
        let sink = ParquetSink::new(store.clone(), ParquetLayout::new("new"), opts.clone());
        let w = rt
            .block_on(sink.write_source("bench", round as i32, &src))
            .unwrap()
            .unwrap();
        assert_eq!(w.rows as usize, rows);
        w.bytes as usize
    };

    println!(
        "segment: {} MiB, {rows} records; part size {} MiB",
        size >> 20,
        store.upload_config().part_size >> 20
    );
    let (mut old_t, mut new_t, mut old_peak, mut new_peak) =
        (Vec::new(), Vec::new(), 0usize, 0usize);
    for round in 0..3 {
        let (file_old, t, p) = measured(|| in_memory(round));
        old_t.push(t);
        old_peak = old_peak.max(p);
        let (file_new, t, p) = measured(|| streaming(round));
        new_t.push(t);
        new_peak = new_peak.max(p);
        assert_eq!(file_old, file_new, "both write the same file");
        println!(
            "round {round}: in-memory {:.2} s, streaming {:.2} s",
            old_t[round].as_secs_f64(),
            new_t[round].as_secs_f64()
        );
    }
    let best = |v: &[Duration]| v.iter().min().copied().unwrap_or_default().as_secs_f64();
    let (o, n) = (best(&old_t), best(&new_t));
    println!(
        "throughput (best of 3): in-memory {:.0} MiB/s, streaming {:.0} MiB/s; streaming/in-memory = {:.2}x",
        size as f64 / (1 << 20) as f64 / o,
        size as f64 / (1 << 20) as f64 / n,
        o / n
    );
    println!(
        "peak allocation: in-memory {:.0} MiB, streaming {:.0} MiB ({:.1}x less; input {} MiB)",
        old_peak as f64 / (1 << 20) as f64,
        new_peak as f64 / (1 << 20) as f64,
        old_peak as f64 / new_peak.max(1) as f64,
        size >> 20
    );
}
