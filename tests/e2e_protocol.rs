//! Bad input on the wire: malformed frames, unknown APIs, corrupt batches, oversized
//! records, unknown topics. Each gets its Kafka error code or a closed connection, never
//! a panic or a hang, and other connections keep working.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::wire::{connect, frame, produce_req, read_frame, response};

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, ErrorCode};

fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0))
        || matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

fn still_serving(addr: &str) {
    let mut s = connect(addr);
    s.write_all(&frame(
        ApiKey::Metadata,
        12,
        99,
        &MetadataRequest::default(),
    ))
    .unwrap();
    let (c, r): (i32, MetadataResponse) =
        response(read_frame(&mut s).expect("metadata answer"), 1, 12);
    assert_eq!(c, 99);
    assert_eq!(r.brokers.len(), 1);
}

fn produce_error(addr: &str, topic: &str, records: Bytes) -> (ErrorCode, Option<String>) {
    let mut s = connect(addr);
    s.write_all(&frame(ApiKey::Produce, 9, 7, &produce_req(topic, records)))
        .unwrap();
    let (c, r): (i32, ProduceResponse) =
        response(read_frame(&mut s).expect("produce answer"), 1, 9);
    assert_eq!(c, 7);
    let p = &r.responses[0].partition_responses[0];
    (
        ErrorCode::from_code(p.error_code).unwrap(),
        p.error_message.as_ref().map(|m| m.to_string()),
    )
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let addr = broker.kafka.as_str();

    // A connection held open across all of this keeps working.
    let mut bystander = connect(addr);

    // Negative length.
    let mut s = connect(addr);
    s.write_all(&(-5i32).to_be_bytes()).unwrap();
    assert!(
        closed(&mut s),
        "negative frame length closes the connection"
    );

    // A length over socket.request.max.bytes.
    let mut s = connect(addr);
    s.write_all(&(500_000_000i32).to_be_bytes()).unwrap();
    assert!(closed(&mut s), "oversized frame closes the connection");

    // A truncated request: the frame promises more than arrives, then the client leaves.
    let mut s = connect(addr);
    let full = frame(ApiKey::Metadata, 12, 1, &MetadataRequest::default());
    s.write_all(&full[..full.len() - 3]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed(&mut s));

    // A complete frame whose body is cut short of what the request needs.
    let mut s = connect(addr);
    let mut body = full[4..full.len() - 3].to_vec();
    let mut short = (body.len() as i32).to_be_bytes().to_vec();
    short.append(&mut body);
    s.write_all(&short).unwrap();
    assert!(
        closed(&mut s),
        "an undecodable request closes the connection"
    );

    // A frame too short for a header.
    let mut s = connect(addr);
    s.write_all(&[0, 0, 0, 2, 0, 1]).unwrap();
    assert!(closed(&mut s));

    // An unknown API key.
    let mut s = connect(addr);
    let mut f = frame(ApiKey::Metadata, 12, 1, &MetadataRequest::default());
    f[4..6].copy_from_slice(&9999i16.to_be_bytes());
    s.write_all(&f).unwrap();
    assert!(closed(&mut s), "an unknown API key closes the connection");

    // A known API at a version we do not speak (Produce v2 needs message format v1).
    let mut s = connect(addr);
    let mut f = frame(ApiKey::Metadata, 12, 1, &MetadataRequest::default());
    f[6..8].copy_from_slice(&99i16.to_be_bytes());
    s.write_all(&f).unwrap();
    assert!(closed(&mut s));

    // The bystander and new connections are unaffected.
    bystander
        .write_all(&frame(
            ApiKey::ApiVersions,
            3,
            5,
            &ApiVersionsRequest::default(),
        ))
        .unwrap();
    let (c, r): (i32, ApiVersionsResponse) = response(read_frame(&mut bystander).unwrap(), 0, 3);
    assert_eq!((c, r.error_code), (5, 0));
    still_serving(addr);
}

#[test]
fn api_versions_from_the_future_gets_unsupported_version_in_v0() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let mut s = connect(&broker.kafka);
    let mut f = frame(ApiKey::ApiVersions, 3, 42, &ApiVersionsRequest::default());
    f[6..8].copy_from_slice(&77i16.to_be_bytes());
    s.write_all(&f).unwrap();
    let (c, r): (i32, ApiVersionsResponse) = response(read_frame(&mut s).unwrap(), 0, 0);
    assert_eq!(c, 42);
    assert_eq!(r.error_code, ErrorCode::UnsupportedVersion.code());
    let produce = r
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Produce as i16)
        .expect("lists produce");
    assert!(produce.min_version >= 3 && produce.max_version >= 9);
    // The connection stays usable: the client retries with a version we speak.
    s.write_all(&frame(
        ApiKey::ApiVersions,
        3,
        43,
        &ApiVersionsRequest::default(),
    ))
    .unwrap();
    let (c, r): (i32, ApiVersionsResponse) = response(read_frame(&mut s).unwrap(), 0, 3);
    assert_eq!((c, r.error_code), (43, 0));
}

#[test]
fn bad_batches_get_their_kafka_error_codes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let addr = broker.kafka.as_str();
    common::kafka::create_topic(addr, "small", 1, &[("max.message.bytes", "1000")]);

    let good = batch(&[NewRecord::value("hello", 1)], Compression::None, None);
    // A bad CRC.
    let mut bad = good.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let (code, msg) = produce_error(addr, "small", Bytes::from(bad));
    assert_eq!(code, ErrorCode::CorruptMessage, "{msg:?}");
    assert!(msg.unwrap().contains("CRC"));
    // A record larger than max.message.bytes.
    let big = batch(
        &[NewRecord::value(vec![7u8; 4000], 1)],
        Compression::None,
        None,
    );
    let (code, _) = produce_error(addr, "small", big);
    assert_eq!(code, ErrorCode::MessageTooLarge);
    // A batch with a wrong length field.
    let mut bad = good.to_vec();
    bad[8..12].copy_from_slice(&10_000i32.to_be_bytes());
    let (code, _) = produce_error(addr, "small", Bytes::from(bad));
    assert_eq!(code, ErrorCode::CorruptMessage);
    // Message format v1 (magic 1).
    let mut bad = good.to_vec();
    bad[16] = 1;
    let (code, _) = produce_error(addr, "small", Bytes::from(bad));
    assert_eq!(code, ErrorCode::UnsupportedForMessageFormat);
    // Two batches in one partition's records.
    let mut two = good.to_vec();
    two.extend_from_slice(&good);
    let (code, _) = produce_error(addr, "small", Bytes::from(two));
    assert_eq!(code, ErrorCode::InvalidRecord);
    // An unknown topic: Produce never creates one (only Metadata does, as Kafka's).
    let (code, _) = produce_error(addr, "no-such-topic", good.clone());
    assert_eq!(code, ErrorCode::UnknownTopicOrPartition);
    // Nothing of the above reached the log; the good batch still appends at offset 0.
    let mut s = connect(addr);
    s.write_all(&frame(ApiKey::Produce, 9, 8, &produce_req("small", good)))
        .unwrap();
    let (_, r): (i32, ProduceResponse) = response(read_frame(&mut s).unwrap(), 1, 9);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0));
    still_serving(addr);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let addr = broker.kafka.as_str();
    common::kafka::create_topic(addr, "pipe", 1, &[]);
    let mut s = connect(addr);
    let mut all = Vec::new();
    for i in 0..50 {
        let b = batch(
            &[NewRecord::value(format!("r{i}"), 1)],
            Compression::None,
            None,
        );
        all.extend(frame(ApiKey::Produce, 9, 1000 + i, &produce_req("pipe", b)));
        all.extend(frame(
            ApiKey::Metadata,
            12,
            2000 + i,
            &MetadataRequest::default(),
        ));
    }
    s.write_all(&all).unwrap();
    for i in 0..50 {
        let (c, r): (i32, ProduceResponse) = response(read_frame(&mut s).unwrap(), 1, 9);
        assert_eq!(c, 1000 + i);
        // Appended in request order.
        assert_eq!(r.responses[0].partition_responses[0].base_offset, i as i64);
        let (c, _): (i32, MetadataResponse) = response(read_frame(&mut s).unwrap(), 1, 12);
        assert_eq!(c, 2000 + i);
    }
    // acks=0 produce gets no answer at all: the next answer is the metadata one.
    let mut req = produce_req(
        "pipe",
        batch(&[NewRecord::value("silent", 1)], Compression::None, None),
    );
    req.acks = 0;
    let mut both = frame(ApiKey::Produce, 9, 3000, &req);
    both.extend(frame(
        ApiKey::Metadata,
        12,
        3001,
        &MetadataRequest::default(),
    ));
    s.write_all(&both).unwrap();
    let (c, _): (i32, MetadataResponse) = response(read_frame(&mut s).unwrap(), 1, 12);
    assert_eq!(c, 3001);
}

#[test]
fn config_changes_are_validated_with_invalid_config() {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = common::Broker::start(dir.path(), &[]);
    let addr = broker.kafka.as_str();
    common::kafka::create_topic(addr, "cfg", 1, &[("retention.ms", "5000")]);
    let change = |key: &str, op: i8, value: Option<&str>| {
        let mut c = AlterableConfig::default();
        c.name = StrBytes::from_string(key.into());
        c.config_operation = op;
        c.value = value.map(|v| StrBytes::from_string(v.into()));
        let mut r = AlterConfigsResource::default();
        r.resource_type = 2;
        r.resource_name = StrBytes::from_static_str("cfg");
        r.configs = vec![c];
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources = vec![r];
        let mut s = connect(addr);
        s.write_all(&frame(ApiKey::IncrementalAlterConfigs, 1, 1, &req))
            .unwrap();
        let (_, resp): (i32, IncrementalAlterConfigsResponse) =
            response(read_frame(&mut s).unwrap(), 1, 1);
        (
            ErrorCode::from_code(resp.responses[0].error_code).unwrap(),
            resp.responses[0]
                .error_message
                .as_ref()
                .map(|m| m.to_string()),
        )
    };
    let (code, msg) = change("min.insync.replicas", 0, Some("0"));
    assert_eq!(code, ErrorCode::InvalidConfig);
    assert!(msg.unwrap().contains("min.insync.replicas"));
    assert_eq!(
        change("no.such.key", 0, Some("1")).0,
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        change("retention.ms", 2, Some("1")).0,
        ErrorCode::InvalidConfig,
        "APPEND needs a list"
    );
    assert_eq!(
        change("cleanup.policy", 2, Some("compact")).0,
        ErrorCode::None
    );
    assert_eq!(
        change("segment.bytes", 0, Some("2000000")).0,
        ErrorCode::None
    );
    // SET and APPEND kept the earlier override.
    let admin = common::kafka::admin(addr);
    let r = futures::executor::block_on(admin.describe_configs(
        [&rdkafka::admin::ResourceSpecifier::Topic("cfg")],
        &rdkafka::admin::AdminOptions::new(),
    ))
    .unwrap();
    let res = r.into_iter().next().unwrap().unwrap();
    assert_eq!(
        res.get("retention.ms").unwrap().value.as_deref(),
        Some("5000")
    );
    assert_eq!(
        res.get("cleanup.policy").unwrap().value.as_deref(),
        Some("delete,compact")
    );
    assert_eq!(
        res.get("segment.bytes").unwrap().value.as_deref(),
        Some("2000000")
    );
}
