//! The REST gateway against the real `strata` binary, with a real HTTP client (reqwest)
//! and a real Kafka client (rdkafka): records produced over HTTP (v2 json and binary,
//! v3 single and streamed) read back by a Kafka consumer and the other way round, an
//! HTTP consumer instance sharing a group with a Kafka consumer, every error status,
//! Idempotency-Key, server-sent events that commit acknowledged offsets, and a
//! schemathesis run against /openapi.json that must find no 5xx.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::gateway::{
    BINARY_V2, Gw, JSON_V2, Rec, V2, answer, b64, expect_error, kafka_read_all, rec_of_json,
};
use common::kafka::{client_config, create_topic, producer};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use reqwest::blocking::{Body, Client};
use serde_json::{Value, json};

#[test]
fn records_produced_over_http_read_the_same_with_a_kafka_client() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "in", 2, &[]);
    let mut expected: Vec<Rec> = Vec::new();
    let mut push = |p: i64,
                    o: i64,
                    key: Option<&[u8]>,
                    value: &[u8],
                    headers: Vec<(String, Option<Vec<u8>>)>| {
        expected.push(Rec {
            partition: p as i32,
            offset: o,
            key: key.map(<[u8]>::to_vec),
            value: Some(value.to_vec()),
            headers,
        })
    };

    // v2, json: keys and values are JSON texts.
    let (s, j) = answer(gw.post(
        "/topics/in",
        JSON_V2,
        r#"{"records":[{"key":"k1","value":{"n":1},"partition":0},{"key":{"a":2},"value":"two","partition":1}]}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["key_schema_id"], Value::Null);
    let offs = j["offsets"].as_array().unwrap();
    assert!(
        offs.iter()
            .all(|o| o["error_code"].is_null() && o["error"].is_null()),
        "{j}"
    );
    push(
        offs[0]["partition"].as_i64().unwrap(),
        offs[0]["offset"].as_i64().unwrap(),
        Some(b"\"k1\""),
        b"{\"n\":1}",
        vec![],
    );
    push(
        offs[1]["partition"].as_i64().unwrap(),
        offs[1]["offset"].as_i64().unwrap(),
        Some(b"{\"a\":2}"),
        b"\"two\"",
        vec![],
    );
    assert_eq!(
        (offs[0]["partition"].as_i64(), offs[1]["partition"].as_i64()),
        (Some(0), Some(1))
    );

    // v2, binary, to a partition: any bytes.
    let all: Vec<u8> = (0..=255).collect();
    let (s, j) = answer(gw.post(
        "/topics/in/partitions/1",
        BINARY_V2,
        json!({"records":[{"key": b64(b"bk"), "value": b64(&all)}]}).to_string(),
    ));
    assert_eq!(s, 200, "{j}");
    push(
        1,
        j["offsets"][0]["offset"].as_i64().unwrap(),
        Some(b"bk"),
        &all,
        vec![],
    );

    // v3, one record with headers.
    let cluster = gw.cluster_id();
    let path = format!("/v3/clusters/{cluster}/topics/in/records");
    let (s, j) = answer(
        gw.post(
            &path,
            "application/json",
            json!({"partition_id": 0, "key": {"type":"BINARY","data": b64(b"v3k")},
               "value": {"type":"STRING","data":"v3 value"},
               "headers": [{"name":"h1","value": b64(b"hv")}, {"name":"h2","value": null}]})
            .to_string(),
        ),
    );
    assert_eq!(s, 200, "{j}");
    assert_eq!(
        (
            j["error_code"].as_u64(),
            j["topic_name"].as_str(),
            j["cluster_id"].as_str()
        ),
        (Some(200), Some("in"), Some(cluster.as_str()))
    );
    assert_eq!(j["value"], json!({"type":"STRING","size":8}));
    push(
        0,
        j["offset"].as_i64().unwrap(),
        Some(b"v3k"),
        b"v3 value",
        vec![("h1".into(), Some(b"hv".to_vec())), ("h2".into(), None)],
    );

    // v3, a chunked stream of records, answered one by one.
    let body: String = (0..3)
        .map(|i| json!({"partition_id": 1, "value": {"type":"STRING","data": format!("s{i}")}, "headers":[{"name":"i","value": b64(&[i as u8])}]}).to_string() + "\n")
        .collect();
    let r = gw
        .http
        .post(gw.url(&path))
        .header("Content-Type", "application/json")
        .body(Body::new(std::io::Cursor::new(body.into_bytes())))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().unwrap();
    let answers: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(answers.len(), 3, "{text}");
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["error_code"], 200, "{a}");
        push(
            1,
            a["offset"].as_i64().unwrap(),
            None,
            format!("s{i}").as_bytes(),
            vec![("i".into(), Some(vec![i as u8]))],
        );
    }

    expected.sort();
    let got = kafka_read_all(&gw.b.kafka, "in", 2, expected.len());
    assert_eq!(got, expected);
}

#[test]
fn records_produced_with_a_kafka_client_read_the_same_over_http() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "out", 2, &[]);
    let (p, d) = producer(&gw.b.kafka, &[("acks", "all")]);
    for i in 0..10u8 {
        let key = format!("k{i}");
        let value = format!("v{i}");
        let h = OwnedHeaders::new().insert(Header {
            key: "n",
            value: Some(&[i][..]),
        });
        p.send(BaseRecord::to("out").key(&key).payload(&value).headers(h))
            .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
    let mut expected: Vec<Rec> = d
        .acked
        .lock()
        .unwrap()
        .iter()
        .map(|a| Rec {
            partition: a.partition,
            offset: a.offset,
            key: a.key.clone(),
            value: Some(a.value.clone()),
            headers: vec![("n".into(), Some(vec![a.value[1] - b'0']))],
        })
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 10);

    // A v2 consumer instance.
    let (s, j) = answer(gw.post(
        "/consumers/g-out",
        V2,
        r#"{"name":"i1","format":"binary","auto.offset.reset":"earliest"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert!(
        j["base_uri"]
            .as_str()
            .unwrap()
            .ends_with("/consumers/g-out/instances/i1")
    );
    let base = "/consumers/g-out/instances/i1";
    assert_eq!(
        gw.post(&format!("{base}/subscription"), V2, r#"{"topics":["out"]}"#)
            .status(),
        204
    );
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "read {} of 10",
            got.len()
        );
        got.extend(gw.poll_binary(base).iter().map(rec_of_json));
    }
    got.sort();
    assert_eq!(got, expected);
    // Commit what was read, and read the committed offsets back.
    let r = gw
        .http
        .post(gw.url(&format!("{base}/offsets")))
        .header("Content-Type", V2)
        .send()
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = gw
        .http
        .get(gw.url(&format!("{base}/offsets")))
        .header("Content-Type", V2)
        .body(r#"{"partitions":[{"topic":"out","partition":0},{"topic":"out","partition":1}]}"#)
        .send()
        .unwrap();
    let (s, j) = answer(r);
    assert_eq!(s, 200, "{j}");
    let committed: BTreeMap<i64, i64> = j["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["partition"].as_i64().unwrap(),
                o["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    for p in 0..2 {
        let n = expected.iter().filter(|r| r.partition == p).count() as i64;
        assert_eq!(
            committed.get(&(p as i64)).copied().unwrap_or(-1).max(0),
            n,
            "{j}"
        );
    }
    // Seek back to the start of partition 0 and read it again.
    let zero = expected.iter().filter(|r| r.partition == 0).count();
    if zero > 0 {
        assert_eq!(
            gw.post(
                &format!("{base}/positions/beginning"),
                V2,
                r#"{"partitions":[{"topic":"out","partition":0}]}"#
            )
            .status(),
            204
        );
        let mut again = Vec::new();
        let t0 = Instant::now();
        while again.len() < zero {
            assert!(t0.elapsed() < Duration::from_secs(30));
            let (_, j) = answer(gw.get(&format!("{base}/records?timeout=500")));
            again.extend(j.as_array().unwrap().iter().map(rec_of_json));
        }
        again.sort();
        assert_eq!(
            again,
            expected
                .iter()
                .filter(|r| r.partition == 0)
                .cloned()
                .collect::<Vec<_>>()
        );
    }
    let r = gw.http.delete(gw.url(base)).send().unwrap();
    assert_eq!(r.status(), 204);
    expect_error(gw.get(&format!("{base}/records")), 404, 40403);

    // The stateless read endpoint returns the same records.
    let mut stateless = Vec::new();
    for p in 0..2 {
        let (s, j) = answer(gw.get(&format!("/topics/out/partitions/{p}/records?offset=0")));
        assert_eq!(s, 200, "{j}");
        let n = expected.iter().filter(|r| r.partition == p).count() as i64;
        assert_eq!(
            (j["high_watermark"].as_i64(), j["next_offset"].as_i64()),
            (Some(n), Some(n)),
            "{j}"
        );
        stateless.extend(j["records"].as_array().unwrap().iter().map(rec_of_json));
    }
    stateless.sort();
    assert_eq!(stateless, expected);
}

#[test]
fn every_error_status_reaches_a_real_client() {
    let gw = Gw::start(&[
        "--http-max-body",
        "4KiB",
        "--http-produce-queue",
        "4",
        "--http-produce-queue-bytes",
        "4KiB",
        "--http-produce-timeout",
        "5s",
    ]);
    create_topic(&gw.b.kafka, "t", 1, &[]);
    create_topic(&gw.b.kafka, "small", 1, &[("max.message.bytes", "500")]);
    // A single broker cannot meet min.insync.replicas=2: acks=all is refused.
    create_topic(&gw.b.kafka, "minisr", 1, &[("min.insync.replicas", "2")]);
    let one = r#"{"records":[{"value":1}]}"#;

    expect_error(gw.get("/topics/nope"), 404, 40401);
    expect_error(gw.post("/topics/nope", JSON_V2, one), 404, 40401);
    expect_error(gw.post("/topics/t/partitions/5", JSON_V2, one), 404, 40402);
    expect_error(gw.get("/consumers/g/instances/nope/records"), 404, 40403);
    expect_error(gw.post("/topics/t", "text/plain", one), 415, 41501);
    expect_error(
        gw.http.post(gw.url("/topics/t")).body(one).send().unwrap(),
        415,
        41501,
    );
    expect_error(gw.post("/topics/t", JSON_V2, "{\"records\":[{"), 422, 42201);
    expect_error(
        gw.post(
            "/topics/t",
            BINARY_V2,
            r#"{"records":[{"value":"aGk="},{"value":"not base64!"}]}"#,
        ),
        422,
        42202,
    );
    let big = json!({"records":[{"value": "x".repeat(5000)}]}).to_string();
    expect_error(gw.post("/topics/t", JSON_V2, big), 413, 41301);
    let too_large = json!({"records":[{"value": "y".repeat(2000)}]}).to_string();
    expect_error(gw.post("/topics/small", JSON_V2, too_large), 413, 41302);
    let five =
        json!({"records": (0..5).map(|i| json!({"value": i})).collect::<Vec<_>>()}).to_string();
    expect_error(gw.post("/topics/t", JSON_V2, five), 429, 42901);
    // A v3 JSON value is re-encoded: 1E15 becomes 1000000000000000.0, so a body under
    // --http-max-body makes records over the whole byte queue. Refused at once, naming
    // the flag, rather than waiting for room that can never be.
    let cluster = gw.cluster_id();
    let wide = format!(
        r#"{{"value":{{"data":[{}]}}}}"#,
        vec!["1E15"; 700].join(",")
    );
    assert!(wide.len() < 4096);
    let r = expect_error(
        gw.post(
            &format!("/v3/clusters/{cluster}/topics/t/records"),
            "application/json",
            wide,
        ),
        429,
        42901,
    );
    let m = r["message"].as_str().unwrap();
    assert!(
        m.contains("--http-produce-queue-bytes") && m.contains("will not help"),
        "{r}"
    );
    let t0 = Instant::now();
    expect_error(gw.post("/topics/minisr", JSON_V2, one), 503, 50301);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "503 took {:?}",
        t0.elapsed()
    );
    expect_error(
        gw.post(
            &format!("/v3/clusters/{cluster}/topics/minisr/records"),
            "application/json",
            r#"{"value":{"data":1}}"#,
        ),
        503,
        50301,
    );
    // Nothing of the refused requests reached the logs.
    for t in ["t", "small", "minisr"] {
        let (s, j) = answer(gw.get(&format!("/topics/{t}/partitions/0/records")));
        assert_eq!(
            (s, j["high_watermark"].as_i64()),
            (200, Some(0)),
            "{t}: {j}"
        );
    }
    // And what is valid still works.
    assert_eq!(gw.post("/topics/t", JSON_V2, one).status(), 200);

    // 401 when authentication is on; /healthz, /readyz and /metrics stay open.
    let auth = Gw::start(&["--http-auth", "bearer:s3cret"]);
    create_topic(&auth.b.kafka, "t", 1, &[]);
    let r = expect_error(auth.get("/topics"), 401, 40101);
    assert!(r["message"].as_str().unwrap().contains("Authentication"));
    expect_error(
        auth.http
            .get(auth.url("/topics"))
            .bearer_auth("wrong")
            .send()
            .unwrap(),
        401,
        40101,
    );
    let r = auth
        .http
        .post(auth.url("/topics/t"))
        .bearer_auth("s3cret")
        .header("Content-Type", JSON_V2)
        .body(one)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    for open in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        assert_eq!(auth.get(open).status(), 200, "{open}");
    }
    // Requests are counted by route.
    let metrics = auth.get("/metrics").text().unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("strata_http_requests_total")
                && l.contains("route=\"/topics/{topic}\"")
                && l.contains("status=\"200\"")),
        "{metrics}"
    );
}

#[test]
fn tier_status_takes_the_gateways_credentials() {
    let gw = Gw::start(&["--http-auth", "basic:ops:pa55"]);
    create_topic(&gw.b.kafka, "t", 1, &[]);
    let r = expect_error(gw.get("/v1/tier/status"), 401, 40101);
    assert!(r["message"].as_str().unwrap().contains("Authentication"));
    let r = gw.get("/v1/tier/status");
    assert!(r.headers().contains_key("www-authenticate"));
    let status = |user: &str, pw: &str| {
        gw.http
            .get(gw.url("/v1/tier/status"))
            .basic_auth(user, Some(pw))
            .send()
            .unwrap()
    };
    expect_error(status("ops", "wrong"), 401, 40101);
    let (s, j) = answer(status("ops", "pa55"));
    assert_eq!(s, 200, "{j}");
    assert!(j["partitions"].is_array(), "{j}");
    // Prometheus scrapes without credentials.
    assert_eq!(gw.get("/metrics").status(), 200);

    let tier = |extra: &[&str], env: Option<&str>| {
        let mut c = std::process::Command::new(common::strata_bin());
        c.args(["tier", "status", "--http", &gw.b.http, "--topic", "t"])
            .args(extra)
            .env_remove("STRATA_HTTP_AUTH");
        if let Some(v) = env {
            c.env("STRATA_HTTP_AUTH", v);
        }
        let out = c.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, _, err) = tier(&[], None);
    assert!(!ok);
    assert!(err.contains("401") && err.contains("--http-auth"), "{err}");
    let (ok, _, err) = tier(&["--http-auth", "basic:ops:nope"], None);
    assert!(!ok);
    assert!(err.contains("refused the credentials"), "{err}");
    for (extra, env) in [
        (&["--http-auth", "basic:ops:pa55"][..], None),
        (&[][..], Some("basic:ops:pa55")),
    ] {
        let (ok, out, err) = tier(extra, env);
        assert!(ok, "{extra:?} {env:?}: {err}");
        assert!(
            out.contains("cache hit ratio") && out.lines().any(|l| l.starts_with("t ")),
            "{out}"
        );
    }
}

#[test]
fn an_idempotency_key_retry_appends_once() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "idem", 1, &[]);
    let send = |key: &str| {
        gw.http
            .post(gw.url("/topics/idem"))
            .header("Content-Type", JSON_V2)
            .header("Idempotency-Key", key)
            .body(r#"{"records":[{"value":"a"},{"value":"b"}]}"#)
            .send()
            .unwrap()
    };
    let first = send("order-17");
    assert_eq!(first.status(), 200);
    let first = first.bytes().unwrap();
    // Retries, some concurrent: the same answer, nothing appended again.
    let retries: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| send("order-17").bytes().unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        retries.iter().all(|r| *r == first),
        "{retries:?} vs {first:?}"
    );
    let (_, j) = answer(gw.get("/topics/idem/partitions/0/records"));
    assert_eq!(j["high_watermark"], 2, "{j}");
    // Another key appends again.
    assert_eq!(send("order-18").status(), 200);
    let (_, j) = answer(gw.get("/topics/idem/partitions/0/records"));
    assert_eq!(j["high_watermark"], 4, "{j}");
    // The same key with a different request is refused.
    let r = gw
        .http
        .post(gw.url("/topics/idem"))
        .header("Content-Type", JSON_V2)
        .header("Idempotency-Key", "order-17")
        .body(r#"{"records":[{"value":"c"}]}"#)
        .send()
        .unwrap();
    expect_error(r, 422, 42206);
}

#[test]
fn schemathesis_finds_no_server_errors() {
    // The fuzzer creates topics of any size it likes: the broker's own partition limit
    // keeps that small (a larger topic is its 400, as for any client).
    let gw = Gw::start(&[
        "--http-max-consumers",
        "10",
        "--max-partitions-per-broker",
        "64",
    ]);
    create_topic(&gw.b.kafka, "t", 2, &[]);
    let url = gw.url("/openapi.json");
    let dir = tempfile::tempdir().unwrap();
    // A stream never ends, so a request/response fuzzer cannot check it; its errors are
    // covered above.
    // Through the interpreter scripts/deps installed it for, whether or not pip's script
    // directory is on PATH.
    let out = std::process::Command::new("python3")
        .current_dir(dir.path())
        .args([
            "-m",
            "schemathesis.cli",
            "run",
            &url,
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "15",
            // Long polls wait up to 30 s when asked to.
            "--request-timeout",
            "60",
            "--exclude-path",
            "/consumers/{group}/stream",
            "--seed",
            "7",
            "--generation-database",
            "none",
            "--no-color",
        ])
        .output()
        .expect("schemathesis is not installed: run scripts/deps");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis failed:\n{text}");
    assert!(text.contains("passed"), "{text}");
}

/// Keyed records without a partition land where Kafka's default partitioner puts them
/// (murmur2 of the key, as a Java client or librdkafka's murmur2_random), and one key's
/// records keep their order.
#[test]
fn keyed_records_land_where_a_kafka_client_puts_them() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "keyed", 5, &[]);
    let keys: Vec<String> = (0..40).map(|i| format!("user-{i}")).collect();
    let records: Vec<Value> = (0..120)
        .map(|i| json!({"key": b64(keys[i % 40].as_bytes()), "value": b64(format!("{i}").as_bytes())}))
        .collect();
    let (s, j) = answer(gw.post(
        "/topics/keyed",
        BINARY_V2,
        json!({ "records": records }).to_string(),
    ));
    assert_eq!(s, 200, "{j}");
    let offs = j["offsets"].as_array().unwrap();
    assert_eq!(offs.len(), 120);
    let mut last: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for (i, o) in offs.iter().enumerate() {
        let key = keys[i % 40].as_str();
        let (p, off) = (
            o["partition"].as_i64().unwrap(),
            o["offset"].as_i64().unwrap(),
        );
        assert_eq!(
            p,
            i64::from(strata_proto::partitioner::partition_for_key(
                key.as_bytes(),
                5
            )),
            "key {key}"
        );
        if let Some((lp, lo)) = last.insert(key, (p, off)) {
            assert!(lp == p && lo < off, "key {key}: {lp}/{lo} then {p}/{off}");
        }
    }
    // librdkafka with murmur2_random agrees.
    let (p, d) = producer(&gw.b.kafka, &[("partitioner", "murmur2_random")]);
    for k in &keys {
        p.send(BaseRecord::to("keyed").key(k.as_str()).payload("rd"))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
    assert_eq!(d.acked.lock().unwrap().len(), 40);
    let got = kafka_read_all(&gw.b.kafka, "keyed", 5, 160);
    for r in got.iter().filter(|r| r.value.as_deref() == Some(b"rd")) {
        let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
        assert_eq!(
            i64::from(r.partition),
            last[key.as_str()].0,
            "librdkafka put {key} elsewhere"
        );
    }
}

/// A request bigger than the topic's max.message.bytes is cut into batches the broker
/// takes (the producer learns the limit from MESSAGE_TOO_LARGE), in order; a record that
/// is too large on its own fails alone.
#[test]
fn a_request_over_max_message_bytes_is_split_and_kept_in_order() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "tiny", 1, &[("max.message.bytes", "4096")]);
    let value = |i: usize| format!("{i:04}-{}", "x".repeat(295));
    let records: Vec<Value> = (0..60)
        .map(|i| json!({"value": b64(value(i).as_bytes())}))
        .collect();
    let (s, j) = answer(gw.post(
        "/topics/tiny",
        BINARY_V2,
        json!({ "records": records }).to_string(),
    ));
    assert_eq!(s, 200, "{j}");
    let offsets: Vec<i64> = j["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            assert!(o["error_code"].is_null(), "{o}");
            o["offset"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(offsets, (0..60).collect::<Vec<i64>>());

    // One record over the limit among small ones: it alone fails.
    let mixed = json!({"records": [
        {"value": b64(b"before")},
        {"value": b64(&vec![b'y'; 5000])},
        {"value": b64(b"after")},
    ]});
    let (s, j) = answer(gw.post("/topics/tiny", BINARY_V2, mixed.to_string()));
    assert_eq!(s, 200, "{j}");
    let o = j["offsets"].as_array().unwrap();
    assert!(
        o[0]["error_code"].is_null() && o[2]["error_code"].is_null(),
        "{j}"
    );
    assert_eq!(o[1]["error_code"].as_u64(), Some(41302), "{j}");

    let got = kafka_read_all(&gw.b.kafka, "tiny", 1, 62);
    let values: Vec<Vec<u8>> = got.iter().map(|r| r.value.clone().unwrap()).collect();
    let mut want: Vec<Vec<u8>> = (0..60).map(|i| value(i).into_bytes()).collect();
    want.push(b"before".to_vec());
    want.push(b"after".to_vec());
    assert_eq!(values, want);
}

/// The gateway on broker 1 produces while the leaders on brokers 2 and 3 are killed
/// with -9 and restarted: every record is answered with an offset (an election is a
/// pause, not an error, as for a Kafka client), every one is at its offset, and none is
/// in the log twice (the gateway's producer is idempotent across retries and leader
/// changes).
#[test]
fn produce_over_http_survives_leader_kills_without_loss_or_duplicates() {
    use common::cluster::Cluster;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let mut c = Cluster::start(3, 3, &[]);
    let topic = "ha";
    let bootstrap = c.bootstrap();
    common::kafka::create_topic_rf(&bootstrap, topic, 3, 3, &[("min.insync.replicas", "2")]);
    let full_isr = |parts: &[common::cluster::PartitionView]| {
        parts.iter().all(|(l, _, isr)| *l > 0 && isr.len() == 3)
    };
    c.wait_for(topic, "a full ISR", Duration::from_secs(30), full_isr);
    let http = c.brokers[0].http.clone();
    let client = Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let t0 = Instant::now();
    while client
        .get(format!("http://{http}/readyz"))
        .send()
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "gateway never ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let acked_count = Arc::new(AtomicUsize::new(0));
    let sender = {
        let (stop, acked_count) = (stop.clone(), acked_count.clone());
        std::thread::spawn(move || {
            // (value, partition, offset) of every record answered with an offset.
            let mut acked: Vec<(String, i64, i64)> = Vec::new();
            let mut failed = 0usize;
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let values: Vec<String> = (i..i + 20).map(|n| format!("v{n}")).collect();
                i += 20;
                let body = json!({"records": values.iter().enumerate()
                    .map(|(k, v)| json!({"key": format!("k{}", k % 7), "value": v}))
                    .collect::<Vec<_>>()});
                let r = client
                    .post(format!("http://{http}/topics/{topic}"))
                    .header("Content-Type", JSON_V2)
                    .body(body.to_string())
                    .send()
                    .expect("the gateway answers");
                let (s, j) = answer(r);
                match s {
                    200 => {
                        for (v, o) in values.iter().zip(j["offsets"].as_array().unwrap()) {
                            match (o["partition"].as_i64(), o["offset"].as_i64()) {
                                (Some(p), Some(off)) if o["error_code"].is_null() => {
                                    acked.push((format!("\"{v}\""), p, off));
                                }
                                _ => failed += 1,
                            }
                        }
                    }
                    503 => failed += values.len(),
                    other => panic!("unexpected status {other}: {j}"),
                }
                acked_count.store(acked.len(), Ordering::Relaxed);
            }
            (acked, failed)
        })
    };
    let wait_progress = |what: &str| {
        let before = acked_count.load(Ordering::Relaxed);
        let t0 = Instant::now();
        while acked_count.load(Ordering::Relaxed) < before + 400 {
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "no produce progress over HTTP {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_progress("before the first kill");
    let mut leader_kills = 0;
    for round in 0..4 {
        let parts = c.wait_for(topic, "a full ISR", Duration::from_secs(90), full_isr);
        // A leader other than broker 1 (whose process serves the gateway), alternating.
        let leaders: Vec<i32> = parts
            .iter()
            .map(|(l, _, _)| *l)
            .filter(|l| *l != 1)
            .collect();
        let victim = leaders
            .iter()
            .copied()
            .find(|l| *l == 2 + round % 2)
            .or(leaders.first().copied())
            .unwrap_or(2 + round % 2);
        leader_kills += usize::from(leaders.contains(&victim));
        eprintln!("round {round}: kill -9 broker {victim}; partitions {parts:?}");
        c.broker(victim).kill9();
        std::thread::sleep(Duration::from_millis(500));
        wait_progress(&format!("with broker {victim} down (round {round})"));
        c.broker(victim).restart();
        wait_progress(&format!("after restarting broker {victim} (round {round})"));
    }
    assert!(leader_kills >= 2, "only {leader_kills} kills hit a leader");
    stop.store(true, Ordering::Relaxed);
    let (acked, failed) = sender.join().expect("sender");
    c.wait_for(topic, "a full ISR", Duration::from_secs(90), full_isr);

    let total: usize = (0..3)
        .map(|p| {
            let (lo, hi) = client_config(&bootstrap, &[])
                .create::<BaseConsumer>()
                .unwrap()
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap();
            (hi - lo) as usize
        })
        .sum();
    let got = common::kafka::consume_all(&bootstrap, topic, 3, total, Duration::from_secs(60));
    assert_eq!(got.len(), total);
    let mut at: BTreeMap<(i64, i64), String> = BTreeMap::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for r in &got {
        let v = String::from_utf8(r.value.clone()).unwrap();
        assert!(seen.insert(v.clone()), "{v} is in the log twice");
        at.insert((i64::from(r.partition), r.offset), v);
    }
    for (v, p, off) in &acked {
        assert_eq!(
            at.get(&(*p, *off)),
            Some(v),
            "acknowledged {v} at {p}/{off}"
        );
    }
    assert_eq!(
        failed, 0,
        "records answered with an error across leader kills"
    );
    assert_eq!(got.len(), acked.len());
    eprintln!(
        "{} records acknowledged over HTTP and found at their offsets, {failed} answered with an error, {} in the log, none twice",
        acked.len(),
        got.len()
    );
}
