//! The command line: every mode's flags, as clap parses them, and the byte-size parser
//! they share.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::{Compression, HttpProduceArgs, SseLatencyArgs};

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
    /// Each value starts with Confluent's schema-registry header naming this schema id
    /// (a 0 byte, then the id in 4 bytes), over its first 5 bytes: values a topic with
    /// confluent.value.schema.validation takes.
    #[arg(long)]
    pub schema_id: Option<u32>,
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
}
