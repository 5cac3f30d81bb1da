//! `http-produce`: batches of JSON records posted to the gateway over keep-alive
//! connections, counted as `produce` counts them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use hdrhistogram::Histogram;
use serde::Deserialize;

use super::GatewayArgs;
use crate::client::progress;
use crate::cpu::CpuMeter;
use crate::payload::{JsonValues, write_json_key};
use crate::report::{latency_of, mb_per_s};
use crate::{BrokerArgs, Report, parse_size};

/// The v2 JSON embedded format.
const V2_JSON: &str = "application/vnd.kafka.json.v2+json";

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
        latency,
        errors,
        broker_cpu_seconds: cpu_s,
        broker_cpu_s_per_gb: cpu_per_gb,
        ..Report::new(
            "http-produce",
            Some(a.topic.clone()),
            delivered,
            bytes,
            secs,
            settings,
        )
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
