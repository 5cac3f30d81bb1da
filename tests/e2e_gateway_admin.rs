//! The REST gateway's v3 admin API against the real `strata` binary (reqwest for HTTP,
//! rdkafka for the Kafka side): a real topic and group described in Confluent's shapes,
//! and topics created, altered and deleted with the broker's own refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::gateway::{Gw, answer, expect_error};
use common::kafka::{client_config, create_topic, producer};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, Producer};

/// The v3 admin read side against a real broker, in Confluent's shapes: the topic, its
/// replication factor and partitions with their leaders, its configs as the broker
/// describes them (an override is not a default; a default is), and an rdkafka group:
/// its state, its member's assignment, and its lag per partition and in sum.
#[test]
fn v3_admin_describes_a_real_topic() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "shapes", 3, &[("retention.ms", "3600000")]);
    let (s, j) = answer(gw.get("/v3/clusters"));
    assert_eq!(s, 200, "{j}");
    let cluster = j["data"][0]["cluster_id"].as_str().unwrap().to_string();
    let base = format!("/v3/clusters/{cluster}/topics");
    let (s, j) = answer(gw.get(&base));
    assert_eq!(s, 200, "{j}");
    let t = j["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic_name"] == "shapes")
        .unwrap_or_else(|| panic!("shapes in {j}"))
        .clone();
    assert_eq!(
        (
            t["partitions_count"].as_i64(),
            t["replication_factor"].as_i64()
        ),
        (Some(3), Some(1)),
        "{t}"
    );
    let (s, j) = answer(gw.get(&format!("{base}/shapes/partitions")));
    assert_eq!(s, 200, "{j}");
    let parts = j["data"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{j}");
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(p["partition_id"], i as i64, "{j}");
        assert!(
            p["leader"]["related"]
                .as_str()
                .unwrap()
                .ends_with("/replicas/1"),
            "{j}"
        );
    }
    let (s, j) = answer(gw.get(&format!("{base}/shapes/configs")));
    assert_eq!(s, 200, "{j}");
    let config = |name: &str| {
        j["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {j}"))
            .clone()
    };
    let r = config("retention.ms");
    assert_eq!(
        (r["value"].as_str(), r["is_default"].as_bool()),
        (Some("3600000"), Some(false)),
        "{r}"
    );
    assert_eq!(r["source"], "DYNAMIC_TOPIC_CONFIG", "{r}");
    let c = config("cleanup.policy");
    assert_eq!(
        (c["value"].as_str(), c["is_default"].as_bool()),
        (Some("delete"), Some(true)),
        "{c}"
    );
    expect_error(gw.get(&format!("{base}/missing")), 404, 40401);
    expect_error(gw.get(&format!("{base}/shapes/partitions/9")), 404, 40402);

    // A Kafka consumer group reads 30 records and commits; 5 more arrive unread. Each
    // record names its partition: keyless records go where librdkafka's sticky
    // partitioner puts them, all in one partition when they are sent within its linger.
    let (p, _) = producer(&gw.b.kafka, &[("acks", "all")]);
    let send = |n: usize| {
        for i in 0..n {
            p.send(
                BaseRecord::<(), _>::to("shapes")
                    .partition((i % 3) as i32)
                    .payload(&format!("v{i}")),
            )
            .unwrap();
        }
        p.flush(Duration::from_secs(30)).unwrap();
    };
    send(30);
    let c: BaseConsumer = client_config(
        &gw.b.kafka,
        &[
            ("group.id", "watchers"),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
        ],
    )
    .create()
    .unwrap();
    c.subscribe(&["shapes"]).unwrap();
    let mut read = 0;
    let t0 = Instant::now();
    while read < 30 {
        assert!(t0.elapsed() < Duration::from_secs(60), "read {read} of 30");
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            m.unwrap();
            read += 1;
        }
    }
    c.commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
        .unwrap();
    send(5);
    let groups = format!("/v3/clusters/{cluster}/consumer-groups");
    let (s, j) = answer(gw.get(&groups));
    assert_eq!(s, 200, "{j}");
    let g = j["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["consumer_group_id"] == "watchers")
        .unwrap_or_else(|| panic!("watchers in {j}"))
        .clone();
    assert_eq!(
        (g["state"].as_str(), g["is_simple"].as_bool()),
        (Some("STABLE"), Some(false)),
        "{g}"
    );
    let (s, j) = answer(gw.get(&format!("{groups}/watchers/consumers")));
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["data"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(
        j["data"][0]["assignments"].as_array().unwrap().len(),
        3,
        "{j}"
    );
    let member = j["data"][0]["consumer_id"].as_str().unwrap().to_string();
    let (s, j) = answer(gw.get(&format!("{groups}/watchers/lags")));
    assert_eq!(s, 200, "{j}");
    let lags = j["data"].as_array().unwrap();
    assert_eq!(lags.len(), 3, "{j}");
    assert!(
        lags.iter().all(|l| l["consumer_id"] == member.as_str()),
        "{j}"
    );
    let total: i64 = lags.iter().map(|l| l["lag"].as_i64().unwrap()).sum();
    assert_eq!(total, 5, "{j}");
    let (s, j) = answer(gw.get(&format!("{groups}/watchers/lag-summary")));
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["total_lag"], 5, "{j}");
    assert_eq!(j["max_lag_consumer_id"], member.as_str(), "{j}");
    let (s, j) = answer(gw.get(&format!("/v3/clusters/{cluster}/brokers")));
    assert_eq!(
        (s, j["data"][0]["broker_id"].as_i64()),
        (200, Some(1)),
        "{j}"
    );
    drop(c);
}

/// The v3 admin write side against a real broker, checked with kafka-python's admin
/// client (not the gateway's librdkafka): a topic created over HTTP exists with its
/// partitions and configs, configs change one at a time and in a batch (the others keep
/// their values), the broker's refusals come back as 400 with its reason, and a
/// deleted topic is gone.
#[test]
fn v3_admin_creates_alters_and_deletes_a_real_topic() {
    let gw = Gw::start(&[]);
    let (_, j) = answer(gw.get("/v3/clusters"));
    let cluster = j["data"][0]["cluster_id"].as_str().unwrap().to_string();
    let base = format!("/v3/clusters/{cluster}/topics");
    let (s, j) = answer(gw.post(
        &base,
        "application/json",
        r#"{"topic_name":"made","partitions_count":4,"replication_factor":1,
            "configs":[{"name":"retention.ms","value":"86400000"}]}"#,
    ));
    assert_eq!(s, 201, "{j}");
    assert_eq!(
        (j["topic_name"].as_str(), j["partitions_count"].as_i64()),
        (Some("made"), Some(4)),
        "{j}"
    );
    let bootstrap = gw.b.kafka.clone();
    let described = || common::python_json("admin_configs.py", &[&bootstrap, "topic", "made"]);
    let v = described();
    assert_eq!(v["retention.ms"], "86400000", "{v}");
    // A record goes in and out of all four partitions.
    let (p, _) = producer(&gw.b.kafka, &[("acks", "all")]);
    for i in 0..4 {
        p.send(BaseRecord::<(), _>::to("made").partition(i).payload("x"))
            .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();

    // Validate only creates nothing; the broker's refusals are 400 with its reason.
    let (s, j) = answer(gw.post(
        &base,
        "application/json",
        r#"{"topic_name":"dry","partitions_count":2,"validate_only":true}"#,
    ));
    assert_eq!(s, 201, "{j}");
    expect_error(gw.get(&format!("{base}/dry")), 404, 40401);
    let j = expect_error(
        gw.post(&base, "application/json", r#"{"topic_name":"made"}"#),
        400,
        40002,
    );
    assert!(j["message"].as_str().unwrap().contains("exists"), "{j}");
    expect_error(
        gw.post(
            &base,
            "application/json",
            r#"{"topic_name":"wide","replication_factor":3}"#,
        ),
        400,
        40002,
    );
    expect_error(
        gw.post(
            &base,
            "application/json",
            r#"{"topic_name":"odd","configs":[{"name":"no.such.config","value":"1"}]}"#,
        ),
        400,
        40002,
    );

    // One config set; then a batch removes retention.ms and sets another; cleanup.policy
    // keeps its value.
    let put = gw
        .http
        .put(gw.url(&format!("{base}/made/configs/cleanup.policy")))
        .header("Content-Type", "application/json")
        .body(r#"{"value":"delete,compact"}"#)
        .send()
        .unwrap();
    assert_eq!(put.status().as_u16(), 204);
    let v = described();
    assert_eq!(
        (v["cleanup.policy"].as_str(), v["retention.ms"].as_str()),
        (Some("delete,compact"), Some("86400000")),
        "{v}"
    );
    let r = gw.post(
        &format!("{base}/made/configs:alter"),
        "application/json",
        r#"{"data":[{"name":"retention.ms","operation":"DELETE"},
                     {"name":"max.message.bytes","value":"65536"}]}"#,
    );
    assert_eq!(r.status().as_u16(), 204);
    let v = described();
    assert_eq!(
        (
            v["cleanup.policy"].as_str(),
            v["retention.ms"].as_str(),
            v["max.message.bytes"].as_str()
        ),
        (Some("delete,compact"), Some("604800000"), Some("65536")),
        "{v}"
    );
    let (s, j) = answer(gw.get(&format!("{base}/made/configs/max.message.bytes")));
    assert_eq!((s, j["value"].as_str()), (200, Some("65536")), "{j}");
    let r = gw
        .http
        .delete(gw.url(&format!("{base}/made/configs/cleanup.policy")))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(described()["cleanup.policy"], "delete");
    // A value the broker refuses changes nothing.
    expect_error(
        gw.post(
            &format!("{base}/made/configs:alter"),
            "application/json",
            r#"{"data":[{"name":"max.message.bytes","value":"1"},
                         {"name":"segment.bytes","value":"12"}]}"#,
        ),
        400,
        40002,
    );
    assert_eq!(described()["max.message.bytes"], "65536");

    // Deleted: gone for the gateway and for a Kafka client.
    let r = gw
        .http
        .delete(gw.url(&format!("{base}/made")))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    expect_error(gw.get(&format!("{base}/made")), 404, 40401);
    let c: BaseConsumer = client_config(&gw.b.kafka, &[]).create().unwrap();
    let t0 = Instant::now();
    loop {
        let md = c.fetch_metadata(None, Duration::from_secs(10)).unwrap();
        if md.topics().iter().all(|t| t.name() != "made") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "made still listed");
        std::thread::sleep(Duration::from_millis(200));
    }
    expect_error(
        gw.http
            .delete(gw.url(&format!("{base}/made")))
            .send()
            .unwrap(),
        404,
        40401,
    );
}
