//! Security metadata the controller replicates: SCRAM credentials (KIP-554) and ACLs
//! (KIP-11, KIP-290).
//!
//! A credential is what RFC 5802 has the server keep: salt, iteration count, StoredKey
//! and ServerKey, never the password. Brokers verify SCRAM exchanges (and PLAIN
//! passwords) against these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_authz::{AclBinding, AclBindingFilter, Acls};
use strata_quota::QuotaConfigs;

/// One user's credential for one SCRAM mechanism. Bytes are base64 (standard, padded).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialRecord {
    pub salt: String,
    pub iterations: u32,
    pub stored_key: String,
    pub server_key: String,
}

impl std::fmt::Debug for ScramCredentialRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not secrets in the password sense, but nothing a log needs.
        f.debug_struct("ScramCredentialRecord")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// The security state in the cluster metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityMetadata {
    /// SCRAM credentials by user name, then mechanism name (SCRAM-SHA-256, -512).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scram: BTreeMap<String, BTreeMap<String, ScramCredentialRecord>>,
    /// ACLs (serialized as a sorted list, so every voter writes the same bytes).
    #[serde(default, skip_serializing_if = "Acls::is_empty")]
    pub acls: Acls,
    /// Client quotas (KIP-546), by entity.
    #[serde(default, skip_serializing_if = "QuotaConfigs::is_empty")]
    pub quotas: QuotaConfigs,
}

impl SecurityMetadata {
    pub fn is_empty(&self) -> bool {
        self.scram.is_empty() && self.acls.is_empty() && self.quotas.is_empty()
    }

    pub fn scram_credential(&self, user: &str, mechanism: &str) -> Option<&ScramCredentialRecord> {
        self.scram.get(user)?.get(mechanism)
    }
}

/// A credential to set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramUpsertion {
    pub user: String,
    pub mechanism: String,
    pub credential: ScramCredentialRecord,
}

/// A credential to remove.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramDeletion {
    pub user: String,
    pub mechanism: String,
}

/// A change to the security metadata (one command).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecurityChange {
    /// AlterUserScramCredentials. With `only_if_absent`, an upsertion of a user who has
    /// any credential already is skipped (`--bootstrap-user` on a restart).
    AlterScram {
        upsertions: Vec<ScramUpsertion>,
        deletions: Vec<ScramDeletion>,
        #[serde(default)]
        only_if_absent: bool,
    },
    /// CreateAcls: each binding is added (an existing one is a no-op).
    CreateAcls(Vec<AclBinding>),
    /// DeleteAcls: each filter deletes what it matches.
    DeleteAcls(Vec<AclBindingFilter>),
    /// AlterClientQuotas: per entity, all its changes or none.
    AlterQuotas(Vec<QuotaAlteration>),
}

/// One entity's quota changes, as AlterClientQuotas carries them (entity components
/// `(type, name or None for <default>)`, keys by their Kafka names, `None` removes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaAlteration {
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, Option<f64>)>,
}

impl Eq for QuotaAlteration {}

/// What one user's part of an AlterScram came to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserOutcome {
    pub user: String,
    /// `None` when applied; else why not (the credential to delete did not exist).
    pub error: Option<String>,
}

/// The answer to a [`SecurityChange`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecurityOutcome {
    Scram(Vec<UserOutcome>),
    /// Per binding: `None` when added, else why not.
    CreatedAcls(Vec<Option<String>>),
    /// Per filter: the bindings it deleted.
    DeletedAcls(Vec<Vec<AclBinding>>),
    /// Per entity: `None` when applied, else why not.
    AlteredQuotas(Vec<Option<String>>),
}

impl SecurityMetadata {
    /// One entity's changes, validated whole before any is applied.
    fn alter_quotas(&mut self, c: &QuotaAlteration) -> Result<(), String> {
        let entity = strata_quota::ClientQuotaEntity::from_wire(
            c.entity.iter().map(|(t, n)| (t.as_str(), n.as_deref())),
        )
        .map_err(|e| e.to_string())?;
        let mut ops = Vec::new();
        for (key, value) in &c.ops {
            let key = strata_quota::QuotaKey::parse(key).map_err(|e| e.to_string())?;
            ops.push((key, *value));
        }
        self.quotas
            .alter_entity(&entity, &ops)
            .map_err(|e| e.to_string())
    }
}

const SCRAM_MECHANISMS: [&str; 2] = ["SCRAM-SHA-256", "SCRAM-SHA-512"];

impl SecurityMetadata {
    /// Applies a change. Deterministic: every voter gets the same state and answer.
    /// Deletions come first, then upsertions (as Kafka's ScramControlManager); a user
    /// named twice in one request is refused by the broker before it gets here.
    pub fn apply(&mut self, change: &SecurityChange) -> SecurityOutcome {
        match change {
            SecurityChange::AlterScram {
                upsertions,
                deletions,
                only_if_absent,
            } => {
                let mut out = Vec::new();
                for d in deletions {
                    let removed = self
                        .scram
                        .get_mut(&d.user)
                        .and_then(|m| m.remove(&d.mechanism))
                        .is_some();
                    if self.scram.get(&d.user).is_some_and(BTreeMap::is_empty) {
                        self.scram.remove(&d.user);
                    }
                    out.push(UserOutcome {
                        user: d.user.clone(),
                        error: (!removed)
                            .then(|| format!("user {} has no {} credential", d.user, d.mechanism)),
                    });
                }
                let existed: Vec<String> = if *only_if_absent {
                    upsertions
                        .iter()
                        .filter(|u| self.scram.contains_key(&u.user))
                        .map(|u| u.user.clone())
                        .collect()
                } else {
                    Vec::new()
                };
                for u in upsertions {
                    let error = if !SCRAM_MECHANISMS.contains(&u.mechanism.as_str()) {
                        Some(format!("unknown SCRAM mechanism {}", u.mechanism))
                    } else if u.user.is_empty() {
                        Some("the user name is empty".to_string())
                    } else {
                        None
                    };
                    if error.is_none() && !existed.contains(&u.user) {
                        self.scram
                            .entry(u.user.clone())
                            .or_default()
                            .insert(u.mechanism.clone(), u.credential.clone());
                    }
                    out.push(UserOutcome {
                        user: u.user.clone(),
                        error,
                    });
                }
                SecurityOutcome::Scram(out)
            }
            SecurityChange::CreateAcls(bindings) => SecurityOutcome::CreatedAcls(
                bindings
                    .iter()
                    .map(|b| self.acls.add(b.clone()).err().map(|e| e.to_string()))
                    .collect(),
            ),
            SecurityChange::AlterQuotas(changes) => SecurityOutcome::AlteredQuotas(
                changes.iter().map(|c| self.alter_quotas(c).err()).collect(),
            ),
            SecurityChange::DeleteAcls(filters) => SecurityOutcome::DeletedAcls(
                filters
                    .iter()
                    .map(|f| self.acls.remove_matching(f))
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(i: u32) -> ScramCredentialRecord {
        ScramCredentialRecord {
            salt: "c2FsdA==".into(),
            iterations: i,
            stored_key: "a2V5".into(),
            server_key: "a2V5".into(),
        }
    }

    fn upsert(user: &str, mech: &str, i: u32) -> ScramUpsertion {
        ScramUpsertion {
            user: user.into(),
            mechanism: mech.into(),
            credential: cred(i),
        }
    }

    #[test]
    fn credentials_are_set_replaced_and_deleted() {
        let mut s = SecurityMetadata::default();
        s.apply(&SecurityChange::AlterScram {
            upsertions: vec![
                upsert("alice", "SCRAM-SHA-512", 4096),
                upsert("alice", "SCRAM-SHA-256", 4096),
            ],
            deletions: vec![],
            only_if_absent: false,
        });
        assert_eq!(s.scram["alice"].len(), 2);
        s.apply(&SecurityChange::AlterScram {
            upsertions: vec![upsert("alice", "SCRAM-SHA-512", 8192)],
            deletions: vec![],
            only_if_absent: false,
        });
        assert_eq!(
            s.scram_credential("alice", "SCRAM-SHA-512")
                .unwrap()
                .iterations,
            8192
        );
        let SecurityOutcome::Scram(out) = s.apply(&SecurityChange::AlterScram {
            upsertions: vec![],
            deletions: vec![
                ScramDeletion {
                    user: "alice".into(),
                    mechanism: "SCRAM-SHA-512".into(),
                },
                ScramDeletion {
                    user: "alice".into(),
                    mechanism: "SCRAM-SHA-256".into(),
                },
                ScramDeletion {
                    user: "bob".into(),
                    mechanism: "SCRAM-SHA-256".into(),
                },
            ],
            only_if_absent: false,
        }) else {
            panic!("an AlterScram answers Scram")
        };
        assert!(out[0].error.is_none() && out[1].error.is_none());
        assert!(out[2].error.as_deref().unwrap().contains("bob"));
        assert!(s.is_empty(), "a user without credentials is gone");
    }

    #[test]
    fn bootstrap_users_do_not_replace_existing_ones() {
        let mut s = SecurityMetadata::default();
        let first = SecurityChange::AlterScram {
            upsertions: vec![upsert("admin", "SCRAM-SHA-512", 4096)],
            deletions: vec![],
            only_if_absent: true,
        };
        s.apply(&first);
        let again = SecurityChange::AlterScram {
            upsertions: vec![upsert("admin", "SCRAM-SHA-512", 9999)],
            deletions: vec![],
            only_if_absent: true,
        };
        s.apply(&again);
        assert_eq!(
            s.scram_credential("admin", "SCRAM-SHA-512")
                .unwrap()
                .iterations,
            4096,
            "a changed password survives a restart with --bootstrap-user"
        );
    }

    #[test]
    fn debug_leaves_keys_out() {
        let text = format!("{:?}", cred(4096));
        assert!(!text.contains("a2V5") && !text.contains("c2FsdA"), "{text}");
    }
}

#[cfg(test)]
mod acl_tests {
    use super::*;
    use strata_authz::{
        AccessControlEntry, Operation, Permission, Principal, ResourcePattern, ResourceType,
    };

    #[test]
    fn acls_are_added_deleted_and_survive_json() {
        let mut s = SecurityMetadata::default();
        let b = AclBinding::new(
            ResourcePattern::literal(ResourceType::Topic, "orders"),
            AccessControlEntry::new(
                Principal::new("User:alice").unwrap(),
                "*".to_string(),
                Operation::Write,
                Permission::Allow,
            ),
        );
        let out = s.apply(&SecurityChange::CreateAcls(vec![b.clone()]));
        assert_eq!(out, SecurityOutcome::CreatedAcls(vec![None]));
        let json = serde_json::to_string(&s).unwrap();
        let back: SecurityMetadata = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s, "{json}");
        assert_eq!(back.acls.len(), 1, "{json}");
        let out = s.apply(&SecurityChange::DeleteAcls(vec![b.to_filter()]));
        assert_eq!(out, SecurityOutcome::DeletedAcls(vec![vec![b]]));
        assert!(s.is_empty());
    }
}
