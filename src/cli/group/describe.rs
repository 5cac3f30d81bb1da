//! `strata group describe`: a group's members and, per partition, its committed offset,
//! lag, the lag's age and the headroom left before retention.ms.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::bail;

use super::broker::{
    committed, consumer, describe_group, partition_counts, peek_timestamps, retention_ms,
    watermarks,
};
use super::committed_all::committed_all;
use super::opt;
use crate::cli::client::ClientArgs;

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

pub(super) fn describe(c: &ClientArgs, group: &str, topics: &[String]) -> anyhow::Result<()> {
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

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn hours(ms: i64) -> String {
    format!("{:.2}h", ms as f64 / 3_600_000.0)
}
