//! `strata txn`: list and describe transactions, and abort a hanging one, with Kafka's
//! APIs (ListTransactions on every broker, FindCoordinator and DescribeTransactions,
//! DescribeProducers and WriteTxnMarkers at a partition's leader), as Kafka's
//! `kafka-transactions.sh` does; it works against any Kafka broker that serves them.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    ListTransactionsRequest, ListTransactionsResponse, MetadataRequest, MetadataResponse,
    ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_proto::ErrorCode;

use super::client::ClientArgs;
use super::wire::Conn;

#[derive(Args, Debug)]
pub struct TxnArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: TxnCommand,
}

#[derive(Subcommand, Debug)]
pub enum TxnCommand {
    /// Every transactional id the cluster's coordinators know, with its producer and state.
    List,
    /// One transactional id: its producer id and epoch, state, timeout, start time and
    /// the partitions of its open transaction.
    Describe {
        /// The transactional.id
        transactional_id: String,
    },
    /// Abort a hanging transaction in one partition (one its coordinator no longer
    /// knows, holding the last stable offset back): writes an ABORT marker for the
    /// producer's open transaction there, as `kafka-transactions.sh abort` does.
    Abort {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        /// The producer whose open transaction to abort (`strata txn describe-producers`
        /// shows it)
        #[arg(long)]
        producer_id: i64,
    },
    /// The producers a partition's leader knows, with the first offset of each one's
    /// open transaction (-1 for none).
    DescribeProducers {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
    },
}

fn code(c: i16) -> String {
    ErrorCode::from_code(c).map_or(format!("error {c}"), |e| format!("{e:?}"))
}

/// Every broker's address, from the bootstrap's metadata.
fn brokers(c: &ClientArgs, boot: &mut Conn) -> anyhow::Result<Vec<(i32, String)>> {
    let v = boot
        .version(ApiKey::Metadata, 1..=12)
        .context("the broker does not serve Metadata v1+")?;
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    let r: MetadataResponse = boot.call(ApiKey::Metadata, v, &req)?;
    let _ = c;
    Ok(r.brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
        .collect())
}

fn connect(c: &ClientArgs) -> anyhow::Result<Conn> {
    let mut errors = Vec::new();
    for addr in c.bootstrap.split(',') {
        match Conn::open(addr, c) {
            Ok(conn) => return Ok(conn),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    bail!(
        "cannot reach a broker ({}): {}",
        errors.join("; "),
        c.what_to_check()
    )
}

/// The leader of a partition: its address.
fn leader(c: &ClientArgs, boot: &mut Conn, topic: &str, partition: i32) -> anyhow::Result<String> {
    let v = boot
        .version(ApiKey::Metadata, 1..=12)
        .context("the broker does not serve Metadata v1+")?;
    let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.to_string())));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    let r: MetadataResponse = boot.call(ApiKey::Metadata, v, &req)?;
    let _ = c;
    let mt = r
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .with_context(|| format!("topic '{topic}' is not in the metadata"))?;
    if mt.error_code != 0 {
        bail!("topic '{topic}': {}", code(mt.error_code));
    }
    let p = mt
        .partitions
        .iter()
        .find(|p| p.partition_index == partition)
        .with_context(|| format!("{topic} has no partition {partition}"))?;
    let b = r
        .brokers
        .iter()
        .find(|b| b.node_id == p.leader_id)
        .with_context(|| format!("{topic}-{partition} has no leader now; try again"))?;
    Ok(format!("{}:{}", b.host, b.port))
}

pub fn run(args: TxnArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let mut boot = connect(c)?;
    match args.command {
        TxnCommand::List => {
            outln!(
                "{:<40} {:>14} {:<16} COORDINATOR",
                "TRANSACTIONAL ID",
                "PRODUCER ID",
                "STATE"
            );
            for (id, addr) in brokers(c, &mut boot)? {
                let mut conn = Conn::open(&addr, c)?;
                let v = conn
                    .version(ApiKey::ListTransactions, 0..=1)
                    .with_context(|| {
                        format!("broker {id} ({addr}) does not serve ListTransactions")
                    })?;
                let mut req = ListTransactionsRequest::default();
                req.duration_filter = -1;
                let r: ListTransactionsResponse = conn.call(ApiKey::ListTransactions, v, &req)?;
                if r.error_code != 0 {
                    bail!("broker {id}: ListTransactions: {}", code(r.error_code));
                }
                for t in r.transaction_states {
                    outln!(
                        "{:<40} {:>14} {:<16} {id}",
                        t.transactional_id.0.as_str(),
                        t.producer_id.0,
                        t.transaction_state.as_str()
                    );
                }
            }
        }
        TxnCommand::Describe { transactional_id } => {
            let v = boot
                .version(ApiKey::FindCoordinator, 1..=3)
                .context("the broker does not serve FindCoordinator v1-3")?;
            let mut req = FindCoordinatorRequest::default();
            req.key = StrBytes::from_string(transactional_id.clone());
            req.key_type = 1;
            let r: FindCoordinatorResponse = boot.call(ApiKey::FindCoordinator, v, &req)?;
            if r.error_code != 0 {
                bail!(
                    "FindCoordinator for '{transactional_id}': {}",
                    code(r.error_code)
                );
            }
            let mut conn = Conn::open(&format!("{}:{}", r.host, r.port), c)?;
            let mut req = DescribeTransactionsRequest::default();
            req.transactional_ids = vec![TransactionalId(StrBytes::from_string(
                transactional_id.clone(),
            ))];
            let r: DescribeTransactionsResponse =
                conn.call(ApiKey::DescribeTransactions, 0, &req)?;
            let s = r
                .transaction_states
                .into_iter()
                .next()
                .context("DescribeTransactions: an empty answer")?;
            if s.error_code != 0 {
                bail!("'{transactional_id}': {}", code(s.error_code));
            }
            outln!("transactional id   {transactional_id}");
            outln!(
                "producer id/epoch  {}/{}",
                s.producer_id.0,
                s.producer_epoch
            );
            outln!("state              {}", s.transaction_state.as_str());
            outln!("timeout            {} ms", s.transaction_timeout_ms);
            outln!("started (ms)       {}", s.transaction_start_time_ms);
            for t in s.topics {
                outln!(
                    "partitions         {} {:?}",
                    t.topic.0.as_str(),
                    t.partitions
                );
            }
        }
        TxnCommand::DescribeProducers { topic, partition } => {
            for p in producers(c, &mut boot, &topic, partition)? {
                outln!(
                    "producer {} epoch {} last sequence {} last timestamp {} open transaction from {}",
                    p.producer_id.0,
                    p.producer_epoch,
                    p.last_sequence,
                    p.last_timestamp,
                    p.current_txn_start_offset
                );
            }
        }
        TxnCommand::Abort {
            topic,
            partition,
            producer_id,
        } => {
            let ps = producers(c, &mut boot, &topic, partition)?;
            let p = ps
                .iter()
                .find(|p| p.producer_id.0 == producer_id)
                .with_context(|| {
                    format!("{topic}-{partition}'s leader knows no producer {producer_id}")
                })?;
            if p.current_txn_start_offset < 0 {
                bail!("producer {producer_id} has no open transaction in {topic}-{partition}");
            }
            let addr = leader(c, &mut boot, &topic, partition)?;
            let mut conn = Conn::open(&addr, c)?;
            let mut t = WritableTxnMarkerTopic::default();
            t.name = TopicName(StrBytes::from_string(topic.clone()));
            t.partition_indexes = vec![partition];
            let mut m = WritableTxnMarker::default();
            m.producer_id = ProducerId(producer_id);
            m.producer_epoch = i16::try_from(p.producer_epoch).unwrap_or(i16::MAX);
            m.transaction_result = false;
            m.coordinator_epoch = p.coordinator_epoch.max(0);
            m.topics = vec![t];
            let mut req = WriteTxnMarkersRequest::default();
            req.markers = vec![m];
            let r: WriteTxnMarkersResponse = conn.call(ApiKey::WriteTxnMarkers, 1, &req)?;
            for m in r.markers {
                for t in m.topics {
                    for p in t.partitions {
                        if p.error_code != 0 {
                            bail!("aborting in {topic}-{partition}: {}", code(p.error_code));
                        }
                    }
                }
            }
            outln!(
                "aborted producer {producer_id}'s transaction in {topic}-{partition} (it began at offset {})",
                p.current_txn_start_offset
            );
        }
    }
    Ok(())
}

fn producers(
    c: &ClientArgs,
    boot: &mut Conn,
    topic: &str,
    partition: i32,
) -> anyhow::Result<Vec<kafka_protocol::messages::describe_producers_response::ProducerState>> {
    let addr = leader(c, boot, topic, partition)?;
    let mut conn = Conn::open(&addr, c)?;
    let mut t = TopicRequest::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_indexes = vec![partition];
    let mut req = DescribeProducersRequest::default();
    req.topics = vec![t];
    let r: DescribeProducersResponse = conn.call(ApiKey::DescribeProducers, 0, &req)?;
    let p = r
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .next()
        .context("DescribeProducers: an empty answer")?;
    if p.error_code != 0 {
        bail!(
            "DescribeProducers on {topic}-{partition}: {}",
            code(p.error_code)
        );
    }
    Ok(p.active_producers)
}
