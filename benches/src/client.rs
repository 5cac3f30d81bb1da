//! What every Kafka client of the load generator shares: librdkafka's configuration from
//! the broker flags, a quiet log, the topic's partition count and the progress bar.

use std::sync::Mutex;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::BrokerArgs;

/// Keeps librdkafka's log out of the report unless it is an error, and remembers the last
/// global error to explain a stall.
#[derive(Debug, Default)]
pub(crate) struct Quiet {
    last_error: Mutex<Option<String>>,
}

impl Quiet {
    pub(crate) fn last_error(&self) -> String {
        self.last_error
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_else(|| "none reported".into())
    }
}

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Error as i32) {
            eprintln!("librdkafka {fac}: {log_message}");
        }
    }
    fn error(&self, error: KafkaError, reason: &str) {
        if let Ok(mut g) = self.last_error.lock() {
            *g = Some(format!("{error}: {reason}"));
        }
    }
}

impl ConsumerContext for Quiet {}

/// `ClientContext` for a context whose `quiet` field, a [`Quiet`], takes librdkafka's log
/// and errors.
macro_rules! quiet_client_context {
    ($context:ty) => {
        impl rdkafka::client::ClientContext for $context {
            fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
                <$crate::client::Quiet as rdkafka::client::ClientContext>::log(
                    &self.quiet,
                    level,
                    fac,
                    log_message,
                );
            }
            fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
                <$crate::client::Quiet as rdkafka::client::ClientContext>::error(
                    &self.quiet,
                    error,
                    reason,
                );
            }
        }
    };
}
pub(crate) use quiet_client_context;

pub(crate) fn base_config(b: &BrokerArgs) -> ClientConfig {
    let mut c = ClientConfig::new();
    let ms = b.timeout.as_millis().to_string();
    c.set("bootstrap.servers", &b.bootstrap)
        .set("client.id", "strata-benches")
        .set("socket.timeout.ms", &ms)
        .set("socket.connection.setup.timeout.ms", &ms)
        .set_log_level(RDKafkaLogLevel::Error);
    for (k, v) in &b.client_properties {
        c.set(k, v);
    }
    c
}

/// The topic's partition count, or an error that says what to check.
pub(crate) fn partitions<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    b: &BrokerArgs,
) -> anyhow::Result<i32> {
    let md = client
        .fetch_metadata(Some(&b.topic), b.timeout)
        .with_context(|| {
            format!(
                "no metadata from {} within {:?}: is the broker running there (--bootstrap)?",
                b.bootstrap, b.timeout
            )
        })?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == b.topic)
        .with_context(|| format!("--topic {}: no metadata", b.topic))?;
    if let Some(e) = t.error() {
        bail!(
            "--topic {}: {} (create it first, e.g. `strata topic create {} --partitions 8`)",
            b.topic,
            RDKafkaErrorCode::from(e),
            b.topic
        );
    }
    Ok(t.partitions().len() as i32)
}

pub(crate) fn progress(b: &BrokerArgs, len: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(len),
        if b.no_progress {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(4)
        },
    );
    let template = format!("{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
