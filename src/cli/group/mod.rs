//! `strata group list|describe|reset-offsets`: consumer group administration over the Kafka
//! protocol (ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, ListOffsets,
//! DescribeConfigs, Fetch), modelled on Kafka's kafka-consumer-groups.sh, so it works
//! against any Kafka broker.
//!
//! Nothing here joins a group: committed offsets are read and written by a consumer that
//! carries the group's id but never subscribes (OffsetFetch, and a "standalone" OffsetCommit
//! that Kafka accepts only while the group has no active members), and records are peeked
//! by an assign()-ed consumer with a throwaway group id that never commits. Every committed
//! offset of a group (OffsetFetch with topics = null, which librdkafka's Rust binding does
//! not expose) is asked for over the wire protocol directly (`super::wire`).

mod broker;
mod committed_all;
mod describe;
mod list;
mod reset;

use clap::{Args, Subcommand};

use super::client::ClientArgs;

#[derive(Args, Debug)]
pub struct GroupArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: GroupCommand,
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List the consumer groups with their state, protocol type and member count.
    List,
    /// Show a group's members and, per partition, its committed offset, lag, the lag's
    /// age and the time left before the oldest unconsumed record reaches retention.ms.
    Describe {
        group: String,
        /// A topic to report on (repeatable) [default: every topic the group has committed
        /// offsets for, and those its members subscribe to or are assigned]
        #[arg(long = "topic", value_name = "TOPIC")]
        topics: Vec<String>,
    },
    /// Move a group's committed offsets (the group must have no active members). A dry run
    /// unless --execute is given.
    ResetOffsets(reset::ResetArgs),
}

pub fn run(args: GroupArgs) -> anyhow::Result<()> {
    let c = &args.client;
    match args.command {
        GroupCommand::List => list::list(c),
        GroupCommand::Describe { group, topics } => describe::describe(c, &group, &topics),
        GroupCommand::ResetOffsets(r) => reset::reset(c, &r),
    }
}

/// A number, or "-" for none.
fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}
