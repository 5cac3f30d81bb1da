//! The registry's changes and checks, computed from its state without changing it: a
//! change comes back as the `_schemas` records that make it, which the caller appends
//! durably and then replays ([`Registry::replay`]); only then is it answered.

use crate::format::{self, Resolved};
use crate::records::{ConfigValue, Key, ModeValue, Record, SchemaValue};
use crate::state::{Registry, parse_version};
use crate::{Compatibility, Mode, Reference, RegistryError, SchemaType};

/// A registration as a client asks for it (`POST /subjects/{s}/versions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewSchema {
    pub schema_type: SchemaType,
    pub schema: String,
    pub references: Vec<Reference>,
    /// IMPORT mode only: the id and version to register it under.
    pub id: Option<i32>,
    pub version: Option<i32>,
}

/// What a registration comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    pub id: i32,
    pub version: i32,
    /// The records to append; empty when the subject already has this schema.
    pub records: Vec<Record>,
}

/// The longest subject name taken (Confluent has no limit; this bounds what a client
/// makes the registry keep).
pub const MAX_SUBJECT_LEN: usize = 1024;

fn check_subject(subject: &str) -> Result<(), RegistryError> {
    if subject.is_empty()
        || subject.len() > MAX_SUBJECT_LEN
        || subject.chars().any(char::is_control)
    {
        return Err(RegistryError::InvalidSubject(subject.to_string()));
    }
    Ok(())
}

impl Registry {
    fn writable(&self, subject: Option<&str>) -> Result<Mode, RegistryError> {
        let mode = self.mode(subject);
        if mode.read_only() {
            return Err(RegistryError::OperationNotPermitted(match subject {
                Some(s) => format!("Subject {s} is in read-only mode"),
                None => "The registry is in read-only mode".to_string(),
            }));
        }
        Ok(mode)
    }

    /// A stored schema's text in Confluent's `?format=`: `serialized` gives a Protobuf
    /// schema as its descriptor (base64), anything else (or none) the stored text.
    pub fn render(
        &self,
        s: &crate::StoredSchema,
        format: Option<&str>,
    ) -> Result<String, RegistryError> {
        if format.is_none_or(|f| f.trim().is_empty()) {
            return Ok(s.schema.clone());
        }
        let refs = self.resolve(&s.references)?;
        format::render(
            s.schema_type,
            format::Resolved {
                text: &s.schema,
                references: &refs,
            },
            format,
        )
        .map_err(RegistryError::InvalidSchema)
    }

    /// The texts of a schema's references, by the names it uses: each must be a version
    /// that exists (not soft-deleted).
    fn resolve(&self, references: &[Reference]) -> Result<Vec<(String, String)>, RegistryError> {
        let mut out = Vec::with_capacity(references.len());
        for r in references {
            let v = self
                .version(&r.subject, &r.version.to_string(), false)
                .map_err(|_| {
                    RegistryError::InvalidSchema(format!(
                        "reference '{}' names subject '{}' version {}, which does not exist",
                        r.name, r.subject, r.version
                    ))
                })?;
            // A reference's own references are the named types it brings along.
            out.extend(self.resolve(&v.schema.references)?);
            out.push((r.name.clone(), v.schema.schema));
        }
        Ok(out)
    }

    /// The schema's identity (see [`format::identity`]), checked to parse.
    fn identity(&self, s: &NewSchema) -> Result<(String, Vec<(String, String)>), RegistryError> {
        let refs = self.resolve(&s.references)?;
        let id = format::identity(
            s.schema_type,
            Resolved {
                text: &s.schema,
                references: &refs,
            },
        )
        .map_err(RegistryError::InvalidSchema)?;
        Ok((id, refs))
    }

    /// The id of a schema with this identity, type and references, if one is stored.
    fn existing_id(&self, ty: SchemaType, identity: &str, refs: &[Reference]) -> Option<i32> {
        self.schemas
            .iter()
            .find(|(_, s)| s.schema_type == ty && s.schema == identity && s.references == refs)
            .map(|(id, _)| *id)
    }

    /// Registers `s` under `subject`: the subject's version of it if it has one already,
    /// else a new version (and a new id, unless the same schema has one under another
    /// subject), after the compatibility check.
    pub fn register(&self, subject: &str, s: &NewSchema) -> Result<Registered, RegistryError> {
        check_subject(subject)?;
        let mode = self.writable(Some(subject))?;
        let (identity, refs) = self.identity(s)?;
        if (s.id.is_some() || s.version.is_some()) && mode != Mode::Import {
            return Err(RegistryError::OperationNotPermitted(format!(
                "an id or version may be given only in IMPORT mode; subject {subject} is in {} mode",
                mode.name()
            )));
        }
        let subj = self.subjects.get(subject);
        // Already there (not soft-deleted): the same answer again, nothing written.
        if let Some(subj) = subj {
            for (n, v) in subj.versions.iter().filter(|(_, v)| !v.deleted) {
                if self.existing_id(s.schema_type, &identity, &s.references) == Some(v.id) {
                    return Ok(Registered {
                        id: v.id,
                        version: *n,
                        records: Vec::new(),
                    });
                }
            }
        }
        if mode != Mode::Import {
            let problems = self.incompatibilities(subject, s, &identity, &refs, None)?;
            if !problems.is_empty() {
                return Err(RegistryError::Incompatible {
                    subject: subject.to_string(),
                    details: problems,
                });
            }
        }
        let id = match (
            s.id,
            self.existing_id(s.schema_type, &identity, &s.references),
        ) {
            (Some(want), Some(have)) if want != have => {
                return Err(RegistryError::IdInUse {
                    id: have,
                    requested: want,
                });
            }
            (Some(want), None) => {
                if self.schemas.contains_key(&want) {
                    return Err(RegistryError::IdInUse {
                        id: want,
                        requested: want,
                    });
                }
                want
            }
            (_, Some(have)) => have,
            (None, None) => self.next_id(),
        };
        let version = match s.version {
            Some(v) if v >= 1 => {
                if subj.is_some_and(|x| x.versions.contains_key(&v)) {
                    return Err(RegistryError::OperationNotPermitted(format!(
                        "version {v} of subject {subject} exists"
                    )));
                }
                v
            }
            Some(v) => return Err(RegistryError::InvalidVersion(v.to_string())),
            // Versions are never reused: after the highest ever written.
            None => subj
                .and_then(|x| x.versions.keys().next_back())
                .map_or(1, |n| n + 1),
        };
        let value = SchemaValue {
            subject: subject.to_string(),
            version,
            id,
            schema_type: (s.schema_type != SchemaType::Avro).then_some(s.schema_type),
            references: s.references.clone(),
            schema: identity,
            deleted: false,
        };
        Ok(Registered {
            id,
            version,
            records: vec![Record::new(Key::schema(subject, version), Some(value))],
        })
    }

    /// The subject's version of `s`, if it has it (`POST /subjects/{s}`).
    pub fn lookup(
        &self,
        subject: &str,
        s: &NewSchema,
        deleted: bool,
    ) -> Result<(i32, i32), RegistryError> {
        let subj = self.subject(subject, deleted)?;
        let (identity, _) = self.identity(s)?;
        let id = self
            .existing_id(s.schema_type, &identity, &s.references)
            .ok_or_else(|| RegistryError::SchemaNotFound(String::new()))?;
        subj.versions
            .iter()
            .rev()
            .find(|(_, v)| v.id == id && (deleted || !v.deleted))
            .map(|(n, _)| (id, *n))
            .ok_or_else(|| RegistryError::SchemaNotFound(String::new()))
    }

    /// What makes `s` incompatible with the subject's versions under its level: against
    /// `against` (a version number or latest) when given (`POST /compatibility/...`),
    /// else the latest version or, transitive, every version. Empty: compatible.
    fn incompatibilities(
        &self,
        subject: &str,
        s: &NewSchema,
        identity: &str,
        refs: &[(String, String)],
        against: Option<i32>,
    ) -> Result<Vec<String>, RegistryError> {
        let level = self.compatibility(Some(subject));
        if level == Compatibility::None {
            return Ok(Vec::new());
        }
        let Some(subj) = self.subjects.get(subject) else {
            return Ok(Vec::new());
        };
        let live: Vec<i32> = subj
            .versions
            .iter()
            .filter(|(_, v)| !v.deleted)
            .map(|(_, v)| v.id)
            .collect();
        let previous: Vec<i32> = match against {
            Some(-1) | None if !level.transitive() => live.last().copied().into_iter().collect(),
            Some(n) if n >= 1 => subj
                .versions
                .get(&n)
                .filter(|v| !v.deleted)
                .map(|v| v.id)
                .into_iter()
                .collect(),
            _ => live,
        };
        let new = Resolved {
            text: identity,
            references: refs,
        };
        let mut problems = Vec::new();
        for id in previous {
            let Some(old) = self.schemas.get(&id) else {
                continue;
            };
            if old.schema_type != s.schema_type {
                problems.push(format!(
                    "the schema type changed from {} to {}",
                    old.schema_type.name(),
                    s.schema_type.name()
                ));
                continue;
            }
            let old_refs = self.resolve(&old.references).unwrap_or_default();
            let old = Resolved {
                text: &old.schema,
                references: &old_refs,
            };
            if level.backward()
                && let Err(e) = format::can_read(s.schema_type, old, new)
            {
                problems.extend(e.into_iter().map(|m| {
                    format!("{{reader: the new schema, writer: version with id {id}, {m}}}")
                }));
            }
            if level.forward()
                && let Err(e) = format::can_read(s.schema_type, new, old)
            {
                problems.extend(e.into_iter().map(|m| {
                    format!("{{reader: version with id {id}, writer: the new schema, {m}}}")
                }));
            }
        }
        Ok(problems)
    }

    /// `POST /compatibility/subjects/{s}/versions/{v}`: what makes `s` incompatible with
    /// version `version` (or `latest`; with no version given, by the subject's level).
    pub fn check(
        &self,
        subject: &str,
        version: Option<&str>,
        s: &NewSchema,
    ) -> Result<Vec<String>, RegistryError> {
        let against = match version {
            Some(v) => {
                let n = parse_version(v)?;
                self.version(subject, v, false)?;
                Some(n)
            }
            None => None,
        };
        let (identity, refs) = self.identity(s)?;
        self.incompatibilities(subject, s, &identity, &refs, against)
    }

    /// Deletes a version: soft (it stays, hidden) or, once soft-deleted, permanently.
    pub fn delete_version(
        &self,
        subject: &str,
        version: &str,
        permanent: bool,
    ) -> Result<(i32, Vec<Record>), RegistryError> {
        self.writable(Some(subject))?;
        let info = self.version(subject, version, permanent)?;
        if !self.referenced_by(subject, info.version).is_empty() {
            return Err(RegistryError::ReferenceExists {
                subject: subject.to_string(),
                version: info.version,
            });
        }
        let key = Key::schema(subject, info.version);
        if permanent {
            if !info.deleted {
                return Err(RegistryError::VersionNotSoftDeleted {
                    subject: subject.to_string(),
                    version: info.version,
                });
            }
            return Ok((info.version, vec![Record::new(key, None::<()>)]));
        }
        Ok((
            info.version,
            vec![Record::new(key, Some(self.value_of(&info, true)))],
        ))
    }

    /// Deletes a subject: soft (every version), or, once soft-deleted, permanently.
    pub fn delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<(Vec<i32>, Vec<Record>), RegistryError> {
        self.writable(Some(subject))?;
        let subj = self.subject(subject, true)?;
        if !permanent && subj.deleted() {
            return Err(RegistryError::SubjectSoftDeleted(subject.to_string()));
        }
        if permanent && !subj.deleted() {
            return Err(RegistryError::SubjectNotSoftDeleted(subject.to_string()));
        }
        let mut versions = Vec::new();
        let mut records = Vec::new();
        for (&n, v) in &subj.versions {
            if !permanent && v.deleted {
                continue;
            }
            if let Some(&id) = self.referenced_by(subject, n).first() {
                let _ = id;
                return Err(RegistryError::ReferenceExists {
                    subject: subject.to_string(),
                    version: n,
                });
            }
            versions.push(n);
            let key = Key::schema(subject, n);
            if permanent {
                records.push(Record::new(key, None::<()>));
            } else {
                let info = self.version(subject, &n.to_string(), true)?;
                records.push(Record::new(key, Some(self.value_of(&info, true))));
            }
        }
        Ok((versions, records))
    }

    fn value_of(&self, info: &crate::VersionInfo, deleted: bool) -> SchemaValue {
        SchemaValue {
            subject: info.subject.clone(),
            version: info.version,
            id: info.id,
            schema_type: (info.schema.schema_type != SchemaType::Avro)
                .then_some(info.schema.schema_type),
            references: info.schema.references.clone(),
            schema: info.schema.schema.clone(),
            deleted,
        }
    }

    /// Sets the compatibility level of `subject`, or the global one (`None`).
    pub fn set_compatibility(
        &self,
        subject: Option<&str>,
        level: Compatibility,
    ) -> Result<Vec<Record>, RegistryError> {
        if let Some(s) = subject {
            check_subject(s)?;
        }
        self.writable(subject)?;
        Ok(vec![Record::new(
            Key::config(subject),
            Some(ConfigValue {
                compatibility_level: level,
            }),
        )])
    }

    /// Removes a subject's own level (back to the global one), or the global one (back
    /// to BACKWARD).
    pub fn delete_compatibility(
        &self,
        subject: Option<&str>,
    ) -> Result<Vec<Record>, RegistryError> {
        self.writable(subject)?;
        if let Some(s) = subject {
            self.subject_compatibility(s)?;
        }
        Ok(vec![Record::new(Key::config(subject), None::<()>)])
    }

    /// Sets the mode of `subject`, or the global one. Setting it is allowed in any mode.
    pub fn set_mode(
        &self,
        subject: Option<&str>,
        mode: Mode,
    ) -> Result<Vec<Record>, RegistryError> {
        if let Some(s) = subject {
            check_subject(s)?;
        }
        Ok(vec![Record::new(
            Key::mode(subject),
            Some(ModeValue { mode }),
        )])
    }

    pub fn delete_mode(&self, subject: Option<&str>) -> Result<Vec<Record>, RegistryError> {
        if let Some(s) = subject {
            self.subject_mode(s)?;
        }
        Ok(vec![Record::new(Key::mode(subject), None::<()>)])
    }
}
