//! Record batches re-encoded from a Parquet file (the read side of a one-copy bucket):
//! every row comes back as a record at its offset with its key, value, headers,
//! timestamp, producer id and sequence, in batches that both our parser and the
//! kafka-protocol crate's decoder read, with valid CRCs; reads resume from any offset
//! and stop near `max_bytes`.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use kafka_protocol::records::RecordBatchDecoder;
use strata_parquet::{
    ConvertOptions, ReencodeOptions, ValueFormat, ValueSchema, convert_segment, reencode,
};
use strata_proto::Compression;
use strata_proto::batch::build::ProducerFields;

const TS0: i64 = 1_700_000_000_000;

/// A segment from offset 100 of varied records in every codec, idempotent producers,
/// and a committed and an aborted transaction (whose records and markers are gaps).
fn segment() -> Vec<u8> {
    let mut seg = SegmentBuilder::starting_at(100);
    for (i, codec) in CODECS.iter().enumerate() {
        let producer = (i % 2 == 1).then_some(ProducerFields {
            producer_id: 7,
            producer_epoch: 3,
            base_sequence: 10 * i as i32,
        });
        seg.append_records(
            &varied_records(5 + i * 7, i as u64, TS0 + i as i64 * 1000),
            *codec,
            producer,
        );
    }
    seg.append(&txn_batch(20, 0, &["c-1", "c-2"], Compression::Gzip));
    seg.append(&txn_batch(21, 0, &["a-1", "a-2"], Compression::None));
    seg.append(&control_batch(21, ABORT));
    seg.append(&control_batch(20, COMMIT));
    seg.append_records(&varied_records(9, 77, TS0 + 9000), Compression::Zstd, None);
    seg.bytes
}

/// The rows of re-encoded `batches` as the Parquet reader gives them (partition `p`),
/// read with our parser (CRCs checked), and the same records through kafka-protocol's
/// decoder: offsets, values, producer ids and sequences agree.
fn decode(batches: &Bytes, p: i32) -> Vec<Row> {
    let mut out = Vec::new();
    let mut rest: &[u8] = batches;
    while !rest.is_empty() {
        let (b, after) = strata_proto::RecordBatch::parse(rest).unwrap();
        b.validate_crc().unwrap();
        let h = *b.header();
        let records = b.records().unwrap();
        for r in records.iter() {
            let r = r.unwrap();
            let producer = (h.producer_id >= 0).then(|| {
                (
                    h.producer_id,
                    h.base_sequence + (r.offset - h.base_offset) as i32,
                )
            });
            out.push(Row {
                partition: p,
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec)))
                    .collect(),
                producer_id: producer.map(|p| p.0),
                sequence: producer.map(|p| p.1),
            });
        }
        rest = after;
    }
    // The kafka-protocol crate's decoder, independent of ours.
    let mut buf = batches.clone();
    let mut theirs = Vec::new();
    while !buf.is_empty() {
        theirs.extend(RecordBatchDecoder::decode(&mut buf).unwrap().records);
    }
    assert_eq!(theirs.len(), out.len());
    for (t, o) in theirs.iter().zip(&out) {
        assert_eq!(t.offset, o.offset);
        assert_eq!(t.timestamp, o.timestamp);
        assert_eq!(t.value.as_deref(), o.value.as_deref());
        assert_eq!(t.key.as_deref(), o.key.as_deref());
        assert_eq!((t.producer_id >= 0).then_some(t.producer_id), o.producer_id);
        if t.producer_id >= 0 {
            assert_eq!(Some(t.sequence), o.sequence);
        }
    }
    out
}

#[test]
fn every_row_comes_back_as_a_record() {
    let file = convert_segment(&segment(), &ConvertOptions::new("t", 3)).unwrap();
    let want = rows(&file.bytes);
    assert!(want.len() > 50);
    let bytes = Bytes::from(file.bytes);
    for compression in [Compression::None, Compression::Zstd, Compression::Lz4] {
        let options = ReencodeOptions {
            compression,
            ..ReencodeOptions::default()
        };
        let out = reencode(bytes.clone(), 0, usize::MAX, &options).unwrap();
        assert_eq!(decode(&out.batches, 3), want, "{compression:?}");
        assert_eq!(out.records as usize, want.len());
        assert_eq!(out.last_offset, want.last().map(|r| r.offset));
        assert!(!out.more);
        // Gaps (aborted records, markers) and producer changes cut batches.
        assert!(out.batch_count >= 4, "{} batches", out.batch_count);
    }
}

#[test]
fn reads_resume_from_any_offset_and_stop_near_max_bytes() {
    let file = convert_segment(&segment(), &ConvertOptions::new("t", 0)).unwrap();
    let want = rows(&file.bytes);
    let bytes = Bytes::from(file.bytes);
    let small = ReencodeOptions {
        max_batch_bytes: 300,
        ..ReencodeOptions::default()
    };
    // From every offset: exactly the rows at or after it.
    for from in [
        0,
        100,
        103,
        want[want.len() / 2].offset,
        want.last().unwrap().offset,
    ] {
        let out = reencode(bytes.clone(), from, usize::MAX, &small).unwrap();
        let got = decode(&out.batches, 0);
        let expected: Vec<Row> = want.iter().filter(|r| r.offset >= from).cloned().collect();
        assert_eq!(got, expected, "from {from}");
    }
    // Page through with a small max_bytes: the pages join up to the whole.
    let mut from = 0;
    let mut got = Vec::new();
    let mut pages = 0;
    loop {
        let out = reencode(bytes.clone(), from, 1024, &small).unwrap();
        assert!(out.batch_count >= 1);
        // Within the limit, unless it is one batch (KIP-74).
        assert!(
            out.batches.len() <= 1024 || out.batch_count == 1,
            "{} bytes in {} batches",
            out.batches.len(),
            out.batch_count
        );
        got.extend(decode(&out.batches, 0));
        pages += 1;
        if !out.more {
            break;
        }
        from = out.last_offset.unwrap() + 1;
    }
    assert!(pages > 2, "{pages} pages");
    assert_eq!(got, want);
    // Past the end: nothing.
    let out = reencode(bytes, want.last().unwrap().offset + 1, 1024, &small).unwrap();
    assert_eq!(out.records, 0);
    assert!(out.batches.is_empty());
}

#[test]
fn typed_json_values_do_not_reencode() {
    let mut opts = ConvertOptions::new("t", 0);
    opts.value_format = ValueFormat::Json(
        ValueSchema::parse(r#"{"fields":[{"name":"n","type":"int64","nullable":true}]}"#).unwrap(),
    );
    let mut seg = SegmentBuilder::starting_at(0);
    seg.append_records(&varied_records(3, 1, TS0), Compression::None, None);
    let file = convert_segment(&seg.bytes, &opts).unwrap();
    let e = reencode(
        Bytes::from(file.bytes),
        0,
        usize::MAX,
        &ReencodeOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("only binary values"), "{e}");
}

/// A file read through [`ChunkReader`] that counts the bytes asked for.
struct Counting {
    file: Bytes,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl parquet::file::reader::Length for Counting {
    fn len(&self) -> u64 {
        self.file.len() as u64
    }
}

impl parquet::file::reader::ChunkReader for Counting {
    type T = bytes::buf::Reader<Bytes>;
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let rest = self.file.slice(start as usize..);
        self.read
            .fetch_add(rest.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(bytes::Buf::reader(rest))
    }
    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.read
            .fetch_add(length as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(self.file.slice(start as usize..start as usize + length))
    }
}

#[test]
fn a_read_late_in_a_large_file_reads_only_its_pages() {
    // 60,000 records in one row group: the offset column has several pages.
    let mut seg = SegmentBuilder::starting_at(0);
    for i in 0..60 {
        seg.append_records(
            &varied_records(1000, i, TS0 + i as i64 * 1000),
            Compression::None,
            None,
        );
    }
    let file = convert_segment(&seg.bytes, &ConvertOptions::new("t", 0)).unwrap();
    let want = rows(&file.bytes);
    assert_eq!(want.len(), 60_000);
    let bytes = Bytes::from(file.bytes);
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = || Counting {
        file: bytes.clone(),
        read: read.clone(),
    };
    let meta = strata_parquet::reader_metadata(&reader()).unwrap();
    assert_eq!(meta.metadata().num_row_groups(), 1);
    let options = ReencodeOptions::default();
    for from in [0, 1, 29_999, 45_000, 59_999] {
        read.store(0, std::sync::atomic::Ordering::Relaxed);
        let out = strata_parquet::reencode_from(reader(), &meta, from, 64 << 10, &options).unwrap();
        let got = decode(&out.batches, 0);
        assert!(!got.is_empty());
        assert_eq!(got[0].offset, from, "starts at the offset asked for");
        assert_eq!(got, want[from as usize..from as usize + got.len()]);
        assert_eq!(out.more, from < 59_999);
        let n = read.load(std::sync::atomic::Ordering::Relaxed);
        if from >= 45_000 {
            // Late reads skip the pages below: well under the file.
            assert!(
                n < bytes.len() as u64 / 2,
                "from {from}: read {n} of {} bytes",
                bytes.len()
            );
        }
    }
}
