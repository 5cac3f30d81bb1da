//! Manifests and manifest lists: Avro files as the Iceberg spec v2 defines them.
//!
//! Written with apache-avro's generic `Value`s against schemas spelled out below. Every
//! field carries its Iceberg `field-id` (readers such as pyiceberg resolve fields by id,
//! not name); maps with non-string keys are arrays of `key`/`value` records marked
//! `"logicalType": "map"`, as the spec's Avro appendix says. Files are uncompressed
//! (codec `null`): they are small, and it keeps the Avro dependency free of codecs.
//!
//! A manifest's file metadata holds what the spec requires: `schema`, `schema-id`,
//! `partition-spec`, `partition-spec-id`, `format-version` and `content`. A manifest list
//! carries `snapshot-id`, `parent-snapshot-id`, `sequence-number` and `format-version`.
//!
//! Entries carry their sequence numbers explicitly (the commit knows them), so nothing
//! depends on a reader's inheritance rules. A new file is written `ADDED`; when a commit
//! rewrites a manifest (to remove a file, or to merge small manifests) the files it keeps
//! become `EXISTING` with the snapshot id and sequence numbers they were added with, and
//! a removed file stays in the rewritten manifest as `DELETED` by the removing snapshot,
//! so readers of that snapshot's changes see it go ([`read_manifest`] reads them back).

use apache_avro::types::Value as Avro;
use apache_avro::{Reader, Schema, Writer};
use serde_json::{Value, json};

use crate::bounds::int_bytes;
use crate::datafile::DataFile;
use crate::error::{IcebergError, Result};
use crate::schema::IcebergSchema;
use crate::spec::{DAY_FIELD_ID, PARTITION_FIELD_ID, PartitionSpec};

/// Manifest entry status `EXISTING`: a live file added by an earlier snapshot, carried
/// into a rewritten manifest.
pub const STATUS_EXISTING: i32 = 0;
/// Manifest entry status `ADDED`: a live file added by the entry's snapshot.
pub const STATUS_ADDED: i32 = 1;
/// Manifest entry status `DELETED`: the file was removed by the entry's snapshot; it is
/// not part of the table from that snapshot on.
pub const STATUS_DELETED: i32 = 2;

/// One entry of a manifest: a data file and what happened to it in which snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestEntry {
    /// [`STATUS_EXISTING`], [`STATUS_ADDED`] or [`STATUS_DELETED`].
    pub status: i32,
    /// The snapshot that added the file (`ADDED`, `EXISTING`) or removed it (`DELETED`).
    pub snapshot_id: i64,
    /// The data sequence number: the sequence number of the snapshot that added the
    /// file, kept through rewrites (delete files would be ordered against it).
    pub sequence_number: i64,
    /// The sequence number of the snapshot that added the file, also kept.
    pub file_sequence_number: i64,
    /// The data file. Read back from a manifest, `first_offset`/`last_offset` are the
    /// `offset` column's bounds (a manifest has no room for Strata's offset range, which
    /// may be wider) and `schema` is the manifest's `schema` without a name mapping
    /// (that is a table property); neither is written into a manifest.
    pub file: DataFile,
}

impl ManifestEntry {
    /// Whether the file is in the table as of the entry's manifest (`ADDED`/`EXISTING`).
    pub fn is_live(&self) -> bool {
        self.status != STATUS_DELETED
    }
}

fn optional(ty: Value) -> Value {
    json!(["null", ty])
}

fn field(name: &str, id: i32, ty: Value) -> Value {
    json!({"name": name, "type": ty, "field-id": id})
}

fn optional_field(name: &str, id: i32, ty: Value) -> Value {
    json!({"name": name, "type": optional(ty), "default": null, "field-id": id})
}

fn int_map(name: &str, id: i32, key_id: i32, value_id: i32, value: &str) -> Value {
    optional_field(
        name,
        id,
        json!({"type": "array", "logicalType": "map", "items": {
            "type": "record", "name": format!("k{key_id}_v{value_id}"), "fields": [
                field("key", key_id, json!("int")),
                field("value", value_id, json!(value))]}}),
    )
}

/// The Avro schema of a manifest entry under `spec`.
pub fn manifest_entry_schema(spec: PartitionSpec) -> Value {
    let mut partition_fields = vec![optional_field(
        "partition",
        PARTITION_FIELD_ID,
        json!("int"),
    )];
    if spec.with_day {
        partition_fields.push(optional_field(
            "timestamp_day",
            DAY_FIELD_ID,
            json!({"type": "int", "logicalType": "date"}),
        ));
    }
    json!({"type": "record", "name": "manifest_entry", "fields": [
        field("status", 0, json!("int")),
        optional_field("snapshot_id", 1, json!("long")),
        optional_field("sequence_number", 3, json!("long")),
        optional_field("file_sequence_number", 4, json!("long")),
        field("data_file", 2, json!({"type": "record", "name": "r2", "fields": [
            field("content", 134, json!("int")),
            field("file_path", 100, json!("string")),
            field("file_format", 101, json!("string")),
            field("partition", 102, json!({"type": "record", "name": "r102", "fields": partition_fields})),
            field("record_count", 103, json!("long")),
            field("file_size_in_bytes", 104, json!("long")),
            int_map("column_sizes", 108, 117, 118, "long"),
            int_map("value_counts", 109, 119, 120, "long"),
            int_map("null_value_counts", 110, 121, 122, "long"),
            int_map("lower_bounds", 125, 126, 127, "bytes"),
            int_map("upper_bounds", 128, 129, 130, "bytes"),
            optional_field("split_offsets", 132, json!({"type": "array", "items": "long", "element-id": 133})),
            optional_field("sort_order_id", 140, json!("int")),
        ]})),
    ]})
}

/// The Avro schema of a manifest list (v2).
pub fn manifest_list_schema() -> Value {
    json!({"type": "record", "name": "manifest_file", "fields": [
        field("manifest_path", 500, json!("string")),
        field("manifest_length", 501, json!("long")),
        field("partition_spec_id", 502, json!("int")),
        field("content", 517, json!("int")),
        field("sequence_number", 515, json!("long")),
        field("min_sequence_number", 516, json!("long")),
        field("added_snapshot_id", 503, json!("long")),
        field("added_files_count", 504, json!("int")),
        field("existing_files_count", 505, json!("int")),
        field("deleted_files_count", 506, json!("int")),
        field("added_rows_count", 512, json!("long")),
        field("existing_rows_count", 513, json!("long")),
        field("deleted_rows_count", 514, json!("long")),
        optional_field("partitions", 507, json!({"type": "array", "element-id": 508, "items": {
            "type": "record", "name": "r508", "fields": [
                field("contains_null", 509, json!("boolean")),
                optional_field("contains_nan", 518, json!("boolean")),
                optional_field("lower_bound", 510, json!("bytes")),
                optional_field("upper_bound", 511, json!("bytes"))]}})),
        optional_field("key_metadata", 519, json!("bytes")),
    ]})
}

fn some(v: Avro) -> Avro {
    Avro::Union(1, Box::new(v))
}

fn none() -> Avro {
    Avro::Union(0, Box::new(Avro::Null))
}

fn rec(fields: Vec<(&str, Avro)>) -> Avro {
    Avro::Record(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn map<T: Clone>(m: &std::collections::BTreeMap<i32, T>, value: impl Fn(T) -> Avro) -> Avro {
    some(Avro::Array(
        m.iter()
            .map(|(k, v)| rec(vec![("key", Avro::Int(*k)), ("value", value(v.clone()))]))
            .collect(),
    ))
}

fn long(v: u64) -> Avro {
    Avro::Long(i64::try_from(v).unwrap_or(i64::MAX))
}

/// Where a manifest is written and what the table says around it.
#[derive(Debug, Clone, Copy)]
pub struct ManifestContext<'a> {
    pub schema: &'a IcebergSchema,
    pub spec: PartitionSpec,
    pub partition_source: i32,
    pub timestamp_source: i32,
    pub snapshot_id: i64,
    pub sequence_number: i64,
}

/// A manifest of `files`, all added by this snapshot under `cx.spec`.
pub fn write_manifest(files: &[&DataFile], cx: ManifestContext<'_>) -> Result<Vec<u8>> {
    write_entries(
        files.iter().map(|f| EntryRef {
            status: STATUS_ADDED,
            snapshot_id: cx.snapshot_id,
            sequence_number: cx.sequence_number,
            file_sequence_number: cx.sequence_number,
            file: f,
        }),
        cx,
    )
}

/// A manifest of `entries` as they are (statuses, snapshot ids and sequence numbers), for
/// a commit that rewrites manifests; `cx.snapshot_id` and `cx.sequence_number` are not
/// used.
pub fn write_manifest_entries(
    entries: &[ManifestEntry],
    cx: ManifestContext<'_>,
) -> Result<Vec<u8>> {
    write_entries(
        entries.iter().map(|e| EntryRef {
            status: e.status,
            snapshot_id: e.snapshot_id,
            sequence_number: e.sequence_number,
            file_sequence_number: e.file_sequence_number,
            file: &e.file,
        }),
        cx,
    )
}

struct EntryRef<'a> {
    status: i32,
    snapshot_id: i64,
    sequence_number: i64,
    file_sequence_number: i64,
    file: &'a DataFile,
}

fn write_entries<'a>(
    entries: impl Iterator<Item = EntryRef<'a>>,
    cx: ManifestContext<'_>,
) -> Result<Vec<u8>> {
    let schema = Schema::parse(&manifest_entry_schema(cx.spec))?;
    let mut w = Writer::new(&schema, Vec::new());
    let meta = [
        ("schema", serde_json::to_string(&cx.schema.json)?),
        ("schema-id", cx.schema.json["schema-id"].to_string()),
        (
            "partition-spec",
            serde_json::to_string(
                &cx.spec
                    .fields_json(cx.partition_source, cx.timestamp_source),
            )?,
        ),
        ("partition-spec-id", cx.spec.id.to_string()),
        ("format-version", "2".to_string()),
        ("content", "data".to_string()),
    ];
    for (k, v) in meta {
        w.add_user_metadata(k.to_string(), v)?;
    }
    for e in entries {
        let f = e.file;
        let mut partition = vec![("partition", some(Avro::Int(f.partition)))];
        if cx.spec.with_day {
            partition.push((
                "timestamp_day",
                f.day.map_or_else(none, |d| some(Avro::Date(d))),
            ));
        }
        let data_file = rec(vec![
            ("content", Avro::Int(0)),
            ("file_path", Avro::String(f.location.clone())),
            ("file_format", Avro::String("PARQUET".to_string())),
            ("partition", rec(partition)),
            ("record_count", long(f.record_count)),
            ("file_size_in_bytes", long(f.file_size_in_bytes)),
            ("column_sizes", map(&f.column_sizes, Avro::Long)),
            ("value_counts", map(&f.value_counts, Avro::Long)),
            ("null_value_counts", map(&f.null_value_counts, Avro::Long)),
            ("lower_bounds", map(&f.lower_bounds, Avro::Bytes)),
            ("upper_bounds", map(&f.upper_bounds, Avro::Bytes)),
            (
                "split_offsets",
                some(Avro::Array(
                    f.split_offsets.iter().map(|o| Avro::Long(*o)).collect(),
                )),
            ),
            ("sort_order_id", none()),
        ]);
        w.append(rec(vec![
            ("status", Avro::Int(e.status)),
            ("snapshot_id", some(Avro::Long(e.snapshot_id))),
            ("sequence_number", some(Avro::Long(e.sequence_number))),
            (
                "file_sequence_number",
                some(Avro::Long(e.file_sequence_number)),
            ),
            ("data_file", data_file),
        ]))?;
    }
    Ok(w.into_inner()?)
}

/// A partition field's summary over a manifest's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSummary {
    pub contains_null: bool,
    pub lower_bound: Option<Vec<u8>>,
    pub upper_bound: Option<Vec<u8>>,
}

impl FieldSummary {
    fn over(values: impl Iterator<Item = Option<i32>>) -> FieldSummary {
        let mut contains_null = false;
        let mut range: Option<(i32, i32)> = None;
        for v in values {
            match v {
                None => contains_null = true,
                Some(v) => {
                    range = Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                }
            }
        }
        FieldSummary {
            contains_null,
            lower_bound: range.map(|r| int_bytes(r.0)),
            upper_bound: range.map(|r| int_bytes(r.1)),
        }
    }

    /// The summaries of the spec's fields over `files`.
    pub fn of(files: &[&DataFile], spec: PartitionSpec) -> Vec<FieldSummary> {
        let mut out = vec![FieldSummary::over(files.iter().map(|f| Some(f.partition)))];
        if spec.with_day {
            out.push(FieldSummary::over(files.iter().map(|f| f.day)));
        }
        out
    }
}

/// An entry of a manifest list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    pub manifest_path: String,
    pub manifest_length: i64,
    pub partition_spec_id: i32,
    pub sequence_number: i64,
    pub min_sequence_number: i64,
    pub added_snapshot_id: i64,
    pub added_files_count: i32,
    pub existing_files_count: i32,
    pub deleted_files_count: i32,
    pub added_rows_count: i64,
    pub existing_rows_count: i64,
    pub deleted_rows_count: i64,
    pub partitions: Vec<FieldSummary>,
}

fn opt_bytes(b: &Option<Vec<u8>>) -> Avro {
    b.clone().map_or_else(none, |b| some(Avro::Bytes(b)))
}

/// The manifest list of a snapshot.
pub fn write_manifest_list(
    manifests: &[ManifestFile],
    snapshot_id: i64,
    parent_snapshot_id: Option<i64>,
    sequence_number: i64,
) -> Result<Vec<u8>> {
    let schema = Schema::parse(&manifest_list_schema())?;
    let mut w = Writer::new(&schema, Vec::new());
    w.add_user_metadata("snapshot-id".to_string(), snapshot_id.to_string())?;
    w.add_user_metadata(
        "parent-snapshot-id".to_string(),
        parent_snapshot_id.map_or_else(|| "null".to_string(), |p| p.to_string()),
    )?;
    w.add_user_metadata("sequence-number".to_string(), sequence_number.to_string())?;
    w.add_user_metadata("format-version".to_string(), "2")?;
    for m in manifests {
        let partitions = m
            .partitions
            .iter()
            .map(|p| {
                rec(vec![
                    ("contains_null", Avro::Boolean(p.contains_null)),
                    ("contains_nan", none()),
                    ("lower_bound", opt_bytes(&p.lower_bound)),
                    ("upper_bound", opt_bytes(&p.upper_bound)),
                ])
            })
            .collect();
        w.append(rec(vec![
            ("manifest_path", Avro::String(m.manifest_path.clone())),
            ("manifest_length", Avro::Long(m.manifest_length)),
            ("partition_spec_id", Avro::Int(m.partition_spec_id)),
            ("content", Avro::Int(0)),
            ("sequence_number", Avro::Long(m.sequence_number)),
            ("min_sequence_number", Avro::Long(m.min_sequence_number)),
            ("added_snapshot_id", Avro::Long(m.added_snapshot_id)),
            ("added_files_count", Avro::Int(m.added_files_count)),
            ("existing_files_count", Avro::Int(m.existing_files_count)),
            ("deleted_files_count", Avro::Int(m.deleted_files_count)),
            ("added_rows_count", Avro::Long(m.added_rows_count)),
            ("existing_rows_count", Avro::Long(m.existing_rows_count)),
            ("deleted_rows_count", Avro::Long(m.deleted_rows_count)),
            ("partitions", some(Avro::Array(partitions))),
            ("key_metadata", none()),
        ]))?;
    }
    Ok(w.into_inner()?)
}

fn corrupt(location: &str, reason: impl Into<String>) -> IcebergError {
    IcebergError::CorruptMetadata {
        location: location.to_string(),
        reason: reason.into(),
    }
}

/// A union's value, `None` for null.
fn unwrap_union(v: &Avro) -> Option<&Avro> {
    match v {
        Avro::Union(_, inner) => unwrap_union(inner),
        Avro::Null => None,
        v => Some(v),
    }
}

struct Fields<'a> {
    fields: &'a [(String, Avro)],
    location: &'a str,
}

impl Fields<'_> {
    fn get(&self, name: &str) -> Option<&Avro> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| unwrap_union(v))
    }
    fn long(&self, name: &str) -> Result<i64> {
        match self.get(name) {
            Some(Avro::Long(v)) => Ok(*v),
            Some(Avro::Int(v)) => Ok(i64::from(*v)),
            _ => Err(corrupt(self.location, format!("no {name}"))),
        }
    }
    fn int(&self, name: &str) -> Result<i32> {
        match self.get(name) {
            Some(Avro::Int(v)) => Ok(*v),
            _ => Err(corrupt(self.location, format!("no {name}"))),
        }
    }
    /// The nested record `name`, for reading its own fields.
    fn record(&self, name: &str) -> Result<Fields<'_>> {
        match self.get(name) {
            Some(Avro::Record(fields)) => Ok(Fields {
                fields,
                location: self.location,
            }),
            _ => Err(corrupt(self.location, format!("no {name}"))),
        }
    }
    fn bytes(&self, name: &str) -> Option<Vec<u8>> {
        match self.get(name) {
            Some(Avro::Bytes(b)) => Some(b.clone()),
            _ => None,
        }
    }
}

/// Reads a manifest list back (to carry its manifests into the next snapshot).
pub fn read_manifest_list(bytes: &[u8], location: &str) -> Result<Vec<ManifestFile>> {
    let mut out = Vec::new();
    for value in Reader::new(bytes)? {
        let value = value?;
        let Avro::Record(fields) = &value else {
            return Err(corrupt(location, "an entry is not a record"));
        };
        let f = Fields { fields, location };
        let manifest_path = match f.get("manifest_path") {
            Some(Avro::String(s)) => s.clone(),
            _ => return Err(corrupt(location, "no manifest_path")),
        };
        let mut partitions = Vec::new();
        if let Some(Avro::Array(items)) = f.get("partitions") {
            for item in items {
                let Avro::Record(p) = item else {
                    return Err(corrupt(location, "a partition summary is not a record"));
                };
                let p = Fields {
                    fields: p,
                    location,
                };
                partitions.push(FieldSummary {
                    contains_null: matches!(p.get("contains_null"), Some(Avro::Boolean(true))),
                    lower_bound: p.bytes("lower_bound"),
                    upper_bound: p.bytes("upper_bound"),
                });
            }
        }
        out.push(ManifestFile {
            manifest_path,
            manifest_length: f.long("manifest_length")?,
            partition_spec_id: f.int("partition_spec_id")?,
            sequence_number: f.long("sequence_number")?,
            min_sequence_number: f.long("min_sequence_number")?,
            added_snapshot_id: f.long("added_snapshot_id")?,
            added_files_count: f.int("added_files_count")?,
            existing_files_count: f.int("existing_files_count")?,
            deleted_files_count: f.int("deleted_files_count")?,
            added_rows_count: f.long("added_rows_count")?,
            existing_rows_count: f.long("existing_rows_count")?,
            deleted_rows_count: f.long("deleted_rows_count")?,
            partitions,
        });
    }
    Ok(out)
}

/// An `array<record{key: int, value}>` map field, by key.
fn read_map<T>(
    f: &Fields<'_>,
    name: &str,
    value: impl Fn(&Avro) -> Option<T>,
) -> Result<std::collections::BTreeMap<i32, T>> {
    let mut out = std::collections::BTreeMap::new();
    let Some(v) = f.get(name) else {
        return Ok(out);
    };
    let Avro::Array(items) = v else {
        return Err(corrupt(f.location, format!("{name} is not an array")));
    };
    for item in items {
        let Avro::Record(kv) = item else {
            return Err(corrupt(
                f.location,
                format!("an entry of {name} is not a record"),
            ));
        };
        let kv = Fields {
            fields: kv,
            location: f.location,
        };
        let v = kv
            .get("value")
            .and_then(&value)
            .ok_or_else(|| corrupt(f.location, format!("a value of {name} has the wrong type")))?;
        out.insert(kv.int("key")?, v);
    }
    Ok(out)
}

fn non_negative(location: &str, name: &str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| corrupt(location, format!("{name} is negative ({v})")))
}

/// Reads a manifest's entries, to carry its files into a rewritten manifest. Only data
/// manifests of Parquet files are expected (what [`write_manifest`] writes); anything
/// else is [`IcebergError::CorruptMetadata`] naming `location`.
pub fn read_manifest(bytes: &[u8], location: &str) -> Result<Vec<ManifestEntry>> {
    let reader = Reader::new(bytes)?;
    let meta = reader.user_metadata();
    let text = |k: &str| meta.get(k).and_then(|v| std::str::from_utf8(v).ok());
    if let Some(content) = text("content")
        && content != "data"
    {
        return Err(corrupt(location, format!("a {content} manifest, not data")));
    }
    let schema_json: Value = text("schema")
        .ok_or_else(|| corrupt(location, "no schema in the file metadata"))
        .and_then(|s| serde_json::from_str(s).map_err(|e| corrupt(location, e.to_string())))?;
    let schema = IcebergSchema {
        last_column_id: max_field_id(&schema_json),
        json: schema_json,
        name_mapping: Value::Null,
    };
    let offset_id = schema.top_level_id(strata_parquet::columns::OFFSET);
    let mut out = Vec::new();
    for value in reader {
        let value = value?;
        let Avro::Record(fields) = &value else {
            return Err(corrupt(location, "an entry is not a record"));
        };
        let e = Fields { fields, location };
        let d = e.record("data_file")?;
        let content = d.int("content")?;
        if content != 0 {
            return Err(corrupt(
                location,
                format!("content {content}: not a data file"),
            ));
        }
        let file_path = match d.get("file_path") {
            Some(Avro::String(s)) => s.clone(),
            _ => return Err(corrupt(location, "no file_path")),
        };
        match d.get("file_format") {
            Some(Avro::String(s)) if s.eq_ignore_ascii_case("parquet") => {}
            other => {
                return Err(corrupt(
                    location,
                    format!("{file_path}: file format {other:?}, not PARQUET"),
                ));
            }
        }
        let p = d.record("partition")?;
        let partition = p.int("partition")?;
        let day = match p.get("timestamp_day") {
            None => None,
            Some(Avro::Date(d) | Avro::Int(d)) => Some(*d),
            Some(_) => return Err(corrupt(location, "timestamp_day is not a date")),
        };
        let long = |v: &Avro| match v {
            Avro::Long(v) => Some(*v),
            _ => None,
        };
        let bytes = |v: &Avro| match v {
            Avro::Bytes(b) => Some(b.clone()),
            _ => None,
        };
        let lower_bounds = read_map(&d, "lower_bounds", bytes)?;
        let upper_bounds = read_map(&d, "upper_bounds", bytes)?;
        let bound = |m: &std::collections::BTreeMap<i32, Vec<u8>>| {
            offset_id
                .and_then(|id| m.get(&id))
                .and_then(|b| crate::bounds::read_long(b))
        };
        // Unknown offsets (no rows, no bounds) read as the empty range 0..=-1.
        let (first_offset, last_offset) = match (bound(&lower_bounds), bound(&upper_bounds)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (0, -1),
        };
        let split_offsets = match d.get("split_offsets") {
            Some(Avro::Array(items)) => items.iter().filter_map(long).collect(),
            _ => Vec::new(),
        };
        let snapshot_id = e.long("snapshot_id")?;
        let sequence_number = e.long("sequence_number")?;
        out.push(ManifestEntry {
            status: match e.int("status")? {
                s @ (STATUS_EXISTING | STATUS_ADDED | STATUS_DELETED) => s,
                s => return Err(corrupt(location, format!("entry status {s}"))),
            },
            snapshot_id,
            sequence_number,
            file_sequence_number: e.long("file_sequence_number").unwrap_or(sequence_number),
            file: DataFile {
                record_count: non_negative(location, "record_count", d.long("record_count")?)?,
                file_size_in_bytes: non_negative(
                    location,
                    "file_size_in_bytes",
                    d.long("file_size_in_bytes")?,
                )?,
                location: file_path,
                partition,
                day,
                first_offset,
                last_offset,
                column_sizes: read_map(&d, "column_sizes", long)?,
                value_counts: read_map(&d, "value_counts", long)?,
                null_value_counts: read_map(&d, "null_value_counts", long)?,
                lower_bounds,
                upper_bounds,
                split_offsets,
                schema: schema.clone(),
            },
        });
    }
    Ok(out)
}

/// The highest field id in a schema's JSON (`id`, `element-id`, `key-id`, `value-id`).
fn max_field_id(v: &Value) -> i32 {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match (k.as_str(), v) {
                ("id" | "element-id" | "key-id" | "value-id", Value::Number(n)) => {
                    n.as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0)
                }
                (_, v) => max_field_id(v),
            })
            .max()
            .unwrap_or(0),
        Value::Array(a) => a.iter().map(max_field_id).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
pub(crate) mod tests;
