//! Command-line interface.

mod log;

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
    /// Inspect a partition's local log directory (offline; like kafka-dump-log).
    #[command(subcommand)]
    Log(log::LogCommand),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Log(cmd) => log::run(cmd),
    }
}
