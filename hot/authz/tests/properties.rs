//! Property tests: the indexed authorizer against naive linear scans written from
//! Kafka's AclAuthorizer (`authorizeAction`, `authorizeByResourceType`), the set against
//! a plain `BTreeSet` model, and serialization round trips.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::net::IpAddr;

use proptest::prelude::*;
use proptest::sample::select;
use strata_authz::{
    AccessControlEntry, AclBinding, AclBindingFilter, Acls, Authorizer, AuthorizerConfig, Decision,
    Operation, PatternType, Permission, Principal, ResourcePattern, ResourcePatternFilter,
    ResourceType,
};

const TYPES: [ResourceType; 3] = [
    ResourceType::Topic,
    ResourceType::Group,
    ResourceType::Cluster,
];
/// Names for patterns: nested prefixes, siblings, the wildcard.
const PATTERN_NAMES: [&str; 7] = ["a", "ab", "abc", "b", "ba", "*", "kafka-cluster"];
/// Names for requests: every pattern name plus names only some prefixes cover.
const RESOURCE_NAMES: [&str; 10] = [
    "a",
    "ab",
    "abc",
    "abcd",
    "b",
    "ba",
    "bz",
    "c",
    "*",
    "kafka-cluster",
];
const ACL_PRINCIPALS: [&str; 3] = ["User:alice", "User:bob", "User:*"];
const REQUEST_PRINCIPALS: [&str; 4] = ["User:alice", "User:bob", "User:carol", "User:admin"];
const ACL_HOSTS: [&str; 4] = ["*", "10.0.0.1", "10.0.0.2", "::ffff:10.0.0.1"];
const REQUEST_HOSTS: [&str; 4] = ["10.0.0.1", "10.0.0.2", "::ffff:10.0.0.2", "10.0.0.3"];

fn concrete_ops() -> impl Strategy<Value = Operation> {
    select(
        Operation::VALUES
            .iter()
            .copied()
            .filter(|op| op.is_concrete())
            .collect::<Vec<_>>(),
    )
}

fn binding() -> impl Strategy<Value = AclBinding> {
    (
        select(&TYPES[..]),
        select(&PATTERN_NAMES[..]),
        prop_oneof![Just(PatternType::Literal), Just(PatternType::Prefixed)],
        select(&ACL_PRINCIPALS[..]),
        select(&ACL_HOSTS[..]),
        concrete_ops(),
        prop_oneof![Just(Permission::Allow), Just(Permission::Deny)],
    )
        .prop_map(|(rt, name, pt, who, host, op, perm)| {
            AclBinding::new(
                ResourcePattern::new(rt, name, pt),
                AccessControlEntry::new(Principal::new(who).unwrap(), host, op, perm),
            )
        })
}

/// A binding CreateAcls accepts: the cluster is `kafka-cluster`, `*` is literal.
fn valid_binding() -> impl Strategy<Value = AclBinding> {
    binding().prop_map(|mut b| {
        if b.pattern.resource_type == ResourceType::Cluster {
            b.pattern.name = "kafka-cluster".into();
        }
        if b.pattern.name == "*" {
            b.pattern.pattern_type = PatternType::Literal;
        }
        debug_assert!(b.validate().is_ok());
        b
    })
}

/// A random set's worth of valid bindings.
fn bindings() -> impl Strategy<Value = Vec<AclBinding>> {
    prop::collection::vec(valid_binding(), 0..24)
}

fn config() -> impl Strategy<Value = AuthorizerConfig> {
    (any::<bool>(), any::<bool>()).prop_map(|(admin, allow_everyone)| AuthorizerConfig {
        super_users: if admin {
            vec![Principal::new("User:admin").unwrap()]
        } else {
            vec![]
        },
        allow_everyone_if_no_acl_found: allow_everyone,
    })
}

#[derive(Debug, Clone)]
struct Request {
    principal: &'static str,
    host: IpAddr,
    op: Operation,
    rt: ResourceType,
    name: &'static str,
}

fn request() -> impl Strategy<Value = Request> {
    (
        select(&REQUEST_PRINCIPALS[..]),
        select(&REQUEST_HOSTS[..]),
        concrete_ops(),
        select(&TYPES[..]),
        select(&RESOURCE_NAMES[..]),
    )
        .prop_map(|(principal, host, op, rt, name)| Request {
            principal,
            host: host.parse().unwrap(),
            op,
            rt,
            name,
        })
}

// ---- the reference: Kafka's AclAuthorizer as a linear scan ----

fn ref_applies(b: &AclBinding, rt: ResourceType, name: &str) -> bool {
    b.pattern.resource_type == rt
        && match b.pattern.pattern_type {
            PatternType::Literal => b.pattern.name == name || b.pattern.name == "*",
            PatternType::Prefixed => name.starts_with(&b.pattern.name),
            _ => unreachable!(),
        }
}

fn ref_principal_and_host(b: &AclBinding, r: &Request) -> bool {
    let who = b.entry.principal.as_str();
    let host_ok = b.entry.host == "*"
        || b.entry.host.parse::<IpAddr>().unwrap().to_canonical() == r.host.to_canonical();
    (who == r.principal || who == "User:*") && host_ok
}

#[derive(Debug, PartialEq, Eq)]
enum Expected {
    SuperUser,
    Allowed,
    AllowEveryone,
    Denied,
    NoMatchingAllow,
    NoAcls,
}

fn reference_authorize(
    bindings: &[AclBinding],
    config: &AuthorizerConfig,
    r: &Request,
) -> Expected {
    if config.super_users.iter().any(|p| p.as_str() == r.principal) {
        return Expected::SuperUser;
    }
    let acls: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| ref_applies(b, r.rt, r.name))
        .collect();
    if acls.is_empty() {
        return if config.allow_everyone_if_no_acl_found {
            Expected::AllowEveryone
        } else {
            Expected::NoAcls
        };
    }
    let matching = || acls.iter().filter(|b| ref_principal_and_host(b, r));
    let denied = matching().any(|b| {
        b.entry.permission == Permission::Deny
            && (b.entry.operation == r.op || b.entry.operation == Operation::All)
    });
    if denied {
        return Expected::Denied;
    }
    let allow_ops: &[Operation] = match r.op {
        Operation::Describe => &[
            Operation::Describe,
            Operation::Read,
            Operation::Write,
            Operation::Delete,
            Operation::Alter,
        ],
        Operation::DescribeConfigs => &[Operation::DescribeConfigs, Operation::AlterConfigs],
        _ => std::slice::from_ref(&r.op),
    };
    let allowed = matching().any(|b| {
        b.entry.permission == Permission::Allow
            && (allow_ops.contains(&b.entry.operation) || b.entry.operation == Operation::All)
    });
    if allowed {
        Expected::Allowed
    } else {
        Expected::NoMatchingAllow
    }
}

fn reference_by_resource_type(
    bindings: &[AclBinding],
    config: &AuthorizerConfig,
    r: &Request,
) -> bool {
    if config.super_users.iter().any(|p| p.as_str() == r.principal) {
        return true;
    }
    let relevant: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| {
            b.pattern.resource_type == r.rt
                && ref_principal_and_host(b, r)
                && (b.entry.operation == r.op || b.entry.operation == Operation::All)
        })
        .collect();
    let names = |perm, pt| -> BTreeSet<&str> {
        relevant
            .iter()
            .filter(|b| b.entry.permission == perm && b.pattern.pattern_type == pt)
            .map(|b| b.pattern.name.as_str())
            .collect()
    };
    let deny_literals = names(Permission::Deny, PatternType::Literal);
    let deny_prefixes = names(Permission::Deny, PatternType::Prefixed);
    if deny_literals.contains("*") {
        return false;
    }
    if config.allow_everyone_if_no_acl_found {
        return true;
    }
    let dominated = |name: &str| {
        let mut prefix = String::new();
        name.chars().any(|c| {
            prefix.push(c);
            deny_prefixes.contains(prefix.as_str())
        })
    };
    names(Permission::Allow, PatternType::Prefixed)
        .iter()
        .any(|p| !dominated(p))
        || names(Permission::Allow, PatternType::Literal)
            .iter()
            .any(|l| *l == "*" || (!deny_literals.contains(l) && !dominated(l)))
}

fn check_decision(
    decision: Decision<'_>,
    expected: &Expected,
    r: &Request,
) -> Result<(), TestCaseError> {
    match (decision, expected) {
        (Decision::SuperUser, Expected::SuperUser)
        | (Decision::NoAclsAllowEveryone, Expected::AllowEveryone)
        | (Decision::NoMatchingAllow, Expected::NoMatchingAllow)
        | (Decision::NoAclsFound, Expected::NoAcls) => Ok(()),
        (Decision::AllowedBy(b), Expected::Allowed) => {
            prop_assert!(ref_applies(b, r.rt, r.name) && ref_principal_and_host(b, r));
            prop_assert_eq!(b.entry.permission, Permission::Allow);
            prop_assert!(b.entry.operation.allow_implies(r.op));
            Ok(())
        }
        (Decision::DeniedBy(b), Expected::Denied) => {
            prop_assert!(ref_applies(b, r.rt, r.name) && ref_principal_and_host(b, r));
            prop_assert_eq!(b.entry.permission, Permission::Deny);
            prop_assert!(b.entry.operation == r.op || b.entry.operation == Operation::All);
            Ok(())
        }
        (got, want) => Err(TestCaseError::fail(format!(
            "{r:?}: got {got:?}, want {want:?}"
        ))),
    }
}

/// A DescribeAcls/DeleteAcls filter over the same vocabulary.
fn filter() -> impl Strategy<Value = AclBindingFilter> {
    (
        prop_oneof![Just(ResourceType::Any), select(&TYPES[..])],
        prop::option::of(select(&RESOURCE_NAMES[..])),
        select(
            &[
                PatternType::Any,
                PatternType::Match,
                PatternType::Literal,
                PatternType::Prefixed,
            ][..],
        ),
        prop::option::of(select(&ACL_PRINCIPALS[..])),
        prop_oneof![Just(Operation::Any), concrete_ops()],
        select(&[Permission::Any, Permission::Allow, Permission::Deny][..]),
    )
        .prop_map(|(rt, name, pt, who, op, perm)| {
            let mut f = AclBindingFilter::ANY;
            f.pattern = ResourcePatternFilter::new(rt, name.map(str::to_owned), pt);
            f.entry.principal = who.map(str::to_owned);
            f.entry.operation = op;
            f.entry.permission = perm;
            f
        })
}

#[derive(Debug, Clone)]
enum Change {
    Add(AclBinding),
    RemoveMatching(AclBindingFilter),
    Remove(AclBinding),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => valid_binding().prop_map(Change::Add),
        1 => filter().prop_map(Change::RemoveMatching),
        1 => binding().prop_map(Change::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn authorize_matches_the_linear_reference(
        bindings in bindings(),
        config in config(),
        requests in prop::collection::vec(request(), 1..16),
    ) {
        let authz = Authorizer::new(config.clone(), Acls::from_bindings(bindings.clone()).unwrap());
        for r in &requests {
            let decision = authz.authorize(r.principal, r.host, r.op, r.rt, r.name);
            let expected = reference_authorize(&bindings, &config, r);
            check_decision(decision, &expected, r)?;
            prop_assert_eq!(
                authz.authorize_by_resource_type(r.principal, r.host, r.op, r.rt),
                reference_by_resource_type(&bindings, &config, r),
                "by resource type: {:?}", r
            );
        }
    }

    #[test]
    fn changes_keep_the_index_consistent(
        changes in prop::collection::vec(change(), 0..40),
        config in config(),
        requests in prop::collection::vec(request(), 1..16),
    ) {
        let mut acls = Acls::new();
        let mut model: BTreeSet<AclBinding> = BTreeSet::new();
        for change in changes {
            match change {
                Change::Add(b) => {
                    let added = acls.add(b.clone()).unwrap();
                    prop_assert_eq!(added, model.insert(b));
                }
                Change::Remove(b) => prop_assert_eq!(acls.remove(&b), model.remove(&b)),
                Change::RemoveMatching(f) => {
                    let expected: Vec<AclBinding> =
                        model.iter().filter(|b| f.matches(b)).cloned().collect();
                    model.retain(|b| !f.matches(b));
                    prop_assert_eq!(acls.remove_matching(&f), expected);
                }
            }
            prop_assert_eq!(acls.len(), model.len());
        }
        let listed = acls.list(&AclBindingFilter::ANY);
        prop_assert_eq!(&listed, &model.iter().cloned().collect::<Vec<_>>());

        // The index built by adds and removes answers like a linear scan of what is left.
        let authz = Authorizer::new(config.clone(), acls);
        for r in &requests {
            let expected = reference_authorize(&listed, &config, r);
            check_decision(authz.authorize(r.principal, r.host, r.op, r.rt, r.name), &expected, r)?;
            prop_assert_eq!(
                authz.authorize_by_resource_type(r.principal, r.host, r.op, r.rt),
                reference_by_resource_type(&listed, &config, r)
            );
        }
    }

    #[test]
    fn serde_round_trips_preserve_the_set(bindings in bindings(), filters in prop::collection::vec(filter(), 1..4)) {
        let acls = Acls::from_bindings(bindings.clone()).unwrap();
        let value = serde_json::to_value(&acls).unwrap();
        let back: Acls = serde_json::from_value(value.clone()).unwrap();
        prop_assert_eq!(&back, &acls);
        // Same set, any insertion order: same serialized form.
        let reversed = Acls::from_bindings(bindings.into_iter().rev()).unwrap();
        prop_assert_eq!(serde_json::to_value(&reversed).unwrap(), value);
        for f in &filters {
            prop_assert_eq!(back.list(f), acls.list(f));
        }
    }
}
