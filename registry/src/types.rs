//! The registry's vocabulary: schema types, references, compatibility levels and modes,
//! with the names Confluent's API and `_schemas` records use.

use serde::{Deserialize, Serialize};

use crate::RegistryError;

/// The kind of a schema. Avro is the default where a request or record names none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaType {
    #[default]
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }

    /// A request's `schemaType`, case-insensitive as Confluent's.
    pub fn parse(s: &str) -> Result<SchemaType, RegistryError> {
        match s.to_ascii_uppercase().as_str() {
            "AVRO" => Ok(SchemaType::Avro),
            "PROTOBUF" => Ok(SchemaType::Protobuf),
            "JSON" => Ok(SchemaType::Json),
            _ => Err(RegistryError::InvalidSchema(format!(
                "unknown schema type '{s}' (AVRO, PROTOBUF or JSON)"
            ))),
        }
    }
}

/// A schema's use of another subject's version, under the name its text refers to it by
/// (an Avro full name, a Protobuf import path, a JSON Schema `$ref`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i32,
}

/// How a subject's new versions must relate to its earlier ones (Confluent's levels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Compatibility {
    None,
    /// A reader of the new schema reads data written with the latest one.
    #[default]
    Backward,
    /// ... with every earlier one.
    BackwardTransitive,
    /// A reader of the latest schema reads data written with the new one.
    Forward,
    ForwardTransitive,
    /// Both.
    Full,
    FullTransitive,
}

impl Compatibility {
    pub fn name(self) -> &'static str {
        match self {
            Compatibility::None => "NONE",
            Compatibility::Backward => "BACKWARD",
            Compatibility::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Compatibility::Forward => "FORWARD",
            Compatibility::ForwardTransitive => "FORWARD_TRANSITIVE",
            Compatibility::Full => "FULL",
            Compatibility::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    /// A request's level, case-insensitive as Confluent's.
    pub fn parse(s: &str) -> Result<Compatibility, RegistryError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "NONE" => Compatibility::None,
            "BACKWARD" => Compatibility::Backward,
            "BACKWARD_TRANSITIVE" => Compatibility::BackwardTransitive,
            "FORWARD" => Compatibility::Forward,
            "FORWARD_TRANSITIVE" => Compatibility::ForwardTransitive,
            "FULL" => Compatibility::Full,
            "FULL_TRANSITIVE" => Compatibility::FullTransitive,
            _ => return Err(RegistryError::InvalidCompatibilityLevel),
        })
    }

    /// Whether the check goes back to every earlier version, not only the latest.
    pub fn transitive(self) -> bool {
        matches!(
            self,
            Compatibility::BackwardTransitive
                | Compatibility::ForwardTransitive
                | Compatibility::FullTransitive
        )
    }

    /// Whether a reader of the new schema must read what earlier ones wrote.
    pub fn backward(self) -> bool {
        matches!(
            self,
            Compatibility::Backward
                | Compatibility::BackwardTransitive
                | Compatibility::Full
                | Compatibility::FullTransitive
        )
    }

    /// Whether readers of earlier schemas must read what the new one writes.
    pub fn forward(self) -> bool {
        matches!(
            self,
            Compatibility::Forward
                | Compatibility::ForwardTransitive
                | Compatibility::Full
                | Compatibility::FullTransitive
        )
    }
}

/// What the registry (or a subject) accepts (Confluent's modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Mode {
    #[default]
    Readwrite,
    Readonly,
    /// Read-only, except for requests that override it (Confluent's operators).
    ReadonlyOverride,
    /// Registrations may give their id and version (migrating another registry's
    /// schemas), and are not checked for compatibility.
    Import,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Readwrite => "READWRITE",
            Mode::Readonly => "READONLY",
            Mode::ReadonlyOverride => "READONLY_OVERRIDE",
            Mode::Import => "IMPORT",
        }
    }

    pub fn parse(s: &str) -> Result<Mode, RegistryError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "READWRITE" => Mode::Readwrite,
            "READONLY" => Mode::Readonly,
            "READONLY_OVERRIDE" => Mode::ReadonlyOverride,
            "IMPORT" => Mode::Import,
            _ => return Err(RegistryError::InvalidMode),
        })
    }

    /// Whether registrations and deletions are refused.
    pub fn read_only(self) -> bool {
        matches!(self, Mode::Readonly | Mode::ReadonlyOverride)
    }
}
