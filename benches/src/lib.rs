//! The Strata load generator: drives any Kafka-compatible broker through librdkafka (the
//! rdkafka crate) and reports throughput, delivery latency and the broker's CPU cost.
//!
//! `strata-benches produce` writes records of a chosen size (keyed or not, acks 1 or all,
//! at a target rate or flat out) for a duration or a record count; `consume` reads a topic
//! from the beginning, every partition assigned, as fast as it can; `disk` writes the same
//! number of bytes straight to a directory so the figures can be read against the disk.
//! `http-produce` and `sse-latency` drive the REST gateway (see [`gateway`]).
//! Each prints a human summary and one machine-readable line: `RESULT {json}`.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;
use serde::Serialize;

pub mod gateway;
pub use gateway::{EndToEnd, GatewayArgs, HttpProduceArgs, Receipt, SseLatencyArgs};
/// The codec `produce --compression` names (strata_proto's).
pub use strata_proto::Compression;

/// Load generator for Kafka-compatible brokers.
#[derive(Parser, Debug)]
#[command(name = "strata-benches", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write records to a topic and report throughput and delivery latency.
    Produce(ProduceArgs),
    /// Read a topic from the beginning (all partitions assigned) as fast as possible.
    Consume(ConsumeArgs),
    /// Write bytes sequentially to a directory and fsync: the disk's own rate.
    Disk(DiskArgs),
    /// Commit consumer-group offsets as fast as possible (or at --rate) from several
    /// clients and report commits per second and commit latency.
    Commits(CommitArgs),
    /// Produce batches of JSON records over the REST gateway (v2, keep-alive) and report
    /// throughput counted as `produce` counts it.
    HttpProduce(HttpProduceArgs),
    /// Produce at a fixed rate while a Kafka consumer and the gateway's server-sent
    /// events stream read the topic; report each one's end-to-end latency.
    SseLatency(SseLatencyArgs),
}

#[derive(Args, Debug, Clone)]
pub struct CommitArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Concurrent committers, each its own group (`{group}-{i}`) committing one
    /// partition's offset per request (as consumers using assign() do).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub clients: u64,
    /// Group id prefix.
    #[arg(long, default_value = "bench")]
    pub group: String,
    /// How long to commit for.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

/// Flags of the modes that talk to a broker.
#[derive(Args, Debug, Clone)]
pub struct BrokerArgs {
    /// HOST:PORT[,HOST:PORT...] to bootstrap from.
    #[arg(long, env = "STRATA_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// The topic (create it first, e.g. `strata topic create T --partitions 8`).
    #[arg(long)]
    pub topic: String,
    /// The broker's process id, to report its CPU seconds per GB (from /proc/PID/stat).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Give up when the broker makes no progress for this long.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Do not draw a progress bar (it is hidden anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// A librdkafka setting, KEY=VALUE (repeatable): security.protocol, sasl.*, ssl.*.
    #[arg(long = "client-property", value_name = "KEY=VALUE", value_parser = key_value)]
    pub client_properties: Vec<(String, String)>,
}

fn key_value(v: &str) -> Result<(String, String), String> {
    let (k, val) = v
        .split_once('=')
        .ok_or_else(|| format!("'{v}' must be KEY=VALUE"))?;
    Ok((k.to_string(), val.to_string()))
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Acks {
    #[value(name = "1")]
    #[serde(rename = "1")]
    One,
    All,
}

/// clap's parser for a codec: strata_proto's names are the possible values (listed in
/// --help and in the error for any other value).
fn compression_parser() -> impl TypedValueParser<Value = Compression> {
    PossibleValuesParser::new(Compression::ALL.map(Compression::name))
        .try_map(|name| name.parse::<Compression>())
}

#[derive(Args, Debug, Clone)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Value size of each record (e.g. 1024, 1KiB, 4KB).
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    pub record_size: u64,
    /// Give records keys (key-0 .. key-(keys-1), round robin), partitioned by murmur2 as
    /// Kafka's Java client does. Without it records have no key.
    #[arg(long)]
    pub keyed: bool,
    /// How many distinct keys with --keyed.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Acknowledgements: 1 (the leader) or all (every in-sync replica).
    #[arg(long, value_enum, default_value_t = Acks::One)]
    pub acks: Acks,
    /// Use the idempotent producer (needs --acks all).
    #[arg(long)]
    pub idempotent: bool,
    /// Target rate in records per second [default: flat out]
    #[arg(long)]
    pub rate: Option<f64>,
    /// How long to send for [default: 10s, unless --records is given]
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// How many records to send (with --duration: whichever comes first).
    #[arg(long)]
    pub records: Option<u64>,
    /// librdkafka linger.ms: how long a batch waits for more records.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// librdkafka batch.size: the largest batch, in bytes (e.g. 1MiB).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub batch_size: u64,
    /// Batch compression. Values are random bytes, so this measures the codec's cost,
    /// not a ratio.
    #[arg(long, default_value_t = Compression::None, value_parser = compression_parser())]
    pub compression: Compression,
    /// Leave records sent in the first part of the run out of the latency figures (the
    /// client's start-up: connections, metadata, and for an idempotent producer its
    /// producer id, which librdkafka first asks for on a 500 ms timer).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// After producing, also write the same number of bytes to this directory (write,
    /// then fsync) and report the disk's rate alongside.
    #[arg(long)]
    pub disk_dir: Option<PathBuf>,
    /// Each value is fresh pseudo-random bytes (by default values are windows into one
    /// random buffer, which a columnar file's codec finds repeats in): incompressible
    /// for every codec, as encrypted or already-compressed payloads are.
    #[arg(long, conflicts_with = "json_values")]
    pub unique_values: bool,
    /// Values are JSON objects `{"data":"..."}` of exactly --record-size bytes and keys
    /// JSON strings (`"key-N"`): the bytes `http-produce` sends through the gateway.
    #[arg(long)]
    pub json_values: bool,
    /// Produce in transactions with this transactional.id, committed every
    /// --commit-interval (acks=all, idempotent)
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// How often a transaction ends (with --transactional-id)
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub commit_interval: Duration,
    /// Abort every Nth transaction instead of committing it (with --transactional-id;
    /// 10 aborts a tenth of the records)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub abort_every: Option<u64>,
    /// The most the client buffers before send() waits (librdkafka's
    /// queue.buffering.max.kbytes; its default is 1 GiB; the Java client's buffer.memory
    /// is 32 MiB) [default: librdkafka's]
    #[arg(long, value_parser = parse_size)]
    pub max_buffered: Option<u64>,
    /// Without --transactional-id: wait for every buffered record this often, as a
    /// transaction's commit does (what committing costs the client alone)
    #[arg(long, value_parser = humantime::parse_duration)]
    pub flush_interval: Option<Duration>,
}

#[derive(Args, Debug, Clone)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Stop after this many records [default: when every partition is caught up with the
    /// end it had at the start]
    #[arg(long)]
    pub records: Option<u64>,
    /// read_committed (librdkafka's default: below the last stable offset, aborted
    /// transactions skipped) or read_uncommitted
    #[arg(long, default_value = "read_committed", value_parser = ["read_committed", "read_uncommitted"])]
    pub isolation: String,
}

#[derive(Args, Debug, Clone)]
pub struct DiskArgs {
    /// The directory to write a temporary file in (the broker's data directory's disk).
    #[arg(long)]
    pub dir: PathBuf,
    /// How many bytes to write (e.g. 1GiB).
    #[arg(long, value_parser = parse_size)]
    pub bytes: u64,
    /// Size of each write.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub block_size: u64,
}

/// Parses a byte size: a number, optionally with K/KiB, M/MiB, G/GiB (powers of 1024) or
/// KB, MB, GB (powers of 1000).
pub fn parse_size(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{v}' is not a size such as 1024, 1KiB or 4MB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("'{v}': unknown unit '{other}'")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{v}' is too large"))
}

/// Delivery latency percentiles, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// The longest gap between two acknowledgements of one partition (a killed leader's
/// partitions: the time until they accept writes again, as a client sees it).
#[derive(Debug, Clone, Serialize)]
pub struct AckGap {
    pub max_ms: f64,
    pub partition: i32,
}

/// What one run measured. Rates use MB = 10^6 bytes and GB = 10^9 bytes; bytes are record
/// keys plus values (what clients send, not the batch framing).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: String,
    pub topic: Option<String>,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub records_per_s: f64,
    /// Produce only: send to delivery callback.
    pub latency: Option<Latency>,
    /// Produce only: the longest time one partition went without an acknowledgement.
    pub ack_gap: Option<AckGap>,
    pub errors: u64,
    /// None without --broker-pid.
    pub broker_cpu_seconds: Option<f64>,
    pub broker_cpu_s_per_gb: Option<f64>,
    /// The raw sequential write rate of the same number of bytes (disk mode, or produce
    /// with --disk-dir).
    pub disk_mb_per_s: Option<f64>,
    /// sse-latency only: each consumer's end-to-end latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_to_end: Option<EndToEnd>,
    /// Transactional produce only: how long ending a transaction took (EndTxn, after
    /// its records were flushed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_txn: Option<Latency>,
    /// The run's settings, for the record.
    pub settings: BTreeMap<String, String>,
}

impl Report {
    /// The machine-readable line: `RESULT {json}`.
    pub fn result_line(&self) -> String {
        format!(
            "RESULT {}",
            serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        )
    }

    /// A few lines for people.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        s += &format!("{} {}\n", self.mode, settings.join(" "));
        s += &format!(
            "  {} records, {:.1} MB in {:.2} s: {:.1} MB/s, {:.0} records/s",
            self.records,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.mb_per_s,
            self.records_per_s
        );
        if self.errors > 0 {
            s += &format!(", {} errors", self.errors);
        }
        s += "\n";
        if let Some(l) = &self.latency {
            s += &format!(
                "  delivery latency: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms\n",
                l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
            );
        }
        if let Some(g) = &self.ack_gap {
            s += &format!(
                "  longest wait between acknowledgements of one partition: {:.0} ms (partition {})\n",
                g.max_ms, g.partition
            );
        }
        if self.mode != "disk" {
            match (self.broker_cpu_seconds, self.broker_cpu_s_per_gb) {
                (Some(cpu), Some(per_gb)) => {
                    s += &format!("  broker CPU: {cpu:.2} s, {per_gb:.3} CPU-s per GB\n")
                }
                _ => s += "  broker CPU: n/a (give --broker-pid)\n",
            }
        }
        if let Some(d) = self.disk_mb_per_s {
            s += &format!("  disk sequential write (write + fsync): {d:.1} MB/s\n");
        }
        if let Some(e) = &self.end_to_end {
            for (who, r) in [("kafka consumer", &e.kafka), ("sse stream    ", &e.sse)] {
                s += &format!(
                    "  {who}: {} received, {} missed, {} duplicates",
                    r.received, r.missed, r.duplicates
                );
                if let Some(l) = &r.latency {
                    s += &format!(
                        "; end-to-end p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
                        l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
                    );
                }
                s += "\n";
            }
            if let Some(d) = e.p99_added_ms {
                s += &format!("  sse p99 - kafka p99: {d:+.2} ms\n");
            }
            s += &format!("  acknowledgements: {} ({} failed)\n", e.acks, e.ack_errors);
        }
        s
    }
}

/// Runs one mode, prints the human summary and the RESULT line to stdout, and returns the
/// report.
pub fn run(command: Command) -> anyhow::Result<Report> {
    let report = match command {
        Command::Produce(a) => produce(&a)?,
        Command::Consume(a) => consume(&a)?,
        Command::Disk(a) => disk(&a)?,
        Command::Commits(a) => commits(&a)?,
        Command::HttpProduce(a) => gateway::http_produce(&a)?,
        Command::SseLatency(a) => gateway::sse_latency(&a)?,
    };
    let mut out = std::io::stdout().lock();
    write!(out, "{}", report.human())?;
    writeln!(out, "{}", report.result_line())?;
    out.flush()?;
    Ok(report)
}

// ---------------------------------------------------------------------------------------
// Broker CPU from /proc

/// Clock ticks per second for /proc/PID/stat's utime and stime. `getconf` rather than
/// sysconf(3) because the workspace forbids unsafe code; 100 is the value on every Linux
/// we know of.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .with_context(|| format!("--broker-pid {pid}: cannot read {path}"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("--broker-pid {pid}: cannot parse {path}"))
}

/// Fields 14 and 15 of /proc/PID/stat. The command name (field 2) is in parentheses and
/// may hold spaces and parentheses itself, so count from the last ')'.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, so index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Measures a broker's CPU time over a run.
struct CpuMeter {
    pid: Option<u32>,
    start: u64,
}

impl CpuMeter {
    fn start(pid: Option<u32>) -> anyhow::Result<CpuMeter> {
        let start = match pid {
            Some(p) => cpu_ticks(p)?,
            None => 0,
        };
        Ok(CpuMeter { pid, start })
    }

    /// CPU seconds used since start, and per GB of `bytes`.
    fn finish(&self, bytes: u64) -> anyhow::Result<(Option<f64>, Option<f64>)> {
        let Some(pid) = self.pid else {
            return Ok((None, None));
        };
        let secs = cpu_ticks(pid)?.saturating_sub(self.start) as f64 / clock_ticks();
        let per_gb = (bytes > 0).then(|| secs / (bytes as f64 / 1e9));
        Ok((Some(secs), per_gb))
    }
}

// ---------------------------------------------------------------------------------------
// Shared client pieces

/// Keeps librdkafka's log out of the report unless it is an error, and remembers the last
/// global error to explain a stall.
#[derive(Debug, Default)]
struct Quiet {
    last_error: Mutex<Option<String>>,
}

impl Quiet {
    fn last_error(&self) -> String {
        self.last_error
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_else(|| "none reported".into())
    }
}

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Error as i32) {
            eprintln!("librdkafka {fac}: {log_message}");
        }
    }
    fn error(&self, error: KafkaError, reason: &str) {
        if let Ok(mut g) = self.last_error.lock() {
            *g = Some(format!("{error}: {reason}"));
        }
    }
}

impl ConsumerContext for Quiet {}

fn base_config(b: &BrokerArgs) -> ClientConfig {
    let mut c = ClientConfig::new();
    let ms = b.timeout.as_millis().to_string();
    c.set("bootstrap.servers", &b.bootstrap)
        .set("client.id", "strata-benches")
        .set("socket.timeout.ms", &ms)
        .set("socket.connection.setup.timeout.ms", &ms)
        .set_log_level(RDKafkaLogLevel::Error);
    for (k, v) in &b.client_properties {
        c.set(k, v);
    }
    c
}

/// The topic's partition count, or an error that says what to check.
fn partitions<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    b: &BrokerArgs,
) -> anyhow::Result<i32> {
    let md = client
        .fetch_metadata(Some(&b.topic), b.timeout)
        .with_context(|| {
            format!(
                "no metadata from {} within {:?}: is the broker running there (--bootstrap)?",
                b.bootstrap, b.timeout
            )
        })?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == b.topic)
        .with_context(|| format!("--topic {}: no metadata", b.topic))?;
    if let Some(e) = t.error() {
        bail!(
            "--topic {}: {} (create it first, e.g. `strata topic create {} --partitions 8`)",
            b.topic,
            RDKafkaErrorCode::from(e),
            b.topic
        );
    }
    Ok(t.partitions().len() as i32)
}

fn progress(b: &BrokerArgs, len: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(len),
        if b.no_progress {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(4)
        },
    );
    let template = format!("{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

// ---------------------------------------------------------------------------------------
// Produce

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

impl ClientContext for Deliveries {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.quiet.log(level, fac, log_message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.quiet.error(error, reason);
    }
}

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

/// Pseudo-random bytes (xorshift64*): incompressible like real payloads at their worst, and
/// cheap enough not to show in the client's CPU.
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; n];
    fill_random(&mut out, seed);
    out
}

/// Fills `out` with [`random_bytes`]' sequence from `seed`.
fn fill_random(out: &mut [u8], mut seed: u64) {
    // xorshift stays at zero from zero.
    if seed == 0 {
        seed = 0x9E37_79B9_7F4A_7C15;
    }
    for chunk in out.chunks_mut(8) {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        let word = seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

fn produce(a: &ProduceArgs) -> anyhow::Result<Report> {
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
        true => Some(gateway::JsonValues::new(a.record_size)?),
        false => None,
    };
    let mut key = Vec::new();
    let mut json_value = Vec::new();
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
        let sent_us = ctx.start.elapsed().as_micros() as usize;
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(&b.topic, sent_us).payload(value);
        if a.keyed {
            key.clear();
            if json.is_some() {
                gateway::write_json_key(sent, a.keys, &mut key);
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
    let latency = ctx
        .latency_us
        .lock()
        .ok()
        .filter(|h| !h.is_empty())
        .map(|h| Latency {
            p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
            p999_ms: h.value_at_quantile(0.999) as f64 / 1e3,
            max_ms: h.max() as f64 / 1e3,
        });
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
    let end_txn = (!end_txn.is_empty()).then(|| Latency {
        p50_ms: end_txn.value_at_quantile(0.5) as f64 / 1e3,
        p99_ms: end_txn.value_at_quantile(0.99) as f64 / 1e3,
        p999_ms: end_txn.value_at_quantile(0.999) as f64 / 1e3,
        max_ms: end_txn.max() as f64 / 1e3,
    });
    Ok(Report {
        mode: "produce".into(),
        topic: Some(b.topic.clone()),
        records: delivered,
        bytes,
        seconds: secs,
        mb_per_s: mb_per_s(bytes, secs),
        records_per_s: delivered as f64 / secs,
        latency,
        ack_gap,
        errors,
        broker_cpu_seconds: cpu_s,
        broker_cpu_s_per_gb: cpu_per_gb,
        disk_mb_per_s,
        end_to_end: None,
        end_txn,
        settings,
    })
}

// ---------------------------------------------------------------------------------------
// Commits

fn commits(a: &CommitArgs) -> anyhow::Result<Report> {
    let b = &a.broker;
    let probe: BaseConsumer<Quiet> = base_config(b)
        .set("group.id", format!("{}-probe", a.group))
        .create_with_context(Quiet::default())
        .context("cannot create a client")?;
    let parts = partitions(probe.client(), b)?;
    drop(probe);
    let latency = Mutex::new(Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?);
    let done = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let t0 = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let mut handles = Vec::new();
        for i in 0..a.clients {
            let (latency, done, errors, first_error) = (&latency, &done, &errors, &first_error);
            let c: BaseConsumer<Quiet> = base_config(b)
                .set("group.id", format!("{}-{i}", a.group))
                .set("enable.auto.commit", "false")
                .create_with_context(Quiet::default())
                .context("cannot create a committer")?;
            let topic = b.topic.clone();
            let duration = a.duration;
            handles.push(scope.spawn(move || {
                let mut offset = 0i64;
                let mut local =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
                while t0.elapsed() < duration {
                    offset += 1;
                    let mut tpl = TopicPartitionList::new();
                    let p = (offset % i64::from(parts)) as i32;
                    if tpl
                        .add_partition_offset(&topic, p, Offset::Offset(offset))
                        .is_err()
                    {
                        continue;
                    }
                    let started = Instant::now();
                    match c.commit(&tpl, rdkafka::consumer::CommitMode::Sync) {
                        Ok(()) => {
                            local.saturating_record(started.elapsed().as_micros() as u64);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut g) = first_error.lock() {
                                g.get_or_insert_with(|| e.to_string());
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
                if let Ok(mut h) = latency.lock() {
                    let _ = h.add(&local);
                }
            }));
        }
        for h in handles {
            let _ = h.join();
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    if n == 0 {
        let e = first_error
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_default();
        bail!("no commit succeeded: {e}");
    }
    let latency = latency
        .lock()
        .ok()
        .filter(|h| !h.is_empty())
        .map(|h| Latency {
            p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
            p999_ms: h.value_at_quantile(0.999) as f64 / 1e3,
            max_ms: h.max() as f64 / 1e3,
        });
    let mut settings = BTreeMap::new();
    settings.insert("clients".into(), a.clients.to_string());
    settings.insert("partitions".into(), parts.to_string());
    Ok(Report {
        mode: "commits".into(),
        topic: Some(b.topic.clone()),
        records: n,
        bytes: 0,
        seconds: secs,
        mb_per_s: 0.0,
        records_per_s: n as f64 / secs,
        latency,
        ack_gap: None,
        errors: errors.load(Ordering::Relaxed),
        broker_cpu_seconds: None,
        broker_cpu_s_per_gb: None,
        disk_mb_per_s: None,
        end_to_end: None,
        end_txn: None,
        settings,
    })
}

// ---------------------------------------------------------------------------------------
// Consume

fn consume(a: &ConsumeArgs) -> anyhow::Result<Report> {
    let b = &a.broker;
    let mut config = base_config(b);
    config
        // librdkafka's assign() needs a group handle; we never subscribe or commit, so no
        // group forms (and brokers without group APIs are never asked about one).
        .set("group.id", "strata-benches")
        .set("isolation.level", &a.isolation)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    let consumer: BaseConsumer<Quiet> = config
        .create_with_context(Quiet::default())
        .context("cannot create the consumer")?;
    let parts = partitions(consumer.client(), b)?;
    let mut assignment = TopicPartitionList::new();
    let mut available = 0u64;
    // Partitions still to read up to the end they had at the start.
    let mut open: BTreeMap<i32, i64> = BTreeMap::new();
    for p in 0..parts {
        let (low, high) = consumer
            .fetch_watermarks(&b.topic, p, b.timeout)
            .with_context(|| format!("ListOffsets of partition {p}"))?;
        available += (high - low).max(0) as u64;
        if high > low {
            open.insert(p, high);
        }
        assignment
            .add_partition_offset(&b.topic, p, Offset::Beginning)
            .context("bad partition list")?;
    }
    let target = a.records.map_or(available, |n| n.min(available));
    let bar = progress(b, target, "records");
    let cpu = CpuMeter::start(b.broker_pid)?;
    let t0 = Instant::now();
    consumer.assign(&assignment).context("assign")?;
    let mut records = 0u64;
    let mut bytes = 0u64;
    let mut last_progress = Instant::now();
    let mut last_draw = t0;
    while records < target && !open.is_empty() {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                records += 1;
                bytes += (m.payload_len() + m.key().map_or(0, <[u8]>::len)) as u64;
                if open
                    .get(&m.partition())
                    .is_some_and(|end| m.offset() + 1 >= *end)
                {
                    open.remove(&m.partition());
                }
                last_progress = Instant::now();
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
                last_progress = Instant::now();
            }
            Some(Err(e)) => eprintln!("warning: {e}"),
            None => {}
        }
        if last_progress.elapsed() > b.timeout {
            bail!(
                "no records for {:?} after {records} of {target} (last error: {})",
                b.timeout,
                consumer.context().last_error()
            );
        }
        if last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            bar.set_position(records);
            bar.set_message(format!(
                "{:.1} MB/s",
                mb_per_s(bytes, t0.elapsed().as_secs_f64())
            ));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let (cpu_s, cpu_per_gb) = cpu.finish(bytes)?;
    let mut settings = BTreeMap::new();
    settings.insert("partitions".into(), parts.to_string());
    settings.insert("available".into(), available.to_string());
    settings.insert("isolation".into(), a.isolation.clone());
    Ok(Report {
        mode: "consume".into(),
        topic: Some(b.topic.clone()),
        records,
        bytes,
        seconds: secs,
        mb_per_s: mb_per_s(bytes, secs),
        records_per_s: records as f64 / secs,
        latency: None,
        ack_gap: None,
        errors: 0,
        broker_cpu_seconds: cpu_s,
        broker_cpu_s_per_gb: cpu_per_gb,
        disk_mb_per_s: None,
        end_to_end: None,
        end_txn: None,
        settings,
    })
}

// ---------------------------------------------------------------------------------------
// Disk

/// Writes `bytes` to a new file in `dir` in `block` sized writes, fsyncs it, deletes it.
/// Returns the seconds taken (open to fsync) and MB/s.
fn disk_write(dir: &Path, bytes: u64, block: u64) -> anyhow::Result<(f64, f64)> {
    if block == 0 {
        bail!("--block-size must be at least 1 byte");
    }
    let path = dir.join(format!(".strata-disk-bench-{}", std::process::id()));
    let buf = random_bytes(block as usize, 0xD1B5_4A32_D192_ED03);
    let t0 = Instant::now();
    let result = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block) as usize;
            f.write_all(&buf[..n])
                .with_context(|| format!("cannot write {}", path.display()))?;
            left -= n as u64;
        }
        f.sync_all()
            .with_context(|| format!("cannot fsync {}", path.display()))
    })();
    let secs = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    result?;
    Ok((secs, mb_per_s(bytes, secs)))
}

fn disk(a: &DiskArgs) -> anyhow::Result<Report> {
    let (secs, rate) = disk_write(&a.dir, a.bytes, a.block_size)?;
    let mut settings = BTreeMap::new();
    settings.insert("dir".into(), a.dir.display().to_string());
    settings.insert("block_size".into(), a.block_size.to_string());
    Ok(Report {
        mode: "disk".into(),
        topic: None,
        records: 0,
        bytes: a.bytes,
        seconds: secs,
        mb_per_s: rate,
        records_per_s: 0.0,
        latency: None,
        ack_gap: None,
        errors: 0,
        broker_cpu_seconds: None,
        broker_cpu_s_per_gb: None,
        disk_mb_per_s: Some(rate),
        end_to_end: None,
        end_txn: None,
        settings,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("4KB"), Ok(4000));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("1 parsec").is_err());
    }

    #[test]
    fn compression_flag_takes_strata_protos_codec_names() {
        let parse = |extra: &[&str]| {
            let argv = ["strata-benches", "produce", "--topic", "t"]
                .iter()
                .chain(extra);
            match Cli::try_parse_from(argv).map(|c| c.command) {
                Ok(Command::Produce(a)) => Ok(a.compression),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.kind()),
            }
        };
        assert_eq!(parse(&[]), Ok(Compression::None));
        for c in Compression::ALL {
            assert_eq!(parse(&["--compression", c.name()]), Ok(c));
        }
        assert_eq!(
            parse(&["--compression", "brotli"]),
            Err(clap::error::ErrorKind::InvalidValue)
        );
    }

    #[test]
    fn proc_stat_with_awkward_names() {
        // Fields: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime ...
        let stat = "42 (str ata) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        let own = cpu_ticks(std::process::id()).unwrap();
        assert!(own < u64::MAX);
    }

    #[test]
    fn disk_mode_writes_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let r = disk(&DiskArgs {
            dir: dir.path().to_path_buf(),
            bytes: 3 << 20,
            block_size: 1 << 20,
        })
        .unwrap();
        assert_eq!(r.bytes, 3 << 20);
        assert!(r.disk_mb_per_s.unwrap() > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(r.result_line().starts_with("RESULT {\"mode\":\"disk\""));
    }
}
