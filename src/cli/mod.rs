//! Command-line interface.

/// `println!` for command output: when the reader of standard output has gone (`strata
/// topic describe | head`), the command stops quietly, as a Unix tool killed by SIGPIPE
/// would, instead of panicking as `println!` does; any other write error ends it with a
/// message and a failure status.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!($($arg)*))
    };
}

mod acl;
mod client;
mod cluster;
mod consume;
mod group;
mod log;
mod partition;
mod plan;
mod plan_live;
mod produce;
mod quota;
mod repartition;
mod schema;
pub mod security;
pub mod serve;
mod tier;
mod topic;
mod txn;
mod user;
mod wire;

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
    Serve(Box<serve::ServeArgs>),
    /// Inspect a partition's local log directory (offline; like kafka-dump-log).
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Create, list, describe, delete or alter topics (Kafka admin APIs; any Kafka broker).
    Topic(topic::TopicArgs),
    /// Write standard input to a topic, one record per line.
    Produce(produce::ProduceArgs),
    /// Print a topic's records, one per line (assigns partitions itself; no consumer group).
    Consume(consume::ConsumeArgs),
    /// List consumer groups, describe their offsets and lag, or reset their offsets.
    Group(group::GroupArgs),
    /// Tiered storage status of a Strata broker (from its HTTP address).
    Tier(tier::TierArgs),
    /// List and describe transactions, describe a partition's producers, or abort a
    /// hanging transaction (Kafka's transaction admin APIs).
    Txn(txn::TxnArgs),
    /// Create, list or delete SCRAM users (KIP-554's APIs; any Kafka broker).
    User(user::UserArgs),
    /// Add, list or remove ACLs (Kafka's ACL APIs, as kafka-acls.sh).
    Acl(acl::AclArgs),
    /// Set or describe client quotas (KIP-546's APIs; any Kafka broker).
    Quota(quota::QuotaArgs),
    /// Elect partition leaders, or move replicas between brokers (Kafka's ElectLeaders
    /// and partition reassignment APIs; any Kafka broker).
    Partition(partition::PartitionArgs),
    /// List brokers, drain one (decommission), balance new ones in (add), unregister one.
    Cluster(cluster::ClusterArgs),
    /// Register, read, list, check or delete schemas, and set compatibility levels, in
    /// a schema registry (a broker's --schema-registry-addr, or any Confluent-compatible one).
    Schema(schema::SchemaArgs),
    /// Size a cluster for a workload: throughput, brokers, disk with and without tiering,
    /// the bucket's objects, requests and cost, and how long a lagging group takes to
    /// catch up (offline; add --simulate for the catch-up model).
    Plan(Box<plan::PlanArgs>),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Log(cmd) => log::run(cmd),
        Command::Topic(args) => topic::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Tier(args) => tier::run(args),
        Command::Group(args) => group::run(args),
        Command::Txn(args) => txn::run(args),
        Command::User(args) => user::run(args),
        Command::Acl(args) => acl::run(args),
        Command::Quota(args) => quota::run(args),
        Command::Partition(args) => partition::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Schema(args) => schema::run(args),
        Command::Plan(args) => plan::run(*args),
    }
}

/// Writes one line of command output; see `outln!`.
pub(crate) fn write_out(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// A time in milliseconds since the Unix epoch as RFC 3339 UTC, to the second.
pub(crate) fn format_ms(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}
