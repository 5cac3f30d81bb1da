//! Helpers of the security tests (issue 18): librdkafka's view of an authentication
//! failure, topic creation through an admin client with security settings, the broker's
//! counters, and kafka-python's secure client script.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};

use super::Broker;
use super::kafka::client_config;

/// What librdkafka reported through its error callback (authentication failures arrive
/// there; the admin call itself only times out).
#[derive(Clone, Default)]
pub struct Errors(pub Arc<Mutex<Vec<String>>>);

impl ClientContext for Errors {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0.lock().unwrap().push(format!("{error}: {reason}"));
    }
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        self.0.lock().unwrap().push(format!("{fac}: {message}"));
    }
}

impl rdkafka::producer::ProducerContext for Errors {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

/// What librdkafka reports while it tries to connect with these settings (its error
/// callback and log), polled for up to 10 s until an authentication error shows.
pub fn client_errors(bootstrap: &str, settings: &[(&str, &str)]) -> Vec<String> {
    let errors = Errors::default();
    let p: BaseProducer<Errors> = client_config(bootstrap, settings)
        .set_log_level(rdkafka::config::RDKafkaLogLevel::Warning)
        .create_with_context(errors.clone())
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let _ = p.client().fetch_metadata(None, Duration::from_millis(500));
        p.poll(Duration::from_millis(100));
        if errors
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.contains("uthenticat"))
        {
            break;
        }
    }
    errors.0.lock().unwrap().clone()
}

/// Creates a topic; on failure, the admin error and what the error callback saw.
pub fn try_create_topic(
    bootstrap: &str,
    settings: &[(&str, &str)],
    name: &str,
) -> Result<(), String> {
    let errors = Errors::default();
    let admin: AdminClient<Errors> = client_config(bootstrap, settings)
        .create_with_context(errors.clone())
        .map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(8)));
    match rt
        .block_on(admin.create_topics(&[NewTopic::new(name, 2, TopicReplication::Fixed(1))], &opts))
    {
        Ok(results) => results
            .into_iter()
            .try_for_each(|r| r.map(|_| ()).map_err(|(t, e)| format!("{t}: {e}"))),
        Err(e) => Err(e.to_string()),
    }
    .map_err(|e| format!("{e}; client errors: {:?}", errors.0.lock().unwrap()))
}

/// librdkafka settings as `(&str, &str)` pairs.
pub fn refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The sum of a counter's series in the broker's /metrics.
pub fn metric_sum(b: &Broker, name: &str) -> f64 {
    b.http_get("/metrics")
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Runs `tests/python/secure_client.py` (admin, produce, group consume; or, with
/// `expect_failure`, an authentication failure) and fails the test if it fails.
pub fn python(bootstrap: &str, topic: &str, security: &serde_json::Value, expect_failure: bool) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/secure_client.py");
    let mut cmd = Command::new("python3");
    cmd.args([script, bootstrap, topic, &security.to_string()]);
    if expect_failure {
        cmd.arg("expect-failure");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "kafka-python ({security}):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `strata ARGS --bootstrap ADDR --command-config CONFIG`; its standard output.
pub fn run(addr: &str, config: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(super::strata_bin())
        .args(args)
        .args(["--bootstrap", addr, "--command-config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "strata {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A broker with one SASL_PLAINTEXT listener, the authorizer on, and `admin` (SCRAM,
/// password `admin-secret`) its first user and super user.
pub const SASL_AUTHORIZER: &[&str] = &[
    "--listeners",
    "SASL_PLAINTEXT://127.0.0.1:0",
    "--sasl-mechanisms",
    "SCRAM-SHA-512,PLAIN",
    "--bootstrap-user",
    "admin:admin-secret",
    "--authorizer",
    "on",
    "--super-users",
    "User:admin",
];

/// With [`SASL_AUTHORIZER`]: the broker's own Kafka clients (the gateway's) connect to
/// that listener as `admin`.
pub const INTER_BROKER_ADMIN: &[&str] = &[
    "--inter-broker-listener-name",
    "SASL_PLAINTEXT",
    "--inter-broker-user",
    "admin:admin-secret",
];

/// Writes `DIR/admin.properties`, the `--command-config` of `admin` over SASL_PLAINTEXT
/// (for [`run`]); its path.
pub fn admin_properties(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("admin.properties");
    std::fs::write(
        &path,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=admin-secret\n",
    )
    .unwrap();
    path
}
