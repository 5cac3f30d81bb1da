//! `strata consume`: prints a topic's records, one per line, through a librdkafka consumer
//! that assigns partitions itself (no consumer group: nothing joins, nothing is committed).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;

use super::client::{CliContext, ClientArgs};

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The topic to read.
    #[arg(long)]
    pub topic: String,
    /// Where to start: earliest, latest, offset:N (in every partition read) or
    /// timestamp:MS (the first record at or after MS, milliseconds since the Unix epoch).
    #[arg(long, default_value = "latest", value_name = "POSITION", value_parser = parse_from)]
    pub from: From,
    /// Read only this partition [default: all]
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    pub partition: Option<i32>,
    /// Stop after this many records.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_messages: Option<u64>,
    /// Stop once every partition read is at the end it had when we started.
    #[arg(long)]
    pub exit_at_end: bool,
    /// Print each record's key ("null" when it has none).
    #[arg(long)]
    pub print_key: bool,
    /// Print each record's partition.
    #[arg(long)]
    pub print_partition: bool,
    /// Print each record's offset.
    #[arg(long)]
    pub print_offset: bool,
    /// What separates the printed fields (partition, offset, key, value) [default: a tab]
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
}

/// A starting position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    Earliest,
    Latest,
    Offset(i64),
    Timestamp(i64),
}

fn parse_from(v: &str) -> Result<From, String> {
    const EXPECTED: &str = "expected earliest, latest, offset:N or timestamp:MS";
    let number = |s: &str, what: &str| -> Result<i64, String> {
        match s.trim().parse::<i64>() {
            Ok(n) if n >= 0 => Ok(n),
            _ => Err(format!("{what} must be a number >= 0 ({EXPECTED})")),
        }
    };
    match v.trim() {
        "earliest" | "beginning" => Ok(From::Earliest),
        "latest" | "end" => Ok(From::Latest),
        other => {
            if let Some(n) = other.strip_prefix("offset:") {
                Ok(From::Offset(number(n, "the offset")?))
            } else if let Some(ms) = other.strip_prefix("timestamp:") {
                Ok(From::Timestamp(number(ms, "the timestamp")?))
            } else {
                Err(EXPECTED.to_string())
            }
        }
    }
}

/// One partition being read.
#[derive(Debug)]
struct Part {
    /// The high-water mark when we started: with --exit-at-end, where we stop.
    end: i64,
    done: bool,
}

pub fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let sep = match &args.key_separator {
        Some(s) if s.is_empty() => bail!("--key-separator must not be empty"),
        Some(s) => s.clone().into_bytes(),
        None => b"\t".to_vec(),
    };
    c.check_reachable()?;
    let mut config = c.config();
    config
        // librdkafka's assign() needs a group handle, so there is a group id; but we never
        // subscribe, join, fetch or commit offsets, so no group comes into being.
        .set("group.id", "strata-cli-consume")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // An offset:N below the log start (deleted by retention since we looked) starts
        // at the earliest.
        .set("auto.offset.reset", "earliest")
        .set(
            "enable.partition.eof",
            if args.exit_at_end { "true" } else { "false" },
        );
    let consumer: BaseConsumer<CliContext> = config
        .create_with_context(CliContext::default())
        .context("cannot create the Kafka consumer")?;

    let md = c.metadata(consumer.client(), Some(&args.topic))?;
    let topic = md
        .topics()
        .iter()
        .find(|t| t.name() == args.topic)
        .with_context(|| format!("--topic {}: no metadata for this topic", args.topic))?;
    if let Some(e) = topic.error() {
        let code = RDKafkaErrorCode::from(e);
        if code == RDKafkaErrorCode::UnknownTopicOrPartition {
            bail!("--topic {}: the topic does not exist", args.topic);
        }
        bail!("--topic {}: {code}", args.topic);
    }
    let n = topic.partitions().len() as i32;
    let partitions: Vec<i32> = match args.partition {
        Some(p) if p >= n => bail!(
            "--partition {p}: topic '{}' has {n} partitions (0..={})",
            args.topic,
            n - 1
        ),
        Some(p) => vec![p],
        None => (0..n).collect(),
    };

    // Resolve every start position to an offset ourselves, so --exit-at-end can compare it
    // with the end we saw at the start.
    let mut parts = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    let by_time = match args.from {
        From::Timestamp(ms) => {
            let mut q = TopicPartitionList::new();
            for &p in &partitions {
                q.add_partition_offset(&args.topic, p, Offset::Offset(ms))
                    .context("bad partition list")?;
            }
            let r = consumer
                .offsets_for_times(q, c.timeout)
                .map_err(|e| c.explain(e, "ListOffsets"))?;
            Some(r)
        }
        _ => None,
    };
    for &p in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(&args.topic, p, c.timeout)
            .map_err(|e| c.explain(e, "ListOffsets"))?;
        let start = match args.from {
            From::Earliest => low,
            From::Latest => high,
            // Past the end is a mistake worth saying (the REST read answers 416 with the
            // range); below the start, retention deleted it: start at the earliest, as the
            // consumer's auto.offset.reset would, and say so.
            From::Offset(o) if o > high => bail!(
                "--from offset:{o}: partition {p} of '{}' holds offsets {low} to {} (its next offset is {high}); give an offset in that range, or --from latest to wait for new records",
                args.topic,
                high - 1
            ),
            From::Offset(o) if o < low => {
                eprintln!(
                    "note: offset {o} of partition {p} is below its log start {low} (retention deleted it); starting at {low}"
                );
                low
            }
            From::Offset(o) => o,
            From::Timestamp(_) => {
                let found = by_time
                    .as_ref()
                    .and_then(|r| r.find_partition(&args.topic, p))
                    .map(|e| e.offset());
                match found {
                    Some(Offset::Offset(o)) => o,
                    // No record at or after the timestamp: start at the end.
                    _ => high,
                }
            }
        };
        assignment
            .add_partition_offset(&args.topic, p, Offset::Offset(start))
            .context("bad partition list")?;
        parts.insert(
            p,
            Part {
                end: high,
                done: start >= high,
            },
        );
    }
    consumer
        .assign(&assignment)
        .map_err(|e| c.explain(e, "assign"))?;

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut count = 0u64;
    let mut last_progress = Instant::now();
    let mut last_warning: Option<String> = None;
    let all_done = |parts: &BTreeMap<i32, Part>| parts.values().all(|p| p.done);
    loop {
        if args.max_messages.is_some_and(|m| count >= m) {
            break;
        }
        if args.exit_at_end && all_done(&parts) {
            break;
        }
        // Flush what we printed before waiting, so a live tail shows records promptly.
        let msg = match consumer.poll(Duration::ZERO) {
            Some(m) => Some(m),
            None => {
                if let Err(e) = out.flush() {
                    return done_writing(e);
                }
                consumer.poll(Duration::from_millis(100))
            }
        };
        match msg {
            None => {}
            Some(Ok(m)) => {
                last_progress = Instant::now();
                let p = m.partition();
                if let Some(part) = parts.get_mut(&p)
                    && m.offset() + 1 >= part.end
                {
                    part.done = true;
                }
                if let Err(e) = print(&mut out, &args, &sep, &m) {
                    return done_writing(e);
                }
                count += 1;
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                last_progress = Instant::now();
                if let Some(part) = parts.get_mut(&p) {
                    part.done = true;
                }
            }
            Some(Err(e)) => {
                let text = e.to_string();
                if last_warning.as_deref() != Some(&text) {
                    eprintln!("warning: {text}");
                    last_warning = Some(text);
                }
            }
        }
        // With --exit-at-end the end is known to be there; not reaching it within the
        // timeout means the broker stopped answering.
        if args.exit_at_end && last_progress.elapsed() > c.timeout {
            let last = last_warning
                .or_else(|| consumer.context().last_error())
                .map(|w| format!(" (last error: {w})"))
                .unwrap_or_default();
            bail!(
                "no records for {} before reaching the end of the topic{last}: {}",
                humantime::format_duration(c.timeout),
                c.what_to_check()
            );
        }
    }
    if let Err(e) = out.flush() {
        return done_writing(e);
    }
    eprintln!("consumed {count} records");
    Ok(())
}

/// A closed standard output (say, `| head`) ends the command quietly.
fn done_writing(e: std::io::Error) -> anyhow::Result<()> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Ok(());
    }
    Err(anyhow::Error::new(e).context("cannot write to standard output"))
}

fn print(
    out: &mut impl Write,
    args: &ConsumeArgs,
    sep: &[u8],
    m: &impl Message,
) -> std::io::Result<()> {
    if args.print_partition {
        write!(out, "{}", m.partition())?;
        out.write_all(sep)?;
    }
    if args.print_offset {
        write!(out, "{}", m.offset())?;
        out.write_all(sep)?;
    }
    if args.print_key {
        out.write_all(m.key().unwrap_or(b"null"))?;
        out.write_all(sep)?;
    }
    out.write_all(m.payload().unwrap_or(b"null"))?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_positions_parse_and_explain() {
        assert_eq!(parse_from("earliest"), Ok(From::Earliest));
        assert_eq!(parse_from("latest"), Ok(From::Latest));
        assert_eq!(parse_from("offset:42"), Ok(From::Offset(42)));
        assert_eq!(
            parse_from("timestamp:1700000000000"),
            Ok(From::Timestamp(1_700_000_000_000))
        );
        let e = parse_from("sometime").unwrap_err();
        assert!(
            e.contains("expected earliest, latest, offset:N or timestamp:MS"),
            "{e}"
        );
        assert!(parse_from("offset:-1").is_err());
        assert!(parse_from("offset:x").is_err());
    }
}
