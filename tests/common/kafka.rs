//! rdkafka helpers for end-to-end tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// A delivered record as the producer saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acked {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub at: Instant,
}

/// Collects delivery reports.
#[derive(Clone, Default)]
pub struct Deliveries {
    pub acked: Arc<Mutex<Vec<Acked>>>,
    pub errors: Arc<Mutex<Vec<String>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => self.acked.lock().unwrap().push(Acked {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().unwrap_or_default().to_vec(),
                at: Instant::now(),
            }),
            Err((e, _)) => self.errors.lock().unwrap().push(e.to_string()),
        }
    }
}

pub fn client_config(bootstrap: &str, extra: &[(&str, &str)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c
}

pub fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> (BaseProducer<Deliveries>, Deliveries) {
    let d = Deliveries::default();
    let p = client_config(bootstrap, extra)
        .create_with_context(d.clone())
        .expect("producer");
    (p, d)
}

/// Sends, retrying while the local queue is full.
pub fn send(p: &BaseProducer<Deliveries>, topic: &str, key: Option<&[u8]>, value: &[u8]) {
    loop {
        let mut rec = rdkafka::producer::BaseRecord::to(topic).payload(value);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        match p.send(rec) {
            Ok(()) => return,
            Err((
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::QueueFull,
                ),
                _,
            )) => {
                p.poll(Duration::from_millis(10));
            }
            Err((e, _)) => panic!("send failed: {e}"),
        }
    }
}

/// A partition's (low, high) watermarks.
pub fn watermarks(bootstrap: &str, topic: &str, p: i32) -> (i64, i64) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = client_config(bootstrap, &[]).create().unwrap();
    c.fetch_watermarks(topic, p, std::time::Duration::from_secs(10))
        .unwrap()
}

pub fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    client_config(bootstrap, &[])
        .create()
        .expect("admin client")
}

pub fn create_topic(bootstrap: &str, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    create_topic_rf(bootstrap, name, partitions, 1, configs)
}

pub fn create_topic_rf(
    bootstrap: &str,
    name: &str,
    partitions: i32,
    rf: i32,
    configs: &[(&str, &str)],
) {
    let admin = admin(bootstrap);
    let mut t = NewTopic::new(name, partitions, TopicReplication::Fixed(rf));
    for (k, v) in configs {
        t = t.set(k, v);
    }
    let r = futures::executor::block_on(admin.create_topics([&t], &AdminOptions::new()))
        .expect("create topics");
    for x in r {
        x.expect("topic created");
    }
}

/// A consumed record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Got {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub timestamp: Option<i64>,
}

/// Reads `expected` records from every partition of `topic` from the beginning.
pub fn consume_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    expected: usize,
    timeout: Duration,
) -> Vec<Got> {
    let c: BaseConsumer = client_config(
        bootstrap,
        &[
            ("enable.auto.commit", "false"),
            ("group.id", "unused-no-commits"),
        ],
    )
    .create()
    .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::with_capacity(expected);
    let deadline = Instant::now() + timeout;
    while out.len() < expected && Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push(Got {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().unwrap_or_default().to_vec(),
                timestamp: m.timestamp().to_millis(),
            }),
            Some(Err(e)) => panic!("consume error: {e}"),
            None => {}
        }
    }
    // Nothing more arrives past the expected count.
    if out.len() == expected {
        let extra = c.poll(Duration::from_millis(500));
        // Say which record, and whether its value was read already (a duplicate) or is
        // new (written but never acknowledged as such).
        let seen = |v: &[u8]| out.iter().any(|r| r.value == v);
        assert!(
            extra.is_none(),
            "more records than expected: {:?}",
            extra.map(|m| m.map(|m| {
                let v = m.payload().unwrap_or_default();
                (
                    m.partition(),
                    m.offset(),
                    String::from_utf8_lossy(&v[..v.len().min(64)]).to_string(),
                    if seen(v) {
                        "a duplicate of a record read"
                    } else {
                        "not read before"
                    },
                )
            }))
        );
    }
    out
}

/// Groups records by partition, in offset order.
pub fn by_partition(got: &[Got]) -> HashMap<i32, Vec<Got>> {
    let mut m: HashMap<i32, Vec<Got>> = HashMap::new();
    for g in got {
        m.entry(g.partition).or_default().push(g.clone());
    }
    for v in m.values_mut() {
        v.sort_by_key(|g| g.offset);
    }
    m
}

pub fn flush<C: ProducerContext>(p: &BaseProducer<C>) {
    p.flush(Duration::from_secs(60)).expect("flush");
}
