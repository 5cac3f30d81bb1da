//! Files read back with the parquet crate's own reader hold exactly the records built.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use parquet::basic::Compression as PqCompression;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::statistics::Statistics;
use strata_parquet::{
    ConvertError, ConvertOptions, convert_batches, convert_segment, metadata_keys,
};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields};

const TS0: i64 = 1_700_000_000_000;

/// A segment of several batches per codec, with and without producer ids, starting at
/// `base`; returns it and the rows it should become.
fn mixed_segment(codec: Compression, base: i64, partition: i32) -> (Vec<u8>, Vec<Row>) {
    let mut seg = SegmentBuilder::starting_at(base);
    let mut want = Vec::new();
    for b in 0..6u64 {
        let records = varied_records(1 + (b as usize * 17) % 40, b + 11, TS0 + b as i64 * 1000);
        let producer = (b % 2 == 1).then_some(ProducerFields {
            producer_id: 4000 + b as i64,
            producer_epoch: 3,
            base_sequence: 100 * b as i32,
        });
        let first = seg.append_records(&records, codec, producer);
        for (i, r) in records.iter().enumerate() {
            let p = producer.map(|p| (p.producer_id, p.base_sequence + i as i32));
            want.push(expected_row(partition, first + i as i64, r, p));
        }
    }
    (seg.bytes, want)
}

#[test]
fn every_codec_round_trips_through_the_parquet_reader() {
    for codec in CODECS {
        let (seg, want) = mixed_segment(codec, 5_000, 7);
        let opts = ConvertOptions::new("orders", 7);
        let file = convert_segment(&seg, &opts).unwrap();
        let got = rows(&file.bytes);
        assert_eq!(got.len(), want.len(), "{codec:?}");
        assert_eq!(got, want, "{codec:?}");
        // Dense offsets: one batch after another, no gaps.
        assert!(got.windows(2).all(|w| w[1].offset == w[0].offset + 1));
        let s = &file.summary;
        assert_eq!(s.rows, want.len() as u64);
        assert_eq!(s.first_offset, 5_000);
        assert_eq!(s.last_offset, 5_000 + want.len() as i64 - 1);
        assert_eq!(s.min_timestamp, want.iter().map(|r| r.timestamp).min());
        assert_eq!(s.max_timestamp, want.iter().map(|r| r.timestamp).max());
        assert_eq!(s.input_bytes, seg.len() as u64);
        assert_eq!(s.file_bytes, file.bytes.len() as u64);
        assert_eq!(s.raw_fallbacks, 0);
        assert_eq!((s.control_records, s.aborted_records), (0, 0));
        assert_eq!(s.row_groups, 1);
        // The shapes that matter were exercised.
        assert!(want.iter().any(|r| r.key.is_none()));
        assert!(want.iter().any(|r| r.value.is_none()));
        assert!(want.iter().any(|r| r.value.as_deref() == Some(&[][..])));
        assert!(want.iter().any(|r| r.headers.is_empty()));
        assert!(want.iter().any(|r| r.headers.iter().any(|h| h.1.is_none())));
        assert!(want.iter().any(|r| r.producer_id.is_none()));
        assert!(want.iter().any(|r| r.producer_id.is_some()));
    }
}

#[test]
fn batches_from_several_segments_make_one_file() {
    let (a, mut want) = mixed_segment(Compression::Lz4, 0, 1);
    let next = want.last().unwrap().offset + 1;
    let (b, want_b) = mixed_segment(Compression::Zstd, next, 1);
    want.extend(want_b);
    let batches = strata_proto::batch::batches(&a)
        .chain(strata_proto::batch::batches(&b))
        .map(Result::unwrap);
    let file = convert_batches(batches, &ConvertOptions::new("t", 1)).unwrap();
    assert_eq!(rows(&file.bytes), want);
    assert_eq!(file.summary.input_bytes, (a.len() + b.len()) as u64);
}

#[test]
fn file_is_zstd_with_statistics_on_offset_and_timestamp() {
    let (seg, want) = mixed_segment(Compression::Snappy, 42, 0);
    let file = convert_segment(&seg, &ConvertOptions::new("t", 0)).unwrap();
    let (_, meta) = read(&file.bytes);
    let schema = meta.file_metadata().schema_descr();
    let col = |name: &str| {
        (0..schema.num_columns())
            .find(|&i| schema.column(i).path().string() == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let rg = meta.row_group(0);
    for i in 0..rg.num_columns() {
        assert!(
            matches!(rg.column(i).compression(), PqCompression::ZSTD(_)),
            "{}",
            rg.column(i).column_path()
        );
    }
    let (min_o, max_o) = (want[0].offset, want.last().unwrap().offset);
    match rg.column(col("offset")).statistics() {
        Some(Statistics::Int64(s)) => {
            assert_eq!((s.min_opt(), s.max_opt()), (Some(&min_o), Some(&max_o)));
        }
        other => panic!("offset statistics: {other:?}"),
    }
    let min_t = want.iter().map(|r| r.timestamp).min().unwrap();
    let max_t = want.iter().map(|r| r.timestamp).max().unwrap();
    match rg.column(col("timestamp")).statistics() {
        Some(Statistics::Int64(s)) => {
            assert_eq!((s.min_opt(), s.max_opt()), (Some(&min_t), Some(&max_t)));
        }
        other => panic!("timestamp statistics: {other:?}"),
    }
    // Page index (column index) for pruning within a row group.
    let index = meta.page_index_for_row_group(0);
    for name in ["offset", "timestamp"] {
        match index.column_index(col(name)) {
            Some(ColumnIndexMetaData::INT64(pages)) => {
                assert!(pages.num_pages() >= 1);
                assert!(pages.min_value(0).is_some(), "{name}");
            }
            other => panic!("{name} column index: {other:?}"),
        }
    }
    assert!(index.column_index(col("value")).is_none());
    // The large byte columns carry none (cost without use).
    assert!(rg.column(col("value")).statistics().is_none());
}

#[test]
fn metadata_names_topic_partition_and_offset_range() {
    let (seg, want) = mixed_segment(Compression::None, 1_000, 9);
    let file = convert_segment(&seg, &ConvertOptions::new("clicks", 9)).unwrap();
    let (_, meta) = read(&file.bytes);
    let kv = kv(&meta);
    assert_eq!(kv[metadata_keys::TOPIC], "clicks");
    assert_eq!(kv[metadata_keys::PARTITION], "9");
    assert_eq!(kv[metadata_keys::FIRST_OFFSET], "1000");
    assert_eq!(
        kv[metadata_keys::LAST_OFFSET],
        want.last().unwrap().offset.to_string()
    );
    assert_eq!(kv[metadata_keys::VALUE_FORMAT], "binary");
    assert_eq!(kv[metadata_keys::VERSION], strata_parquet::STRATA_VERSION);
    assert!(!kv.contains_key(metadata_keys::VALUE_SCHEMA));
    assert_eq!(meta.file_metadata().num_rows(), want.len() as i64);
}

#[test]
fn row_groups_honour_the_configured_size() {
    // 4 MiB of 1 KiB values in 256 KiB row groups.
    let limit = 256 * 1024;
    let mut seg = SegmentBuilder::default();
    let mut g = Lcg(3);
    let mut n = 0;
    for b in 0..64 {
        let records: Vec<NewRecord> = (0..64)
            .map(|i| {
                NewRecord::value(
                    (0..1024).map(|_| g.below(256) as u8).collect::<Vec<u8>>(),
                    TS0 + b * 64 + i,
                )
            })
            .collect();
        n += records.len();
        seg.append_records(&records, Compression::Lz4, None);
    }
    let mut opts = ConvertOptions::new("t", 0);
    opts.row_group_bytes = limit;
    let file = convert_segment(&seg.bytes, &opts).unwrap();
    let (_, meta) = read(&file.bytes);
    let groups = meta.row_groups();
    assert_eq!(groups.len(), file.summary.row_groups);
    let expected = (n * 1070).div_ceil(limit);
    assert!(
        groups.len() >= expected && groups.len() <= expected + 1,
        "{} row groups, expected about {expected}",
        groups.len()
    );
    let last = groups.len() - 1;
    for (i, rg) in groups.iter().enumerate() {
        // Parquet's own uncompressed size of the row group: within the limit (plus page
        // headers), and not much under it except for the last one.
        let size = rg.total_byte_size() as usize;
        assert!(size <= limit + limit / 20, "row group {i}: {size} bytes");
        if i < last {
            assert!(size >= limit * 9 / 10, "row group {i}: only {size} bytes");
        }
    }
    assert_eq!(groups.iter().map(|g| g.num_rows()).sum::<i64>(), n as i64);
    assert_eq!(rows(&file.bytes).len(), n);
}

#[test]
fn many_chunks_and_a_record_larger_than_a_row_group() {
    // More rows than one Arrow chunk holds, plus one huge record, in small row groups.
    let mut seg = SegmentBuilder::default();
    let small: Vec<NewRecord> = (0..strata_parquet::CHUNK_ROWS + 500)
        .map(|i| NewRecord::value(format!("v{i}"), TS0 + i as i64))
        .collect();
    let mut want: Vec<Vec<u8>> = Vec::new();
    for c in small.chunks(1000) {
        seg.append_records(c, Compression::Zstd, None);
        want.extend(c.iter().map(|r| r.value.as_ref().unwrap().to_vec()));
    }
    let huge = vec![NewRecord::value(vec![7u8; 300_000], TS0)];
    seg.append_records(&huge, Compression::Gzip, None);
    want.push(vec![7u8; 300_000]);
    let mut opts = ConvertOptions::new("t", 0);
    opts.row_group_bytes = 100_000;
    let file = convert_segment(&seg.bytes, &opts).unwrap();
    let got: Vec<Vec<u8>> = rows(&file.bytes)
        .into_iter()
        .map(|r| r.value.unwrap())
        .collect();
    assert_eq!(got, want);
    let (_, meta) = read(&file.bytes);
    let groups = meta.row_groups();
    // The huge record sits alone in its row group.
    assert_eq!(groups.last().unwrap().num_rows(), 1);
    assert!(groups.len() > 5);
}

#[test]
fn log_append_time_batches_take_the_broker_time() {
    let mut seg = SegmentBuilder::default();
    let records = varied_records(5, 1, TS0);
    let mut encoded = strata_proto::batch::build::batch(&records, Compression::None, None).to_vec();
    strata_proto::batch::set_log_append_time(&mut encoded, 1_800_000_000_000);
    seg.append(&encoded);
    let file = convert_segment(&seg.bytes, &ConvertOptions::new("t", 0)).unwrap();
    assert!(
        rows(&file.bytes)
            .iter()
            .all(|r| r.timestamp == 1_800_000_000_000)
    );
}

#[test]
fn broken_input_is_refused_with_context() {
    let (seg, _) = mixed_segment(Compression::None, 0, 0);
    let opts = ConvertOptions::new("t", 0);
    // Nothing to convert.
    assert!(matches!(
        convert_segment(&[], &opts),
        Err(ConvertError::Empty)
    ));
    // A torn tail.
    let e = convert_segment(&seg[..seg.len() - 5], &opts).unwrap_err();
    assert!(
        matches!(e, ConvertError::Framing { position, .. } if position > 0),
        "{e}"
    );
    // A flipped bit in a record: CRC.
    let mut bad = seg.clone();
    bad[70] ^= 1;
    let e = convert_segment(&bad, &opts).unwrap_err();
    assert!(
        matches!(e, ConvertError::Batch { base_offset: 0, .. }),
        "{e}"
    );
    assert!(!e.is_retryable());
    // Batches out of order.
    let mut two = SegmentBuilder::starting_at(10);
    two.append_records(&varied_records(2, 1, TS0), Compression::None, None);
    two.next_offset = 5;
    two.append_records(&varied_records(2, 2, TS0), Compression::None, None);
    let e = convert_segment(&two.bytes, &opts).unwrap_err();
    assert!(
        matches!(
            e,
            ConvertError::OutOfOrder {
                base_offset: 5,
                previous_last_offset: 11
            }
        ),
        "{e}"
    );
    // Bad options.
    let mut o = ConvertOptions::new("t", 0);
    o.zstd_level = 0;
    assert!(matches!(
        convert_segment(&seg, &o),
        Err(ConvertError::InvalidOptions(_))
    ));
}
