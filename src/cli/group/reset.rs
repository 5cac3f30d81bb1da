//! `strata group reset-offsets`: its flags, the new offsets planned for each partition,
//! and the standalone commit that applies them.

use std::time::UNIX_EPOCH;

use anyhow::{Context, bail};
use clap::{ArgGroup, Args};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;

use super::broker::{
    committed, consumer, describe_group, partition_counts, retry_coordinator, watermarks,
};
use super::opt;
use crate::cli::client::ClientArgs;

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

pub(super) fn reset(c: &ClientArgs, a: &ResetArgs) -> anyhow::Result<()> {
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
