//! The REST gateway's modes.
//!
//! `http-produce` posts batches of JSON records (`application/vnd.kafka.json.v2+json`)
//! to `POST /topics/{t}` over keep-alive connections; `produce --json-values` sends the
//! same records (the same key and value bytes) through the Kafka protocol, so the two
//! rates compare like with like. `sse-latency` produces at a fixed rate with the send
//! time in every value while a Kafka consumer and the gateway's server-sent-events
//! stream (`GET /consumers/{group}/stream`) read the topic, each in its own group, and
//! reports each one's end-to-end latency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use serde::{Deserialize, Serialize};

use crate::{
    BrokerArgs, CpuMeter, Latency, Quiet, Report, base_config, mb_per_s, parse_size, partitions,
    progress, random_bytes,
};

/// The v2 JSON embedded format.
const V2_JSON: &str = "application/vnd.kafka.json.v2+json";

/// Where the gateway listens.
#[derive(Args, Debug, Clone)]
pub struct GatewayArgs {
    /// The REST gateway's HOST:PORT (`strata serve --http-addr`).
    #[arg(long, env = "STRATA_HTTP", default_value = "127.0.0.1:8080")]
    pub http: String,
}

#[derive(Args, Debug, Clone)]
pub struct HttpProduceArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The topic (it must exist).
    #[arg(long)]
    pub topic: String,
    /// Size of each record's value, a JSON object `{"data":"..."}` of exactly this many
    /// bytes (at least 11).
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    pub record_size: u64,
    /// Give records keys (the JSON strings "key-0" .. "key-(keys-1)", round robin); the
    /// gateway partitions them by murmur2. Without it records have no key.
    #[arg(long)]
    pub keyed: bool,
    /// How many distinct keys with --keyed.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Records per request.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch: u64,
    /// Concurrent keep-alive connections, each with one request in flight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub connections: u64,
    /// How long to send for [default: 10s, unless --records is given]
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// How many records to send (with --duration: whichever comes first).
    #[arg(long)]
    pub records: Option<u64>,
    /// The broker's process id, to report its CPU seconds per GB (the gateway runs
    /// inside it).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// How long one request may take.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Do not draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

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

/// End-to-end latency of one consumer: send (before the producer's send call) to
/// receipt (the record parsed in the consumer), in one process on one clock.
#[derive(Debug, Clone, Serialize)]
pub struct Receipt {
    /// Distinct records of the run received.
    pub received: u64,
    /// Delivered to the broker but never received.
    pub missed: u64,
    /// Received more than once.
    pub duplicates: u64,
    pub latency: Option<Latency>,
}

/// What `sse-latency` measured.
#[derive(Debug, Clone, Serialize)]
pub struct EndToEnd {
    pub kafka: Receipt,
    pub sse: Receipt,
    /// sse p99 minus kafka p99.
    pub p99_added_ms: Option<f64>,
    /// Acknowledgements the stream's client sent, and how many failed.
    pub acks: u64,
    pub ack_errors: u64,
}

pub(crate) fn latency_of(h: &Histogram<u64>) -> Option<Latency> {
    (!h.is_empty()).then(|| Latency {
        p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
        p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
        p999_ms: h.value_at_quantile(0.999) as f64 / 1e3,
        max_ms: h.max() as f64 / 1e3,
    })
}

// ---------------------------------------------------------------------------------------
// Records

const VALUE_PREFIX: &[u8] = br#"{"data":""#;
const VALUE_SUFFIX: &[u8] = br#""}"#;
const ALPHANUMERIC: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// JSON values of an exact size, `{"data":"<random alphanumerics>"}`: the text the
/// gateway produces for them too (serde_json's compact form of the same object), so
/// HTTP and Kafka produce carry the same bytes.
#[derive(Debug)]
pub(crate) struct JsonValues {
    pool: Vec<u8>,
    pad: usize,
}

impl JsonValues {
    pub(crate) fn new(size: u64) -> anyhow::Result<JsonValues> {
        let min = (VALUE_PREFIX.len() + VALUE_SUFFIX.len()) as u64;
        if !(min..=100 << 20).contains(&size) {
            bail!("--record-size {size}: JSON values take {min} bytes to 100 MiB");
        }
        let pad = (size - min) as usize;
        let pool = random_bytes(pad + 4096, 0x6A09_E667_F3BC_C908)
            .into_iter()
            .map(|b| ALPHANUMERIC[b as usize % ALPHANUMERIC.len()])
            .collect();
        Ok(JsonValues { pool, pad })
    }

    /// Appends record `i`'s value (consecutive values differ).
    pub(crate) fn write(&self, i: u64, out: &mut Vec<u8>) {
        let off = (i as usize).wrapping_mul(61) % 4096;
        out.extend_from_slice(VALUE_PREFIX);
        out.extend_from_slice(&self.pool[off..off + self.pad]);
        out.extend_from_slice(VALUE_SUFFIX);
    }
}

/// Appends record `i`'s key as JSON text (`"key-N"`, quotes included: the bytes the
/// gateway produces for the JSON string key-N).
pub(crate) fn write_json_key(i: u64, keys: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"\"key-");
    out.extend_from_slice((i % keys).to_string().as_bytes());
    out.push(b'"');
}

// ---------------------------------------------------------------------------------------
// http-produce

#[derive(Debug, Deserialize)]
struct ProduceAnswer {
    offsets: Vec<OffsetAnswer>,
}

#[derive(Debug, Deserialize)]
struct OffsetAnswer {
    #[serde(default)]
    error_code: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug)]
struct HttpTally {
    next: AtomicU64,
    delivered: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    requests: AtomicU64,
    first_error: Mutex<Option<String>>,
    latency_us: Mutex<Histogram<u64>>,
}

impl HttpTally {
    fn fail(&self, n: u64, why: impl FnOnce() -> String) {
        self.errors.fetch_add(n, Ordering::Relaxed);
        if let Ok(mut g) = self.first_error.lock() {
            g.get_or_insert_with(why);
        }
    }
}

pub(crate) fn http_produce(a: &HttpProduceArgs) -> anyhow::Result<Report> {
    let values = JsonValues::new(a.record_size)?;
    // One thread: the client's CPU comes out of the same two cores as the broker's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a runtime")?;
    rt.block_on(http_produce_run(a, Arc::new(values)))
}

async fn http_produce_run(a: &HttpProduceArgs, values: Arc<JsonValues>) -> anyhow::Result<Report> {
    let duration = match (a.duration, a.records) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(a.connections as usize)
        .tcp_nodelay(true)
        .timeout(a.timeout)
        .build()
        .context("cannot build the HTTP client")?;
    let base = format!("http://{}", a.gateway.http);
    let url = format!("{base}/topics/{}", a.topic);
    let r = client.get(&url).send().await.with_context(|| {
        format!(
            "no answer from the gateway at {}: is `strata serve --http-addr` there (--http)?",
            a.gateway.http
        )
    })?;
    let status = r.status();
    let body = r.bytes().await.context("reading GET /topics/T")?;
    if status.as_u16() == 404 {
        bail!(
            "--topic {}: not found (create it first, e.g. `strata topic create {} --partitions 8`)",
            a.topic,
            a.topic
        );
    }
    if !status.is_success() {
        bail!(
            "GET /topics/{}: {status} {}",
            a.topic,
            String::from_utf8_lossy(&body)
        );
    }
    let parts = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|j| j["partitions"].as_array().map(Vec::len))
        .unwrap_or(0);

    let tally = Arc::new(HttpTally {
        next: AtomicU64::new(0),
        delivered: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        first_error: Mutex::new(None),
        latency_us: Mutex::new(
            Histogram::new_with_bounds(1, 3_600_000_000, 3).context("histogram bounds")?,
        ),
    });
    let bar = match (a.records, duration) {
        (Some(n), None) => progress_bar(a.no_progress, n, "records"),
        (_, Some(d)) => progress_bar(a.no_progress, d.as_secs().max(1), "s"),
        (None, None) => progress_bar(a.no_progress, 0, ""),
    };
    let cpu = CpuMeter::start(a.broker_pid)?;
    let t0 = Instant::now();
    let deadline = duration.map(|d| t0 + d);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.connections {
        tasks.spawn(connection(
            client.clone(),
            url.clone(),
            values.clone(),
            a.clone(),
            tally.clone(),
            deadline,
        ));
    }
    loop {
        tokio::select! {
            done = tasks.join_next() => match done {
                None => break,
                Some(r) => r.context("a connection's task failed")?,
            },
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                let secs = t0.elapsed().as_secs_f64();
                bar.set_message(format!(
                    "{:.1} MB/s",
                    mb_per_s(tally.bytes.load(Ordering::Relaxed), secs)
                ));
                match (a.records, duration) {
                    (Some(_), None) => bar.set_position(tally.delivered.load(Ordering::Relaxed)),
                    _ => bar.set_position(secs as u64),
                }
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let delivered = tally.delivered.load(Ordering::Relaxed);
    let bytes = tally.bytes.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    let first_error = tally
        .first_error
        .lock()
        .ok()
        .and_then(|g| g.clone())
        .unwrap_or_default();
    if delivered == 0 {
        bail!("no record was produced: {first_error}");
    }
    if errors > 0 {
        eprintln!("warning: {errors} records failed; the first: {first_error}");
    }
    let (cpu_s, cpu_per_gb) = cpu.finish(bytes)?;
    let latency = tally.latency_us.lock().ok().and_then(|h| latency_of(&h));
    let mut settings = BTreeMap::new();
    settings.insert("partitions".into(), parts.to_string());
    settings.insert("record_size".into(), a.record_size.to_string());
    settings.insert("keyed".into(), a.keyed.to_string());
    settings.insert("batch".into(), a.batch.to_string());
    settings.insert("connections".into(), a.connections.to_string());
    settings.insert(
        "requests".into(),
        tally.requests.load(Ordering::Relaxed).to_string(),
    );
    settings.insert("latency".into(), "per request".into());
    Ok(Report {
        mode: "http-produce".into(),
        topic: Some(a.topic.clone()),
        records: delivered,
        bytes,
        seconds: secs,
        mb_per_s: mb_per_s(bytes, secs),
        records_per_s: delivered as f64 / secs,
        latency,
        ack_gap: None,
        errors,
        broker_cpu_seconds: cpu_s,
        broker_cpu_s_per_gb: cpu_per_gb,
        disk_mb_per_s: None,
        end_to_end: None,
        end_txn: None,
        settings,
    })
}

fn progress_bar(hidden: bool, len: u64, unit: &str) -> indicatif::ProgressBar {
    progress(
        &BrokerArgs {
            bootstrap: String::new(),
            topic: String::new(),
            broker_pid: None,
            timeout: Duration::ZERO,
            no_progress: hidden,
            client_properties: Vec::new(),
        },
        len,
        unit,
    )
}

/// One keep-alive connection: a request at a time until the deadline or the records
/// run out (or a record fails).
async fn connection(
    client: reqwest::Client,
    url: String,
    values: Arc<JsonValues>,
    a: HttpProduceArgs,
    tally: Arc<HttpTally>,
    deadline: Option<Instant>,
) {
    let capacity = (a.batch as usize).saturating_mul(a.record_size as usize + 48) + 64;
    let mut sizes: Vec<u64> = Vec::with_capacity(a.batch as usize);
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) || tally.errors.load(Ordering::Relaxed) > 0
        {
            return;
        }
        let first = tally.next.fetch_add(a.batch, Ordering::Relaxed);
        let n = match a.records {
            Some(total) if first >= total => return,
            Some(total) => a.batch.min(total - first),
            None => a.batch,
        };
        let mut body = Vec::with_capacity(capacity);
        sizes.clear();
        body.extend_from_slice(b"{\"records\":[");
        for i in first..first + n {
            if i > first {
                body.push(b',');
            }
            let mut size = 0;
            if a.keyed {
                body.extend_from_slice(b"{\"key\":");
                let at = body.len();
                write_json_key(i, a.keys, &mut body);
                size += body.len() - at;
                body.extend_from_slice(b",\"value\":");
            } else {
                body.extend_from_slice(b"{\"value\":");
            }
            let at = body.len();
            values.write(i, &mut body);
            size += body.len() - at;
            body.push(b'}');
            sizes.push(size as u64);
        }
        body.extend_from_slice(b"]}");
        let started = Instant::now();
        let sent = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, V2_JSON)
            .body(body)
            .send()
            .await;
        let answer = match sent {
            Ok(r) => {
                let status = r.status();
                r.bytes().await.map(|b| (status, b))
            }
            Err(e) => Err(e),
        };
        tally.requests.fetch_add(1, Ordering::Relaxed);
        let (status, body) = match answer {
            Ok(x) => x,
            Err(e) => {
                tally.fail(n, || format!("POST {url}: {e}"));
                continue;
            }
        };
        if !status.is_success() {
            tally.fail(n, || {
                format!("POST {url}: {status} {}", String::from_utf8_lossy(&body))
            });
            continue;
        }
        if let Ok(mut h) = tally.latency_us.lock() {
            h.saturating_record(started.elapsed().as_micros().max(1) as u64);
        }
        let answer: ProduceAnswer = match serde_json::from_slice(&body) {
            Ok(x) => x,
            Err(e) => {
                tally.fail(n, || format!("POST {url}: unexpected answer ({e})"));
                continue;
            }
        };
        if answer.offsets.len() as u64 != n {
            tally.fail(n, || {
                format!(
                    "POST {url}: {} offsets for {n} records",
                    answer.offsets.len()
                )
            });
            continue;
        }
        let (mut ok, mut ok_bytes) = (0u64, 0u64);
        for (o, size) in answer.offsets.iter().zip(&sizes) {
            match &o.error_code {
                None | Some(serde_json::Value::Null) => {
                    ok += 1;
                    ok_bytes += size;
                }
                Some(code) => tally.fail(1, || {
                    format!(
                        "error_code {code}: {}",
                        o.error.as_deref().unwrap_or("(no message)")
                    )
                }),
            }
        }
        tally.delivered.fetch_add(ok, Ordering::Relaxed);
        tally.bytes.fetch_add(ok_bytes, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// sse-latency

/// What every value of an `sse-latency` run carries (its `data` padding is skipped).
#[derive(Debug, Deserialize)]
struct Stamp {
    probe: bool,
    run: u64,
    sent_us: u64,
    seq: u64,
}

/// A record event of the stream (format json).
#[derive(Debug, Deserialize)]
struct SseRecord {
    topic: String,
    partition: i32,
    offset: i64,
    value: serde_json::Value,
}

/// One consumer's receipts.
#[derive(Debug)]
struct Receipts {
    run: u64,
    /// Probes seen: the consumer is in its group and reading.
    ready: bool,
    /// Records sent before this (µs on the run's clock) are left out of the latencies.
    warm_from_us: u64,
    seen: Vec<bool>,
    received: u64,
    duplicates: u64,
    latency_us: Histogram<u64>,
}

impl Receipts {
    fn new(run: u64) -> anyhow::Result<Receipts> {
        Ok(Receipts {
            run,
            ready: false,
            warm_from_us: u64::MAX,
            seen: Vec::new(),
            received: 0,
            duplicates: 0,
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .context("histogram bounds")?,
        })
    }

    fn record(&mut self, s: &Stamp, now_us: u64) {
        if s.run != self.run {
            return;
        }
        if s.probe {
            self.ready = true;
            return;
        }
        let i = s.seq as usize;
        if self.seen.len() <= i {
            self.seen.resize(i + 1, false);
        }
        if self.seen[i] {
            self.duplicates += 1;
            return;
        }
        self.seen[i] = true;
        self.received += 1;
        if s.sent_us >= self.warm_from_us {
            self.latency_us
                .saturating_record(now_us.saturating_sub(s.sent_us).max(1));
        }
    }

    fn receipt(&self, delivered: u64) -> Receipt {
        Receipt {
            received: self.received,
            missed: delivered.saturating_sub(self.received),
            duplicates: self.duplicates,
            latency: latency_of(&self.latency_us),
        }
    }
}

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Delivery counts of the stamped producer (probes not counted).
#[derive(Debug, Default)]
struct Acked {
    quiet: Quiet,
    delivered: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl rdkafka::client::ClientContext for Acked {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.quiet.log(level, fac, log_message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.quiet.error(error, reason);
    }
}

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
            mode: "sse-latency".into(),
            topic: Some(b.topic.clone()),
            records: delivered,
            bytes,
            seconds: secs,
            mb_per_s: mb_per_s(bytes, secs),
            records_per_s: delivered as f64 / secs,
            latency: None,
            ack_gap: None,
            errors,
            broker_cpu_seconds: None,
            broker_cpu_s_per_gb: None,
            disk_mb_per_s: None,
            end_to_end: Some(EndToEnd {
                kafka: k,
                sse: s,
                p99_added_ms,
                acks: acks.load(Ordering::Relaxed),
                ack_errors: ack_errors.load(Ordering::Relaxed),
            }),
            end_txn: None,
            settings,
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

struct SseClient {
    http: String,
    group: String,
    topic: String,
    sse: Shared<Receipts>,
    stop: Arc<AtomicBool>,
    acks: Arc<AtomicU64>,
    ack_errors: Arc<AtomicU64>,
    ack_every: u64,
    ack_interval: Duration,
    timeout: Duration,
    now_us: Box<dyn Fn() -> u64 + Send>,
}

/// Reads the stream until told to stop, acknowledging every `ack_every` records or
/// `ack_interval`, whichever comes first, as a real client would: the acknowledgement
/// is posted from its own task, so reading never waits for it.
async fn sse_client(c: SseClient) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(c.timeout)
        .build()
        .context("cannot build the HTTP client")?;
    let base = format!("http://{}", c.http);
    let url = format!(
        "{base}/consumers/{}/stream?topic={}&format=json&auto.offset.reset=latest",
        c.group, c.topic
    );
    let mut resp = client
        .get(&url)
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        bail!("GET {url}: {status} {body}");
    }
    // Offsets to acknowledge, the last record per partition; a notification when
    // ack_every records wait.
    let pending: Shared<BTreeMap<(String, i32), i64>> = Arc::default();
    let due = Arc::new(tokio::sync::Notify::new());
    let mut acker: Option<tokio::task::JoinHandle<()>> = None;
    let mut buf: Vec<u8> = Vec::new();
    let mut unacked = 0u64;
    while !c.stop.load(Ordering::Relaxed) {
        let chunk = tokio::select! {
            chunk = resp.chunk() => chunk.context("reading the stream")?,
            _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
        };
        let Some(chunk) = chunk else {
            bail!("the gateway ended the stream");
        };
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let (mut name, mut data) = ("message", Vec::new());
            for line in event.split(|b| *b == b'\n') {
                if let Some(v) = line.strip_prefix(b"event:") {
                    name = match v.trim_ascii() {
                        b"session" => "session",
                        b"record" => "record",
                        b"error" => "error",
                        _ => "other",
                    };
                } else if let Some(v) = line.strip_prefix(b"data:") {
                    data.extend_from_slice(v.strip_prefix(b" ").unwrap_or(v));
                }
            }
            match name {
                "session" => {
                    let s: serde_json::Value =
                        serde_json::from_slice(&data).context("the session event")?;
                    let uri = s["ack_uri"]
                        .as_str()
                        .context("the session event has no ack_uri")?;
                    if acker.is_none() {
                        acker = Some(tokio::spawn(ack_loop(
                            client.clone(),
                            format!("{base}{uri}"),
                            pending.clone(),
                            due.clone(),
                            c.ack_interval,
                            c.acks.clone(),
                            c.ack_errors.clone(),
                        )));
                    }
                }
                "record" => {
                    let Ok(r) = serde_json::from_slice::<SseRecord>(&data) else {
                        continue;
                    };
                    let stamp = serde_json::from_value::<Stamp>(r.value).ok();
                    let now = (c.now_us)();
                    if let Some(s) = stamp {
                        lock(&c.sse).record(&s, now);
                    }
                    lock(&pending).insert((r.topic, r.partition), r.offset);
                    unacked += 1;
                    if unacked >= c.ack_every {
                        unacked = 0;
                        due.notify_one();
                    }
                }
                "error" => eprintln!("warning: stream error: {}", String::from_utf8_lossy(&data)),
                _ => {}
            }
        }
    }
    if let Some(a) = acker {
        a.abort();
    }
    Ok(())
}

async fn ack_loop(
    client: reqwest::Client,
    uri: String,
    pending: Shared<BTreeMap<(String, i32), i64>>,
    due: Arc<tokio::sync::Notify>,
    interval: Duration,
    acks: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) {
    loop {
        tokio::select! {
            _ = due.notified() => {}
            _ = tokio::time::sleep(interval) => {}
        }
        let offsets = std::mem::take(&mut *lock(&pending));
        if offsets.is_empty() {
            continue;
        }
        let body = serde_json::json!({
            "offsets": offsets
                .iter()
                .map(|((t, p), o)| serde_json::json!({"topic": t, "partition": p, "offset": o}))
                .collect::<Vec<_>>()
        });
        let ok = match client
            .post(&uri)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
        {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        };
        acks.fetch_add(1, Ordering::Relaxed);
        if !ok {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn json_values_are_exact_and_canonical() {
        let v = JsonValues::new(1024).unwrap();
        for i in [0u64, 1, 4095, 1 << 40] {
            let mut out = Vec::new();
            v.write(i, &mut out);
            assert_eq!(out.len(), 1024);
            // The gateway re-encodes what it parses: the same text must come back.
            let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(serde_json::to_vec(&parsed).unwrap(), out);
        }
        let mut k = Vec::new();
        write_json_key(12, 10, &mut k);
        assert_eq!(k, b"\"key-2\"");
        assert!(JsonValues::new(10).is_err());
    }

    #[test]
    fn receipts_count_misses_duplicates_and_skip_the_warmup() {
        let mut r = Receipts::new(7).unwrap();
        let stamp = |seq, sent_us| Stamp {
            probe: false,
            run: 7,
            sent_us,
            seq,
        };
        r.record(
            &Stamp {
                probe: true,
                run: 7,
                sent_us: 0,
                seq: 0,
            },
            5,
        );
        assert!(r.ready && r.received == 0);
        r.warm_from_us = 100;
        r.record(&stamp(0, 50), 60);
        r.record(&stamp(1, 150), 1150);
        r.record(&stamp(1, 150), 1200);
        r.record(
            &Stamp {
                run: 8,
                ..stamp(2, 200)
            },
            300,
        );
        let got = r.receipt(3);
        assert_eq!((got.received, got.missed, got.duplicates), (2, 1, 1));
        assert_eq!(got.latency.unwrap().p50_ms, 1.0);
    }
}
