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

impl IcebergSchema {
    /// The schema that reads this one's files and those of `file`'s schema, as schema
    /// `schema_id`: `None` when `file`'s columns are all this schema's already (a file
    /// written before a column was added reads it as null). A column `file` adds must be
    /// optional and have an id above [`Self::last_column_id`] (strata-parquet numbers the
    /// members of a JSON value last, so a member added at the end of
    /// `parquet.value.schema` gets the next id and no other id moves). Anything else (a
    /// column renamed, retyped, made required, or an id reused) cannot be read through
    /// one schema: an error saying which column.
    pub fn evolve(
        &self,
        file: &IcebergSchema,
        schema_id: i32,
    ) -> std::result::Result<Option<IcebergSchema>, String> {
        let mut changed = false;
        let fields = merge_struct(
            self.fields().as_array().map_or(&[][..], Vec::as_slice),
            file.fields().as_array().map_or(&[][..], Vec::as_slice),
            "",
            self.last_column_id,
            &mut changed,
        )?;
        if !changed {
            return Ok(None);
        }
        let last_column_id = self.last_column_id.max(file.last_column_id);
        let name_mapping = mapping_of(&fields);
        Ok(Some(IcebergSchema {
            json: json!({"type": "struct", "schema-id": schema_id, "fields": fields}),
            last_column_id,
            name_mapping,
        }))
    }
}

fn id_of(field: &Value) -> Option<i64> {
    field["id"].as_i64()
}

fn merge_struct(
    table: &[Value],
    file: &[Value],
    prefix: &str,
    last: i32,
    changed: &mut bool,
) -> std::result::Result<Vec<Value>, String> {
    let mut out: Vec<Value> = table.to_vec();
    for f in file {
        let name = f["name"].as_str().unwrap_or("?");
        let path = format!("{prefix}{name}");
        match table.iter().position(|t| id_of(t) == id_of(f)) {
            Some(i) => {
                let t = &table[i];
                if t["name"] != f["name"] {
                    return Err(format!(
                        "column id {} is '{}' in the table but '{path}' in the file",
                        id_of(f).unwrap_or(0),
                        t["name"].as_str().unwrap_or("?")
                    ));
                }
                if t["required"] != f["required"] {
                    return Err(format!(
                        "column '{path}' changed between required and optional"
                    ));
                }
                let ty = merge_type(&t["type"], &f["type"], &path, last, changed)?;
                out[i]["type"] = ty;
            }
            None => {
                if table.iter().any(|t| t["name"] == f["name"]) {
                    return Err(format!(
                        "column '{path}' has another id in the file than in the table (a column removed and added again, or members reordered)"
                    ));
                }
                if f["required"] == true {
                    return Err(format!(
                        "new column '{path}' is required: columns can only be added as optional (\"nullable\": true), so older files read it as null"
                    ));
                }
                if i64::from(last) >= id_of(f).unwrap_or(0) {
                    return Err(format!(
                        "new column '{path}' reuses id {}, which the table has had: add members at the end of parquet.value.schema",
                        id_of(f).unwrap_or(0)
                    ));
                }
                *changed = true;
                out.push(f.clone());
            }
        }
    }
    for t in table {
        if t["required"] == true && !file.iter().any(|f| id_of(f) == id_of(t)) {
            return Err(format!(
                "the file lacks required column '{prefix}{}'",
                t["name"].as_str().unwrap_or("?")
            ));
        }
    }
    Ok(out)
}

fn merge_type(
    table: &Value,
    file: &Value,
    path: &str,
    last: i32,
    changed: &mut bool,
) -> std::result::Result<Value, String> {
    match (table["type"].as_str(), file["type"].as_str()) {
        (Some("struct"), Some("struct")) if table.is_object() && file.is_object() => {
            let fields = merge_struct(
                table["fields"].as_array().map_or(&[][..], Vec::as_slice),
                file["fields"].as_array().map_or(&[][..], Vec::as_slice),
                &format!("{path}."),
                last,
                changed,
            )?;
            Ok(json!({"type": "struct", "fields": fields}))
        }
        (Some("list"), Some("list")) if table.is_object() && file.is_object() => {
            if table["element-id"] != file["element-id"]
                || table["element-required"] != file["element-required"]
            {
                return Err(format!("list column '{path}' changed its element"));
            }
            let element = merge_type(
                &table["element"],
                &file["element"],
                &format!("{path}.element"),
                last,
                changed,
            )?;
            let mut out = table.clone();
            out["element"] = element;
            Ok(out)
        }
        _ if table == file => Ok(table.clone()),
        _ => Err(format!(
            "column '{path}' changed type from {table} to {file}"
        )),
    }
}

/// The name mapping of schema fields (as [`IcebergSchema::from_arrow`] builds it).
fn mapping_of(fields: &[Value]) -> Value {
    fn nested(ty: &Value) -> Option<Value> {
        match ty["type"].as_str() {
            Some("struct") if ty.is_object() => Some(mapping_of(
                ty["fields"].as_array().map_or(&[][..], Vec::as_slice),
            )),
            Some("list") if ty.is_object() => {
                let id = ty["element-id"].as_i64().unwrap_or(0) as i32;
                Some(Value::Array(vec![mapping_entry(
                    id,
                    "element",
                    nested(&ty["element"]),
                )]))
            }
            _ => None,
        }
    }
    Value::Array(
        fields
            .iter()
            .map(|f| {
                mapping_entry(
                    id_of(f).unwrap_or(0) as i32,
                    f["name"].as_str().unwrap_or(""),
                    nested(&f["type"]),
                )
            })
            .collect(),
    )
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
        // The value's members come last: headers element 10, key 11, value 12, then
        // user 13 .. ok 16.
        assert_eq!(members[0]["id"], 13);
        assert_eq!(s.fields()[5]["name"], "_raw");
        assert_eq!(s.fields()[6]["type"]["element-id"], 10);
        assert_eq!(s.last_column_id, 16);

        let bare = ArrowSchema::new(vec![Field::new("offset", DataType::Int64, false)]);
        let e = IcebergSchema::from_arrow(&bare, 0).unwrap_err();
        assert!(e.to_string().contains("no Parquet field id"), "{e}");
    }

    fn json_schema(members: &str) -> IcebergSchema {
        let vs = ValueSchema::parse(&format!(r#"{{"fields":[{members}]}}"#)).unwrap();
        IcebergSchema::from_arrow(&file_schema(&ValueFormat::Json(vs)), 0).unwrap()
    }

    #[test]
    fn a_member_added_at_the_end_evolves_the_schema() {
        let old = json_schema(
            r#"{"name":"user","type":"utf8"},{"name":"geo","type":"struct","nullable":true,"fields":[{"name":"lat","type":"float64"}]}"#,
        );
        let new = json_schema(
            r#"{"name":"user","type":"utf8"},{"name":"geo","type":"struct","nullable":true,"fields":[{"name":"lat","type":"float64"}]},{"name":"amount","type":"float64","nullable":true}"#,
        );
        // Every other id is as it was; the new member has the next one.
        assert_eq!(new.last_column_id, old.last_column_id + 1);
        let evolved = old.evolve(&new, 1).unwrap().expect("a new schema");
        assert_eq!(evolved.json["schema-id"], 1);
        assert_eq!(evolved.last_column_id, new.last_column_id);
        assert_eq!(evolved.fields(), new.fields());
        assert_eq!(evolved.name_mapping, new.name_mapping);
        // The old files' schema reads through the new one; the new one needs nothing.
        assert_eq!(evolved.evolve(&old, 2).unwrap(), None);
        assert_eq!(evolved.evolve(&new, 2).unwrap(), None);
        assert_eq!(old.evolve(&old, 1).unwrap(), None);
    }

    #[test]
    fn changes_one_schema_cannot_read_are_refused() {
        let old = json_schema(r#"{"name":"user","type":"utf8"}"#);
        let cases = [
            (
                r#"{"name":"user","type":"utf8"},{"name":"n","type":"int64"}"#,
                "required",
            ),
            (
                r#"{"name":"n","type":"int64","nullable":true},{"name":"user","type":"utf8"}"#,
                "in the table but",
            ),
            (r#"{"name":"user","type":"int64"}"#, "changed type"),
            (
                r#"{"name":"user","type":"utf8","nullable":true}"#,
                "required and optional",
            ),
        ];
        for (members, why) in cases {
            let e = old.evolve(&json_schema(members), 1).unwrap_err();
            assert!(e.contains(why), "{members}: {e}");
        }
    }
}
