//! Re-encoding record batches from a Parquet file (the read side of a one-copy bucket,
//! issue 20 part 5) against a consumer's own work on the raw segment, in the same run:
//! framing every batch, checking its CRC and iterating its records. The ratio says how
//! the broker's re-encoding compares with what every consumer does to those bytes anyway.
//!
//! `cargo bench -p strata-parquet --bench reencode`. The segment is ~64 MiB of 1 KiB
//! values in batches of 64 records of one idempotent producer; STRATA_BENCH_MIB changes
//! the size. After criterion's report, the two are timed alternately and the ratio and
//! the Parquet file's size against the segment's printed.
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use strata_parquet::{ConvertOptions, ReencodeOptions, convert_segment, reencode};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::batch::set_base_offset;

mod common;
use common::value;

const RECORDS_PER_BATCH: usize = 64;
const TS0: i64 = 1_700_000_000_000;

fn segment(mib: usize) -> (Vec<u8>, usize) {
    let total = mib << 20;
    let mut g = 1u64;
    let mut segment = Vec::with_capacity(total + (1 << 20));
    let mut offset = 0usize;
    while segment.len() < total {
        let records: Vec<NewRecord> = (0..RECORDS_PER_BATCH)
            .map(|j| NewRecord {
                key: Some(Bytes::from(format!("user-{}", (offset + j) % 10_000))),
                value: Some(Bytes::from(value(&mut g, offset + j))),
                headers: vec![("source".into(), Some(Bytes::from_static(b"bench")))],
                timestamp: TS0 + (offset + j) as i64,
            })
            .collect();
        let producer = Some(ProducerFields {
            producer_id: 4242,
            producer_epoch: 0,
            base_sequence: offset as i32,
        });
        let start = segment.len();
        segment.extend_from_slice(&batch(&records, Compression::None, producer));
        set_base_offset(&mut segment[start..], offset as i64);
        offset += records.len();
    }
    (segment, offset)
}

/// What a consumer does with the raw segment: frame, CRC, every record.
fn consume_raw(segment: &[u8]) -> usize {
    let mut n = 0;
    let mut rest = segment;
    while !rest.is_empty() {
        let (b, after) = strata_proto::RecordBatch::parse(rest).unwrap();
        b.validate_crc().unwrap();
        for r in b.records().unwrap().iter() {
            n += r.unwrap().value.map_or(0, <[u8]>::len);
        }
        rest = after;
    }
    n
}

/// The floor under re-encoding: decoding the file's columns, nothing else.
fn decode_only(file: &Bytes) -> usize {
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file.clone())
            .unwrap()
            .with_batch_size(8192)
            .build()
            .unwrap();
    reader.map(|b| b.unwrap().num_rows()).sum()
}

fn reencode_all(file: &Bytes, records: usize) -> usize {
    let out = reencode(file.clone(), 0, usize::MAX, &ReencodeOptions::default()).unwrap();
    assert_eq!(out.records as usize, records);
    out.batches.len()
}

fn main() {
    let test_mode = !std::env::args().any(|a| a == "--bench");
    let mib = std::env::var("STRATA_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if test_mode { 1 } else { 64 });
    let (seg, records) = segment(mib);
    let file = Bytes::from(
        convert_segment(&seg, &ConvertOptions::new("bench", 0))
            .unwrap()
            .bytes,
    );
    println!(
        "segment: {} bytes, {records} records; its Parquet file: {} bytes ({:.2}x the segment)",
        seg.len(),
        file.len(),
        file.len() as f64 / seg.len() as f64
    );

    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("one_copy");
        g.throughput(Throughput::Bytes(seg.len() as u64));
        g.bench_function("reencode_from_parquet", |b| {
            b.iter(|| black_box(reencode_all(&file, records)))
        });
        g.bench_function("baseline_consume_raw_segment", |b| {
            b.iter(|| black_box(consume_raw(&seg)))
        });
        g.finish();
    }
    c.final_summary();
    if test_mode {
        return;
    }

    let rounds = 7;
    let (mut tr, mut tb, mut td) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let s = Instant::now();
        black_box(decode_only(&file));
        td.push(s.elapsed());
        let s = Instant::now();
        black_box(reencode_all(&file, records));
        tr.push(s.elapsed());
        let s = Instant::now();
        black_box(consume_raw(&seg));
        tb.push(s.elapsed());
    }
    tr.sort();
    tb.sort();
    td.sort();
    let (mr, mb, md) = (tr[rounds / 2], tb[rounds / 2], td[rounds / 2]);
    let mbps = |t: Duration| seg.len() as f64 / t.as_secs_f64() / (1 << 20) as f64;
    println!(
        "median of {rounds}: re-encode {:.1} ms ({:.0} MiB/s of records), consume raw {:.1} ms ({:.0} MiB/s), ratio {:.2}x",
        mr.as_secs_f64() * 1e3,
        mbps(mr),
        mb.as_secs_f64() * 1e3,
        mbps(mb),
        mb.as_secs_f64() / mr.as_secs_f64()
    );
    println!(
        "decoding the file's columns alone: {:.1} ms ({:.0}% of re-encoding)",
        md.as_secs_f64() * 1e3,
        md.as_secs_f64() / mr.as_secs_f64() * 100.0
    );
}
