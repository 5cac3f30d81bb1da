//! What a new user and a stricter client trip over (issue 36), through the router
//! against the in-memory service: schema-registry and unknown members of produce
//! bodies refused, the json readers' `strata.on.decode.error`, a nack moving the
//! member itself, and a lag summary without members. tests/e2e_gateway_strict.rs
//! runs the same against the real binary.

use super::*;

const V2: &str = "application/vnd.kafka.v2+json";

fn record(offset: i64, value: &[u8]) -> Record {
    Record {
        topic: "t".into(),
        partition: 0,
        offset,
        key: None,
        value: Some(value.to_vec()),
        headers: Vec::new(),
        timestamp: None,
    }
}

/// Creates instance `g/c` with `settings` (JSON members) and subscribes it to `t`.
async fn instance(app: &axum::Router, settings: &str) {
    let a = call(app, post("/consumers/g", Some(V2), settings.to_string())).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json());
    let sub = post(
        "/consumers/g/instances/c/subscription",
        Some(V2),
        r#"{"topics":["t"]}"#,
    );
    assert_eq!(call(app, sub).await.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn produce_bodies_refuse_schema_registry_and_unknown_members() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    let v3 = "/v3/clusters/strata/topics/t/records";
    let json = Some("application/json");
    for (path, ct, body, code, named) in [
        (
            v3,
            json,
            r#"{"value":{"schema_id":1,"data":1}}"#,
            42202,
            "value.schema_id",
        ),
        (
            v3,
            json,
            r#"{"value":{"schema_version":1,"data":1}}"#,
            42202,
            "value.schema_version",
        ),
        (
            v3,
            json,
            r#"{"key":{"subject":"s","data":1}}"#,
            42202,
            "key.subject",
        ),
        (
            v3,
            json,
            r#"{"key":{"subject_name_strategy":"T","data":1}}"#,
            42202,
            "key.subject_name_strategy",
        ),
        (
            v3,
            json,
            r#"{"value":{"schema":"{}","data":1}}"#,
            42202,
            "value.schema",
        ),
        (
            v3,
            json,
            r#"{"value":{"data":1},"bogus_field":1}"#,
            42201,
            "bogus_field",
        ),
        (
            v3,
            json,
            r#"{"value":{"data":1,"bogus_field":1}}"#,
            42201,
            "bogus_field",
        ),
        (
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1}],"value_schema_id":3}"#,
            42202,
            "value_schema_id",
        ),
        (
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1}],"key_schema_id":3}"#,
            42202,
            "key_schema_id",
        ),
        (
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1}],"value_schema":"{}"}"#,
            42202,
            "value_schema",
        ),
        (
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1}],"key_schema":"{}"}"#,
            42202,
            "key_schema",
        ),
        (
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1,"bogus_field":1}]}"#,
            42201,
            "bogus_field",
        ),
        (
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1}],"bogus_field":1}"#,
            42201,
            "bogus_field",
        ),
    ] {
        let a = call(&app, post(path, ct, body)).await;
        a.error(StatusCode::UNPROCESSABLE_ENTITY, code);
        let m = a.json()["message"].as_str().unwrap().to_string();
        assert!(m.contains(named), "{body}: {m}");
    }
    assert_eq!(fake.appended("t"), 0);
    // Null is absent.
    let a = call(
        &app,
        post(
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1}],"value_schema_id":null}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    let a = call(
        &app,
        post(
            v3,
            Some("application/json"),
            r#"{"value":{"data":1,"schema_id":null}}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(fake.appended("t"), 2);
}

#[tokio::test]
async fn a_json_instance_stops_at_or_dead_letters_a_record_that_is_not_json() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    *fake.feed.lock().unwrap() = vec![record(4, b"not json")];
    instance(&app, r#"{"name":"c","format":"json"}"#).await;
    let a = call(&app, get("/consumers/g/instances/c/records")).await;
    a.error(StatusCode::UNPROCESSABLE_ENTITY, 42203);
    let m = a.json()["message"].as_str().unwrap().to_string();
    assert!(
        m.contains("topic 't' partition 0 offset 4 is not JSON")
            && m.contains("/consumers/g/instances/c/nack"),
        "{m}"
    );
    // Given back: the next poll starts at it.
    assert_eq!(
        fake.seeks.lock().unwrap().last(),
        Some(&PartitionOffset {
            topic: "t".into(),
            partition: 0,
            offset: 4
        })
    );

    // Before it, the records are answered; from it on, given back.
    *fake.feed.lock().unwrap() = vec![record(3, b"{}"), record(4, b"x"), record(5, b"[]")];
    let a = call(&app, get("/consumers/g/instances/c/records")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json().as_array().unwrap().len(), 1, "{}", a.json());

    // dead-letter: the others are answered, the record is in t.dlq with the reason.
    let del = Request::delete("/consumers/g/instances/c")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&app, del).await.status, StatusCode::NO_CONTENT);
    instance(
        &app,
        r#"{"name":"c","format":"json","strata.on.decode.error":"dead-letter"}"#,
    )
    .await;
    let a = call(&app, get("/consumers/g/instances/c/records")).await;
    assert_eq!(a.status, StatusCode::OK);
    let offsets: Vec<i64> = a
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, [3, 5]);
    let dead = fake.topics.lock().unwrap()["t.dlq"][0].clone();
    assert_eq!(dead[0].value.as_deref(), Some(&b"x"[..]));
    let reason = dead[0]
        .headers
        .iter()
        .find(|(k, _)| k == crate::dlq::HEADER_REASON)
        .and_then(|(_, v)| v.clone())
        .unwrap();
    assert!(
        String::from_utf8(reason)
            .unwrap()
            .contains("offset 4 is not JSON")
    );

    // The setting is checked.
    let a = call(
        &app,
        post(
            "/consumers/g",
            Some(V2),
            r#"{"name":"d","strata.on.decode.error":"skip"}"#,
        ),
    )
    .await;
    a.error(StatusCode::UNPROCESSABLE_ENTITY, 42204);
    call(
        &app,
        get("/consumers/g/stream?topic=t&strata.on.decode.error=skip"),
    )
    .await
    .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
}

#[tokio::test]
async fn a_nack_commits_and_moves_the_member_past_the_record() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    let a = call(
        &app,
        post(
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":0},{"value":1},{"value":2}]}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    instance(&app, r#"{"name":"c"}"#).await;
    let a = call(
        &app,
        post(
            "/consumers/g/instances/c/nack",
            Some(V2),
            r#"{"topic":"t","partition":0,"offset":1,"reason":"no"}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json());
    assert_eq!(a.json()["committed"], 2);
    let past = PartitionOffset {
        topic: "t".into(),
        partition: 0,
        offset: 2,
    };
    assert_eq!(fake.seeks.lock().unwrap().last(), Some(&past));
    let a = call(&app, get("/consumers/g/instances/c/offsets")).await;
    assert_eq!(a.json()["offsets"][0]["offset"], 2);
}

#[tokio::test]
async fn the_lag_summary_of_a_group_without_members_links_no_consumer() {
    let fake = Fake::with_topic("t", 1);
    fake.groups.lock().unwrap().push(GroupInfo {
        group: "g".into(),
        state: "Empty".into(),
        protocol_type: "consumer".into(),
        ..GroupInfo::default()
    });
    fake.group_offsets.lock().unwrap().push((
        "g".into(),
        GroupOffset {
            topic: "t".into(),
            partition: 0,
            committed: 2,
            end: 5,
        },
    ));
    let app = app(&fake, GatewayConfig::default());
    let j = call(
        &app,
        get("/v3/clusters/strata/consumer-groups/g/lag-summary"),
    )
    .await
    .json();
    assert_eq!(j["max_lag"], 3, "{j}");
    assert_eq!(j["max_lag_consumer_id"], "", "{j}");
    assert_eq!(j["max_lag_consumer"], Value::Null, "{j}");
    assert_eq!(
        j["max_lag_partition"]["related"], "/v3/clusters/strata/topics/t/partitions/0",
        "{j}"
    );
    // Nothing committed: no partition either.
    fake.group_offsets.lock().unwrap().clear();
    let j = call(
        &app,
        get("/v3/clusters/strata/consumer-groups/g/lag-summary"),
    )
    .await
    .json();
    assert_eq!(
        (&j["max_lag_consumer"], &j["max_lag_partition"]),
        (&Value::Null, &Value::Null),
        "{j}"
    );
}
