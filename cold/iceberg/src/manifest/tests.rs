//! The manifest and manifest-list tests, and [`file`], the data file other modules'
//! tests build tables of.

use std::collections::BTreeMap;

use super::*;
use crate::bounds::{long_bytes, read_int, read_long};
use strata_parquet::{ValueFormat, file_schema};

/// A data file as the footer reader would describe it.
pub(crate) fn file(partition: i32, day: Option<i32>, first: i64, last: i64) -> DataFile {
    let schema = IcebergSchema::from_arrow(&file_schema(&ValueFormat::Binary), 0).unwrap();
    DataFile {
        location: format!("file:///t/p{partition}/{first}-{last}.parquet"),
        file_size_in_bytes: 1000,
        record_count: (last - first + 1) as u64,
        partition,
        day,
        first_offset: first,
        last_offset: last,
        column_sizes: BTreeMap::from([(1, 10), (2, 20)]),
        value_counts: BTreeMap::from([(1, last - first + 1)]),
        null_value_counts: BTreeMap::from([(2, 0)]),
        lower_bounds: BTreeMap::from([(2, long_bytes(first))]),
        upper_bounds: BTreeMap::from([(2, long_bytes(last))]),
        split_offsets: vec![4],
        schema,
    }
}

fn rec_field<'a>(v: &'a Avro, name: &str) -> &'a Avro {
    match v {
        Avro::Record(f) => unwrap_union(&f.iter().find(|(k, _)| k == name).unwrap().1).unwrap(),
        v => panic!("{v:?}"),
    }
}

#[test]
fn manifest_reads_back_with_ids_and_required_metadata() {
    let a = file(0, Some(19675), 0, 9);
    let b = file(1, Some(19676), 5, 7);
    let schema = a.schema.clone();
    let bytes = write_manifest(
        &[&a, &b],
        ManifestContext {
            schema: &schema,
            spec: PartitionSpec::DEFAULT,
            partition_source: 1,
            timestamp_source: 3,
            snapshot_id: 42,
            sequence_number: 3,
        },
    )
    .unwrap();
    let reader = Reader::new(&bytes[..]).unwrap();
    let meta = reader.user_metadata().clone();
    let text = |k: &str| String::from_utf8(meta[k].clone()).unwrap();
    assert_eq!(text("format-version"), "2");
    assert_eq!(text("content"), "data");
    assert_eq!(text("partition-spec-id"), "0");
    assert_eq!(text("schema-id"), "0");
    let spec: Value = serde_json::from_str(&text("partition-spec")).unwrap();
    assert_eq!(spec[1]["transform"], "day");
    assert_eq!(spec[1]["source-id"], 3);
    let table_schema: Value = serde_json::from_str(&text("schema")).unwrap();
    assert_eq!(&table_schema, &schema.json);

    // The writer schema in the header carries the field ids readers resolve by.
    let written: Value = serde_json::to_value(reader.writer_schema()).unwrap();
    let fields = written["fields"].as_array().unwrap();
    let ids: Vec<i64> = fields
        .iter()
        .map(|f| f["field-id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [0, 1, 3, 4, 2]);
    let df = &fields[4]["type"]["fields"];
    let by_name = |n: &str| {
        df.as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(by_name("file_path")["field-id"], 100);
    assert_eq!(by_name("partition")["field-id"], 102);
    assert_eq!(by_name("partition")["type"]["fields"][0]["field-id"], 1000);
    assert_eq!(by_name("partition")["type"]["fields"][1]["field-id"], 1001);
    let lower = by_name("lower_bounds");
    assert_eq!(lower["field-id"], 125);
    assert_eq!(lower["type"][1]["logicalType"], "map");
    assert_eq!(lower["type"][1]["items"]["fields"][0]["field-id"], 126);
    assert_eq!(lower["type"][1]["items"]["fields"][1]["field-id"], 127);

    let entries: Vec<Avro> = reader.map(|v| v.unwrap()).collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(rec_field(&entries[0], "status"), &Avro::Int(STATUS_ADDED));
    assert_eq!(rec_field(&entries[0], "snapshot_id"), &Avro::Long(42));
    assert_eq!(rec_field(&entries[0], "sequence_number"), &Avro::Long(3));
    let d = rec_field(&entries[1], "data_file");
    assert_eq!(rec_field(d, "file_path"), &Avro::String(b.location.clone()));
    assert_eq!(rec_field(d, "record_count"), &Avro::Long(3));
    let p = rec_field(d, "partition");
    assert_eq!(rec_field(p, "partition"), &Avro::Int(1));
    assert_eq!(rec_field(p, "timestamp_day"), &Avro::Date(19676));
    let Avro::Array(upper) = rec_field(d, "upper_bounds") else {
        panic!()
    };
    assert_eq!(rec_field(&upper[0], "key"), &Avro::Int(2));
    let Avro::Bytes(ub) = rec_field(&upper[0], "value") else {
        panic!()
    };
    assert_eq!(read_long(ub), Some(7));
}

#[test]
fn spec_without_day_has_one_partition_field() {
    let a = file(3, None, 0, 9);
    let schema = a.schema.clone();
    let bytes = write_manifest(
        &[&a],
        ManifestContext {
            schema: &schema,
            spec: PartitionSpec::partition_only(),
            partition_source: 1,
            timestamp_source: 3,
            snapshot_id: 1,
            sequence_number: 1,
        },
    )
    .unwrap();
    let reader = Reader::new(&bytes[..]).unwrap();
    let written: Value = serde_json::to_value(reader.writer_schema()).unwrap();
    assert_eq!(
        written["fields"][4]["type"]["fields"][3]["type"]["fields"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        String::from_utf8(reader.user_metadata()["partition-spec-id"].clone()).unwrap(),
        "1"
    );
}

#[test]
fn manifest_list_round_trips_with_summaries() {
    let files = [
        file(0, Some(10), 0, 9),
        file(2, Some(12), 0, 4),
        file(1, None, 0, 1),
    ];
    let refs: Vec<&DataFile> = files.iter().collect();
    let summaries = FieldSummary::of(&refs, PartitionSpec::DEFAULT);
    assert_eq!(
        summaries[0].lower_bound.as_deref().and_then(read_int),
        Some(0)
    );
    assert_eq!(
        summaries[0].upper_bound.as_deref().and_then(read_int),
        Some(2)
    );
    assert!(!summaries[0].contains_null);
    assert!(summaries[1].contains_null);
    assert_eq!(
        summaries[1].lower_bound.as_deref().and_then(read_int),
        Some(10)
    );
    assert_eq!(
        summaries[1].upper_bound.as_deref().and_then(read_int),
        Some(12)
    );
    let m = ManifestFile {
        manifest_path: "file:///t/metadata/a-m0.avro".to_string(),
        manifest_length: 1234,
        partition_spec_id: 0,
        sequence_number: 2,
        min_sequence_number: 2,
        added_snapshot_id: 77,
        added_files_count: 3,
        existing_files_count: 0,
        deleted_files_count: 0,
        added_rows_count: 17,
        existing_rows_count: 0,
        deleted_rows_count: 0,
        partitions: summaries,
    };
    let older = ManifestFile {
        manifest_path: "file:///t/metadata/b-m0.avro".to_string(),
        sequence_number: 1,
        min_sequence_number: 1,
        added_snapshot_id: 76,
        partition_spec_id: 1,
        partitions: vec![],
        ..m.clone()
    };
    let bytes = write_manifest_list(&[m.clone(), older.clone()], 77, Some(76), 2).unwrap();
    let reader = Reader::new(&bytes[..]).unwrap();
    let meta = reader.user_metadata();
    assert_eq!(meta["snapshot-id"], b"77");
    assert_eq!(meta["parent-snapshot-id"], b"76");
    assert_eq!(meta["sequence-number"], b"2");
    assert_eq!(meta["format-version"], b"2");
    let written: Value = serde_json::to_value(reader.writer_schema()).unwrap();
    let ids: Vec<i64> = written["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field-id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            500, 501, 502, 517, 515, 516, 503, 504, 505, 506, 512, 513, 514, 507, 519
        ]
    );
    assert_eq!(written["fields"][13]["type"][1]["element-id"], 508);
    assert_eq!(read_manifest_list(&bytes, "x").unwrap(), vec![m, older]);
}

#[test]
fn manifest_entries_read_back_as_written() {
    let a = file(0, Some(19675), 0, 9);
    let b = file(1, None, 5, 7);
    let c = file(2, Some(19676), 100, 100);
    let schema = a.schema.clone();
    let cx = ManifestContext {
        schema: &schema,
        spec: PartitionSpec::DEFAULT,
        partition_source: 1,
        timestamp_source: 3,
        snapshot_id: 42,
        sequence_number: 3,
    };
    let same = |read: &ManifestEntry, want: &DataFile| {
        assert_eq!(read.file.schema.json, want.schema.json);
        assert_eq!(read.file.schema.last_column_id, want.schema.last_column_id);
        let mut f = read.file.clone();
        f.schema = want.schema.clone();
        assert_eq!(&f, want);
    };
    let bytes = write_manifest(&[&a, &b], cx).unwrap();
    let read = read_manifest(&bytes, "m.avro").unwrap();
    assert_eq!(read.len(), 2);
    for (r, want) in read.iter().zip([&a, &b]) {
        assert_eq!(
            (
                r.status,
                r.snapshot_id,
                r.sequence_number,
                r.file_sequence_number
            ),
            (STATUS_ADDED, 42, 3, 3)
        );
        same(r, want);
    }

    // Every status, other snapshots' sequence numbers, written back unchanged.
    let entries = vec![
        ManifestEntry {
            status: STATUS_EXISTING,
            snapshot_id: 7,
            sequence_number: 1,
            file_sequence_number: 1,
            file: read[0].file.clone(),
        },
        ManifestEntry {
            status: STATUS_DELETED,
            snapshot_id: 42,
            sequence_number: 2,
            file_sequence_number: 2,
            file: read[1].file.clone(),
        },
        ManifestEntry {
            status: STATUS_ADDED,
            snapshot_id: 42,
            sequence_number: 3,
            file_sequence_number: 3,
            file: c.clone(),
        },
    ];
    let bytes = write_manifest_entries(&entries, cx).unwrap();
    let again = read_manifest(&bytes, "m2.avro").unwrap();
    assert_eq!(again.len(), 3);
    for (r, w) in again.iter().zip(&entries) {
        assert_eq!(
            (
                r.status,
                r.snapshot_id,
                r.sequence_number,
                r.file_sequence_number
            ),
            (
                w.status,
                w.snapshot_id,
                w.sequence_number,
                w.file_sequence_number
            )
        );
        same(r, &w.file);
    }
    assert_eq!(
        again.iter().map(ManifestEntry::is_live).collect::<Vec<_>>(),
        [true, false, true]
    );
    // What was read back writes the same bytes' entries again.
    assert_eq!(
        read_manifest(&write_manifest_entries(&again, cx).unwrap(), "m3").unwrap(),
        again
    );
}

#[test]
fn a_bad_manifest_is_an_error_not_a_panic() {
    assert!(read_manifest(b"not avro at all", "x.avro").is_err());
    // A manifest list is not a manifest.
    let list = write_manifest_list(&[], 1, None, 1).unwrap();
    let e = read_manifest(&list, "list.avro").unwrap_err();
    assert!(e.to_string().contains("list.avro"), "{e}");
    // Truncated.
    let a = file(0, Some(1), 0, 9);
    let schema = a.schema.clone();
    let bytes = write_manifest(
        &[&a],
        ManifestContext {
            schema: &schema,
            spec: PartitionSpec::DEFAULT,
            partition_source: 1,
            timestamp_source: 3,
            snapshot_id: 1,
            sequence_number: 1,
        },
    )
    .unwrap();
    for cut in [10, bytes.len() / 2, bytes.len() - 3] {
        assert!(
            read_manifest(&bytes[..cut], "t.avro").is_err(),
            "cut at {cut}"
        );
    }
}
