//! `strata partition elect`: preferred or unclean leader elections with Kafka's
//! ElectLeaders (KIP-460), as `kafka-leader-election.sh`; works against any Kafka broker
//! that serves it.

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ElectLeadersRequest, ElectLeadersResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_proto::ErrorCode;

use super::client::ClientArgs;
use super::wire::Conn;

#[derive(Args, Debug)]
pub struct PartitionArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: PartitionCommand,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Election {
    /// Move leadership to each partition's first replica, if it is in sync and alive.
    Preferred,
    /// Give a partition without a leader one from any live replica, even out of sync
    /// (records it lacks are lost).
    Unclean,
}

#[derive(Subcommand, Debug)]
pub enum PartitionCommand {
    /// Elect leaders: of the partitions given (--topic, and --partition for some of
    /// them), or with --all-partitions of every partition.
    Elect {
        #[arg(long = "type", value_enum, default_value = "preferred")]
        election: Election,
        /// The topic whose partitions to elect
        #[arg(long, required_unless_present = "all_partitions")]
        topic: Option<String>,
        /// Partitions of --topic (repeatable; default: all of them)
        #[arg(long, requires = "topic")]
        partition: Vec<i32>,
        /// Every partition of every topic (only those where an election was needed
        /// are reported)
        #[arg(long, conflicts_with = "topic")]
        all_partitions: bool,
    },
}

pub fn run(args: PartitionArgs) -> anyhow::Result<()> {
    let c = &args.client;
    match args.command {
        PartitionCommand::Elect {
            election,
            topic,
            partition,
            all_partitions,
        } => {
            let mut conn = Conn::open(&c.bootstrap, c)?;
            let v = conn
                .version(ApiKey::ElectLeaders, 1..=2)
                .context("the broker does not serve ElectLeaders v1+ (Kafka 2.4+)")?;
            let mut req = ElectLeadersRequest::default();
            req.election_type = match election {
                Election::Preferred => 0,
                Election::Unclean => 1,
            };
            req.timeout_ms = i32::try_from(c.timeout.as_millis()).unwrap_or(i32::MAX);
            if !all_partitions {
                let topic = topic.context("--topic or --all-partitions")?;
                let partitions = if partition.is_empty() {
                    (0..partition_count(&mut conn, &topic)?).collect()
                } else {
                    partition
                };
                let mut t = TopicPartitions::default();
                t.topic = TopicName(StrBytes::from_string(topic));
                t.partitions = partitions;
                req.topic_partitions = Some(vec![t]);
            }
            let r: ElectLeadersResponse = conn.call(ApiKey::ElectLeaders, v, &req)?;
            if r.error_code != 0 {
                bail!("ElectLeaders: {}", code(r.error_code));
            }
            let mut failed = 0;
            for t in &r.replica_election_results {
                for p in &t.partition_result {
                    let name = format!("{}-{}", t.topic.0, p.partition_id);
                    if p.error_code == 0 {
                        outln!("{name}: elected");
                        continue;
                    }
                    // Not needed is not a failure: the partition is already as asked.
                    if p.error_code != ErrorCode::ElectionNotNeeded.code() {
                        failed += 1;
                    }
                    match &p.error_message {
                        Some(m) => outln!("{name}: {} ({m})", code(p.error_code)),
                        None => outln!("{name}: {}", code(p.error_code)),
                    }
                }
            }
            if r.replica_election_results.is_empty() {
                outln!("no partition needed an election");
            }
            if failed > 0 {
                bail!("{failed} partition(s) could not be elected");
            }
            Ok(())
        }
    }
}

/// The partition count of `topic`, from every topic's metadata (a single-topic request
/// could auto-create it).
fn partition_count(conn: &mut Conn, topic: &str) -> anyhow::Result<i32> {
    let v = conn
        .version(ApiKey::Metadata, 1..=12)
        .context("the broker does not serve Metadata v1+")?;
    let mut req = MetadataRequest::default();
    req.topics = None; // every topic
    let r: MetadataResponse = conn.call(ApiKey::Metadata, v, &req)?;
    r.topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .map(|t| t.partitions.len() as i32)
        .with_context(|| format!("topic '{topic}' does not exist"))
}

fn code(c: i16) -> String {
    ErrorCode::from_code(c).map_or(format!("error {c}"), |e| format!("{e:?}"))
}
