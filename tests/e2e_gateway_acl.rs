//! The REST gateway under the broker's ACLs (issue 18): `--http-auth` identities map to
//! Kafka principals, and every REST call asks the broker's authorizer what a Kafka
//! client doing the same would be asked. ACLs are made with `strata acl add` by a SCRAM
//! super user, as in e2e_acl.rs; the HTTP side is a real client (reqwest).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::secure::{INTER_BROKER_ADMIN, SASL_AUTHORIZER, admin_properties, run};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use common::Broker;
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::{Value, json};

const JSON_V2: &str = "application/vnd.kafka.json.v2+json";
const V2: &str = "application/vnd.kafka.v2+json";

/// Who calls: a basic identity, a bearer token, or nobody.
#[derive(Clone, Copy)]
enum Who {
    Basic(&'static str, &'static str),
    Bearer(&'static str),
    Nobody,
}

const ALICE: Who = Who::Basic("alice", "alice-pw");
const BOB: Who = Who::Basic("bob", "bob-pw");
const SVC: Who = Who::Bearer("svc-token");

/// A broker with SASL, the authorizer on, `admin` its super user, and a gateway with
/// three identities: alice and bob (basic, as User:alice and User:bob) and a bearer
/// token mapped to User:svc. The gateway's own Kafka clients use the SASL listener as
/// admin.
struct Cluster {
    broker: Broker,
    addr: String,
    http: Client,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut args = [SASL_AUTHORIZER, INTER_BROKER_ADMIN].concat();
        args.extend([
            "--http-auth",
            "basic:alice:alice-pw,basic:bob:bob-pw,bearer:svc-token=User:svc",
        ]);
        let broker = Broker::start(&dir.path().join("data"), &args);
        let addr = broker.listener("SASL_PLAINTEXT");
        admin_properties(dir.path());
        let http = Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let c = Cluster {
            broker,
            addr,
            http,
            dir,
        };
        let t0 = Instant::now();
        while c.call(Who::Nobody, "GET", "/readyz", None).0 != 200 {
            assert!(t0.elapsed() < Duration::from_secs(30), "never ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    /// Runs `strata ARGS --bootstrap ADDR --command-config admin.properties`.
    fn admin(&self, args: &[&str]) -> String {
        run(&self.addr, &self.dir.path().join("admin.properties"), args)
    }

    /// `strata acl add --allow PRINCIPAL --operation OP RESOURCE...`.
    fn allow(&self, principal: &str, op: &str, resource: &[&str]) {
        let mut args = vec!["acl", "add", "--allow", principal, "--operation", op];
        args.extend_from_slice(resource);
        self.admin(&args);
    }

    fn request(&self, who: Who, method: &str, path: &str) -> RequestBuilder {
        let url = format!("http://{}{path}", self.broker.http);
        let r = self
            .http
            .request(method.parse().unwrap(), url)
            .header("Accept", V2);
        match who {
            Who::Basic(u, p) => r.basic_auth(u, Some(p)),
            Who::Bearer(t) => r.bearer_auth(t),
            Who::Nobody => r,
        }
    }

    /// The status and the body as JSON; `body` is sent with its content type.
    fn call(
        &self,
        who: Who,
        method: &str,
        path: &str,
        body: Option<(&str, Value)>,
    ) -> (u16, Value) {
        let mut r = self.request(who, method, path);
        if let Some((ct, b)) = body {
            r = r.header("Content-Type", ct).body(b.to_string());
        }
        answer(r.send().unwrap())
    }

    /// Calls until the status is `want` (ACLs reach the broker through the controller's
    /// metadata, a moment after `strata acl add` returns); the last answer.
    fn until(
        &self,
        want: u16,
        who: Who,
        method: &str,
        path: &str,
        body: Option<(&str, Value)>,
    ) -> Value {
        let t0 = Instant::now();
        loop {
            let (s, j) = self.call(who, method, path, body.clone());
            if s == want {
                return j;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{method} {path}: {s} {j}, want {want}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A call to the broker's schema registry (the same identities).
    fn registry(&self, who: Who, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("http://{}{path}", self.broker.registry);
        let mut r = self.http.request(method.parse().unwrap(), url);
        r = match who {
            Who::Basic(u, p) => r.basic_auth(u, Some(p)),
            Who::Bearer(t) => r.bearer_auth(t),
            Who::Nobody => r,
        };
        if let Some(b) = body {
            r = r
                .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .body(b.to_string());
        }
        answer(r.send().unwrap())
    }

    fn produce(&self, who: Who, topic: &str, value: Value) -> (u16, Value) {
        self.call(
            who,
            "POST",
            &format!("/topics/{topic}"),
            Some((JSON_V2, json!({"records": [{"value": value}]}))),
        )
    }

    fn cluster_id(&self) -> String {
        let (s, j) = self.call(ALICE, "GET", "/v3/clusters", None);
        assert_eq!(s, 200, "{j}");
        j["data"][0]["cluster_id"].as_str().unwrap().to_string()
    }

    /// The topics `who` sees in GET /topics, sorted.
    fn topics(&self, who: Who) -> Vec<String> {
        let (s, j) = self.call(who, "GET", "/topics", None);
        assert_eq!(s, 200, "{j}");
        let mut v: Vec<String> = serde_json::from_value(j).unwrap();
        v.sort();
        v
    }
}

fn answer(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().unwrap();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

/// A 403 in Confluent's shape (40301), naming `what`.
fn denied((status, j): (u16, Value), what: &str) {
    assert_eq!(
        (status, j["error_code"].as_u64()),
        (403, Some(40301)),
        "{j}"
    );
    let m = j["message"].as_str().unwrap();
    assert!(
        m.contains("Not authorized") || m.contains("authorization failed"),
        "{m}"
    );
    assert!(m.contains(what), "{what}: {m}");
}

#[test]
fn rest_calls_run_as_their_identitys_principal_under_the_brokers_acls() {
    let c = Cluster::start();
    for t in ["orders", "payroll"] {
        c.admin(&["topic", "create", t, "--partitions", "1"]);
    }
    let cluster = c.cluster_id();

    // Authentication first: no or wrong credentials are 401, whatever the ACLs.
    for who in [
        Who::Nobody,
        Who::Basic("alice", "bob-pw"),
        Who::Basic("mallory", "alice-pw"),
        Who::Bearer("alice-pw"),
    ] {
        let (s, j) = c.call(who, "GET", "/topics", None);
        assert_eq!((s, j["error_code"].as_u64()), (401, Some(40101)), "{j}");
    }
    // The three wrong credentials are audited and counted (a request without any is
    // not: browsers send one before they are asked).
    let failed = |mechanism: &str| {
        c.broker
            .http_get("/metrics")
            .lines()
            .filter(|l| {
                l.starts_with("strata_authentication_failures_total")
                    && l.contains("listener=\"HTTP\"")
                    && l.contains(&format!("mechanism=\"{mechanism}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert_eq!((failed("basic"), failed("bearer")), (2.0, 1.0));

    // No ACL yet: alice may do nothing and sees no topic.
    denied(c.produce(ALICE, "orders", json!(0)), "orders");
    assert!(c.topics(ALICE).is_empty());

    // alice may write orders: v2 and v3 (whole and streamed) produce to it, not to
    // payroll.
    c.allow("User:alice", "Write", &["--topic", "orders"]);
    c.until(
        200,
        ALICE,
        "POST",
        "/topics/orders",
        Some((JSON_V2, json!({"records": [{"value": 1}]}))),
    );
    let (s, j) = c.call(
        ALICE,
        "POST",
        "/topics/orders/partitions/0",
        Some((JSON_V2, json!({"records": [{"value": 2}]}))),
    );
    assert_eq!(s, 200, "{j}");
    let v3 = |who: Who, topic: &str| {
        c.call(
            who,
            "POST",
            &format!("/v3/clusters/{cluster}/topics/{topic}/records"),
            Some((
                "application/json",
                json!({"value": {"type": "JSON", "data": 3}}),
            )),
        )
    };
    let (s, j) = v3(ALICE, "orders");
    assert_eq!((s, j["offset"].as_i64()), (200, Some(2)), "{j}");
    denied(c.produce(ALICE, "payroll", json!(0)), "payroll");
    denied(v3(ALICE, "payroll"), "payroll");
    // A streamed (chunked) v3 body is refused before it starts.
    let chunks = chunked(r#"{"value":{"type":"JSON","data":4}}"#);
    let r = c
        .request(
            ALICE,
            "POST",
            &format!("/v3/clusters/{cluster}/topics/payroll/records"),
        )
        .header("Content-Type", "application/json")
        .body(chunks)
        .send()
        .unwrap();
    denied(answer(r), "payroll");
    // Describe comes with Write: alice sees orders, not payroll; GET of payroll is 403
    // as is GET of a topic that does not exist (authorization before existence).
    assert_eq!(c.topics(ALICE), ["orders"]);
    let (s, j) = c.call(ALICE, "GET", "/topics/orders", None);
    assert_eq!((s, j["name"].as_str()), (200, Some("orders")), "{j}");
    denied(c.call(ALICE, "GET", "/topics/payroll", None), "payroll");
    denied(
        c.call(ALICE, "GET", "/topics/nothing-here", None),
        "nothing-here",
    );

    // Without Read on orders alice cannot read it: not statelessly, not in a group.
    let read = "/topics/orders/partitions/0/records?offset=0";
    denied(c.call(ALICE, "GET", read, None), "orders");
    let create = || {
        c.call(
            ALICE,
            "POST",
            "/consumers/g-alice",
            Some((
                V2,
                json!({"name": "c1", "format": "json", "auto.offset.reset": "earliest"}),
            )),
        )
    };
    denied(create(), "g-alice");
    c.allow("User:alice", "Read", &["--group", "g-alice"]);
    c.until(
        200,
        ALICE,
        "POST",
        "/consumers/g-alice",
        Some((
            V2,
            json!({"name": "c1", "format": "json", "auto.offset.reset": "earliest"}),
        )),
    );
    let base = "/consumers/g-alice/instances/c1";
    let subscribe = |who: Who| {
        c.call(
            who,
            "POST",
            &format!("{base}/subscription"),
            Some((V2, json!({"topics": ["orders"]}))),
        )
    };
    denied(subscribe(ALICE), "orders");
    let stream = "/consumers/g-alice/stream?topic=orders&auto.offset.reset=earliest";
    denied(c.call(ALICE, "GET", stream, None), "orders");

    // With Read on the topic too, her v2 consumer reads the records.
    c.allow("User:alice", "Read", &["--topic", "orders"]);
    c.until(
        204,
        ALICE,
        "POST",
        &format!("{base}/subscription"),
        Some((V2, json!({"topics": ["orders"]}))),
    );
    let t0 = Instant::now();
    let mut values = Vec::new();
    while values.len() < 3 {
        assert!(t0.elapsed() < Duration::from_secs(30), "read {values:?}");
        let (s, j) = c.call(ALICE, "GET", &format!("{base}/records?timeout=500"), None);
        assert_eq!(s, 200, "{j}");
        values.extend(j.as_array().unwrap().iter().map(|r| r["value"].clone()));
    }
    assert_eq!(values, [json!(1), json!(2), json!(3)]);
    let (s, j) = c.call(
        ALICE,
        "POST",
        &format!("{base}/offsets"),
        Some((
            V2,
            json!({"offsets": [{"topic": "orders", "partition": 0, "offset": 2}]}),
        )),
    );
    assert_eq!(s, 204, "{j}");
    let (s, j) = c.call(ALICE, "GET", read, None);
    assert_eq!(
        (s, j["records"].as_array().map(Vec::len)),
        (200, Some(3)),
        "{j}"
    );
    // A stream of the topic opens and delivers as her.
    let events = sse_first_events(
        &c,
        ALICE,
        "/consumers/g-alice-sse/stream?topic=orders&auto.offset.reset=earliest",
    );
    assert_eq!(
        events.0, 403,
        "no Read on group g-alice-sse yet: {:?}",
        events.1
    );
    c.allow("User:alice", "Read", &["--group", "g-alice-sse"]);
    let t0 = Instant::now();
    let events = loop {
        let e = sse_first_events(
            &c,
            ALICE,
            "/consumers/g-alice-sse/stream?topic=orders&auto.offset.reset=earliest",
        );
        if e.0 == 200 || t0.elapsed() > Duration::from_secs(20) {
            break e;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(events.0, 200, "{:?}", events.1);
    assert!(events.1.iter().any(|e| e == "record"), "{:?}", events.1);

    // bob gets 403 everywhere, and alice's instance is not his.
    assert!(c.topics(BOB).is_empty());
    denied(c.produce(BOB, "orders", json!(0)), "orders");
    denied(v3(BOB, "orders"), "orders");
    denied(c.call(BOB, "GET", read, None), "orders");
    denied(c.call(BOB, "GET", "/topics/orders", None), "orders");
    denied(
        c.call(
            BOB,
            "POST",
            "/consumers/g-alice",
            Some((V2, json!({"name": "b1"}))),
        ),
        "g-alice",
    );
    denied(
        c.call(BOB, "GET", &format!("{base}/records"), None),
        "g-alice",
    );
    denied(subscribe(BOB), "g-alice");
    denied(c.call(BOB, "GET", stream, None), "g-alice");
    denied(c.call(BOB, "GET", "/v1/tier/status", None), "Cluster");
    // Even with Read on alice's group, her instance does not exist for him.
    c.allow("User:bob", "Read", &["--group", "g-alice"]);
    let j = c.until(404, BOB, "GET", &format!("{base}/records"), None);
    assert_eq!(j["error_code"], 40403, "{j}");
    // Describe on payroll shows him payroll, only.
    c.allow("User:bob", "Describe", &["--topic", "payroll"]);
    c.until(200, BOB, "GET", "/topics/payroll", None);
    assert_eq!(c.topics(BOB), ["payroll"]);
    assert_eq!(c.topics(ALICE), ["orders"]);

    // The bearer token acts as User:svc.
    denied(c.produce(SVC, "orders", json!(5)), "orders");
    c.allow("User:svc", "Write", &["--topic", "orders"]);
    c.until(
        200,
        SVC,
        "POST",
        "/topics/orders",
        Some((JSON_V2, json!({"records": [{"value": 5}]}))),
    );

    // The broker's status routes need Describe on the cluster; /metrics stays open.
    denied(c.call(ALICE, "GET", "/v1/tier/status", None), "Cluster");
    c.allow("User:alice", "Describe", &["--cluster"]);
    let j = c.until(200, ALICE, "GET", "/v1/tier/status", None);
    assert!(j["partitions"].is_array(), "{j}");
    assert_eq!(c.call(Who::Nobody, "GET", "/metrics", None).0, 200);

    // Every denial reached the broker's audit counter.
    let metrics = c.broker.http_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("strata_authorization_denials_total") && l.contains("Topic")),
        "{metrics}"
    );
}

/// A request body of unknown length (sent chunked), as a streaming v3 client sends.
fn chunked(text: &'static str) -> reqwest::blocking::Body {
    reqwest::blocking::Body::new(std::io::Cursor::new(text.as_bytes()))
}

/// Opens a server-sent event stream: its status, and then (for 200) the names of the
/// events that arrive within a few seconds, up to the first record.
fn sse_first_events(c: &Cluster, who: Who, path: &str) -> (u16, Vec<String>) {
    let r = c
        .request(who, "GET", path)
        .header("Accept", "text/event-stream")
        .timeout(Duration::from_secs(10))
        .send()
        .unwrap();
    let status = r.status().as_u16();
    if status != 200 {
        let (_, j) = answer(r);
        return (status, vec![j.to_string()]);
    }
    let mut events = Vec::new();
    let mut lines = BufReader::new(r).lines();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(8) {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(e) = line.strip_prefix("event:") {
            events.push(e.trim().to_string());
            if e.trim() == "record" || e.trim() == "error" {
                break;
            }
        }
    }
    (status, events)
}

/// `curl` over HTTPS trusting `ca`, with a client certificate if given; the status and
/// the body as JSON, or the error curl printed when it got no answer (a handshake the
/// server refused).
fn curl(
    ca: &std::path::Path,
    cert: Option<&common::pki::Issued>,
    extra: &[&str],
    url: &str,
) -> Result<(u16, Value), String> {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-w", "\n%{http_code}"]);
    if let Some(c) = cert {
        cmd.arg("--cert").arg(&c.cert).arg("--key").arg(&c.key);
    }
    let out = cmd.args(extra).arg(url).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap();
    let v = serde_json::from_str(body).unwrap_or(Value::String(body.to_string()));
    Ok((status.trim().parse().unwrap(), v))
}

#[test]
fn https_client_certificates_are_principals_under_the_acls() {
    use common::pki::Pki;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let server = pki.server("server");
    let alice = pki.client("alice", "alice", "eng");
    let bob = pki.client("bob", "bob", "eng");
    // OU=ops: no mapping rule matches its subject.
    let carol = pki.client("carol", "carol", "ops");
    let mallory = Pki::new(dir.path(), "rogue").client("mallory", "mallory", "eng");
    let ca = pki.ca();
    let mut args = [SASL_AUTHORIZER, INTER_BROKER_ADMIN].concat();
    args.extend([
        "--http-tls",
        "true",
        "--tls-cert",
        server.cert.to_str().unwrap(),
        "--tls-key",
        server.key.to_str().unwrap(),
        "--tls-client-ca",
        ca.to_str().unwrap(),
        "--http-client-auth",
        "required",
        "--ssl-principal-mapping-rules",
        "RULE:^CN=([^,]*),OU=eng,.*$/$1/",
        "--http-auth",
        "basic:bob:bob-pw",
    ]);
    let broker = Broker::start(&dir.path().join("data"), &args);
    let addr = broker.listener("SASL_PLAINTEXT");
    let admin = admin_properties(dir.path());
    run(
        &addr,
        &admin,
        &["topic", "create", "orders", "--partitions", "1"],
    );
    run(
        &addr,
        &admin,
        &[
            "acl",
            "add",
            "--allow",
            "User:alice",
            "--operation",
            "Write",
            "--topic",
            "orders",
        ],
    );
    let url = |path: &str| format!("https://{}{path}", broker.http);
    let produce = |cert: Option<&common::pki::Issued>, extra: &[&str]| {
        let mut args = vec![
            "-X",
            "POST",
            "-H",
            "Content-Type: application/vnd.kafka.json.v2+json",
            "-d",
            r#"{"records":[{"value":{"n":1}}]}"#,
        ];
        args.extend_from_slice(extra);
        curl(&ca, cert, &args, &url("/topics/orders"))
    };

    // alice's certificate maps to User:alice, who may write orders (the ACL reaches the
    // broker a moment after `acl add` returns).
    let t0 = Instant::now();
    loop {
        let (s, j) = produce(Some(&alice), &[]).unwrap();
        if s == 200 {
            assert!(j["offsets"][0]["offset"].as_i64().is_some(), "{j}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{s} {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // bob's certificate is User:bob, who may not.
    denied(produce(Some(&bob), &[]).unwrap(), "orders");
    // An Authorization header decides over the certificate: alice's connection sending
    // bob's password runs as bob, and a wrong password is 401.
    denied(
        produce(Some(&alice), &["-u", "bob:bob-pw"]).unwrap(),
        "orders",
    );
    let (s, j) = produce(Some(&alice), &["-u", "bob:wrong"]).unwrap();
    assert_eq!((s, j["error_code"].as_u64()), (401, Some(40101)), "{j}");
    // A certificate the rules cannot map is refused, as Kafka refuses it, saying why.
    let (s, j) = produce(Some(&carol), &[]).unwrap();
    assert_eq!((s, j["error_code"].as_u64()), (401, Some(40101)), "{j}");
    assert!(
        j["message"].as_str().unwrap().contains("OU=ops"),
        "the message names the subject: {j}"
    );
    // No certificate, or one another CA signed: no connection at all.
    for cert in [None, Some(&mallory)] {
        let e = produce(cert, &[]).unwrap_err();
        assert!(!e.is_empty());
    }
    // Each refusal is audited and counted on the HTTPS listener (a refused handshake is
    // counted as the server finishes with it, which may be just after curl has seen the
    // alert).
    let failures = || {
        let (s, metrics) = curl(&ca, Some(&alice), &[], &url("/metrics")).unwrap();
        assert_eq!(s, 200);
        metrics
            .as_str()
            .unwrap()
            .lines()
            .filter(|l| {
                l.starts_with("strata_authentication_failures_total") && l.contains("HTTPS")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let t0 = Instant::now();
    while failures() < 4.0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // carol's unmapped subject, no certificate, mallory's, and bob's wrong password.
    assert_eq!(failures(), 4.0, "HTTPS authentication failures counted");
}

/// The schema registry asks the same ACLs (issue 37): a subject is guarded by its topic
/// (TopicNameStrategy): Write there registers, Describe reads; a caller sees no trace of
/// subjects and ids it may not describe; compatibility changes need cluster Alter.
#[test]
fn the_schema_registry_asks_the_topics_acls() {
    let c = Cluster::start();
    let schema = json!({"schema": "{\"type\":\"record\",\"name\":\"Order\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"});
    // Nobody: 401; bob, with no ACL: 403 naming what it needs.
    assert_eq!(c.registry(Who::Nobody, "GET", "/subjects", None).0, 401);
    let (s, j) = c.registry(
        BOB,
        "POST",
        "/subjects/orders-value/versions",
        Some(schema.clone()),
    );
    assert_eq!((s, j["error_code"].clone()), (403, json!(40301)), "{j}");
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("Write on Topic:orders"),
        "{j}"
    );
    c.allow("User:alice", "Write", &["--topic", "orders"]);
    let t0 = Instant::now();
    let id = loop {
        let (s, j) = c.registry(
            ALICE,
            "POST",
            "/subjects/orders-value/versions",
            Some(schema.clone()),
        );
        if s == 200 {
            break j["id"].as_i64().unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{s} {j}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Write implies Describe: alice reads what she registered.
    let (s, j) = c.registry(ALICE, "GET", "/subjects", None);
    assert_eq!((s, j), (200, json!(["orders-value"])));
    let (s, j) = c.registry(ALICE, "GET", &format!("/schemas/ids/{id}"), None);
    assert_eq!(s, 200, "{j}");
    // bob sees nothing: not the subject, not its id, not its versions.
    let (s, j) = c.registry(BOB, "GET", "/subjects", None);
    assert_eq!((s, j), (200, json!([])));
    let (s, j) = c.registry(BOB, "GET", &format!("/schemas/ids/{id}"), None);
    assert_eq!((s, j["error_code"].clone()), (404, json!(40403)), "{j}");
    let (s, _) = c.registry(BOB, "GET", "/subjects/orders-value/versions", None);
    assert_eq!(s, 403);
    let (s, _) = c.registry(BOB, "POST", "/subjects/orders-value", Some(schema.clone()));
    assert_eq!(s, 403, "a lookup is a read of the subject");
    // Describe alone reads but does not register.
    c.allow("User:bob", "Describe", &["--topic", "orders"]);
    let t0 = Instant::now();
    while c.registry(BOB, "GET", "/subjects", None).1 != json!(["orders-value"]) {
        assert!(t0.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, _) = c.registry(BOB, "DELETE", "/subjects/orders-value", None);
    assert_eq!(s, 403, "deleting needs Write");
    // Compatibility levels are the cluster's: Alter on it.
    let level = json!({"compatibility": "FULL"});
    let (s, j) = c.registry(ALICE, "PUT", "/config/orders-value", Some(level.clone()));
    assert_eq!(s, 403, "{j}");
    assert!(
        j["message"].as_str().unwrap().contains("Alter on Cluster"),
        "{j}"
    );
    c.allow("User:alice", "Alter", &["--cluster"]);
    let t0 = Instant::now();
    while c
        .registry(ALICE, "PUT", "/config/orders-value", Some(level.clone()))
        .0
        != 200
    {
        assert!(t0.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, j) = c.registry(BOB, "GET", "/config/orders-value", None);
    assert_eq!((s, j), (200, json!({"compatibilityLevel": "FULL"})));
}
