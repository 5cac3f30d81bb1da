//! The registry's state, rebuilt from the `_schemas` records ([`Registry::replay`]) and
//! read by the API: subjects and their versions, schemas by id, the compatibility levels
//! and modes. Changes are computed by [`crate::ops`] as records; the caller appends them
//! durably, then replays them here.

use std::collections::{BTreeMap, BTreeSet};

use crate::records::{ConfigValue, Key, ModeValue, SchemaValue};
use crate::{Compatibility, Mode, Reference, RegistryError, SchemaType};

/// A schema as stored under its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSchema {
    pub schema_type: SchemaType,
    /// The text as registered (its identity: see [`crate::format::identity`]).
    pub schema: String,
    pub references: Vec<Reference>,
}

/// One version of a subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub id: i32,
    pub deleted: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Subject {
    pub versions: BTreeMap<i32, Version>,
    pub compatibility: Option<Compatibility>,
    pub mode: Option<Mode>,
}

impl Subject {
    /// Whether every version is soft-deleted (or there is none): the subject is gone
    /// unless deleted ones are asked for.
    pub fn deleted(&self) -> bool {
        self.versions.values().all(|v| v.deleted)
    }
}

/// A subject's version as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionInfo {
    pub subject: String,
    pub version: i32,
    pub id: i32,
    pub schema: StoredSchema,
    pub deleted: bool,
}

/// Why a `_schemas` record could not be read (it is skipped and counted; one bad record
/// must not keep the registry from loading).
#[derive(Debug, thiserror::Error)]
#[error("unreadable _schemas record: {0}")]
pub struct RecordError(String);

/// The registry.
#[derive(Debug, Default)]
pub struct Registry {
    pub(crate) subjects: BTreeMap<String, Subject>,
    pub(crate) schemas: BTreeMap<i32, StoredSchema>,
    /// The global compatibility level and mode (`None`: the defaults, BACKWARD and
    /// READWRITE).
    pub(crate) compatibility: Option<Compatibility>,
    pub(crate) mode: Option<Mode>,
}

impl Registry {
    /// Applies one `_schemas` record (loading the topic, or after a write is durable).
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), RecordError> {
        let key: Key = serde_json::from_slice(key).map_err(|e| RecordError(e.to_string()))?;
        let bad = |e: serde_json::Error| RecordError(e.to_string());
        match key {
            Key::Schema {
                subject, version, ..
            } => match value {
                None => {
                    if let Some(s) = self.subjects.get_mut(&subject) {
                        s.versions.remove(&version);
                        if s.versions.is_empty() && s.compatibility.is_none() && s.mode.is_none() {
                            self.subjects.remove(&subject);
                        }
                    }
                }
                Some(v) => {
                    let v: SchemaValue = serde_json::from_slice(v).map_err(bad)?;
                    self.schemas.entry(v.id).or_insert_with(|| StoredSchema {
                        schema_type: v.schema_type.unwrap_or_default(),
                        schema: v.schema.clone(),
                        references: v.references.clone(),
                    });
                    self.subjects.entry(subject).or_default().versions.insert(
                        version,
                        Version {
                            id: v.id,
                            deleted: v.deleted,
                        },
                    );
                }
            },
            Key::Config { subject, .. } => {
                let level = match value {
                    None => None,
                    Some(v) => Some(serde_json::from_slice::<ConfigValue>(v).map_err(bad)?),
                }
                .map(|c| c.compatibility_level);
                match subject {
                    None => self.compatibility = level,
                    Some(s) => self.subjects.entry(s).or_default().compatibility = level,
                }
            }
            Key::Mode { subject, .. } => {
                let mode = match value {
                    None => None,
                    Some(v) => Some(serde_json::from_slice::<ModeValue>(v).map_err(bad)?),
                }
                .map(|m| m.mode);
                match subject {
                    None => self.mode = mode,
                    Some(s) => self.subjects.entry(s).or_default().mode = mode,
                }
            }
            Key::Other => {}
        }
        Ok(())
    }

    /// The next id to give a new schema: above every id any record named (ids are never
    /// reused, also after a hard delete).
    pub fn next_id(&self) -> i32 {
        self.schemas.keys().next_back().map_or(1, |id| id + 1)
    }

    /// The subjects with a version (soft-deleted ones too when `deleted`).
    pub fn subjects(&self, deleted: bool) -> Vec<String> {
        self.subjects
            .iter()
            .filter(|(_, s)| !s.versions.is_empty() && (deleted || !s.deleted()))
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub(crate) fn subject(&self, name: &str, deleted: bool) -> Result<&Subject, RegistryError> {
        match self.subjects.get(name) {
            Some(s) if !s.versions.is_empty() && (deleted || !s.deleted()) => Ok(s),
            _ => Err(RegistryError::SubjectNotFound(name.to_string())),
        }
    }

    /// A subject's version numbers, in order.
    pub fn versions(&self, subject: &str, deleted: bool) -> Result<Vec<i32>, RegistryError> {
        let s = self.subject(subject, deleted)?;
        Ok(s.versions
            .iter()
            .filter(|(_, v)| deleted || !v.deleted)
            .map(|(n, _)| *n)
            .collect())
    }

    /// A version by its number, or `latest` (`-1`, as Confluent's API also takes).
    pub fn version(
        &self,
        subject: &str,
        version: &str,
        deleted: bool,
    ) -> Result<VersionInfo, RegistryError> {
        let s = self.subject(subject, deleted)?;
        let n = parse_version(version)?;
        let found = if n == -1 {
            s.versions.iter().rev().find(|(_, v)| deleted || !v.deleted)
        } else {
            s.versions
                .get_key_value(&n)
                .filter(|(_, v)| deleted || !v.deleted)
        };
        let (&version, v) = found.ok_or_else(|| RegistryError::VersionNotFound {
            version: version.to_string(),
        })?;
        let schema = self
            .schemas
            .get(&v.id)
            .cloned()
            .ok_or_else(|| RegistryError::SchemaNotFound(v.id.to_string()))?;
        Ok(VersionInfo {
            subject: subject.to_string(),
            version,
            id: v.id,
            schema,
            deleted: v.deleted,
        })
    }

    /// The schema registered under `id`.
    pub fn schema(&self, id: i32) -> Result<&StoredSchema, RegistryError> {
        self.schemas
            .get(&id)
            .filter(|_| self.versions_of(id, true).next().is_some())
            .ok_or_else(|| RegistryError::SchemaNotFound(format!("with id {id}")))
    }

    /// The ids of `subject`'s live (not deleted) versions, sorted: what a topic that
    /// validates schemas accepts (none when the subject does not exist).
    pub fn ids_in(&self, subject: &str) -> Vec<i32> {
        let mut ids: Vec<i32> = self
            .subjects
            .get(subject)
            .into_iter()
            .flat_map(|s| s.versions.values())
            .filter(|v| !v.deleted)
            .map(|v| v.id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The (subject, version) pairs that use schema `id`.
    pub fn versions_of(&self, id: i32, deleted: bool) -> impl Iterator<Item = (&str, i32)> {
        self.subjects.iter().flat_map(move |(name, s)| {
            s.versions
                .iter()
                .filter(move |(_, v)| v.id == id && (deleted || !v.deleted))
                .map(move |(n, _)| (name.as_str(), *n))
        })
    }

    /// The ids of the schemas whose references name `subject`'s `version`.
    pub fn referenced_by(&self, subject: &str, version: i32) -> Vec<i32> {
        let ids: BTreeSet<i32> = self
            .subjects
            .values()
            .flat_map(|s| s.versions.values().filter(|v| !v.deleted).map(|v| v.id))
            .filter(|id| {
                self.schemas.get(id).is_some_and(|s| {
                    s.references
                        .iter()
                        .any(|r| r.subject == subject && r.version == version)
                })
            })
            .collect();
        ids.into_iter().collect()
    }

    /// The compatibility level in force for `subject` (its own, else the global one),
    /// or with `subject` `None` the global one.
    pub fn compatibility(&self, subject: Option<&str>) -> Compatibility {
        subject
            .and_then(|s| self.subjects.get(s))
            .and_then(|s| s.compatibility)
            .or(self.compatibility)
            .unwrap_or_default()
    }

    /// A subject's own level, if it has one.
    pub fn subject_compatibility(&self, subject: &str) -> Result<Compatibility, RegistryError> {
        self.subjects
            .get(subject)
            .and_then(|s| s.compatibility)
            .ok_or_else(|| RegistryError::SubjectCompatibilityNotConfigured(subject.to_string()))
    }

    /// The mode in force for `subject` (its own, else the global one).
    pub fn mode(&self, subject: Option<&str>) -> Mode {
        subject
            .and_then(|s| self.subjects.get(s))
            .and_then(|s| s.mode)
            .or(self.mode)
            .unwrap_or_default()
    }

    pub fn subject_mode(&self, subject: &str) -> Result<Mode, RegistryError> {
        self.subjects
            .get(subject)
            .and_then(|s| s.mode)
            .ok_or_else(|| RegistryError::SubjectModeNotConfigured(subject.to_string()))
    }
}

/// A version as the API names it: a number from 1, or `latest` (or -1).
pub fn parse_version(v: &str) -> Result<i32, RegistryError> {
    if v.eq_ignore_ascii_case("latest") {
        return Ok(-1);
    }
    match v.parse::<i32>() {
        Ok(n) if n >= 1 || n == -1 => Ok(n),
        _ => Err(RegistryError::InvalidVersion(v.to_string())),
    }
}
