//! What a new user and a stricter client trip over in the REST gateway (issue 36),
//! against the real `strata` binary: produce bodies with schema-registry or unknown
//! members are refused rather than written as plain JSON.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::gateway::{BINARY_V2, Gw, JSON_V2, answer, expect_error};
use common::kafka::create_topic;
use serde_json::json;

const JSON: &str = "application/json";

/// The partition's high watermark, read statelessly.
fn high_watermark(gw: &Gw, topic: &str) -> i64 {
    let (s, j) = answer(gw.get(&format!("/topics/{topic}/partitions/0/records")));
    assert_eq!(s, 200, "{j}");
    j["high_watermark"].as_i64().unwrap()
}

#[test]
fn produce_refuses_schema_registry_and_unknown_members() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "t", 1, &[]);
    let cluster = gw.cluster_id();
    let v3 = format!("/v3/clusters/{cluster}/topics/t/records");

    // v3: each schema member of a key or value, named with where it is.
    for (member, value) in [
        ("schema_id", json!(1)),
        ("schema_version", json!(1)),
        ("subject", json!("t-value")),
        ("subject_name_strategy", json!("TOPIC_NAME")),
    ] {
        let mut data = json!({"type": "JSON", "data": {"a": 1}});
        data[member] = value;
        let j = expect_error(
            gw.post(&v3, JSON, json!({ "value": data }).to_string()),
            422,
            42202,
        );
        let m = j["message"].as_str().unwrap();
        assert!(
            m.contains(&format!("value.{member}")) && m.contains("schema registry"),
            "{j}"
        );
    }
    let j = expect_error(
        gw.post(&v3, JSON, r#"{"key":{"schema_id":7,"data":"k"}}"#),
        422,
        42202,
    );
    assert!(
        j["message"].as_str().unwrap().contains("key.schema_id"),
        "{j}"
    );
    // Unknown members, of the record or of its value: refused, not ignored.
    for body in [
        r#"{"value":{"data":1},"bogus_field":1}"#,
        r#"{"value":{"data":1,"bogus_field":1}}"#,
        r#"{"value":{"data":1},"headers":[{"name":"h","value":null,"bogus_field":1}]}"#,
    ] {
        let j = expect_error(gw.post(&v3, JSON, body), 422, 42201);
        assert!(
            j["message"].as_str().unwrap().contains("bogus_field"),
            "{j}"
        );
    }

    // v2: the request's schema members and unknown members, json and binary.
    for (member, ct, record) in [
        ("value_schema_id", JSON_V2, json!({"value": {"a": 1}})),
        ("key_schema_id", JSON_V2, json!({"value": {"a": 1}})),
        ("value_schema", BINARY_V2, json!({"value": "aGk="})),
        ("key_schema", BINARY_V2, json!({"value": "aGk="})),
    ] {
        let body = json!({ "records": [record], member: "1" }).to_string();
        for path in ["/topics/t", "/topics/t/partitions/0"] {
            let j = expect_error(gw.post(path, ct, body.clone()), 422, 42202);
            let m = j["message"].as_str().unwrap();
            assert!(m.contains(member) && m.contains("schema registry"), "{j}");
        }
    }
    for body in [
        r#"{"records":[{"value":1,"bogus_field":1}]}"#,
        r#"{"records":[{"value":1}],"bogus_field":1}"#,
    ] {
        let j = expect_error(gw.post("/topics/t", JSON_V2, body), 422, 42201);
        assert!(
            j["message"].as_str().unwrap().contains("bogus_field"),
            "{j}"
        );
    }
    // Nothing refused was written.
    assert_eq!(high_watermark(&gw, "t"), 0);

    // A schema member sent as null is absent (Confluent's own answers carry them so).
    let r = gw.post(
        "/topics/t",
        JSON_V2,
        r#"{"records":[{"value":{"a":1}}],"value_schema_id":null,"key_schema":null}"#,
    );
    assert_eq!(r.status(), 200);
    let r = gw.post(&v3, JSON, r#"{"value":{"data":{"a":1},"schema_id":null}}"#);
    assert_eq!(r.status(), 200);
    assert_eq!(high_watermark(&gw, "t"), 2);
}
