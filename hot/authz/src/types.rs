//! The vocabulary of Kafka's ACLs: resource types, pattern types, operations and
//! permissions with their wire codes (the `i8`s of CreateAcls / DescribeAcls / DeleteAcls,
//! `org.apache.kafka.common.resource.ResourceType`, `PatternType`,
//! `org.apache.kafka.common.acl.AclOperation` and `AclPermissionType`), and principals.
//!
//! Names follow Kafka's `SecurityUtils`: PascalCase (`TransactionalId`, `ClusterAction`)
//! for display, parsed case-insensitively. Parsing also ignores underscores, so the Java
//! enum names (`TRANSACTIONAL_ID`, `CLUSTER_ACTION`) that Kafka prints in
//! `ResourcePattern.toString()` read back too.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The resource name that, in a LITERAL pattern, matches every resource of its type
/// (Kafka's `ResourcePattern.WILDCARD_RESOURCE`).
pub const WILDCARD_RESOURCE: &str = "*";

/// The host that matches every client address (Kafka's `AclEntry.WildcardHost`).
pub const WILDCARD_HOST: &str = "*";

/// The principal that matches every principal (Kafka's `AclEntry.WildcardPrincipal`).
/// Only `User:*` is a wildcard, as in Kafka: `Group:*` is an ordinary principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// The only valid name of the CLUSTER resource (Kafka's `Resource.CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// A name that matched no variant of one of the enums here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{input}'")]
pub struct UnknownName {
    /// Which enum was being parsed ("resource type", "operation", ...).
    pub kind: &'static str,
    /// The text that did not parse.
    pub input: String,
}

/// Compares a user's spelling to a PascalCase name: ASCII case-insensitive, underscores
/// ignored, so "read", "READ", "TransactionalId" and "TRANSACTIONAL_ID" all work without
/// allocating.
fn name_matches(input: &str, name: &str) -> bool {
    let mut a = input.bytes().filter(|&b| b != b'_');
    let mut b = name.bytes();
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if x.eq_ignore_ascii_case(&y) => {}
            _ => return false,
        }
    }
}

/// Defines one of Kafka's code-carrying enums with `code`, `from_code`, `name`,
/// `Display`, `FromStr` and the list of all variants.
macro_rules! kafka_enum {
    (
        $(#[$meta:meta])*
        $ty:ident, $kind:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $name:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[repr(i8)]
        pub enum $ty {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        impl $ty {
            /// Every variant, in code order.
            pub const VALUES: &'static [$ty] = &[$($ty::$variant),+];

            /// The wire code.
            pub const fn code(self) -> i8 {
                self as i8
            }

            /// The variant with this wire code, or `None` for a code this version of
            /// Kafka's protocol does not define (the broker answers those as Unknown).
            pub const fn from_code(code: i8) -> Option<Self> {
                match code {
                    $( $code => Some($ty::$variant), )+
                    _ => None,
                }
            }

            /// Kafka's name (PascalCase, as `SecurityUtils` prints it).
            pub const fn name(self) -> &'static str {
                match self {
                    $( $ty::$variant => $name, )+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::VALUES
                    .iter()
                    .copied()
                    .find(|v| name_matches(s, v.name()))
                    .ok_or_else(|| UnknownName { kind: $kind, input: s.to_owned() })
            }
        }
    };
}

kafka_enum! {
    /// The kind of resource an ACL protects (Kafka's `ResourceType`).
    ResourceType, "resource type" {
        /// A code this broker does not understand; never valid in an ACL or filter.
        Unknown = 0 => "Unknown",
        /// Filter only: every resource type.
        Any = 1 => "Any",
        /// A topic.
        Topic = 2 => "Topic",
        /// A consumer group.
        Group = 3 => "Group",
        /// The cluster itself; its only name is [`CLUSTER_NAME`].
        Cluster = 4 => "Cluster",
        /// A transactional id.
        TransactionalId = 5 => "TransactionalId",
        /// A delegation token: recognised so its code decodes, refused in ACLs because
        /// Strata has no delegation tokens.
        DelegationToken = 6 => "DelegationToken",
    }
}

kafka_enum! {
    /// How an ACL's resource name is matched (Kafka's `PatternType`, KIP-290).
    PatternType, "pattern type" {
        /// A code this broker does not understand.
        Unknown = 0 => "Unknown",
        /// Filter only: LITERAL or PREFIXED patterns with exactly the filter's name.
        Any = 1 => "Any",
        /// Filter only: every pattern that would apply to a resource of the filter's name.
        Match = 2 => "Match",
        /// The name itself, or every resource when the name is `*`.
        Literal = 3 => "Literal",
        /// Every resource whose name starts with the pattern's name.
        Prefixed = 4 => "Prefixed",
    }
}

kafka_enum! {
    /// What a request wants to do to a resource (Kafka's `AclOperation`).
    Operation, "operation" {
        /// A code this broker does not understand.
        Unknown = 0 => "Unknown",
        /// Filter only: every operation.
        Any = 1 => "Any",
        /// In an ACL: every operation.
        All = 2 => "All",
        /// Read.
        Read = 3 => "Read",
        /// Write.
        Write = 4 => "Write",
        /// Create.
        Create = 5 => "Create",
        /// Delete.
        Delete = 6 => "Delete",
        /// Alter.
        Alter = 7 => "Alter",
        /// Describe (implied by Read, Write, Delete and Alter).
        Describe = 8 => "Describe",
        /// Inter-broker actions on the cluster.
        ClusterAction = 9 => "ClusterAction",
        /// DescribeConfigs (implied by AlterConfigs).
        DescribeConfigs = 10 => "DescribeConfigs",
        /// AlterConfigs.
        AlterConfigs = 11 => "AlterConfigs",
        /// Idempotent produce (InitProducerId without a transactional id).
        IdempotentWrite = 12 => "IdempotentWrite",
        /// CreateDelegationToken.
        CreateTokens = 13 => "CreateTokens",
        /// DescribeDelegationToken.
        DescribeTokens = 14 => "DescribeTokens",
    }
}

kafka_enum! {
    /// Whether a matching ACL grants or forbids (Kafka's `AclPermissionType`).
    Permission, "permission type" {
        /// A code this broker does not understand.
        Unknown = 0 => "Unknown",
        /// Filter only: both.
        Any = 1 => "Any",
        /// Forbids; a matching Deny wins over any Allow.
        Deny = 2 => "Deny",
        /// Grants.
        Allow = 3 => "Allow",
    }
}

impl ResourceType {
    /// Whether this names real resources (not a filter value or Unknown), i.e. may appear
    /// in an ACL binding or an authorization request.
    pub const fn is_concrete(self) -> bool {
        !matches!(self, ResourceType::Unknown | ResourceType::Any)
    }

    /// The operations that mean something on this resource type, as Kafka's
    /// `AclCommand` lists them (`AclEntry.supportedOperations`). Kafka's broker does not
    /// enforce this list (an ACL for Group/Write is stored and simply never consulted),
    /// and neither does [`AclBinding::validate`](crate::AclBinding::validate); it is here
    /// so the CLI can refuse such ACLs the way `kafka-acls` does.
    pub const fn supported_operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
                All,
            ],
            ResourceType::Group => &[Read, Describe, Delete, All],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
                All,
            ],
            ResourceType::TransactionalId => &[Describe, Write, All],
            ResourceType::DelegationToken => &[Describe, All],
            ResourceType::Unknown | ResourceType::Any => &[],
        }
    }
}

impl PatternType {
    /// Whether an ACL binding may carry this pattern type (LITERAL or PREFIXED).
    pub const fn is_concrete(self) -> bool {
        matches!(self, PatternType::Literal | PatternType::Prefixed)
    }
}

impl Operation {
    /// Whether this is a real operation (not Any or Unknown). `All` counts: it is valid
    /// in an ACL.
    pub const fn is_concrete(self) -> bool {
        !matches!(self, Operation::Unknown | Operation::Any)
    }

    /// Whether an ALLOW ACL for `self` grants `requested`. Kafka's AclAuthorizer
    /// (`allowOps`) and StandardAuthorizer (`IMPLIES_DESCRIBE`,
    /// `IMPLIES_DESCRIBE_CONFIGS`): All grants everything, Read/Write/Delete/Alter grant
    /// Describe, AlterConfigs grants DescribeConfigs.
    pub const fn allow_implies(self, requested: Operation) -> bool {
        if self as i8 == Operation::All as i8 || self as i8 == requested as i8 {
            return true;
        }
        match requested {
            Operation::Describe => matches!(
                self,
                Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
            ),
            Operation::DescribeConfigs => matches!(self, Operation::AlterConfigs),
            _ => false,
        }
    }

    /// Whether a DENY ACL for `self` forbids `requested`. There are no implications for
    /// denials in Kafka: a Deny of Read does not deny Describe; only a Deny of the
    /// operation itself or of All does.
    pub const fn deny_implies(self, requested: Operation) -> bool {
        self as i8 == Operation::All as i8 || self as i8 == requested as i8
    }
}

impl Permission {
    /// Whether this is Allow or Deny.
    pub const fn is_concrete(self) -> bool {
        matches!(self, Permission::Allow | Permission::Deny)
    }
}

/// Why a principal string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPrincipal {
    /// No `:` between type and name. Kafka's message (`AclControlManager.validateNewAcl`).
    #[error(
        "Could not parse principal from `{0}` (no colon is present separating the principal type from the principal name)"
    )]
    NoColon(String),
    /// Nothing before the `:`.
    #[error("Invalid principal `{0}`: the principal type is empty")]
    EmptyType(String),
    /// Nothing after the `:`.
    #[error("Invalid principal `{0}`: the principal name is empty")]
    EmptyName(String),
}

/// A principal as Kafka writes it in ACLs: `Type:name`, e.g. `User:alice`, `User:*`
/// (the wildcard) or `User:ANONYMOUS`. The type is what precedes the first `:`; the name
/// may itself contain colons (`User:CN=a,O=b:c`), as in Kafka's
/// `SecurityUtils.parseKafkaPrincipal`. Comparison is exact and case-sensitive, as
/// `KafkaPrincipal.equals` is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Principal(String);

impl Principal {
    /// Checks and wraps a `Type:name` string.
    pub fn new(principal: impl Into<String>) -> Result<Self, InvalidPrincipal> {
        let principal = principal.into();
        match principal.split_once(':') {
            None => Err(InvalidPrincipal::NoColon(principal)),
            Some(("", _)) => Err(InvalidPrincipal::EmptyType(principal)),
            Some((_, "")) => Err(InvalidPrincipal::EmptyName(principal)),
            Some(_) => Ok(Principal(principal)),
        }
    }

    /// `User:<name>`, the type every SASL mechanism and TLS mapping here produces.
    pub fn user(name: &str) -> Result<Self, InvalidPrincipal> {
        Self::new(format!("User:{name}"))
    }

    /// The wildcard principal `User:*`.
    pub fn wildcard() -> Self {
        Principal(WILDCARD_PRINCIPAL.to_owned())
    }

    /// The whole `Type:name` string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before the first `:`.
    pub fn principal_type(&self) -> &str {
        self.0.split_once(':').map_or("", |(t, _)| t)
    }

    /// The part after the first `:`.
    pub fn name(&self) -> &str {
        self.0.split_once(':').map_or("", |(_, n)| n)
    }

    /// Whether this is `User:*`, which matches every principal.
    pub fn is_wildcard(&self) -> bool {
        self.0 == WILDCARD_PRINCIPAL
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Principal {
    type Err = InvalidPrincipal;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for Principal {
    type Error = InvalidPrincipal;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<Principal> for String {
    fn from(p: Principal) -> String {
        p.0
    }
}

impl AsRef<str> for Principal {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for &rt in ResourceType::VALUES {
            assert_eq!(ResourceType::from_code(rt.code()), Some(rt));
        }
        for &p in PatternType::VALUES {
            assert_eq!(PatternType::from_code(p.code()), Some(p));
        }
        for &op in Operation::VALUES {
            assert_eq!(Operation::from_code(op.code()), Some(op));
        }
        for &p in Permission::VALUES {
            assert_eq!(Permission::from_code(p.code()), Some(p));
        }
        assert_eq!(ResourceType::from_code(7), None);
        assert_eq!(Operation::from_code(15), None);
        assert_eq!(Operation::from_code(-1), None);
        assert_eq!(PatternType::from_code(5), None);
        assert_eq!(Permission::from_code(4), None);
        assert_eq!(ResourceType::TransactionalId.code(), 5);
        assert_eq!(Operation::IdempotentWrite.code(), 12);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(Permission::Allow.code(), 3);
    }

    #[test]
    fn names_parse_case_insensitively() {
        for s in ["Read", "read", "READ", "rEaD"] {
            assert_eq!(s.parse::<Operation>(), Ok(Operation::Read));
        }
        assert_eq!("ClusterAction".parse(), Ok(Operation::ClusterAction));
        assert_eq!("CLUSTER_ACTION".parse(), Ok(Operation::ClusterAction));
        assert_eq!("describeconfigs".parse(), Ok(Operation::DescribeConfigs));
        assert_eq!("AlterConfigs".parse(), Ok(Operation::AlterConfigs));
        assert_eq!("IdempotentWrite".parse(), Ok(Operation::IdempotentWrite));
        assert_eq!("All".parse(), Ok(Operation::All));
        assert_eq!("TransactionalId".parse(), Ok(ResourceType::TransactionalId));
        assert_eq!(
            "TRANSACTIONAL_ID".parse(),
            Ok(ResourceType::TransactionalId)
        );
        assert_eq!("topic".parse(), Ok(ResourceType::Topic));
        assert_eq!("prefixed".parse(), Ok(PatternType::Prefixed));
        assert_eq!("LITERAL".parse(), Ok(PatternType::Literal));
        assert_eq!("allow".parse(), Ok(Permission::Allow));
        assert_eq!("Deny".parse(), Ok(Permission::Deny));
        let err = "Reed".parse::<Operation>().unwrap_err();
        assert_eq!(err.to_string(), "unknown operation 'Reed'");
        assert!("Rea".parse::<Operation>().is_err());
        assert!("Reads".parse::<Operation>().is_err());
        assert!("".parse::<Operation>().is_err());
    }

    #[test]
    fn display_uses_kafka_names() {
        for &op in Operation::VALUES {
            assert_eq!(op.to_string().parse::<Operation>(), Ok(op));
        }
        for &rt in ResourceType::VALUES {
            assert_eq!(rt.to_string().parse::<ResourceType>(), Ok(rt));
        }
        assert_eq!(Operation::ClusterAction.to_string(), "ClusterAction");
        assert_eq!(ResourceType::TransactionalId.to_string(), "TransactionalId");
        assert_eq!(PatternType::Prefixed.to_string(), "Prefixed");
        assert_eq!(Permission::Deny.to_string(), "Deny");
    }

    #[test]
    fn implications() {
        use Operation::*;
        for op in [Read, Write, Delete, Alter, Describe, All] {
            assert!(op.allow_implies(Describe), "{op}");
        }
        for op in [
            Create,
            ClusterAction,
            AlterConfigs,
            DescribeConfigs,
            IdempotentWrite,
        ] {
            assert!(!op.allow_implies(Describe), "{op}");
        }
        assert!(AlterConfigs.allow_implies(DescribeConfigs));
        assert!(!Alter.allow_implies(DescribeConfigs));
        assert!(!Describe.allow_implies(Read));
        assert!(!Read.allow_implies(Write));
        assert!(All.allow_implies(ClusterAction));
        assert!(!Read.deny_implies(Describe));
        assert!(Describe.deny_implies(Describe));
        assert!(All.deny_implies(Describe));
        assert!(!AlterConfigs.deny_implies(DescribeConfigs));
    }

    #[test]
    fn principals() {
        let p = Principal::new("User:alice").unwrap();
        assert_eq!(p.principal_type(), "User");
        assert_eq!(p.name(), "alice");
        assert!(!p.is_wildcard());
        assert!(Principal::new("User:*").unwrap().is_wildcard());
        assert!(!Principal::new("Group:*").unwrap().is_wildcard());
        let dn = Principal::new("User:CN=a:b").unwrap();
        assert_eq!(dn.name(), "CN=a:b");
        assert_eq!(
            Principal::new("alice"),
            Err(InvalidPrincipal::NoColon("alice".into()))
        );
        assert!(
            Principal::new("alice")
                .unwrap_err()
                .to_string()
                .contains("no colon")
        );
        assert_eq!(
            Principal::new(":alice"),
            Err(InvalidPrincipal::EmptyType(":alice".into()))
        );
        assert_eq!(
            Principal::new("User:"),
            Err(InvalidPrincipal::EmptyName("User:".into()))
        );
        assert_eq!(Principal::user("bob").unwrap().as_str(), "User:bob");
        assert_eq!(Principal::wildcard().as_str(), WILDCARD_PRINCIPAL);
    }

    #[test]
    fn supported_operations_follow_acl_command() {
        assert!(
            ResourceType::Cluster
                .supported_operations()
                .contains(&Operation::IdempotentWrite)
        );
        assert!(
            !ResourceType::Group
                .supported_operations()
                .contains(&Operation::Write)
        );
        assert!(ResourceType::Any.supported_operations().is_empty());
    }
}
