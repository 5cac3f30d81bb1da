//! The file's Arrow schema and Parquet writer properties.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::error::ConvertError;
use crate::options::{ConvertOptions, ValueFormat};
use crate::value_schema::{LIST_ELEMENT, UTC};

/// Column names.
pub mod columns {
    pub const PARTITION: &str = "partition";
    pub const OFFSET: &str = "offset";
    pub const TIMESTAMP: &str = "timestamp";
    pub const KEY: &str = "key";
    pub const VALUE: &str = "value";
    /// JSON value schema only: a value that did not fit, whole.
    pub const RAW: &str = "_raw";
    pub const HEADERS: &str = "headers";
    /// The members of a header struct.
    pub const HEADER_KEY: &str = "key";
    pub const HEADER_VALUE: &str = "value";
    pub const PRODUCER_ID: &str = "producer_id";
    pub const SEQUENCE: &str = "sequence";
    /// Dead-letter files only: why the value did not fit the value schema.
    pub const REASON: &str = "reason";
}

/// Key-value metadata keys every file carries.
pub mod metadata_keys {
    pub const TOPIC: &str = "strata.topic";
    pub const PARTITION: &str = "strata.partition";
    /// The input's offset range, control and aborted records included, so a partition's
    /// files cover its log without gaps.
    pub const FIRST_OFFSET: &str = "strata.first_offset";
    pub const LAST_OFFSET: &str = "strata.last_offset";
    /// `true` in a dead-letter file (the rows of a JSON topic whose value did not fit).
    pub const DEAD_LETTERS: &str = "strata.dead_letters";
    /// `binary` or `json`.
    pub const VALUE_FORMAT: &str = "strata.value_format";
    /// The `parquet.value.schema` text, for JSON values.
    pub const VALUE_SCHEMA: &str = "strata.value_schema";
    pub const VERSION: &str = "strata.version";
}

fn header_struct_fields() -> Fields {
    Fields::from(vec![
        Field::new(columns::HEADER_KEY, DataType::Utf8, false),
        Field::new(columns::HEADER_VALUE, DataType::Binary, true),
    ])
}

/// The headers list's element field as `schema` has it (with its field ids).
pub(crate) fn headers_item_field(schema: &Schema) -> Arc<Field> {
    match schema
        .field_with_name(columns::HEADERS)
        .map(|f| f.data_type())
    {
        Ok(DataType::List(item)) => item.clone(),
        _ => unnumbered_headers_item_field(),
    }
}

/// The members of a header struct in `item` (from [`headers_item_field`]).
pub(crate) fn header_members(item: &Field) -> Fields {
    match item.data_type() {
        DataType::Struct(members) => members.clone(),
        _ => header_struct_fields(),
    }
}

fn unnumbered_headers_item_field() -> Arc<Field> {
    Arc::new(Field::new(
        LIST_ELEMENT,
        DataType::Struct(header_struct_fields()),
        false,
    ))
}

/// The Arrow schema of the files written with this value format (see the crate docs),
/// with field ids (see [`with_field_ids`]).
pub fn file_schema(value: &ValueFormat) -> SchemaRef {
    let mut fields = vec![
        Field::new(columns::PARTITION, DataType::Int32, false),
        Field::new(columns::OFFSET, DataType::Int64, false),
        Field::new(
            columns::TIMESTAMP,
            DataType::Timestamp(TimeUnit::Millisecond, Some(Arc::from(UTC))),
            false,
        ),
        Field::new(columns::KEY, DataType::Binary, true),
    ];
    match value {
        ValueFormat::Binary => fields.push(Field::new(columns::VALUE, DataType::Binary, true)),
        ValueFormat::Json(schema) => {
            fields.push(Field::new(columns::VALUE, schema.data_type(), true));
            fields.push(Field::new(columns::RAW, DataType::Binary, true));
        }
    }
    fields.extend([
        Field::new(
            columns::HEADERS,
            DataType::List(unnumbered_headers_item_field()),
            false,
        ),
        Field::new(columns::PRODUCER_ID, DataType::Int64, true),
        Field::new(columns::SEQUENCE, DataType::Int32, true),
    ]);
    Arc::new(Schema::new(with_field_ids(fields)))
}

/// The schema of a dead-letter file: a binary-value file's columns (the value as the
/// producer sent it) and `reason`, why it did not fit the topic's value schema.
pub fn dead_letter_schema() -> SchemaRef {
    let mut fields = vec![
        Field::new(columns::PARTITION, DataType::Int32, false),
        Field::new(columns::OFFSET, DataType::Int64, false),
        Field::new(
            columns::TIMESTAMP,
            DataType::Timestamp(TimeUnit::Millisecond, Some(Arc::from(UTC))),
            false,
        ),
        Field::new(columns::KEY, DataType::Binary, true),
        Field::new(columns::VALUE, DataType::Binary, true),
        Field::new(
            columns::HEADERS,
            DataType::List(unnumbered_headers_item_field()),
            false,
        ),
        Field::new(columns::PRODUCER_ID, DataType::Int64, true),
        Field::new(columns::SEQUENCE, DataType::Int32, true),
    ];
    fields.push(Field::new(columns::REASON, DataType::Utf8, false));
    Arc::new(Schema::new(with_field_ids(fields)))
}

/// Numbers the fields so that an Iceberg table over these files (strata-iceberg) maps
/// columns by id: the top-level columns get 1..=n in order; then, for each column in
/// order but `value`, the members of its struct (or its list's element) get the next
/// ids, all members of one struct before any member's own nested fields (as Iceberg
/// numbers a new table); then the members of a typed `value` (JSON values), depth-first.
/// The value's members come last so that a member added at the end of
/// `parquet.value.schema` gets the next id and no other column's id moves: the table
/// evolves its schema by adding that id (strata-iceberg's `IcebergSchema::evolve`). The
/// id goes into the Arrow field metadata under [`PARQUET_FIELD_ID_META_KEY`], which the
/// Parquet writer stores as the column's `field_id`. Deterministic: the same value format
/// always gives the same ids.
pub fn with_field_ids(fields: Vec<Field>) -> Vec<Field> {
    let mut next = 1;
    let numbered: Vec<Field> = fields
        .into_iter()
        .map(|f| {
            let id = next;
            next += 1;
            with_id(f, id)
        })
        .collect();
    let mut out: Vec<Field> = numbered
        .into_iter()
        .map(|f| {
            if f.name() == columns::VALUE {
                return f;
            }
            let data_type = number_nested(f.data_type(), &mut next);
            f.with_data_type(data_type)
        })
        .collect();
    for f in out.iter_mut().filter(|f| f.name() == columns::VALUE) {
        let data_type = number_depth_first(f.data_type(), &mut next);
        *f = f.clone().with_data_type(data_type);
    }
    out
}

/// Numbers each member of a struct (or a list's element), then its own members, in order.
fn number_depth_first(data_type: &DataType, next: &mut i32) -> DataType {
    let mut member = |m: &Field| {
        let id = *next;
        *next += 1;
        let inner = number_depth_first(m.data_type(), next);
        with_id(m.clone(), id).with_data_type(inner)
    };
    match data_type {
        DataType::Struct(members) => {
            DataType::Struct(members.iter().map(|m| member(m)).collect::<Fields>())
        }
        DataType::List(item) => DataType::List(Arc::new(member(item))),
        other => other.clone(),
    }
}

fn number_struct(fields: Vec<Field>, next: &mut i32) -> Vec<Field> {
    let numbered: Vec<Field> = fields
        .into_iter()
        .map(|f| {
            let id = *next;
            *next += 1;
            with_id(f, id)
        })
        .collect();
    numbered
        .into_iter()
        .map(|f| {
            let data_type = number_nested(f.data_type(), next);
            f.with_data_type(data_type)
        })
        .collect()
}

fn number_nested(data_type: &DataType, next: &mut i32) -> DataType {
    match data_type {
        DataType::Struct(members) => DataType::Struct(Fields::from(number_struct(
            members.iter().map(|m| m.as_ref().clone()).collect(),
            next,
        ))),
        DataType::List(item) => {
            let id = *next;
            *next += 1;
            let item = with_id(item.as_ref().clone(), id);
            let inner = number_nested(item.data_type(), next);
            DataType::List(Arc::new(item.with_data_type(inner)))
        }
        other => other.clone(),
    }
}

fn with_id(field: Field, id: i32) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.insert(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string());
    field.with_metadata(metadata)
}

/// The writer properties of a conversion, without the per-file key-value metadata (the
/// converter adds it). Public so a benchmark's baseline writes with exactly these.
pub fn writer_properties(opts: &ConvertOptions) -> Result<WriterProperties, ConvertError> {
    opts.check()?;
    let level = ZstdLevel::try_new(opts.zstd_level)
        .map_err(|e| ConvertError::InvalidOptions(e.to_string()))?;
    let col = |name: &str| ColumnPath::from(name);
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        // Row groups are cut by the converter on its uncompressed estimate (the writer's
        // own byte limit counts encoded, compressed bytes), never by row count.
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(None)
        // Spec names for lists ("element"), which every reader understands.
        .set_coerce_types(true)
        // Statistics cost time and footer space; readers prune on offset and time.
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_statistics_enabled(col(columns::OFFSET), EnabledStatistics::Page)
        .set_column_statistics_enabled(col(columns::TIMESTAMP), EnabledStatistics::Page)
        .set_column_statistics_enabled(col(columns::PARTITION), EnabledStatistics::Chunk)
        .set_column_statistics_enabled(col(columns::PRODUCER_ID), EnabledStatistics::Chunk)
        .set_column_statistics_enabled(col(columns::SEQUENCE), EnabledStatistics::Chunk)
        // Offsets and timestamps are (nearly) unique and values are usually distinct: a
        // dictionary would be built, outgrow its page and be thrown away.
        .set_column_dictionary_enabled(col(columns::OFFSET), false)
        .set_column_dictionary_enabled(col(columns::TIMESTAMP), false)
        .set_column_dictionary_enabled(col(columns::RAW), false);
    if matches!(opts.value_format, ValueFormat::Binary) {
        b = b.set_column_dictionary_enabled(col(columns::VALUE), false);
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value_schema::ValueSchema;

    fn id(f: &Field) -> i32 {
        f.metadata()[PARQUET_FIELD_ID_META_KEY].parse().unwrap()
    }

    fn list_item(f: &Field) -> &Field {
        match f.data_type() {
            DataType::List(item) => item,
            t => panic!("{t}"),
        }
    }

    fn members(f: &Field) -> &Fields {
        match f.data_type() {
            DataType::Struct(m) => m,
            t => panic!("{t}"),
        }
    }

    #[test]
    fn binary_columns_are_numbered_in_order_then_nested() {
        let s = file_schema(&ValueFormat::Binary);
        let ids: Vec<i32> = s.fields().iter().map(|f| id(f)).collect();
        assert_eq!(ids, (1..=8).collect::<Vec<_>>());
        let headers = s.field_with_name(columns::HEADERS).unwrap();
        let element = list_item(headers);
        assert_eq!(id(element), 9);
        let m = members(element);
        assert_eq!((id(&m[0]), id(&m[1])), (10, 11));
    }

    #[test]
    fn json_value_members_are_numbered_last_depth_first() {
        let schema = |extra: &str| {
            let vs = ValueSchema::parse(&format!(
                r#"{{"fields":[
                    {{"name":"user","type":"utf8"}},
                    {{"name":"tags","type":"list","items":{{"type":"utf8"}}}},
                    {{"name":"geo","type":"struct","fields":[{{"name":"lat","type":"float64"}}]}}{extra}
                ]}}"#
            ))
            .unwrap();
            file_schema(&ValueFormat::Json(vs))
        };
        let s = schema("");
        let ids: Vec<i32> = s.fields().iter().map(|f| id(f)).collect();
        assert_eq!(ids, (1..=9).collect::<Vec<_>>());
        // headers (7): element 10, key 11, value 12; then value (5) depth-first: user 13,
        // tags 14, its element 15, geo 16, geo.lat 17.
        let element = list_item(s.field_with_name(columns::HEADERS).unwrap());
        assert_eq!(id(element), 10);
        let m = members(element);
        assert_eq!((id(&m[0]), id(&m[1])), (11, 12));
        let value = members(s.field_with_name(columns::VALUE).unwrap());
        assert_eq!(
            value.iter().map(|f| id(f)).collect::<Vec<_>>(),
            vec![13, 14, 16]
        );
        assert_eq!(id(list_item(&value[1])), 15);
        assert_eq!(id(&members(&value[2])[0]), 17);

        // A member added at the end takes the next id; no other id moves.
        let grown = schema(r#",{"name":"n","type":"int64","nullable":true}"#);
        let all = |s: &Schema| {
            let mut out = Vec::new();
            fn walk(f: &Field, out: &mut Vec<(String, i32)>) {
                out.push((f.name().clone(), id(f)));
                match f.data_type() {
                    DataType::Struct(m) => m.iter().for_each(|m| walk(m, out)),
                    DataType::List(i) => walk(i, out),
                    _ => {}
                }
            }
            s.fields().iter().for_each(|f| walk(f, &mut out));
            out
        };
        let (before, after) = (all(&s), all(&grown));
        assert!(before.iter().all(|b| after.contains(b)));
        assert_eq!(
            after
                .iter()
                .filter(|a| !before.contains(a))
                .collect::<Vec<_>>(),
            vec![&("n".to_string(), 18)]
        );
    }
}
