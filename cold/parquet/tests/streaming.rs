//! Streaming conversion: memory bounded by a row group and an upload part whatever the
//! segment's size, a multipart upload for a file larger than a part and one PUT for a
//! small one, and an upload that fails half-way leaving nothing behind.
//!
//! The test binary counts every allocation (a `#[global_allocator]`), so the memory test
//! measures what conversion holds, not what the OS reports. Tests in this binary run one
//! at a time (a lock) so that they do not count each other's allocations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use async_trait::async_trait;
use bytes::Bytes;
use common::Lcg;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use strata_parquet::{
    ByteSource, ConvertOptions, ParquetLayout, ParquetSink, SinkError, SourceError, convert_segment,
};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::batch::set_base_offset;
use strata_store::{BlobStore, ErrorKind, FaultStore, ObjectBackend, Op};

// The allocator counts (stats_alloc: bytes allocated and freed so far); `Peak` samples
// what is live from a thread of its own every 100 µs, and every time the source is
// read. (Tracking the peak inside the allocator would need `unsafe`, which the
// workspace forbids; a buffer the size of a row group lives for milliseconds even in a
// release build, far longer than the sampling period.)
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated and not yet freed.
fn live() -> usize {
    let s = GLOBAL.stats();
    // stats_alloc counts a realloc's growth in bytes_allocated and its shrinking in
    // bytes_deallocated (bytes_reallocated is the same change again).
    s.bytes_allocated.saturating_sub(s.bytes_deallocated)
}

static PEAK: AtomicUsize = AtomicUsize::new(0);

fn sample() {
    PEAK.fetch_max(live(), Ordering::Relaxed);
}

/// Samples [`live`] into [`PEAK`] until dropped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start() -> Sampler {
        PEAK.store(live(), Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                sample();
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One test at a time: they share the counters.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TS0: i64 = 1_700_000_000_000;
const TOPIC: &str = "big";

/// A segment of `count` batches generated on the fly: batch `i` is template `i % T`
/// (uncompressed, same size) at base offset `i * records`. Nothing of the segment is
/// held but the templates; every read builds its bytes (the base offset is outside the
/// CRC, so a template stays valid at any offset).
struct GenSource {
    templates: Vec<Vec<u8>>,
    values: Vec<Vec<Vec<u8>>>,
    batch_len: usize,
    records: usize,
    count: usize,
}

impl GenSource {
    fn new(count: usize, records: usize, value_len: usize, templates: usize) -> GenSource {
        let mut g = Lcg(7);
        let mut ts = Vec::new();
        let mut values = Vec::new();
        for _ in 0..templates {
            let vals: Vec<Vec<u8>> = (0..records)
                .map(|_| (0..value_len).map(|_| g.below(256) as u8).collect())
                .collect();
            let recs: Vec<NewRecord> = vals
                .iter()
                .enumerate()
                .map(|(j, v)| NewRecord {
                    key: Some(Bytes::from(format!("key-{j:04}"))),
                    value: Some(Bytes::from(v.clone())),
                    headers: Vec::new(),
                    timestamp: TS0 + j as i64,
                })
                .collect();
            ts.push(batch(&recs, Compression::None, None).to_vec());
            values.push(vals);
        }
        let batch_len = ts[0].len();
        assert!(ts.iter().all(|t| t.len() == batch_len));
        GenSource {
            templates: ts,
            values,
            batch_len,
            records,
            count,
        }
    }

    fn value(&self, offset: i64) -> &[u8] {
        let i = offset as usize / self.records;
        &self.values[i % self.values.len()][offset as usize % self.records]
    }

    fn last_offset(&self) -> i64 {
        (self.count * self.records) as i64 - 1
    }

    /// The whole segment in memory (for the small tests and the in-memory baseline).
    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..self.count {
            let at = out.len();
            out.extend_from_slice(&self.templates[i % self.templates.len()]);
            set_base_offset(&mut out[at..], (i * self.records) as i64);
        }
        out
    }
}

#[async_trait]
impl ByteSource for GenSource {
    fn len(&self) -> u64 {
        (self.batch_len * self.count) as u64
    }

    async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes, SourceError> {
        sample();
        let mut out = Vec::with_capacity(len);
        let end = pos as usize + len;
        let mut at = pos as usize;
        while at < end {
            let i = at / self.batch_len;
            let mut b = self.templates[i % self.templates.len()].clone();
            set_base_offset(&mut b, (i * self.records) as i64);
            let within = at - i * self.batch_len;
            let take = (self.batch_len - within).min(end - at);
            out.extend_from_slice(&b[within..within + take]);
            at += take;
        }
        Ok(Bytes::from(out))
    }
}

fn sink(store: Arc<dyn BlobStore>, row_group_bytes: usize, part_size: usize) -> ParquetSink {
    let mut opts = ConvertOptions::new("ignored", 0);
    opts.row_group_bytes = row_group_bytes;
    ParquetSink::new(store, ParquetLayout::new("c1"), opts).with_part_size(part_size)
}

/// Offsets (all) and the values of every `step`-th row of a Parquet file.
fn read_back(file: Bytes, step: usize) -> (Vec<i64>, Vec<(i64, Vec<u8>)>) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let (mut offsets, mut sample) = (Vec::new(), Vec::new());
    for b in reader {
        let b = b.unwrap();
        let o = b
            .column_by_name("offset")
            .unwrap()
            .as_primitive::<Int64Type>();
        let v = b.column_by_name("value").unwrap().as_binary::<i32>();
        for i in 0..b.num_rows() {
            let off = o.value(i);
            if (off as usize).is_multiple_of(step) {
                assert!(!v.is_null(i));
                sample.push((off, v.value(i).to_vec()));
            }
            offsets.push(off);
        }
    }
    (offsets, sample)
}

/// A segment several times larger than the bound converts with peak allocation below
/// a small multiple of row group + part + read buffer, and reads back whole.
#[tokio::test]
async fn conversion_memory_is_bounded_by_a_row_group_not_the_segment() {
    let _serial = SERIAL.lock().await;
    let mib: usize = std::env::var("STRATA_STREAM_TEST_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    // 16 records of 4000 random bytes a batch: incompressible, so the file is about as
    // large as the segment and goes up in many parts.
    let records = 16;
    let probe = GenSource::new(1, records, 4000, 1);
    let count = (mib << 20) / probe.batch_len;
    let src = GenSource::new(count, records, 4000, 64);
    let input = src.len() as usize;

    let dir = tempfile::tempdir().unwrap();
    let store = ObjectBackend::local(dir.path()).unwrap().into_dyn();
    let row_group = 4 << 20;
    let part = 2 << 20;
    let s = sink(store.clone(), row_group, part);

    let before = live();
    let sampler = Sampler::start();
    let written = s.write_source(TOPIC, 0, &src).await.unwrap().unwrap();
    drop(sampler);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);

    // What conversion holds at once: the read buffer (4 MiB, and the generator's copy
    // of it), the Arrow chunk being filled and the one being encoded (8 MiB builders
    // each), the row group in the writer (4 MiB) and its bytes on their way out in
    // parts (2 MiB each, up to a row group after a flush). About 30 MiB, the same for
    // 96 MiB of input as for 256 MiB; the in-memory path held the input and the file.
    let bound = 48 << 20;
    eprintln!(
        "input {} MiB, file {} MiB, peak allocation during conversion {:.1} MiB (bound {} MiB)",
        input >> 20,
        written.bytes >> 20,
        peak as f64 / (1 << 20) as f64,
        bound >> 20
    );
    assert!(
        peak < bound,
        "peak {peak} bytes for a {input}-byte segment: not bounded by the row group"
    );
    assert!(
        peak * 4 < input,
        "peak {peak} is not far below the input {input}"
    );

    assert_eq!(written.first_offset, 0);
    assert_eq!(written.last_offset, src.last_offset());
    assert_eq!(written.rows as i64, src.last_offset() + 1);
    let file = store.get(&written.key).await.unwrap();
    assert_eq!(file.len() as u64, written.bytes);
    let (offsets, sample) = read_back(file, 997);
    assert_eq!(offsets, (0..=src.last_offset()).collect::<Vec<_>>());
    assert!(sample.len() > 10);
    for (o, v) in sample {
        assert_eq!(v, src.value(o), "value at offset {o}");
    }
    let m = s.manifest(TOPIC, 0).await.unwrap();
    assert_eq!(m.next_offset, Some(src.last_offset() + 1));
    assert_eq!(m.files.len(), 1);
}

/// A file larger than a part goes up as a multipart upload (and is byte for byte what
/// the in-memory conversion writes); one smaller than a part in one PUT.
#[tokio::test]
async fn a_large_file_is_a_multipart_upload_and_a_small_one_a_single_put() {
    let _serial = SERIAL.lock().await;
    let faults = FaultStore::new(ObjectBackend::memory().into_dyn());
    let handle = faults.handle();
    let store: Arc<dyn BlobStore> = Arc::new(faults);
    let part = 256 << 10;
    let s = sink(store.clone(), 1 << 20, part);

    // About 2 MiB of incompressible values: eight parts or more.
    let big = GenSource::new(32, 16, 4000, 32);
    let w = s.write_source(TOPIC, 0, &big).await.unwrap().unwrap();
    assert!(w.bytes > 4 * part as u64, "{}", w.bytes);
    let parts = handle.calls(Op::PutPart);
    assert_eq!(parts, w.bytes.div_ceil(part as u64), "parts");
    assert_eq!(handle.calls(Op::MultipartStart), 1);
    assert_eq!(handle.calls(Op::MultipartComplete), 1);
    assert_eq!(handle.calls(Op::MultipartAbort), 0);
    // The only single PUT is the manifest's.
    assert_eq!(handle.calls(Op::Put), 1);
    let mut opts = ConvertOptions::new(TOPIC, 0);
    opts.row_group_bytes = 1 << 20;
    let in_memory = convert_segment(&big.to_vec(), &opts).unwrap();
    assert_eq!(
        store.get(&w.key).await.unwrap(),
        Bytes::from(in_memory.bytes)
    );

    // A few KiB: one PUT for the file, one for the manifest.
    let small = GenSource::new(1, 4, 100, 1);
    let mut bytes = small.to_vec();
    set_base_offset(&mut bytes, big.last_offset() + 1);
    let w = s.write_segment(TOPIC, 0, &bytes).await.unwrap().unwrap();
    assert!(w.bytes < part as u64);
    assert_eq!(handle.calls(Op::PutPart), parts);
    assert_eq!(handle.calls(Op::MultipartStart), 1);
    assert_eq!(handle.calls(Op::Put), 3);
    let (offsets, _) = read_back(store.get(&w.key).await.unwrap(), 1);
    let first = big.last_offset() + 1;
    assert_eq!(offsets, (first..first + 4).collect::<Vec<_>>());
}

/// A part that fails aborts the upload: no object at the key, no manifest change, no
/// staging file left; the retry writes the same file.
#[tokio::test]
async fn a_failed_part_leaves_nothing_and_the_retry_writes_the_same_file() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let backends: Vec<Arc<dyn BlobStore>> = vec![
        ObjectBackend::memory().into_dyn(),
        ObjectBackend::local(dir.path()).unwrap().into_dyn(),
    ];
    let src = GenSource::new(32, 16, 4000, 32);
    for inner in backends {
        let faults = FaultStore::new(inner.clone());
        let handle = faults.handle();
        let store: Arc<dyn BlobStore> = Arc::new(faults);
        let part = 256 << 10;
        let s = sink(store.clone(), 1 << 20, part);

        handle.fail_part(3, ErrorKind::Permanent);
        let e = s.write_source(TOPIC, 0, &src).await.unwrap_err();
        assert!(matches!(e, SinkError::Store(_)), "{e}");
        assert_eq!(handle.calls(Op::PutPart), 3);
        assert_eq!(handle.calls(Op::MultipartAbort), 1);
        let objects = inner.list("").await.unwrap();
        assert!(objects.is_empty(), "{inner}: {objects:?}");
        if inner.to_string().starts_with("file://") {
            let mut left = Vec::new();
            for e in walk(dir.path()) {
                left.push(e);
            }
            assert!(left.is_empty(), "files left behind: {left:?}");
        }
        let m = s.manifest(TOPIC, 0).await.unwrap();
        assert_eq!((m.next_offset, m.files.len()), (None, 0));

        let w = s.write_source(TOPIC, 0, &src).await.unwrap().unwrap();
        let mut opts = ConvertOptions::new(TOPIC, 0);
        opts.row_group_bytes = 1 << 20;
        let in_memory = convert_segment(&src.to_vec(), &opts).unwrap();
        assert_eq!(
            inner.get(&w.key).await.unwrap(),
            Bytes::from(in_memory.bytes)
        );
        let m = s.manifest(TOPIC, 0).await.unwrap();
        assert_eq!(m.next_offset, Some(src.last_offset() + 1));
        assert_eq!(m.files.len(), 1);
        assert_eq!(m.files[0].key, w.key);
    }
}

/// Every regular file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
