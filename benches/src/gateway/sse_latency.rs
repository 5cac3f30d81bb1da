//! `sse-latency`: records produced at a fixed rate, stamped with their send time, while
//! a Kafka consumer and the gateway's event stream read them; the run and its report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use super::receipts::{EndToEnd, Receipts, Stamp};
use super::sse_client::{SseClient, sse_client};
use super::{GatewayArgs, lock};
use crate::client::{Quiet, base_config, partitions, quiet_client_context};
use crate::payload::{ALPHANUMERIC, random_bytes};
use crate::{BrokerArgs, Report, parse_size};

#[derive(Args, Debug, Clone)]
pub struct SseLatencyArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Records per second.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// How long to produce for (the warm-up included).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Records sent in the first part of the run are left out of the latency figures.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// About how large each value is (a JSON object with the send time and padding).
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    pub record_size: u64,
    /// The stream's client acknowledges after this many records...
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub ack_every: u64,
    /// ...or this long, whichever comes first.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub ack_interval: Duration,
    /// Group name prefix: the run uses `{group}-kafka-{run}` and `{group}-sse-{run}`.
    #[arg(long, default_value = "strata-benches-e2e")]
    pub group: String,
}

/// Delivery counts of the stamped producer (probes not counted).
#[derive(Debug, Default)]
struct Acked {
    quiet: Quiet,
    delivered: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

quiet_client_context!(Acked);

impl ProducerContext for Acked {
    /// 1 for a probe.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, probe: usize) {
        match result {
            Ok(_) if probe == 1 => {}
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut g) = self.first_error.lock() {
                    g.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

pub(crate) fn sse_latency(a: &SseLatencyArgs) -> anyhow::Result<Report> {
    let b = &a.broker;
    if !(a.rate > 0.0 && a.rate.is_finite()) {
        bail!(
            "--rate {}: give a positive number of records per second",
            a.rate
        );
    }
    if a.warmup >= a.duration {
        bail!("--warmup must be shorter than --duration");
    }
    let clock = Instant::now();
    let now_us = move || clock.elapsed().as_micros() as u64;
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let kafka_group = format!("{}-kafka-{run}", a.group);
    let sse_group = format!("{}-sse-{run}", a.group);
    let kafka = Arc::new(Mutex::new(Receipts::new(run)?));
    let sse = Arc::new(Mutex::new(Receipts::new(run)?));
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(AtomicU64::new(0));
    let ack_errors = Arc::new(AtomicU64::new(0));

    let producer: BaseProducer<Acked> = base_config(b)
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", b.timeout.as_millis().to_string())
        .create_with_context(Acked::default())
        .context("cannot create the producer")?;
    let parts = partitions(producer.client(), b)?;

    // The Kafka consumer, on a thread of its own.
    let consumer: BaseConsumer<Quiet> = base_config(b)
        .set("group.id", &kafka_group)
        .set("auto.offset.reset", "latest")
        .set("enable.partition.eof", "false")
        .create_with_context(Quiet::default())
        .context("cannot create the consumer")?;
    consumer.subscribe(&[&b.topic]).context("subscribe")?;
    let kafka_thread = {
        let (kafka, stop) = (kafka.clone(), stop.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            while !stop.load(Ordering::Relaxed) {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        let stamp = m
                            .payload()
                            .and_then(|v| serde_json::from_slice::<Stamp>(v).ok());
                        let now = now_us();
                        if let Some(s) = stamp {
                            lock(&kafka).record(&s, now);
                        }
                    }
                    Some(Err(e)) => eprintln!("warning: kafka consumer: {e}"),
                    None => {}
                }
            }
            drop(consumer);
            Ok(())
        })
    };

    // The stream's client, on a runtime of its own.
    let sse_thread = {
        let (sse, stop) = (sse.clone(), stop.clone());
        let (acks, ack_errors) = (acks.clone(), ack_errors.clone());
        let (http, topic) = (a.gateway.http.clone(), b.topic.clone());
        let (ack_every, ack_interval, timeout) = (a.ack_every, a.ack_interval, b.timeout);
        let group = sse_group.clone();
        std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start a runtime")?;
            rt.block_on(sse_client(SseClient {
                http,
                group,
                topic,
                sse,
                stop,
                acks,
                ack_errors,
                ack_every,
                ack_interval,
                timeout,
                now_us: Box::new(now_us),
            }))
        })
    };

    let mut value = Vec::new();
    let pad = (a.record_size as usize).saturating_sub(90);
    let padding: Vec<u8> = random_bytes(pad + 4096, 0xBB67_AE85_84CA_A73B)
        .into_iter()
        .map(|x| ALPHANUMERIC[x as usize % ALPHANUMERIC.len()])
        .collect();
    let send = |producer: &BaseProducer<Acked>,
                value: &mut Vec<u8>,
                probe: bool,
                seq: u64|
     -> anyhow::Result<bool> {
        value.clear();
        let off = (seq as usize).wrapping_mul(61) % 4096;
        value.extend_from_slice(br#"{"data":""#);
        value.extend_from_slice(&padding[off..off + pad]);
        let sent_us = now_us();
        let mut tail = String::new();
        let _ = write!(
            tail,
            r#"","probe":{probe},"run":{run},"sent_us":{sent_us},"seq":{seq}}}"#
        );
        value.extend_from_slice(tail.as_bytes());
        let record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(&b.topic, usize::from(probe)).payload(value);
        match producer.send(record) {
            Ok(()) => Ok(true),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => Ok(false),
            Err((e, _)) => bail!("cannot send: {e}"),
        }
    };
    let result = (|| -> anyhow::Result<Report> {
        // Probes until both consumers are in their groups and reading.
        let t = Instant::now();
        loop {
            let (k, s) = (lock(&kafka).ready, lock(&sse).ready);
            if k && s {
                break;
            }
            if sse_thread.is_finished() || kafka_thread.is_finished() {
                bail!("a consumer stopped before the run started");
            }
            if t.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the consumers did not start reading within 60 s (kafka: {k}, sse: {s}; last error: {})",
                    producer.context().quiet.last_error()
                );
            }
            send(&producer, &mut value, true, 0)?;
            producer.poll(Duration::from_millis(100));
        }
        // The run.
        let start_us = now_us();
        let warm_from = start_us + a.warmup.as_micros() as u64;
        lock(&kafka).warm_from_us = warm_from;
        lock(&sse).warm_from_us = warm_from;
        let total = (a.rate * a.duration.as_secs_f64()).round() as u64;
        let t0 = Instant::now();
        let mut seq = 0u64;
        let mut bytes = 0u64;
        while seq < total {
            let due = Duration::from_secs_f64(seq as f64 / a.rate);
            let now = t0.elapsed();
            if now < due {
                producer.poll(Duration::ZERO);
                std::thread::sleep((due - now).min(Duration::from_millis(5)));
                continue;
            }
            if send(&producer, &mut value, false, seq)? {
                bytes += value.len() as u64;
                seq += 1;
            }
            producer.poll(Duration::ZERO);
        }
        let secs = t0.elapsed().as_secs_f64();
        let flushed = producer.flush(b.timeout + Duration::from_secs(5));
        if let Err(e) = flushed {
            eprintln!("warning: flush: {e}");
        }
        let ctx = producer.context();
        let delivered = ctx.delivered.load(Ordering::Relaxed);
        let errors = ctx.errors.load(Ordering::Relaxed);
        // Until both have everything, or neither makes progress for --timeout.
        let mut last = (0, 0);
        let mut last_progress = Instant::now();
        loop {
            let now = (lock(&kafka).received, lock(&sse).received);
            if now.0 >= delivered && now.1 >= delivered {
                break;
            }
            if now != last {
                last = now;
                last_progress = Instant::now();
            } else if last_progress.elapsed() > b.timeout {
                break;
            }
            if sse_thread.is_finished() && kafka_thread.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let k = lock(&kafka).receipt(delivered);
        let s = lock(&sse).receipt(delivered);
        let p99_added_ms = match (&k.latency, &s.latency) {
            (Some(k), Some(s)) => Some(s.p99_ms - k.p99_ms),
            _ => None,
        };
        let mut settings = BTreeMap::new();
        settings.insert("partitions".into(), parts.to_string());
        settings.insert("rate".into(), format!("{}", a.rate));
        settings.insert("record_size".into(), a.record_size.to_string());
        settings.insert(
            "warmup".into(),
            humantime::format_duration(a.warmup).to_string(),
        );
        settings.insert("ack_every".into(), a.ack_every.to_string());
        settings.insert(
            "ack_interval".into(),
            humantime::format_duration(a.ack_interval).to_string(),
        );
        Ok(Report {
            errors,
            end_to_end: Some(EndToEnd {
                kafka: k,
                sse: s,
                p99_added_ms,
                acks: acks.load(Ordering::Relaxed),
                ack_errors: ack_errors.load(Ordering::Relaxed),
            }),
            ..Report::new(
                "sse-latency",
                Some(b.topic.clone()),
                delivered,
                bytes,
                secs,
                settings,
            )
        })
    })();
    stop.store(true, Ordering::Relaxed);
    let k = kafka_thread.join();
    let s = sse_thread.join();
    let mut failed = Vec::new();
    for (who, r) in [("kafka consumer", k), ("sse client", s)] {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("{who}: {e:#}")),
            Err(_) => failed.push(format!("{who}: panicked")),
        }
    }
    let mut report = result.with_context(|| failed.join("; "))?;
    for f in &failed {
        eprintln!("warning: {f}");
        report.errors += 1;
    }
    Ok(report)
}
