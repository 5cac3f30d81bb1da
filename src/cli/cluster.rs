//! `strata cluster`: the brokers' lifecycle. `decommission N` moves every replica off a
//! broker (alive or dead) and, once its process has stopped, unregisters it; `add`
//! spreads every topic's replicas evenly over the live brokers, new ones included;
//! `unregister N` removes a stopped, empty broker for good; `brokers` lists them. Built
//! on Kafka's APIs (Metadata, AlterPartitionReassignments, ListPartitionReassignments,
//! UnregisterBroker), so they work against any broker that serves those.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, UnregisterBrokerRequest,
    UnregisterBrokerResponse,
};

use super::client::ClientArgs;
use super::partition::{assignment, code, failure, parse_throttle, run_plan};
use super::wire::Conn;

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// The registered brokers, and which is the controller.
    Brokers,
    /// Move every replica off broker N (to the least-loaded others, nothing else moves)
    /// and wait, with a progress bar; then unregister N if its process has stopped, or
    /// say how to once it has. Works for a dead broker too: its replicas are rebuilt
    /// from the leaders.
    Decommission {
        /// The broker to drain
        broker: i32,
        /// Cap the copy of the moving replicas at this rate (bytes per second, such as
        /// 50MB), removed when done
        #[arg(long, value_name = "BYTES_PER_SEC")]
        throttle: Option<String>,
    },
    /// Spread each topic's replicas (and preferred leaders) evenly over the live
    /// brokers, moving as few as it can: how a new broker takes its share. Waits, with
    /// a progress bar.
    Add {
        /// Cap the copy of the moving replicas at this rate (bytes per second, such as
        /// 50MB), removed when done
        #[arg(long, value_name = "BYTES_PER_SEC")]
        throttle: Option<String>,
    },
    /// Remove a broker for good: its process must have stopped (its session expired)
    /// and it must hold no replica (`decommission` moves them). A process started again
    /// with the id joins as a new, empty broker.
    Unregister {
        /// The broker to remove
        broker: i32,
    },
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let mut conn = Conn::open(&c.bootstrap, c)?;
    match args.command {
        ClusterCommand::Brokers => {
            let (brokers, controller) = describe(&mut conn)?;
            for (id, addr) in brokers {
                let role = if id == controller {
                    " (controller)"
                } else {
                    ""
                };
                outln!("{id}\t{addr}{role}");
            }
            Ok(())
        }
        ClusterCommand::Decommission { broker, throttle } => {
            let (live, _) = describe(&mut conn)?;
            let targets: Vec<i32> = live
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| *id != broker)
                .collect();
            let current = assignment(&mut conn, true)?;
            let plan = strata_controller::assign::drain(&current, &targets).map_err(|e| {
                anyhow::anyhow!("cannot move broker {broker}'s replicas onto {targets:?}: {e}")
            })?;
            if plan.is_empty() {
                outln!("broker {broker} holds no replica");
            } else {
                outln!(
                    "moving {} replica(s) off broker {broker} onto {targets:?}",
                    plan.len()
                );
                run_plan(&mut conn, c, &plan, parse_throttle(throttle)?)?;
            }
            let left = assignment(&mut conn, true)?
                .into_iter()
                .filter(|p| p.replicas.contains(&broker))
                .count();
            if left > 0 {
                bail!(
                    "broker {broker} still holds {left} replica(s) (a topic created meanwhile?): run the command again"
                );
            }
            if live.iter().any(|(id, _)| *id == broker) {
                outln!(
                    "broker {broker} holds no replica now; stop its process, then `strata cluster unregister {broker}` once its session has expired"
                );
                return Ok(());
            }
            unregister(&mut conn, broker)
        }
        ClusterCommand::Add { throttle } => {
            let (live, _) = describe(&mut conn)?;
            let brokers: Vec<i32> = live.iter().map(|(id, _)| *id).collect();
            // Topic by topic, so each topic's replicas (and load) spread over every
            // broker, not only the cluster's total.
            let current = assignment(&mut conn, true)?;
            let mut plan = Vec::new();
            for topic in current.chunk_by(|a, b| a.topic == b.topic) {
                plan.extend(
                    strata_controller::assign::balance(topic, &brokers).map_err(|e| {
                        anyhow::anyhow!("cannot balance '{}' over {brokers:?}: {e}", topic[0].topic)
                    })?,
                );
            }
            if plan.is_empty() {
                outln!("the replicas are already even over brokers {brokers:?}");
                return Ok(());
            }
            outln!(
                "moving {} partition(s) to spread the replicas over brokers {brokers:?}",
                plan.len()
            );
            run_plan(&mut conn, c, &plan, parse_throttle(throttle)?)
        }
        ClusterCommand::Unregister { broker } => unregister(&mut conn, broker),
    }
}

/// The live brokers (id, host:port) by id, and the controller's id.
fn describe(conn: &mut Conn) -> anyhow::Result<(Vec<(i32, String)>, i32)> {
    let v = conn
        .version(ApiKey::DescribeCluster, 0..=1)
        .context("the broker does not serve DescribeCluster (Kafka 2.8+)")?;
    let r: DescribeClusterResponse = conn.call(
        ApiKey::DescribeCluster,
        v,
        &DescribeClusterRequest::default(),
    )?;
    if r.error_code != 0 {
        bail!("DescribeCluster: {}", code(r.error_code));
    }
    let mut brokers: Vec<(i32, String)> = r
        .brokers
        .iter()
        .map(|b| (b.broker_id.0, format!("{}:{}", b.host, b.port)))
        .collect();
    brokers.sort();
    Ok((brokers, r.controller_id.0))
}

fn unregister(conn: &mut Conn, broker: i32) -> anyhow::Result<()> {
    let v = conn
        .version(ApiKey::UnregisterBroker, 0..=0)
        .context("the broker does not serve UnregisterBroker (Kafka 3.0+ in KRaft mode)")?;
    let mut req = UnregisterBrokerRequest::default();
    req.broker_id = BrokerId(broker);
    let r: UnregisterBrokerResponse = conn.call(ApiKey::UnregisterBroker, v, &req)?;
    if r.error_code != 0 {
        bail!(
            "cannot unregister broker {broker}: {}",
            failure(r.error_code, r.error_message.as_ref())
        );
    }
    outln!("broker {broker} unregistered");
    Ok(())
}
