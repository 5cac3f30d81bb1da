//! `strata partition elect`: preferred or unclean leader elections with Kafka's
//! ElectLeaders (KIP-460), as `kafka-leader-election.sh`; `strata partition reassign`:
//! replica moves with AlterPartitionReassignments and ListPartitionReassignments
//! (KIP-455), as `kafka-reassign-partitions.sh`. Both work against any Kafka broker that
//! serves those APIs.

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::collections::BTreeMap;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_controller::assign::PlannedPartition;
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
    /// Move replicas between brokers. --generate prints a plan (Kafka's reassignment
    /// JSON) that spreads the topics' replicas evenly over --brokers, moving as few as
    /// it can; --plan FILE carries one out and waits, with a progress bar, until every
    /// partition has moved; --cancel puts them back; --list shows what is moving.
    #[command(group = clap::ArgGroup::new("mode").required(true).args(["generate", "plan", "list"]))]
    Reassign {
        /// Print a plan that balances --topic's partitions (default: every topic) over
        /// --brokers; the current assignment (to go back to) goes to standard error
        #[arg(long, requires = "brokers")]
        generate: bool,
        /// The brokers the replicas are to live on (comma-separated ids)
        #[arg(long, value_delimiter = ',')]
        brokers: Vec<i32>,
        /// Topics to plan for (repeatable; default: every topic but internal ones)
        #[arg(long)]
        topic: Vec<String>,
        /// A plan to carry out: {"version":1,"partitions":[{"topic","partition","replicas"}]}
        #[arg(long, value_name = "FILE")]
        plan: Option<std::path::PathBuf>,
        /// With --plan: cancel those partitions' reassignments (back to the replicas
        /// they had)
        #[arg(long, requires = "plan")]
        cancel: bool,
        /// With --plan: return once the brokers have accepted it, without waiting
        #[arg(long, requires = "plan")]
        no_wait: bool,
        /// With --plan: cap the replication of the replicas catching up at this rate
        /// (bytes per second, such as 50MB; Kafka's leader/follower.replication.
        /// throttled.rate on every broker), removed once the plan has run
        #[arg(long, requires = "plan", value_name = "BYTES_PER_SEC")]
        throttle: Option<String>,
        /// The partitions being reassigned now
        #[arg(long)]
        list: bool,
    },
}

/// Kafka's reassignment JSON.
#[derive(serde::Serialize, serde::Deserialize)]
struct PlanFile {
    version: i32,
    partitions: Vec<PlannedPartition>,
}

pub fn run(args: PartitionArgs) -> anyhow::Result<()> {
    let c = &args.client;
    match args.command {
        PartitionCommand::Reassign {
            generate,
            brokers,
            topic,
            plan,
            cancel,
            no_wait,
            throttle,
            list,
        } => {
            let mut conn = Conn::open(&c.bootstrap, c)?;
            if generate {
                return generate_plan(&mut conn, &brokers, &topic);
            }
            if list {
                let ongoing = list_reassignments(&mut conn, c)?;
                if ongoing.is_empty() {
                    outln!("no partition is being reassigned");
                }
                for o in ongoing {
                    outln!(
                        "{}-{}: replicas {:?}, adding {:?}, removing {:?}",
                        o.topic,
                        o.partition,
                        o.replicas,
                        o.adding,
                        o.removing
                    );
                }
                return Ok(());
            }
            let path = plan.context("--plan FILE")?;
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read the plan {}", path.display()))?;
            let file: PlanFile = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not a reassignment plan ({{\"version\":1,\"partitions\":[{{\"topic\",\"partition\",\"replicas\"}}]}}); `strata partition reassign --generate` writes one",
                    path.display()
                )
            })?;
            if file.partitions.is_empty() {
                outln!("the plan moves nothing");
                return Ok(());
            }
            let throttle = parse_throttle(throttle)?;
            if !no_wait && !cancel {
                return run_plan(&mut conn, c, &file.partitions, throttle);
            }
            if let Some(rate) = throttle {
                set_throttle(&mut conn, Some(rate))?;
            }
            submit(&mut conn, c, &file.partitions, cancel)?;
            if throttle.is_some() {
                outln!(
                    "the throttle stays until you remove it: `strata partition reassign --plan {} --throttle 0` after the move, or a new --plan without --no-wait",
                    path.display()
                );
            }
            outln!(
                "{} partition(s) {}; `strata partition reassign --list` shows what is still moving",
                file.partitions.len(),
                if cancel { "cancelled" } else { "accepted" }
            );
            Ok(())
        }
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
                    outln!(
                        "{name}: {}",
                        failure(p.error_code, p.error_message.as_ref())
                    );
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

/// Kafka's reassignment call for `partitions` (to their replicas, or cancelled).
pub(super) fn submit(
    conn: &mut Conn,
    c: &ClientArgs,
    partitions: &[PlannedPartition],
    cancel: bool,
) -> anyhow::Result<()> {
    let v = conn
        .version(ApiKey::AlterPartitionReassignments, 0..=1)
        .context("the broker does not serve AlterPartitionReassignments (Kafka 2.4+)")?;
    let mut req = AlterPartitionReassignmentsRequest::default();
    req.timeout_ms = i32::try_from(c.timeout.as_millis()).unwrap_or(i32::MAX);
    req.allow_replication_factor_change = true;
    let mut by_topic: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
    for p in partitions {
        let mut r = ReassignablePartition::default();
        r.partition_index = p.partition;
        r.replicas = (!cancel).then(|| p.replicas.iter().map(|b| BrokerId(*b)).collect());
        by_topic.entry(&p.topic).or_default().push(r);
    }
    req.topics = by_topic
        .into_iter()
        .map(|(t, partitions)| {
            let mut r = ReassignableTopic::default();
            r.name = TopicName(StrBytes::from_string(t.to_string()));
            r.partitions = partitions;
            r
        })
        .collect();
    let r: AlterPartitionReassignmentsResponse =
        conn.call(ApiKey::AlterPartitionReassignments, v, &req)?;
    if r.error_code != 0 {
        bail!(
            "AlterPartitionReassignments: {}",
            failure(r.error_code, r.error_message.as_ref())
        );
    }
    let mut failed = 0;
    for t in &r.responses {
        for p in &t.partitions {
            if p.error_code != 0 {
                failed += 1;
                outln!(
                    "{}-{}: {}",
                    t.name.0,
                    p.partition_index,
                    failure(p.error_code, p.error_message.as_ref())
                );
            }
        }
    }
    if failed > 0 {
        bail!("{failed} partition(s) were refused; the others were accepted");
    }
    Ok(())
}

/// Sets (or with `None` removes) the cluster-wide replication throttle: both rates on
/// the default broker resource, as `kafka-reassign-partitions.sh --throttle` sets them on
/// each broker. A rate of 0 also removes them.
pub(super) fn set_throttle(conn: &mut Conn, rate: Option<u64>) -> anyhow::Result<()> {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    let v = conn
        .version(ApiKey::IncrementalAlterConfigs, 0..=1)
        .context("the broker does not serve IncrementalAlterConfigs (Kafka 2.3+)")?;
    let rate = rate.filter(|r| *r > 0);
    let mut res = AlterConfigsResource::default();
    res.resource_type = 4; // BROKER; "" is every broker's default
    res.resource_name = StrBytes::from_static_str("");
    for key in [
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
    ] {
        let mut e = AlterableConfig::default();
        e.name = StrBytes::from_static_str(key);
        match rate {
            Some(r) => {
                e.config_operation = 0; // SET
                e.value = Some(StrBytes::from_string(r.to_string()));
            }
            None => e.config_operation = 1, // DELETE
        }
        res.configs.push(e);
    }
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![res];
    let r: IncrementalAlterConfigsResponse = conn.call(ApiKey::IncrementalAlterConfigs, v, &req)?;
    for res in &r.responses {
        if res.error_code != 0 {
            bail!(
                "setting the replication throttle: {}",
                failure(res.error_code, res.error_message.as_ref())
            );
        }
    }
    match rate {
        Some(r) => outln!("replication of the moving replicas throttled to {r} bytes/s"),
        None => outln!("replication throttle removed"),
    }
    Ok(())
}

/// `--throttle RATE` (bytes per second, with an optional unit and `/s`).
pub(super) fn parse_throttle(throttle: Option<String>) -> anyhow::Result<Option<u64>> {
    throttle
        .map(|t| super::serve::parse_bytes("--throttle", t.trim_end_matches("/s")))
        .transpose()
}

/// Carries out `plan` and waits for it, under `throttle` (set first, removed after).
pub(super) fn run_plan(
    conn: &mut Conn,
    c: &ClientArgs,
    plan: &[PlannedPartition],
    throttle: Option<u64>,
) -> anyhow::Result<()> {
    if let Some(rate) = throttle {
        set_throttle(conn, Some(rate))?;
    }
    submit(conn, c, plan, false)?;
    let result = wait_for(conn, c, plan);
    if throttle.is_some() {
        set_throttle(conn, None)?;
    }
    result
}

/// A partition being reassigned.
struct Ongoing {
    topic: String,
    partition: i32,
    replicas: Vec<i32>,
    adding: Vec<i32>,
    removing: Vec<i32>,
}

fn list_reassignments(conn: &mut Conn, c: &ClientArgs) -> anyhow::Result<Vec<Ongoing>> {
    let v = conn
        .version(ApiKey::ListPartitionReassignments, 0..=0)
        .context("the broker does not serve ListPartitionReassignments (Kafka 2.4+)")?;
    let mut req = ListPartitionReassignmentsRequest::default();
    req.timeout_ms = i32::try_from(c.timeout.as_millis()).unwrap_or(i32::MAX);
    req.topics = None;
    let r: ListPartitionReassignmentsResponse =
        conn.call(ApiKey::ListPartitionReassignments, v, &req)?;
    if r.error_code != 0 {
        bail!("ListPartitionReassignments: {}", code(r.error_code));
    }
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    Ok(r.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Ongoing {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                replicas: ids(&p.replicas),
                adding: ids(&p.adding_replicas),
                removing: ids(&p.removing_replicas),
            })
        })
        .collect())
}

/// Waits, with a progress bar, until none of `partitions` is moving, then checks that
/// each has the replicas the plan gave it.
pub(super) fn wait_for(
    conn: &mut Conn,
    c: &ClientArgs,
    partitions: &[PlannedPartition],
) -> anyhow::Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};
    let total = partitions.len() as u64;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} partitions moved {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let wanted: std::collections::BTreeSet<(&str, i32)> = partitions
        .iter()
        .map(|p| (p.topic.as_str(), p.partition))
        .collect();
    loop {
        let ongoing = list_reassignments(conn, c)?;
        let moving: Vec<&Ongoing> = ongoing
            .iter()
            .filter(|o| wanted.contains(&(o.topic.as_str(), o.partition)))
            .collect();
        bar.set_position(total - moving.len() as u64);
        let adding: std::collections::BTreeSet<i32> = moving
            .iter()
            .flat_map(|o| o.adding.iter().copied())
            .collect();
        bar.set_message(if adding.is_empty() {
            String::new()
        } else {
            format!("(brokers {adding:?} catching up)")
        });
        if moving.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    bar.finish_and_clear();
    let now = assignment(conn, true)?;
    let mut wrong = 0;
    for p in partitions {
        let have = now
            .iter()
            .find(|q| q.topic == p.topic && q.partition == p.partition);
        match have {
            Some(q) if q.replicas == p.replicas => {}
            other => {
                wrong += 1;
                outln!(
                    "{}-{}: has {:?}, the plan asked for {:?} (another reassignment or a cancel replaced it)",
                    p.topic,
                    p.partition,
                    other.map(|q| q.replicas.clone()).unwrap_or_default(),
                    p.replicas
                );
            }
        }
    }
    if wrong > 0 {
        bail!("{wrong} partition(s) did not end where the plan put them");
    }
    outln!("{total} partition(s) reassigned");
    Ok(())
}

/// Every partition's replicas, from Metadata (internal topics' too with
/// `include_internal`).
pub(super) fn assignment(
    conn: &mut Conn,
    include_internal: bool,
) -> anyhow::Result<Vec<PlannedPartition>> {
    let v = conn
        .version(ApiKey::Metadata, 1..=12)
        .context("the broker does not serve Metadata v1+")?;
    let mut req = MetadataRequest::default();
    req.topics = None;
    let r: MetadataResponse = conn.call(ApiKey::Metadata, v, &req)?;
    let mut out = Vec::new();
    for t in &r.topics {
        let Some(name) = &t.name else { continue };
        if t.is_internal && !include_internal {
            continue;
        }
        for p in &t.partitions {
            out.push(PlannedPartition {
                topic: name.0.to_string(),
                partition: p.partition_index,
                replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            });
        }
    }
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(out)
}

/// Prints a plan that balances `topics` (default every topic) over `brokers`.
fn generate_plan(conn: &mut Conn, brokers: &[i32], topics: &[String]) -> anyhow::Result<()> {
    let mut current = assignment(conn, false)?;
    if !topics.is_empty() {
        for t in topics {
            if !current.iter().any(|p| &p.topic == t) {
                bail!("topic '{t}' does not exist");
            }
        }
        current.retain(|p| topics.contains(&p.topic));
    }
    let plan = strata_controller::assign::balance(&current, brokers)
        .map_err(|e| anyhow::anyhow!("cannot plan over brokers {brokers:?}: {e}"))?;
    let rollback: Vec<PlannedPartition> = current
        .iter()
        .filter(|p| {
            plan.iter()
                .any(|q| q.topic == p.topic && q.partition == p.partition)
        })
        .cloned()
        .collect();
    eprintln!(
        "Current assignment of the partitions the plan moves (save it to go back):\n{}",
        serde_json::to_string(&PlanFile {
            version: 1,
            partitions: rollback
        })?
    );
    outln!(
        "{}",
        serde_json::to_string(&PlanFile {
            version: 1,
            partitions: plan
        })?
    );
    Ok(())
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

/// An error code's name, with the broker's message when it sent one.
pub(super) fn failure(c: i16, message: Option<&StrBytes>) -> String {
    match message {
        Some(m) => format!("{} ({m})", code(c)),
        None => code(c),
    }
}

pub(super) fn code(c: i16) -> String {
    ErrorCode::from_code(c).map_or(format!("error {c}"), |e| format!("{e:?}"))
}
