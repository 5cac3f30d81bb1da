//! One test per authorization rule (Kafka's AclAuthorizer semantics), plus DescribeAcls /
//! DeleteAcls filters applied to a set.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::net::IpAddr;

use strata_authz::{
    AccessControlEntry, AclBinding, AclBindingFilter, Acls, Authorizer, AuthorizerConfig, Decision,
    Operation, PatternType, Permission, Principal, ResourcePattern, ResourcePatternFilter,
    ResourceType,
};

use Operation::{
    All, Alter, AlterConfigs, ClusterAction, Create, Delete, Describe, DescribeConfigs,
    IdempotentWrite, Read, Write,
};
use ResourceType::{Cluster, Group, Topic, TransactionalId};

fn principal(s: &str) -> Principal {
    Principal::new(s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn any_ip() -> IpAddr {
    ip("10.0.0.1")
}

fn binding(
    pattern: ResourcePattern,
    who: &str,
    host: &str,
    op: Operation,
    permission: Permission,
) -> AclBinding {
    AclBinding::new(
        pattern,
        AccessControlEntry::new(principal(who), host, op, permission),
    )
}

fn allow(pattern: ResourcePattern, who: &str, op: Operation) -> AclBinding {
    binding(pattern, who, "*", op, Permission::Allow)
}

fn deny(pattern: ResourcePattern, who: &str, op: Operation) -> AclBinding {
    binding(pattern, who, "*", op, Permission::Deny)
}

fn topic(name: &str) -> ResourcePattern {
    ResourcePattern::literal(Topic, name)
}

fn topic_prefix(name: &str) -> ResourcePattern {
    ResourcePattern::prefixed(Topic, name)
}

fn authorizer(bindings: &[AclBinding]) -> Authorizer {
    authorizer_with(bindings, AuthorizerConfig::default())
}

fn authorizer_with(bindings: &[AclBinding], config: AuthorizerConfig) -> Authorizer {
    Authorizer::new(config, Acls::from_bindings(bindings.to_vec()).unwrap())
}

/// `authorize` from any host.
fn check<'a>(
    authz: &'a Authorizer,
    who: &str,
    op: Operation,
    rt: ResourceType,
    name: &str,
) -> Decision<'a> {
    authz.authorize(who, any_ip(), op, rt, name)
}

#[test]
fn deny_wins_over_allow() {
    let allow_read = allow(topic("t"), "User:alice", Read);
    let deny_read = deny(topic("t"), "User:alice", Read);
    let authz = authorizer(&[allow_read.clone(), deny_read.clone()]);
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "t"),
        Decision::DeniedBy(&deny_read)
    );

    // A Deny through the wildcard principal, the wildcard resource or All wins too.
    for d in [
        deny(topic("t"), "User:*", Read),
        deny(topic("*"), "User:alice", Read),
        deny(topic_prefix("t"), "User:alice", All),
    ] {
        let authz = authorizer(&[allow_read.clone(), d.clone()]);
        let decision = check(&authz, "User:alice", Read, Topic, "t");
        assert_eq!(decision, Decision::DeniedBy(&d));
        assert!(!decision.is_allowed());
    }
    // A Deny of another operation does not.
    let authz = authorizer(&[allow_read.clone(), deny(topic("t"), "User:alice", Write)]);
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "t"),
        Decision::AllowedBy(&allow_read)
    );
}

#[test]
fn prefixed_allow_with_literal_deny() {
    let allow_prefix = allow(topic_prefix("orders-"), "User:alice", Write);
    let deny_secret = deny(topic("orders-secret"), "User:alice", Write);
    let authz = authorizer(&[allow_prefix.clone(), deny_secret.clone()]);
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "orders-eu"),
        Decision::AllowedBy(&allow_prefix)
    );
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "orders-"),
        Decision::AllowedBy(&allow_prefix),
        "a prefix matches the name equal to it"
    );
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "orders-secret"),
        Decision::DeniedBy(&deny_secret)
    );
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "orders-secret-2"),
        Decision::AllowedBy(&allow_prefix),
        "a literal Deny is for that name only"
    );
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "orders"),
        Decision::NoAclsFound
    );
    assert_eq!(
        check(&authz, "User:bob", Write, Topic, "orders-eu"),
        Decision::NoMatchingAllow
    );
    assert_eq!(
        check(&authz, "User:alice", Write, Group, "orders-eu"),
        Decision::NoAclsFound
    );
}

#[test]
fn prefixed_patterns_nest_and_handle_multibyte_names() {
    let broad = allow(topic_prefix("é"), "User:alice", Read);
    let narrow_deny = deny(topic_prefix("éa-"), "User:alice", Read);
    let authz = authorizer(&[broad.clone(), narrow_deny.clone()]);
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "éb"),
        Decision::AllowedBy(&broad)
    );
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "éa-1"),
        Decision::DeniedBy(&narrow_deny)
    );
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "e"),
        Decision::NoAclsFound
    );
}

#[test]
fn wildcard_principal_matches_everyone() {
    let everyone = allow(topic("t"), "User:*", Read);
    let authz = authorizer(std::slice::from_ref(&everyone));
    for who in ["User:alice", "User:bob", "User:ANONYMOUS", "Group:ops"] {
        assert_eq!(
            check(&authz, who, Read, Topic, "t"),
            Decision::AllowedBy(&everyone),
            "{who}"
        );
    }
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "t"),
        Decision::NoMatchingAllow
    );
    // `Group:*` is not a wildcard.
    let authz = authorizer(&[allow(topic("t"), "Group:*", Read)]);
    assert_eq!(
        check(&authz, "Group:ops", Read, Topic, "t"),
        Decision::NoMatchingAllow
    );
    assert!(check(&authz, "Group:*", Read, Topic, "t").is_allowed());
}

#[test]
fn wildcard_resource_matches_every_name_of_its_type() {
    let all_topics = allow(topic("*"), "User:alice", Read);
    let authz = authorizer(std::slice::from_ref(&all_topics));
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "anything"),
        Decision::AllowedBy(&all_topics)
    );
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "*"),
        Decision::AllowedBy(&all_topics)
    );
    assert_eq!(
        check(&authz, "User:alice", Read, Group, "anything"),
        Decision::NoAclsFound
    );
}

#[test]
fn hosts_match_exactly_or_by_wildcard() {
    let from_one = binding(
        topic("t"),
        "User:alice",
        "10.0.0.1",
        Read,
        Permission::Allow,
    );
    let authz = authorizer(std::slice::from_ref(&from_one));
    let at = |host: &str| authz.authorize("User:alice", ip(host), Read, Topic, "t");
    assert_eq!(at("10.0.0.1"), Decision::AllowedBy(&from_one));
    assert_eq!(at("::ffff:10.0.0.1"), Decision::AllowedBy(&from_one));
    assert_eq!(at("10.0.0.2"), Decision::NoMatchingAllow);
    assert_eq!(at("::1"), Decision::NoMatchingAllow);

    // A Deny from one host, an Allow from every host.
    let everywhere = allow(topic("t"), "User:alice", Read);
    let deny_one = binding(topic("t"), "User:alice", "10.0.0.9", Read, Permission::Deny);
    let authz = authorizer(&[everywhere.clone(), deny_one.clone()]);
    let at = |host: &str| authz.authorize("User:alice", ip(host), Read, Topic, "t");
    assert_eq!(at("10.0.0.1"), Decision::AllowedBy(&everywhere));
    assert_eq!(at("10.0.0.9"), Decision::DeniedBy(&deny_one));

    // IPv6 written the way a Java broker prints it matches too.
    let v6 = binding(
        topic("t"),
        "User:alice",
        "0:0:0:0:0:0:0:1",
        Read,
        Permission::Allow,
    );
    let authz = authorizer(std::slice::from_ref(&v6));
    assert_eq!(
        authz.authorize("User:alice", ip("::1"), Read, Topic, "t"),
        Decision::AllowedBy(&v6)
    );
}

#[test]
fn describe_is_implied_by_read_write_delete_alter() {
    for op in [Read, Write, Delete, Alter, All, Describe] {
        let authz = authorizer(&[allow(topic("t"), "User:alice", op)]);
        assert!(
            check(&authz, "User:alice", Describe, Topic, "t").is_allowed(),
            "{op} implies Describe"
        );
    }
    for op in [Create, AlterConfigs, DescribeConfigs] {
        let authz = authorizer(&[allow(topic("t"), "User:alice", op)]);
        assert_eq!(
            check(&authz, "User:alice", Describe, Topic, "t"),
            Decision::NoMatchingAllow,
            "{op} does not imply Describe"
        );
    }
    let authz = authorizer(&[allow(topic("t"), "User:alice", AlterConfigs)]);
    assert!(check(&authz, "User:alice", DescribeConfigs, Topic, "t").is_allowed());
    let authz = authorizer(&[allow(topic("t"), "User:alice", Alter)]);
    assert!(!check(&authz, "User:alice", DescribeConfigs, Topic, "t").is_allowed());
    // Implication runs one way only.
    let authz = authorizer(&[allow(topic("t"), "User:alice", Describe)]);
    assert!(!check(&authz, "User:alice", Read, Topic, "t").is_allowed());
    let authz = authorizer(&[allow(topic("t"), "User:alice", DescribeConfigs)]);
    assert!(!check(&authz, "User:alice", AlterConfigs, Topic, "t").is_allowed());
}

#[test]
fn denials_imply_nothing() {
    let allow_all = allow(topic("t"), "User:alice", All);
    let deny_read = deny(topic("t"), "User:alice", Read);
    let authz = authorizer(&[allow_all.clone(), deny_read.clone()]);
    assert_eq!(
        check(&authz, "User:alice", Describe, Topic, "t"),
        Decision::AllowedBy(&allow_all),
        "a Deny of Read does not deny Describe"
    );
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "t"),
        Decision::DeniedBy(&deny_read)
    );
    let deny_alter_configs = deny(topic("t"), "User:alice", AlterConfigs);
    let authz = authorizer(&[allow_all.clone(), deny_alter_configs]);
    assert!(check(&authz, "User:alice", DescribeConfigs, Topic, "t").is_allowed());

    // A Deny of Describe denies Describe even when Read (which implies it) is allowed.
    let allow_read = allow(topic("t"), "User:alice", Read);
    let deny_describe = deny(topic("t"), "User:alice", Describe);
    let authz = authorizer(&[allow_read.clone(), deny_describe.clone()]);
    assert_eq!(
        check(&authz, "User:alice", Describe, Topic, "t"),
        Decision::DeniedBy(&deny_describe)
    );
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "t"),
        Decision::AllowedBy(&allow_read)
    );
}

#[test]
fn super_users_bypass_acls() {
    let config = AuthorizerConfig {
        super_users: AuthorizerConfig::parse_super_users(" User:admin ; User:broker;").unwrap(),
        allow_everyone_if_no_acl_found: false,
    };
    assert_eq!(config.super_users.len(), 2);
    let authz = authorizer_with(&[deny(topic("*"), "User:*", All)], config);
    for who in ["User:admin", "User:broker"] {
        assert_eq!(
            check(&authz, who, Write, Topic, "t"),
            Decision::SuperUser,
            "{who}"
        );
        assert_eq!(
            check(&authz, who, ClusterAction, Cluster, "kafka-cluster"),
            Decision::SuperUser
        );
        assert!(authz.authorize_by_resource_type(who, any_ip(), Write, Topic));
    }
    assert!(matches!(
        check(&authz, "User:alice", Write, Topic, "t"),
        Decision::DeniedBy(_)
    ));
    // Exact, case-sensitive.
    assert!(!check(&authz, "User:ADMIN", Write, Topic, "t").is_allowed());
    assert!(AuthorizerConfig::parse_super_users("admin").is_err());

    // `User:*` as a super user is a principal named `*`, not everyone.
    let config = AuthorizerConfig {
        super_users: vec![Principal::wildcard()],
        allow_everyone_if_no_acl_found: false,
    };
    let authz = authorizer_with(&[], config);
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "t"),
        Decision::NoAclsFound
    );
}

#[test]
fn allow_everyone_applies_only_without_acls_on_the_resource() {
    let config = AuthorizerConfig {
        super_users: vec![],
        allow_everyone_if_no_acl_found: true,
    };
    let authz = authorizer_with(&[], config.clone());
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "t"),
        Decision::NoAclsAllowEveryone
    );
    assert!(check(&authz, "User:alice", Write, Topic, "t").is_allowed());

    let bobs = allow(topic("t"), "User:bob", Read);
    let authz = authorizer_with(
        &[
            bobs.clone(),
            allow(topic_prefix("orders-"), "User:bob", Read),
            allow(ResourcePattern::literal(Group, "*"), "User:bob", Read),
        ],
        config.clone(),
    );
    // Any ACL on the resource, for anyone, turns the default off.
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "t"),
        Decision::NoMatchingAllow
    );
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "orders-eu"),
        Decision::NoMatchingAllow,
        "a prefixed ACL counts"
    );
    assert_eq!(
        check(&authz, "User:alice", Read, Group, "g"),
        Decision::NoMatchingAllow,
        "the literal wildcard counts"
    );
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "other"),
        Decision::NoAclsAllowEveryone
    );
    assert_eq!(
        check(&authz, "User:alice", Write, TransactionalId, "t"),
        Decision::NoAclsAllowEveryone,
        "ACLs of another resource type do not count"
    );
    assert_eq!(
        check(&authz, "User:bob", Read, Topic, "t"),
        Decision::AllowedBy(&bobs)
    );

    // Without the setting: denied, and said so.
    let authz = authorizer(&[bobs]);
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "other"),
        Decision::NoAclsFound
    );
    assert!(!Decision::NoAclsFound.is_allowed());
}

#[test]
fn cluster_resource() {
    let cluster = ResourcePattern::cluster;
    let broker = allow(cluster(), "User:broker", ClusterAction);
    let producer = allow(cluster(), "User:producer", IdempotentWrite);
    let admin = allow(cluster(), "User:admin", All);
    let authz = authorizer(&[broker.clone(), producer.clone(), admin.clone()]);
    let on_cluster = |who: &str, op| check(&authz, who, op, Cluster, "kafka-cluster");
    assert_eq!(
        on_cluster("User:broker", ClusterAction),
        Decision::AllowedBy(&broker)
    );
    assert_eq!(on_cluster("User:broker", Create), Decision::NoMatchingAllow);
    assert_eq!(
        on_cluster("User:producer", IdempotentWrite),
        Decision::AllowedBy(&producer)
    );
    assert_eq!(
        on_cluster("User:admin", Create),
        Decision::AllowedBy(&admin)
    );
    assert_eq!(
        on_cluster("User:admin", DescribeConfigs),
        Decision::AllowedBy(&admin)
    );
    assert_eq!(
        check(&authz, "User:admin", Create, Topic, "kafka-cluster"),
        Decision::NoAclsFound
    );
    let mut bad = Acls::new();
    assert!(
        bad.add(allow(
            ResourcePattern::literal(Cluster, "mine"),
            "User:a",
            All
        ))
        .is_err()
    );
}

#[test]
fn filter_values_are_never_authorized() {
    let config = AuthorizerConfig {
        super_users: vec![principal("User:admin")],
        allow_everyone_if_no_acl_found: true,
    };
    let authz = authorizer_with(&[allow(topic("*"), "User:*", All)], config);
    for (op, rt) in [
        (Operation::Any, Topic),
        (Operation::Unknown, Topic),
        (Read, ResourceType::Any),
        (Read, ResourceType::Unknown),
    ] {
        assert_eq!(
            check(&authz, "User:admin", op, rt, "t"),
            Decision::InvalidAction
        );
        assert!(!authz.authorize_by_resource_type("User:admin", any_ip(), op, rt));
    }
}

#[test]
fn decisions_explain_themselves() {
    let allow_read = allow(topic("t"), "User:alice", Read);
    let authz = authorizer(std::slice::from_ref(&allow_read));
    let decision = check(&authz, "User:alice", Read, Topic, "t");
    assert_eq!(decision.binding(), Some(&allow_read));
    assert_eq!(decision.to_string(), format!("Allowed by {allow_read}"));
    assert_eq!(Decision::SuperUser.binding(), None);
    assert_eq!(
        Decision::NoMatchingAllow.to_string(),
        "Denied (no matching Allow ACL)"
    );
}

#[test]
fn changes_take_effect() {
    let mut authz = authorizer(&[]);
    let grant = allow(topic_prefix("orders-"), "User:alice", Write);
    assert_eq!(authz.acls_mut().add(grant.clone()), Ok(true));
    assert!(check(&authz, "User:alice", Write, Topic, "orders-1").is_allowed());
    let removed = authz.acls_mut().remove_matching(&grant.to_filter());
    assert_eq!(removed, [grant]);
    assert_eq!(
        check(&authz, "User:alice", Write, Topic, "orders-1"),
        Decision::NoAclsFound
    );
    authz.set_config(AuthorizerConfig {
        super_users: vec![],
        allow_everyone_if_no_acl_found: true,
    });
    assert!(authz.config().allow_everyone_if_no_acl_found);
    assert!(check(&authz, "User:alice", Write, Topic, "orders-1").is_allowed());
}

fn filter(rt: ResourceType, name: Option<&str>, pt: PatternType) -> AclBindingFilter {
    let mut f = AclBindingFilter::ANY;
    f.pattern = ResourcePatternFilter::new(rt, name.map(str::to_owned), pt);
    f
}

fn sample_set() -> (Acls, [AclBinding; 6]) {
    let bindings = [
        allow(topic("orders-eu"), "User:alice", Read),
        allow(topic("*"), "User:bob", Read),
        allow(topic_prefix("orders-"), "User:alice", Write),
        deny(topic_prefix("orders-eu"), "User:carol", Read),
        allow(topic("payments"), "User:alice", Read),
        allow(
            ResourcePattern::literal(Group, "orders-eu"),
            "User:alice",
            Read,
        ),
    ];
    (Acls::from_bindings(bindings.clone()).unwrap(), bindings)
}

#[test]
fn describe_filters() {
    let (acls, [lit, star, pre, pre_full, payments, group]) = sample_set();
    let sorted = |mut v: Vec<AclBinding>| {
        v.sort();
        v
    };
    assert_eq!(acls.list(&AclBindingFilter::ANY).len(), 6);
    assert_eq!(
        acls.list(&filter(Topic, Some("orders-eu"), PatternType::Match)),
        sorted(vec![
            lit.clone(),
            star.clone(),
            pre.clone(),
            pre_full.clone()
        ])
    );
    assert_eq!(
        acls.list(&filter(Topic, Some("orders-eu"), PatternType::Literal)),
        std::slice::from_ref(&lit)
    );
    assert_eq!(
        acls.list(&filter(Topic, Some("orders-eu"), PatternType::Prefixed)),
        std::slice::from_ref(&pre_full)
    );
    assert_eq!(
        acls.list(&filter(Topic, Some("orders-eu"), PatternType::Any)),
        sorted(vec![lit.clone(), pre_full.clone()])
    );
    assert_eq!(
        acls.list(&filter(
            ResourceType::Any,
            Some("orders-eu"),
            PatternType::Any
        )),
        sorted(vec![lit.clone(), pre_full.clone(), group.clone()])
    );
    assert_eq!(
        acls.list(&filter(Topic, None, PatternType::Prefixed)),
        sorted(vec![pre.clone(), pre_full.clone()])
    );
    assert_eq!(
        acls.list(&filter(Topic, Some("payments"), PatternType::Match)),
        sorted(vec![star.clone(), payments.clone()])
    );
    let mut alice_reads = AclBindingFilter::ANY;
    alice_reads.entry.principal = Some("User:alice".into());
    alice_reads.entry.operation = Read;
    assert_eq!(acls.list(&alice_reads), sorted(vec![lit, payments, group]));
    let mut denies = AclBindingFilter::ANY;
    denies.entry.permission = Permission::Deny;
    assert_eq!(acls.list(&denies), [pre_full]);
}

#[test]
fn delete_filters() {
    let (acls, [lit, star, pre, pre_full, payments, group]) = sample_set();

    // Match deletes every pattern that applies to the name, and nothing else.
    let mut a = acls.clone();
    let removed = a.remove_matching(&filter(Topic, Some("orders-eu"), PatternType::Match));
    assert_eq!(removed.len(), 4);
    let mut rest = a.list(&AclBindingFilter::ANY);
    rest.sort();
    let mut expected = vec![payments.clone(), group.clone()];
    expected.sort();
    assert_eq!(rest, expected);

    // Literal deletes that literal only; the index forgets it.
    let mut a = acls.clone();
    assert_eq!(
        a.remove_matching(&filter(Topic, Some("orders-eu"), PatternType::Literal)),
        std::slice::from_ref(&lit)
    );
    assert_eq!(a.len(), 5);
    let authz = Authorizer::new(AuthorizerConfig::default(), a);
    assert_eq!(
        check(&authz, "User:alice", Read, Topic, "orders-eu"),
        Decision::NoMatchingAllow
    );

    // Prefixed deletes that prefix only.
    let mut a = acls.clone();
    assert_eq!(
        a.remove_matching(&filter(Topic, Some("orders-"), PatternType::Prefixed)),
        std::slice::from_ref(&pre)
    );
    assert!(a.contains(&pre_full));

    // Any: both pattern types with exactly the name.
    let mut a = acls.clone();
    let mut removed = a.remove_matching(&filter(Topic, Some("orders-eu"), PatternType::Any));
    removed.sort();
    let mut expected = vec![lit.clone(), pre_full.clone()];
    expected.sort();
    assert_eq!(removed, expected);
    assert!(a.contains(&star) && a.contains(&group));

    // Everything.
    let mut a = acls;
    assert_eq!(a.remove_matching(&AclBindingFilter::ANY).len(), 6);
    assert!(a.is_empty());
    assert!(a.remove_matching(&AclBindingFilter::ANY).is_empty());
}

#[test]
fn authorize_by_resource_type_follows_kafka() {
    let by_type = |bindings: &[AclBinding], who: &str, op: Operation| {
        authorizer(bindings).authorize_by_resource_type(who, any_ip(), op, Topic)
    };
    let alice = "User:alice";
    assert!(!by_type(&[], alice, Write));
    let config = AuthorizerConfig {
        super_users: vec![],
        allow_everyone_if_no_acl_found: true,
    };
    assert!(
        authorizer_with(&[], config.clone()).authorize_by_resource_type(
            alice,
            any_ip(),
            Write,
            Topic
        )
    );

    let literal_a = allow(topic("a"), alice, Write);
    assert!(by_type(std::slice::from_ref(&literal_a), alice, Write));
    assert!(!by_type(
        std::slice::from_ref(&literal_a),
        "User:bob",
        Write
    ));
    assert!(!by_type(std::slice::from_ref(&literal_a), alice, Read));
    assert!(
        !by_type(&[allow(topic("a"), alice, Read)], alice, Describe),
        "no implied operations here"
    );
    assert!(by_type(&[allow(topic("a"), alice, All)], alice, Write));
    assert!(by_type(&[allow(topic("a"), "User:*", Write)], alice, Write));
    assert!(
        !by_type(
            &[allow(ResourcePattern::literal(Group, "a"), alice, Write)],
            alice,
            Write
        ),
        "another resource type"
    );

    // Literal allows: cancelled by the same literal Deny or a covering prefixed Deny.
    assert!(!by_type(
        &[literal_a.clone(), deny(topic("a"), alice, Write)],
        alice,
        Write
    ));
    assert!(!by_type(
        &[literal_a.clone(), deny(topic_prefix("a"), alice, Write)],
        alice,
        Write
    ));
    assert!(by_type(
        &[literal_a.clone(), deny(topic_prefix("b"), alice, Write)],
        alice,
        Write
    ));
    assert!(by_type(
        &[literal_a.clone(), deny(topic("a"), alice, Read)],
        alice,
        Write
    ));

    // Prefixed allows: cancelled only by a prefixed Deny covering the whole prefix.
    let prefix_ab = allow(topic_prefix("ab"), alice, Write);
    assert!(!by_type(
        &[prefix_ab.clone(), deny(topic_prefix("a"), alice, Write)],
        alice,
        Write
    ));
    assert!(!by_type(
        &[prefix_ab.clone(), deny(topic_prefix("ab"), alice, All)],
        alice,
        Write
    ));
    assert!(by_type(
        &[prefix_ab.clone(), deny(topic_prefix("abc"), alice, Write)],
        alice,
        Write
    ));
    assert!(by_type(
        &[prefix_ab.clone(), deny(topic("ab"), alice, Write)],
        alice,
        Write
    ));

    // Wildcards.
    assert!(by_type(&[allow(topic("*"), alice, Write)], alice, Write));
    let deny_everything = deny(topic("*"), "User:*", Write);
    assert!(!by_type(
        &[literal_a.clone(), deny_everything.clone()],
        alice,
        Write
    ));
    assert!(
        !authorizer_with(std::slice::from_ref(&deny_everything), config)
            .authorize_by_resource_type(alice, any_ip(), Write, Topic),
        "a wildcard Deny beats allow.everyone.if.no.acl.found"
    );

    // Hosts.
    let from_one = binding(topic("a"), alice, "10.0.0.7", Write, Permission::Allow);
    let authz = authorizer(&[from_one]);
    assert!(authz.authorize_by_resource_type(alice, ip("10.0.0.7"), Write, Topic));
    assert!(!authz.authorize_by_resource_type(alice, ip("10.0.0.8"), Write, Topic));
}
