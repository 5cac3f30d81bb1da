//! What the Kafka client subcommands (topic, produce, consume) share: the `--bootstrap` and
//! `--timeout` flags, the librdkafka settings derived from them, and errors that say what
//! to check when the broker cannot be reached.
//!
//! These commands speak only the Kafka protocol (through librdkafka), so they work against
//! any Kafka broker, not just Strata.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use rdkafka::client::{Client, ClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::metadata::Metadata;

/// Flags every client subcommand takes.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// The broker(s) to bootstrap from: HOST:PORT[,HOST:PORT...]
    #[arg(
        long,
        global = true,
        env = "STRATA_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        value_name = "HOST:PORT",
        value_parser = parse_bootstrap
    )]
    pub bootstrap: String,
    /// How long to wait for the broker (connect, metadata, admin requests, delivery of a record)
    /// before giving up, e.g. 10s or 500ms.
    #[arg(
        long,
        global = true,
        env = "STRATA_TIMEOUT",
        default_value = "10s",
        value_name = "DURATION",
        value_parser = parse_timeout
    )]
    pub timeout: Duration,
    /// A file of client properties, KEY=VALUE per line, as Kafka's tools take with
    /// --command-config: security.protocol, sasl.mechanism, sasl.username,
    /// sasl.password, ssl.ca.location, ssl.certificate.location, ssl.key.location (any
    /// other librdkafka setting is passed through too)
    #[arg(
        long,
        global = true,
        env = "STRATA_COMMAND_CONFIG",
        value_name = "FILE",
        value_parser = read_properties
    )]
    pub command_config: Option<Properties>,
}

/// Client properties from --command-config.
#[derive(Debug, Clone, Default)]
pub struct Properties(pub Vec<(String, String)>);

impl Properties {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads a Java-style properties file: KEY=VALUE lines, `#` and `!` comments.
fn read_properties(path: &str) -> Result<Properties, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| format!("{path} line {}: '{line}' is not KEY=VALUE", n + 1))?;
        let k = k.trim();
        // Kafka's tools name it sasl.mechanism, librdkafka sasl.mechanisms: take both.
        let k = if k == "sasl.mechanism" {
            "sasl.mechanisms"
        } else {
            k
        };
        out.push((k.to_string(), v.trim().to_string()));
    }
    Ok(Properties(out))
}

fn parse_bootstrap(v: &str) -> Result<String, String> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (host, port) = part
            .rsplit_once(':')
            .ok_or_else(|| format!("'{part}' must be HOST:PORT"))?;
        if host.trim_matches(['[', ']']).is_empty() {
            return Err(format!("'{part}' has no host"));
        }
        port.parse::<u16>()
            .map_err(|_| format!("'{part}': '{port}' is not a port number"))?;
        out.push(part);
    }
    if out.is_empty() {
        return Err("give at least one HOST:PORT".into());
    }
    Ok(out.join(","))
}

fn parse_timeout(v: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(v)
        .map_err(|e| format!("{e}: expected a duration such as 10s or 500ms"))?;
    if d < Duration::from_millis(10) {
        return Err("must be at least 10ms".into());
    }
    Ok(d)
}

/// Parses KEY=VALUE (for --config and --set).
pub fn parse_key_value(v: &str) -> Result<(String, String), String> {
    let (k, val) = v
        .split_once('=')
        .ok_or_else(|| format!("'{v}' must be KEY=VALUE"))?;
    if k.trim().is_empty() {
        return Err(format!("'{v}' has an empty key"));
    }
    Ok((k.trim().to_string(), val.to_string()))
}

impl ClientArgs {
    fn timeout_ms(&self) -> String {
        self.timeout.as_millis().to_string()
    }

    /// librdkafka settings common to the admin client, producer and consumer. Every wait is
    /// bounded by --timeout so an unreachable or silent broker gives an error, never a hang.
    pub fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("client.id", "strata-cli")
            .set("socket.timeout.ms", self.timeout_ms())
            .set("socket.connection.setup.timeout.ms", self.timeout_ms())
            // Errors reach the user through our own messages; librdkafka's chatter goes to
            // the debug log (STRATA_LOG=debug).
            .set_log_level(RDKafkaLogLevel::Warning);
        if let Some(p) = &self.command_config {
            for (k, v) in &p.0 {
                c.set(k, v);
            }
        }
        c
    }

    /// The --command-config properties (none when not given).
    pub fn properties(&self) -> Properties {
        self.command_config.clone().unwrap_or_default()
    }

    /// What to say when the broker does not answer.
    pub fn what_to_check(&self) -> String {
        format!(
            "check that a Kafka broker (`strata serve`) is running at {} (--bootstrap or STRATA_BOOTSTRAP) \
             and that the address it advertises is reachable from here",
            self.bootstrap
        )
    }

    /// Fails fast, with a message that says what to check, when nothing listens at any of the
    /// bootstrap addresses. librdkafka itself would keep reconnecting until our timeouts
    /// expire; a plain TCP connect tells a refused connection apart in milliseconds.
    pub fn check_reachable(&self) -> anyhow::Result<()> {
        let connect_timeout = self.timeout.min(Duration::from_secs(5));
        let mut errors = Vec::new();
        for part in self.bootstrap.split(',') {
            let addrs = match part.to_socket_addrs() {
                Ok(a) => a.collect::<Vec<_>>(),
                Err(e) => {
                    errors.push(format!("{part}: cannot resolve the host: {e}"));
                    continue;
                }
            };
            for addr in addrs {
                match TcpStream::connect_timeout(&addr, connect_timeout) {
                    Ok(_) => return Ok(()),
                    Err(e) => errors.push(format!("{addr}: {e}")),
                }
            }
        }
        bail!(
            "cannot reach a broker ({}): {}",
            errors.join("; "),
            self.what_to_check()
        )
    }

    /// Cluster metadata (all topics, or one), with an error that says what to check.
    pub fn metadata<C: ClientContext>(
        &self,
        client: &Client<C>,
        topic: Option<&str>,
    ) -> anyhow::Result<Metadata> {
        client
            .fetch_metadata(topic, self.timeout)
            .map_err(|e| self.explain(e, "metadata"))
    }

    /// Wraps a librdkafka error from a request to the broker with what to check.
    pub fn explain(&self, e: KafkaError, what: &str) -> anyhow::Error {
        use rdkafka::types::RDKafkaErrorCode as E;
        // Kafka errors carry their code in their text; chaining the source would repeat it.
        match e.rdkafka_error_code() {
            Some(
                code @ (E::OperationTimedOut
                | E::RequestTimedOut
                | E::BrokerTransportFailure
                | E::AllBrokersDown
                | E::Resolve),
            ) => anyhow::anyhow!(
                "no answer to the {what} request within {} (--timeout; {code}): {}",
                humantime::format_duration(self.timeout),
                self.what_to_check()
            ),
            _ => anyhow::anyhow!("{what} request to {} failed: {e}", self.bootstrap),
        }
    }
}

/// A librdkafka client context that sends librdkafka's log to our tracing log at debug
/// level and remembers the last global error (for example "1/1 brokers are down"), so a
/// failure can be explained with it.
#[derive(Debug, Default)]
pub struct CliContext {
    last_error: Mutex<Option<String>>,
}

impl CliContext {
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|g| g.clone())
    }
}

impl ClientContext for CliContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        tracing::debug!(?level, facility = fac, "librdkafka: {log_message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(%error, "librdkafka error: {reason}");
        if let Ok(mut g) = self.last_error.lock() {
            *g = Some(format!("{error}: {reason}"));
        }
    }
}

impl ConsumerContext for CliContext {}

/// Creates an admin client.
pub fn admin(args: &ClientArgs) -> anyhow::Result<rdkafka::admin::AdminClient<CliContext>> {
    args.check_reachable()?;
    args.config()
        .create_with_context(CliContext::default())
        .context("cannot create the Kafka admin client")
}

/// Admin request options bounded by --timeout.
pub fn admin_options(args: &ClientArgs) -> rdkafka::admin::AdminOptions {
    rdkafka::admin::AdminOptions::new()
        .request_timeout(Some(args.timeout))
        .operation_timeout(Some(args.timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_and_key_values_are_checked() {
        assert_eq!(parse_bootstrap("a:1, b:2").as_deref(), Ok("a:1,b:2"));
        assert!(
            parse_bootstrap("localhost")
                .unwrap_err()
                .contains("HOST:PORT")
        );
        assert!(parse_bootstrap("h:x").unwrap_err().contains("port"));
        assert!(parse_bootstrap(":9092").unwrap_err().contains("no host"));
        assert_eq!(
            parse_key_value("a.b=c=d"),
            Ok(("a.b".to_string(), "c=d".to_string()))
        );
        assert!(parse_key_value("novalue").is_err());
        assert!(parse_timeout("soon").is_err());
        assert_eq!(parse_timeout("2s"), Ok(Duration::from_secs(2)));
    }
}
