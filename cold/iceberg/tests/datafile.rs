//! DataFile from real strata-parquet files: field ids, bounds, the day, and files written
//! before field ids existed.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use strata_iceberg::bounds::{read_int, read_long};
use strata_iceberg::{DataFile, IcebergError, IcebergSchema};
use strata_parquet::{ConvertOptions, ValueFormat, convert_segment, file_schema};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::batch::set_base_offset;

fn converted(timestamps: &[i64], base: i64) -> (Vec<u8>, ConvertOptions) {
    let records: Vec<NewRecord> = timestamps
        .iter()
        .map(|&t| NewRecord {
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: vec![("h".to_string(), None)],
            timestamp: t,
        })
        .collect();
    let mut seg = batch(&records, Compression::None, None).to_vec();
    set_base_offset(&mut seg, base);
    let opts = ConvertOptions::new("t", 7);
    (convert_segment(&seg, &opts).unwrap().bytes, opts)
}

#[test]
fn footer_gives_ids_bounds_and_day() {
    // 2024-01-01T10:00Z and 12:00Z.
    let (bytes, _) = converted(
        &[1_704_103_200_000, 1_704_110_400_000, 1_704_106_800_000],
        100,
    );
    let f =
        DataFile::from_bytes("file:///x.parquet".to_string(), Bytes::from(bytes.clone())).unwrap();
    assert_eq!(f.partition, 7);
    assert_eq!((f.first_offset, f.last_offset), (100, 102));
    assert_eq!(f.record_count, 3);
    assert_eq!(f.file_size_in_bytes, bytes.len() as u64);
    assert_eq!(f.day, Some(19723));
    // partition 1, offset 2, timestamp 3 (microseconds).
    assert_eq!(read_int(&f.lower_bounds[&1]), Some(7));
    assert_eq!(read_long(&f.lower_bounds[&2]), Some(100));
    assert_eq!(read_long(&f.upper_bounds[&2]), Some(102));
    assert_eq!(read_long(&f.lower_bounds[&3]), Some(1_704_103_200_000_000));
    assert_eq!(read_long(&f.upper_bounds[&3]), Some(1_704_110_400_000_000));
    // Every leaf column by id: 1..=5, 7, 8 and the header members 10, 11.
    assert_eq!(
        f.column_sizes.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 7, 8, 10, 11]
    );
    assert_eq!(f.value_counts[&2], 3);
    assert_eq!(f.null_value_counts[&2], 0);
    assert_eq!(
        f.schema,
        IcebergSchema::from_arrow(&file_schema(&ValueFormat::Binary), 0).unwrap()
    );
}

#[test]
fn rows_across_midnight_have_no_day() {
    let (bytes, _) = converted(&[1_704_153_599_000, 1_704_153_600_000], 0);
    let f = DataFile::from_bytes("x".to_string(), Bytes::from(bytes)).unwrap();
    assert_eq!(f.day, None);
    assert!(f.lower_bounds.contains_key(&3));
}

#[test]
fn files_without_field_ids_get_the_same_ids() {
    let (bytes, opts) = converted(&[1_704_103_200_000, 1_704_110_400_000], 5);
    let new = DataFile::from_bytes("a".to_string(), Bytes::from(bytes.clone())).unwrap();
    let legacy_bytes = common::without_field_ids(&bytes, &opts);
    let old = DataFile::from_bytes("a".to_string(), Bytes::from(legacy_bytes.clone())).unwrap();
    assert_eq!(old.schema, new.schema);
    assert_eq!(
        old.column_sizes.keys().collect::<Vec<_>>(),
        new.column_sizes.keys().collect::<Vec<_>>()
    );
    assert_eq!(old.lower_bounds, new.lower_bounds);
    assert_eq!(old.upper_bounds, new.upper_bounds);
    assert_eq!((old.day, old.partition, old.last_offset), (new.day, 7, 6));
}

#[test]
fn a_file_without_strata_metadata_is_refused() {
    let (bytes, opts) = converted(&[0], 0);
    let mut copy = common::without_field_ids(&bytes, &opts);
    // Drop the key-value metadata by rewriting without it.
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        Bytes::from(copy.clone()),
    )
    .unwrap();
    let schema = reader.schema().clone();
    let mut out = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).unwrap();
    for b in reader.build().unwrap() {
        w.write(&b.unwrap()).unwrap();
    }
    w.close().unwrap();
    copy = out;
    let e = DataFile::from_bytes("file:///y.parquet".to_string(), Bytes::from(copy)).unwrap_err();
    assert!(matches!(e, IcebergError::NotStrataFile { .. }), "{e}");
    assert!(e.to_string().contains("strata.partition"), "{e}");
}
