//! The format of `parquet.value.schema`: a small JSON description of an Arrow struct.
//!
//! ```json
//! {
//!   "fields": [
//!     {"name": "user",   "type": "utf8"},
//!     {"name": "amount", "type": "float64", "nullable": true},
//!     {"name": "at",     "type": "timestamp_ms"},
//!     {"name": "tags",   "type": "list", "items": {"type": "utf8"}},
//!     {"name": "geo",    "type": "struct", "nullable": true,
//!      "fields": [{"name": "lat", "type": "float64"}, {"name": "lon", "type": "float64"}]}
//!   ],
//!   "unknown_fields": "ignore"
//! }
//! ```
//!
//! * `fields` (required, non-empty): the value is a JSON object with these members.
//! * A field is `{"name", "type", "nullable"?}`; `nullable` defaults to **false**: a value
//!   whose field is missing or `null` does not fit (it goes to `_raw`). Say
//!   `"nullable": true` for optional members.
//! * `type` is one of:
//!   - `utf8`: a JSON string (a number or a boolean does not fit);
//!   - `int64`: a JSON integer that fits in 64 bits (`1.0`, `1e3` and `"1"` do not fit);
//!   - `float64`: any JSON number (a string does not fit);
//!   - `bool`: `true` or `false`;
//!   - `timestamp_ms`: an integer of milliseconds since the Unix epoch, or an RFC 3339 /
//!     ISO 8601 string (one without an offset is taken as UTC); written as
//!     timestamp(ms, UTC);
//!   - `struct`: a JSON object, with its own `fields` (required, non-empty);
//!   - `list`: a JSON array, with `items` (required): `{"type", "nullable"?, ...}`, no name.
//! * `unknown_fields` (top level only): `"ignore"` (default) drops members the schema does
//!   not name, so producers can add fields before the schema learns them; `"reject"`
//!   makes such a value not fit.
//! * Decoding follows arrow-json otherwise: a member given twice takes its last value, and
//!   a raw control character inside a string is accepted (and kept) although RFC 8259
//!   wants it escaped. A value must be exactly one JSON object: empty values, scalars,
//!   arrays, `null` and two objects in one value do not fit.
//! * Names must be non-empty and unique within their struct. Nesting is limited to
//!   [`MAX_DEPTH`] levels. Unknown keys anywhere in the schema are refused, so a typo
//!   (`"nulable"`) is an error instead of a silently required field.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use serde::Deserialize;

/// How deep structs and lists may nest.
pub const MAX_DEPTH: usize = 16;

/// The name of a list's element field, as the Parquet spec's three-level lists call it.
pub(crate) const LIST_ELEMENT: &str = "element";

/// The time zone every timestamp column carries.
pub(crate) const UTC: &str = "UTC";

/// `parquet.value.schema` is not a valid schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid parquet.value.schema at {path}: {reason}")]
pub struct SchemaError {
    /// Where in the schema, like `fields[2].items`.
    pub path: String,
    pub reason: String,
}

/// A parsed, validated `parquet.value.schema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueSchema {
    fields: Fields,
    reject_unknown_fields: bool,
    source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaDoc {
    fields: Vec<Node>,
    #[serde(default)]
    unknown_fields: UnknownFields,
}

#[derive(Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum UnknownFields {
    #[default]
    Ignore,
    Reject,
}

/// A field (with a name) or a list's items (without one).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Node {
    name: Option<String>,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    nullable: bool,
    fields: Option<Vec<Node>>,
    items: Option<Box<Node>>,
}

fn err(path: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_string(),
        reason: reason.into(),
    }
}

impl ValueSchema {
    /// Parses and checks a schema in the format above.
    pub fn parse(json: &str) -> Result<ValueSchema, SchemaError> {
        let doc: SchemaDoc = serde_json::from_str(json).map_err(|e| err("$", e.to_string()))?;
        let fields = struct_fields(&doc.fields, "fields", 1)?;
        Ok(ValueSchema {
            fields,
            reject_unknown_fields: doc.unknown_fields == UnknownFields::Reject,
            source: json.trim().to_string(),
        })
    }

    /// The value's members as Arrow fields (with their declared nullability).
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// The type of the `value` column: a struct of [`Self::fields`].
    pub fn data_type(&self) -> DataType {
        DataType::Struct(self.fields.clone())
    }

    /// Whether a member the schema does not name makes a value not fit.
    pub fn rejects_unknown_fields(&self) -> bool {
        self.reject_unknown_fields
    }

    /// The schema text it was parsed from (written to the file's metadata).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether files of `next` can join a table of this schema's files: `next` has these
    /// members, in this order, with their types and nullability, and may add nullable
    /// members after them (which older files read as null). `Err` says what is not so.
    pub fn check_evolution(&self, next: &ValueSchema) -> Result<(), String> {
        let (old, new) = (self.fields(), next.fields());
        if new.len() < old.len() {
            return Err(format!(
                "it has {} members where the schema had {}: members cannot be removed",
                new.len(),
                old.len()
            ));
        }
        for (o, n) in old.iter().zip(new.iter()) {
            if o != n {
                return Err(format!(
                    "member '{}' became '{}' ({} -> {}, nullable {} -> {}): only members added at the end can change it",
                    o.name(),
                    n.name(),
                    o.data_type(),
                    n.data_type(),
                    o.is_nullable(),
                    n.is_nullable()
                ));
            }
        }
        if let Some(n) = new.iter().skip(old.len()).find(|n| !n.is_nullable()) {
            return Err(format!(
                "added member '{}' must be nullable (\"nullable\": true): files written before it have no such value",
                n.name()
            ));
        }
        Ok(())
    }
}

fn struct_fields(nodes: &[Node], path: &str, depth: usize) -> Result<Fields, SchemaError> {
    if nodes.is_empty() {
        // Parquet cannot store a group without columns.
        return Err(err(path, "a struct needs at least one field"));
    }
    let mut out: Vec<Field> = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let name = match node.name.as_deref() {
            Some("") => return Err(err(&here, "a field name must not be empty")),
            Some(n) => n,
            None => return Err(err(&here, "a field needs a name")),
        };
        if out.iter().any(|f| f.name() == name) {
            return Err(err(&here, format!("duplicate field name '{name}'")));
        }
        out.push(Field::new(
            name,
            data_type(node, &here, depth)?,
            node.nullable,
        ));
    }
    Ok(Fields::from(out))
}

fn data_type(node: &Node, path: &str, depth: usize) -> Result<DataType, SchemaError> {
    if depth > MAX_DEPTH {
        return Err(err(path, format!("nested deeper than {MAX_DEPTH} levels")));
    }
    let nested = matches!(node.ty.as_str(), "struct" | "list");
    if !nested && (node.fields.is_some() || node.items.is_some()) {
        return Err(err(
            path,
            format!("a {} has neither fields nor items", node.ty),
        ));
    }
    Ok(match node.ty.as_str() {
        "utf8" => DataType::Utf8,
        "int64" => DataType::Int64,
        "float64" => DataType::Float64,
        "bool" => DataType::Boolean,
        "timestamp_ms" => DataType::Timestamp(TimeUnit::Millisecond, Some(Arc::from(UTC))),
        "struct" => {
            if node.items.is_some() {
                return Err(err(path, "a struct has fields, not items"));
            }
            let fields = node
                .fields
                .as_deref()
                .ok_or_else(|| err(path, "a struct needs fields"))?;
            DataType::Struct(struct_fields(fields, &format!("{path}.fields"), depth + 1)?)
        }
        "list" => {
            if node.fields.is_some() {
                return Err(err(path, "a list has items, not fields"));
            }
            let items = node
                .items
                .as_deref()
                .ok_or_else(|| err(path, "a list needs items"))?;
            let here = format!("{path}.items");
            if items.name.is_some() {
                return Err(err(&here, "list items have no name"));
            }
            let item = data_type(items, &here, depth + 1)?;
            DataType::List(Arc::new(Field::new(LIST_ELEMENT, item, items.nullable)))
        }
        other => {
            return Err(err(
                path,
                format!(
                    "unknown type '{other}' (utf8, int64, float64, bool, timestamp_ms, struct, list)"
                ),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_type() {
        let s = ValueSchema::parse(
            r#"{"fields":[
                {"name":"user","type":"utf8"},
                {"name":"amount","type":"float64","nullable":true},
                {"name":"n","type":"int64"},
                {"name":"ok","type":"bool"},
                {"name":"at","type":"timestamp_ms"},
                {"name":"tags","type":"list","items":{"type":"utf8","nullable":true}},
                {"name":"geo","type":"struct","nullable":true,"fields":[
                    {"name":"lat","type":"float64"}]}
            ],"unknown_fields":"reject"}"#,
        )
        .unwrap();
        assert!(s.rejects_unknown_fields());
        let f = s.fields();
        assert_eq!(f.len(), 7);
        assert_eq!(f[0].data_type(), &DataType::Utf8);
        assert!(!f[0].is_nullable());
        assert!(f[1].is_nullable());
        assert_eq!(
            f[4].data_type(),
            &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
        );
        match f[5].data_type() {
            DataType::List(item) => {
                assert_eq!(item.name(), "element");
                assert!(item.is_nullable());
            }
            t => panic!("{t}"),
        }
        assert!(matches!(f[6].data_type(), DataType::Struct(c) if c.len() == 1));
        assert!(
            !ValueSchema::parse(r#"{"fields":[{"name":"a","type":"utf8"}]}"#)
                .unwrap()
                .rejects_unknown_fields()
        );
    }

    #[test]
    fn refuses_bad_schemas_with_a_path() {
        for (json, path) in [
            ("not json", "$"),
            (r#"{"fields":[]}"#, "fields"),
            (r#"{"fields":[{"type":"utf8"}]}"#, "fields[0]"),
            (r#"{"fields":[{"name":"","type":"utf8"}]}"#, "fields[0]"),
            (
                r#"{"fields":[{"name":"a","type":"utf8"},{"name":"a","type":"bool"}]}"#,
                "fields[1]",
            ),
            (r#"{"fields":[{"name":"a","type":"decimal"}]}"#, "fields[0]"),
            (
                r#"{"fields":[{"name":"a","type":"utf8","nulable":true}]}"#,
                "$",
            ),
            (r#"{"fields":[{"name":"a","type":"list"}]}"#, "fields[0]"),
            (
                r#"{"fields":[{"name":"a","type":"list","items":{"name":"x","type":"utf8"}}]}"#,
                "fields[0].items",
            ),
            (
                r#"{"fields":[{"name":"a","type":"struct","fields":[]}]}"#,
                "fields[0].fields",
            ),
            (
                r#"{"fields":[{"name":"a","type":"utf8","items":{"type":"utf8"}}]}"#,
                "fields[0]",
            ),
            (
                r#"{"fields":[{"name":"a","type":"utf8"}],"unknown_fields":"warn"}"#,
                "$",
            ),
        ] {
            let e = ValueSchema::parse(json).unwrap_err();
            assert_eq!(e.path, path, "{json}: {e}");
        }
        // Depth is bounded.
        let mut json = r#"{"type":"utf8"}"#.to_string();
        for _ in 0..MAX_DEPTH + 1 {
            json = format!(r#"{{"type":"list","items":{json}}}"#);
        }
        let json = format!(
            r#"{{"fields":[{{"name":"deep",{}}}]}}"#,
            &json[1..json.len() - 1]
        );
        let e = ValueSchema::parse(&json).unwrap_err();
        assert!(e.reason.contains("deeper"), "{e}");
    }
}
