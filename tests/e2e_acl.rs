//! ACLs end to end (issue 18): users made with `strata user`, ACLs with `strata acl`,
//! librdkafka clients authenticated by SCRAM; every denied call gets Kafka's error, and
//! Metadata hides what a principal may not describe.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::kafka::client_config;
use common::secure::{refs, run};
use common::{Broker, strata_bin};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

struct Cluster {
    broker: Broker,
    addr: String,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start(extra: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut args = common::secure::SASL_AUTHORIZER.to_vec();
        args.extend_from_slice(extra);
        let broker = Broker::start(&dir.path().join("data"), &args);
        let addr = broker.listener("SASL_PLAINTEXT");
        common::secure::admin_properties(dir.path());
        Cluster { broker, addr, dir }
    }

    fn config(&self, user: &str) -> std::path::PathBuf {
        self.dir.path().join(format!("{user}.properties"))
    }

    /// Runs `strata ARGS --bootstrap ADDR --command-config admin.properties`.
    fn admin(&self, args: &[&str]) -> String {
        run(&self.addr, &self.config("admin"), args)
    }

    /// A user with a password; returns its librdkafka settings.
    fn user(&self, name: &str) -> Vec<(String, String)> {
        self.admin(&["user", "create", name, "--password", &format!("{name}-pw")]);
        std::fs::write(
            self.config(name),
            format!(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username={name}\nsasl.password={name}-pw\n"
            ),
        )
        .unwrap();
        settings(name)
    }
}

fn settings(name: &str) -> Vec<(String, String)> {
    let password = if name == "admin" {
        "admin-secret".to_string()
    } else {
        format!("{name}-pw")
    };
    vec![
        ("security.protocol".into(), "sasl_plaintext".into()),
        ("sasl.mechanisms".into(), "SCRAM-SHA-512".into()),
        ("sasl.username".into(), name.into()),
        ("sasl.password".into(), password),
    ]
}

/// Produces one record; the delivery error if it failed.
fn produce(addr: &str, s: &[(String, String)], topic: &str) -> Result<(), String> {
    let p: BaseProducer<common::kafka::Deliveries> = client_config(addr, &refs(s))
        .set("message.timeout.ms", "8000")
        .create_with_context(common::kafka::Deliveries::default())
        .unwrap();
    let d = p.context().clone();
    p.send(BaseRecord::to(topic).key("k").payload("v"))
        .map_err(|(e, _)| e.to_string())?;
    let _ = p.flush(Duration::from_secs(10));
    let errors = d.errors.lock().unwrap().clone();
    match (d.acked.lock().unwrap().len(), errors.first()) {
        (1, _) => Ok(()),
        (_, Some(e)) => Err(e.clone()),
        _ => Err("no delivery report".into()),
    }
}

/// Reads partition 0 of `topic` from the start; the first error if reading fails.
fn read(addr: &str, s: &[(String, String)], topic: &str, group: &str) -> Result<usize, String> {
    let c: BaseConsumer = client_config(addr, &refs(s))
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    while std::time::Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(_)) => {
                n += 1;
                if n == 1 {
                    // Committing needs Read on the group.
                    return c
                        .commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
                        .map(|()| n)
                        .map_err(|e| e.to_string());
                }
            }
            Some(Err(e)) => return Err(e.to_string()),
            None => {}
        }
    }
    Err("nothing read".into())
}

/// The topics Metadata shows these settings.
fn visible_topics(addr: &str, s: &[(String, String)]) -> Vec<String> {
    let p: BaseProducer = client_config(addr, &refs(s)).create().unwrap();
    let md = p
        .client()
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    let mut t: Vec<String> = md.topics().iter().map(|t| t.name().to_string()).collect();
    t.sort();
    t
}

#[test]
fn acls_allow_and_deny_with_kafka_errors_and_metadata_hides_topics() {
    let c = Cluster::start(&[]);
    // The super user creates the topics and the users.
    for t in ["orders", "orders-eu", "orders-secret", "payroll"] {
        c.admin(&["topic", "create", t, "--partitions", "1"]);
    }
    let admin = settings("admin");
    produce(&c.addr, &admin, "orders").unwrap();
    produce(&c.addr, &admin, "payroll").unwrap();
    let alice = c.user("alice");
    let bob = c.user("bob");
    let list = c.admin(&["user", "list"]);
    assert!(list.contains("alice") && list.contains("bob"), "{list}");

    // Nothing allowed yet: every call is refused with its Kafka error.
    let e = produce(&c.addr, &alice, "orders").unwrap_err();
    assert!(e.contains("Topic authorization failed"), "{e}");
    assert!(visible_topics(&c.addr, &alice).is_empty());

    // alice may write orders but not read it.
    c.admin(&[
        "acl",
        "add",
        "--allow",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "orders",
    ]);
    produce(&c.addr, &alice, "orders").unwrap();
    // Her group may read; the topic may not be read: the fetch is refused.
    c.admin(&[
        "acl",
        "add",
        "--allow",
        "User:alice",
        "--operation",
        "Read",
        "--group",
        "g-alice",
    ]);
    let e = read(&c.addr, &alice, "orders", "g-alice").unwrap_err();
    assert!(e.contains("Topic authorization failed"), "{e}");

    // A prefixed allow with a literal deny: orders-* except orders-secret.
    c.admin(&[
        "acl",
        "add",
        "--allow",
        "User:bob",
        "--operation",
        "All",
        "--topic",
        "orders-",
        "--prefixed",
    ]);
    c.admin(&[
        "acl",
        "add",
        "--deny",
        "User:bob",
        "--operation",
        "All",
        "--topic",
        "orders-secret",
    ]);
    produce(&c.addr, &bob, "orders-eu").unwrap();
    let e = produce(&c.addr, &bob, "orders-secret").unwrap_err();
    assert!(e.contains("Topic authorization failed"), "{e}");
    // Metadata shows bob what he may describe, and nothing else.
    assert_eq!(visible_topics(&c.addr, &bob), vec!["orders-eu".to_string()]);
    assert_eq!(visible_topics(&c.addr, &alice), vec!["orders".to_string()]);

    // A group ACL: reading needs Read on the topic and on the group it commits in.
    c.admin(&[
        "acl",
        "add",
        "--allow",
        "User:bob",
        "--operation",
        "Read",
        "--group",
        "bob-group",
    ]);
    assert_eq!(read(&c.addr, &bob, "orders-eu", "bob-group").unwrap(), 1);
    let e = read(&c.addr, &bob, "orders-eu", "other-group").unwrap_err();
    assert!(e.contains("Group authorization failed"), "{e}");

    // The super user is allowed everything.
    assert_eq!(read(&c.addr, &admin, "payroll", "any-group").unwrap(), 1);

    // acl list shows them; remove takes one away.
    let listed = c.admin(&["acl", "list"]);
    assert!(
        listed.contains("User:bob") && listed.contains("orders-secret"),
        "{listed}"
    );
    c.admin(&[
        "acl",
        "remove",
        "--allow",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "orders",
    ]);
    let e = produce(&c.addr, &alice, "orders").unwrap_err();
    assert!(e.contains("Topic authorization failed"), "{e}");

    // The denials are audited.
    let metrics = c.broker.http_get("/metrics");
    assert!(
        metrics.contains("strata_authorization_denials_total"),
        "no denial counter"
    );
}

#[test]
fn transactional_ids_need_their_acl() {
    let c = Cluster::start(&[]);
    c.admin(&["topic", "create", "tx-out", "--partitions", "1"]);
    let carol = c.user("carol");
    c.admin(&[
        "acl",
        "add",
        "--allow",
        "User:carol",
        "--operation",
        "Write",
        "--topic",
        "tx-out",
    ]);
    c.admin(&[
        "acl",
        "add",
        "--allow",
        "User:carol",
        "--operation",
        "Write",
        "--transactional-id",
        "carol-tx",
    ]);
    let transactional = |id: &str| -> Result<(), String> {
        let mut s = refs(&carol);
        s.push(("transactional.id", id));
        let p: BaseProducer = client_config(&c.addr, &s)
            .create()
            .map_err(|e| e.to_string())?;
        p.init_transactions(Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        p.begin_transaction().map_err(|e| e.to_string())?;
        p.send(BaseRecord::to("tx-out").key("k").payload("v"))
            .map_err(|(e, _)| e.to_string())?;
        p.commit_transaction(Duration::from_secs(10))
            .map_err(|e| e.to_string())
    };
    transactional("carol-tx").unwrap();
    let e = transactional("someone-else").unwrap_err();
    assert!(e.contains("Transactional Id authorization failed"), "{e}");
}

#[test]
fn plaintext_clients_are_anonymous_and_get_nothing() {
    let c = Cluster::start(&["--allow-everyone-if-no-acl-found", "false"]);
    c.admin(&["topic", "create", "open", "--partitions", "1"]);
    let plain = c.broker.listener("PLAINTEXT");
    let e = produce(&plain, &[], "open").unwrap_err();
    assert!(e.contains("Topic authorization failed"), "{e}");
    // An ACL for User:ANONYMOUS opens it, as Kafka.
    c.admin(&[
        "acl",
        "add",
        "--allow",
        "User:ANONYMOUS",
        "--operation",
        "Write",
        "--topic",
        "open",
    ]);
    produce(&plain, &[], "open").unwrap();
}

#[test]
fn acls_and_users_survive_controller_failover() {
    use common::cluster::{Cluster as Brokers, free_port};
    let nodes = Brokers::plan(3);
    let sasl: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}:{}", n.ip, free_port(&n.ip)))
        .collect();
    let mut cluster = Brokers::start_with(
        nodes.clone(),
        3,
        &[
            "--sasl-mechanisms",
            "SCRAM-SHA-512",
            "--bootstrap-user",
            "admin:admin-secret",
            "--authorizer",
            "on",
            "--super-users",
            "User:admin",
            "--inter-broker-listener-name",
            "SASL_PLAINTEXT",
            "--inter-broker-user",
            "admin:admin-secret",
        ],
        |n| {
            vec![
                "--listeners".into(),
                format!("SASL_PLAINTEXT://{}", sasl[(n.id - 1) as usize]),
            ]
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let admin_cfg = common::secure::admin_properties(dir.path());
    run(
        &sasl[0],
        &admin_cfg,
        &["topic", "create", "orders", "--partitions", "1"],
    );
    run(
        &sasl[0],
        &admin_cfg,
        &["topic", "create", "secret", "--partitions", "1"],
    );
    run(
        &sasl[0],
        &admin_cfg,
        &["user", "create", "alice", "--password", "alice-pw"],
    );
    run(
        &sasl[0],
        &admin_cfg,
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
    let alice = settings("alice");
    // Every voter is killed and restarted in turn, so the raft leader is among them:
    // the users and ACLs come back from the replicated log each time.
    for victim in 1..=3 {
        cluster.broker(victim).kill9();
        let other = &sasl[(victim % 3) as usize];
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let listed = loop {
            let out = Command::new(strata_bin())
                .args(["acl", "list", "--bootstrap", other, "--command-config"])
                .arg(&admin_cfg)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if out.status.success() && text.contains("User:alice") {
                break text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ACLs not served after node {victim} died: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        assert!(listed.contains("orders"), "{listed}");
        // The partition may have lost its leader with the victim: allowed writes go
        // through once a new one is elected.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while let Err(e) = produce(other, &alice, "orders") {
            assert!(
                std::time::Instant::now() < deadline,
                "alice cannot write: {e}"
            );
        }
        let e = produce(other, &alice, "secret").unwrap_err();
        assert!(e.contains("Topic authorization failed"), "{e}");
        cluster.broker(victim).restart();
    }
}
