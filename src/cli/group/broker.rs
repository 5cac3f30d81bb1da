//! Talking to the broker through librdkafka: a group's description, committed offsets,
//! watermarks, retention.ms and record timestamps, with the retries on a moving
//! coordinator that every subcommand shares.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::executor::block_on;
use rdkafka::admin::ResourceSpecifier;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;

use crate::cli::client::{CliContext, ClientArgs, admin, admin_options};

/// A group as DescribeGroups shows it.
#[derive(Debug)]
pub(super) struct GroupDesc {
    pub(super) state: String,
    pub(super) protocol_type: String,
    pub(super) protocol: String,
    pub(super) members: Vec<Member>,
}

#[derive(Debug)]
pub(super) struct Member {
    pub(super) id: String,
    pub(super) client_id: String,
    pub(super) host: String,
    /// Decoded from the consumer protocol (None: another protocol, or nothing assigned yet).
    pub(super) assignment: Option<Vec<(String, Vec<i32>)>>,
    pub(super) subscription: Option<Vec<String>>,
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
    pub(super) fn is_inactive(&self) -> bool {
        self.members.is_empty() || matches!(self.state.as_str(), "Dead" | "Empty")
    }
}

/// Errors that mean the broker does not implement the API (as opposed to not answering).
pub(super) fn is_unsupported(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        e.rdkafka_error_code(),
        Some(E::UnsupportedFeature | E::UnsupportedVersion | E::InvalidRequest)
    )
}

pub(super) const LIST_GROUPS: i16 = 16;
const DESCRIBE_GROUPS: i16 = 15;

/// Whether the first reachable bootstrap broker advertises `api_key` in ApiVersions (None:
/// could not tell). librdkafka skips brokers without ListGroups/DescribeGroups silently,
/// which would make "no groups" indistinguishable from "cannot list groups".
pub(super) fn broker_supports(c: &ClientArgs, api_key: i16) -> Option<bool> {
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
pub(super) fn describe_group(
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
pub(super) fn consumer(c: &ClientArgs, group: &str) -> anyhow::Result<BaseConsumer<CliContext>> {
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
pub(super) fn partition_counts(
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
pub(super) fn retry_coordinator<T>(
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
pub(super) fn committed(
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

/// (log start, log end) of every partition.
pub(super) fn watermarks(
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
pub(super) fn retention_ms(
    c: &ClientArgs,
    topics: &BTreeSet<String>,
) -> BTreeMap<String, Option<i64>> {
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
pub(super) fn peek_timestamps(
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
