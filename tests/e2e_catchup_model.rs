//! The catch-up model (`strata_plan::sim`) against a scaled-down real run: a backlog that
//! lives only in the bucket (a real S3 server, s3s-fs), drained by four consumers while a
//! producer keeps writing. The model gets what was measured in the same run (the GETs'
//! latency and speed on this S3 server, the records' size on disk) and the run's own
//! settings (partitions, consumers and their pace, the live rate, the broker's chunk size
//! and read-ahead); its drain time must be within 25% of the measured one.
//!
//! The scale: the seed drains 86.4 billion 1 KB events with 200 consumers at 30,000
//! events/s against 1 M events/s of live traffic (a drain 6 times the live rate, consumers
//! the limit). This run keeps that shape at 4 partitions, 4 consumers at 1,500 events/s,
//! 1,000 events/s live and a 48,000-record backlog: 1/1,800,000 of the seed's backlog,
//! which a CI machine drains in about ten seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::kafka::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use strata_plan::sim::{SimConfig, simulate};
use strata_store::testing::S3Server;

const PARTITIONS: i32 = 4;
/// Records in the backlog; `STRATA_CATCHUP_BACKLOG` sets a larger run by hand
/// (docs/benchmarks.md quotes one ten times this).
fn backlog() -> u64 {
    std::env::var("STRATA_CATCHUP_BACKLOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48_000)
}
const VALUE: usize = 1_000;
const CONSUMER_RATE: f64 = 1_500.0;
const LIVE_RATE: f64 = 1_000.0;
const CHUNK: u64 = 4 << 20;

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// (key, size) of every object under `prefix`, and `n` ranged GETs of `CHUNK` bytes
/// from the largest: their first-byte latencies and whole-GET transfer rates.
fn bucket_and_gets(s3: &S3Server, prefix: &str, n: usize) -> (Vec<(String, i64)>, Vec<f64>, f64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = common::bucket::client(s3);
        let objects = common::bucket::list(&client, s3.bucket(), prefix).await;
        let (key, size) = objects
            .iter()
            .filter(|(k, _)| k.ends_with(".log"))
            .max_by_key(|(_, s)| *s)
            .cloned()
            .expect("a segment in the bucket");
        let len = (size as u64).min(CHUNK);
        let mut first_byte = Vec::new();
        let mut transfer = 0.0;
        for _ in 0..n {
            let t0 = Instant::now();
            let r = client
                .get_object()
                .bucket(s3.bucket())
                .key(&key)
                .range(format!("bytes=0-{}", len - 1))
                .send()
                .await
                .unwrap();
            let t1 = t0.elapsed().as_secs_f64();
            let body = r.body.collect().await.unwrap().into_bytes();
            let t2 = t0.elapsed().as_secs_f64();
            assert_eq!(body.len() as u64, len);
            first_byte.push(t1);
            transfer += t2 - t1;
        }
        let rate = len as f64 * n as f64 / transfer.max(1e-6);
        (objects, first_byte, rate)
    })
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

#[test]
fn the_models_drain_time_is_within_25_percent_of_a_real_drain() {
    let backlog_records = backlog();
    let s3 = S3Server::start().expect("s3s-fs is installed by scripts/deps");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("model");
    let broker = common::Broker::start_with_env(
        dir.path(),
        "127.0.0.1:0",
        &[
            "--object-store",
            url.as_str(),
            "--cache-disk",
            "0",
            "--remote-chunk",
            "4MiB",
            "--retention-check-interval",
            "1s",
        ],
        &s3.env(),
    );
    let topic = "backlog";
    create_topic(
        &broker.kafka,
        topic,
        PARTITIONS,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", &(1 << 20).to_string()),
            ("local.retention.bytes", "1"),
        ],
    );
    // The backlog, as fast as it goes; then only the bucket holds it.
    let (p, d) = producer(&broker.kafka, &[("acks", "all"), ("linger.ms", "5")]);
    let value = vec![b'v'; VALUE];
    for i in 0..backlog_records {
        loop {
            match p.send(
                BaseRecord::<(), _>::to(topic)
                    .partition((i % PARTITIONS as u64) as i32)
                    .payload(&value),
            ) {
                Ok(()) => break,
                Err(_) => {
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
    p.flush(Duration::from_secs(120)).unwrap();
    assert!(d.errors.lock().unwrap().is_empty());
    let statuses = || -> Vec<Value> {
        let v: Value = serde_json::from_str(&broker.http_get("/v1/tier/status")).unwrap();
        v["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["topic"] == topic)
            .cloned()
            .collect()
    };
    wait_for(
        "the backlog offloaded and gone from local disk",
        Duration::from_secs(180),
        || {
            let s = statuses();
            s.len() == PARTITIONS as usize
                && s.iter().all(|p| {
                    let end = p["log_end_offset"].as_i64().unwrap_or(0);
                    let local = p["local_start_offset"].as_i64().unwrap_or(0);
                    // All but the active segment (about 1,000 records) is only in the bucket.
                    p["offload_lag_bytes"] == 0 && local as f64 >= end as f64 * 0.9
                })
        },
    );
    let sum = |field: &str| -> i64 { statuses().iter().map(|p| p[field].as_i64().unwrap()).sum() };
    // Records only in the bucket, and records the bucket's segments hold.
    let tier_records = sum("local_start_offset");
    let offloaded_records = sum("remote_end_offset");

    // Measured on this machine, in this run: the S3 server's GETs, the bytes a record
    // takes in a segment.
    let (objects, mut first_byte, get_rate) = bucket_and_gets(&s3, "model/", 30);
    let log_bytes: i64 = objects
        .iter()
        .filter(|(k, _)| k.ends_with(".log"))
        .map(|(_, s)| s)
        .sum();
    let record_bytes = log_bytes as f64 / offloaded_records as f64;
    let median = percentile(&mut first_byte, 0.5);
    let p99 = percentile(&mut first_byte, 0.99);

    // Live traffic keeps coming while four paced consumers drain from offset 0.
    let stop = Arc::new(AtomicBool::new(false));
    let live = {
        let stop = stop.clone();
        let kafka = broker.kafka.clone();
        std::thread::spawn(move || {
            let (p, _) = producer(&kafka, &[("acks", "all"), ("linger.ms", "5")]);
            let value = vec![b'l'; VALUE];
            let t0 = Instant::now();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let due = (t0.elapsed().as_secs_f64() * LIVE_RATE) as u64;
                while sent < due {
                    let _ = p.send(
                        BaseRecord::<(), _>::to(topic)
                            .partition((sent % PARTITIONS as u64) as i32)
                            .payload(&value),
                    );
                    sent += 1;
                }
                p.poll(Duration::from_millis(5));
            }
            p.flush(Duration::from_secs(30)).unwrap();
        })
    };
    let consumers: Vec<_> = (0..PARTITIONS)
        .map(|partition| {
            let kafka = broker.kafka.clone();
            std::thread::spawn(move || {
                let c: BaseConsumer = client_config(
                    &kafka,
                    &[("group.id", "model"), ("enable.auto.commit", "false")],
                )
                .create()
                .unwrap();
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(topic, partition, Offset::Beginning)
                    .unwrap();
                c.assign(&tpl).unwrap();
                let t0 = Instant::now();
                let mut read = 0u64;
                loop {
                    assert!(t0.elapsed() < Duration::from_secs(300), "never drained");
                    let Some(m) = c.poll(Duration::from_millis(100)) else {
                        continue;
                    };
                    let m = m.unwrap();
                    read += 1;
                    // Caught up: within a tenth of a second of live traffic (asked
                    // every 50 records: the watermark is a round trip).
                    if read.is_multiple_of(50) {
                        let (_, high) = c
                            .fetch_watermarks(topic, partition, Duration::from_secs(5))
                            .unwrap();
                        if high - m.offset() <= (LIVE_RATE / PARTITIONS as f64 / 10.0) as i64 {
                            return t0.elapsed().as_secs_f64();
                        }
                    }
                    // Paced: this consumer processes CONSUMER_RATE records a second.
                    let due = Duration::from_secs_f64(read as f64 / CONSUMER_RATE);
                    if let Some(wait) = due.checked_sub(t0.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            })
        })
        .collect();
    let drained: Vec<f64> = consumers.into_iter().map(|c| c.join().unwrap()).collect();
    let measured = drained.iter().copied().fold(0.0, f64::max);
    stop.store(true, Ordering::Relaxed);
    live.join().unwrap();

    let predicted = simulate(&SimConfig {
        partitions: PARTITIONS as u32,
        brokers: 1,
        consumers: PARTITIONS as u32,
        events_per_sec: LIVE_RATE,
        event_bytes: record_bytes,
        // The backlog, as the time live traffic would take to write it.
        lag_secs: backlog_records as f64 / LIVE_RATE,
        local_retention_secs: (backlog_records as f64 - tier_records as f64) / LIVE_RATE,
        consumer_bytes_per_sec: CONSUMER_RATE * record_bytes,
        chunk_bytes: CHUNK as f64,
        read_ahead: 4,
        readahead_budget_bytes: 256.0 * 1048576.0,
        get_latency_median_secs: median,
        get_latency_p99_secs: p99,
        get_bytes_per_sec: get_rate,
        bucket_get_limit: 0.0,
        max_inflight_prefetches: 16,
        seed: 1,
        max_secs: 3600.0,
    });
    let model = predicted.drain_secs.expect("the model drains");
    eprintln!(
        "catch-up: measured {measured:.2} s (per consumer {drained:?}), model {model:.2} s \
         ({:.2}x); GET first byte median {:.1} ms p99 {:.1} ms, {:.0} MB/s; {record_bytes:.0} \
         B a record; {} GETs, consumers waited {:.1}%",
        model / measured,
        median * 1e3,
        p99 * 1e3,
        get_rate / 1e6,
        predicted.gets,
        predicted.consumer_wait_fraction * 100.0
    );
    assert!(
        (model - measured).abs() <= 0.25 * measured,
        "model {model:.2} s against measured {measured:.2} s"
    );
}
