//! The JSON shape the controller replicates: bindings with Kafka's names, the set as a
//! sorted list, validation on the way back in.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use serde_json::{from_value, json, to_value};
use strata_authz::{
    AccessControlEntry, AclBinding, AclBindingFilter, Acls, AuthorizerConfig, Operation, Principal,
    ResourcePattern, ResourceType,
};
fn alice_reads(name: &str) -> AclBinding {
    AclBinding::new(
        ResourcePattern::prefixed(ResourceType::TransactionalId, name),
        AccessControlEntry::allow(Principal::new("User:alice").unwrap(), Operation::Read),
    )
}

#[test]
fn bindings_serialize_with_kafka_names() {
    let value = to_value(alice_reads("tx-")).unwrap();
    let expected = json!({
        "pattern": {"resource_type": "TransactionalId", "name": "tx-", "pattern_type": "Prefixed"},
        "entry": {"principal": "User:alice", "host": "*", "operation": "Read", "permission": "Allow"},
    });
    assert_eq!(value, expected);
    assert_eq!(from_value::<AclBinding>(value).unwrap(), alice_reads("tx-"));
}

#[test]
fn sets_serialize_sorted_whatever_the_insertion_order() {
    let bindings = [alice_reads("c"), alice_reads("a"), alice_reads("b")];
    let forward = Acls::from_bindings(bindings.clone()).unwrap();
    let backward = Acls::from_bindings(bindings.iter().rev().cloned()).unwrap();
    let value = to_value(&forward).unwrap();
    assert_eq!(value, to_value(&backward).unwrap());
    let mut sorted = bindings.to_vec();
    sorted.sort();
    assert_eq!(value, to_value(&sorted).unwrap());
    let back: Acls = from_value(value).unwrap();
    assert_eq!(back, forward);
    assert_eq!(back.list(&AclBindingFilter::ANY), sorted);
}

#[test]
fn deserializing_validates_and_deduplicates() {
    let twice = to_value(vec![alice_reads("a"), alice_reads("a")]).unwrap();
    assert_eq!(from_value::<Acls>(twice).unwrap().len(), 1);

    let prefixed_star = to_value(vec![alice_reads("*")]).unwrap();
    let err = from_value::<Acls>(prefixed_star).unwrap_err();
    assert!(
        err.to_string().contains("PREFIXED pattern named '*'"),
        "{err}"
    );

    let mut bad_principal = to_value(alice_reads("a")).unwrap();
    bad_principal["entry"]["principal"] = json!("alice");
    let err = from_value::<AclBinding>(bad_principal).unwrap_err();
    assert!(err.to_string().contains("no colon"), "{err}");
}

#[test]
fn config_and_filters_round_trip() {
    let config = AuthorizerConfig {
        super_users: vec![Principal::new("User:admin").unwrap()],
        allow_everyone_if_no_acl_found: true,
    };
    let back: AuthorizerConfig = from_value(to_value(&config).unwrap()).unwrap();
    assert_eq!(back, config);
    let filter = alice_reads("a").to_filter();
    let back: AclBindingFilter = from_value(to_value(&filter).unwrap()).unwrap();
    assert_eq!(back, filter);
    let back: AclBindingFilter = from_value(to_value(&AclBindingFilter::ANY).unwrap()).unwrap();
    assert_eq!(back, AclBindingFilter::ANY);
}
