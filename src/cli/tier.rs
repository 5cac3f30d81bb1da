//! `strata tier status`: per partition, the local and remote ranges, bytes, offload lag,
//! and the cache's hit ratio, from a Strata broker's HTTP address.
//!
//! Kafka has no API for offload lag or cache statistics, so this reads the broker's
//! `/v1/tier/status` (the same figures are Prometheus metrics on `/metrics`).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::Value;

#[derive(Args, Debug)]
pub struct TierArgs {
    /// The broker's HTTP address (its --http-addr).
    #[arg(
        long,
        env = "STRATA_HTTP",
        default_value = "127.0.0.1:8080",
        global = true
    )]
    pub http: String,
    /// The broker's --http-auth credentials, when it has them: bearer:TOKEN or
    /// basic:USER:PASSWORD.
    #[arg(long, env = "STRATA_HTTP_AUTH", global = true, hide_env_values = true)]
    pub http_auth: Option<String>,
    #[command(subcommand)]
    pub command: TierCommand,
}

#[derive(Subcommand, Debug)]
pub enum TierCommand {
    /// Local and remote range, bytes and offload lag per partition; cache hit ratio.
    Status {
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Print the broker's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Parquet files of parquet.enable topics.
    Parquet {
        #[command(subcommand)]
        command: ParquetCommand,
    },
    /// The Iceberg table of a parquet.enable topic: its snapshot, files and small files;
    /// compaction; snapshot expiry.
    Iceberg {
        #[command(subcommand)]
        command: IcebergCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum IcebergCommand {
    /// The table's location, current snapshot and committed offsets, and each
    /// partition's Parquet files (how many are small).
    Status {
        /// The topic.
        #[arg(long)]
        topic: String,
        /// Print the broker's JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite every partition's small Parquet files now (the brokers otherwise rewrite
    /// them once a group reaches parquet.target.file.bytes or its day is over). Asks the
    /// broker at --http for the partitions it leads; the table gets the new files at its
    /// next commit.
    Compact {
        /// The topic.
        #[arg(long)]
        topic: String,
        /// Ask and return without waiting.
        #[arg(long)]
        no_wait: bool,
    },
    /// Drop snapshots older than --max-age beyond the newest --retain-last, and delete
    /// the files no kept snapshot holds (replaced by compaction, or past retention).
    Expire {
        /// The topic.
        #[arg(long)]
        topic: String,
        /// Keep snapshots younger than this (1h, 30m, 0s).
        #[arg(long, default_value = "1h", value_parser = parse_age)]
        max_age: Duration,
        /// Keep at least this many snapshots, whatever their age.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        retain_last: u32,
    },
}

fn parse_age(v: &str) -> Result<Duration, String> {
    humantime::parse_duration(v).map_err(|e| format!("{e} (give a duration such as 1h, 30m or 0s)"))
}

#[derive(Subcommand, Debug)]
pub enum ParquetCommand {
    /// Convert a topic's already-offloaded segments to Parquet (a topic that turned
    /// parquet.enable on later): sets parquet.enable and parquet.backfill on the topic,
    /// then shows the brokers' progress until every offloaded offset is in a file.
    Backfill {
        /// The topic.
        #[arg(long)]
        topic: String,
        /// Set the configs and return without waiting (the brokers carry on).
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        client: super::client::ClientArgs,
    },
}

/// The broker's HTTP address and the credentials to send it.
pub(crate) struct Http {
    addr: String,
    auth: Option<strata_gateway::Auth>,
}

impl Http {
    fn new(args: &TierArgs) -> anyhow::Result<Http> {
        Http::with(&args.http, args.http_auth.as_deref())
    }

    /// From an --http address and --http-auth value.
    pub(crate) fn with(addr: &str, http_auth: Option<&str>) -> anyhow::Result<Http> {
        let auth = match http_auth {
            Some(v) => Some(
                v.parse::<strata_gateway::Auth>()
                    .map_err(|e| anyhow::anyhow!("--http-auth: {e}"))?,
            ),
            None => None,
        };
        Ok(Http {
            addr: addr.to_string(),
            auth,
        })
    }

    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    pub(crate) fn get(&self, path: &str) -> anyhow::Result<String> {
        request(&self.addr, self.auth.as_ref(), "GET", path)
    }

    pub(crate) fn post(&self, path: &str) -> anyhow::Result<String> {
        request(&self.addr, self.auth.as_ref(), "POST", path)
    }
}

fn request(
    http: &str,
    auth: Option<&strata_gateway::Auth>,
    method: &str,
    path: &str,
) -> anyhow::Result<String> {
    let addr = http
        .to_socket_addrs()
        .with_context(|| format!("--http '{http}': expected HOST:PORT"))?
        .next()
        .with_context(|| format!("--http '{http}' resolves to no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| {
        format!(
            "cannot connect to {http}: is a Strata broker serving HTTP there (its --http-addr)?"
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let authorization = auth.map_or_else(String::new, |a| {
        format!("Authorization: {}\r\n", a.header_value())
    });
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {http}\r\n{authorization}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("reading {path} from {http}"))?;
    let (head, body) = out.split_once("\r\n\r\n").context("not an HTTP response")?;
    if head.starts_with("HTTP/1.1 401") {
        if auth.is_some() {
            bail!(
                "{http}{path}: 401 Unauthorized: the broker refused the credentials of --http-auth (STRATA_HTTP_AUTH); give the broker's own --http-auth value"
            );
        }
        bail!(
            "{http}{path}: 401 Unauthorized: the broker requires credentials; pass its --http-auth value: --http-auth bearer:TOKEN or basic:USER:PASSWORD (or set STRATA_HTTP_AUTH)"
        );
    }
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or(head);
        let body = body.trim();
        if body.is_empty() || body.len() > 2000 {
            bail!("{http}{path}: {status}");
        }
        bail!("{http}{path}: {status}: {body}");
    }
    Ok(body.to_string())
}

fn opt(v: &Value) -> String {
    v.as_i64().map_or("-".to_string(), |n| n.to_string())
}

fn bytes(v: &Value) -> String {
    let n = v.as_u64().unwrap_or(0) as f64;
    if n >= 1e9 {
        format!("{:.1}G", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1}K", n / 1e3)
    } else {
        format!("{n}")
    }
}

pub fn run(args: TierArgs) -> anyhow::Result<()> {
    let http = Http::new(&args)?;
    match args.command {
        TierCommand::Parquet {
            command:
                ParquetCommand::Backfill {
                    topic,
                    no_wait,
                    client,
                },
        } => backfill(&http, &client, &topic, no_wait),
        TierCommand::Iceberg { command } => iceberg(&http, command),
        TierCommand::Status { topic, json } => {
            let body = http.get("/v1/tier/status")?;
            let v: Value =
                serde_json::from_str(&body).context("the broker's tier status is not JSON")?;
            if json {
                outln!("{body}");
                return Ok(());
            }
            outln!(
                "object store {}   cache hit ratio {:.1}% ({} hits, {} misses)   local bytes of tiered topics {}{}",
                v["object_store"].as_str().unwrap_or("none"),
                v["cache_hit_ratio"].as_f64().unwrap_or(0.0) * 100.0,
                v["cache_hits"],
                v["cache_misses"],
                bytes(&v["local_bytes_tiered_topics"]),
                match v["local_disk_cap_bytes"].as_u64() {
                    Some(c) if c > 0 => format!(" (cap {})", bytes(&v["local_disk_cap_bytes"])),
                    _ => String::new(),
                }
            );
            outln!(
                "{:<24} {:>4} {:>6} {:>23} {:>8} {:>23} {:>8} {:>9} {:>8}",
                "topic",
                "part",
                "tiered",
                "local range",
                "local",
                "remote range",
                "remote",
                "lag",
                "lag s"
            );
            let parts = v["partitions"].as_array().cloned().unwrap_or_default();
            for p in parts
                .iter()
                .filter(|p| topic.as_deref().is_none_or(|t| p["topic"] == t))
            {
                outln!(
                    "{:<24} {:>4} {:>6} {:>23} {:>8} {:>23} {:>8} {:>9} {:>8.1}{}",
                    p["topic"].as_str().unwrap_or("?"),
                    p["partition"],
                    if p["tiered"] == true { "yes" } else { "no" },
                    format!("[{}, {})", p["local_start_offset"], p["local_end_offset"]),
                    bytes(&p["local_bytes"]),
                    format!(
                        "[{}, {})",
                        opt(&p["remote_start_offset"]),
                        opt(&p["remote_end_offset"])
                    ),
                    bytes(&p["remote_bytes"]),
                    bytes(&p["offload_lag_bytes"]),
                    p["offload_lag_seconds"].as_f64().unwrap_or(0.0),
                    if p["fenced"] == true { "  FENCED" } else { "" }
                );
                if let Some(line) = parquet_failure(p) {
                    outln!("  {line}");
                }
            }
            if let Some(t) = topic
                && !parts.iter().any(|p| p["topic"] == t.as_str())
            {
                bail!("the broker has no topic '{t}'");
            }
            Ok(())
        }
    }
}

/// A partition whose Parquet conversion keeps failing, from its row of the tier status:
/// the line that says so, or `None`.
pub(super) fn parquet_failure(p: &Value) -> Option<String> {
    let error = p["parquet_error"].as_str()?;
    Some(format!(
        "PARQUET STUCK: conversion failed {} times since {} (local retention waits for it): {error}",
        p["parquet_failures"],
        super::format_ms(p["parquet_failing_since_ms"].as_i64().unwrap_or(0)),
    ))
}

/// What one partition still has to convert, from its row of the tier status: the backfill
/// below where its files start, plus the offloaded offsets above where they end.
fn remaining(p: &Value, target: i64) -> i64 {
    let local_start = p["local_start_offset"].as_i64().unwrap_or(0);
    let log_start = p["remote_start_offset"]
        .as_i64()
        .map_or(local_start, |r| r.min(local_start));
    let Some(start) = p["parquet_start_offset"].as_i64() else {
        return (target - log_start).max(0);
    };
    let below = if start > log_start {
        let cursor = p["parquet_backfill_next"].as_i64().unwrap_or(log_start);
        start - cursor.max(log_start)
    } else {
        0
    };
    let next = p["parquet_next_offset"].as_i64().unwrap_or(start);
    below.max(0) + (target - next).max(0)
}

fn backfill(
    http: &Http,
    client: &super::client::ClientArgs,
    topic: &str,
    no_wait: bool,
) -> anyhow::Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};

    client.check_reachable()?;
    let admin = super::client::admin(client)?;
    let configs = super::topic::describe_configs(client, &admin, topic)?;
    let value = |k: &str| {
        configs
            .iter()
            .find(|e| e.name == k)
            .and_then(|e| e.value.clone())
            .unwrap_or_default()
    };
    if value("remote.storage.enable") != "true" {
        bail!(
            "topic '{topic}' does not tier (remote.storage.enable is not true): nothing of it \
             was offloaded, so there is nothing to backfill; `strata topic alter {topic} --set \
             remote.storage.enable=true --set parquet.enable=true` converts from now on"
        );
    }
    let mut set = Vec::new();
    for k in ["parquet.enable", "parquet.backfill"] {
        if value(k) != "true" {
            set.push((k.to_string(), "true".to_string()));
        }
    }
    if !set.is_empty() {
        super::topic::alter(client, topic, &set, &[], None)?;
    }
    if no_wait {
        outln!(
            "the brokers convert '{topic}' in the background; `strata tier status --topic {topic}` shows how far"
        );
        return Ok(());
    }

    let status = |what: &str| -> anyhow::Result<Vec<Value>> {
        let body = http
            .get("/v1/tier/status")
            .with_context(|| what.to_string())?;
        let v: Value =
            serde_json::from_str(&body).context("the broker's tier status is not JSON")?;
        Ok(v["partitions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p["topic"] == topic)
            .collect())
    };
    let first = status("reading the tier status (--http is the broker's --http-addr)")?;
    if first.is_empty() {
        bail!(
            "the broker at {} has no partition of '{topic}': point --http at a broker that \
             hosts it",
            http.addr
        );
    }
    // The goal: every offset offloaded when the backfill started.
    let targets: std::collections::BTreeMap<i64, i64> = first
        .iter()
        .map(|p| {
            let t = p["remote_end_offset"]
                .as_i64()
                .unwrap_or_else(|| p["local_start_offset"].as_i64().unwrap_or(0));
            (p["partition"].as_i64().unwrap_or(-1), t)
        })
        .collect();
    let partition_left = |p: &Value| {
        let target = targets.get(&p["partition"].as_i64().unwrap_or(-1));
        remaining(p, target.copied().unwrap_or(0))
    };
    let left = |parts: &[Value]| -> i64 { parts.iter().map(partition_left).sum() };
    let total = left(&first).max(0) as u64;
    let bar = ProgressBar::new(total.max(1));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} offsets ({per_sec}, eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut parts = first;
    let mut errors = 0;
    loop {
        let to_go = left(&parts).max(0) as u64;
        if to_go > bar.length().unwrap_or(0) {
            bar.set_length(to_go);
        }
        bar.set_position(bar.length().unwrap_or(0) - to_go);
        let pending = parts.iter().filter(|p| partition_left(p) > 0).count();
        bar.set_message(format!("{pending} partition(s) to go"));
        if to_go == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        match status("reading the tier status") {
            Ok(p) => {
                parts = p;
                errors = 0;
            }
            Err(e) if errors < 20 => {
                errors += 1;
                bar.set_message(format!("{e:#}; retrying"));
            }
            Err(e) => {
                bar.abandon();
                return Err(
                    e.context("the backfill goes on in the brokers; run this again to watch it")
                );
            }
        }
    }
    bar.finish_with_message("done");
    outln!("topic '{topic}': every offloaded offset is in a Parquet file");
    Ok(())
}

fn iceberg(http: &Http, command: IcebergCommand) -> anyhow::Result<()> {
    match command {
        IcebergCommand::Status { topic, json } => {
            let body = http.get(&format!("/v1/tier/iceberg/{}", path_segment(&topic)))?;
            if json {
                outln!("{body}");
                return Ok(());
            }
            let v: Value =
                serde_json::from_str(&body).context("the broker's Iceberg status is not JSON")?;
            print_table_status(&v);
            Ok(())
        }
        IcebergCommand::Compact { topic, no_wait } => compact(http, &topic, no_wait),
        IcebergCommand::Expire {
            topic,
            max_age,
            retain_last,
        } => {
            let body = http.post(&format!(
                "/v1/tier/iceberg/{}/expire?max_age_ms={}&retain_last={retain_last}",
                path_segment(&topic),
                max_age.as_millis()
            ))?;
            let v: Value =
                serde_json::from_str(&body).context("the broker's answer is not JSON")?;
            outln!(
                "topic '{topic}': {} snapshot(s) expired, {} data file(s) deleted, {} orphaned object(s) deleted",
                v["snapshots"],
                v["data_files"],
                v["orphans"]
            );
            Ok(())
        }
    }
}

/// A topic name as one path segment (topic names are [a-zA-Z0-9._-], so only a stray
/// character needs escaping).
fn path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn print_table_status(v: &Value) {
    outln!("table     {}", v["location"].as_str().unwrap_or("?"));
    match v["metadata_location"].as_str() {
        Some(m) => {
            outln!("metadata  {m} (version {})", v["version"]);
            outln!(
                "snapshot  {} ({}), {} kept; {} records in {} files, {}",
                v["current_snapshot_id"],
                v["operation"].as_str().unwrap_or("none"),
                v["snapshots"],
                v["records"],
                v["data_files"],
                bytes(&v["bytes"])
            );
        }
        None => outln!("metadata  none yet: the table is created at the first commit"),
    }
    if v["publishing"] != true {
        outln!(
            "note      this broker does not publish tables (--iceberg-commit-interval 0 or no readable store)"
        );
    }
    outln!(
        "{:>4} {:>8} {:>8} {:>9} {:>12} {:>12}",
        "part",
        "files",
        "small",
        "bytes",
        "next offset",
        "committed"
    );
    let committed = &v["committed_offsets"];
    for p in v["partitions"].as_array().cloned().unwrap_or_default() {
        let idx = p["partition"].as_i64().unwrap_or(-1);
        outln!(
            "{:>4} {:>8} {:>8} {:>9} {:>12} {:>12}",
            idx,
            p["files"],
            p["small_files"],
            bytes(&p["bytes"]),
            opt(&p["next_offset"]),
            opt(&committed[idx.to_string()])
        );
    }
    outln!(
        "small files: below three quarters of parquet.target.file.bytes ({})",
        bytes(&v["target_file_bytes"])
    );
    let dead = &v["dead_letters"];
    if let Some(location) = dead["location"].as_str() {
        outln!(
            "dead letters  {location}: {} values that did not fit parquet.value.schema, in {} files",
            dead["records"],
            dead["data_files"]
        );
    }
}

/// Asks for a compaction, then waits until the broker's partitions have done it and shows
/// the files.
fn compact(http: &Http, topic: &str, no_wait: bool) -> anyhow::Result<()> {
    let segment = path_segment(topic);
    let body = http.post(&format!("/v1/tier/iceberg/{segment}/compact"))?;
    let v: Value = serde_json::from_str(&body).context("the broker's answer is not JSON")?;
    let here = v["partitions"].as_array().map_or(0, Vec::len);
    let elsewhere: Vec<String> = v["elsewhere"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(Value::to_string)
        .collect();
    outln!(
        "topic '{topic}': compaction requested for the {here} partition(s) the broker at {} leads",
        http.addr
    );
    if !elsewhere.is_empty() {
        outln!(
            "partitions {} are led by other brokers: run this against their --http too",
            elsewhere.join(", ")
        );
    }
    if no_wait || here == 0 {
        return Ok(());
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message("waiting for the partitions to compact");
    let path = format!("/v1/tier/iceberg/{segment}");
    let started = std::time::Instant::now();
    loop {
        bar.tick();
        let v: Value = serde_json::from_str(&http.get(&path)?)
            .context("the broker's Iceberg status is not JSON")?;
        let pending = v["compaction_pending"].as_array().map_or(0, Vec::len);
        if pending == 0 {
            bar.finish_and_clear();
            outln!(
                "compacted; the table takes the new files at its next commit (--iceberg-commit-interval)"
            );
            print_table_status(&v);
            return Ok(());
        }
        bar.set_message(format!("{pending} partition(s) to go"));
        if started.elapsed() > Duration::from_secs(600) {
            bar.abandon();
            bail!(
                "{pending} partition(s) have not finished compacting after 10 minutes; they go on in the broker: is its tier scheduler busy? `strata tier status` shows its offload lag"
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
