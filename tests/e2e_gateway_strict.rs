//! What a new user and a stricter client trip over in the REST gateway (issue 36),
//! against the real `strata` binary: produce bodies with schema-registry or unknown
//! members are refused rather than written as plain JSON; a nack moves the instance
//! itself past the record; a record that is not JSON stops a json reader or is
//! dead-lettered, the same for a consumer instance and an SSE stream; a seek before the
//! instance has its partitions is a 409 that says so, not librdkafka's 500; a group
//! without members has no consumer link in its lag summary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::gateway::{BINARY_V2, Gw, JSON_V2, Sse, V2, answer, expect_error};
use common::kafka::create_topic;
use serde_json::{Value, json};

const JSON: &str = "application/json";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The partition's high watermark, read statelessly.
fn high_watermark(gw: &Gw, topic: &str) -> i64 {
    let (s, j) = answer(gw.get(&format!("/topics/{topic}/partitions/0/records")));
    assert_eq!(s, 200, "{j}");
    j["high_watermark"].as_i64().unwrap()
}

/// `topic` (one partition) holding {"n":0}, {"n":1}, a value that is not JSON, {"n":3}
/// and {"n":4}.
fn poisoned_topic(gw: &Gw, topic: &str) {
    create_topic(&gw.b.kafka, topic, 1, &[]);
    let values: [&[u8]; 5] = [
        b"{\"n\":0}",
        b"{\"n\":1}",
        b"not json",
        b"{\"n\":3}",
        b"{\"n\":4}",
    ];
    let records: Vec<Value> = values.iter().map(|v| json!({"value": b64(v)})).collect();
    let (s, j) = answer(gw.post(
        &format!("/topics/{topic}"),
        BINARY_V2,
        json!({ "records": records }).to_string(),
    ));
    assert_eq!(s, 200, "{j}");
}

/// Creates instance `name` of `group` with `settings` (auto.offset.reset earliest unless
/// they say otherwise), subscribed to `topic`: its base path.
fn instance(gw: &Gw, group: &str, name: &str, settings: Value, topic: &str) -> String {
    let mut body = json!({"name": name, "auto.offset.reset": "earliest"});
    body.as_object_mut()
        .unwrap()
        .extend(settings.as_object().unwrap().clone());
    let (s, j) = answer(gw.post(&format!("/consumers/{group}"), V2, body.to_string()));
    assert_eq!(s, 200, "{j}");
    let base = format!("/consumers/{group}/instances/{name}");
    let r = gw.post(
        &format!("{base}/subscription"),
        V2,
        json!({ "topics": [topic] }).to_string(),
    );
    assert_eq!(r.status(), 204);
    base
}

/// One poll of a json instance (up to 2 s): the status and the answer.
fn poll_json(gw: &Gw, base: &str) -> (u16, Value) {
    answer(
        gw.http
            .get(gw.url(&format!("{base}/records?timeout=2000")))
            .header("Accept", JSON_V2)
            .send()
            .unwrap(),
    )
}

/// The offsets of polled records.
fn offsets(records: &Value) -> Vec<i64> {
    records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect()
}

/// Polls until `n` records came (at most 30 s): their offsets, in order.
fn read_offsets(gw: &Gw, base: &str, n: usize, json_format: bool) -> Vec<i64> {
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < n {
        assert!(t0.elapsed() < Duration::from_secs(30), "read {got:?}");
        let records = if json_format {
            let (s, j) = poll_json(gw, base);
            assert_eq!(s, 200, "{j}");
            j
        } else {
            Value::Array(gw.poll_binary(base))
        };
        got.extend(offsets(&records));
    }
    got
}

/// The 422 a json instance answers at the poisoned record (the records before it were
/// read first): it names the record and says how to get past it.
fn expect_stop_at_2(gw: &Gw, base: &str) {
    let t0 = Instant::now();
    loop {
        let (s, j) = poll_json(gw, base);
        if s == 200 && j.as_array().unwrap().is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(30), "no 422");
            continue;
        }
        assert_eq!((s, j["error_code"].as_u64()), (422, Some(42203)), "{j}");
        let m = j["message"].as_str().unwrap();
        for part in [
            "topic 'orders' partition 0 offset 2 is not JSON",
            &format!("nack it (POST {base}/nack"),
            "strata.on.decode.error",
        ] {
            assert!(m.contains(part), "{part:?} not in {m}");
        }
        return;
    }
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

/// Issue 36, item 4: before, the instance answered the same 422 for the nacked record
/// on every later poll (only a new instance started past it).
#[test]
fn a_nack_moves_the_instance_itself_past_the_record() {
    let gw = Gw::start(&[]);
    poisoned_topic(&gw, "orders");

    let base = instance(&gw, "g-fail", "i", json!({"format": "json"}), "orders");
    assert_eq!(read_offsets(&gw, &base, 2, true), vec![0, 1]);
    expect_stop_at_2(&gw, &base);
    // It stays there: the default stops until the client says.
    expect_stop_at_2(&gw, &base);
    let (s, j) = answer(gw.post(
        &format!("{base}/nack"),
        V2,
        r#"{"topic":"orders","partition":0,"offset":2,"reason":"not an order"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["committed"], 3);
    // The same instance reads on after it.
    assert_eq!(read_offsets(&gw, &base, 2, true), vec![3, 4]);

    // A nack of a record the instance read past already does not take it back: a
    // binary instance reads everything, then nacks record 2.
    let base = instance(&gw, "g-bin", "i", json!({"format": "binary"}), "orders");
    assert_eq!(read_offsets(&gw, &base, 5, false), vec![0, 1, 2, 3, 4]);
    let (s, j) = answer(gw.post(
        &format!("{base}/nack"),
        V2,
        r#"{"topic":"orders","partition":0,"offset":2,"reason":"late"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert!(gw.poll_binary(&base).is_empty());
    assert!(gw.poll_binary(&base).is_empty());
}

/// Issue 36, item 5: a record that is not JSON, read in the json format, stops an
/// instance and a stream alike by default (`strata.on.decode.error` fail), or is
/// dead-lettered by both (dead-letter).
#[test]
fn a_record_that_is_not_json_stops_or_is_dead_lettered_alike_by_instances_and_streams() {
    let gw = Gw::start(&[]);
    poisoned_topic(&gw, "orders");

    // An instance that dead-letters reads every other record in one go, and its dead
    // letter carries the decode error as its reason.
    let base = instance(
        &gw,
        "g-dl",
        "i",
        json!({"format": "json", "strata.on.decode.error": "dead-letter"}),
        "orders",
    );
    assert_eq!(read_offsets(&gw, &base, 4, true), vec![0, 1, 3, 4]);
    let (s, dead) = answer(gw.get("/topics/orders.dlq/partitions/0/records?offset=0"));
    assert_eq!(s, 200, "{dead}");
    let letter = &dead["records"][0];
    assert_eq!(letter["value"], b64(b"not json"));
    let header = |name: &str| {
        let h = letter["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == name)
            .unwrap();
        let v = base64::engine::general_purpose::STANDARD
            .decode(h["value"].as_str().unwrap())
            .unwrap();
        String::from_utf8(v).unwrap()
    };
    assert_eq!(header("strata.dlq.offset"), "2");
    assert!(header("strata.dlq.reason").contains("is not JSON"));

    // A stream with the default stops the partition at the record: an error event
    // naming it, nothing after it until the client nacks it; then it reads on.
    let sse = Sse::open(
        &gw,
        "/consumers/g-sse/stream?topic=orders&format=json&auto.offset.reset=earliest",
    );
    let (event, _, session) = sse.next();
    assert_eq!(event, "session", "{session}");
    assert_eq!(sse.next().1, "orders/0/0");
    assert_eq!(sse.next().1, "orders/0/1");
    let (event, _, error) = sse.next();
    assert_eq!(event, "error", "{error}");
    let m = error.as_str().unwrap();
    assert!(
        m.contains("topic 'orders' partition 0 offset 2 is not JSON")
            && m.contains(session["nack_uri"].as_str().unwrap()),
        "{m}"
    );
    assert!(
        sse.events.recv_timeout(Duration::from_secs(3)).is_err(),
        "the held partition went on"
    );
    let (s, j) = answer(gw.post(
        session["nack_uri"].as_str().unwrap(),
        JSON,
        r#"{"topic":"orders","partition":0,"offset":2,"reason":"not an order"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert_eq!(sse.next().1, "orders/0/3");
    assert_eq!(sse.next().1, "orders/0/4");
    sse.close();

    // A stream that dead-letters says so in the record's place, with the record's id
    // (so acknowledging it commits past it as a record).
    let sse = Sse::open(
        &gw,
        "/consumers/g-sse-dl/stream?topic=orders&format=json&auto.offset.reset=earliest\
         &strata.on.decode.error=dead-letter",
    );
    assert_eq!(sse.next().0, "session");
    let got: Vec<(String, String, Value)> = (0..5).map(|_| sse.next()).collect();
    let events: Vec<(&str, &str)> = got
        .iter()
        .map(|(e, id, _)| (e.as_str(), id.as_str()))
        .collect();
    assert_eq!(
        events,
        [
            ("record", "orders/0/0"),
            ("record", "orders/0/1"),
            ("dead-letter", "orders/0/2"),
            ("record", "orders/0/3"),
            ("record", "orders/0/4"),
        ]
    );
    let dead = &got[2].2;
    assert_eq!(dead["dead_letter"]["topic"], "orders.dlq", "{dead}");
    assert!(
        dead["reason"].as_str().unwrap().contains("is not JSON"),
        "{dead}"
    );
    sse.close();
    // Three dead letters of record 2 now: the instance's, the nack's and the stream's.
    assert_eq!(high_watermark(&gw, "orders.dlq"), 3);

    // The setting is checked where it is given.
    expect_error(
        gw.post(
            "/consumers/g-bad",
            V2,
            r#"{"format":"json","strata.on.decode.error":"skip"}"#,
        ),
        422,
        42204,
    );
    expect_error(
        gw.get("/consumers/g-bad/stream?topic=orders&strata.on.decode.error=skip"),
        422,
        42202,
    );
}

/// Issue 36, item 6: a seek before the instance has its partitions answered 500 "Seek
/// error: Local: Unknown partition"; librdkafka's other bare errors of these handlers
/// are mapped the same way.
#[test]
fn a_seek_before_the_assignment_is_a_409_that_says_so() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "t", 2, &[]);
    let (s, j) = answer(gw.post("/consumers/g", V2, r#"{"name":"i","format":"binary"}"#));
    assert_eq!(s, 200, "{j}");
    let base = "/consumers/g/instances/i";
    let seek = r#"{"offsets":[{"topic":"t","partition":0,"offset":0}]}"#;
    let ends = r#"{"partitions":[{"topic":"t","partition":0}]}"#;
    let not_yet = |r| {
        let j = expect_error(r, 409, 40901);
        let m = j["message"].as_str().unwrap().to_string();
        assert!(
            m.contains("no assignment for partition 0 of topic 't' yet") && m.contains("poll"),
            "{m}"
        );
    };
    // Before subscribing ("Local: Unknown partition"), and subscribed before the first
    // poll ("Local: Erroneous state").
    for subscribed in [false, true] {
        if subscribed {
            let r = gw.post(&format!("{base}/subscription"), V2, r#"{"topics":["t"]}"#);
            assert_eq!(r.status(), 204);
        }
        not_yet(gw.post(&format!("{base}/positions"), V2, seek));
        not_yet(gw.post(&format!("{base}/positions/beginning"), V2, ends));
        not_yet(gw.post(&format!("{base}/positions/end"), V2, ends));
        // Nothing read, nothing to commit: done, as a Kafka consumer's commitSync()
        // (librdkafka's "Local: No offset stored" was a 500).
        let r = gw.post(&format!("{base}/offsets"), V2, "");
        assert_eq!(r.status(), 204);
    }
    // Once the group has assigned it the partitions (on a poll), seeks work; one of a
    // partition it does not have names those it has.
    let t0 = Instant::now();
    loop {
        gw.poll_binary(base);
        let (_, j) = answer(gw.get(&format!("{base}/assignments")));
        if j["partitions"].as_array().unwrap().len() == 2 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never assigned: {j}"
        );
    }
    assert_eq!(
        gw.post(&format!("{base}/positions"), V2, seek).status(),
        204
    );
    assert_eq!(
        gw.post(&format!("{base}/positions/end"), V2, ends).status(),
        204
    );
    let j = expect_error(
        gw.post(
            &format!("{base}/positions"),
            V2,
            r#"{"offsets":[{"topic":"t","partition":7,"offset":0}]}"#,
        ),
        409,
        40901,
    );
    assert!(j["message"].as_str().unwrap().contains("t-0, t-1"), "{j}");

    // A pattern Rust's regex takes but librdkafka's (POSIX) does not: "Local: Invalid
    // argument or configuration" was a 500.
    let j = expect_error(
        gw.post(
            &format!("{base}/subscription"),
            V2,
            r#"{"topic_pattern":"(?i)T"}"#,
        ),
        422,
        42202,
    );
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("topic_pattern '(?i)T'"),
        "{j}"
    );

    // auto.offset.reset none and nothing committed: "Local: No offset to automatically
    // reset to" was a 500, and a seek after it "Local: Erroneous state". The client
    // commits, subscribes again, and reads on after the offset it committed.
    create_topic(&gw.b.kafka, "one", 1, &[]);
    let r = gw.post(
        "/topics/one",
        JSON_V2,
        r#"{"records":[{"value":0},{"value":1}]}"#,
    );
    assert_eq!(r.status(), 200);
    let base = instance(
        &gw,
        "g-none",
        "i",
        json!({"format": "json", "auto.offset.reset": "none"}),
        "one",
    );
    let base = base.as_str();
    let t0 = Instant::now();
    let j = loop {
        let (s, j) = poll_json(&gw, base);
        if s != 200 {
            assert_eq!((s, j["error_code"].as_u64()), (409, Some(40903)), "{j}");
            break j;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no 409: {j}");
    };
    let m = j["message"].as_str().unwrap();
    assert!(
        m.contains("auto.offset.reset is none") && m.contains("subscribe again"),
        "{j}"
    );
    let seek = r#"{"offsets":[{"topic":"one","partition":0,"offset":0}]}"#;
    let j = expect_error(gw.post(&format!("{base}/positions"), V2, seek), 409, 40903);
    assert!(
        j["message"].as_str().unwrap().contains("subscribe again"),
        "{j}"
    );
    let commit = r#"{"offsets":[{"topic":"one","partition":0,"offset":0}]}"#;
    assert_eq!(
        gw.post(&format!("{base}/offsets"), V2, commit).status(),
        204
    );
    let r = gw.delete(&format!("{base}/subscription"));
    assert_eq!(r.status(), 204);
    let r = gw.post(&format!("{base}/subscription"), V2, r#"{"topics":["one"]}"#);
    assert_eq!(r.status(), 204);
    assert_eq!(read_offsets(&gw, base, 1, true), [1]);
}

/// A group without members has no consumer to link to: the lag summary's link is null
/// (it was `.../consumers/` with nothing after it).
#[test]
fn the_lag_summary_of_a_group_without_members_links_no_consumer() {
    let gw = Gw::start(&[]);
    poisoned_topic(&gw, "orders");
    let base = instance(&gw, "idle", "i", json!({"format": "binary"}), "orders");
    read_offsets(&gw, &base, 2, false);
    let r = gw.post(
        &format!("{base}/offsets"),
        V2,
        r#"{"offsets":[{"topic":"orders","partition":0,"offset":1}]}"#,
    );
    assert_eq!(r.status(), 204);
    let r = gw.delete(&base);
    assert_eq!(r.status(), 204);
    let path = format!(
        "/v3/clusters/{}/consumer-groups/idle/lag-summary",
        gw.cluster_id()
    );
    let t0 = Instant::now();
    loop {
        let (s, j) = answer(gw.get(&path));
        assert_eq!(s, 200, "{j}");
        if j["max_lag_consumer_id"] == "" {
            assert_eq!(j["max_lag_consumer"], Value::Null, "{j}");
            assert_eq!(j["total_lag"], 3, "{j}");
            assert!(
                j["max_lag_partition"]["related"]
                    .as_str()
                    .unwrap()
                    .ends_with("/topics/orders/partitions/0"),
                "{j}"
            );
            break;
        }
        // The member leaves the group as the instance closes.
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "still a member: {j}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
