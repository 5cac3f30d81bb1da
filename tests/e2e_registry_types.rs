//! Protobuf and JSON Schema in the registry (issue 37), with Confluent's own serializers:
//! confluent-kafka's ProtobufSerializer (a reference between two .proto files, the
//! schema sent as a serialized descriptor) and JSONSerializer against the real broker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Broker;
use serde_json::json;

#[test]
fn confluents_protobuf_serializers_work_against_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let url = format!("http://{}", broker.registry);
    let v = common::python_json("registry_protobuf.py", &[&broker.kafka, &url, "orders"]);
    assert_eq!(v["magic_byte"], 0, "{v}");
    assert_eq!(v["index_byte"], 0, "{v}");
    let decoded = v["decoded"].as_array().unwrap();
    assert_eq!(decoded.len(), 5, "{v}");
    assert_eq!(
        decoded[2],
        json!({"id": 2, "item": "item2", "city": "city2", "tags": ["a", "t2"]}),
        "{v}"
    );
    // The import is its own subject, referenced by the order's version.
    assert_eq!(
        v["subjects"],
        json!(["orders-value", "shop/address.proto"]),
        "{v}"
    );
    assert_eq!(
        v["references"],
        json!([{"name": "shop/address.proto", "subject": "shop/address.proto", "version": 1}]),
        "{v}"
    );
    assert_eq!(v["schema_type"], "PROTOBUF", "{v}");
    // Served as .proto text, though the serializer sent a descriptor.
    assert_eq!(v["text_has_message"], true, "{v}");
    // The same schema given as text is the version the serializer registered.
    assert_eq!(v["lookup_text"]["id"], v["v1_id"], "{v}");
    assert_eq!(
        v["incompatible"],
        json!({"status": 409, "code": 409}),
        "{v}"
    );
    assert!(
        v["v2_id"].as_i64().unwrap() > v["v1_id"].as_i64().unwrap(),
        "{v}"
    );
    assert_eq!(v["versions"], json!([1, 2]), "{v}");
    assert_eq!(v["soft_deleted"], json!([1, 2]), "{v}");
    assert_eq!(v["subjects_after"], json!(["shop/address.proto"]), "{v}");
}

#[test]
fn confluents_json_schema_serializers_work_against_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("data"), &[]);
    let url = format!("http://{}", broker.registry);
    let v = common::python_json("registry_json.py", &[&broker.kafka, &url, "orders"]);
    assert_eq!(v["magic_byte"], 0, "{v}");
    assert_eq!(v["invalid_object"], "SerializationError", "{v}");
    let decoded = v["decoded"].as_array().unwrap();
    assert_eq!(decoded.len(), 5, "{v}");
    assert_eq!(decoded[4], json!({"id": 4, "item": "item4"}), "{v}");
    assert_eq!(
        v["v1"],
        json!({"id": 1, "version": 1, "type": "JSON"}),
        "{v}"
    );
    assert_eq!(
        v["incompatible"],
        json!({"status": 409, "code": 409}),
        "{v}"
    );
    assert_eq!(v["v2_id"], 2, "{v}");
    assert_eq!(v["versions"], json!([1, 2]), "{v}");
    // The registry names the types it takes.
    let types: serde_json::Value = serde_json::from_str(
        &reqwest::blocking::get(format!("{url}/schemas/types"))
            .unwrap()
            .text()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(types, json!(["AVRO", "JSON", "PROTOBUF"]));
}
