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

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use futures::executor::block_on;
use rdkafka::admin::ResourceSpecifier;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;

use super::client::{CliContext, ClientArgs, admin, admin_options};
use super::wire::Conn;

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
    ResetOffsets(ResetArgs),
}

#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .multiple(false)
        .args(["to_earliest", "to_latest", "to_offset", "to_datetime", "to_timestamp", "shift_by"])
))]
pub struct ResetArgs {
    group: String,
    /// The topic whose offsets to reset (repeatable); TOPIC:P,P,... for some partitions.
    #[arg(long = "topic", value_name = "TOPIC[:PARTITIONS]", required = true, value_parser = parse_topic_spec)]
    topics: Vec<TopicSpec>,
    /// To the log start (the earliest offset still held).
    #[arg(long)]
    to_earliest: bool,
    /// To the log end (skip everything not yet consumed).
    #[arg(long)]
    to_latest: bool,
    /// To this offset (moved into the log's range if outside it).
    #[arg(long, value_name = "OFFSET", value_parser = clap::value_parser!(i64).range(0..))]
    to_offset: Option<i64>,
    /// To the first record at or after this time, e.g. 2024-05-01T12:00:00Z or
    /// 2024-05-01T14:00:00+02:00 (no zone = UTC).
    #[arg(long, value_name = "RFC3339", value_parser = parse_datetime)]
    to_datetime: Option<i64>,
    /// To the first record at or after this time in milliseconds since the Unix epoch.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(i64).range(0..))]
    to_timestamp: Option<i64>,
    /// Move the committed offset by N (negative: back), within the log's range.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// Commit the new offsets (without it, only print the plan).
    #[arg(long)]
    execute: bool,
}

/// A topic and, optionally, some of its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    topic: String,
    partitions: Option<Vec<i32>>,
}

fn parse_topic_spec(v: &str) -> Result<TopicSpec, String> {
    let (topic, parts) = match v.split_once(':') {
        Some((t, p)) => (t, Some(p)),
        None => (v, None),
    };
    if topic.trim().is_empty() {
        return Err(format!("'{v}' has no topic name"));
    }
    let partitions = match parts {
        None => None,
        Some(p) => {
            let mut out = Vec::new();
            for x in p.split(',').map(str::trim).filter(|x| !x.is_empty()) {
                match x.parse::<i32>() {
                    Ok(n) if n >= 0 => out.push(n),
                    _ => return Err(format!("'{x}' in '{v}' is not a partition number")),
                }
            }
            if out.is_empty() {
                return Err(format!("'{v}': give partitions after ':' (TOPIC:0,1,2)"));
            }
            out.sort_unstable();
            out.dedup();
            Some(out)
        }
    };
    Ok(TopicSpec {
        topic: topic.trim().to_string(),
        partitions,
    })
}

/// RFC 3339 (with Z, a numeric offset, or no zone meaning UTC) to milliseconds since the
/// Unix epoch.
fn parse_datetime(v: &str) -> Result<i64, String> {
    const EXPECTED: &str =
        "expected an RFC 3339 time such as 2024-05-01T12:00:00Z or 2024-05-01T14:00:00.000+02:00";
    let s = v.trim();
    // A trailing +HH:MM / -HH:MM offset (after the time, so not the date's dashes).
    let (base, offset_ms) = match s
        .len()
        .checked_sub(6)
        .and_then(|i| s.get(i..).map(|t| (i, t)))
    {
        Some((i, tail))
            if i >= 19
                && (tail.starts_with('+') || tail.starts_with('-'))
                && tail.as_bytes().get(3) == Some(&b':') =>
        {
            let h: i64 = tail[1..3].parse().map_err(|_| EXPECTED.to_string())?;
            let m: i64 = tail[4..6].parse().map_err(|_| EXPECTED.to_string())?;
            if h > 23 || m > 59 {
                return Err(format!("bad zone offset '{tail}' ({EXPECTED})"));
            }
            let sign = if tail.starts_with('-') { -1 } else { 1 };
            (&s[..i], sign * (h * 3_600_000 + m * 60_000))
        }
        _ => (s, 0),
    };
    let t = humantime::parse_rfc3339_weak(base).map_err(|e| format!("{e} ({EXPECTED})"))?;
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("before 1970 ({EXPECTED})"))?
        .as_millis() as i64;
    // Local time = UTC + offset, so UTC = local - offset.
    let utc = ms - offset_ms;
    if utc < 0 {
        return Err(format!("before 1970 ({EXPECTED})"));
    }
    Ok(utc)
}

pub fn run(args: GroupArgs) -> anyhow::Result<()> {
    let c = &args.client;
    match args.command {
        GroupCommand::List => list(c),
        GroupCommand::Describe { group, topics } => describe(c, &group, &topics),
        GroupCommand::ResetOffsets(r) => reset(c, &r),
    }
}

// ---------------------------------------------------------------------------------------
// Talking to the broker.

/// A group as DescribeGroups shows it.
#[derive(Debug)]
struct GroupDesc {
    state: String,
    protocol_type: String,
    protocol: String,
    members: Vec<Member>,
}

#[derive(Debug)]
struct Member {
    id: String,
    client_id: String,
    host: String,
    /// Decoded from the consumer protocol (None: another protocol, or nothing assigned yet).
    assignment: Option<Vec<(String, Vec<i32>)>>,
    subscription: Option<Vec<String>>,
}

impl GroupDesc {
    fn from_info(g: &rdkafka::groups::GroupInfo) -> GroupDesc {
        let consumer = g.protocol_type() == "consumer" || g.protocol_type().is_empty();
        GroupDesc {
            state: g.state().to_string(),
            protocol_type: g.protocol_type().to_string(),
            protocol: g.protocol().to_string(),
            members: g
                .members()
                .iter()
                .map(|m| Member {
                    id: m.id().to_string(),
                    client_id: m.client_id().to_string(),
                    host: m.client_host().to_string(),
                    assignment: m
                        .assignment()
                        .filter(|_| consumer)
                        .and_then(strata_proto::consumer_protocol::decode_assignment),
                    subscription: m
                        .metadata()
                        .filter(|_| consumer)
                        .and_then(strata_proto::consumer_protocol::decode_subscription),
                })
                .collect(),
        }
    }

    /// Dead (Kafka's answer for an unknown group) or Empty: no one is consuming.
    fn is_inactive(&self) -> bool {
        self.members.is_empty() || matches!(self.state.as_str(), "Dead" | "Empty")
    }
}

/// Errors that mean the broker does not implement the API (as opposed to not answering).
fn is_unsupported(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        e.rdkafka_error_code(),
        Some(E::UnsupportedFeature | E::UnsupportedVersion | E::InvalidRequest)
    )
}

const LIST_GROUPS: i16 = 16;
const DESCRIBE_GROUPS: i16 = 15;

/// Whether the first reachable bootstrap broker advertises `api_key` in ApiVersions (None:
/// could not tell). librdkafka skips brokers without ListGroups/DescribeGroups silently,
/// which would make "no groups" indistinguishable from "cannot list groups".
fn broker_supports(c: &ClientArgs, api_key: i16) -> Option<bool> {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    let addr = c
        .bootstrap
        .split(',')
        .filter_map(|a| a.to_socket_addrs().ok())
        .flatten()
        .next()?;
    let mut s = TcpStream::connect_timeout(&addr, c.timeout).ok()?;
    s.set_read_timeout(Some(c.timeout)).ok()?;
    s.set_write_timeout(Some(c.timeout)).ok()?;
    // ApiVersions v0: api_key 18, version 0, correlation id, client id.
    let client_id = b"strata-cli";
    let mut req = Vec::new();
    req.extend_from_slice(&18i16.to_be_bytes());
    req.extend_from_slice(&0i16.to_be_bytes());
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    req.extend_from_slice(client_id);
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    s.write_all(&frame).ok()?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let len = usize::try_from(i32::from_be_bytes(len)).ok()?;
    if len > 1 << 20 {
        return None;
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    let mut r = strata_proto::consumer_protocol::Reader::new(&body);
    let _correlation = r.i32()?;
    if r.i16()? != 0 {
        return None;
    }
    let n = r.i32()?;
    for _ in 0..n {
        let key = r.i16()?;
        let _min = r.i16()?;
        let _max = r.i16()?;
        if key == api_key {
            return Some(true);
        }
    }
    Some(false)
}

/// DescribeGroups for one group: Ok(None) when the broker does not support the API.
fn describe_group(
    c: &ClientArgs,
    consumer: &BaseConsumer<CliContext>,
    group: &str,
) -> anyhow::Result<Option<GroupDesc>> {
    let unsupported = |why: String| {
        eprintln!(
            "note: the broker does not answer DescribeGroups ({why}); the group's members and state are not shown"
        );
        Ok(None)
    };
    match retry_coordinator(c, || consumer.fetch_group_list(Some(group), c.timeout)) {
        Ok(list) => match list.groups().iter().find(|g| g.name() == group) {
            Some(g) => Ok(Some(GroupDesc::from_info(g))),
            None if broker_supports(c, DESCRIBE_GROUPS) == Some(false) => {
                unsupported("not in its ApiVersions".to_string())
            }
            // Kafka answers an unknown group with state Dead and no members.
            None => Ok(Some(GroupDesc {
                state: "Dead".to_string(),
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            })),
        },
        Err(e) if is_unsupported(&e) => unsupported(e.to_string()),
        Err(e) => Err(c.explain(e, "DescribeGroups")),
    }
}

/// A consumer that never subscribes, commits only when told to, and never stores offsets.
fn consumer(c: &ClientArgs, group: &str) -> anyhow::Result<BaseConsumer<CliContext>> {
    let mut config = c.config();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false");
    config
        .create_with_context(CliContext::default())
        .context("cannot create the Kafka consumer")
}

/// Every topic's partition count (metadata for all topics: asking for one may auto-create it).
fn partition_counts(
    c: &ClientArgs,
    consumer: &BaseConsumer<CliContext>,
) -> anyhow::Result<BTreeMap<String, i32>> {
    let md = c.metadata(consumer.client(), None)?;
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect())
}

/// Coordinator errors a request is retried on (within --timeout): the group's coordinator
/// moved, or is still loading the group's offsets (a broker that just started).
fn is_coordinator_retriable(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        e.rdkafka_error_code(),
        Some(E::NotCoordinator | E::CoordinatorLoadInProgress | E::CoordinatorNotAvailable)
    )
}

/// Runs `op` until it succeeds, fails otherwise than with a retriable coordinator error, or
/// --timeout has passed.
fn retry_coordinator<T>(
    c: &ClientArgs,
    mut op: impl FnMut() -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    let deadline = Instant::now() + c.timeout;
    loop {
        match op() {
            Err(e) if is_coordinator_retriable(&e) && Instant::now() < deadline => {
                tracing::debug!("retrying: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            r => return r,
        }
    }
}

/// The group's committed offsets (None: nothing committed) for `parts`.
fn committed(
    c: &ClientArgs,
    consumer: &BaseConsumer<CliContext>,
    parts: &[(String, i32)],
) -> anyhow::Result<BTreeMap<(String, i32), Option<i64>>> {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in parts {
        tpl.add_partition(t, *p);
    }
    let got = retry_coordinator(c, || consumer.committed_offsets(tpl.clone(), c.timeout))
        .map_err(|e| c.explain(e, "OffsetFetch"))?;
    let mut out = BTreeMap::new();
    for e in got.elements() {
        if let Err(err) = e.error() {
            bail!(
                "cannot read the committed offset of {}-{}: {err}",
                e.topic(),
                e.partition()
            );
        }
        let o = match e.offset() {
            Offset::Offset(o) if o >= 0 => Some(o),
            _ => None,
        };
        out.insert((e.topic().to_string(), e.partition()), o);
    }
    Ok(out)
}

/// What one attempt at reading every committed offset of a group came to.
enum AllCommitted {
    Done(Option<BTreeMap<(String, i32), i64>>),
    /// The coordinator moved, is loading or is not there yet: ask again.
    Retry(String),
}

fn retriable_code(code: i16) -> bool {
    use strata_proto::ErrorCode as E;
    [
        E::NotCoordinator,
        E::CoordinatorLoadInProgress,
        E::CoordinatorNotAvailable,
    ]
    .iter()
    .any(|e| e.code() == code)
}

fn code_name(code: i16) -> String {
    strata_proto::ErrorCode::from_code(code)
        .map_or_else(|| format!("error {code}"), |e| e.to_string())
}

/// Every committed offset of the group (None: the broker cannot list them, OffsetFetch
/// below v2), from its coordinator: OffsetFetch with topics = null, as Kafka's
/// kafka-consumer-groups.sh lists a group's offsets. Retried within --timeout while the
/// coordinator moves or loads.
fn committed_all(
    c: &ClientArgs,
    group: &str,
) -> anyhow::Result<Option<BTreeMap<(String, i32), i64>>> {
    let deadline = Instant::now() + c.timeout;
    let mut errors = Vec::new();
    let mut boot = None;
    for addr in c.bootstrap.split(',') {
        match Conn::open(addr, c) {
            Ok(conn) => {
                boot = Some(conn);
                break;
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    let Some(mut boot) = boot else {
        bail!(
            "cannot reach a broker for OffsetFetch ({}): {}",
            errors.join("; "),
            c.what_to_check()
        );
    };
    loop {
        match committed_all_once(c, &mut boot, group)? {
            AllCommitted::Done(r) => return Ok(r),
            AllCommitted::Retry(why) if Instant::now() < deadline => {
                tracing::debug!("retrying OffsetFetch: {why}");
                std::thread::sleep(Duration::from_millis(200));
            }
            AllCommitted::Retry(why) => bail!(
                "cannot read the committed offsets of group '{group}' within {} (--timeout): {why}",
                humantime::format_duration(c.timeout)
            ),
        }
    }
}

fn committed_all_once(
    c: &ClientArgs,
    boot: &mut Conn,
    group: &str,
) -> anyhow::Result<AllCommitted> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    use kafka_protocol::messages::{
        ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, OffsetFetchRequest,
        OffsetFetchResponse,
    };
    use kafka_protocol::protocol::StrBytes;

    // The group's coordinator (v0-3 name one key, v4+ a list of them).
    let key = StrBytes::from_string(group.to_string());
    let (code, host, port) = if let Some(v) = boot.version(ApiKey::FindCoordinator, 0..=3) {
        let mut req = FindCoordinatorRequest::default();
        req.key = key;
        let r: FindCoordinatorResponse = boot.call(ApiKey::FindCoordinator, v, &req)?;
        (r.error_code, r.host.to_string(), r.port)
    } else if let Some(v) = boot.version(ApiKey::FindCoordinator, 4..=6) {
        let mut req = FindCoordinatorRequest::default();
        req.coordinator_keys = vec![key];
        let r: FindCoordinatorResponse = boot.call(ApiKey::FindCoordinator, v, &req)?;
        let co = r
            .coordinators
            .into_iter()
            .next()
            .context("FindCoordinator: an answer without a coordinator")?;
        (co.error_code, co.host.to_string(), co.port)
    } else {
        bail!("the broker does not support FindCoordinator");
    };
    if retriable_code(code) {
        return Ok(AllCommitted::Retry(format!(
            "FindCoordinator: {}",
            code_name(code)
        )));
    }
    if code != 0 {
        bail!(
            "cannot find the coordinator of group '{group}': {}",
            code_name(code)
        );
    }
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut co =
        Conn::open(&addr, c).with_context(|| format!("the coordinator of group '{group}'"))?;

    // topics = null: all of them (v2+; v8+ per group, the request's own group and topics
    // fields then left at their defaults, as v8 has none).
    let Some(v) = co.version(ApiKey::OffsetFetch, 2..=9) else {
        return Ok(AllCommitted::Done(None));
    };
    let mut req = OffsetFetchRequest::default();
    let gid = GroupId(StrBytes::from_string(group.to_string()));
    if v >= 8 {
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = gid;
        g.topics = None;
        req.groups = vec![g];
    } else {
        req.group_id = gid;
        req.topics = None;
    }
    let r: OffsetFetchResponse = co.call(ApiKey::OffsetFetch, v, &req)?;
    let mut out = BTreeMap::new();
    let mut add = |topic: &str, partition: i32, offset: i64, code: i16| -> anyhow::Result<()> {
        if code != 0 {
            bail!(
                "cannot read the committed offset of {topic}-{partition}: {}",
                code_name(code)
            );
        }
        if offset >= 0 {
            out.insert((topic.to_string(), partition), offset);
        }
        Ok(())
    };
    let code = if v >= 8 {
        let g = r
            .groups
            .into_iter()
            .find(|g| g.group_id.as_str() == group)
            .context("OffsetFetch: an answer without the group")?;
        if g.error_code == 0 {
            for t in &g.topics {
                for p in &t.partitions {
                    add(
                        t.name.as_str(),
                        p.partition_index,
                        p.committed_offset,
                        p.error_code,
                    )?;
                }
            }
        }
        g.error_code
    } else {
        if r.error_code == 0 {
            for t in &r.topics {
                for p in &t.partitions {
                    add(
                        t.name.as_str(),
                        p.partition_index,
                        p.committed_offset,
                        p.error_code,
                    )?;
                }
            }
        }
        r.error_code
    };
    if retriable_code(code) {
        return Ok(AllCommitted::Retry(format!(
            "OffsetFetch: {}",
            code_name(code)
        )));
    }
    if code != 0 {
        bail!(
            "cannot read the committed offsets of group '{group}': {}",
            code_name(code)
        );
    }
    Ok(AllCommitted::Done(Some(out)))
}

/// (log start, log end) of every partition.
fn watermarks(
    c: &ClientArgs,
    consumer: &BaseConsumer<CliContext>,
    parts: &[(String, i32)],
) -> anyhow::Result<BTreeMap<(String, i32), (i64, i64)>> {
    let mut out = BTreeMap::new();
    for (t, p) in parts {
        let w = consumer
            .fetch_watermarks(t, *p, c.timeout)
            .map_err(|e| c.explain(e, "ListOffsets"))?;
        out.insert((t.clone(), *p), w);
    }
    Ok(out)
}

/// The topics' retention.ms (None: the broker did not say).
fn retention_ms(c: &ClientArgs, topics: &BTreeSet<String>) -> BTreeMap<String, Option<i64>> {
    let mut out = BTreeMap::new();
    let client = match admin(c) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("warning: cannot read the topics' retention.ms: {e:#}");
            return out;
        }
    };
    let specs: Vec<ResourceSpecifier> = topics
        .iter()
        .map(|t| ResourceSpecifier::Topic(t.as_str()))
        .collect();
    match block_on(client.describe_configs(specs.iter(), &admin_options(c))) {
        Ok(results) => {
            for (t, r) in topics.iter().zip(results) {
                let v = match r {
                    Ok(res) => res
                        .get("retention.ms")
                        .and_then(|e| e.value.as_deref())
                        .and_then(|v| v.trim().parse::<i64>().ok()),
                    Err(code) => {
                        eprintln!("warning: cannot read the retention.ms of topic '{t}': {code}");
                        None
                    }
                };
                out.insert(t.clone(), v);
            }
        }
        Err(e) => eprintln!(
            "warning: cannot read the topics' retention.ms: {:#}",
            c.explain(e, "DescribeConfigs")
        ),
    }
    out
}

/// The timestamp of the first record at or after each given offset (a throwaway group id;
/// nothing is committed). Partitions with no record within the timeout are left out.
fn peek_timestamps(
    c: &ClientArgs,
    at: &BTreeMap<(String, i32), i64>,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let mut out = BTreeMap::new();
    if at.is_empty() {
        return Ok(out);
    }
    let peek = consumer(c, "strata-cli-group-peek")?;
    let mut tpl = TopicPartitionList::new();
    for ((t, p), o) in at {
        tpl.add_partition_offset(t, *p, Offset::Offset(*o))
            .context("bad partition list")?;
    }
    peek.assign(&tpl).map_err(|e| c.explain(e, "assign"))?;
    let deadline = Instant::now() + c.timeout;
    while out.len() < at.len() && Instant::now() < deadline {
        match peek.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let key = (m.topic().to_string(), m.partition());
                if !out.contains_key(&key)
                    && let Some(ts) = m.timestamp().to_millis()
                {
                    out.insert(key.clone(), ts);
                    // Stop fetching what we have.
                    let mut one = TopicPartitionList::new();
                    one.add_partition(&key.0, key.1);
                    let _ = peek.pause(&one);
                }
            }
            Some(Err(e)) => tracing::debug!("peek: {e}"),
            None => {}
        }
    }
    Ok(out)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn hours(ms: i64) -> String {
    format!("{:.2}h", ms as f64 / 3_600_000.0)
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

// ---------------------------------------------------------------------------------------
// list

fn list(c: &ClientArgs) -> anyhow::Result<()> {
    let client = admin(c)?;
    let groups = client
        .inner()
        .fetch_group_list(None, c.timeout)
        .map_err(|e| {
            if is_unsupported(&e) {
                anyhow::anyhow!(
                    "the broker at {} does not support listing groups (ListGroups/DescribeGroups: {e}); \
                     `strata group describe GROUP --topic TOPIC` still shows a group's offsets",
                    c.bootstrap
                )
            } else {
                c.explain(e, "ListGroups")
            }
        })?;
    let mut rows: Vec<(String, String, String, usize)> = groups
        .groups()
        .iter()
        .map(|g| {
            (
                g.name().to_string(),
                g.state().to_string(),
                g.protocol_type().to_string(),
                g.members().len(),
            )
        })
        .collect();
    rows.sort();
    if rows.is_empty() {
        if broker_supports(c, LIST_GROUPS) == Some(false) {
            bail!(
                "the broker at {} does not support listing groups (no ListGroups in its ApiVersions); \
                 `strata group describe GROUP --topic TOPIC` still shows a group's offsets",
                c.bootstrap
            );
        }
        eprintln!("no consumer groups");
        return Ok(());
    }
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(5);
    outln!(
        "{:<w$}  {:<20}  {:<13}  MEMBERS",
        "GROUP",
        "STATE",
        "PROTOCOL-TYPE"
    );
    for (name, state, ptype, members) in rows {
        let state = if state.is_empty() { "-".into() } else { state };
        let ptype = if ptype.is_empty() { "-".into() } else { ptype };
        outln!("{name:<w$}  {state:<20}  {ptype:<13}  {members}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// describe

/// One partition's row of `group describe`.
#[derive(Debug)]
struct Row {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    log_start: i64,
    log_end: i64,
    lag: Option<i64>,
    lag_age_ms: Option<i64>,
    headroom: String,
    owner: String,
}

fn describe(c: &ClientArgs, group: &str, topics: &[String]) -> anyhow::Result<()> {
    c.check_reachable()?;
    let gc = consumer(c, group)?;
    let desc = describe_group(c, &gc, group)?;

    // Which topics: --topic, else every topic the group has committed offsets for (all of
    // them in one OffsetFetch, as Kafka's tool) and what its members subscribe to or are
    // assigned.
    let mut wanted: BTreeSet<String> = topics.iter().cloned().collect();
    let from_group = wanted.is_empty();
    let all_committed = if from_group {
        committed_all(c, group)?
    } else {
        None
    };
    if from_group {
        for m in desc.iter().flat_map(|d| &d.members) {
            for (t, _) in m.assignment.iter().flatten() {
                wanted.insert(t.clone());
            }
            for t in m.subscription.iter().flatten() {
                wanted.insert(t.clone());
            }
        }
        for (t, _) in all_committed.iter().flat_map(BTreeMap::keys) {
            wanted.insert(t.clone());
        }
    }
    let members = desc.as_ref().map_or(0, |d| d.members.len());
    if wanted.is_empty() {
        if all_committed.is_some() && members == 0 {
            bail!(
                "group '{group}' does not exist: it has no active members and no committed \
                 offsets (check the name with `strata group list`)"
            );
        }
        let why = match (&desc, &all_committed) {
            (_, Some(_)) => {
                "it has no committed offsets and its members do not say which topics they read"
            }
            (Some(d), None) if d.state == "Dead" => "the broker does not know it (no members)",
            (Some(_), None) => "it has no active members telling which topics they read",
            (None, None) => "the broker does not describe groups",
        };
        let listing = if all_committed.is_some() {
            ""
        } else {
            " and the broker cannot list a group's committed offsets (OffsetFetch v2+)"
        };
        bail!(
            "group '{group}': {why}{listing}, so the topics to report on are unknown: \
             give --topic TOPIC (repeatable)"
        );
    }
    let counts = partition_counts(c, &gc)?;
    let mut parts = Vec::new();
    for t in &wanted {
        match counts.get(t) {
            Some(n) => parts.extend((0..*n).map(|p| (t.clone(), p))),
            None if from_group => eprintln!(
                "warning: group '{group}' has committed offsets for, or members reading, topic \
                 '{t}', which does not exist"
            ),
            None => bail!("--topic {t}: the topic does not exist"),
        }
    }
    let offsets = match &all_committed {
        Some(all) => parts
            .iter()
            .map(|k| (k.clone(), all.get(k).copied()))
            .collect(),
        None => committed(c, &gc, &parts)?,
    };
    if members == 0
        && offsets.values().all(Option::is_none)
        && all_committed.as_ref().is_none_or(BTreeMap::is_empty)
    {
        let names = wanted.iter().cloned().collect::<Vec<_>>().join(", ");
        bail!(
            "group '{group}' does not exist: it has no active members and no committed offsets \
             for {names} (check the name with `strata group list`, or the --topic)"
        );
    }
    let marks = watermarks(c, &gc, &parts)?;
    drop(gc);
    let retention = retention_ms(c, &wanted);

    // Peek at the first unconsumed record of every lagging partition.
    let mut peek_at = BTreeMap::new();
    for key in &parts {
        let (lo, hi) = marks[key];
        if let Some(o) = offsets[key]
            && o < hi
        {
            peek_at.insert(key.clone(), o.max(lo));
        }
    }
    let stamps = peek_timestamps(c, &peek_at)?;
    let now = now_ms();

    let mut owners = BTreeMap::new();
    for m in desc.iter().flat_map(|d| &d.members) {
        for (t, ps) in m.assignment.iter().flatten() {
            for p in ps {
                owners.insert((t.clone(), *p), m.id.clone());
            }
        }
    }

    let mut rows = Vec::new();
    let mut out_of_retention = Vec::new();
    let mut overdue = Vec::new();
    let mut unknown_age = Vec::new();
    for key in &parts {
        let (lo, hi) = marks[key];
        let committed = offsets[key];
        let lag = committed.map(|o| (hi - o).max(0));
        let lag_age_ms = match lag {
            Some(0) => Some(0),
            Some(_) => stamps.get(key).map(|ts| (now - ts).max(0)),
            None => None,
        };
        let retention = retention.get(&key.0).copied().flatten();
        let headroom = match (committed, lag, retention, lag_age_ms) {
            (None, ..) => "-".to_string(),
            (Some(o), ..) if o < lo => {
                out_of_retention.push((key.clone(), o, lo));
                "OUT-OF-RETENTION".to_string()
            }
            (_, _, Some(r), _) if r < 0 => "never".to_string(),
            (_, Some(0), ..) => "-".to_string(),
            (_, _, None, _) => "?".to_string(),
            (_, _, Some(_), None) => {
                unknown_age.push(key.clone());
                "?".to_string()
            }
            (_, _, Some(r), Some(age)) => {
                if r - age < 0 {
                    overdue.push(key.clone());
                }
                hours(r - age)
            }
        };
        rows.push(Row {
            topic: key.0.clone(),
            partition: key.1,
            committed,
            log_start: lo,
            log_end: hi,
            lag,
            lag_age_ms,
            headroom,
            owner: owners.get(key).cloned().unwrap_or_else(|| "-".into()),
        });
    }

    // Header and members.
    match &desc {
        Some(d) => {
            outln!(
                "group {group}  state {}  protocol-type {}  protocol {}  members {}",
                or_dash(&d.state),
                or_dash(&d.protocol_type),
                or_dash(&d.protocol),
                d.members.len()
            );
            if d.members.is_empty() {
                outln!("no active members");
            } else {
                let wid = d
                    .members
                    .iter()
                    .map(|m| m.id.len())
                    .max()
                    .unwrap_or(0)
                    .max(9);
                let wc = d
                    .members
                    .iter()
                    .map(|m| m.client_id.len())
                    .max()
                    .unwrap_or(0)
                    .max(9);
                let wh = d
                    .members
                    .iter()
                    .map(|m| m.host.len())
                    .max()
                    .unwrap_or(0)
                    .max(4);
                outln!(
                    "{:<wid$}  {:<wc$}  {:<wh$}  ASSIGNMENT",
                    "MEMBER-ID",
                    "CLIENT-ID",
                    "HOST"
                );
                for m in &d.members {
                    let a = match &m.assignment {
                        Some(a) if !a.is_empty() => a
                            .iter()
                            .map(|(t, ps)| {
                                let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                                format!("{t}:{}", ps.join(","))
                            })
                            .collect::<Vec<_>>()
                            .join(" "),
                        Some(_) => "(none)".to_string(),
                        None => "(not a consumer assignment)".to_string(),
                    };
                    outln!(
                        "{:<wid$}  {:<wc$}  {:<wh$}  {a}",
                        m.id,
                        or_dash(&m.client_id),
                        or_dash(&m.host)
                    );
                }
            }
        }
        None => outln!("group {group}  (members and state unknown: no DescribeGroups)"),
    }
    outln!("");

    let wt = rows.iter().map(|r| r.topic.len()).max().unwrap_or(0).max(5);
    outln!(
        "{:<wt$}  {:>9}  {:>14}  {:>16}  {:>14}  {:>8}  {:>9}  {:>16}  CONSUMER-ID",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-START-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "LAG-AGE",
        "HEADROOM"
    );
    for r in &rows {
        outln!(
            "{:<wt$}  {:>9}  {:>14}  {:>16}  {:>14}  {:>8}  {:>9}  {:>16}  {}",
            r.topic,
            r.partition,
            opt(r.committed),
            r.log_start,
            r.log_end,
            opt(r.lag),
            r.lag_age_ms.map_or_else(|| "-".to_string(), hours),
            r.headroom,
            r.owner
        );
    }
    outln!("");
    for t in &wanted {
        let r = match retention.get(t).copied().flatten() {
            Some(r) if r < 0 => "never (retention.ms=-1)".to_string(),
            Some(r) => format!("{} (retention.ms={r})", hours(r)),
            None => "unknown".to_string(),
        };
        outln!("retention of {t}: {r}");
    }
    outln!(
        "LAG-AGE: how old the oldest unconsumed record is; HEADROOM: retention minus LAG-AGE, \
         the time left before that record may be deleted if the group does not move"
    );
    for ((t, p), o, lo) in &out_of_retention {
        outln!(
            "WARNING: OUT OF RETENTION: {t}-{p}: the committed offset {o} is below the log start {lo}: \
             {} records were deleted before group '{group}' read them; on restart the group \
             jumps to its auto.offset.reset position (or reset it: strata group reset-offsets \
             {group} --topic {t} --to-earliest --execute)",
            lo - o
        );
    }
    for (t, p) in &overdue {
        outln!(
            "WARNING: {t}-{p}: the oldest unconsumed record is older than retention.ms and may be \
             deleted at any moment"
        );
    }
    for (t, p) in &unknown_age {
        eprintln!(
            "note: {t}-{p}: no record could be read at the committed offset within {}, so its lag age is unknown",
            humantime::format_duration(c.timeout)
        );
    }
    Ok(())
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

// ---------------------------------------------------------------------------------------
// reset-offsets

/// Words for a refused standalone commit.
fn commit_error(c: &ClientArgs, group: &str, e: KafkaError) -> anyhow::Error {
    use RDKafkaErrorCode as E;
    match e.rdkafka_error_code() {
        Some(
            code @ (E::UnknownMemberId
            | E::IllegalGeneration
            | E::RebalanceInProgress
            | E::FencedInstanceId),
        ) => anyhow::anyhow!(
            "group '{group}' has active members; stop them first: Kafka resets the offsets only of \
             a group with no members (the broker refused the commit: {code})"
        ),
        _ => c.explain(e, "OffsetCommit"),
    }
}

fn reset(c: &ClientArgs, a: &ResetArgs) -> anyhow::Result<()> {
    c.check_reachable()?;
    let gc = consumer(c, &a.group)?;
    let counts = partition_counts(c, &gc)?;
    let mut parts: Vec<(String, i32)> = Vec::new();
    for spec in &a.topics {
        let Some(&n) = counts.get(&spec.topic) else {
            bail!("--topic {}: the topic does not exist", spec.topic);
        };
        match &spec.partitions {
            None => parts.extend((0..n).map(|p| (spec.topic.clone(), p))),
            Some(ps) => {
                for &p in ps {
                    if p >= n {
                        bail!(
                            "--topic {}:{p}: topic '{}' has {n} partitions (0..={})",
                            spec.topic,
                            spec.topic,
                            n - 1
                        );
                    }
                    parts.push((spec.topic.clone(), p));
                }
            }
        }
    }
    parts.sort();
    parts.dedup();

    let current = committed(c, &gc, &parts)?;
    let marks = watermarks(c, &gc, &parts)?;
    let by_time = match a.to_timestamp.or(a.to_datetime) {
        Some(ms) => {
            let mut q = TopicPartitionList::new();
            for (t, p) in &parts {
                q.add_partition_offset(t, *p, Offset::Offset(ms))
                    .context("bad partition list")?;
            }
            Some(
                gc.offsets_for_times(q, c.timeout)
                    .map_err(|e| c.explain(e, "ListOffsets"))?,
            )
        }
        None => None,
    };

    let mut plan = Vec::new();
    let mut notes = Vec::new();
    for key in &parts {
        let (lo, hi) = marks[key];
        let cur = current[key];
        let new = if a.to_earliest {
            lo
        } else if a.to_latest {
            hi
        } else if let Some(o) = a.to_offset {
            let n = o.clamp(lo, hi);
            if n != o {
                notes.push(format!(
                    "{}-{}: --to-offset {o} is outside the log ({lo}..={hi}); using {n}",
                    key.0, key.1
                ));
            }
            n
        } else if let Some(s) = a.shift_by {
            let Some(cur) = cur else {
                bail!(
                    "--shift-by: group '{}' has no committed offset on {}-{} to shift; use --to-offset",
                    a.group,
                    key.0,
                    key.1
                );
            };
            cur.saturating_add(s).clamp(lo, hi)
        } else if let Some(r) = &by_time {
            let e = r
                .find_partition(&key.0, key.1)
                .with_context(|| format!("no ListOffsets answer for {}-{}", key.0, key.1))?;
            if let Err(err) = e.error() {
                bail!("cannot look up {}-{} by time: {err}", key.0, key.1);
            }
            match e.offset() {
                // The first record at or after the time (never before the log start).
                Offset::Offset(o) if o >= 0 => o.clamp(lo, hi),
                // No record that late: the log end, as kafka-consumer-groups.sh does.
                _ => hi,
            }
        } else {
            bail!(
                "give one of --to-earliest, --to-latest, --to-offset, --to-datetime, --to-timestamp, --shift-by"
            );
        };
        plan.push((key.clone(), cur, new));
    }

    if a.execute
        && let Some(d) = describe_group(c, &gc, &a.group)?
        && !d.is_inactive()
    {
        bail!(
            "group '{}' has {} active member(s) (state {}); stop them first: Kafka resets the \
             offsets only of a group with no members",
            a.group,
            d.members.len(),
            d.state
        );
    }

    let wt = plan.iter().map(|p| p.0.0.len()).max().unwrap_or(0).max(5);
    outln!(
        "{:<wt$}  {:>9}  {:>14}  {:>10}",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "NEW-OFFSET"
    );
    for ((t, p), cur, new) in &plan {
        outln!("{t:<wt$}  {p:>9}  {:>14}  {new:>10}", opt(*cur));
    }
    for n in &notes {
        eprintln!("note: {n}");
    }
    if !a.execute {
        outln!("dry run: add --execute to apply");
        return Ok(());
    }

    let mut tpl = TopicPartitionList::new();
    for ((t, p), _, new) in &plan {
        tpl.add_partition_offset(t, *p, Offset::Offset(*new))
            .context("bad partition list")?;
    }
    retry_coordinator(c, || gc.commit(&tpl, CommitMode::Sync))
        .map_err(|e| commit_error(c, &a.group, e))?;
    // Read the offsets back: a partition-level refusal does not always fail the commit.
    let after = committed(c, &gc, &parts)?;
    for ((t, p), _, new) in &plan {
        let got = after.get(&(t.clone(), *p)).copied().flatten();
        if got != Some(*new) {
            bail!(
                "the broker did not store offset {new} for {t}-{p} of group '{}' (it has {}); \
                 stop the group's members and retry",
                a.group,
                opt(got)
            );
        }
    }
    outln!(
        "reset the committed offsets of group '{}' on {} partition(s)",
        a.group,
        plan.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_times_parse() {
        assert_eq!(
            parse_topic_spec("t"),
            Ok(TopicSpec {
                topic: "t".into(),
                partitions: None
            })
        );
        assert_eq!(
            parse_topic_spec("t:2,0"),
            Ok(TopicSpec {
                topic: "t".into(),
                partitions: Some(vec![0, 2])
            })
        );
        assert!(parse_topic_spec("t:x").is_err());
        assert!(parse_topic_spec(":1").is_err());
        assert_eq!(parse_datetime("1970-01-01T00:00:01Z"), Ok(1000));
        assert_eq!(parse_datetime("1970-01-01T00:00:01.5"), Ok(1500));
        assert_eq!(parse_datetime("1970-01-01T02:00:00+02:00"), Ok(0));
        assert_eq!(parse_datetime("1970-01-01T00:00:00-01:30"), Ok(5_400_000));
        assert!(parse_datetime("yesterday").is_err());
    }
}
