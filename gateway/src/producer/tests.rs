//! The producer's idempotence rules against a scripted broker in-process (a
//! `LocalBroker` answering real Kafka frames): what each Produce attempt carried
//! (producer id, sequence, records) for each outcome the broker can give.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse as InitResp;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, BrokerId, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use super::*;

/// What the broker does with the next Produce request.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Append (error 0) or refuse with this code.
    Answer(i16),
    /// Append, then lose the connection before answering.
    AppendThenDrop,
}

/// One batch as the broker received it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    partition: i32,
    producer_id: i64,
    base_sequence: i32,
    count: i32,
}

#[derive(Default)]
struct Fake {
    script: VecDeque<Step>,
    seen: Vec<Seen>,
    next_producer_id: i64,
    next_offset: HashMap<i32, i64>,
}

struct FakeBroker(Mutex<Fake>);

fn frame<R: Encodable + HeaderVersion>(
    correlation: i32,
    api: ApiKey,
    version: i16,
    r: &R,
) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i32(0);
    let mut h = ResponseHeader::default();
    h.correlation_id = correlation;
    h.encode(&mut b, api.response_header_version(version))
        .unwrap();
    r.encode(&mut b, version).unwrap();
    let n = (b.len() - 4) as i32;
    b[0..4].copy_from_slice(&n.to_be_bytes());
    b.freeze()
}

impl FakeBroker {
    fn handle(&self, mut f: Bytes) -> Option<Bytes> {
        let api = ApiKey::try_from(i16::from_be_bytes([f[0], f[1]])).unwrap();
        let version = i16::from_be_bytes([f[2], f[3]]);
        let h = RequestHeader::decode(&mut f, api.request_header_version(version)).unwrap();
        let c = h.correlation_id;
        let mut st = self.0.lock().unwrap();
        match api {
            ApiKey::InitProducerId => {
                st.next_producer_id += 1;
                let mut r = InitResp::default();
                r.producer_id = kafka_protocol::messages::ProducerId(st.next_producer_id);
                Some(frame(c, api, version, &r))
            }
            ApiKey::Metadata => {
                let mut r = MetadataResponse::default();
                let mut b = MetadataResponseBroker::default();
                b.node_id = BrokerId(1);
                b.host = StrBytes::from_static_str("local");
                r.brokers.push(b);
                let mut t = MetadataResponseTopic::default();
                t.name = Some(TopicName(StrBytes::from_static_str("t")));
                for i in 0..2 {
                    let mut p = MetadataResponsePartition::default();
                    p.partition_index = i;
                    p.leader_id = BrokerId(1);
                    t.partitions.push(p);
                }
                r.topics.push(t);
                Some(frame(c, api, version, &r))
            }
            ApiKey::Produce => {
                let req = ProduceRequest::decode(&mut f, version).unwrap();
                let step = st.script.pop_front().unwrap_or(Step::Answer(0));
                let mut resp = ProduceResponse::default();
                for t in req.topic_data {
                    let mut tr = TopicProduceResponse::default();
                    tr.name = t.name.clone();
                    for p in t.partition_data {
                        let records = p.records.unwrap();
                        let bh = strata_proto::batch::parse_header(&records).unwrap();
                        st.seen.push(Seen {
                            partition: p.index,
                            producer_id: bh.producer_id,
                            base_sequence: bh.base_sequence,
                            count: bh.record_count,
                        });
                        let code = match step {
                            Step::Answer(code) => code,
                            Step::AppendThenDrop => 0,
                        };
                        let mut pr = PartitionProduceResponse::default();
                        pr.index = p.index;
                        pr.error_code = code;
                        pr.log_append_time_ms = -1;
                        if code == 0 {
                            let next = st.next_offset.entry(p.index).or_default();
                            pr.base_offset = *next;
                            *next += i64::from(bh.record_count);
                        } else {
                            pr.base_offset = -1;
                        }
                        tr.partition_responses.push(pr);
                    }
                    resp.responses.push(tr);
                }
                match step {
                    Step::AppendThenDrop => None,
                    Step::Answer(_) => Some(frame(c, api, version, &resp)),
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

impl LocalBroker for FakeBroker {
    fn call(&self, frame: Bytes) -> Pin<Box<dyn Future<Output = Option<Bytes>> + Send>> {
        let r = self.handle(frame);
        Box::pin(std::future::ready(r))
    }
}

use std::future::Future;
use std::pin::Pin;

fn start(script: &[Step], delivery_timeout: Duration) -> (NativeProducer, Arc<FakeBroker>) {
    let fake = Arc::new(FakeBroker(Mutex::new(Fake {
        script: script.iter().copied().collect(),
        ..Fake::default()
    })));
    let p = NativeProducer::start(ProducerConfig {
        local: Some(LocalLeader {
            node_id: 1,
            broker: fake.clone(),
        }),
        delivery_timeout,
        ..ProducerConfig::new("local:0")
    });
    (p, fake)
}

fn records(n: usize, size: usize) -> Vec<ProduceRecord> {
    (0..n)
        .map(|i| ProduceRecord {
            partition: Some(0),
            value: Some(vec![i as u8; size]),
            ..ProduceRecord::default()
        })
        .collect()
}

fn seen(f: &FakeBroker) -> Vec<Seen> {
    f.0.lock().unwrap().seen.clone()
}

fn offsets(r: &[Result<Produced, ServiceError>]) -> Vec<i64> {
    r.iter().map(|x| x.as_ref().unwrap().offset).collect()
}

#[tokio::test]
async fn a_retried_batch_keeps_its_producer_id_and_sequence() {
    let (p, f) = start(
        &[Step::Answer(6), Step::AppendThenDrop],
        Duration::from_secs(30),
    );
    let r = p.produce("t", 2, records(3, 10)).await;
    // Refused, then appended but unanswered, then answered: the broker saw the same
    // producer id and sequence three times (and deduplicates the third).
    assert!(r.iter().all(Result::is_ok), "{r:?}");
    let s = seen(&f);
    assert_eq!(s.len(), 3, "{s:?}");
    assert!(s.iter().all(|x| x == &s[0]), "{s:?}");
    assert_eq!((s[0].base_sequence, s[0].count), (0, 3));
    // The next request continues the sequence.
    p.produce("t", 2, records(2, 10)).await;
    let s = seen(&f);
    assert_eq!(
        (s[3].producer_id, s[3].base_sequence),
        (s[0].producer_id, 3)
    );
}

#[tokio::test]
async fn not_enough_replicas_fails_after_three_retries_and_keeps_the_sequence() {
    let (p, f) = start(&[Step::Answer(19); 4], Duration::from_secs(30));
    let r = p.produce("t", 2, records(2, 10)).await;
    assert!(
        r.iter()
            .all(|x| x.as_ref().err().map(|e| e.code) == Some(19)),
        "{r:?}"
    );
    assert_eq!(seen(&f).len(), 4, "the first attempt and three retries");
    // Refused means not appended: the next batch reuses the sequence.
    let r = p.produce("t", 2, records(1, 10)).await;
    assert_eq!(offsets(&r), vec![0]);
    let s = seen(&f);
    assert_eq!(
        (s[4].producer_id, s[4].base_sequence),
        (s[0].producer_id, 0)
    );
}

#[tokio::test]
async fn an_unknown_outcome_that_fails_retires_the_producer_id() {
    let script = [Step::AppendThenDrop; 100];
    let (p, f) = start(&script, Duration::from_millis(400));
    let r = p.produce("t", 2, records(2, 10)).await;
    assert!(r.iter().all(Result::is_err), "{r:?}");
    f.0.lock().unwrap().script.clear();
    // The failed batch may be in the log: the next one must not be taken for its
    // duplicate, so it comes from a new producer id, at sequence 0.
    let r = p.produce("t", 2, records(2, 10)).await;
    assert!(r.iter().all(Result::is_ok), "{r:?}");
    let s = seen(&f);
    let last = s.last().unwrap();
    assert_ne!(last.producer_id, s[0].producer_id);
    assert_eq!(last.base_sequence, 0);
}

#[tokio::test]
async fn a_refused_sequence_is_sent_again_under_a_new_producer_id() {
    let (p, f) = start(
        &[Step::Answer(0), Step::Answer(45)],
        Duration::from_secs(30),
    );
    p.produce("t", 2, records(2, 10)).await;
    let r = p.produce("t", 2, records(3, 10)).await;
    assert_eq!(offsets(&r), vec![2, 3, 4]);
    let s = seen(&f);
    assert_eq!(s.len(), 3);
    assert_eq!(s[1].base_sequence, 2);
    assert_ne!(s[2].producer_id, s[1].producer_id);
    assert_eq!((s[2].base_sequence, s[2].count), (0, 3));
}

#[tokio::test]
async fn a_batch_over_the_limit_is_split_in_order_with_its_sequence() {
    let (p, f) = start(&[Step::Answer(10)], Duration::from_secs(30));
    let r = p.produce("t", 2, records(8, 100)).await;
    assert_eq!(offsets(&r), (0..8).collect::<Vec<_>>());
    let s = seen(&f);
    assert_eq!(s[0].count, 8);
    let resent: Vec<(i32, i32)> = s[1..].iter().map(|x| (x.base_sequence, x.count)).collect();
    assert!(resent.len() >= 2, "{resent:?}");
    let mut next = 0;
    for (seq, count) in &resent {
        assert_eq!(*seq, next, "{resent:?}");
        next += count;
    }
    assert_eq!(next, 8);
    assert!(s.iter().all(|x| x.producer_id == s[0].producer_id));
}

#[tokio::test]
async fn keyed_records_follow_murmur2_and_bad_partitions_fail_alone() {
    let (p, f) = start(&[], Duration::from_secs(30));
    let mut rs = vec![ProduceRecord {
        partition: Some(7),
        value: Some(b"x".to_vec()),
        ..ProduceRecord::default()
    }];
    for k in ["a", "b", "c", "d"] {
        rs.push(ProduceRecord {
            key: Some(k.as_bytes().to_vec()),
            value: Some(b"v".to_vec()),
            ..ProduceRecord::default()
        });
    }
    let r = p.produce("t", 2, rs).await;
    assert_eq!(
        r[0].as_ref().unwrap_err().code,
        codes::UNKNOWN_TOPIC_OR_PARTITION
    );
    for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
        assert_eq!(
            r[i + 1].as_ref().unwrap().partition,
            partition_for_key(k.as_bytes(), 2)
        );
    }
    assert_eq!(seen(&f).iter().map(|s| s.count).sum::<i32>(), 4);
}
