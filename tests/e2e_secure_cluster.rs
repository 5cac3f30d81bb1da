//! A three-broker cluster whose brokers authenticate each other (issue 18): the
//! inter-broker listener is SSL with client certificates, the controller quorum's port
//! requires mutual TLS, and the authorizer is on. It keeps replicating through kill -9
//! of a broker; a process without the cluster's credentials cannot fetch as a replica
//! or call (register with, vote in) the controller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, free_port};
use common::kafka::{client_config, flush};
use common::pki::{Issued, Pki};
use common::secure::refs;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::{Offset, TopicPartitionList};
use strata_proto::ErrorCode;

fn ssl(ca: &std::path::Path, me: &Issued) -> Vec<(String, String)> {
    vec![
        ("security.protocol".into(), "ssl".into()),
        ("ssl.ca.location".into(), ca.display().to_string()),
        (
            "ssl.certificate.location".into(),
            me.cert.display().to_string(),
        ),
        ("ssl.key.location".into(), me.key.display().to_string()),
    ]
}

/// (leader, isr) of partition 0, as an SSL client sees it.
fn partition0(bootstrap: &str, s: &[(String, String)], topic: &str) -> Option<(i32, Vec<i32>)> {
    let c: BaseConsumer = client_config(bootstrap, &refs(s)).create().ok()?;
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(3)).ok()?;
    let t = md.topics().iter().find(|t| t.name() == topic)?;
    let p = t.partitions().first()?;
    Some((p.leader(), p.isr().to_vec()))
}

fn produce(bootstrap: &str, s: &[(String, String)], topic: &str, from: usize, n: usize) {
    let p: BaseProducer = client_config(bootstrap, &refs(s))
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    for i in from..from + n {
        let v = format!("{i:05}");
        loop {
            match p.send(BaseRecord::to(topic).key(&v).payload(&v)) {
                Ok(()) => break,
                // A full local queue: let deliveries drain, then send again.
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    _,
                )) => {
                    p.poll(Duration::from_millis(100));
                }
                Err((e, _)) => panic!("send: {e}"),
            }
        }
    }
    flush(&p);
}

#[test]
fn a_tls_authenticated_cluster_replicates_through_kill_9_and_refuses_strangers() {
    let nodes = Cluster::plan(3);
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "cluster");
    let rogue = Pki::new(tmp.path(), "rogue");
    let admin = pki.client("admin", "admin", "ops");
    let ssl_ports: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}:{}", n.ip, free_port(&n.ip)))
        .collect();
    let certs: Vec<Issued> = nodes
        .iter()
        .map(|n| pki.node(&format!("broker-{}", n.id), "broker", &n.ip))
        .collect();
    let ca = pki.ca();
    let mut cluster = Cluster::start_with(
        nodes.clone(),
        3,
        &[
            "--authorizer",
            "on",
            "--super-users",
            "User:broker;User:admin",
            "--ssl-principal-mapping-rules",
            "RULE:^CN=([^,]*),.*$/$1/",
            "--inter-broker-listener-name",
            "SSL",
            "--controller-tls",
            "true",
            "--tls-client-ca",
            ca.to_str().unwrap(),
        ],
        |n| {
            let i = (n.id - 1) as usize;
            vec![
                "--listeners".into(),
                format!("SSL://{}", ssl_ports[i]),
                "--tls-cert".into(),
                certs[i].cert.display().to_string(),
                "--tls-key".into(),
                certs[i].key.display().to_string(),
            ]
        },
    );
    let bootstrap = ssl_ports.join(",");
    let s = ssl(&ca, &admin);
    let a: AdminClient<DefaultClientContext> =
        client_config(&bootstrap, &refs(&s)).create().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let topic =
        NewTopic::new("replicated", 1, TopicReplication::Fixed(3)).set("min.insync.replicas", "2");
    let r = rt
        .block_on(a.create_topics(
            &[topic],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(20))),
        ))
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    // Followers fetch over mutual TLS as User:broker: the ISR fills.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((_, isr)) = partition0(&bootstrap, &s, "replicated")
            && isr.len() == 3
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the followers never joined the ISR"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    produce(&bootstrap, &s, "replicated", 0, 200);

    // kill -9 the leader; the others elect one and keep taking acks=all writes.
    let (leader, _) = partition0(&bootstrap, &s, "replicated").unwrap();
    cluster.broker(leader).kill9();
    let others: String = ssl_ports
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as i32 + 1 != leader)
        .map(|(_, a)| a.clone())
        .collect::<Vec<_>>()
        .join(",");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((l, _)) = partition0(&others, &s, "replicated")
            && l != leader
            && l > 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "no new leader after kill -9");
        std::thread::sleep(Duration::from_millis(200));
    }
    produce(&others, &s, "replicated", 200, 200);
    // The killed broker comes back, catches up over TLS, and rejoins the ISR.
    cluster.broker(leader).restart();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some((_, isr)) = partition0(&bootstrap, &s, "replicated")
            && isr.len() == 3
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted broker never rejoined the ISR"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Every acknowledged record, once, in order.
    let c: BaseConsumer = client_config(&bootstrap, &refs(&s))
        .set("group.id", "check")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("replicated", 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < 400 && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            got.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
        }
    }
    let want: Vec<String> = (0..400).map(|i| format!("{i:05}")).collect();
    assert_eq!(got, want);

    // A stranger: a certificate from another CA cannot even connect to the SSL
    // listener; over the PLAINTEXT listener it is User:ANONYMOUS, and a replica fetch
    // needs ClusterAction.
    let mallory = rogue.node("mallory", "broker", &nodes[0].ip);
    let bad = ssl(&ca, &mallory);
    assert!(partition0(&bootstrap, &bad, "replicated").is_none());
    let alive = nodes.iter().find(|n| n.id != leader).unwrap();
    let mut fetch = FetchRequest::default();
    fetch.replica_id = BrokerId(9);
    fetch.max_wait_ms = 0;
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_static_str("replicated"));
    let mut p = FetchPartition::default();
    p.partition_max_bytes = 1 << 20;
    t.partitions = vec![p];
    fetch.topics = vec![t];
    let mut conn = common::wire::connect(&alive.kafka);
    conn.write_all(&common::wire::frame(ApiKey::Fetch, 11, 1, &fetch))
        .unwrap();
    let body = common::wire::read_frame(&mut conn).expect("an answer");
    let (_, resp): (i32, FetchResponse) = common::wire::response(body, 0, 11);
    let codes: Vec<i16> = resp
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .chain(std::iter::once(resp.error_code))
        .collect();
    assert!(
        codes.contains(&ErrorCode::ClusterAuthorizationFailed.code())
            || codes.contains(&ErrorCode::TopicAuthorizationFailed.code()),
        "an anonymous replica fetch is refused: {codes:?}"
    );
    assert!(
        !resp.responses.iter().any(|t| t
            .partitions
            .iter()
            .any(|p| p.records.as_ref().is_some_and(|r| !r.is_empty()))),
        "and gets no records"
    );

    // The controller port: a plain TCP caller gets no answer (the TLS handshake fails
    // first), so it cannot register, vote or read the metadata.
    let mut raw = std::net::TcpStream::connect(&alive.controller).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = br#"{"Client":{"Metadata":{"since_version":0,"wait_ms":0}}}"#;
    raw.write_all(&(request.len() as u32).to_be_bytes())
        .unwrap();
    raw.write_all(request).unwrap();
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).unwrap_or(0);
    assert!(
        n == 0 || !String::from_utf8_lossy(&buf[..n]).contains("cluster_id"),
        "the controller answered a stranger"
    );
    // And the cluster is still serving.
    produce(&bootstrap, &s, "replicated", 400, 10);
}
