//! Strata's authorizer (strata-authz): Kafka's ACLs and their semantics, sans IO.
//!
//! The broker converts CreateAcls / DescribeAcls / DeleteAcls into [`AclBinding`]s and
//! [`AclBindingFilter`]s (the enums carry Kafka's wire codes), the controller replicates
//! the [`Acls`] set as JSON (serialized sorted, so every voter writes the same bytes),
//! and every request asks an [`Authorizer`] snapshot for a [`Decision`].
//!
//! Semantics are Kafka's `AclAuthorizer` (KIP-11) with prefixed patterns (KIP-290),
//! which KRaft's `StandardAuthorizer` keeps: super users bypass ACLs; the ACLs that
//! apply to a resource are its literal name, the literal `*` and every prefixed pattern
//! that prefixes its name, for the principal or `User:*`, from the client's address or
//! `*`; a matching Deny wins; an Allow of the operation, of All, or of an operation that
//! implies it (Read/Write/Delete/Alter ⇒ Describe, AlterConfigs ⇒ DescribeConfigs)
//! allows; with no ACL at all on the resource, `allow.everyone.if.no.acl.found` decides.
//! [`Authorizer::authorize_by_resource_type`] is KIP-679's check.
//!
//! An authorization is a hash lookup, one binary search over the prefixed patterns and
//! one per applicable pattern for the principal: O(log n), no allocation (~150-250 ns
//! with 10,000 ACLs; `benches/authorize.rs`). Nothing here does IO or reads a clock.
//!
//! Modules (private; their types are re-exported here):
//!
//! * `types.rs`: resource types, pattern types, operations, permissions, principals,
//!   with Kafka's wire codes.
//! * `binding.rs`: [`AclBinding`] and [`AclBindingFilter`], and CreateAcls' checks.
//! * `acls.rs`: [`Acls`], the set and the index that makes a check a few lookups.
//! * `authorizer.rs`: [`Authorizer`], the decision (super users, deny wins, implied
//!   operations, `allow.everyone.if.no.acl.found`).

mod acls;
mod authorizer;
mod binding;
mod types;

pub use acls::Acls;
pub use authorizer::{Authorizer, AuthorizerConfig, Decision};
pub use binding::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, InvalidAcl,
    ResourcePattern, ResourcePatternFilter,
};
pub use types::{
    CLUSTER_NAME, InvalidPrincipal, Operation, PatternType, Permission, Principal, ResourceType,
    UnknownName, WILDCARD_HOST, WILDCARD_PRINCIPAL, WILDCARD_RESOURCE,
};
