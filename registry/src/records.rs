//! The `_schemas` topic's records, in Confluent Schema Registry's own format (JSON keys
//! and values), so the topic reads as Confluent's does: a compacted topic in which the
//! latest record per key is the state. A hard delete is a tombstone.
//!
//! ```text
//! {"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}
//!   -> {"subject":"orders-value","version":1,"id":1,"schema":"...","deleted":false}
//! {"keytype":"CONFIG","subject":null,"magic":0} -> {"compatibilityLevel":"FULL"}
//! {"keytype":"MODE","subject":"orders-value","magic":0} -> {"mode":"READONLY"}
//! ```

use serde::{Deserialize, Serialize};

use crate::{Compatibility, Mode, Reference, SchemaType};

/// A record's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "keytype", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Key {
    Schema {
        subject: String,
        version: i32,
        magic: i32,
    },
    /// The global compatibility level (`subject` null) or a subject's.
    Config {
        subject: Option<String>,
        magic: i32,
    },
    Mode {
        subject: Option<String>,
        magic: i32,
    },
    /// Confluent's markers (DELETE_SUBJECT, CLEAR_SUBJECT, NOOP): read and skipped, as
    /// the SCHEMA records carry the state.
    #[serde(other)]
    Other,
}

impl Key {
    pub fn schema(subject: &str, version: i32) -> Key {
        Key::Schema {
            subject: subject.to_string(),
            version,
            magic: 1,
        }
    }

    pub fn config(subject: Option<&str>) -> Key {
        Key::Config {
            subject: subject.map(str::to_string),
            magic: 0,
        }
    }

    pub fn mode(subject: Option<&str>) -> Key {
        Key::Mode {
            subject: subject.map(str::to_string),
            magic: 0,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a key of strings and integers serializes")
    }
}

/// A SCHEMA record's value: one version of a subject.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaValue {
    pub subject: String,
    pub version: i32,
    pub id: i32,
    /// Absent for AVRO, as Confluent writes it.
    #[serde(
        rename = "schemaType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub schema_type: Option<SchemaType>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
    pub schema: String,
    #[serde(default)]
    pub deleted: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigValue {
    #[serde(rename = "compatibilityLevel")]
    pub compatibility_level: Compatibility,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeValue {
    pub mode: Mode,
}

/// A record to append to `_schemas`: its key and value (`None`: a tombstone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

impl Record {
    pub fn new(key: Key, value: Option<impl Serialize>) -> Record {
        Record {
            key: key.encode(),
            value: value.map(|v| {
                serde_json::to_vec(&v).expect("a value of strings and integers serializes")
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_read_as_confluents() {
        let k = Key::schema("orders-value", 3).encode();
        assert_eq!(
            String::from_utf8(k).unwrap(),
            r#"{"keytype":"SCHEMA","subject":"orders-value","version":3,"magic":1}"#
        );
        let k = Key::config(None).encode();
        assert_eq!(
            String::from_utf8(k).unwrap(),
            r#"{"keytype":"CONFIG","subject":null,"magic":0}"#
        );
        // Confluent's own records parse, markers included.
        let v: SchemaValue = serde_json::from_str(
            r#"{"subject":"s","version":1,"id":7,"schemaType":"PROTOBUF","schema":"syntax = \"proto3\";","deleted":false}"#,
        )
        .unwrap();
        assert_eq!((v.id, v.schema_type), (7, Some(SchemaType::Protobuf)));
        let k: Key = serde_json::from_str(r#"{"keytype":"NOOP","magic":0}"#).unwrap();
        assert_eq!(k, Key::Other);
        let c: ConfigValue =
            serde_json::from_str(r#"{"compatibilityLevel":"FULL_TRANSITIVE"}"#).unwrap();
        assert_eq!(c.compatibility_level, Compatibility::FullTransitive);
    }
}
