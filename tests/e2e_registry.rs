//! The schema registry (issue 37) with Confluent's own clients: confluent-kafka's
//! `SchemaRegistryClient` and Avro serializers against the real broker, whose registry's
//! state is the `_schemas` topic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Broker;

/// Avro records produced and consumed through Confluent's serializers; the registry
/// answers registrations, compatibility (BACKWARD by default: 409 for a new field
/// without a default), lookups and deletes as Confluent's does; after a restart its
/// state, read back from `_schemas`, is the same.
#[test]
fn confluents_avro_serializers_work_against_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(&dir.path().join("data"), &[]);
    let url = format!("http://{}", broker.registry);
    let v = common::python_json("registry_avro.py", &[&broker.kafka, &url, "users"]);
    let decoded = v["decoded"].as_array().unwrap();
    assert_eq!(decoded.len(), 10, "{v}");
    assert_eq!(
        decoded[3],
        serde_json::json!({"name": "user3", "n": 3}),
        "{v}"
    );
    // Confluent's wire format: magic byte 0, then the schema id.
    assert_eq!(v["magic_byte"], 0, "{v}");
    assert_eq!(v["v1"], serde_json::json!({"id": 1, "version": 1}), "{v}");
    assert_eq!(
        v["incompatible"],
        serde_json::json!({"status": 409, "code": 409}),
        "{v}"
    );
    assert_eq!(v["test_bad"], false, "{v}");
    assert_eq!(v["test_good"], true, "{v}");
    assert_eq!(v["v2_id"], 2, "{v}");
    assert_eq!(v["versions"], serde_json::json!([1, 2]), "{v}");
    // The same schema written differently is found as version 1.
    assert_eq!(
        v["lookup_v1"],
        serde_json::json!({"id": 1, "version": 1}),
        "{v}"
    );
    assert_eq!(v["by_id"], "email", "{v}");
    assert_eq!(v["subjects"], serde_json::json!(["users-value"]), "{v}");
    assert_eq!(v["other_subject_id"], 1, "{v}");
    assert_eq!(v["soft_deleted"], serde_json::json!([1]), "{v}");
    assert_eq!(
        v["subjects_after_soft"],
        serde_json::json!(["users-value"]),
        "{v}"
    );
    assert_eq!(
        v["subjects_with_deleted"],
        serde_json::json!(["other-value", "users-value"]),
        "{v}"
    );
    assert_eq!(
        v["soft_deleted_latest"],
        serde_json::json!({"status": 404, "code": 40401}),
        "{v}"
    );
    assert_eq!(v["permanently_deleted"], serde_json::json!([1]), "{v}");
    assert_eq!(
        v["subjects_with_deleted_after"],
        serde_json::json!(["users-value"]),
        "{v}"
    );
    assert_eq!(
        v["invalid"],
        serde_json::json!({"status": 422, "code": 42201}),
        "{v}"
    );

    // The state is the topic: after a restart (a new registry port) the same answers.
    broker.stop();
    broker.restart();
    let get = |path: &str| -> serde_json::Value {
        let body = reqwest::blocking::get(format!("http://{}{path}", broker.registry))
            .unwrap()
            .text()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    };
    let t0 = std::time::Instant::now();
    loop {
        let versions = get("/subjects/users-value/versions");
        if versions == serde_json::json!([1, 2]) {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "{versions}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let by_id = get("/schemas/ids/2");
    assert!(
        by_id["schema"].as_str().unwrap().contains("email"),
        "{by_id}"
    );
    // Clients may not write the registry's topic.
    let out = common::cli(&broker.kafka, &["topic", "delete", "_schemas"]);
    assert!(!out.status.success());
}
