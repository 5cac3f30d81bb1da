//! Raw Kafka wire requests, for what a client library will not send or hides.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use strata_proto::ErrorCode;

pub fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

pub fn frame<R: Encodable + HeaderVersion>(
    api: ApiKey,
    version: i16,
    correlation: i32,
    req: &R,
) -> Vec<u8> {
    let mut h = RequestHeader::default();
    h.request_api_key = api as i16;
    h.request_api_version = version;
    h.correlation_id = correlation;
    h.client_id = Some(StrBytes::from_static_str("e2e-protocol"));
    let mut body = BytesMut::new();
    h.encode(&mut body, R::header_version(version)).unwrap();
    req.encode(&mut body, version).unwrap();
    let mut out = Vec::with_capacity(body.len() + 4);
    out.put_i32(body.len() as i32);
    out.extend_from_slice(&body);
    out
}

/// Reads one response frame; `None` if the broker closed the connection.
pub fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let mut len = [0u8; 4];
    if s.read_exact(&mut len).is_err() {
        return None;
    }
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).ok()?;
    Some(Bytes::from(buf))
}

pub fn response<R: Decodable>(mut b: Bytes, header_version: i16, version: i16) -> (i32, R) {
    let h = ResponseHeader::decode(&mut b, header_version).unwrap();
    let r = R::decode(&mut b, version).unwrap();
    assert_eq!(b.remaining(), 0, "the whole response was consumed");
    (h.correlation_id, r)
}

pub fn produce_req(topic: &str, records: Bytes) -> ProduceRequest {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.acks = 1;
    r.timeout_ms = 5000;
    r.topic_data = vec![t];
    r
}

/// Produces `records` to one partition with `acks`, waiting up to `timeout`; the
/// partition's error code.
pub fn produce(
    addr: &str,
    topic: &str,
    partition: i32,
    acks: i16,
    records: Bytes,
    timeout: Duration,
) -> ErrorCode {
    let mut req = produce_req(topic, records);
    req.acks = acks;
    req.timeout_ms = timeout.as_millis() as i32;
    req.topic_data[0].partition_data[0].index = partition;
    let mut s = connect(addr);
    s.set_read_timeout(Some(timeout + Duration::from_secs(10)))
        .unwrap();
    s.write_all(&frame(ApiKey::Produce, 9, 1, &req)).unwrap();
    let (_, r): (i32, ProduceResponse) =
        response(read_frame(&mut s).expect("produce answer"), 1, 9);
    ErrorCode::from_code(r.responses[0].partition_responses[0].error_code).unwrap()
}

/// ListOffsets v7 (latest) for partitions `0..partitions` of `topic` in one request:
/// each partition's error code and end offset, in partition order.
pub fn end_offsets(addr: &str, topic: &str, partitions: i32) -> Vec<(ErrorCode, i64)> {
    try_end_offsets(addr, topic, partitions).expect("an answer")
}

/// [`end_offsets`], or `None` if nothing listens at `addr` or the connection closes
/// before the answer (a broker starting or stopping).
pub fn try_end_offsets(addr: &str, topic: &str, partitions: i32) -> Option<Vec<(ErrorCode, i64)>> {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, ListOffsetsResponse};
    let mut t = ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = (0..partitions)
        .map(|p| {
            let mut part = ListOffsetsPartition::default();
            part.partition_index = p;
            part.timestamp = -1;
            part
        })
        .collect();
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&frame(ApiKey::ListOffsets, 7, 1, &req)).ok()?;
    let (_, r): (i32, ListOffsetsResponse) = response(read_frame(&mut s)?, 1, 7);
    let mut parts: Vec<_> = r.topics[0]
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition_index,
                ErrorCode::from_code(p.error_code).unwrap(),
                p.offset,
            )
        })
        .collect();
    parts.sort_by_key(|p| p.0);
    assert_eq!(
        parts.len(),
        partitions as usize,
        "an answer for every partition"
    );
    Some(parts.into_iter().map(|(_, e, o)| (e, o)).collect())
}
