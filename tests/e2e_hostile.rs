//! Hostile clients against the real binary over raw sockets: poisoned lengths in every
//! request at every supported version, truncated and oversized frames, decompression
//! bombs, ten thousand connections at once, absurd partition counts, writes to the
//! internal offsets topic. After each, the broker is alive; its peak RSS stays bounded
//! against its idle RSS; and an rdkafka producer and consumer on their own connections
//! keep completing round trips throughout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::wire::{connect, frame, produce_req, read_frame, response};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use strata_broker::api::SUPPORTED;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, ErrorCode};

/// A field of /proc/PID/status in KiB (VmRSS now, VmHWM the peak).
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// An rdkafka producer and consumer doing round trips on their own connections until
/// stopped: each record produced must come back to the consumer.
struct Watcher {
    stop: Arc<AtomicBool>,
    trips: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(bootstrap: &str, topic: &str) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let trips = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let (b, t) = (bootstrap.to_string(), topic.to_string());
        let (s, n, f) = (stop.clone(), trips.clone(), failures.clone());
        let thread = std::thread::spawn(move || {
            let (p, deliveries) = common::kafka::producer(&b, &[("linger.ms", "0")]);
            let c: BaseConsumer = common::kafka::client_config(
                &b,
                &[
                    ("group.id", "hostile-watcher"),
                    ("enable.auto.commit", "false"),
                ],
            )
            .create()
            .unwrap();
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&t, 0, Offset::Beginning).unwrap();
            c.assign(&tpl).unwrap();
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) {
                let value = format!("trip-{i}");
                p.send(BaseRecord::<(), _>::to(&t).payload(value.as_bytes()))
                    .unwrap();
                if let Err(e) = p.flush(Duration::from_secs(10)) {
                    f.lock().unwrap().push(format!("trip {i}: flush: {e}"));
                }
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut back = false;
                while !back && Instant::now() < deadline {
                    match c.poll(Duration::from_millis(100)) {
                        Some(Ok(m)) => back = m.payload() == Some(value.as_bytes()),
                        Some(Err(e)) => f.lock().unwrap().push(format!("trip {i}: poll: {e}")),
                        None => {}
                    }
                }
                if !back {
                    f.lock()
                        .unwrap()
                        .push(format!("trip {i}: the record did not come back"));
                }
                // Commits keep __consumer_offsets in use (and created).
                let _ = c.commit_consumer_state(rdkafka::consumer::CommitMode::Sync);
                n.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            let errors = deliveries.errors.lock().unwrap().clone();
            f.lock().unwrap().extend(errors);
        });
        Watcher {
            stop,
            trips,
            failures,
            thread: Some(thread),
        }
    }

    /// Waits until `n` more round trips completed: the broker served through what
    /// came before.
    fn await_trips(&self, n: usize, what: &str) {
        let start = self.trips.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.trips.load(Ordering::Relaxed) < start + n {
            assert!(Instant::now() < deadline, "no round trips after {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let f = self.failures.lock().unwrap();
        assert!(f.is_empty(), "round trips failed during {what}: {f:?}");
    }

    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        let f = self.failures.lock().unwrap();
        assert!(f.is_empty(), "round trips failed: {f:?}");
        self.trips.load(Ordering::Relaxed)
    }
}

/// A request frame: size, header (api, version, correlation 1, client id "h"), body.
fn raw_frame(api: i16, version: i16, header_v2: bool, body: &[u8]) -> Vec<u8> {
    let mut h = BytesMut::new();
    h.put_i16(api);
    h.put_i16(version);
    h.put_i32(1);
    h.put_i16(1);
    h.put_u8(b'h');
    if header_v2 {
        h.put_u8(0); // no tagged fields
    }
    let mut out = Vec::with_capacity(4 + h.len() + body.len());
    out.put_i32((h.len() + body.len()) as i32);
    out.extend_from_slice(&h);
    out.extend_from_slice(body);
    out
}

/// Sends a frame on a new connection and reads whatever comes back (an answer or the
/// close) within a few seconds. True when the broker answered or closed; false when
/// it did neither in time.
fn send_and_settle(addr: &str, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if s.write_all(bytes).is_err() {
        return true; // closed on us already
    }
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        // An answer (some bytes) or the close (none): either way the broker settled it.
        Ok(_n) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn poisons() -> Vec<Vec<u8>> {
    vec![
        0x7fff_ffffu32.to_be_bytes().to_vec(),
        (-2i32).to_be_bytes().to_vec(),
        0x0010_0000u32.to_be_bytes().to_vec(),
        vec![0xff, 0xff, 0xff, 0xff, 0x0f],
    ]
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn create_topics_error(addr: &str, name: &str, partitions: i32) -> (ErrorCode, String) {
    let mut t = CreatableTopic::default();
    t.name = TopicName(s(name));
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let mut c = connect(addr);
    c.write_all(&frame(ApiKey::CreateTopics, 5, 3, &req))
        .unwrap();
    let (_, r): (i32, CreateTopicsResponse) = response(read_frame(&mut c).unwrap(), 1, 5);
    let t = &r.topics[0];
    (
        ErrorCode::from_code(t.error_code).unwrap(),
        t.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

fn create_partitions_error(addr: &str, name: &str, count: i32) -> (ErrorCode, String) {
    let mut t = CreatePartitionsTopic::default();
    t.name = TopicName(s(name));
    t.count = count;
    t.assignments = None;
    let mut req = CreatePartitionsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let mut c = connect(addr);
    c.write_all(&frame(ApiKey::CreatePartitions, 2, 4, &req))
        .unwrap();
    let (_, r): (i32, CreatePartitionsResponse) = response(read_frame(&mut c).unwrap(), 1, 2);
    let t = &r.results[0];
    (
        ErrorCode::from_code(t.error_code).unwrap(),
        t.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

fn produce_error(addr: &str, topic: &str, records: Bytes) -> (ErrorCode, String) {
    let mut c = connect(addr);
    c.write_all(&frame(ApiKey::Produce, 9, 7, &produce_req(topic, records)))
        .unwrap();
    let (_, r): (i32, ProduceResponse) = response(read_frame(&mut c).unwrap(), 1, 9);
    let p = &r.responses[0].partition_responses[0];
    (
        ErrorCode::from_code(p.error_code).unwrap(),
        p.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

/// A pseudo-random byte stream (xorshift), so part of a bomb does not compress.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn hostile_clients_never_take_the_broker_down() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let addr = broker.kafka.clone();
    let pid = broker.pid();
    common::kafka::create_topic(&addr, "watched", 1, &[]);
    let watcher = Watcher::start(&addr, "watched");
    watcher.await_trips(5, "the start");
    let idle_kib = status_kib(pid, "VmRSS");

    // 1. The 18-byte Metadata v0 request: a topic count of 0x7fffffff, nothing else.
    let mut f = Vec::new();
    f.put_i32(14);
    f.put_i16(3);
    f.put_i16(0);
    f.put_i32(1);
    f.put_i16(-1);
    f.put_i32(0x7fff_ffff);
    assert_eq!(f.len(), 18);
    assert!(send_and_settle(&addr, &f), "the 18-byte Metadata request");
    watcher.await_trips(1, "the 18-byte Metadata request");

    // 2. Every API at every supported version, a body of zeros with each position in
    // turn overwritten by a poisoned length, and the same cut short after it.
    let mut sent = 0usize;
    let mut unsettled = Vec::new();
    for &(api, min, max) in SUPPORTED {
        for version in min..=max {
            let header_v2 = api.request_header_version(version) >= 2;
            // Produce: a null transactional id and acks=1 first, left alone, so the
            // broker answers (with acks=0 it rightly says nothing).
            let prefix: &[u8] = if api == ApiKey::Produce {
                &[0xff, 0xff, 0, 1]
            } else {
                &[]
            };
            for at in 0..20 {
                for (i, poison) in poisons().into_iter().enumerate() {
                    let mut body = [0u8; 20];
                    let end = (at + poison.len()).min(body.len());
                    body[at..end].copy_from_slice(&poison[..end - at]);
                    // The first poison also cut short right after it.
                    let cuts = if i == 0 {
                        vec![body.len(), end]
                    } else {
                        vec![body.len()]
                    };
                    for cut in cuts {
                        let fr = raw_frame(
                            api as i16,
                            version,
                            header_v2,
                            &[prefix, &body[..cut]].concat(),
                        );
                        if !send_and_settle(&addr, &fr) {
                            unsettled.push(format!("{api:?} v{version} at {at} cut {cut}"));
                        }
                        sent += 1;
                    }
                }
            }
        }
        watcher.await_trips(1, &format!("poisoned {api:?} requests"));
    }
    assert!(sent > 10_000, "{sent}");
    // A request may legitimately wait (a long poll), but none of these should.
    assert!(
        unsettled.len() * 100 <= sent,
        "{} of {sent} requests got neither an answer nor a close: {:?}",
        unsettled.len(),
        &unsettled[..unsettled.len().min(10)]
    );

    // 3. Frames: a negative size, one over --max-request-bytes, one that promises more
    // than it sends, an unknown API key, a frame too short for a header.
    for bytes in [
        (-5i32).to_be_bytes().to_vec(),
        0x7fff_ffffi32.to_be_bytes().to_vec(),
        {
            let mut v = 100_000_000i32.to_be_bytes().to_vec();
            v.extend_from_slice(&[0, 3, 0, 0]);
            v
        },
        raw_frame(999, 0, false, &[0; 8]),
        vec![0, 0, 0, 3, 0, 3, 0],
    ] {
        assert!(send_and_settle(&addr, &bytes), "{bytes:?}");
    }
    watcher.await_trips(1, "bad frames");

    // 4. Decompression bombs: under max.message.bytes (1 MiB) on the wire, 100.5 MiB
    // decompressed, past the 64 MiB cap. Refused with CORRUPT_MESSAGE before anything
    // is stored.
    let mut bomb = noise(512 << 10);
    bomb.extend(std::iter::repeat_n(0u8, 100 << 20));
    for codec in [Compression::Zstd, Compression::Gzip, Compression::Lz4] {
        let records = batch(&[NewRecord::value(bomb.clone(), 0)], codec, None);
        assert!(records.len() < 1_048_588, "{codec:?}: {}", records.len());
        let (code, message) = produce_error(&addr, "watched", records);
        assert_eq!(code, ErrorCode::CorruptMessage, "{codec:?}: {message}");
        assert!(
            message.contains("--max-decompressed-batch-bytes"),
            "{codec:?}: {message}"
        );
    }
    drop(bomb);
    watcher.await_trips(1, "decompression bombs");

    // 5. Partition counts: 2^31 - 1 partitions in one request, a topic grown to as
    // many, and one over --max-partitions-per-request (10,000 by default).
    let (code, message) = create_topics_error(&addr, "huge", i32::MAX);
    assert_eq!(code, ErrorCode::InvalidPartitions, "{message}");
    assert!(
        message.contains("--max-partitions-per-request"),
        "{message}"
    );
    let (code, _) = create_topics_error(&addr, "over", 10_001);
    assert_eq!(code, ErrorCode::InvalidPartitions);
    let (code, message) = create_partitions_error(&addr, "watched", i32::MAX);
    assert_eq!(code, ErrorCode::InvalidPartitions, "{message}");
    watcher.await_trips(1, "huge partition counts");

    // 6. The internal offsets topic (the watcher's commits created it) is the
    // coordinator's: no produce, delete, repartition or retention change.
    let records = batch(
        &[NewRecord::value(&b"forged"[..], 0)],
        Compression::None,
        None,
    );
    let (code, message) = produce_error(&addr, "__consumer_offsets", records);
    assert_eq!(code, ErrorCode::InvalidTopicException, "{message}");
    let mut req = DeleteTopicsRequest::default();
    let mut t = DeleteTopicState::default();
    t.name = Some(TopicName(s("__consumer_offsets")));
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let mut c = connect(&addr);
    c.write_all(&frame(ApiKey::DeleteTopics, 6, 5, &req))
        .unwrap();
    let (_, r): (i32, DeleteTopicsResponse) = response(read_frame(&mut c).unwrap(), 1, 6);
    assert_eq!(
        ErrorCode::from_code(r.responses[0].error_code).unwrap(),
        ErrorCode::InvalidTopicException
    );
    let (code, _) = create_partitions_error(&addr, "__consumer_offsets", 100);
    assert_eq!(code, ErrorCode::InvalidPartitions);
    let mut cfg = AlterableConfig::default();
    cfg.name = s("retention.ms");
    cfg.value = Some(s("1"));
    let mut res = AlterConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = s("__consumer_offsets");
    res.configs = vec![cfg];
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![res];
    let mut c = connect(&addr);
    c.write_all(&frame(ApiKey::IncrementalAlterConfigs, 1, 6, &req))
        .unwrap();
    let (_, r): (i32, IncrementalAlterConfigsResponse) =
        response(read_frame(&mut c).unwrap(), 1, 1);
    assert_eq!(
        ErrorCode::from_code(r.responses[0].error_code).unwrap(),
        ErrorCode::InvalidConfig
    );
    watcher.await_trips(1, "writes to the internal topic");

    // 7. 10,000 connections at once from another address: at most
    // --max-connections-per-ip (1,000) stay open, the rest are closed at accept, and
    // the watcher (on 127.0.0.1) carries on.
    let held = open_connections_from("127.0.0.2", &addr, 10_000);
    // What the broker admitted (its own gauge; the watcher's few connections come from
    // 127.0.0.1) and refused. The client's view alone cannot tell: a connection still
    // in the kernel's accept queue looks open to it.
    let admitted = metric(&broker, "strata_connections");
    let refused = metric(
        &broker,
        "strata_connections_refused_total{reason=\"max_connections_per_ip\"}",
    );
    assert!(
        (1_000.0..=1_020.0).contains(&admitted),
        "{admitted} connections admitted with 10,000 from one address ({} look open to it)",
        held.open
    );
    assert!(refused >= 1_000.0, "only {refused} connections refused");
    watcher.await_trips(2, "10,000 connections");
    drop(held);

    let peak_kib = status_kib(pid, "VmHWM");
    let trips = watcher.finish();
    eprintln!(
        "hostile suite: {sent} poisoned requests, {trips} round trips; broker RSS idle {} MiB, peak {} MiB",
        idle_kib / 1024,
        peak_kib / 1024
    );
    // The bombs are refused with a 64 KiB scratch buffer and the poisoned lengths
    // allocate nothing: the peak is the broker's own working set plus connection
    // buffers, not what any request claimed.
    assert!(
        peak_kib < idle_kib + 512 * 1024,
        "peak RSS {peak_kib} KiB against {idle_kib} KiB idle"
    );
}

/// A metric's value from the broker's /metrics (0 when absent).
fn metric(broker: &common::Broker, name: &str) -> f64 {
    broker
        .http_get("/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Connections held open by [`open_connections_from`].
struct Held {
    open: usize,
    _rt: tokio::runtime::Runtime,
    _streams: Vec<tokio::net::TcpStream>,
}

/// Opens `n` connections from `source` to `addr` at once; after a moment, counts those
/// the broker kept open (the others read EOF or a reset).
fn open_connections_from(source: &str, addr: &str, n: usize) -> Held {
    // The test process needs the descriptors too.
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let target: std::net::SocketAddr = addr.parse().unwrap();
    let src: std::net::SocketAddr = format!("{source}:0").parse().unwrap();
    let streams = rt.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            tasks.spawn(async move {
                let sock = tokio::net::TcpSocket::new_v4().ok()?;
                sock.bind(src).ok()?;
                tokio::time::timeout(Duration::from_secs(10), sock.connect(target))
                    .await
                    .ok()?
                    .ok()
            });
        }
        let mut out = Vec::new();
        while let Some(r) = tasks.join_next().await {
            if let Ok(Some(s)) = r {
                out.push(s);
            }
        }
        // Refused connections are closed by the broker at accept: give it a moment,
        // then keep only those still open.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut open = Vec::new();
        for s in out {
            let mut b = [0u8; 1];
            match s.try_read(&mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => open.push(s),
                _ => {}
            }
        }
        open
    });
    Held {
        open: streams.len(),
        _rt: rt,
        _streams: streams,
    }
}

/// --max-partitions-per-broker refuses a topic that would put the brokers over it on
/// average, with POLICY_VIOLATION naming the flag; within it, topics are created.
#[test]
fn partitions_per_broker_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &["--max-partitions-per-broker", "8"]);
    let (code, message) = create_topics_error(&broker.kafka, "first", 5);
    assert_eq!(code, ErrorCode::None, "{message}");
    let (code, message) = create_topics_error(&broker.kafka, "second", 5);
    assert_eq!(code, ErrorCode::PolicyViolation, "{message}");
    assert!(message.contains("--max-partitions-per-broker"), "{message}");
    let (code, message) = create_partitions_error(&broker.kafka, "first", 9);
    assert_eq!(code, ErrorCode::PolicyViolation, "{message}");
    let (code, message) = create_topics_error(&broker.kafka, "third", 3);
    assert_eq!(code, ErrorCode::None, "{message}");
}

/// A partition whose directory cannot be opened at restart (its segment file replaced
/// by a directory: unreadable even to root, which chmod 000 is not) is offline with
/// KAFKA_STORAGE_ERROR in Metadata, Produce and `strata topic describe`; the broker
/// starts, the topic's other partitions serve, and metadata keeps applying.
#[test]
fn one_bad_partition_stays_one_bad_partition() {
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let dir = tempfile::tempdir().unwrap();
    let mut broker = common::Broker::start(dir.path(), &[]);
    common::kafka::create_topic(&broker.kafka, "three", 3, &[]);
    for p in 0..3 {
        let records = batch(
            &[NewRecord::value(format!("before-{p}").into_bytes(), 0)],
            Compression::None,
            None,
        );
        assert_eq!(
            common::wire::produce(
                &broker.kafka,
                "three",
                p,
                1,
                records,
                Duration::from_secs(10)
            ),
            ErrorCode::None
        );
    }
    broker.stop();
    let bad = dir.path().join("three-1");
    let segment = std::fs::read_dir(&bad)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("a segment file");
    std::fs::remove_file(&segment).unwrap();
    std::fs::create_dir(&segment).unwrap();
    broker.restart();

    // Metadata: partition 1 says KAFKA_STORAGE_ERROR and names this broker offline.
    let mut c = connect(&broker.kafka);
    let mut all = MetadataRequest::default();
    all.topics = None;
    c.write_all(&frame(ApiKey::Metadata, 12, 1, &all)).unwrap();
    let (_, md): (i32, MetadataResponse) = response(read_frame(&mut c).unwrap(), 1, 12);
    let t = md
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.as_str()) == Some("three"))
        .expect("the topic");
    for p in &t.partitions {
        let code = ErrorCode::from_code(p.error_code).unwrap();
        if p.partition_index == 1 {
            assert_eq!(code, ErrorCode::KafkaStorageError);
            assert_eq!(p.offline_replicas.len(), 1);
        } else {
            assert_eq!(code, ErrorCode::None, "partition {}", p.partition_index);
        }
    }
    // Produce: the bad partition refuses with the reason, the others take records.
    let one = |v: &str| {
        batch(
            &[NewRecord::value(v.as_bytes().to_vec(), 0)],
            Compression::None,
            None,
        )
    };
    let (code, message) = {
        let mut req = produce_req("three", one("after-1"));
        req.topic_data[0].partition_data[0].index = 1;
        let mut c = connect(&broker.kafka);
        c.write_all(&frame(ApiKey::Produce, 9, 2, &req)).unwrap();
        let (_, r): (i32, ProduceResponse) = response(read_frame(&mut c).unwrap(), 1, 9);
        let p = &r.responses[0].partition_responses[0];
        (
            ErrorCode::from_code(p.error_code).unwrap(),
            p.error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default(),
        )
    };
    assert_eq!(code, ErrorCode::KafkaStorageError, "{message}");
    assert!(message.contains("offline"), "{message}");
    for p in [0, 2] {
        assert_eq!(
            common::wire::produce(
                &broker.kafka,
                "three",
                p,
                1,
                one("after"),
                Duration::from_secs(10)
            ),
            ErrorCode::None
        );
    }
    // A consumer reads the good partitions' records.
    let c: BaseConsumer =
        common::kafka::client_config(&broker.kafka, &[("group.id", "offline-reader")])
            .create()
            .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("three", 0, Offset::Beginning)
        .unwrap();
    tpl.add_partition_offset("three", 2, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 4 && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            got.push((
                m.partition(),
                String::from_utf8_lossy(m.payload().unwrap()).to_string(),
            ));
        }
    }
    got.sort();
    assert_eq!(
        got,
        vec![
            (0, "after".to_string()),
            (0, "before-0".to_string()),
            (2, "after".to_string()),
            (2, "before-2".to_string())
        ]
    );
    // The CLI shows it.
    let out = common::cli(&broker.kafka, &["topic", "describe", "three"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("no partition 1 in {text}"));
    assert!(line.contains("STORAGE-ERROR"), "{text}");
    // Metadata keeps applying: a new topic is created and served.
    common::kafka::create_topic(&broker.kafka, "later", 1, &[]);
    assert_eq!(
        common::wire::produce(
            &broker.kafka,
            "later",
            0,
            1,
            one("x"),
            Duration::from_secs(10)
        ),
        ErrorCode::None
    );
}

/// KIP-903: a fetch that claims to be a replica must come from a registered, unfenced
/// broker at its current epoch; otherwise it is refused whole (STALE_BROKER_EPOCH) and
/// moves no high-water mark. Real followers are covered by e2e_replication.
#[test]
fn replica_fetches_need_a_current_broker_epoch() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    common::kafka::create_topic(&broker.kafka, "fenced", 1, &[]);
    let records = batch(&[NewRecord::value(&b"x"[..], 0)], Compression::None, None);
    assert_eq!(
        common::wire::produce(
            &broker.kafka,
            "fenced",
            0,
            1,
            records,
            Duration::from_secs(10)
        ),
        ErrorCode::None
    );
    // Its topic is named by id from v13: look it up.
    let topic_id = {
        let mut md = kafka_protocol::messages::MetadataRequest::default();
        md.topics = None;
        let mut c = connect(&broker.kafka);
        c.write_all(&frame(ApiKey::Metadata, 12, 1, &md)).unwrap();
        let (_, md): (i32, kafka_protocol::messages::MetadataResponse) =
            response(read_frame(&mut c).unwrap(), 1, 12);
        md.topics
            .iter()
            .find(|t| t.name.as_ref().map(|n| n.as_str()) == Some("fenced"))
            .unwrap()
            .topic_id
    };
    let fetch = |version: i16, replica: i32, epoch: i64| -> FetchResponse {
        let mut fp = FetchPartition::default();
        fp.partition = 0;
        fp.fetch_offset = 1;
        fp.partition_max_bytes = 1 << 20;
        let mut t = FetchTopic::default();
        if version >= 13 {
            t.topic_id = topic_id;
        } else {
            t.topic = TopicName(s("fenced"));
        }
        t.partitions = vec![fp];
        let mut req = FetchRequest::default();
        if version >= 15 {
            req.replica_state.replica_id = BrokerId(replica);
            req.replica_state.replica_epoch = epoch;
        } else {
            // Before v15 a replica names itself in replica_id and sends no epoch.
            assert_eq!(epoch, -1);
            req.replica_id = BrokerId(replica);
        }
        req.max_wait_ms = 0;
        req.max_bytes = 1 << 20;
        req.topics = vec![t];
        let mut c = connect(&broker.kafka);
        c.write_all(&frame(ApiKey::Fetch, version, 9, &req))
            .unwrap();
        response(read_frame(&mut c).unwrap(), 1, version).1
    };
    for (version, replica, epoch) in [(15, 7, 1_000_000), (15, 1, 0), (12, 1, -1)] {
        let r = fetch(version, replica, epoch);
        assert_eq!(
            ErrorCode::from_code(r.error_code).unwrap(),
            ErrorCode::StaleBrokerEpoch,
            "v{version} replica {replica} epoch {epoch}"
        );
        assert!(r.responses.is_empty());
    }
    // A consumer's fetch still reads.
    let r = fetch(12, -1, -1);
    assert_eq!(r.error_code, 0);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 1);
}
