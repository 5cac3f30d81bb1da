//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use strata_parquet::{ConvertOptions, writer_properties};

fn strip(field: &Field) -> Field {
    let data_type = match field.data_type() {
        DataType::Struct(m) => DataType::Struct(m.iter().map(|f| strip(f)).collect::<Fields>()),
        DataType::List(item) => DataType::List(Arc::new(strip(item))),
        other => other.clone(),
    };
    let mut metadata = field.metadata().clone();
    metadata.remove(PARQUET_FIELD_ID_META_KEY);
    field
        .clone()
        .with_data_type(data_type)
        .with_metadata(metadata)
}

/// The same file as strata-parquet wrote before it had field ids: same rows, writer
/// properties and key-value metadata, no field ids anywhere.
pub fn without_field_ids(file: &[u8], opts: &ConvertOptions) -> Vec<u8> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::copy_from_slice(file)).unwrap();
    let kv = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap_or_default();
    let schema = Schema::new(
        builder
            .schema()
            .fields()
            .iter()
            .map(|f| strip(f))
            .collect::<Vec<_>>(),
    );
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(
        &mut out,
        Arc::new(schema),
        Some(writer_properties(opts).unwrap()),
    )
    .unwrap();
    for batch in builder.build().unwrap() {
        w.write(&batch.unwrap()).unwrap();
    }
    for e in kv.into_iter().filter(|e| e.key.starts_with("strata.")) {
        w.append_key_value_metadata(e);
    }
    w.close().unwrap();
    let check = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(out.clone())).unwrap();
    let descr = check.metadata().file_metadata().schema_descr();
    assert!(
        (0..descr.num_columns()).all(|i| !descr.column(i).self_type().get_basic_info().has_id()),
        "the copy still has field ids"
    );
    out
}
