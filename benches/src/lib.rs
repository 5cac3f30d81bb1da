//! The Strata load generator, `strata-benches`: drives any Kafka-compatible broker
//! through librdkafka (the rdkafka crate) and reports throughput, delivery latency and
//! the broker's CPU cost. This crate owns its modes, its command line and its report.
//! The criterion benches (`benches/log.rs`, `benches/cleaner.rs`) are separate targets.
//!
//! `strata-benches produce` writes records of a chosen size (keyed or not, acks 1 or all,
//! at a target rate or flat out) for a duration or a record count; `consume` reads a topic
//! from the beginning, every partition assigned, as fast as it can; `disk` writes the same
//! number of bytes straight to a directory so the figures can be read against the disk;
//! `commits` commits group offsets from several clients.
//! `http-produce` and `sse-latency` drive the REST gateway (see [`gateway`]).
//! Each prints a human summary and one machine-readable line: `RESULT {json}`.
//!
//! Public modules:
//! - [`gateway`]: the REST gateway's modes, `http-produce` and `sse-latency`.
//!
//! The other modules are private; their public items are re-exported here:
//! - `cli`: the command line, every mode's flags ([`Cli`], [`Command`]).
//! - `report`: what a run measured ([`Report`]), for people and as `RESULT {json}`.
//! - `produce`, `consume`, `commits`, `disk`: one mode each.
//! - `client`: what the Kafka clients share: configuration, a quiet log, a progress bar.
//! - `payload`: record values and keys: random bytes, and JSON values of an exact size.
//! - `cpu`: the broker's CPU time over a run, from /proc.

mod cli;
mod client;
mod commits;
mod consume;
mod cpu;
mod disk;
pub mod gateway;
mod payload;
mod produce;
mod report;

use std::io::Write;

pub use cli::{
    Acks, BrokerArgs, Cli, Command, CommitArgs, ConsumeArgs, DiskArgs, ProduceArgs, parse_size,
};
pub use gateway::{EndToEnd, GatewayArgs, HttpProduceArgs, Receipt, SseLatencyArgs};
pub use report::{AckGap, Latency, Report};
/// The codec `produce --compression` names (strata_proto's).
pub use strata_proto::Compression;

/// Runs one mode, prints the human summary and the RESULT line to stdout, and returns the
/// report.
pub fn run(command: Command) -> anyhow::Result<Report> {
    let report = match command {
        Command::Produce(a) => produce::produce(&a)?,
        Command::Consume(a) => consume::consume(&a)?,
        Command::Disk(a) => disk::disk(&a)?,
        Command::Commits(a) => commits::commits(&a)?,
        Command::HttpProduce(a) => gateway::http_produce(&a)?,
        Command::SseLatency(a) => gateway::sse_latency(&a)?,
    };
    let mut out = std::io::stdout().lock();
    write!(out, "{}", report.human())?;
    writeln!(out, "{}", report.result_line())?;
    out.flush()?;
    Ok(report)
}
