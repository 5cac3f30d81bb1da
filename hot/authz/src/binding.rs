//! ACL bindings (a resource pattern plus an access control entry), the filters that
//! DescribeAcls and DeleteAcls carry, and the checks CreateAcls applies.
//!
//! Mirrors Kafka's `org.apache.kafka.common.acl.AclBinding` / `AclBindingFilter` and
//! `org.apache.kafka.common.resource.ResourcePattern` / `ResourcePatternFilter`.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::types::{
    CLUSTER_NAME, InvalidPrincipal, Operation, PatternType, Permission, Principal, ResourceType,
    WILDCARD_HOST, WILDCARD_RESOURCE,
};

/// Why an ACL binding or filter was refused. The `Display` text is meant to be sent back
/// as the error message of an INVALID_REQUEST; where Kafka has a message for the same
/// case (`AclControlManager.validateNewAcl`, `AclApis`), it is Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAcl {
    /// Unknown or Any as the resource type of a binding.
    #[error("Invalid resourceType {0}")]
    ResourceType(ResourceType),
    /// A resource type Strata recognises but does not support (DelegationToken).
    #[error("ACLs on resource type {0} are not supported")]
    UnsupportedResourceType(ResourceType),
    /// Unknown, Any or Match as the pattern type of a binding.
    #[error("Invalid patternType {0}")]
    PatternType(PatternType),
    /// Unknown or Any as the operation of a binding.
    #[error("Invalid operation {0}")]
    Operation(Operation),
    /// Unknown or Any as the permission of a binding.
    #[error("Invalid permissionType {0}")]
    Permission(Permission),
    /// An empty resource name.
    #[error("Invalid empty resource name")]
    EmptyResourceName,
    /// A CLUSTER resource named anything but `kafka-cluster`.
    #[error("The only valid name for the CLUSTER resource is {CLUSTER_NAME}")]
    ClusterName,
    /// A PREFIXED pattern named `*`.
    #[error(
        "A PREFIXED pattern named '*' matches only names that begin with '*', not every name; use a LITERAL '*' for every resource"
    )]
    PrefixedWildcard,
    /// A host that is neither `*` nor an IP address.
    #[error(
        "Invalid host '{0}': an ACL host must be '*' or an IP address (it is compared with the client's address, never a hostname)"
    )]
    Host(String),
    /// The principal is not `Type:name`.
    #[error(transparent)]
    Principal(#[from] InvalidPrincipal),
    /// A filter with an Unknown element (Kafka refuses those in DescribeAcls and
    /// DeleteAcls: they match nothing and signal a client newer than the broker).
    #[error("The filter contains an Unknown {0}")]
    UnknownInFilter(&'static str),
}

/// Parses an ACL host as the address it names: `*` is `None` (any), an IPv4 or IPv6
/// address (an IPv6 zone suffix `%eth0` ignored) is `Some`. IPv4-mapped IPv6 addresses
/// are canonicalised to IPv4, so `::ffff:10.0.0.1` and `10.0.0.1` are the same host, as
/// they are for a Java broker (whose `InetAddress` already unmaps them).
pub(crate) fn parse_host(host: &str) -> Result<Option<IpAddr>, ()> {
    if host == WILDCARD_HOST {
        return Ok(None);
    }
    let addr = host.split_once('%').map_or(host, |(addr, _zone)| addr);
    addr.parse::<IpAddr>()
        .map(|ip| Some(ip.to_canonical()))
        .map_err(|_| ())
}

/// A resource pattern: which resources an ACL applies to (Kafka's `ResourcePattern`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourcePattern {
    /// The type of the resources.
    pub resource_type: ResourceType,
    /// The name, the prefix, or `*` (LITERAL only) for every resource of the type.
    pub name: String,
    /// LITERAL or PREFIXED in a binding.
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// A pattern with the given parts (not validated; see [`AclBinding::validate`]).
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        Self {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }

    /// A LITERAL pattern.
    pub fn literal(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self::new(resource_type, name, PatternType::Literal)
    }

    /// A PREFIXED pattern.
    pub fn prefixed(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self::new(resource_type, name, PatternType::Prefixed)
    }

    /// The CLUSTER resource.
    pub fn cluster() -> Self {
        Self::literal(ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether this is the LITERAL `*` pattern that applies to every resource of its type.
    pub fn is_wildcard(&self) -> bool {
        self.pattern_type == PatternType::Literal && self.name == WILDCARD_RESOURCE
    }

    /// Whether this pattern applies to the resource `resource_type`/`name` (exact type;
    /// literal equal, literal `*`, or a prefix of the name). This is the linear-scan
    /// definition that [`Acls`](crate::Acls) indexes.
    pub fn applies_to(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == name || self.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => name.starts_with(self.name.as_str()),
                _ => false,
            }
    }
}

impl fmt::Display for ResourcePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ResourcePattern(resourceType={}, name={}, patternType={})",
            self.resource_type, self.name, self.pattern_type
        )
    }
}

/// Who may (or may not) do what from where (Kafka's `AccessControlEntry`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AccessControlEntry {
    /// `Type:name`, `User:*` for everyone.
    pub principal: Principal,
    /// The client's IP address, `*` for any.
    pub host: String,
    /// The operation, or All.
    pub operation: Operation,
    /// Allow or Deny.
    pub permission: Permission,
}

impl AccessControlEntry {
    /// An entry with the given parts (not validated; see [`AclBinding::validate`]).
    pub fn new(
        principal: Principal,
        host: impl Into<String>,
        operation: Operation,
        permission: Permission,
    ) -> Self {
        Self {
            principal,
            host: host.into(),
            operation,
            permission,
        }
    }

    /// Allow `operation` for `principal` from any host.
    pub fn allow(principal: Principal, operation: Operation) -> Self {
        Self::new(principal, WILDCARD_HOST, operation, Permission::Allow)
    }

    /// Deny `operation` for `principal` from any host.
    pub fn deny(principal: Principal, operation: Operation) -> Self {
        Self::new(principal, WILDCARD_HOST, operation, Permission::Deny)
    }
}

impl fmt::Display for AccessControlEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(principal={}, host={}, operation={}, permissionType={})",
            self.principal, self.host, self.operation, self.permission
        )
    }
}

/// One ACL: an entry bound to a resource pattern (Kafka's `AclBinding`). Ordered by
/// resource type, name, pattern type, then principal, host, operation and permission,
/// which is the order [`Acls`](crate::Acls) lists and serializes them in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    /// Which resources.
    pub pattern: ResourcePattern,
    /// Who, from where, what, allow or deny.
    pub entry: AccessControlEntry,
}

impl AclBinding {
    /// A binding of `entry` to `pattern` (not validated; see [`AclBinding::validate`]).
    pub fn new(pattern: ResourcePattern, entry: AccessControlEntry) -> Self {
        Self { pattern, entry }
    }

    /// Checks that this binding may be created, in Kafka's order
    /// (`AclControlManager.validateNewAcl`, then `AclApis`' name checks):
    /// a concrete resource type (not Unknown/Any; DelegationToken refused because Strata
    /// has no delegation tokens), pattern type LITERAL or PREFIXED, a concrete operation
    /// (All allowed), permission Allow or Deny, a non-empty name, `kafka-cluster` as the
    /// only CLUSTER name.
    ///
    /// Two checks go beyond Kafka, which accepts and then silently never matches:
    /// a PREFIXED `*` (it would match only names starting with `*`, never "everything",
    /// which is what an operator writing it means), and a host that is neither `*` nor
    /// an IP address (Kafka compares hosts with the client's IP address, so a hostname
    /// never matches: a Deny for one would protect nothing).
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        let p = &self.pattern;
        let e = &self.entry;
        match p.resource_type {
            ResourceType::Unknown | ResourceType::Any => {
                return Err(InvalidAcl::ResourceType(p.resource_type));
            }
            ResourceType::DelegationToken => {
                return Err(InvalidAcl::UnsupportedResourceType(p.resource_type));
            }
            _ => {}
        }
        if !p.pattern_type.is_concrete() {
            return Err(InvalidAcl::PatternType(p.pattern_type));
        }
        if !e.operation.is_concrete() {
            return Err(InvalidAcl::Operation(e.operation));
        }
        if !e.permission.is_concrete() {
            return Err(InvalidAcl::Permission(e.permission));
        }
        if p.name.is_empty() {
            return Err(InvalidAcl::EmptyResourceName);
        }
        if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
            return Err(InvalidAcl::ClusterName);
        }
        if p.pattern_type == PatternType::Prefixed && p.name == WILDCARD_RESOURCE {
            return Err(InvalidAcl::PrefixedWildcard);
        }
        if parse_host(&e.host).is_err() {
            return Err(InvalidAcl::Host(e.host.clone()));
        }
        Ok(())
    }

    /// The filter that matches exactly this binding (Kafka's `AclBinding.toFilter`).
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            pattern: ResourcePatternFilter {
                resource_type: self.pattern.resource_type,
                name: Some(self.pattern.name.clone()),
                pattern_type: self.pattern.pattern_type,
            },
            entry: AccessControlEntryFilter {
                principal: Some(self.entry.principal.as_str().to_owned()),
                host: Some(self.entry.host.clone()),
                operation: self.entry.operation,
                permission: self.entry.permission,
            },
        }
    }
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(pattern={}, entry={})", self.pattern, self.entry)
    }
}

/// Which resource patterns a DescribeAcls/DeleteAcls filter selects (Kafka's
/// `ResourcePatternFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResourcePatternFilter {
    /// A type, or Any for every type.
    pub resource_type: ResourceType,
    /// A name, or `None` for every name.
    pub name: Option<String>,
    /// Literal or Prefixed: that pattern type with exactly `name`. Any: both pattern
    /// types, still with exactly `name`. Match: every pattern that applies to a resource
    /// called `name` (literal `name`, literal `*`, prefixes of `name`).
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    /// Every pattern.
    pub const ANY: ResourcePatternFilter = ResourcePatternFilter {
        resource_type: ResourceType::Any,
        name: None,
        pattern_type: PatternType::Any,
    };

    /// A filter with the given parts.
    pub fn new(
        resource_type: ResourceType,
        name: Option<String>,
        pattern_type: PatternType,
    ) -> Self {
        Self {
            resource_type,
            name,
            pattern_type,
        }
    }

    /// Kafka's `ResourcePatternFilter.matches`.
    pub fn matches(&self, pattern: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != pattern.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != pattern.pattern_type
        {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == pattern.pattern_type {
            return *name == pattern.name;
        }
        // Match: the patterns that would apply to a resource with this name.
        match pattern.pattern_type {
            PatternType::Literal => *name == pattern.name || pattern.name == WILDCARD_RESOURCE,
            PatternType::Prefixed => name.starts_with(pattern.name.as_str()),
            _ => false,
        }
    }
}

/// Which entries a filter selects (Kafka's `AccessControlEntryFilter`). Strings are
/// compared exactly, as Kafka does: a `User:*` filter selects the ACLs *for* the
/// wildcard principal, not every principal; `None` selects every principal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AccessControlEntryFilter {
    /// A principal, or `None` for all.
    pub principal: Option<String>,
    /// A host, or `None` for all.
    pub host: Option<String>,
    /// An operation, or Any.
    pub operation: Operation,
    /// Allow, Deny, or Any.
    pub permission: Permission,
}

impl AccessControlEntryFilter {
    /// Every entry.
    pub const ANY: AccessControlEntryFilter = AccessControlEntryFilter {
        principal: None,
        host: None,
        operation: Operation::Any,
        permission: Permission::Any,
    };

    /// Kafka's `AccessControlEntryFilter.matches`.
    pub fn matches(&self, entry: &AccessControlEntry) -> bool {
        if self
            .principal
            .as_deref()
            .is_some_and(|p| p != entry.principal.as_str())
        {
            return false;
        }
        if self.host.as_deref().is_some_and(|h| h != entry.host) {
            return false;
        }
        if self.operation != Operation::Any && self.operation != entry.operation {
            return false;
        }
        self.permission == Permission::Any || self.permission == entry.permission
    }
}

/// A DescribeAcls / DeleteAcls filter (Kafka's `AclBindingFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclBindingFilter {
    /// Which patterns.
    pub pattern: ResourcePatternFilter,
    /// Which entries.
    pub entry: AccessControlEntryFilter,
}

impl AclBindingFilter {
    /// The filter that matches every binding.
    pub const ANY: AclBindingFilter = AclBindingFilter {
        pattern: ResourcePatternFilter::ANY,
        entry: AccessControlEntryFilter::ANY,
    };

    /// A filter with the given parts.
    pub fn new(pattern: ResourcePatternFilter, entry: AccessControlEntryFilter) -> Self {
        Self { pattern, entry }
    }

    /// Whether `binding` is selected.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.pattern.matches(&binding.pattern) && self.entry.matches(&binding.entry)
    }

    /// Refuses a filter with an Unknown element (`AclBindingFilter.isUnknown` in Kafka,
    /// which DescribeAcls and DeleteAcls reject). Every other combination is a valid
    /// filter, even one that can match nothing.
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        if self.pattern.resource_type == ResourceType::Unknown {
            return Err(InvalidAcl::UnknownInFilter("resource type"));
        }
        if self.pattern.pattern_type == PatternType::Unknown {
            return Err(InvalidAcl::UnknownInFilter("pattern type"));
        }
        if self.entry.operation == Operation::Unknown {
            return Err(InvalidAcl::UnknownInFilter("operation"));
        }
        if self.entry.permission == Permission::Unknown {
            return Err(InvalidAcl::UnknownInFilter("permission type"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(s: &str) -> Principal {
        Principal::new(s).unwrap()
    }

    fn binding(rt: ResourceType, name: &str, pt: PatternType) -> AclBinding {
        AclBinding::new(
            ResourcePattern::new(rt, name, pt),
            AccessControlEntry::allow(principal("User:alice"), Operation::Read),
        )
    }

    #[test]
    fn validate_accepts_ordinary_bindings() {
        let ok = [
            binding(ResourceType::Topic, "orders", PatternType::Literal),
            binding(ResourceType::Topic, "*", PatternType::Literal),
            binding(ResourceType::Group, "*", PatternType::Literal),
            binding(ResourceType::TransactionalId, "*", PatternType::Literal),
            binding(ResourceType::Topic, "orders-", PatternType::Prefixed),
            binding(ResourceType::Cluster, "kafka-cluster", PatternType::Literal),
        ];
        for b in ok {
            assert_eq!(b.validate(), Ok(()), "{b}");
        }
        let mut b = binding(ResourceType::Topic, "t", PatternType::Literal);
        for host in ["*", "10.0.0.1", "::1", "0:0:0:0:0:0:0:1", "fe80::1%eth0"] {
            b.entry.host = host.into();
            assert_eq!(b.validate(), Ok(()), "{host}");
        }
        b.entry.operation = Operation::All;
        b.entry.permission = Permission::Deny;
        assert_eq!(b.validate(), Ok(()));
    }

    #[test]
    fn validate_refuses_filter_values_and_bad_names() {
        let cases = [
            (
                binding(ResourceType::Any, "t", PatternType::Literal),
                "Invalid resourceType Any",
            ),
            (
                binding(ResourceType::Unknown, "t", PatternType::Literal),
                "Invalid resourceType Unknown",
            ),
            (
                binding(ResourceType::DelegationToken, "t", PatternType::Literal),
                "ACLs on resource type DelegationToken are not supported",
            ),
            (
                binding(ResourceType::Topic, "t", PatternType::Any),
                "Invalid patternType Any",
            ),
            (
                binding(ResourceType::Topic, "t", PatternType::Match),
                "Invalid patternType Match",
            ),
            (
                binding(ResourceType::Topic, "t", PatternType::Unknown),
                "Invalid patternType Unknown",
            ),
            (
                binding(ResourceType::Topic, "", PatternType::Literal),
                "Invalid empty resource name",
            ),
            (
                binding(ResourceType::Cluster, "other", PatternType::Literal),
                "The only valid name for the CLUSTER resource is kafka-cluster",
            ),
            (
                binding(ResourceType::Cluster, "*", PatternType::Literal),
                "The only valid name for the CLUSTER resource is kafka-cluster",
            ),
        ];
        for (b, message) in cases {
            assert_eq!(b.validate().unwrap_err().to_string(), message, "{b}");
        }
        let prefixed_star = binding(ResourceType::Topic, "*", PatternType::Prefixed);
        assert_eq!(prefixed_star.validate(), Err(InvalidAcl::PrefixedWildcard));

        let mut b = binding(ResourceType::Topic, "t", PatternType::Literal);
        b.entry.operation = Operation::Any;
        assert_eq!(
            b.validate().unwrap_err().to_string(),
            "Invalid operation Any"
        );
        b.entry.operation = Operation::Unknown;
        assert_eq!(b.validate(), Err(InvalidAcl::Operation(Operation::Unknown)));
        b.entry.operation = Operation::Read;
        b.entry.permission = Permission::Any;
        assert_eq!(
            b.validate().unwrap_err().to_string(),
            "Invalid permissionType Any"
        );
        b.entry.permission = Permission::Unknown;
        assert_eq!(
            b.validate(),
            Err(InvalidAcl::Permission(Permission::Unknown))
        );
        b.entry.permission = Permission::Allow;
        for host in ["", "broker.example.com", "10.0.0.0/8", "10.0.0.*"] {
            b.entry.host = host.into();
            assert_eq!(b.validate(), Err(InvalidAcl::Host(host.into())), "{host}");
        }
    }

    #[test]
    fn principal_errors_convert() {
        let err: InvalidAcl = Principal::new("alice").unwrap_err().into();
        assert!(
            err.to_string()
                .starts_with("Could not parse principal from `alice`")
        );
    }

    #[test]
    fn hosts_parse_canonically() {
        assert_eq!(parse_host("*"), Ok(None));
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(parse_host("10.0.0.1"), Ok(Some(v4)));
        assert_eq!(parse_host("::ffff:10.0.0.1"), Ok(Some(v4)));
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(parse_host("0:0:0:0:0:0:0:1"), Ok(Some(v6)));
        assert!(parse_host("localhost").is_err());
    }

    fn filter(rt: ResourceType, name: Option<&str>, pt: PatternType) -> AclBindingFilter {
        AclBindingFilter::new(
            ResourcePatternFilter::new(rt, name.map(str::to_owned), pt),
            AccessControlEntryFilter::ANY,
        )
    }

    #[test]
    fn pattern_filters_follow_kafka() {
        use PatternType::{Literal, Match, Prefixed};
        use ResourceType::{Group, Topic};
        let lit = binding(Topic, "orders-eu", Literal);
        let star = binding(Topic, "*", Literal);
        let pre = binding(Topic, "orders-", Prefixed);
        let pre_full = binding(Topic, "orders-eu", Prefixed);
        let other = binding(Topic, "payments", Literal);
        let group = binding(Group, "orders-eu", Literal);
        let all = [&lit, &star, &pre, &pre_full, &other, &group];
        let selected = |f: &AclBindingFilter| -> Vec<&AclBinding> {
            all.iter().copied().filter(|b| f.matches(b)).collect()
        };

        assert_eq!(selected(&AclBindingFilter::ANY).len(), all.len());
        assert_eq!(
            selected(&filter(ResourceType::Any, None, PatternType::Any)).len(),
            all.len()
        );
        assert_eq!(selected(&filter(Group, None, PatternType::Any)), [&group]);
        assert_eq!(
            selected(&filter(Topic, None, Literal)),
            [&lit, &star, &other]
        );
        assert_eq!(selected(&filter(Topic, None, Prefixed)), [&pre, &pre_full]);
        assert_eq!(
            selected(&filter(Topic, None, Match)),
            [&lit, &star, &pre, &pre_full, &other]
        );
        // Literal/Prefixed/Any: exact names only.
        assert_eq!(selected(&filter(Topic, Some("orders-eu"), Literal)), [&lit]);
        assert_eq!(
            selected(&filter(Topic, Some("orders-eu"), Prefixed)),
            [&pre_full]
        );
        assert_eq!(
            selected(&filter(Topic, Some("orders-eu"), PatternType::Any)),
            [&lit, &pre_full]
        );
        assert_eq!(
            selected(&filter(
                ResourceType::Any,
                Some("orders-eu"),
                PatternType::Any
            )),
            [&lit, &pre_full, &group]
        );
        assert_eq!(selected(&filter(Topic, Some("*"), Literal)), [&star]);
        // Match: everything that applies to a topic called orders-eu.
        assert_eq!(
            selected(&filter(Topic, Some("orders-eu"), Match)),
            [&lit, &star, &pre, &pre_full]
        );
        assert_eq!(
            selected(&filter(Topic, Some("orders-us"), Match)),
            [&star, &pre]
        );
        assert_eq!(
            selected(&filter(Topic, Some("payments"), Match)),
            [&star, &other]
        );
        assert!(selected(&filter(ResourceType::Unknown, None, PatternType::Any)).is_empty());
    }

    #[test]
    fn entry_filters_compare_exactly() {
        let b = AclBinding::new(
            ResourcePattern::literal(ResourceType::Topic, "t"),
            AccessControlEntry::new(
                principal("User:alice"),
                "10.0.0.1",
                Operation::Write,
                Permission::Deny,
            ),
        );
        let mut f = AclBindingFilter::ANY;
        assert!(f.matches(&b));
        f.entry.principal = Some("User:*".into());
        assert!(
            !f.matches(&b),
            "a wildcard principal filter selects only User:* ACLs"
        );
        f.entry.principal = Some("User:alice".into());
        assert!(f.matches(&b));
        f.entry.host = Some("*".into());
        assert!(!f.matches(&b));
        f.entry.host = Some("10.0.0.1".into());
        assert!(f.matches(&b));
        f.entry.operation = Operation::Read;
        assert!(!f.matches(&b));
        f.entry.operation = Operation::Write;
        f.entry.permission = Permission::Allow;
        assert!(!f.matches(&b));
        f.entry.permission = Permission::Deny;
        assert!(f.matches(&b));
        f.pattern =
            ResourcePatternFilter::new(ResourceType::Topic, Some("t".into()), PatternType::Literal);
        assert_eq!(b.to_filter(), f);
        assert!(b.to_filter().matches(&b));
    }

    #[test]
    fn filter_validation_refuses_unknowns() {
        assert_eq!(AclBindingFilter::ANY.validate(), Ok(()));
        assert_eq!(
            filter(ResourceType::Topic, Some("t"), PatternType::Match).validate(),
            Ok(())
        );
        assert_eq!(
            filter(ResourceType::Unknown, None, PatternType::Any).validate(),
            Err(InvalidAcl::UnknownInFilter("resource type"))
        );
        assert!(
            filter(ResourceType::Topic, None, PatternType::Unknown)
                .validate()
                .is_err()
        );
        let mut f = AclBindingFilter::ANY;
        f.entry.operation = Operation::Unknown;
        assert_eq!(
            f.validate().unwrap_err().to_string(),
            "The filter contains an Unknown operation"
        );
        f.entry.operation = Operation::Any;
        f.entry.permission = Permission::Unknown;
        assert!(f.validate().is_err());
    }

    #[test]
    fn display_reads_like_kafka() {
        let b = binding(ResourceType::Topic, "orders", PatternType::Prefixed);
        assert_eq!(
            b.to_string(),
            "(pattern=ResourcePattern(resourceType=Topic, name=orders, patternType=Prefixed), \
             entry=(principal=User:alice, host=*, operation=Read, permissionType=Allow))"
        );
    }

    #[test]
    fn applies_to_is_the_linear_definition() {
        let star = ResourcePattern::literal(ResourceType::Topic, "*");
        assert!(star.applies_to(ResourceType::Topic, "anything"));
        assert!(!star.applies_to(ResourceType::Group, "anything"));
        let pre = ResourcePattern::prefixed(ResourceType::Topic, "ab");
        assert!(pre.applies_to(ResourceType::Topic, "ab"));
        assert!(pre.applies_to(ResourceType::Topic, "abc"));
        assert!(!pre.applies_to(ResourceType::Topic, "a"));
        assert!(ResourcePattern::cluster().applies_to(ResourceType::Cluster, CLUSTER_NAME));
    }
}
