//! Security end to end (issue 18): TLS listeners with client certificates, as librdkafka
//! and kafka-python use them, against the real `strata` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::Broker;
use common::kafka::{client_config, flush};
use common::pki::{Issued, Pki};
use common::secure::{metric_sum, refs, try_create_topic};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord};

/// librdkafka's settings for an SSL connection trusting `ca`, with a client certificate.
fn ssl_settings(ca: &std::path::Path, client: Option<&Issued>) -> Vec<(String, String)> {
    let mut v = vec![
        ("security.protocol".to_string(), "ssl".to_string()),
        ("ssl.ca.location".to_string(), ca.display().to_string()),
        // The broker's certificate names 127.0.0.1 and localhost.
        (
            "ssl.endpoint.identification.algorithm".to_string(),
            "https".to_string(),
        ),
    ];
    if let Some(c) = client {
        v.push((
            "ssl.certificate.location".into(),
            c.cert.display().to_string(),
        ));
        v.push(("ssl.key.location".into(), c.key.display().to_string()));
    }
    v
}

fn ssl_broker(dir: &std::path::Path, pki: &Pki, server: &Issued, extra: &[&str]) -> Broker {
    let mut args = vec![
        "--listeners".to_string(),
        "SSL://127.0.0.1:0".to_string(),
        "--tls-cert".to_string(),
        server.cert.display().to_string(),
        "--tls-key".to_string(),
        server.key.display().to_string(),
        "--tls-client-ca".to_string(),
        pki.ca().display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Broker::start(&dir.join("data"), &args)
}

/// Reads `n` records of `topic` as a member of `group`, then commits.
fn consume_group(
    bootstrap: &str,
    settings: &[(&str, &str)],
    topic: &str,
    group: &str,
    n: usize,
) -> Vec<String> {
    let c: BaseConsumer = client_config(bootstrap, settings)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while out.len() < n && std::time::Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap()),
            Some(Err(e)) => panic!("consume error: {e}"),
            None => {}
        }
    }
    c.commit_consumer_state(CommitMode::Sync).unwrap();
    out
}

#[test]
fn ssl_with_client_certificates_produces_consumes_and_administers() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let server = pki.server("server");
    let alice = pki.client("alice", "alice", "eng");
    let broker = ssl_broker(
        dir.path(),
        &pki,
        &server,
        &[
            "--ssl-principal-mapping-rules",
            "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        ],
    );
    let ssl = broker.listener("SSL");
    let settings = ssl_settings(&pki.ca(), Some(&alice));
    let settings = refs(&settings);

    // Only the SSL address is given: every further connection uses what Metadata
    // advertises for the SSL listener, so a wrong answer (the PLAINTEXT port) fails here.
    try_create_topic(&ssl, &settings, "tls-orders").unwrap();
    let producer: BaseProducer = client_config(&ssl, &settings)
        .set("acks", "all")
        .create()
        .unwrap();
    for i in 0..100 {
        let v = format!("v{i}");
        producer
            .send(BaseRecord::to("tls-orders").key(&v).payload(&v))
            .unwrap();
    }
    flush(&producer);
    let mut values = consume_group(&ssl, &settings, "tls-orders", "tls-group", 100);
    values.sort();
    values.dedup();
    assert_eq!(values.len(), 100, "every record once over TLS");
}

#[test]
fn an_untrusted_certificate_is_refused_and_the_broker_stays_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let rogue = Pki::new(dir.path(), "rogue");
    let server = pki.server("server");
    let broker = ssl_broker(dir.path(), &pki, &server, &[]);
    let ssl = broker.listener("SSL");

    // A client certificate from another CA, and none at all: both refused.
    let mallory = rogue.client("mallory", "mallory", "eng");
    for client in [Some(&mallory), None] {
        let s = ssl_settings(&pki.ca(), client);
        let e = try_create_topic(&ssl, &refs(&s), "never").unwrap_err();
        assert!(!e.is_empty());
    }
    // A client that does not trust the broker's CA gives up on its own.
    let alice = pki.client("alice", "alice", "eng");
    let s = ssl_settings(&rogue.ca(), Some(&alice));
    assert!(try_create_topic(&ssl, &refs(&s), "never").is_err());
    assert!(
        metric_sum(&broker, "strata_authentication_failures_total") >= 2.0,
        "the refusals are counted"
    );

    // Still serving: the right certificate works.
    let s = ssl_settings(&pki.ca(), Some(&alice));
    try_create_topic(&ssl, &refs(&s), "after-refusals").unwrap();
}

#[test]
fn a_replaced_certificate_is_served_after_sighup_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let old_ca = Pki::new(dir.path(), "old");
    let new_ca = Pki::new(dir.path(), "new");
    // Client certificates are not asked for here: the test is about what the server
    // presents.
    let server = old_ca.server("server");
    let broker = Broker::start(
        &dir.path().join("data"),
        &[
            "--listeners",
            "SSL://127.0.0.1:0",
            "--tls-cert",
            server.cert.to_str().unwrap(),
            "--tls-key",
            server.key.to_str().unwrap(),
        ],
    );
    let ssl = broker.listener("SSL");
    let trusts_new = ssl_settings(&new_ca.ca(), None);
    let trusts_old = ssl_settings(&old_ca.ca(), None);
    assert!(try_create_topic(&ssl, &refs(&trusts_new), "before").is_err());
    try_create_topic(&ssl, &refs(&trusts_old), "old-ok").unwrap();

    // The operator replaces the files (same paths) and sends SIGHUP.
    let replaced = new_ca.server("server");
    assert_eq!(replaced.cert, server.cert);
    let pid = broker.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match try_create_topic(&ssl, &refs(&trusts_new), "new-ok") {
            Ok(()) => break,
            Err(e) if std::time::Instant::now() > deadline => {
                panic!("the new certificate is not served: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    // Same process, no restart; the old chain is no longer served.
    assert!(broker.child.id().to_string() == pid);
    assert!(try_create_topic(&ssl, &refs(&trusts_old), "old-again").is_err());
}

#[test]
fn kafka_python_over_ssl_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let server = pki.server("server");
    let alice = pki.client("alice", "alice", "eng");
    let broker = ssl_broker(dir.path(), &pki, &server, &[]);
    let ssl = broker.listener("SSL");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/secure_client.py");
    let good = serde_json::json!({
        "security_protocol": "SSL",
        "ssl_cafile": pki.ca(),
        "ssl_certfile": alice.cert,
        "ssl_keyfile": alice.key,
    });
    let out = Command::new("python3")
        .args([script, &ssl, "py-tls", &good.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kafka-python over SSL failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("kafka-python OK"), "{stdout}");

    // Without a client certificate: refused.
    let rogue = Pki::new(dir.path(), "rogue");
    let mallory = rogue.client("mallory", "mallory", "eng");
    let bad = serde_json::json!({
        "security_protocol": "SSL",
        "ssl_cafile": pki.ca(),
        "ssl_certfile": mallory.cert,
        "ssl_keyfile": mallory.key,
    });
    let out = Command::new("python3")
        .args([script, &ssl, "py-never", &bad.to_string(), "expect-failure"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_http_address_serves_tls_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let server = pki.server("server");
    let broker = Broker::start(
        &dir.path().join("data"),
        &[
            "--http-tls",
            "true",
            "--tls-cert",
            server.cert.to_str().unwrap(),
            "--tls-key",
            server.key.to_str().unwrap(),
        ],
    );
    let port = broker.http.rsplit(':').next().unwrap().to_string();
    let curl = |args: &[&str]| {
        Command::new("curl")
            .args(["-sS", "--max-time", "10"])
            .args(args)
            .output()
            .unwrap()
    };
    // Trusting the CA, over https: served.
    let ok = curl(&[
        "--cacert",
        pki.ca().to_str().unwrap(),
        &format!("https://127.0.0.1:{port}/healthz"),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // Plain HTTP to the TLS port gets no page, and an untrusting client refuses it.
    let plain = curl(&[&format!("http://127.0.0.1:{port}/healthz")]);
    assert!(!plain.status.success() || plain.stdout.is_empty());
    let untrusting = curl(&[&format!("https://127.0.0.1:{port}/healthz")]);
    assert!(!untrusting.status.success());
}

#[test]
fn bad_security_flags_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let server = pki.server("server");
    let (cert, key, ca) = (
        server.cert.to_str().unwrap(),
        server.key.to_str().unwrap(),
        pki.ca(),
    );
    let ca = ca.to_str().unwrap();
    let tls = ["--tls-cert", cert, "--tls-key", key];
    for (extra, want) in [
        (
            vec![
                "--http-tls",
                "true",
                "--tls-client-ca",
                ca,
                "--http-client-auth",
                "bogus",
            ],
            "--http-client-auth 'bogus': use required, requested or none",
        ),
        (
            vec![
                "--listeners",
                "SSL://127.0.0.1:0",
                "--tls-client-ca",
                ca,
                "--tls-client-auth",
                "maybe",
            ],
            "--tls-client-auth 'maybe'",
        ),
        (
            vec![
                "--listeners",
                "SSL://127.0.0.1:0",
                "--tls-client-ca",
                ca,
                "--http-client-auth",
                "required",
            ],
            "--http-client-auth required needs --http-tls true",
        ),
        (
            vec!["--http-tls", "true", "--http-client-auth", "requested"],
            "--http-client-auth requested needs --tls-client-ca FILE",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["serve", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--kafka-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(tls)
            .args(&extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        assert!(stderr.contains(want), "{extra:?}: {stderr}");
    }
}
