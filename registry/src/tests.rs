//! The registry's behaviour as Confluent's clients rely on it, through its records: every
//! change is computed, then replayed as the broker does once the records are durable.

use crate::*;

const V1: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}"#;
const V2: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int","default":0}]}"#;
const NO_DEFAULT: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"}]}"#;

fn avro(text: &str) -> NewSchema {
    NewSchema {
        schema: text.to_string(),
        ..NewSchema::default()
    }
}

fn apply(r: &mut Registry, records: &[Record]) {
    for rec in records {
        r.replay(&rec.key, rec.value.as_deref()).unwrap();
    }
}

fn register(r: &mut Registry, subject: &str, s: &NewSchema) -> Result<(i32, i32), RegistryError> {
    let done = r.register(subject, s)?;
    apply(r, &done.records);
    Ok((done.id, done.version))
}

#[test]
fn a_schema_gets_one_id_and_each_subject_its_own_versions() {
    let mut r = Registry::default();
    assert_eq!(register(&mut r, "orders-value", &avro(V1)).unwrap(), (1, 1));
    // Again: the same answer, nothing written.
    let again = r.register("orders-value", &avro(V1)).unwrap();
    assert_eq!((again.id, again.version, again.records.len()), (1, 1, 0));
    // Under another subject: the same id, that subject's version 1.
    assert_eq!(register(&mut r, "users-value", &avro(V1)).unwrap(), (1, 1));
    assert_eq!(register(&mut r, "orders-value", &avro(V2)).unwrap(), (2, 2));
    assert_eq!(r.subjects(false), ["orders-value", "users-value"]);
    assert_eq!(r.versions("orders-value", false).unwrap(), [1, 2]);
    assert_eq!(r.version("orders-value", "latest", false).unwrap().id, 2);
    assert_eq!(r.lookup("orders-value", &avro(V1), false).unwrap(), (1, 1));
    let mut ids: Vec<_> = r.versions_of(1, false).collect();
    ids.sort();
    assert_eq!(ids, [("orders-value", 1), ("users-value", 1)]);
}

#[test]
fn compatibility_levels_follow_avros_rules() {
    let mut r = Registry::default();
    register(&mut r, "s", &avro(V1)).unwrap();
    // BACKWARD (the default): a new required field cannot read old data.
    let e = register(&mut r, "s", &avro(NO_DEFAULT)).unwrap_err();
    assert_eq!((e.http_status(), e.error_code()), (409, 409));
    assert!(e.to_string().contains("incompatible"), "{e}");
    // With a default it can.
    register(&mut r, "s", &avro(V2)).unwrap();
    // FORWARD: old readers must read new data; dropping a field without a default
    // breaks it for the reader of V2... adding one does not.
    let set = r
        .set_compatibility(Some("s"), Compatibility::Forward)
        .unwrap();
    apply(&mut r, &set);
    assert_eq!(r.compatibility(Some("s")), Compatibility::Forward);
    assert_eq!(r.compatibility(None), Compatibility::Backward);
    let v3 = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int","default":0},{"name":"email","type":"string"}]}"#;
    register(&mut r, "s", &avro(v3)).unwrap();
    // NONE takes anything that parses.
    let recs = r.set_compatibility(Some("s"), Compatibility::None).unwrap();
    apply(&mut r, &recs);
    register(
        &mut r,
        "s",
        &avro(r#"{"type":"record","name":"Other","fields":[{"name":"x","type":"long"}]}"#),
    )
    .unwrap();
    // A schema that does not parse: 422 42201.
    let e = register(&mut r, "s", &avro(r#"{"type":"record"}"#)).unwrap_err();
    assert_eq!((e.http_status(), e.error_code()), (422, 42201));
}

#[test]
fn transitive_levels_check_every_version() {
    let mut r = Registry::default();
    let recs = r
        .set_compatibility(Some("t"), Compatibility::BackwardTransitive)
        .unwrap();
    apply(&mut r, &recs);
    let a = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}"#;
    // b drops a and adds an optional field: readable from a (backward).
    let b = r#"{"type":"record","name":"R","fields":[{"name":"b","type":"int","default":1}]}"#;
    // c makes b required again... and needs a with no default: unreadable from a.
    let c = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"int","default":1}]}"#;
    register(&mut r, "t", &avro(a)).unwrap();
    register(&mut r, "t", &avro(b)).unwrap();
    // c reads a's data (it has a) and b's? b's data has no a, and a has no default: no.
    assert!(register(&mut r, "t", &avro(c)).is_err());
    // Against the latest only (BACKWARD) the same check fails too (b's data lacks a).
    assert!(!r.check("t", Some("latest"), &avro(c)).unwrap().is_empty());
    // Against version 1 alone it passes.
    assert!(r.check("t", Some("1"), &avro(c)).unwrap().is_empty());
}

#[test]
fn deletes_are_soft_then_permanent() {
    let mut r = Registry::default();
    register(&mut r, "s", &avro(V1)).unwrap();
    register(&mut r, "s", &avro(V2)).unwrap();
    // Permanent first: refused.
    assert_eq!(
        r.delete_version("s", "1", true).unwrap_err().error_code(),
        40407
    );
    let (v, recs) = r.delete_version("s", "1", false).unwrap();
    assert_eq!(v, 1);
    apply(&mut r, &recs);
    assert_eq!(r.versions("s", false).unwrap(), [2]);
    assert_eq!(r.versions("s", true).unwrap(), [1, 2]);
    // The schema of a soft-deleted version is still found by id.
    assert!(r.schema(1).is_ok());
    let (v, recs) = r.delete_version("s", "1", true).unwrap();
    assert_eq!(v, 1);
    apply(&mut r, &recs);
    assert_eq!(r.versions("s", true).unwrap(), [2]);
    assert_eq!(r.schema(1).unwrap_err().error_code(), 40403);
    // A subject: soft, then permanent; a new version continues after the highest.
    assert_eq!(r.delete_subject("s", true).unwrap_err().error_code(), 40405);
    let (vs, recs) = r.delete_subject("s", false).unwrap();
    assert_eq!(vs, [2]);
    apply(&mut r, &recs);
    assert!(r.subjects(false).is_empty());
    assert_eq!(r.subjects(true), ["s"]);
    assert_eq!(
        r.delete_subject("s", false).unwrap_err().error_code(),
        40404
    );
    assert_eq!(register(&mut r, "s", &avro(V1)).unwrap(), (1, 3));
    // Ids are not reused after a permanent delete.
    assert_eq!(r.next_id(), 3);
}

#[test]
fn references_must_exist_and_hold_their_version() {
    let mut r = Registry::default();
    let address =
        r#"{"type":"record","name":"Address","fields":[{"name":"city","type":"string"}]}"#;
    let user = r#"{"type":"record","name":"User","fields":[{"name":"home","type":"Address"}]}"#;
    let with_ref = NewSchema {
        schema: user.to_string(),
        references: vec![Reference {
            name: "Address".into(),
            subject: "address".into(),
            version: 1,
        }],
        ..NewSchema::default()
    };
    assert_eq!(
        register(&mut r, "user", &with_ref)
            .unwrap_err()
            .error_code(),
        42201
    );
    register(&mut r, "address", &avro(address)).unwrap();
    let (id, _) = register(&mut r, "user", &with_ref).unwrap();
    assert_eq!(r.referenced_by("address", 1), [id]);
    assert_eq!(
        r.delete_version("address", "1", false)
            .unwrap_err()
            .error_code(),
        42206
    );
}

#[test]
fn modes_gate_writes_and_import_takes_ids() {
    let mut r = Registry::default();
    let recs = r.set_mode(None, Mode::Readonly).unwrap();
    apply(&mut r, &recs);
    let e = register(&mut r, "s", &avro(V1)).unwrap_err();
    assert_eq!(e.error_code(), 42205);
    let recs = r.set_mode(None, Mode::Import).unwrap();
    apply(&mut r, &recs);
    let imported = NewSchema {
        id: Some(100),
        version: Some(5),
        ..avro(V1)
    };
    assert_eq!(register(&mut r, "s", &imported).unwrap(), (100, 5));
    assert_eq!(r.next_id(), 101);
    let recs = r.set_mode(None, Mode::Readwrite).unwrap();
    apply(&mut r, &recs);
    let e = register(&mut r, "s", &imported).unwrap_err();
    assert_eq!(e.error_code(), 42205, "{e}");
    assert_eq!(r.subject_mode("s").unwrap_err().error_code(), 40409);
}

#[test]
fn the_state_is_the_records() {
    // Whatever sequence of changes: replaying their records into an empty registry
    // gives the same answers (a new leader loads `_schemas` and carries on).
    let mut r = Registry::default();
    let mut log: Vec<Record> = Vec::new();
    let mut run = |r: &mut Registry, recs: Vec<Record>| {
        apply(r, &recs);
        log.extend(recs);
    };
    let done = r.register("a", &avro(V1)).unwrap();
    run(&mut r, done.records);
    let done = r.register("a", &avro(V2)).unwrap();
    run(&mut r, done.records);
    let set = r.set_compatibility(None, Compatibility::Full).unwrap();
    run(&mut r, set);
    let (_, recs) = r.delete_version("a", "1", false).unwrap();
    run(&mut r, recs);
    let mut again = Registry::default();
    apply(&mut again, &log);
    assert_eq!(again.subjects(true), r.subjects(true));
    assert_eq!(
        again.versions("a", true).unwrap(),
        r.versions("a", true).unwrap()
    );
    assert_eq!(again.compatibility(None), Compatibility::Full);
    assert_eq!(again.next_id(), r.next_id());
    // Unreadable records are refused (the loader skips and counts them).
    assert!(again.replay(b"not json", Some(b"{}")).is_err());
}

#[test]
fn bad_names_and_versions_are_422s() {
    let r = Registry::default();
    assert_eq!(r.register("", &avro(V1)).unwrap_err().error_code(), 42208);
    assert_eq!(
        r.register("a\nb", &avro(V1)).unwrap_err().error_code(),
        42208
    );
    assert_eq!(
        r.version("x", "zero", false).unwrap_err().error_code(),
        40401
    );
    assert_eq!(
        crate::state::parse_version("0").unwrap_err().error_code(),
        42202
    );
    assert_eq!(
        Compatibility::parse("sideways").unwrap_err().error_code(),
        42203
    );
    assert_eq!(Mode::parse("x").unwrap_err().error_code(), 42204);
}
