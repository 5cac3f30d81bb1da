//! The cost of one authorization on the produce path: Write on a topic, with no ACLs
//! (authorizer on, super-user check missing) and with 10,000 ACLs of a realistic mix
//! loaded.
//!
//! `cargo bench -p strata-authz -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use strata_authz::{
    AccessControlEntry, AclBinding, Acls, Authorizer, AuthorizerConfig, Operation, Permission,
    Principal, ResourcePattern, ResourceType,
};

fn principal(s: &str) -> Principal {
    Principal::new(s).expect("valid principal")
}

fn acl(pattern: ResourcePattern, who: &str, op: Operation, permission: Permission) -> AclBinding {
    AclBinding::new(
        pattern,
        AccessControlEntry::new(principal(who), "*", op, permission),
    )
}

fn config() -> AuthorizerConfig {
    AuthorizerConfig {
        super_users: vec![principal("User:admin"), principal("User:broker")],
        allow_everyone_if_no_acl_found: false,
    }
}

/// 10,000 ACLs: 5,000 literal topic ACLs for 1,000 principals, 3,000 prefixed (topic and
/// transactional id), 1,000 group ACLs, 1,000 others (cluster, transactional ids,
/// wildcards).
fn ten_thousand() -> Vec<AclBinding> {
    use Operation::*;
    use Permission::{Allow, Deny};
    use ResourceType::*;
    let mut bindings = Vec::with_capacity(10_000);
    // 5,000 literal: each app reads 3 shared topics and writes 2 of its own.
    for i in 0..1_000 {
        let who = format!("User:app-{i}");
        for j in 0..3 {
            let shared = format!("events-{}", (i * 7 + j * 13) % 500);
            bindings.push(acl(
                ResourcePattern::literal(Topic, shared),
                &who,
                Read,
                Allow,
            ));
        }
        for j in 0..2 {
            let own = format!("app-{i}-out-{j}");
            bindings.push(acl(
                ResourcePattern::literal(Topic, own),
                &who,
                Write,
                Allow,
            ));
        }
    }
    // 3,000 prefixed: a team prefix per app (Write, Read), nested sub-prefixes with a
    // Deny, and transactional-id prefixes.
    for i in 0..1_000 {
        let who = format!("User:app-{i}");
        let team = format!("team-{i}.");
        bindings.push(acl(
            ResourcePattern::prefixed(Topic, team.clone()),
            &who,
            Write,
            Allow,
        ));
        bindings.push(acl(
            ResourcePattern::prefixed(Topic, format!("{team}private.")),
            &who,
            Write,
            Deny,
        ));
        bindings.push(acl(
            ResourcePattern::prefixed(TransactionalId, format!("tx-{i}-")),
            &who,
            Write,
            Allow,
        ));
    }
    // 1,000 group ACLs.
    for i in 0..1_000 {
        let who = format!("User:app-{i}");
        bindings.push(acl(
            ResourcePattern::literal(Group, format!("cg-{i}")),
            &who,
            Read,
            Allow,
        ));
    }
    // 1,000 others: idempotent producers on the cluster, literal transactional ids, a
    // few wildcards and broad prefixes that every topic check has to look at.
    for i in 0..990 {
        let who = format!("User:app-{i}");
        if i % 2 == 0 {
            bindings.push(acl(
                ResourcePattern::cluster(),
                &who,
                IdempotentWrite,
                Allow,
            ));
        } else {
            bindings.push(acl(
                ResourcePattern::literal(TransactionalId, format!("txn-{i}")),
                &who,
                Describe,
                Allow,
            ));
        }
    }
    bindings.push(acl(
        ResourcePattern::literal(Topic, "*"),
        "User:monitor",
        Describe,
        Allow,
    ));
    bindings.push(acl(
        ResourcePattern::literal(Topic, "*"),
        "User:*",
        DescribeConfigs,
        Allow,
    ));
    bindings.push(acl(
        ResourcePattern::prefixed(Topic, "team-"),
        "User:auditor",
        Read,
        Allow,
    ));
    bindings.push(acl(
        ResourcePattern::prefixed(Topic, "t"),
        "User:legacy",
        All,
        Deny,
    ));
    bindings.push(acl(
        ResourcePattern::literal(Group, "*"),
        "User:monitor",
        Describe,
        Allow,
    ));
    bindings.push(acl(ResourcePattern::cluster(), "User:ops", Alter, Allow));
    bindings.push(acl(
        ResourcePattern::cluster(),
        "User:ops",
        AlterConfigs,
        Allow,
    ));
    bindings.push(acl(
        ResourcePattern::cluster(),
        "User:monitor",
        Describe,
        Allow,
    ));
    bindings.push(acl(
        ResourcePattern::prefixed(Topic, "team-4"),
        "User:app-42",
        Describe,
        Allow,
    ));
    bindings.push(acl(
        ResourcePattern::prefixed(Topic, "team-42"),
        "User:app-42",
        Read,
        Allow,
    ));
    bindings
}

fn bench(c: &mut Criterion) {
    let host: IpAddr = "10.1.2.3".parse().expect("ip");

    let empty = Authorizer::new(config(), Acls::new());
    assert!(
        !empty
            .authorize(
                "User:app-42",
                host,
                Operation::Write,
                ResourceType::Topic,
                "team-42.orders"
            )
            .is_allowed()
    );
    c.bench_function("authorize/write/0_acls", |b| {
        b.iter(|| {
            empty.authorize(
                black_box("User:app-42"),
                black_box(host),
                black_box(Operation::Write),
                black_box(ResourceType::Topic),
                black_box("team-42.orders"),
            )
        })
    });

    let bindings = ten_thousand();
    let acls = Acls::from_bindings(bindings.clone()).expect("valid bindings");
    assert_eq!(acls.len(), 10_000);
    let loaded = Authorizer::new(config(), acls);
    let decision = loaded.authorize(
        "User:app-42",
        host,
        Operation::Write,
        ResourceType::Topic,
        "team-42.orders",
    );
    assert!(decision.is_allowed(), "{decision}");
    assert!(
        decision
            .binding()
            .is_some_and(|b| b.pattern.name == "team-42.")
    );
    c.bench_function("authorize/write/10k_acls/prefixed_allow", |b| {
        b.iter(|| {
            loaded.authorize(
                black_box("User:app-42"),
                black_box(host),
                black_box(Operation::Write),
                black_box(ResourceType::Topic),
                black_box("team-42.orders"),
            )
        })
    });

    let denied = loaded.authorize(
        "User:app-42",
        host,
        Operation::Write,
        ResourceType::Topic,
        "team-42.private.keys",
    );
    assert!(!denied.is_allowed(), "{denied}");
    c.bench_function("authorize/write/10k_acls/prefixed_deny", |b| {
        b.iter(|| {
            loaded.authorize(
                black_box("User:app-42"),
                black_box(host),
                black_box(Operation::Write),
                black_box(ResourceType::Topic),
                black_box("team-42.private.keys"),
            )
        })
    });

    assert!(
        loaded
            .authorize(
                "User:app-42",
                host,
                Operation::Read,
                ResourceType::Topic,
                "events-294"
            )
            .is_allowed()
    );
    c.bench_function("authorize/read/10k_acls/literal_allow", |b| {
        b.iter(|| {
            loaded.authorize(
                black_box("User:app-42"),
                black_box(host),
                black_box(Operation::Read),
                black_box(ResourceType::Topic),
                black_box("events-294"),
            )
        })
    });

    assert!(
        !loaded
            .authorize(
                "User:stranger",
                host,
                Operation::Write,
                ResourceType::Topic,
                "team-42.orders"
            )
            .is_allowed()
    );
    c.bench_function("authorize/write/10k_acls/no_matching_allow", |b| {
        b.iter(|| {
            loaded.authorize(
                black_box("User:stranger"),
                black_box(host),
                black_box(Operation::Write),
                black_box(ResourceType::Topic),
                black_box("team-42.orders"),
            )
        })
    });

    assert!(loaded.authorize_by_resource_type(
        "User:app-42",
        host,
        Operation::Write,
        ResourceType::Topic
    ));
    c.bench_function("authorize_by_resource_type/write/10k_acls", |b| {
        b.iter(|| {
            loaded.authorize_by_resource_type(
                black_box("User:app-42"),
                black_box(host),
                black_box(Operation::Write),
                black_box(ResourceType::Topic),
            )
        })
    });
}

/// Building the index from scratch (a broker loading the controller's state).
fn load(c: &mut Criterion) {
    let bindings = ten_thousand();
    let mut group = c.benchmark_group("acls");
    group.sample_size(10);
    group.bench_function("from_bindings/10k", |b| {
        b.iter_batched(
            || bindings.clone(),
            |v| Acls::from_bindings(v).expect("valid bindings"),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench, load);
criterion_main!(benches);
