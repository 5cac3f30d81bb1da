//! Strata's schema registry, sans IO (strata-registry): the state Confluent's Schema
//! Registry keeps (subjects, their versions, schemas by id, compatibility levels and
//! modes), the checks it makes (a schema parses; a new version keeps the subject's
//! compatibility level by its type's rules) and the records of its `_schemas` topic, in
//! Confluent's own format. No sockets, no clock, no files: the broker appends the records
//! a change computes, and replays them once durable (also when it loads the topic).
//!
//! * [`types`]: schema types, references, compatibility levels, modes.
//! * [`error`]: [`RegistryError`], with Confluent's HTTP statuses and error codes.
//! * [`records`]: the `_schemas` records (Confluent's JSON keys and values).
//! * [`state`]: [`Registry`], its state and the reads of the API.
//! * [`ops`]: registrations, lookups, compatibility checks, deletions, config and mode.
//! * [`format`]: what a schema type answers (identity, can one read another's data, the
//!   text served for a `?format=`); [`avro`] implements it for Avro (apache-avro's
//!   resolution rules), [`protobuf`] for Protobuf (protox and prost-reflect, Confluent's
//!   compatibility rules), [`json`] for JSON Schema (the jsonschema crate for schemas and
//!   values; Confluent's content-model rules for compatibility).

pub mod avro;
pub mod error;
pub mod format;
pub mod json;
pub mod ops;
pub mod protobuf;
pub mod records;
pub mod state;
pub mod types;

pub use error::RegistryError;
pub use ops::{NewSchema, Registered};
pub use records::Record;
pub use state::{Registry, StoredSchema, VersionInfo};
pub use types::{Compatibility, Mode, Reference, SchemaType};

#[cfg(test)]
mod tests;
