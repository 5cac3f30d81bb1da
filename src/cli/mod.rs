//! Command-line interface.

mod log;
pub mod serve;

use clap::{Parser, Subcommand};

/// Strata: a Kafka-compatible streaming broker with tiered storage.
#[derive(Parser, Debug)]
#[command(name = "strata", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a broker (with no flags: a complete single-node broker on 127.0.0.1:9092).
    Serve(serve::ServeArgs),
    /// Inspect a partition's local log directory (offline; like kafka-dump-log).
    #[command(subcommand)]
    Log(log::LogCommand),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Log(cmd) => log::run(cmd),
    }
}
