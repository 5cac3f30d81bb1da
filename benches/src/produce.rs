//! `produce`: records of a chosen size at a target rate or flat out, optionally in
//! transactions, with each record's delivery latency and each partition's longest wait
//! between acknowledgements.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use crate::client::{Quiet, base_config, partitions, progress, quiet_client_context};
use crate::cpu::CpuMeter;
use crate::disk::disk_write;
use crate::payload::{JsonValues, fill_random, random_bytes, write_json_key};
use crate::report::{latency_of, mb_per_s};
use crate::{AckGap, Acks, ProduceArgs, Report};

/// Delivery bookkeeping, updated from the delivery callback (run by our own poll calls, on
/// the sending thread, so the lock is never contended).
struct Deliveries {
    quiet: Quiet,
    start: Instant,
    latency_us: Mutex<Histogram<u64>>,
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Per partition, the last acknowledgement (µs since `start`), and the longest gap
    /// between two acknowledgements of one partition: with a broker killed mid-run, how
    /// long its partitions took to accept writes again (election + metadata refresh).
    acks_by_partition: Mutex<AckGaps>,
    /// Records sent before this (µs since `start`) are not in `latency_us`.
    warmup_us: u64,
}

#[derive(Default)]
struct AckGaps {
    last_us: HashMap<i32, u64>,
    max_gap_us: u64,
    max_gap_partition: i32,
}

quiet_client_context!(Deliveries);

impl ProducerContext for Deliveries {
    /// When the record was handed to librdkafka, in µs since `start`.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_us: usize) {
        match result {
            Ok(m) => {
                let now = self.start.elapsed().as_micros() as u64;
                let latency = now.saturating_sub(sent_us as u64).max(1);
                if sent_us as u64 >= self.warmup_us
                    && let Ok(mut h) = self.latency_us.lock()
                {
                    h.saturating_record(latency);
                }
                if let Ok(mut g) = self.acks_by_partition.lock() {
                    let last = g.last_us.insert(m.partition(), now);
                    if let Some(last) = last
                        && now.saturating_sub(last) > g.max_gap_us
                    {
                        g.max_gap_us = now - last;
                        g.max_gap_partition = m.partition();
                    }
                }
                let n = m.payload_len() + m.key().map_or(0, <[u8]>::len);
                self.delivered.fetch_add(1, Ordering::Relaxed);
                self.delivered_bytes.fetch_add(n as u64, Ordering::Relaxed);
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

pub(crate) fn produce(a: &ProduceArgs) -> anyhow::Result<Report> {
    let b = &a.broker;
    if a.idempotent && a.acks != Acks::All {
        bail!("--idempotent needs --acks all");
    }
    if a.transactional_id.is_some() && a.acks != Acks::All {
        bail!("--transactional-id needs --acks all");
    }
    if let Some(r) = a.rate
        && !(r > 0.0 && r.is_finite())
    {
        bail!("--rate {r}: give a positive number of records per second");
    }
    if a.record_size > 100 << 20 {
        bail!("--record-size {}: at most 100 MiB", a.record_size);
    }
    let duration = match (a.duration, a.records) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let mut config = base_config(b);
    config
        .set("acks", if a.acks == Acks::All { "all" } else { "1" })
        .set("enable.idempotence", a.idempotent.to_string())
        .set("linger.ms", a.linger_ms.to_string())
        .set("batch.size", a.batch_size.to_string())
        .set("compression.type", a.compression.name())
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", b.timeout.as_millis().to_string());
    if let Some(max) = a.max_buffered {
        config.set(
            "queue.buffering.max.kbytes",
            (max / 1024).max(1).to_string(),
        );
    }
    if let Some(id) = &a.transactional_id {
        config
            .set("transactional.id", id)
            .set("enable.idempotence", "true")
            .set("transaction.timeout.ms", "60000");
    }
    let ctx = Deliveries {
        quiet: Quiet::default(),
        start: Instant::now(),
        latency_us: Mutex::new(
            Histogram::new_with_bounds(1, 3_600_000_000, 3).context("histogram bounds")?,
        ),
        delivered: AtomicU64::new(0),
        delivered_bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_error: Mutex::new(None),
        acks_by_partition: Mutex::new(AckGaps::default()),
        warmup_us: a.warmup.as_micros() as u64,
    };
    let producer: BaseProducer<Deliveries> = config
        .create_with_context(ctx)
        .context("cannot create the producer")?;
    let parts = partitions(producer.client(), b)?;

    let size = a.record_size as usize;
    // Each record's value is a window into this buffer, so consecutive values differ.
    let pool = random_bytes(size + 4096, 0x9E37_79B9_7F4A_7C15);
    let json = match a.json_values {
        true => Some(JsonValues::new(a.record_size)?),
        false => None,
    };
    let mut key = Vec::new();
    let mut json_value = Vec::new();
    let mut framed = Vec::new();
    let mut unique = vec![0u8; if a.unique_values { size } else { 0 }];

    let bar = match (a.records, duration) {
        (Some(n), None) => progress(b, n, "records"),
        (_, Some(d)) => progress(b, d.as_secs().max(1), "s"),
        (None, None) => progress(b, 0, ""),
    };
    let transactional = a.transactional_id.is_some();
    let mut end_txn =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).context("histogram bounds")?;
    let mut txns = 0u64;
    if transactional {
        producer
            .init_transactions(b.timeout)
            .context("init_transactions")?;
        producer.begin_transaction().context("begin_transaction")?;
    }
    // Ends the open transaction (flushed first, so the time is the EndTxn's alone).
    let mut end = |producer: &BaseProducer<Deliveries>, txns: &mut u64| -> anyhow::Result<()> {
        producer.flush(b.timeout).context("flush before EndTxn")?;
        let t = Instant::now();
        *txns += 1;
        if a.abort_every.is_some_and(|n| (*txns).is_multiple_of(n)) {
            producer
                .abort_transaction(b.timeout)
                .context("abort_transaction")?;
        } else {
            producer
                .commit_transaction(b.timeout)
                .context("commit_transaction")?;
        }
        end_txn.saturating_record(t.elapsed().as_micros().max(1) as u64);
        Ok(())
    };
    let cpu = CpuMeter::start(b.broker_pid)?;
    let ctx = producer.context();
    let t0 = Instant::now();
    let mut txn_started = t0;
    let mut sent = 0u64;
    let mut last_draw = t0;
    loop {
        if transactional && txn_started.elapsed() >= a.commit_interval {
            end(&producer, &mut txns)?;
            producer.begin_transaction().context("begin_transaction")?;
            txn_started = Instant::now();
        } else if !transactional && a.flush_interval.is_some_and(|f| txn_started.elapsed() >= f) {
            producer.flush(b.timeout).context("flush")?;
            txn_started = Instant::now();
        }
        let now = t0.elapsed();
        if a.records.is_some_and(|n| sent >= n) || duration.is_some_and(|d| now >= d) {
            break;
        }
        if ctx.errors.load(Ordering::Relaxed) > 0 {
            break;
        }
        if let Some(rate) = a.rate {
            let due = Duration::from_secs_f64(sent as f64 / rate);
            if now < due {
                // Serve delivery callbacks, then sleep until the next send is due. Not
                // poll(timeout): it returns at once when no event is ready, and the
                // loop would spin, taking a core from the brokers on a small machine.
                producer.poll(Duration::ZERO);
                std::thread::sleep((due - now).min(Duration::from_millis(5)));
                continue;
            }
        }
        let value = match &json {
            Some(j) => {
                json_value.clear();
                j.write(sent, &mut json_value);
                &json_value[..]
            }
            None if a.unique_values => {
                fill_random(&mut unique, (sent + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                &unique[..]
            }
            None => {
                let off = (sent as usize).wrapping_mul(61) % 4096;
                &pool[off..off + size]
            }
        };
        let value = match a.schema_id {
            Some(id) => {
                framed.clear();
                framed.push(0);
                framed.extend_from_slice(&id.to_be_bytes());
                framed.extend_from_slice(value.get(5..).unwrap_or_default());
                &framed[..]
            }
            None => value,
        };
        let sent_us = ctx.start.elapsed().as_micros() as usize;
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(&b.topic, sent_us).payload(value);
        if a.keyed {
            key.clear();
            if json.is_some() {
                write_json_key(sent, a.keys, &mut key);
            } else {
                let _ = write!(key, "key-{}", sent % a.keys);
            }
            record = record.key(&key[..]);
        }
        match producer.send(record) {
            Ok(()) => {
                sent += 1;
                producer.poll(Duration::ZERO);
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                // librdkafka's buffer is full: serve deliveries, then sleep while it
                // drains. Not poll(timeout): rdkafka spins on the clock until the timeout
                // (a profile showed this thread's core in clock_gettime), taking a core
                // from librdkafka's own threads and the broker on a small machine.
                producer.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => bail!("cannot send: {e}"),
        }
        if last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            let secs = t0.elapsed().as_secs_f64();
            let bytes = ctx.delivered_bytes.load(Ordering::Relaxed);
            bar.set_message(format!("{:.1} MB/s", mb_per_s(bytes, secs)));
            match (a.records, duration) {
                (Some(_), None) => bar.set_position(ctx.delivered.load(Ordering::Relaxed)),
                _ => bar.set_position(secs as u64),
            }
        }
    }
    if transactional {
        end(&producer, &mut txns)?;
    }
    // Every record left either arrives or times out (message.timeout.ms = --timeout).
    let flushed = producer.flush(b.timeout + Duration::from_secs(5));
    let secs = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let delivered = ctx.delivered.load(Ordering::Relaxed);
    let bytes = ctx.delivered_bytes.load(Ordering::Relaxed);
    // Failed, or still undelivered when the flush gave up.
    let errors = sent.saturating_sub(delivered);
    let (cpu_s, cpu_per_gb) = cpu.finish(bytes)?;
    if delivered == 0 {
        let first = ctx
            .first_error
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_else(|| ctx.quiet.last_error());
        bail!("no record was delivered ({sent} sent): {first}");
    }
    if let Err(e) = flushed {
        eprintln!("warning: flush: {e}");
    }
    let latency = ctx.latency_us.lock().ok().and_then(|h| latency_of(&h));
    let ack_gap = ctx.acks_by_partition.lock().ok().map(|g| AckGap {
        max_ms: g.max_gap_us as f64 / 1e3,
        partition: g.max_gap_partition,
    });
    let disk_mb_per_s = match &a.disk_dir {
        Some(dir) => Some(disk_write(dir, bytes, 1 << 20)?.1),
        None => None,
    };
    let mut settings = BTreeMap::new();
    settings.insert("partitions".into(), parts.to_string());
    settings.insert("record_size".into(), a.record_size.to_string());
    settings.insert("unique_values".into(), a.unique_values.to_string());
    settings.insert("keyed".into(), a.keyed.to_string());
    settings.insert(
        "acks".into(),
        if a.acks == Acks::All { "all" } else { "1" }.into(),
    );
    settings.insert(
        "rate".into(),
        a.rate.map_or("max".into(), |r| format!("{r}")),
    );
    settings.insert("linger_ms".into(), a.linger_ms.to_string());
    settings.insert(
        "warmup".into(),
        humantime::format_duration(a.warmup).to_string(),
    );
    settings.insert("batch_size".into(), a.batch_size.to_string());
    settings.insert("compression".into(), a.compression.name().into());
    settings.insert("json_values".into(), a.json_values.to_string());
    if let Some(id) = a.schema_id {
        settings.insert("schema_id".into(), id.to_string());
    }
    if let Some(id) = &a.transactional_id {
        settings.insert("transactional_id".into(), id.clone());
        settings.insert("transactions".into(), txns.to_string());
        settings.insert(
            "commit_interval".into(),
            humantime::format_duration(a.commit_interval).to_string(),
        );
        settings.insert(
            "abort_every".into(),
            a.abort_every.map_or("never".into(), |n| n.to_string()),
        );
    }
    let end_txn = latency_of(&end_txn);
    Ok(Report {
        latency,
        ack_gap,
        errors,
        broker_cpu_seconds: cpu_s,
        broker_cpu_s_per_gb: cpu_per_gb,
        disk_mb_per_s,
        end_txn,
        ..Report::new(
            "produce",
            Some(b.topic.clone()),
            delivered,
            bytes,
            secs,
            settings,
        )
    })
}
