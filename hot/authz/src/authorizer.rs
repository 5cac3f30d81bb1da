//! Kafka's authorization decision over an [`Acls`] set: super users, deny-wins, implied
//! operations and `allow.everyone.if.no.acl.found`, as in `kafka.security.authorizer.
//! AclAuthorizer.authorizeAction` (KIP-11, KIP-290) and KRaft's `StandardAuthorizer`,
//! which agree on every rule here.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::acls::Acls;
use crate::binding::AclBinding;
use crate::types::{
    InvalidPrincipal, Operation, PatternType, Permission, Principal, ResourceType,
    WILDCARD_PRINCIPAL, WILDCARD_RESOURCE,
};

/// The authorizer's settings (Kafka's `super.users` and
/// `allow.everyone.if.no.acl.found`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthorizerConfig {
    /// Principals allowed everything, whatever the ACLs say (even a Deny).
    pub super_users: Vec<Principal>,
    /// Allow every request on a resource no ACL applies to. Off by default, as in Kafka.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Parses Kafka's `super.users` syntax: principals separated by `;`
    /// (`User:admin;User:broker`); blanks around them and empty items are ignored.
    pub fn parse_super_users(value: &str) -> Result<Vec<Principal>, InvalidPrincipal> {
        value
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Principal::new)
            .collect()
    }
}

/// The outcome of [`Authorizer::authorize`], with what decided it for the audit log.
/// Borrows the deciding binding from the authorizer, so deciding allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a> {
    /// Allowed: the principal is a super user.
    SuperUser,
    /// Allowed by this ACL, and no Deny applies.
    AllowedBy(&'a AclBinding),
    /// Allowed: no ACL applies to the resource and `allow_everyone_if_no_acl_found`.
    NoAclsAllowEveryone,
    /// Denied by this ACL (a Deny wins over every Allow).
    DeniedBy(&'a AclBinding),
    /// Denied: ACLs apply to the resource, but none allows this principal, host and
    /// operation.
    NoMatchingAllow,
    /// Denied: no ACL applies to the resource (and `allow_everyone_if_no_acl_found` is
    /// off).
    NoAclsFound,
    /// Denied: the operation or resource type was a filter value (Any) or Unknown,
    /// which no request can ask for; a bug in the caller, so fail closed.
    InvalidAction,
}

impl Decision<'_> {
    /// Whether the request may proceed.
    pub fn is_allowed(&self) -> bool {
        matches!(
            self,
            Decision::SuperUser | Decision::AllowedBy(_) | Decision::NoAclsAllowEveryone
        )
    }

    /// The binding that decided, if one did.
    pub fn binding(&self) -> Option<&AclBinding> {
        match self {
            Decision::AllowedBy(b) | Decision::DeniedBy(b) => Some(b),
            _ => None,
        }
    }
}

impl fmt::Display for Decision<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::SuperUser => f.write_str("Allowed (super user)"),
            Decision::AllowedBy(b) => write!(f, "Allowed by {b}"),
            Decision::NoAclsAllowEveryone => {
                f.write_str("Allowed (no ACLs, allow.everyone.if.no.acl.found)")
            }
            Decision::DeniedBy(b) => write!(f, "Denied by {b}"),
            Decision::NoMatchingAllow => f.write_str("Denied (no matching Allow ACL)"),
            Decision::NoAclsFound => f.write_str("Denied (no ACLs for the resource)"),
            Decision::InvalidAction => {
                f.write_str("Denied (not a concrete operation or resource type)")
            }
        }
    }
}

/// ACLs plus configuration: what the broker asks on every request.
///
/// The broker is expected to keep one behind an `ArcSwap` (or similar): clone, change
/// [`acls_mut`](Authorizer::acls_mut), swap; request threads read a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorizer {
    config: AuthorizerConfig,
    acls: Acls,
}

impl Authorizer {
    /// An authorizer over these ACLs.
    pub fn new(config: AuthorizerConfig, acls: Acls) -> Self {
        Self { config, acls }
    }

    /// The configuration.
    pub fn config(&self) -> &AuthorizerConfig {
        &self.config
    }

    /// Replaces the configuration (a dynamic `super.users` change).
    pub fn set_config(&mut self, config: AuthorizerConfig) {
        self.config = config;
    }

    /// The ACLs.
    pub fn acls(&self) -> &Acls {
        &self.acls
    }

    /// The ACLs, to change.
    pub fn acls_mut(&mut self) -> &mut Acls {
        &mut self.acls
    }

    /// Whether `principal` (`Type:name`) is a super user: exact match, as Kafka's
    /// `superUsers.contains(principal)`; `User:*` in `super.users` makes only a principal
    /// literally named `*` a super user, not everyone.
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.config
            .super_users
            .iter()
            .any(|p| p.as_str() == principal)
    }

    /// May `principal` (`Type:name`), connected from `host`, perform `operation` on the
    /// resource `resource_type`/`resource_name`? Kafka's AclAuthorizer, rule for rule:
    ///
    /// 1. a super user may do anything;
    /// 2. the ACLs that apply are those whose pattern is the literal name, the literal
    ///    `*`, or a prefix of the name (PREFIXED), for this principal or `User:*`, and
    ///    from this host or `*`;
    /// 3. a Deny among them for the operation or for All denies (even if an Allow
    ///    matches too). Denials imply nothing: a Deny of Read does not deny Describe;
    /// 4. if no ACL at all applies to the resource (any principal, host or operation),
    ///    `allow_everyone_if_no_acl_found` decides;
    /// 5. an Allow for the operation, for All, or for an operation that implies it
    ///    (Read/Write/Delete/Alter imply Describe; AlterConfigs implies
    ///    DescribeConfigs) allows;
    /// 6. anything else is denied.
    ///
    /// `host` is compared as an address, IPv4-mapped IPv6 addresses unmapped, so a
    /// dual-stack listener's `::ffff:10.0.0.1` matches an ACL for `10.0.0.1`.
    ///
    /// Cost: one hash lookup for the literal name, one binary search over the prefixed
    /// names, then, in each applicable pattern, a binary search for the principal's
    /// entries plus the `User:*` entries. O(log n); no allocation.
    pub fn authorize(
        &self,
        principal: &str,
        host: IpAddr,
        operation: Operation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> Decision<'_> {
        if !operation.is_concrete() || !resource_type.is_concrete() {
            return Decision::InvalidAction;
        }
        if self.is_super_user(principal) {
            return Decision::SuperUser;
        }
        let host = host.to_canonical();
        let mut any_acl = false;
        let mut allowed_by = None;
        for bucket in self.acls.applicable(resource_type, resource_name) {
            // Buckets are never empty: an empty one is dropped when its last ACL goes.
            any_acl = true;
            for entry in bucket.candidates(principal) {
                if !entry.matches_host(host) {
                    continue;
                }
                let binding = &*entry.binding;
                let acl_op = binding.entry.operation;
                match binding.entry.permission {
                    Permission::Deny if acl_op.deny_implies(operation) => {
                        return Decision::DeniedBy(binding);
                    }
                    Permission::Allow
                        if allowed_by.is_none() && acl_op.allow_implies(operation) =>
                    {
                        // Keep looking: a Deny elsewhere still wins.
                        allowed_by = Some(binding);
                    }
                    _ => {}
                }
            }
        }
        match allowed_by {
            Some(binding) => Decision::AllowedBy(binding),
            None if !any_acl && self.config.allow_everyone_if_no_acl_found => {
                Decision::NoAclsAllowEveryone
            }
            None if !any_acl => Decision::NoAclsFound,
            None => Decision::NoMatchingAllow,
        }
    }

    /// Could `principal` perform `operation` on *some* resource of `resource_type`?
    /// KIP-679's `authorizeByResourceType`, which the broker uses where Kafka does: an
    /// idempotent producer's InitProducerId is allowed with Write on any topic when
    /// IdempotentWrite on the cluster is not granted.
    ///
    /// Kafka's AclAuthorizer algorithm, which is deliberately approximate (it does not
    /// look for a concrete resource name that would pass [`authorize`](Self::authorize)).
    /// Considering only ACLs of this resource type, for this principal or `User:*`, from
    /// this host or `*`, for exactly this operation or All (no implied operations):
    ///
    /// 1. a super user: true;
    /// 2. a Deny on the literal `*`: false;
    /// 3. `allow_everyone_if_no_acl_found`: true (some resource may have no ACL);
    /// 4. true if an Allow on the literal `*` exists; or an Allow on a literal name that
    ///    is not denied by a literal Deny of the same name nor by a prefixed Deny that
    ///    is a prefix of it; or an Allow on a prefix that no prefixed Deny covers (a
    ///    prefixed Deny whose name is a prefix of, or equal to, the allowed prefix);
    /// 5. otherwise false.
    ///
    /// Operation or resource type Any/Unknown answer false (Kafka throws).
    ///
    /// Not on the per-request path: reads only the ACLs of this principal and `User:*`,
    /// and allocates two small sets.
    pub fn authorize_by_resource_type(
        &self,
        principal: &str,
        host: IpAddr,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if !operation.is_concrete() || !resource_type.is_concrete() {
            return false;
        }
        if self.is_super_user(principal) {
            return true;
        }
        let host = host.to_canonical();
        let wildcard: &[_] = if principal == WILDCARD_PRINCIPAL {
            &[]
        } else {
            self.acls.of_principal(WILDCARD_PRINCIPAL)
        };
        let relevant = || {
            self.acls
                .of_principal(principal)
                .iter()
                .chain(wildcard)
                .filter(move |e| e.matches_host(host))
                .map(|e| &*e.binding)
                .filter(move |b| {
                    b.pattern.resource_type == resource_type
                        && (b.entry.operation == operation || b.entry.operation == Operation::All)
                })
        };

        let mut deny_literals = BTreeSet::new();
        let mut deny_prefixes = BTreeSet::new();
        for b in relevant().filter(|b| b.entry.permission == Permission::Deny) {
            let name = b.pattern.name.as_str();
            match b.pattern.pattern_type {
                PatternType::Literal if name == WILDCARD_RESOURCE => return false,
                PatternType::Literal => {
                    deny_literals.insert(name);
                }
                PatternType::Prefixed => {
                    deny_prefixes.insert(name);
                }
                _ => {}
            }
        }
        if self.config.allow_everyone_if_no_acl_found {
            return true;
        }
        // Kafka's `hasDominantPrefixedDeny`: some prefix of `name` (itself included) is
        // a denied prefix.
        let dominated = |name: &str| {
            name.char_indices()
                .any(|(at, c)| deny_prefixes.contains(&name[..at + c.len_utf8()]))
        };
        relevant()
            .filter(|b| b.entry.permission == Permission::Allow)
            .any(|b| {
                let name = b.pattern.name.as_str();
                match b.pattern.pattern_type {
                    PatternType::Literal if name == WILDCARD_RESOURCE => true,
                    PatternType::Literal => !deny_literals.contains(name) && !dominated(name),
                    PatternType::Prefixed => !dominated(name),
                    _ => false,
                }
            })
    }
}
