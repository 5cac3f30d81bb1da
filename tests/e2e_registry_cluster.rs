//! The schema registry on a three-broker cluster (issue 37): every broker answers, writes
//! made through any of them go through the one writer (the leader of `_schemas`), and
//! registrations survive kill -9 of the writer: ids stay unique, no version is lost.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Cluster, metadata};
use serde_json::{Value, json};

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Version `n` of subject `s`'s schema: a record with fields f0..=fn, each after the
/// first with a default (so every version is BACKWARD compatible with the one before).
fn schema(s: &str, n: usize) -> String {
    let mut fields = vec![json!({"name": "f0", "type": "long"})];
    for i in 1..=n {
        fields.push(json!({"name": format!("f{i}"), "type": "string", "default": ""}));
    }
    json!({"type": "record", "name": s.replace('-', "_"), "fields": fields}).to_string()
}

/// Registers until a registry answers 200 (a 503 while the writer moves is retried,
/// as Confluent's clients retry); the id.
fn register(
    c: &reqwest::blocking::Client,
    registries: &[String],
    subject: &str,
    text: &str,
) -> i64 {
    let t0 = Instant::now();
    let mut i = 0;
    loop {
        let url = format!(
            "http://{}/subjects/{subject}/versions",
            registries[i % registries.len()]
        );
        i += 1;
        let answer = c
            .post(&url)
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .body(json!({"schema": text}).to_string())
            .send();
        if let Ok(r) = answer {
            let status = r.status().as_u16();
            let body: Value =
                serde_json::from_str(&r.text().unwrap_or_default()).unwrap_or(Value::Null);
            if status == 200 {
                return body["id"].as_i64().unwrap();
            }
            assert!(status >= 500, "{url}: {status} {body}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "{subject}: never registered"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get(c: &reqwest::blocking::Client, registry: &str, path: &str) -> (u16, Value) {
    let r = c.get(format!("http://{registry}{path}")).send().unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_str(&r.text().unwrap_or_default()).unwrap_or(Value::Null),
    )
}

#[test]
fn registry_writes_survive_killing_the_writer() {
    let mut c = Cluster::start(3, 3, &[]);
    let client = http();
    let all: Vec<String> = c.brokers.iter().map(|b| b.registry.clone()).collect();
    let subjects = ["a-value", "b-value", "c-value"];
    // (subject, version number, id), for every acknowledged registration.
    let mut acked: Vec<(&str, usize, i64)> = Vec::new();
    // Through each broker in turn: two of the three forward to the writer.
    for n in 0..4 {
        for (i, s) in subjects.iter().enumerate() {
            let via = &all[(n + i) % 3..=(n + i) % 3];
            acked.push((s, n, register(&client, via, s, &schema(s, n))));
        }
    }
    let views = metadata(&c.bootstrap(), "_schemas").expect("_schemas exists");
    let writer = views[0].0;
    assert_eq!(views[0].1.len(), 3, "replicated to every broker: {views:?}");
    c.broker(writer).kill9();
    let alive: Vec<String> = c
        .brokers
        .iter()
        .zip(1..)
        .filter(|(_, id)| *id != writer)
        .map(|(b, _)| b.registry.clone())
        .collect();
    for n in 4..7 {
        for s in subjects {
            acked.push((s, n, register(&client, &alive, s, &schema(s, n))));
        }
    }
    c.broker(writer).restart();
    let all: Vec<String> = c.brokers.iter().map(|b| b.registry.clone()).collect();
    // Ids are unique: a different schema never got an id another has.
    let mut ids: Vec<i64> = acked.iter().map(|a| a.2).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), acked.len(), "{acked:?}");
    // Every broker, the restarted one too, answers every acknowledged version.
    for r in &all {
        let t0 = Instant::now();
        for s in subjects {
            loop {
                let (status, versions) = get(&client, r, &format!("/subjects/{s}/versions"));
                if status == 200 && versions == json!([1, 2, 3, 4, 5, 6, 7]) {
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "{r} {s}: {status} {versions}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        for (s, n, id) in &acked {
            let (status, v) = get(&client, r, &format!("/subjects/{s}/versions/{}", n + 1));
            assert_eq!(status, 200, "{r} {s} v{}: {v}", n + 1);
            assert_eq!(v["id"], json!(id), "{r} {s} v{}", n + 1);
            assert_eq!(v["schema"].as_str().unwrap(), schema(s, *n), "{r} {s}");
        }
    }
}
