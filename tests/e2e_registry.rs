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

/// Broker-side validation (confluent.value.schema.validation): values under a schema
/// registered for the topic's subject are taken (confluent-kafka's AvroSerializer); a
/// batch holding a value under another id, or without Confluent's header, is refused
/// with INVALID_RECORD naming those records (kafka-python reads KIP-467's
/// record_errors); null values pass; the good records sent again are stored.
#[test]
fn a_validating_topic_refuses_values_under_unregistered_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let k = broker.kafka.clone();
    common::kafka::create_topic(
        &k,
        "orders",
        1,
        &[("confluent.value.schema.validation", "true")],
    );
    let url = format!("http://{}", broker.registry);
    let v = common::python_json("registry_validation.py", &[&k, &url, "orders"]);
    assert_eq!(v["delivered"], serde_json::json!([true, true, true]), "{v}");
    let id = v["schema_id"].as_i64().unwrap();
    let batch = v["batch"].as_array().unwrap();
    assert!(batch.iter().all(|r| r["ok"] == false), "refused whole: {v}");
    let error = |i: usize| batch[i]["error"].as_str().unwrap().to_string();
    assert!(
        error(1).contains(&format!(
            "names schema id {}, which is not registered under the subject orders-value",
            id + 1000
        )),
        "{}",
        error(1)
    );
    assert!(error(1).contains("batch index 1"), "{}", error(1));
    assert!(
        error(2).contains("not in the schema registry's wire format"),
        "{}",
        error(2)
    );
    for i in [0, 3] {
        assert!(
            error(i).contains("part of a batch"),
            "record {i}: {}",
            error(i)
        );
    }
    assert_eq!(v["resent"], serde_json::json!([true, true]), "{v}");
    // 3 Avro records and the 2 resent; nothing of the refused batch.
    let (_, high) = common::kafka::watermarks(&k, "orders", 0);
    assert_eq!(high, 5);
    // Turned off, anything goes again.
    let out = common::cli(
        &k,
        &[
            "topic",
            "alter",
            "orders",
            "--set",
            "confluent.value.schema.validation=false",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = common::cli(
        &k,
        &[
            "topic",
            "alter",
            "orders",
            "--set",
            "confluent.value.schema.validation=maybe",
        ],
    );
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("confluent.value.schema.validation"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// `strata schema`: register, read back, list, check, set compatibility, delete, with
/// errors that say what the registry refused.
#[test]
fn the_schema_cli_drives_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let reg = format!("http://{}", broker.registry);
    let schema = |args: &[&str]| -> (bool, String, String) {
        let out = std::process::Command::new(common::strata_bin())
            .arg("schema")
            .args(args)
            .env("STRATA_SCHEMA_REGISTRY", &reg)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let v1 = dir.path().join("order.avsc");
    std::fs::write(
        &v1,
        r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#,
    )
    .unwrap();
    let (ok, out, err) = schema(&[
        "register",
        "--subject",
        "orders-value",
        "--file",
        v1.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "id 1");
    let (ok, out, _) = schema(&["get", "--subject", "orders-value"]);
    assert!(ok);
    assert!(
        out.starts_with("subject orders-value  version 1  id 1  type AVRO"),
        "{out}"
    );
    assert!(out.contains("\"name\":\"Order\""), "{out}");
    let (_, out, _) = schema(&["list"]);
    assert_eq!(out.trim(), "orders-value");
    // A field without a default breaks BACKWARD: check says why, register is refused.
    let bad = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}"#;
    let (ok, out, err) = schema(&["check", "--subject", "orders-value", "--schema", bad]);
    assert!(!ok);
    assert!(out.contains("qty"), "{out}");
    assert!(
        err.contains("not compatible with orders-value version latest"),
        "{err}"
    );
    let (ok, _, err) = schema(&["register", "--subject", "orders-value", "--schema", bad]);
    assert!(!ok);
    assert!(err.contains("error 409"), "{err}");
    let (ok, out, _) = schema(&["config", "--subject", "orders-value", "--set", "none"]);
    assert!(ok);
    assert_eq!(out.trim(), "NONE");
    let (ok, out, err) = schema(&["register", "--subject", "orders-value", "--schema", bad]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "id 2");
    let (_, out, _) = schema(&["list", "--subject", "orders-value"]);
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["1", "2"]);
    let (ok, out, _) = schema(&["get", "--id", "2"]);
    assert!(ok);
    assert!(
        out.contains("subject orders-value  version 2") && out.contains("qty"),
        "{out}"
    );
    let (ok, out, _) = schema(&["delete", "--subject", "orders-value", "--version", "1"]);
    assert!(ok);
    assert_eq!(out.trim(), "deleted orders-value version 1");
    let (ok, _, err) = schema(&["get", "--subject", "orders-value", "--version", "1"]);
    assert!(!ok);
    assert!(err.contains("error 40402"), "{err}");
    let (ok, _, err) = schema(&["register", "--subject", "x-value", "--schema", "{not avro"]);
    assert!(!ok);
    assert!(err.contains("error 42201"), "{err}");
    let (ok, _, err) = schema(&[
        "register",
        "--subject",
        "x-value",
        "--schema",
        "\"string\"",
        "--reference",
        "nonsense",
    ]);
    assert!(!ok);
    assert!(
        err.contains("--reference") && err.contains("NAME=SUBJECT:VERSION"),
        "{err}"
    );
    // No registry there: the error says where it looked and what to set.
    let out = std::process::Command::new(common::strata_bin())
        .args(["schema", "list", "--registry", "127.0.0.1:1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot reach the schema registry at http://127.0.0.1:1"),
        "{err}"
    );
}
