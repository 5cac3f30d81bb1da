//! `strata produce`: one record per line of standard input, through a librdkafka producer.

use std::io::{BufRead, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use strata_proto::Compression;

use super::client::{CliContext, ClientArgs};

#[derive(Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The topic to write to.
    #[arg(long)]
    pub topic: String,
    /// Split each line at the first SEP: the part before is the key, the rest the value.
    /// Without it, records have no key.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// Write every record to this partition [default: by key (murmur2, as Kafka's Java
    /// client), or spread when there is no key]
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    pub partition: Option<i32>,
    /// Acknowledgements to wait for: 0 (none), 1 (the leader) or all (every in-sync replica;
    /// also turns on the idempotent producer, so a retry never duplicates a record).
    #[arg(long, default_value = "all", value_parser = ["0", "1", "all", "-1"])]
    pub acks: String,
    /// Batch compression.
    #[arg(long, default_value_t = Compression::None, value_parser = compression_parser())]
    pub compression: Compression,
}

/// clap's parser for a codec: strata_proto's names are the possible values (listed in
/// --help and in the error for any other value).
fn compression_parser() -> impl TypedValueParser<Value = Compression> {
    PossibleValuesParser::new(Compression::ALL.map(Compression::name))
        .try_map(|name| name.parse::<Compression>())
}

/// Counts deliveries; remembers the first failure.
#[derive(Debug, Default)]
struct Deliveries {
    cli: CliContext,
    delivered: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.cli.log(level, fac, log_message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.cli.error(error, reason);
    }
}

impl ProducerContext for Deliveries {
    /// The line number, to say which record failed.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, line: usize) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, msg)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut g) = self.first_error.lock() {
                    g.get_or_insert_with(|| {
                        format!("line {line} (partition {}): {e}", msg.partition())
                    });
                }
            }
        }
    }
}

/// Strips the line terminator (\n or \r\n).
fn trim_eol(line: &mut Vec<u8>) {
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
}

/// Splits at the first occurrence of `sep`.
fn split_key<'a>(line: &'a [u8], sep: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    line.windows(sep.len())
        .position(|w| w == sep)
        .map(|i| (&line[..i], &line[i + sep.len()..]))
}

pub fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let sep = match &args.key_separator {
        Some(s) if s.is_empty() => bail!("--key-separator must not be empty"),
        Some(s) => Some(s.as_bytes().to_vec()),
        None => None,
    };
    c.check_reachable()?;
    let mut config = c.config();
    let timeout_ms = c.timeout.as_millis().to_string();
    config
        .set("acks", &args.acks)
        .set("compression.type", args.compression.name())
        // Kafka's Java client hashes keys with murmur2; librdkafka's default is CRC-32.
        // Matching Java puts a key in the same partition whichever client wrote it.
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        // A record not acknowledged within --timeout fails, so EOF never waits forever.
        .set("message.timeout.ms", &timeout_ms)
        .set("request.timeout.ms", &timeout_ms);
    if args.acks == "all" || args.acks == "-1" {
        config.set("enable.idempotence", "true");
    }
    let producer: ThreadedProducer<Deliveries> = config
        .create_with_context(Deliveries::default())
        .context("cannot create the Kafka producer")?;

    // Look the topic up first, so a typo gets a clear error rather than records that time
    // out one by one. (Brokers that auto-create topics create it here, as a producer would.)
    let md = c.metadata(producer.client(), Some(&args.topic))?;
    let topic = md
        .topics()
        .iter()
        .find(|t| t.name() == args.topic)
        .with_context(|| format!("--topic {}: no metadata for this topic", args.topic))?;
    if let Some(e) = topic.error() {
        let code = RDKafkaErrorCode::from(e);
        if code == RDKafkaErrorCode::UnknownTopicOrPartition {
            bail!(
                "--topic {0}: the topic does not exist (create it with `strata topic create {0}`)",
                args.topic
            );
        }
        bail!("--topic {}: {code}", args.topic);
    }
    let n = topic.partitions().len();
    if let Some(p) = args.partition
        && p as usize >= n
    {
        bail!(
            "--partition {p}: topic '{}' has {n} partitions (0..={})",
            args.topic,
            n.saturating_sub(1)
        );
    }

    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    let mut sent = 0u64;
    let mut lineno = 0usize;
    let mut input_error = None;
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                input_error = Some(anyhow::Error::new(e).context("cannot read standard input"));
                break;
            }
        }
        lineno += 1;
        if producer.context().failed.load(Ordering::Relaxed) > 0 {
            break;
        }
        trim_eol(&mut line);
        let (key, value): (Option<&[u8]>, &[u8]) = match &sep {
            None => (None, &line),
            Some(sep) => match split_key(&line, sep) {
                Some((k, v)) => (Some(k), v),
                None => {
                    input_error = Some(anyhow::anyhow!(
                        "line {lineno} has no key separator '{}' (--key-separator)",
                        String::from_utf8_lossy(sep)
                    ));
                    break;
                }
            },
        };
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(&args.topic, lineno).payload(value);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    // librdkafka's queue is full: wait for deliveries to make room.
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => {
                    input_error =
                        Some(anyhow::Error::new(e).context(format!("line {lineno}: cannot send")));
                    break;
                }
            }
        }
        if input_error.is_some() {
            break;
        }
        sent += 1;
    }

    // Every record left times out after message.timeout.ms; the margin covers the last
    // one's wait in the queue.
    let flushed = producer.flush(c.timeout + Duration::from_secs(5));
    let ctx = producer.context();
    let delivered = ctx.delivered.load(Ordering::Relaxed);
    let failed = ctx.failed.load(Ordering::Relaxed);
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "delivered {delivered} of {sent} records to topic '{}'",
        args.topic
    );
    if failed > 0 {
        let first = ctx
            .first_error
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_default();
        bail!(
            "{failed} records were not delivered; first failure: {first}. {}",
            c.what_to_check()
        );
    }
    if let Err(e) = flushed {
        bail!(
            "{} records still undelivered after {}: {e}. {}",
            sent.saturating_sub(delivered),
            humantime::format_duration(c.timeout + Duration::from_secs(5)),
            c.what_to_check()
        );
    }
    if let Some(e) = input_error {
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_flag_takes_strata_protos_codec_names() {
        #[derive(clap::Parser, Debug)]
        struct Cmd {
            #[command(flatten)]
            args: ProduceArgs,
        }
        let parse = |extra: &[&str]| {
            let argv = ["produce", "--topic", "t"].iter().chain(extra);
            <Cmd as clap::Parser>::try_parse_from(argv)
                .map(|c| c.args.compression)
                .map_err(|e| e.kind())
        };
        assert_eq!(parse(&[]), Ok(Compression::None));
        for c in Compression::ALL {
            assert_eq!(parse(&["--compression", c.name()]), Ok(c));
        }
        assert_eq!(
            parse(&["--compression", "brotli"]),
            Err(clap::error::ErrorKind::InvalidValue)
        );
    }

    #[test]
    fn lines_split_at_the_first_separator() {
        assert_eq!(split_key(b"k1:v:1", b":"), Some((&b"k1"[..], &b"v:1"[..])));
        assert_eq!(split_key(b"k1::v", b"::"), Some((&b"k1"[..], &b"v"[..])));
        assert_eq!(split_key(b":v", b":"), Some((&b""[..], &b"v"[..])));
        assert_eq!(split_key(b"kv", b":"), None);
        let mut l = b"abc\r\n".to_vec();
        trim_eol(&mut l);
        assert_eq!(l, b"abc");
        let mut l = b"abc".to_vec();
        trim_eol(&mut l);
        assert_eq!(l, b"abc");
    }
}
