//! Transcoding a segment to Parquet against a bare arrow/parquet writer writing the same
//! rows from pre-built Arrow arrays, with the same schema and writer properties, in the same
//! run (issue 7: at least 0.7x).
//!
//! `cargo bench -p strata-parquet --bench transcode`. The segment is ~64 MiB of 1 KiB
//! values in uncompressed batches; STRATA_BENCH_MIB changes the size. After criterion's
//! report, the two are timed alternately and the ratio printed.
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    ArrayRef, BinaryArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampMillisecondArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields};
use bytes::Bytes;
use criterion::{Criterion, Throughput};
use parquet::arrow::ArrowWriter;
use strata_parquet::{
    CHUNK_ROWS, ConvertOptions, ValueFormat, convert_segment, file_schema, writer_properties,
};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::batch::set_base_offset;

mod common;
use common::{VALUE_BYTES, value};

const RECORDS_PER_BATCH: usize = 64;
const TS0: i64 = 1_700_000_000_000;
const PRODUCER_ID: i64 = 4242;

struct Data {
    segment: Vec<u8>,
    /// The same rows as Arrow chunks, for the baseline.
    chunks: Vec<RecordBatch>,
    rows: usize,
}

fn build(mib: usize) -> Data {
    let total = mib << 20;
    let mut g = 1u64;
    let mut segment = Vec::with_capacity(total + (1 << 20));
    let mut all: Vec<NewRecord> = Vec::new();
    let mut offset = 0i64;
    while segment.len() < total {
        let records: Vec<NewRecord> = (0..RECORDS_PER_BATCH)
            .map(|j| {
                let i = all.len() + j;
                NewRecord {
                    key: Some(Bytes::from(format!("user-{}", i % 10_000))),
                    value: Some(Bytes::from(value(&mut g, i))),
                    headers: Vec::new(),
                    timestamp: TS0 + i as i64,
                }
            })
            .collect();
        let producer = Some(ProducerFields {
            producer_id: PRODUCER_ID,
            producer_epoch: 0,
            base_sequence: offset as i32,
        });
        let start = segment.len();
        segment.extend_from_slice(&batch(&records, Compression::None, producer));
        set_base_offset(&mut segment[start..], offset);
        offset += records.len() as i64;
        all.extend(records);
    }

    let schema = file_schema(&ValueFormat::Binary);
    let header_fields = Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ]);
    let chunks = all
        .chunks(CHUNK_ROWS)
        .enumerate()
        .map(|(c, recs)| {
            let n = recs.len();
            let base = (c * CHUNK_ROWS) as i64;
            let headers = ListArray::new(
                Arc::new(Field::new(
                    "element",
                    DataType::Struct(header_fields.clone()),
                    false,
                )),
                OffsetBuffer::new_zeroed(n),
                Arc::new(StructArray::new(
                    header_fields.clone(),
                    vec![
                        Arc::new(StringArray::from(Vec::<&str>::new())) as ArrayRef,
                        Arc::new(BinaryArray::from(Vec::<&[u8]>::new())),
                    ],
                    None,
                )),
                None,
            );
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int32Array::from(vec![0; n])),
                Arc::new(Int64Array::from_iter_values(base..base + n as i64)),
                Arc::new(
                    TimestampMillisecondArray::from_iter_values(recs.iter().map(|r| r.timestamp))
                        .with_timezone("UTC"),
                ),
                Arc::new(BinaryArray::from_iter(
                    recs.iter().map(|r| r.key.as_deref()),
                )),
                Arc::new(BinaryArray::from_iter(
                    recs.iter().map(|r| r.value.as_deref()),
                )),
                Arc::new(headers),
                Arc::new(Int64Array::from(vec![PRODUCER_ID; n])),
                Arc::new(Int32Array::from_iter_values(
                    base as i32..base as i32 + n as i32,
                )),
            ];
            RecordBatch::try_new(schema.clone(), columns).unwrap()
        })
        .collect();
    Data {
        segment,
        chunks,
        rows: all.len(),
    }
}

fn opts() -> ConvertOptions {
    ConvertOptions::new("bench", 0)
}

fn transcode(d: &Data) -> usize {
    let f = convert_segment(&d.segment, &opts()).unwrap();
    assert_eq!(f.summary.rows as usize, d.rows);
    f.bytes.len()
}

fn baseline(d: &Data) -> usize {
    let o = opts();
    let mut w = ArrowWriter::try_new(
        Vec::new(),
        file_schema(&o.value_format),
        Some(writer_properties(&o).unwrap()),
    )
    .unwrap();
    for c in &d.chunks {
        w.write(c).unwrap();
    }
    w.into_inner().unwrap().len()
}

fn main() {
    // `cargo bench` passes --bench; without it (`cargo test --benches`) criterion runs each
    // benchmark once as a test: keep that quick.
    let test_mode = !std::env::args().any(|a| a == "--bench");
    let mib = std::env::var("STRATA_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if test_mode { 1 } else { 64 });
    let d = build(mib);
    println!(
        "segment: {} bytes, {} records of {VALUE_BYTES}-byte values, {} chunks",
        d.segment.len(),
        d.rows,
        d.chunks.len()
    );
    let (t, b) = (transcode(&d), baseline(&d));
    println!("parquet bytes: transcode {t}, baseline {b}");

    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("parquet");
        g.throughput(Throughput::Bytes(d.segment.len() as u64));
        g.bench_function("transcode_segment", |bch| {
            bch.iter(|| black_box(transcode(&d)))
        });
        g.bench_function("baseline_arrow_writer", |bch| {
            bch.iter(|| black_box(baseline(&d)))
        });
        g.finish();
    }
    c.final_summary();
    if test_mode {
        return;
    }

    // Alternate the two so both see the same machine state; report medians.
    let rounds = 7;
    let (mut tt, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let s = Instant::now();
        black_box(transcode(&d));
        tt.push(s.elapsed());
        let s = Instant::now();
        black_box(baseline(&d));
        tb.push(s.elapsed());
    }
    tt.sort();
    tb.sort();
    let (mt, mb) = (tt[rounds / 2], tb[rounds / 2]);
    let mbps = |t: Duration| d.segment.len() as f64 / t.as_secs_f64() / (1 << 20) as f64;
    println!(
        "median of {rounds}: transcode {:.1} ms ({:.0} MiB/s), baseline {:.1} ms ({:.0} MiB/s), ratio {:.2}x (target >= 0.70x)",
        mt.as_secs_f64() * 1e3,
        mbps(mt),
        mb.as_secs_f64() * 1e3,
        mbps(mb),
        mb.as_secs_f64() / mt.as_secs_f64()
    );
}
