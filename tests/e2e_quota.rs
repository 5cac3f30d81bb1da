//! Client quotas end to end (issue 18): a producer over its byte rate is throttled to its
//! quota and sees throttle_time_ms; another client on the same broker is not.
//!
//! Value bytes are counted here; the broker counts whole requests (batch and record
//! headers too), so a throttled producer's values arrive a few percent below the quota.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::kafka::{Deliveries, client_config};
use common::{Broker, strata_bin};
use rdkafka::ClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

fn strata(args: &[&str]) -> String {
    let out = Command::new(strata_bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Deliveries plus the largest throttle librdkafka reported in its statistics, and when
/// it first reported one.
#[derive(Clone, Default)]
struct Watch {
    deliveries: Deliveries,
    max_throttle_ms: Arc<Mutex<i64>>,
    first_throttle: Arc<Mutex<Option<Instant>>>,
}

impl ClientContext for Watch {
    fn stats_raw(&self, raw: &[u8]) {
        let v: serde_json::Value = serde_json::from_slice(raw).unwrap_or_default();
        if let Some(brokers) = v["brokers"].as_object() {
            for b in brokers.values() {
                let t = b["throttle"]["max"].as_i64().unwrap_or(0);
                let mut m = self.max_throttle_ms.lock().unwrap();
                *m = (*m).max(t);
                if t > 0 {
                    self.first_throttle
                        .lock()
                        .unwrap()
                        .get_or_insert_with(Instant::now);
                }
            }
        }
    }
}

impl ProducerContext for Watch {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, o: ()) {
        self.deliveries.delivery(r, o)
    }
}

/// Sends 1 KiB records until `done` says so, at most `rate` a second (`None`: as fast as
/// the producer's queue takes them); returns what librdkafka saw.
fn run_producer(
    bootstrap: &str,
    client_id: &str,
    rate: Option<u64>,
    done: impl Fn(&Watch, Instant) -> bool,
) -> Watch {
    let watch = Watch::default();
    let p: BaseProducer<Watch> = client_config(bootstrap, &[])
        .set("client.id", client_id)
        .set("acks", "1")
        .set("linger.ms", "5")
        .set("statistics.interval.ms", "1000")
        .set("queue.buffering.max.kbytes", "4096")
        .create_with_context(watch.clone())
        .unwrap();
    let payload = vec![b'x'; 1024];
    let start = Instant::now();
    let mut sent = 0u64;
    while !done(&watch, start) {
        if let Some(r) = rate
            && sent >= r * start.elapsed().as_millis() as u64 / 1000
        {
            p.poll(Duration::from_millis(5));
            continue;
        }
        match p.send(BaseRecord::<(), _>::to("quota-t").payload(&payload)) {
            Ok(()) => sent += 1,
            // The local queue is full: the broker is holding the producer back.
            Err(_) => {
                p.poll(Duration::from_millis(20));
            }
        }
        p.poll(Duration::ZERO);
    }
    let _ = p.flush(Duration::from_secs(30));
    watch
}

/// Bytes acknowledged between `a` and `b`, a second.
fn rate_between(w: &Watch, a: Instant, b: Instant) -> f64 {
    let acked = w.deliveries.acked.lock().unwrap();
    let bytes: usize = acked
        .iter()
        .filter(|x| x.at >= a && x.at < b)
        .map(|x| x.value.len())
        .sum();
    bytes as f64 / (b - a).as_secs_f64()
}

#[test]
fn a_producer_over_its_byte_rate_is_throttled_to_it_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    strata(&[
        "topic",
        "create",
        "quota-t",
        "--partitions",
        "2",
        "--bootstrap",
        &b,
    ]);
    // Large against one request (librdkafka sends up to 1 MiB batches): the measure is
    // per request, so a quota of a few requests a window would be coarse.
    const QUOTA: f64 = 4.0 * 1024.0 * 1024.0;
    strata(&[
        "quota",
        "set",
        "--client-id",
        "greedy",
        "--set",
        &format!("producer_byte_rate={QUOTA}"),
        "--bootstrap",
        &b,
    ]);
    let listed = strata(&["quota", "describe", "--bootstrap", &b]);
    assert!(
        listed.contains("client-id=greedy") && listed.contains("producer_byte_rate=4194304"),
        "{listed}"
    );

    // The greedy client flat out until it has been throttled for 43 s; a polite one at
    // 200 KiB/s beside it until then. A fresh client may first burst about one window
    // (10 s) of quota, whenever it has not used it (under load, that can be late): the
    // measured 30 s start a window after its first throttle.
    let greedy_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (b2, stop) = (b.clone(), greedy_done.clone());
    let polite = std::thread::spawn(move || {
        run_producer(&b2, "polite", Some(200), move |_, _| {
            stop.load(std::sync::atomic::Ordering::Relaxed)
        })
    });
    let greedy = run_producer(&b, "greedy", None, |w, start| {
        let first = *w.first_throttle.lock().unwrap();
        start.elapsed() > Duration::from_secs(120)
            || first.is_some_and(|t| t.elapsed() > Duration::from_secs(43))
    });
    greedy_done.store(true, std::sync::atomic::Ordering::Relaxed);
    let polite = polite.join().unwrap();
    // One quota window (11 s) after the first throttle: what the window held then has
    // expired, so nothing of the start-up burst is left in the measure.
    let from = greedy
        .first_throttle
        .lock()
        .unwrap()
        .expect("librdkafka saw throttle_time_ms")
        + Duration::from_secs(11);
    let to = from + Duration::from_secs(30);

    let rate = rate_between(&greedy, from, to);
    eprintln!("throttled producer: {rate:.0} B/s over 30 s, quota {QUOTA} B/s");
    // Issue 18: within 10% of the quota over 30 s. The quota counts whole requests
    // (headers and batch framing too) and the measure here only values, so a producer
    // exactly at its quota shows about 1% under it.
    assert!(
        (rate - QUOTA).abs() <= 0.1 * QUOTA,
        "the throttled producer ran at {rate:.0} B/s against a quota of {QUOTA} B/s"
    );
    assert!(
        greedy.deliveries.errors.lock().unwrap().is_empty(),
        "nothing failed"
    );
    // The other client got its 200 records a second and was never throttled.
    let polite_rate = rate_between(&polite, from, to);
    assert!(
        polite_rate >= 0.9 * 200.0 * 1024.0,
        "the unthrottled producer ran at {polite_rate:.0} B/s"
    );
    assert_eq!(
        *polite.max_throttle_ms.lock().unwrap(),
        0,
        "it was not throttled"
    );
    let metrics = broker.http_get("/metrics");
    assert!(
        metrics.contains("strata_quota_throttles_total"),
        "throttles are counted"
    );
}
