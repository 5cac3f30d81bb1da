//! `strata topic repartition` with a real broker and real clients: a topic goes from 8
//! to 16 partitions while an acks=all producer keeps writing and a consumer group keeps
//! reading. What a user relies on: every key's records are read in the order they were
//! produced, across the cutover, and no record is lost or read twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::kafka::{client_config, create_topic};
use rdkafka::ClientContext;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

const OLD: &str = "events";
const NEW: &str = "events.p16";

/// Records as (topic, value), shared between threads.
type Records = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// What the producer learned of each record: acknowledged (topic, value), or refused
/// (error, value).
#[derive(Clone, Default)]
struct Outcomes {
    acked: Records,
    /// (error, value)
    refused: Records,
}

impl ClientContext for Outcomes {}

impl ProducerContext for Outcomes {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => self.acked.lock().unwrap().push((
                m.topic().to_string(),
                m.payload().unwrap_or_default().to_vec(),
            )),
            Err((e, m)) => self
                .refused
                .lock()
                .unwrap()
                .push((e.to_string(), m.payload().unwrap_or_default().to_vec())),
        }
    }
}

fn wait(what: &str, timeout: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// "KEY:I": the key and the record's number in the order the producer sent it.
fn parse(v: &[u8]) -> (String, u64) {
    let v = String::from_utf8(v.to_vec()).unwrap();
    let (k, i) = v.split_once(':').unwrap();
    (k.to_string(), i.parse().unwrap())
}

#[test]
fn repartitioning_8_to_16_under_load_keeps_every_keys_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    create_topic(&b, OLD, 8, &[]);

    // The producer writes 64 keys to the old topic; when the old topic refuses it
    // (POLICY_VIOLATION, naming the new one), it resends what was refused, in the order
    // it was sent, to the new topic and carries on there: an application switching at
    // the fence.
    let outcomes = Outcomes::default();
    let stop = Arc::new(AtomicBool::new(false));
    let switched = Arc::new(AtomicBool::new(false));
    let producer = {
        let (outcomes, stop, switched, b) =
            (outcomes.clone(), stop.clone(), switched.clone(), b.clone());
        std::thread::spawn(move || {
            let p: BaseProducer<Outcomes> = client_config(
                &b,
                &[
                    ("acks", "all"),
                    ("enable.idempotence", "true"),
                    ("linger.ms", "5"),
                ],
            )
            .create_with_context(outcomes.clone())
            .unwrap();
            let send = |topic: &str, v: &[u8]| {
                let (key, _) = parse(v);
                loop {
                    match p.send(BaseRecord::to(topic).key(key.as_bytes()).payload(v)) {
                        Ok(()) => return,
                        Err((e, _)) => {
                            assert!(e.to_string().contains("Queue full"), "send: {e}");
                            p.poll(Duration::from_millis(10));
                        }
                    }
                }
            };
            let mut topic = OLD;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let v = format!("key-{:02}:{i:010}", i % 64);
                send(topic, v.as_bytes());
                i += 1;
                if i.is_multiple_of(50) {
                    p.poll(Duration::ZERO);
                    std::thread::sleep(Duration::from_millis(10));
                }
                if topic == OLD && !outcomes.refused.lock().unwrap().is_empty() {
                    // Everything in flight to the old topic is settled first.
                    p.flush(Duration::from_secs(60)).unwrap();
                    let mut refused = std::mem::take(&mut *outcomes.refused.lock().unwrap());
                    for (e, _) in &refused {
                        assert!(e.contains("Policy violation"), "refused: {e}");
                    }
                    refused.sort_by_key(|(_, v)| parse(v).1);
                    topic = NEW;
                    switched.store(true, Ordering::Relaxed);
                    for (_, v) in refused {
                        send(NEW, &v);
                    }
                }
            }
            p.flush(Duration::from_secs(60)).unwrap();
            assert!(
                outcomes.refused.lock().unwrap().is_empty(),
                "refused after the switch: {:?}",
                outcomes.refused.lock().unwrap().first()
            );
            i
        })
    };

    // The group reads the old topic, committing what it has processed; it moves to the
    // new topic only when the tool says the group has read the old one to the markers.
    let read: Records = Arc::default();
    let move_on = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (read, move_on, done, b) = (read.clone(), move_on.clone(), done.clone(), b.clone());
        std::thread::spawn(move || {
            let c: BaseConsumer = client_config(
                &b,
                &[
                    ("group.id", "readers"),
                    ("enable.auto.commit", "false"),
                    ("auto.offset.reset", "earliest"),
                ],
            )
            .create()
            .unwrap();
            c.subscribe(&[OLD]).unwrap();
            let mut on_new = false;
            while !done.load(Ordering::Relaxed) {
                if !on_new && move_on.load(Ordering::Relaxed) {
                    c.unsubscribe();
                    c.subscribe(&[NEW]).unwrap();
                    on_new = true;
                }
                if let Some(m) = c.poll(Duration::from_millis(100)) {
                    let m = m.unwrap();
                    read.lock()
                        .unwrap()
                        .push((m.topic().to_string(), m.payload().unwrap().to_vec()));
                    c.commit_message(&m, CommitMode::Async).unwrap();
                }
            }
        })
    };
    let acked = || outcomes.acked.lock().unwrap().len();
    wait("records acknowledged", Duration::from_secs(60), || {
        acked() > 3_000
    });

    let out = common::cli(
        &b,
        &[
            "topic",
            "repartition",
            OLD,
            "--partitions",
            "16",
            "--group",
            "readers",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("created '{NEW}' with 16 partitions")),
        "{text}"
    );
    assert_eq!(text.matches("marker events-").count(), 8, "{text}");
    assert!(
        text.contains("group 'readers' has read 'events' up to the cutover"),
        "{text}"
    );
    // What the group had read when the tool said so (checked once the producer has
    // heard back about every record).
    let read_at_cutover = read.lock().unwrap().len();
    move_on.store(true, Ordering::Relaxed);

    wait("the producer to switch", Duration::from_secs(60), || {
        switched.load(Ordering::Relaxed)
    });
    let before = acked();
    wait("records on the new topic", Duration::from_secs(60), || {
        acked() > before + 3_000
    });
    stop.store(true, Ordering::Relaxed);
    let sent = producer.join().unwrap();
    let acked_all = outcomes.acked.lock().unwrap().clone();
    assert_eq!(
        acked_all.len() as u64,
        sent,
        "every record acknowledged once"
    );
    wait(
        "the group to read everything",
        Duration::from_secs(60),
        || read.lock().unwrap().len() >= acked_all.len(),
    );
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::Relaxed);
    consumer.join().unwrap();

    let read = read.lock().unwrap().clone();
    // The group had read every record the old topic acknowledged before the tool told it
    // to switch: its committed offsets had reached the markers.
    let old_acked: HashSet<&Vec<u8>> = acked_all
        .iter()
        .filter(|(t, _)| t == OLD)
        .map(|(_, v)| v)
        .collect();
    let read_before: HashSet<&Vec<u8>> = read[..read_at_cutover].iter().map(|(_, v)| v).collect();
    let missing = old_acked.difference(&read_before).count();
    assert_eq!(
        missing,
        0,
        "{missing} of the old topic's {} records were not read when the tool said the group had read it",
        old_acked.len()
    );
    let values: HashSet<&Vec<u8>> = read.iter().map(|(_, v)| v).collect();
    assert_eq!(values.len(), read.len(), "no record read twice");
    assert_eq!(read.len(), acked_all.len(), "as many read as acknowledged");
    for (_, v) in &acked_all {
        assert!(values.contains(v), "{} lost", String::from_utf8_lossy(v));
    }
    // Every key in the order sent, across the two topics.
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut on_new = HashSet::new();
    for (t, v) in &read {
        let (k, i) = parse(v);
        if t == NEW {
            on_new.insert(k.clone());
        }
        if let Some(prev) = last.insert(k.clone(), i) {
            assert!(prev < i, "key {k}: record {i} read after {prev}");
        }
    }
    assert_eq!(on_new.len(), 64, "every key reached the new topic");
    // The new topic has 16 partitions.
    let md = common::cluster::metadata(&b, NEW).unwrap();
    assert_eq!(md.len(), 16);
}
