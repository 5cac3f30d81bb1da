//! `strata topic repartition T --partitions N`: more partitions without breaking any
//! key's order, by a fenced cutover to a new topic.
//!
//! A bare CreatePartitions moves keys to new partitions while their older records still
//! wait unread in the old ones, so a consumer can see a key's new records first. Here
//! the old records and the new never share a topic: the new topic is created closed,
//! the old one is closed (`writes.closed`, producers get POLICY_VIOLATION naming the new
//! topic and switch), its partitions' ends are the cutover markers, the new topic opens,
//! and each consumer group named is watched until it has committed the old topic up to
//! the markers: only then do its consumers switch. Every record of the old topic was
//! appended before any of the new one, so a group that finishes the old topic before it
//! starts the new one reads every key in order. docs/operations.md has the procedure.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{
    ApiKey, DescribeConfigsRequest, DescribeConfigsResponse, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::client::{CliContext, ClientArgs};
use super::wire::Conn;

const CLOSED: &str = "writes.closed";
const TO: &str = "repartitioned.to";

pub fn run(
    c: &ClientArgs,
    topic: &str,
    partitions: i32,
    to: Option<String>,
    groups: &[String],
) -> anyhow::Result<()> {
    let to = to.unwrap_or_else(|| format!("{topic}.p{partitions}"));
    if to == topic {
        bail!("--to names the topic itself: give the new topic another name");
    }
    let admin = super::client::admin(c)?;
    let md = c.metadata(admin.inner(), None)?;
    let old = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .with_context(|| format!("topic '{topic}' does not exist"))?;
    let old_count = old.partitions().len() as i32;
    let rf = old.partitions().first().map_or(1, |p| p.replicas().len()) as i32;
    let configs = super::topic::describe_configs(c, &admin, topic)?;
    let value = |k: &str| {
        configs
            .iter()
            .find(|e| e.name == k)
            .and_then(|e| e.value.clone())
    };
    let resuming = value(CLOSED).as_deref() == Some("true");
    if resuming && value(TO).as_deref() != Some(to.as_str()) {
        bail!(
            "'{topic}' is already closed for writes{}: run `strata topic alter {topic} --delete {CLOSED}` to reopen it first",
            value(TO)
                .filter(|v| !v.is_empty())
                .map(|v| format!(" (repartitioned into '{v}')"))
                .unwrap_or_default()
        );
    }
    if partitions <= old_count && !resuming {
        bail!(
            "--partitions {partitions}: '{topic}' has {old_count}; repartition to more (fewer partitions cannot keep up with what more could take)"
        );
    }

    // 1. The new topic, closed until the old one is.
    let exists = md.topics().iter().any(|t| t.name() == to);
    if !exists {
        let overrides: Vec<(String, String)> = configs
            .iter()
            .filter(|e| e.source == rdkafka::admin::ConfigSource::DynamicTopic)
            .filter(|e| e.name != CLOSED && e.name != TO)
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .chain([(CLOSED.to_string(), "true".to_string())])
            .collect();
        let mut t = rdkafka::admin::NewTopic::new(
            &to,
            partitions,
            rdkafka::admin::TopicReplication::Fixed(rf),
        );
        for (k, v) in &overrides {
            t = t.set(k, v);
        }
        let r = futures::executor::block_on(
            admin.create_topics([&t], &super::client::admin_options(c)),
        )
        .map_err(|e| c.explain(e, "CreateTopics"))?;
        for x in r {
            if let Err((_, code)) = x {
                bail!("cannot create '{to}': {code}");
            }
        }
        outln!(
            "created '{to}' with {partitions} partitions (closed for writes until '{topic}' is)"
        );
    } else if !resuming {
        bail!("'{to}' exists already: give another --to, or delete it");
    }

    // 2. Close the old topic, and wait until every broker knows.
    if !resuming {
        super::topic::alter(
            c,
            topic,
            &[
                (CLOSED.to_string(), "true".to_string()),
                (TO.to_string(), to.clone()),
            ],
            &[],
            None,
        )?;
    }
    wait_everywhere(c, topic)?;
    outln!("'{topic}' is closed for writes: its producers get POLICY_VIOLATION naming '{to}'");

    // 3. The markers: each old partition's end, once nothing more commits there.
    let probe: BaseConsumer<CliContext> = c
        .config()
        .create_with_context(CliContext::default())
        .context("cannot create the Kafka consumer")?;
    let ends = |probe: &BaseConsumer<CliContext>| -> anyhow::Result<Vec<(i64, i64)>> {
        (0..old_count)
            .map(|p| {
                probe
                    .fetch_watermarks(topic, p, c.timeout)
                    .map_err(|e| c.explain(e, "ListOffsets"))
            })
            .collect()
    };
    let mut markers = ends(&probe)?;
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let again = ends(&probe)?;
        if again == markers {
            break;
        }
        markers = again;
    }
    for (p, (_, high)) in markers.iter().enumerate() {
        outln!("marker {topic}-{p}: {high}");
    }

    // 4. Open the new topic.
    super::topic::alter(c, &to, &[], &[CLOSED.to_string()], None)?;
    outln!("'{to}' is open: producers write there now");

    // 5. Each group: committed up to the markers.
    for g in groups {
        wait_drained(c, g, topic, &markers)?;
        outln!(
            "group '{g}' has read '{topic}' up to the cutover: switch its consumers to '{to}' (from the earliest offset)"
        );
    }
    if groups.is_empty() {
        outln!(
            "switch each consumer group to '{to}' (from the earliest offset) once it has read '{topic}' to the markers above (`strata group describe G` shows its lag; with --group this command waits for it)"
        );
    }
    Ok(())
}

/// Waits until every broker's metadata has `topic` closed (produce is checked by each
/// partition's leader, against its own copy).
fn wait_everywhere(c: &ClientArgs, topic: &str) -> anyhow::Result<()> {
    let mut conn = Conn::open(&c.bootstrap, c)?;
    let v = conn
        .version(ApiKey::Metadata, 1..=12)
        .context("the broker does not serve Metadata v1+")?;
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    let r: MetadataResponse = conn.call(ApiKey::Metadata, v, &req)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    for b in &r.brokers {
        let addr = format!("{}:{}", b.host, b.port);
        let mut conn = Conn::connect_with(&addr, c.timeout, &c.properties())?;
        let v = conn
            .version(ApiKey::DescribeConfigs, 1..=4)
            .context("the broker does not serve DescribeConfigs v1+")?;
        loop {
            let mut res = DescribeConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = StrBytes::from_string(topic.to_string());
            res.configuration_keys = Some(vec![StrBytes::from_static_str(CLOSED)]);
            let mut req = DescribeConfigsRequest::default();
            req.resources = vec![res];
            let r: DescribeConfigsResponse = conn.call(ApiKey::DescribeConfigs, v, &req)?;
            let closed = r.results.iter().any(|res| {
                res.configs
                    .iter()
                    .any(|e| e.name.as_str() == CLOSED && e.value.as_deref() == Some("true"))
            });
            if closed {
                break;
            }
            if Instant::now() > deadline {
                bail!("broker {addr} does not see '{topic}' closed after 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Waits, with a progress bar, until `group` has committed every partition of `topic`
/// up to its marker.
fn wait_drained(
    c: &ClientArgs,
    group: &str,
    topic: &str,
    markers: &[(i64, i64)],
) -> anyhow::Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};
    let mut config = c.config();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer<CliContext> = config
        .create_with_context(CliContext::default())
        .context("cannot create the Kafka consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..markers.len() as i32 {
        tpl.add_partition(topic, p);
    }
    let left = |committed: &BTreeMap<i32, i64>| -> i64 {
        markers
            .iter()
            .enumerate()
            .map(|(p, (low, high))| {
                let at = committed
                    .get(&(p as i32))
                    .copied()
                    .unwrap_or(*low)
                    .max(*low);
                (high - at).max(0)
            })
            .sum()
    };
    let read = || -> anyhow::Result<BTreeMap<i32, i64>> {
        let got = consumer
            .committed_offsets(tpl.clone(), c.timeout)
            .map_err(|e| c.explain(e, "OffsetFetch"))?;
        Ok(got
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some((e.partition(), o)),
                _ => None,
            })
            .collect())
    };
    let total = left(&read()?);
    let bar = ProgressBar::new(total.max(1) as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} records of the old topic read by {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(group.to_string());
    loop {
        let to_go = left(&read()?);
        bar.set_position((total - to_go).max(0) as u64);
        if to_go == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    bar.finish_and_clear();
    Ok(())
}
