//! SASL end to end (issue 18): SCRAM-SHA-512/256 and PLAIN over SASL_SSL, OAUTHBEARER over
//! SASL_PLAINTEXT (unsigned tokens, and tokens signed by a key in a JWKS file), with
//! librdkafka and kafka-python against the real `strata` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::Broker;
use common::kafka::{client_config, flush};
use common::pki::Pki;
use common::secure::{client_errors, metric_sum, python, try_create_topic};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

/// Produces `n` records and reads them back as a member of `group`.
fn round_trip(bootstrap: &str, settings: &[(&str, &str)], topic: &str, group: &str, n: usize) {
    try_create_topic(bootstrap, settings, topic).unwrap();
    let producer: BaseProducer = client_config(bootstrap, settings)
        .set("acks", "all")
        .create()
        .unwrap();
    for i in 0..n {
        let v = format!("v{i}");
        producer
            .send(BaseRecord::to(topic).key(&v).payload(&v))
            .unwrap();
    }
    flush(&producer);
    let c: BaseConsumer = client_config(bootstrap, settings)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut got = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while got.len() < n && std::time::Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                got.insert(m.payload().unwrap().to_vec());
            }
            Some(Err(e)) => panic!("consume error: {e}"),
            None => {}
        }
    }
    assert_eq!(got.len(), n, "every record once");
    c.commit_consumer_state(CommitMode::Sync).unwrap();
}

/// A broker with a SASL_SSL listener offering SCRAM and PLAIN, and a first user.
fn scram_broker(dir: &std::path::Path) -> (Broker, Pki) {
    let pki = Pki::new(dir, "cluster");
    let server = pki.server("server");
    let broker = Broker::start(
        &dir.join("data"),
        &[
            "--listeners",
            "SASL_SSL://127.0.0.1:0",
            "--tls-cert",
            server.cert.to_str().unwrap(),
            "--tls-key",
            server.key.to_str().unwrap(),
            "--sasl-mechanisms",
            "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            "--bootstrap-user",
            "admin:admin-secret",
        ],
    );
    (broker, pki)
}

#[test]
fn scram_over_sasl_ssl_with_librdkafka_and_a_wrong_password_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, pki) = scram_broker(dir.path());
    let addr = broker.listener("SASL_SSL");
    let ca = pki.ca().display().to_string();
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] {
        let good = [
            ("security.protocol", "sasl_ssl"),
            ("ssl.ca.location", ca.as_str()),
            ("sasl.mechanisms", mechanism),
            ("sasl.username", "admin"),
            ("sasl.password", "admin-secret"),
        ];
        let topic = format!("scram-{}", mechanism.to_lowercase());
        round_trip(&addr, &good, &topic, &format!("{topic}-g"), 50);

        let bad = [
            ("security.protocol", "sasl_ssl"),
            ("ssl.ca.location", ca.as_str()),
            ("sasl.mechanisms", mechanism),
            ("sasl.username", "admin"),
            ("sasl.password", "wrong"),
        ];
        assert!(try_create_topic(&addr, &bad, "never").is_err());
        let seen = client_errors(&addr, &bad);
        assert!(
            seen.iter().any(|e| e.contains(&format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
            ))),
            "{mechanism}: {seen:?}"
        );
    }
    // Nobody who failed got anywhere, and the failures are counted.
    assert!(metric_sum(&broker, "strata_authentication_failures_total") >= 3.0);
    // The bootstrap user survives a restart unchanged (not recreated).
    let ok = [
        ("security.protocol", "sasl_ssl"),
        ("ssl.ca.location", ca.as_str()),
        ("sasl.mechanisms", "SCRAM-SHA-512"),
        ("sasl.username", "admin"),
        ("sasl.password", "admin-secret"),
    ];
    try_create_topic(&addr, &ok, "after-failures").unwrap();
}

#[test]
fn an_unauthenticated_request_on_a_sasl_listener_closes_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, pki) = scram_broker(dir.path());
    let addr = broker.listener("SASL_SSL");
    // A client that speaks TLS but skips SASL: librdkafka with security.protocol=ssl.
    let ca = pki.ca().display().to_string();
    let s = [
        ("security.protocol", "ssl"),
        ("ssl.ca.location", ca.as_str()),
    ];
    assert!(try_create_topic(&addr, &s, "never").is_err());
    // The broker is fine.
    let ok = [
        ("security.protocol", "sasl_ssl"),
        ("ssl.ca.location", ca.as_str()),
        ("sasl.mechanisms", "SCRAM-SHA-256"),
        ("sasl.username", "admin"),
        ("sasl.password", "admin-secret"),
    ];
    try_create_topic(&addr, &ok, "fine").unwrap();
}

#[test]
fn kafka_python_over_sasl_ssl_with_scram() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, pki) = scram_broker(dir.path());
    let addr = broker.listener("SASL_SSL");
    let security = |password: &str| {
        serde_json::json!({
            "security_protocol": "SASL_SSL",
            "ssl_cafile": pki.ca(),
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin",
            "sasl_plain_password": password,
        })
    };
    python(&addr, "py-scram", &security("admin-secret"), false);
    python(&addr, "py-never", &security("wrong"), true);
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An unsigned (alg none) JWT.
fn unsigned_token(sub: &str, exp: u64) -> String {
    let header = b64url(br#"{"alg":"none"}"#);
    let claims = b64url(
        serde_json::json!({"sub": sub, "exp": exp, "iat": now_secs()})
            .to_string()
            .as_bytes(),
    );
    format!("{header}.{claims}.")
}

#[test]
fn oauthbearer_unsecured_tokens_with_librdkafka_and_kafka_python_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        &dir.path().join("data"),
        &[
            "--listeners",
            "SASL_PLAINTEXT://127.0.0.1:0",
            "--sasl-mechanisms",
            "OAUTHBEARER",
            "--oauthbearer-unsecured",
            "true",
        ],
    );
    let addr = broker.listener("SASL_PLAINTEXT");
    // librdkafka's own unsecured JWT builder.
    let s = [
        ("security.protocol", "sasl_plaintext"),
        ("sasl.mechanisms", "OAUTHBEARER"),
        ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
        ("sasl.oauthbearer.config", "principal=alice"),
    ];
    round_trip(&addr, &s, "oauth-rd", "oauth-rd-g", 40);

    let fresh = unsigned_token("bob", now_secs() + 600);
    python(
        &addr,
        "py-oauth",
        &serde_json::json!({
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "oauth_token": fresh,
        }),
        false,
    );
    // An expired token is refused with the client's authentication error.
    let expired = unsigned_token("bob", now_secs() - 3600);
    python(
        &addr,
        "py-never",
        &serde_json::json!({
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "oauth_token": expired,
        }),
        true,
    );
    assert!(metric_sum(&broker, "strata_authentication_failures_total") >= 1.0);
}

#[test]
fn oauthbearer_tokens_are_checked_against_the_jwks_signing_key() {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let rng = SystemRandom::new();
    let key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
    let point = key.public_key().as_ref().to_vec();
    assert_eq!(point.len(), 65, "an uncompressed P-256 point");
    let jwks = serde_json::json!({"keys": [{
        "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
        "x": b64url(&point[1..33]), "y": b64url(&point[33..]),
    }]});
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks.to_string()).unwrap();
    let sign = |key: &EcdsaKeyPair, sub: &str, iss: &str| {
        let header = b64url(br#"{"alg":"ES256","typ":"JWT","kid":"k1"}"#);
        let claims = b64url(
            serde_json::json!({"sub": sub, "iss": iss, "exp": now_secs() + 600})
                .to_string()
                .as_bytes(),
        );
        let input = format!("{header}.{claims}");
        let sig = key.sign(&rng, input.as_bytes()).unwrap();
        format!("{input}.{}", b64url(sig.as_ref()))
    };
    let broker = Broker::start(
        &dir.path().join("data"),
        &[
            "--listeners",
            "SASL_PLAINTEXT://127.0.0.1:0",
            "--sasl-mechanisms",
            "OAUTHBEARER",
            "--oauthbearer-jwks",
            jwks_path.to_str().unwrap(),
            "--oauthbearer-expected-issuer",
            "https://issuer.test",
        ],
    );
    let addr = broker.listener("SASL_PLAINTEXT");
    let with = |token: String| {
        serde_json::json!({
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "oauth_token": token,
        })
    };
    python(
        &addr,
        "py-jwks",
        &with(sign(&key, "carol", "https://issuer.test")),
        false,
    );
    // Signed by another key, from another issuer, or not signed at all: refused.
    let other = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
    python(
        &addr,
        "n1",
        &with(sign(&other, "carol", "https://issuer.test")),
        true,
    );
    python(
        &addr,
        "n2",
        &with(sign(&key, "carol", "https://elsewhere.test")),
        true,
    );
    python(
        &addr,
        "n3",
        &with(unsigned_token("carol", now_secs() + 600)),
        true,
    );
}

#[test]
fn sessions_end_at_connections_max_reauth_unless_the_client_reauthenticates() {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        &dir.path().join("data"),
        &[
            "--listeners",
            "SASL_PLAINTEXT://127.0.0.1:0",
            "--sasl-mechanisms",
            "SCRAM-SHA-512,PLAIN",
            "--bootstrap-user",
            "admin:admin-secret",
            "--connections-max-reauth",
            "2s",
        ],
    );
    let addr = broker.listener("SASL_PLAINTEXT");
    // librdkafka re-authenticates on its own (KIP-368): a producer running past several
    // session lifetimes never fails.
    let s = [
        ("security.protocol", "sasl_plaintext"),
        ("sasl.mechanisms", "SCRAM-SHA-512"),
        ("sasl.username", "admin"),
        ("sasl.password", "admin-secret"),
    ];
    try_create_topic(&addr, &s, "reauth").unwrap();
    let p: BaseProducer = client_config(&addr, &s).create().unwrap();
    let start = std::time::Instant::now();
    let mut n = 0;
    while start.elapsed() < Duration::from_secs(7) {
        p.send(BaseRecord::to("reauth").key("k").payload("v"))
            .unwrap();
        n += 1;
        p.poll(Duration::from_millis(50));
    }
    assert_eq!(p.flush(Duration::from_secs(10)).map(|()| n), Ok(n));
    let metrics = broker.http_get("/metrics");
    let auths: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("strata_sasl_authentications_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        auths >= 4.0,
        "librdkafka re-authenticated ({auths} authentications)"
    );

    // A client that does not re-authenticate is closed at its first request after the
    // session's end.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let security = strata_client::ClientSecurity {
            tls: None,
            sasl: Some(strata_client::SaslLogin {
                mechanism: strata_auth::Mechanism::Plain,
                username: "admin".into(),
                password: "admin-secret".into(),
            }),
        };
        let mut conn = strata_client::KafkaConnection::connect_with(
            &addr,
            "no-reauth",
            Duration::from_secs(5),
            &security,
        )
        .await
        .unwrap();
        let req = MetadataRequest::default();
        let first: Result<MetadataResponse, _> = conn
            .call(ApiKey::Metadata, 9, &req, Duration::from_secs(5))
            .await;
        assert!(first.is_ok(), "{first:?}");
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let after: Result<MetadataResponse, _> = conn
            .call(ApiKey::Metadata, 9, &req, Duration::from_secs(5))
            .await;
        assert!(after.is_err(), "the expired session was still served");
    });
}
