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
}

fn get(http: &str, path: &str) -> anyhow::Result<String> {
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
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("reading {path} from {http}"))?;
    let (head, body) = out.split_once("\r\n\r\n").context("not an HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{http}{path}: {}", head.lines().next().unwrap_or(head));
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
    match args.command {
        TierCommand::Status { topic, json } => {
            let body = get(&args.http, "/v1/tier/status")?;
            let v: Value =
                serde_json::from_str(&body).context("the broker's tier status is not JSON")?;
            if json {
                println!("{body}");
                return Ok(());
            }
            println!(
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
            println!(
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
                println!(
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
