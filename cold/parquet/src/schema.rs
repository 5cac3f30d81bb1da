//! The file's Arrow schema and Parquet writer properties.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
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
}

/// Key-value metadata keys every file carries.
pub mod metadata_keys {
    pub const TOPIC: &str = "strata.topic";
    pub const PARTITION: &str = "strata.partition";
    /// The input's offset range, control and aborted records included, so a partition's
    /// files cover its log without gaps.
    pub const FIRST_OFFSET: &str = "strata.first_offset";
    pub const LAST_OFFSET: &str = "strata.last_offset";
    /// `binary` or `json`.
    pub const VALUE_FORMAT: &str = "strata.value_format";
    /// The `parquet.value.schema` text, for JSON values.
    pub const VALUE_SCHEMA: &str = "strata.value_schema";
    pub const VERSION: &str = "strata.version";
}

pub(crate) fn header_struct_fields() -> Fields {
    Fields::from(vec![
        Field::new(columns::HEADER_KEY, DataType::Utf8, false),
        Field::new(columns::HEADER_VALUE, DataType::Binary, true),
    ])
}

pub(crate) fn headers_item_field() -> Arc<Field> {
    Arc::new(Field::new(
        LIST_ELEMENT,
        DataType::Struct(header_struct_fields()),
        false,
    ))
}

/// The Arrow schema of the files written with this value format (see the crate docs).
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
            DataType::List(headers_item_field()),
            false,
        ),
        Field::new(columns::PRODUCER_ID, DataType::Int64, true),
        Field::new(columns::SEQUENCE, DataType::Int32, true),
    ]);
    Arc::new(Schema::new(fields))
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
