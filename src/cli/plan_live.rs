//! `strata plan --from-cluster`: today's workload read from a running cluster (topics,
//! partitions, replication and retention over Kafka; produce rates and each group's lag
//! and retention headroom from the brokers' /metrics, sampled twice), each group's
//! outlook ("how long until it loses data at today's trend", and with retention scaled
//! by --retention-factor), and the plan for today's workload.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use strata_plan::live::{GroupOutlook, PartitionLag, outlook};
use strata_plan::{Workload, human_bytes, human_secs, plan};

use super::client::admin;
use super::plan::PlanArgs;
use super::tier::Http;

/// One Prometheus sample: its name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of a Prometheus text exposition (comments and lines that do not parse
/// are skipped).
pub(super) fn parse_exposition(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    let (series, value) = match line.find('{') {
        Some(_) => {
            let close = line.rfind('}')?;
            (&line[..=close], line[close + 1..].trim())
        }
        None => line.split_once(' ')?,
    };
    let value = match value.split_whitespace().next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.find('{') {
        Some(open) => (
            &series[..open],
            parse_labels(&series[open + 1..series.len() - 1])?,
        ),
        None => (series.trim(), BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `a="x",b="y\"z"` into a map.
fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let mut key = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            key.push(c);
        }
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        out.insert(key.trim().to_string(), value);
    }
}

/// A topic as the cluster describes it, with its measured rates.
#[derive(Debug, Clone, serde::Serialize)]
struct TopicToday {
    topic: String,
    partitions: u32,
    replication_factor: u32,
    /// None: kept forever.
    retention_secs: Option<f64>,
    /// None: not tiered.
    local_retention_secs: Option<f64>,
    records_per_sec: f64,
    bytes_per_sec: f64,
}

/// `retention.ms`-style milliseconds: negative is forever.
fn ms_config(v: Option<&str>) -> Option<f64> {
    let ms: f64 = v?.trim().parse().ok()?;
    (ms >= 0.0).then_some(ms / 1e3)
}

/// The summed counter per topic, from one scrape of every broker.
fn counters(scrapes: &[Vec<Sample>], name: &str) -> BTreeMap<(usize, String, String), f64> {
    let mut out = BTreeMap::new();
    for (broker, samples) in scrapes.iter().enumerate() {
        for s in samples.iter().filter(|s| s.name == name) {
            let topic = s.labels.get("topic").cloned().unwrap_or_default();
            let partition = s.labels.get("partition").cloned().unwrap_or_default();
            out.insert((broker, topic, partition), s.value);
        }
    }
    out
}

/// Per topic, what the counter grew by between the scrapes (a series only in the
/// second, a partition whose leadership just moved, counts from the next sample).
fn growth(before: &[Vec<Sample>], after: &[Vec<Sample>], name: &str) -> BTreeMap<String, f64> {
    let a = counters(before, name);
    let b = counters(after, name);
    let mut out = BTreeMap::new();
    for (key, v) in &b {
        if let Some(old) = a.get(key) {
            *out.entry(key.1.clone()).or_insert(0.0) += (v - old).max(0.0);
        }
    }
    out
}

fn scrape(http: &[Http]) -> anyhow::Result<Vec<Vec<Sample>>> {
    http.iter()
        .map(|h| {
            h.get("/metrics")
                .map(|t| parse_exposition(&t))
                .with_context(|| format!("cannot read /metrics from {} (--http)", h.addr()))
        })
        .collect()
}

/// Each (group, topic, partition)'s lag, worst over the brokers that export it.
fn lags(scrapes: &[Vec<Sample>]) -> Vec<PartitionLag> {
    let mut by: BTreeMap<(String, String, i32), PartitionLag> = BTreeMap::new();
    for s in scrapes.iter().flatten() {
        let (Some(g), Some(t), Some(p)) = (
            s.labels.get("group"),
            s.labels.get("topic"),
            s.labels
                .get("partition")
                .and_then(|p| p.parse::<i32>().ok()),
        ) else {
            continue;
        };
        let e = by
            .entry((g.clone(), t.clone(), p))
            .or_insert_with(|| PartitionLag {
                group: g.clone(),
                topic: t.clone(),
                partition: p,
                age_secs: 0.0,
                headroom_secs: None,
                records: 0.0,
            });
        match s.name.as_str() {
            "strata_group_lag_seconds" => e.age_secs = e.age_secs.max(s.value),
            "strata_group_lag_records" => e.records = e.records.max(s.value),
            "strata_group_retention_headroom_seconds" if s.value.is_finite() => {
                e.headroom_secs = Some(e.headroom_secs.map_or(s.value, |h| h.min(s.value)));
            }
            _ => {}
        }
    }
    by.into_values().collect()
}

pub(super) fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let sample = humantime::parse_duration(args.sample.trim()).with_context(|| {
        format!(
            "--sample '{}': expected a duration such as 10s",
            args.sample
        )
    })?;
    if sample < Duration::from_secs(1) {
        bail!("--sample must be at least 1s: rates over less are noise");
    }
    if !(args.retention_factor > 0.0 && args.retention_factor.is_finite()) {
        bail!("--retention-factor must be above 0");
    }
    let http: Vec<Http> = args
        .http
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| Http::with(a, args.http_auth.as_deref()))
        .collect::<anyhow::Result<_>>()?;
    if http.is_empty() {
        bail!("--http names no broker HTTP address");
    }

    let client = admin(c)?;
    let md = c.metadata(client.inner(), None)?;
    let mut topics = Vec::new();
    for t in md.topics() {
        if t.name().starts_with("__") {
            continue;
        }
        let entries = super::topic::describe_configs(c, &client, t.name())?;
        let get = |k: &str| {
            entries
                .iter()
                .find(|e| e.name == k)
                .and_then(|e| e.value.as_deref())
        };
        let retention = ms_config(get("retention.ms"));
        let tiered = get("remote.storage.enable") == Some("true");
        let local = match get("local.retention.ms").map(str::trim) {
            _ if !tiered => None,
            Some("-2") | None => retention,
            v => ms_config(v),
        };
        topics.push(TopicToday {
            topic: t.name().to_string(),
            partitions: t.partitions().len() as u32,
            replication_factor: t.partitions().first().map_or(0, |p| p.replicas().len()) as u32,
            retention_secs: retention,
            local_retention_secs: local,
            records_per_sec: 0.0,
            bytes_per_sec: 0.0,
        });
    }

    let first = scrape(&http)?;
    let t0 = Instant::now();
    let pb = indicatif::ProgressBar::new(sample.as_millis() as u64)
        .with_message("measuring produce rates (--sample)");
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {elapsed}/{duration}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    while t0.elapsed() < sample {
        std::thread::sleep(Duration::from_millis(100).min(sample - t0.elapsed().min(sample)));
        pb.set_position(t0.elapsed().as_millis() as u64);
    }
    let second = scrape(&http)?;
    let elapsed = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let bytes = growth(&first, &second, "strata_partition_produce_bytes_total");
    let records = growth(&first, &second, "strata_partition_produce_records_total");
    for t in &mut topics {
        t.bytes_per_sec = bytes.get(&t.topic).copied().unwrap_or(0.0) / elapsed;
        t.records_per_sec = records.get(&t.topic).copied().unwrap_or(0.0) / elapsed;
    }

    let mut lags = lags(&second);
    if !args.groups.is_empty() {
        for g in &args.groups {
            if !lags.iter().any(|l| &l.group == g) {
                bail!(
                    "group '{g}' has no committed offsets on the brokers in --http (name every \
                     broker, or check the group's name with `strata group list`)"
                );
            }
        }
        lags.retain(|l| args.groups.contains(&l.group));
    }
    let retention: BTreeMap<&str, Option<f64>> = topics
        .iter()
        .map(|t| (t.topic.as_str(), t.retention_secs))
        .collect();
    let groups = outlook(
        &lags,
        |t| retention.get(t).copied().flatten(),
        args.retention_factor,
    );

    let today = today(args, &topics, &groups)?;
    let planned = today.as_ref().map(|w| (w.clone(), plan(w)));
    if args.json {
        let v = serde_json::json!({
            "sample_secs": elapsed,
            "brokers_scraped": http.len(),
            "topics": topics,
            "groups": groups,
            "workload": planned.as_ref().map(|(w, _)| w),
            "plan": planned.as_ref().map(|(_, p)| p),
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    outln!(
        "today (measured over {} from {} broker(s))",
        human_secs(elapsed),
        http.len()
    );
    for t in &topics {
        outln!(
            "  topic {}: {} partitions, RF {}, retention {}{}: {:.0} events/s, {}/s",
            t.topic,
            t.partitions,
            t.replication_factor,
            t.retention_secs
                .map_or_else(|| "forever".to_string(), human_secs),
            t.local_retention_secs
                .map(|l| format!(", local {}", human_secs(l)))
                .unwrap_or_default(),
            t.records_per_sec,
            human_bytes(t.bytes_per_sec)
        );
    }
    if groups.is_empty() {
        outln!("groups: none has committed offsets on these brokers");
    } else {
        outln!("groups");
        for g in &groups {
            outln!("  {}", g.verdict);
        }
    }
    match &planned {
        Some((w, p)) => {
            outln!("");
            outln!(
                "plan for today's workload (consumers and their rate are --consumers and --consumer-rate, not measured)"
            );
            super::plan::print_plan(w, p);
        }
        None => outln!("no records were produced during the sample: no plan for today's workload"),
    }
    Ok(())
}

/// Today's workload: the measured rates, the busiest topics' replication and
/// retention, the groups' count and worst lag; flags given explicitly win.
fn today(
    args: &PlanArgs,
    topics: &[TopicToday],
    groups: &[GroupOutlook],
) -> anyhow::Result<Option<Workload>> {
    let busy: Vec<&TopicToday> = topics.iter().filter(|t| t.records_per_sec > 0.0).collect();
    let events: f64 = busy.iter().map(|t| t.records_per_sec).sum();
    let bytes: f64 = busy.iter().map(|t| t.bytes_per_sec).sum();
    if events <= 0.0 {
        return Ok(None);
    }
    let mut base = Workload {
        events_per_sec: events,
        event_bytes: bytes / events,
        replication_factor: busy
            .iter()
            .map(|t| t.replication_factor)
            .max()
            .unwrap_or(1)
            .max(1),
        partitions: busy.iter().map(|t| t.partitions).sum::<u32>().max(1),
        ..Workload::default()
    };
    if let Some(r) = busy
        .iter()
        .filter_map(|t| t.retention_secs)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
    {
        base.retention_secs = r;
    }
    base.local_retention_secs = busy
        .iter()
        .filter_map(|t| t.local_retention_secs)
        .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.min(l))));
    base.consumer_groups = groups.len() as u32;
    let lagging: Vec<&GroupOutlook> = groups.iter().filter(|g| g.lag_secs >= 60.0).collect();
    base.lagging_groups = lagging.len() as u32;
    base.lag_secs = lagging.iter().map(|g| g.lag_secs).fold(0.0, f64::max);
    Ok(Some(super::plan::workload(args, base)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_exposition_parses_with_labels_escapes_and_infinities() {
        let text = "# HELP x y\n# TYPE x gauge\n\
                    strata_group_retention_headroom_seconds{group=\"g \\\"1\\\"\",topic=\"t\",partition=\"2\"} +Inf\n\
                    strata_partition_produce_bytes_total{topic=\"t\",partition=\"0\"} 1234\n\
                    plain_metric 5.5\n\
                    broken{a=\"b\" \n";
        let s = parse_exposition(text);
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(s[0].labels["group"], "g \"1\"");
        assert_eq!(s[0].value, f64::INFINITY);
        assert_eq!(s[1].labels["partition"], "0");
        assert_eq!(s[1].value, 1234.0);
        assert_eq!((s[2].name.as_str(), s[2].value), ("plain_metric", 5.5));
    }

    #[test]
    fn growth_sums_per_topic_and_skips_new_series() {
        let s = |t: &str, p: &str, v: f64| Sample {
            name: "c".into(),
            labels: [
                ("topic".to_string(), t.to_string()),
                ("partition".to_string(), p.to_string()),
            ]
            .into_iter()
            .collect(),
            value: v,
        };
        let before = vec![vec![s("a", "0", 10.0), s("a", "1", 5.0)]];
        let after = vec![vec![
            s("a", "0", 30.0),
            s("a", "1", 6.0),
            s("b", "0", 100.0),
        ]];
        let g = growth(&before, &after, "c");
        assert_eq!(g.get("a"), Some(&21.0));
        assert_eq!(g.get("b"), None);
    }
}
