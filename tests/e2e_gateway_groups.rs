//! The REST gateway's consumers against the real `strata` binary: an HTTP consumer
//! instance sharing a group with a Kafka consumer (rdkafka), topic-pattern subscriptions,
//! commits, server-sent events that commit acknowledged offsets, and nacked records moved
//! to the dead-letter topic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::gateway::{
    BINARY_V2, Gw, Rec, Sse, V2, answer, b64, expect_error, kafka_read_all, rec_of, rec_of_json,
    unb64,
};
use common::kafka::{client_config, create_topic, producer};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use serde_json::json;

#[test]
fn an_http_instance_and_a_kafka_consumer_share_a_group() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "shared", 4, &[]);
    let (s, j) = answer(gw.post(
        "/consumers/grp",
        V2,
        r#"{"name":"web","auto.offset.reset":"earliest"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    let base = "/consumers/grp/instances/web";
    assert_eq!(
        gw.post(
            &format!("{base}/subscription"),
            V2,
            r#"{"topics":["shared"]}"#
        )
        .status(),
        204
    );
    let kc: BaseConsumer = client_config(
        &gw.b.kafka,
        &[
            ("group.id", "grp"),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
        ],
    )
    .create()
    .unwrap();
    kc.subscribe(&["shared"]).unwrap();
    let mut http_got: Vec<Rec> = Vec::new();
    let mut kafka_got: Vec<Rec> = Vec::new();
    let poll_both = |http_got: &mut Vec<Rec>, kafka_got: &mut Vec<Rec>| {
        if let Some(m) = kc.poll(Duration::from_millis(100)) {
            kafka_got.push(rec_of(&m.unwrap()));
        }
        let (s, j) = answer(gw.get(&format!("{base}/records?timeout=100")));
        assert_eq!(s, 200, "{j}");
        http_got.extend(j.as_array().unwrap().iter().map(rec_of_json));
    };
    // Both members poll until the group settles with each holding partitions.
    let t0 = Instant::now();
    let (web, kafka) = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the group never settled"
        );
        poll_both(&mut http_got, &mut kafka_got);
        let (_, j) = answer(gw.get(&format!("{base}/assignments")));
        let web: BTreeSet<i32> = j["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["partition"].as_i64().unwrap() as i32)
            .collect();
        let kafka: BTreeSet<i32> = kc
            .assignment()
            .unwrap()
            .elements()
            .iter()
            .map(|e| e.partition())
            .collect();
        if !web.is_empty()
            && !kafka.is_empty()
            && web.len() + kafka.len() == 4
            && web.is_disjoint(&kafka)
        {
            break (web, kafka);
        }
    };
    // Records on every partition (keys chosen so each partition gets some).
    let (p, _) = producer(&gw.b.kafka, &[("acks", "all")]);
    let mut n = 0;
    for part in 0..4 {
        for i in 0..10 {
            let v = format!("{part}-{i}");
            p.send(
                BaseRecord::<(), _>::to("shared")
                    .partition(part)
                    .payload(&v),
            )
            .unwrap();
            n += 1;
        }
    }
    p.flush(Duration::from_secs(10)).unwrap();
    let t0 = Instant::now();
    while http_got.len() + kafka_got.len() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "read {} of {n}",
            http_got.len() + kafka_got.len()
        );
        poll_both(&mut http_got, &mut kafka_got);
    }
    for _ in 0..3 {
        poll_both(&mut http_got, &mut kafka_got);
    }
    let parts = |v: &[Rec]| v.iter().map(|r| r.partition).collect::<BTreeSet<i32>>();
    assert_eq!(
        parts(&http_got),
        web,
        "the HTTP member read only its partitions"
    );
    assert_eq!(
        parts(&kafka_got),
        kafka,
        "the Kafka member read only its partitions"
    );
    let mut all: Vec<(i32, i64)> = http_got
        .iter()
        .chain(&kafka_got)
        .map(|r| (r.partition, r.offset))
        .collect();
    all.sort();
    let expected: Vec<(i32, i64)> = (0..4).flat_map(|p| (0..10).map(move |o| (p, o))).collect();
    assert_eq!(all, expected, "every record exactly once");
}

#[test]
fn a_stream_delivers_live_records_and_commits_what_the_client_acknowledges() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "live", 1, &[]);
    let sse = Sse::open(
        &gw,
        "/consumers/sse-group/stream?topic=live&auto.offset.reset=earliest",
    );
    let (event, _, session) = sse.next();
    assert_eq!(event, "session", "{session}");
    let ack_uri = session["ack_uri"].as_str().unwrap().to_string();
    // Records produced while the stream is open arrive as events.
    let (p, _) = producer(&gw.b.kafka, &[("acks", "all")]);
    for i in 0..5 {
        let v = format!("live-{i}");
        p.send(BaseRecord::<(), _>::to("live").payload(&v)).unwrap();
        p.flush(Duration::from_secs(10)).unwrap();
        let (event, id, rec) = sse.next();
        assert_eq!(event, "record", "{rec}");
        assert_eq!(id, format!("live/0/{i}"));
        assert_eq!(unb64(rec["value"].as_str().unwrap()), v.as_bytes());
    }
    // The client processed up to offset 2.
    let r = gw.post(
        &ack_uri,
        "application/json",
        r#"{"offsets":[{"topic":"live","partition":0,"offset":2}]}"#,
    );
    assert_eq!(r.status(), 204, "{:?}", r.text());
    sse.close();
    // The stream's member leaves once the connection is gone (the next write fails,
    // at the latest the keep-alive); then its session is gone too.
    let t0 = Instant::now();
    loop {
        let r = gw.post(
            &ack_uri,
            "application/json",
            r#"{"offsets":[{"topic":"live","partition":0,"offset":2}]}"#,
        );
        if r.status() == 404 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "the session outlived its connection"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A new member of the group starts after the acknowledged record.
    let c: BaseConsumer = client_config(
        &gw.b.kafka,
        &[("group.id", "sse-group"), ("auto.offset.reset", "earliest")],
    )
    .create()
    .unwrap();
    c.subscribe(&["live"]).unwrap();
    let t0 = Instant::now();
    let first = loop {
        assert!(t0.elapsed() < Duration::from_secs(60), "nothing read");
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            break m.unwrap().offset();
        }
    };
    assert_eq!(first, 3);
}

/// A v2 instance subscribed with Confluent's `topic_pattern` reads the topics whose
/// whole name matches, and no other; a bad pattern or both forms at once get 422.
#[test]
fn a_consumer_instance_subscribes_to_a_topic_pattern() {
    let gw = Gw::start(&[]);
    for t in ["pat-a", "pat-b", "other-pat-c"] {
        create_topic(&gw.b.kafka, t, 1, &[]);
        let (s, j) = answer(gw.post(
            &format!("/topics/{t}"),
            BINARY_V2,
            json!({"records": [{"value": b64(t.as_bytes())}]}).to_string(),
        ));
        assert_eq!(s, 200, "{j}");
    }
    let (s, j) = answer(gw.post(
        "/consumers/g-pat",
        V2,
        r#"{"name":"i1","format":"binary","auto.offset.reset":"earliest"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    let base = "/consumers/g-pat/instances/i1";
    let sub = format!("{base}/subscription");
    expect_error(
        gw.post(&sub, V2, r#"{"topics":["pat-a"],"topic_pattern":"pat-.*"}"#),
        422,
        42201,
    );
    expect_error(
        gw.post(&sub, V2, r#"{"topic_pattern":"pat-("}"#),
        422,
        42202,
    );
    expect_error(gw.post(&sub, V2, r#"{}"#), 422, 42201);
    assert_eq!(
        gw.post(&sub, V2, r#"{"topic_pattern":"pat-.*"}"#).status(),
        204
    );
    let mut got: BTreeSet<(String, Vec<u8>)> = BTreeSet::new();
    let t0 = Instant::now();
    // Until both matching records are in, then two more seconds for anything else.
    let mut settled: Option<Instant> = None;
    while settled.is_none_or(|t| t.elapsed() < Duration::from_secs(2)) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "read only {got:?} through the pattern"
        );
        for r in gw.poll_binary(base) {
            got.insert((
                r["topic"].as_str().unwrap().to_string(),
                unb64(r["value"].as_str().unwrap()),
            ));
        }
        if settled.is_none() && got.len() >= 2 {
            settled = Some(Instant::now());
        }
    }
    let want: BTreeSet<(String, Vec<u8>)> = ["pat-a", "pat-b"]
        .iter()
        .map(|t| (t.to_string(), t.as_bytes().to_vec()))
        .collect();
    assert_eq!(got, want);
    let (s, j) = answer(gw.get(&sub));
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["topics"], json!(["pat-a", "pat-b"]));
}

/// A commit without offsets commits everything the instance has read, as Confluent's
/// REST proxy does: with the body `{}` as without a body.
#[test]
fn a_commit_without_offsets_commits_everything_read() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "done", 2, &[]);
    let base = "/consumers/g-done/instances/i1";
    let (s, j) = answer(gw.post(
        "/consumers/g-done",
        V2,
        r#"{"name":"i1","format":"binary","auto.offset.reset":"earliest"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert_eq!(
        gw.post(
            &format!("{base}/subscription"),
            V2,
            r#"{"topics":["done"]}"#
        )
        .status(),
        204
    );
    let committed = || -> BTreeMap<i64, i64> {
        let r = gw
            .http
            .get(gw.url(&format!("{base}/offsets")))
            .header("Content-Type", V2)
            .body(
                r#"{"partitions":[{"topic":"done","partition":0},{"topic":"done","partition":1}]}"#,
            )
            .send()
            .unwrap();
        let (s, j) = answer(r);
        assert_eq!(s, 200, "{j}");
        j["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["partition"].as_i64().unwrap(),
                    o["offset"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let mut read = 0;
    for (round, body) in [(1usize, Some("{}")), (2, None)] {
        // Three more records in each partition, read over HTTP.
        let (p, d) = producer(&gw.b.kafka, &[("acks", "all")]);
        for i in 0..6 {
            p.send(
                BaseRecord::<(), str>::to("done")
                    .partition(i % 2)
                    .payload("x"),
            )
            .unwrap();
        }
        p.flush(Duration::from_secs(10)).unwrap();
        assert_eq!(d.acked.lock().unwrap().len(), 6);
        let t0 = Instant::now();
        while read < 6 * round {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "read {read} of {}",
                6 * round
            );
            read += gw.poll_binary(base).len();
        }
        let mut r = gw
            .http
            .post(gw.url(&format!("{base}/offsets")))
            .header("Content-Type", V2);
        if let Some(b) = body {
            r = r.body(b);
        }
        let r = r.send().unwrap();
        assert_eq!(r.status(), 204, "{body:?}: {:?}", r.text());
        let n = 3 * round as i64;
        assert_eq!(
            committed(),
            BTreeMap::from([(0, n), (1, n)]),
            "{body:?}: the group resumes after everything read"
        );
    }
}

/// A poison record rejected over HTTP (`POST .../nack` with a reason), by a v2 consumer
/// instance and by an SSE stream: it lands in `{topic}.dlq` byte for byte with its
/// headers and headers naming its topic, partition, offset and the reason; the group
/// commits past it, so the consumer moves on; a nack of an offset past the partition's
/// end is 416, one without a reason 422, and nothing is committed for them.
#[test]
fn a_nacked_record_lands_in_the_dead_letter_topic_and_the_group_moves_on() {
    let gw = Gw::start(&[]);
    create_topic(&gw.b.kafka, "orders", 1, &[]);
    let (p, d) = producer(&gw.b.kafka, &[("acks", "all")]);
    for i in 0..6 {
        let v = format!("order-{i}");
        let k = format!("k{i}");
        p.send(
            BaseRecord::<str, str>::to("orders")
                .key(&k)
                .payload(&v)
                .headers(
                    rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                        key: "trace",
                        value: Some(&format!("t{i}")),
                    }),
                ),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(d.acked.lock().unwrap().len(), 6);

    let base = "/consumers/g-dlq/instances/i1";
    let (s, j) = answer(gw.post(
        "/consumers/g-dlq",
        V2,
        r#"{"name":"i1","format":"binary","auto.offset.reset":"earliest"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    let r = gw.post(
        &format!("{base}/subscription"),
        V2,
        r#"{"topics":["orders"]}"#,
    );
    assert_eq!(r.status(), 204);
    let mut read = Vec::new();
    let t0 = Instant::now();
    while read.len() < 6 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "read {}",
            read.len()
        );
        read.extend(gw.poll_binary(base));
    }
    // Record 2 is poison.
    let nack = format!("{base}/nack");
    let (s, j) = answer(gw.post(
        &nack,
        V2,
        r#"{"topic":"orders","partition":0,"offset":2,"reason":"cannot parse the order"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["topic"], "orders.dlq");
    assert_eq!(j["committed"], 3);
    // Refused: no such record, no reason.
    expect_error(
        gw.post(
            &nack,
            V2,
            r#"{"topic":"orders","partition":0,"offset":99,"reason":"x"}"#,
        ),
        416,
        41601,
    );
    expect_error(
        gw.post(
            &nack,
            V2,
            r#"{"topic":"orders","partition":0,"offset":4,"reason":" "}"#,
        ),
        422,
        42202,
    );

    // An SSE stream of another group rejects record 4.
    let sse = Sse::open(
        &gw,
        "/consumers/g-dlq-sse/stream?topic=orders&auto.offset.reset=earliest",
    );
    let (event, _, session) = sse.next();
    assert_eq!(event, "session", "{session}");
    for _ in 0..6 {
        assert_eq!(sse.next().0, "record");
    }
    let (s, j) = answer(gw.post(
        session["nack_uri"].as_str().unwrap(),
        "application/json",
        r#"{"topic":"orders","partition":0,"offset":4,"reason":"amount is negative"}"#,
    ));
    assert_eq!(s, 200, "{j}");
    assert_eq!(j["committed"], 5);
    sse.close();

    // The dead letters: the records themselves, with where they came from and why.
    let dead = kafka_read_all(&gw.b.kafka, "orders.dlq", 1, 2);
    for (r, (offset, reason)) in dead
        .iter()
        .zip([(2, "cannot parse the order"), (4, "amount is negative")])
    {
        assert_eq!(
            r.value.as_deref(),
            Some(format!("order-{offset}").as_bytes())
        );
        assert_eq!(r.key.as_deref(), Some(format!("k{offset}").as_bytes()));
        let headers = &r.headers;
        let h = |k: &str| {
            headers
                .iter()
                .find(|(n, _)| n == k)
                .and_then(|(_, v)| v.clone())
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(h("trace"), Some(format!("t{offset}")));
        assert_eq!(h("strata.dlq.topic").as_deref(), Some("orders"));
        assert_eq!(h("strata.dlq.partition").as_deref(), Some("0"));
        assert_eq!(h("strata.dlq.offset"), Some(offset.to_string()));
        assert_eq!(h("strata.dlq.reason").as_deref(), Some(reason));
    }
    // The groups moved on past their poison records.
    let committed = |group: &str| {
        let c: BaseConsumer = client_config(&gw.b.kafka, &[("group.id", group)])
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition("orders", 0);
        c.committed_offsets(tpl, Duration::from_secs(20))
            .unwrap()
            .elements()[0]
            .offset()
            .to_raw()
            .unwrap()
    };
    assert_eq!(committed("g-dlq"), 3);
    assert_eq!(committed("g-dlq-sse"), 5);
}
