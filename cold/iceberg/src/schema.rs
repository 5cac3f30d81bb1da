//! The table's Iceberg schema, derived from a Strata Parquet file's Arrow schema.
//!
//! Field ids come from the files themselves: strata-parquet writes each column's Iceberg
//! id as its Parquet `field_id` (Arrow metadata `PARQUET:field_id`), so the table schema
//! and the files agree by construction and readers map columns by id. Types:
//!
//! | Arrow                      | Iceberg       |
//! |----------------------------|---------------|
//! | int32 / int64              | int / long    |
//! | float64 / bool             | double / boolean |
//! | utf8 / binary              | string / binary |
//! | timestamp(ms or µs, tz)    | timestamptz   |
//! | timestamp(ms or µs)        | timestamp     |
//! | struct / list              | struct / list |
//!
//! Iceberg's `timestamptz` is microseconds; our columns are milliseconds. Readers accept
//! that (pyiceberg casts a millisecond column to the table's microsecond type when it
//! reads, `tests/python/check_table.py` checks the values), and bounds are converted to
//! microseconds ([`crate::bounds`]). The other choice, `long`, would lose the type and
//! the `day` partition transform, which needs a date or timestamp source.
//!
//! The table also gets a name mapping (property `schema.name-mapping.default`): files
//! written before field ids existed carry none, and a reader then maps their columns by
//! name through it.

use arrow::datatypes::{DataType, Field, Fields, Schema as ArrowSchema, TimeUnit};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use serde_json::{Value, json};

use crate::error::{IcebergError, Result};

/// An Iceberg schema (the JSON object of the table metadata's `schemas`).
#[derive(Debug, Clone, PartialEq)]
pub struct IcebergSchema {
    /// `{"type": "struct", "schema-id": .., "fields": [..]}`.
    pub json: Value,
    /// The highest field id in the schema (the metadata's `last-column-id`).
    pub last_column_id: i32,
    /// The name mapping (JSON array) for files without field ids.
    pub name_mapping: Value,
}

impl IcebergSchema {
    /// The schema of files with this Arrow schema, as schema `schema_id`. Every field
    /// needs a field id (files written by strata-parquet since ids were added).
    pub fn from_arrow(arrow: &ArrowSchema, schema_id: i32) -> Result<IcebergSchema> {
        let mut last = 0;
        let (fields, mapping) = struct_fields(arrow.fields(), "", &mut last)?;
        Ok(IcebergSchema {
            json: json!({"type": "struct", "schema-id": schema_id, "fields": fields}),
            last_column_id: last,
            name_mapping: mapping,
        })
    }

    /// The `fields` array, to compare two schemas whatever their ids.
    pub fn fields(&self) -> &Value {
        &self.json["fields"]
    }

    /// The id of the top-level column `name`.
    pub fn top_level_id(&self, name: &str) -> Option<i32> {
        self.fields()
            .as_array()?
            .iter()
            .find(|f| f["name"] == name)
            .and_then(|f| f["id"].as_i64())
            .and_then(|id| i32::try_from(id).ok())
    }
}

fn field_id(field: &Field, path: &str) -> Result<i32> {
    field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| IcebergError::UnsupportedColumn {
            column: path.to_string(),
            reason: "no Parquet field id: the file predates field ids; convert the segment \
                     again with this strata-parquet to publish it"
                .to_string(),
        })
}

fn struct_fields(fields: &Fields, prefix: &str, last: &mut i32) -> Result<(Value, Value)> {
    let mut out = Vec::with_capacity(fields.len());
    let mut mapping = Vec::with_capacity(fields.len());
    for f in fields {
        let path = format!("{prefix}{}", f.name());
        let id = field_id(f, &path)?;
        *last = (*last).max(id);
        let (ty, nested) = iceberg_type(f.data_type(), &path, last)?;
        out.push(json!({"id": id, "name": f.name(), "required": !f.is_nullable(), "type": ty}));
        mapping.push(mapping_entry(id, f.name(), nested));
    }
    Ok((Value::Array(out), Value::Array(mapping)))
}

fn mapping_entry(id: i32, name: &str, nested: Option<Value>) -> Value {
    match nested {
        Some(fields) => json!({"field-id": id, "names": [name], "fields": fields}),
        None => json!({"field-id": id, "names": [name]}),
    }
}

/// The Iceberg type of `data_type` and, for nested types, the name mapping of its members.
fn iceberg_type(
    data_type: &DataType,
    path: &str,
    last: &mut i32,
) -> Result<(Value, Option<Value>)> {
    let primitive = |s: &str| Ok((Value::String(s.to_string()), None));
    match data_type {
        DataType::Int32 => primitive("int"),
        DataType::Int64 => primitive("long"),
        DataType::Float64 => primitive("double"),
        DataType::Boolean => primitive("boolean"),
        DataType::Utf8 => primitive("string"),
        DataType::Binary => primitive("binary"),
        DataType::Timestamp(TimeUnit::Millisecond | TimeUnit::Microsecond, tz) => {
            primitive(if tz.is_some() {
                "timestamptz"
            } else {
                "timestamp"
            })
        }
        DataType::Struct(members) => {
            let (fields, mapping) = struct_fields(members, &format!("{path}."), last)?;
            Ok((json!({"type": "struct", "fields": fields}), Some(mapping)))
        }
        DataType::List(item) => {
            let item_path = format!("{path}.{}", item.name());
            let id = field_id(item, &item_path)?;
            *last = (*last).max(id);
            let (ty, nested) = iceberg_type(item.data_type(), &item_path, last)?;
            Ok((
                json!({"type": "list", "element-id": id, "element": ty,
                       "element-required": !item.is_nullable()}),
                Some(Value::Array(vec![mapping_entry(id, item.name(), nested)])),
            ))
        }
        other => Err(IcebergError::UnsupportedColumn {
            column: path.to_string(),
            reason: format!("Arrow type {other} has no Iceberg type here"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_parquet::{ValueFormat, ValueSchema, file_schema};

    #[test]
    fn binary_file_schema() {
        let s = IcebergSchema::from_arrow(&file_schema(&ValueFormat::Binary), 0).unwrap();
        let f = s.fields().as_array().unwrap();
        let names: Vec<&str> = f.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "partition",
                "offset",
                "timestamp",
                "key",
                "value",
                "headers",
                "producer_id",
                "sequence"
            ]
        );
        assert_eq!(
            f[0],
            json!({"id": 1, "name": "partition", "required": true, "type": "int"})
        );
        assert_eq!(f[2]["type"], "timestamptz");
        assert_eq!(
            f[3],
            json!({"id": 4, "name": "key", "required": false, "type": "binary"})
        );
        assert_eq!(
            f[5]["type"],
            json!({"type": "list", "element-id": 9, "element-required": true, "element":
                {"type": "struct", "fields": [
                    {"id": 10, "name": "key", "required": true, "type": "string"},
                    {"id": 11, "name": "value", "required": false, "type": "binary"}]}})
        );
        assert_eq!(s.last_column_id, 11);
        assert_eq!(s.top_level_id("timestamp"), Some(3));
        assert_eq!(
            s.name_mapping[5],
            json!({"field-id": 6, "names": ["headers"], "fields": [
                {"field-id": 9, "names": ["element"], "fields": [
                    {"field-id": 10, "names": ["key"]}, {"field-id": 11, "names": ["value"]}]}]})
        );
    }

    #[test]
    fn json_value_schema_and_missing_ids() {
        let vs = ValueSchema::parse(
            r#"{"fields":[{"name":"user","type":"utf8"},{"name":"amount","type":"float64","nullable":true},
                {"name":"at","type":"timestamp_ms"},{"name":"ok","type":"bool"}]}"#,
        )
        .unwrap();
        let s = IcebergSchema::from_arrow(&file_schema(&ValueFormat::Json(vs)), 3).unwrap();
        assert_eq!(s.json["schema-id"], 3);
        let value = &s.fields()[4];
        assert_eq!(value["required"], false);
        let members = value["type"]["fields"].as_array().unwrap();
        let types: Vec<&str> = members
            .iter()
            .map(|m| m["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["string", "double", "timestamptz", "boolean"]);
        assert_eq!(members[0]["id"], 10);
        assert_eq!(s.fields()[5]["name"], "_raw");
        // headers element 14, key 15, value 16
        assert_eq!(s.last_column_id, 16);

        let bare = ArrowSchema::new(vec![Field::new("offset", DataType::Int64, false)]);
        let e = IcebergSchema::from_arrow(&bare, 0).unwrap_err();
        assert!(e.to_string().contains("no Parquet field id"), "{e}");
    }
}
