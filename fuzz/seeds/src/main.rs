//! Writes fuzz/corpus/<target>/ seed inputs from the real encoders. Run from anywhere:
//! `cargo run --manifest-path fuzz/seeds/Cargo.toml`. Files are named by what they hold;
//! `regress-*` files are hostile inputs that once crashed or allocated hugely, kept so
//! every run replays them first.

#[allow(dead_code)]
#[path = "../../../cold/tier/src/manifest.rs"]
mod manifest;

use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use strata_group::{
    CommittedOffset, GroupMetadataValue, StoredMember, group_metadata_record, group_tombstone,
    offset_commit_record, offset_tombstone,
};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

use strata_proto::api::SUPPORTED;

struct Out {
    dir: PathBuf,
    n: usize,
}

impl Out {
    fn new(root: &Path, target: &str) -> Out {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        // Regenerate the seeds, keep the regression inputs.
        for e in std::fs::read_dir(&dir).expect("read corpus dir").flatten() {
            if e.file_name().to_string_lossy().starts_with("seed-") {
                std::fs::remove_file(e.path()).expect("remove old seed");
            }
        }
        Out { dir, n: 0 }
    }
    fn seed(&mut self, name: &str, bytes: &[u8]) {
        self.write(&format!("seed-{name}"), bytes);
    }
    fn regress(&mut self, name: &str, bytes: &[u8]) {
        self.write(&format!("regress-{name}"), bytes);
    }
    fn write(&mut self, name: &str, bytes: &[u8]) {
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        std::fs::write(self.dir.join(name), bytes).expect("write seed");
        self.n += 1;
    }
}

fn s(v: &'static str) -> StrBytes {
    StrBytes::from_static_str(v)
}

fn topic(v: &'static str) -> TopicName {
    TopicName(s(v))
}

fn sample_records(n: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| NewRecord {
            key: (i % 2 == 0).then(|| Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(format!(
                "{{\"order\":{i},\"item\":\"widget\"}}"
            ))),
            headers: (0..i % 3)
                .map(|h| (format!("h{h}"), (h != 1).then(|| Bytes::from_static(b"v"))))
                .collect(),
            timestamp: 1_700_000_000_000 + i as i64 * 17,
        })
        .collect()
}

fn sample_batch(codec: Compression, n: usize) -> Bytes {
    batch(
        &sample_records(n),
        codec,
        Some(ProducerFields {
            producer_id: 4000,
            producer_epoch: 0,
            base_sequence: 0,
        }),
    )
}

/// A consumer's JoinGroup/SyncGroup subscription metadata (ConsumerProtocolSubscription v1).
fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1); // user data
    b.put_i32(0); // owned partitions
    b.freeze()
}

fn default_request(api: ApiKey) -> Option<RequestKind> {
    Some(match api {
        ApiKey::Produce => RequestKind::Produce(Default::default()),
        ApiKey::Fetch => RequestKind::Fetch(Default::default()),
        ApiKey::ListOffsets => RequestKind::ListOffsets(Default::default()),
        ApiKey::Metadata => RequestKind::Metadata(Default::default()),
        ApiKey::ApiVersions => RequestKind::ApiVersions(Default::default()),
        ApiKey::CreateTopics => RequestKind::CreateTopics(Default::default()),
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(Default::default()),
        ApiKey::InitProducerId => RequestKind::InitProducerId(Default::default()),
        ApiKey::DescribeConfigs => RequestKind::DescribeConfigs(Default::default()),
        ApiKey::AlterConfigs => RequestKind::AlterConfigs(Default::default()),
        ApiKey::CreatePartitions => RequestKind::CreatePartitions(Default::default()),
        ApiKey::IncrementalAlterConfigs => RequestKind::IncrementalAlterConfigs(Default::default()),
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(Default::default()),
        ApiKey::OffsetForLeaderEpoch => RequestKind::OffsetForLeaderEpoch(Default::default()),
        ApiKey::FindCoordinator => RequestKind::FindCoordinator(Default::default()),
        ApiKey::JoinGroup => RequestKind::JoinGroup(Default::default()),
        ApiKey::SyncGroup => RequestKind::SyncGroup(Default::default()),
        ApiKey::Heartbeat => RequestKind::Heartbeat(Default::default()),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(Default::default()),
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(Default::default()),
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(Default::default()),
        ApiKey::ListGroups => RequestKind::ListGroups(Default::default()),
        ApiKey::DescribeGroups => RequestKind::DescribeGroups(Default::default()),
        ApiKey::DeleteGroups => RequestKind::DeleteGroups(Default::default()),
        ApiKey::OffsetDelete => RequestKind::OffsetDelete(Default::default()),
        ApiKey::AddPartitionsToTxn => RequestKind::AddPartitionsToTxn(Default::default()),
        ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(Default::default()),
        ApiKey::EndTxn => RequestKind::EndTxn(Default::default()),
        ApiKey::WriteTxnMarkers => RequestKind::WriteTxnMarkers(Default::default()),
        ApiKey::TxnOffsetCommit => RequestKind::TxnOffsetCommit(Default::default()),
        ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(Default::default()),
        ApiKey::ListTransactions => RequestKind::ListTransactions(Default::default()),
        ApiKey::DescribeProducers => RequestKind::DescribeProducers(Default::default()),
        _ => return None,
    })
}

/// A request frame without its size prefix: header, then body.
fn request_frame(api: ApiKey, version: i16, body: &RequestKind) -> Option<Vec<u8>> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(s("rdkafka")))
        .encode(&mut buf, api.request_header_version(version))
        .ok()?;
    body.encode(&mut buf, version).ok()?;
    Some(buf.to_vec())
}

fn interesting_requests() -> Vec<(&'static str, ApiKey, Vec<i16>, RequestKind)> {
    let mut out = Vec::new();
    for codec in CODECS {
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(topic("orders"))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(sample_batch(codec, 5))),
                    ]),
            ]);
        let name = match codec {
            Compression::None => "produce-none",
            Compression::Gzip => "produce-gzip",
            Compression::Snappy => "produce-snappy",
            Compression::Lz4 => "produce-lz4",
            Compression::Zstd => "produce-zstd",
        };
        out.push((
            name,
            ApiKey::Produce,
            vec![3, 9, 11],
            RequestKind::Produce(req),
        ));
    }
    out.push((
        "metadata-topics",
        ApiKey::Metadata,
        vec![0, 4, 9, 12],
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(topic("orders"))),
            metadata_request::MetadataRequestTopic::default().with_name(Some(topic("events"))),
        ]))),
    ));
    out.push((
        "create-topics-configs",
        ApiKey::CreateTopics,
        vec![2, 5, 7],
        RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![
                    create_topics_request::CreatableTopic::default()
                        .with_name(topic("orders"))
                        .with_num_partitions(6)
                        .with_replication_factor(3)
                        .with_configs(vec![
                            create_topics_request::CreatableTopicConfig::default()
                                .with_name(s("retention.ms"))
                                .with_value(Some(s("604800000"))),
                            create_topics_request::CreatableTopicConfig::default()
                                .with_name(s("cleanup.policy"))
                                .with_value(Some(s("compact,delete"))),
                            create_topics_request::CreatableTopicConfig::default()
                                .with_name(s("segment.bytes"))
                                .with_value(Some(s("1048576"))),
                            create_topics_request::CreatableTopicConfig::default()
                                .with_name(s("remote.storage.enable"))
                                .with_value(Some(s("true"))),
                        ]),
                ]),
        ),
    ));
    out.push((
        "alter-configs",
        ApiKey::AlterConfigs,
        vec![0, 2],
        RequestKind::AlterConfigs(AlterConfigsRequest::default().with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("orders"))
                .with_configs(vec![
                    alter_configs_request::AlterableConfig::default()
                        .with_name(s("min.insync.replicas"))
                        .with_value(Some(s("2"))),
                    alter_configs_request::AlterableConfig::default()
                        .with_name(s("max.message.bytes"))
                        .with_value(Some(s("2097152"))),
                ]),
        ])),
    ));
    out.push((
        "incremental-alter-configs",
        ApiKey::IncrementalAlterConfigs,
        vec![0, 1],
        RequestKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsRequest::default().with_resources(vec![
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("orders"))
                    .with_configs(vec![
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s("segment.ms"))
                            .with_config_operation(0)
                            .with_value(Some(s("3600000"))),
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s("flush.messages"))
                            .with_config_operation(1),
                    ]),
            ]),
        ),
    ));
    out.push((
        "join-group",
        ApiKey::JoinGroup,
        vec![0, 5, 7],
        RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(GroupId(s("billing")))
                .with_session_timeout_ms(45_000)
                .with_rebalance_timeout_ms(300_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![
                    join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(s("range"))
                        .with_metadata(subscription(&["orders", "events"])),
                ]),
        ),
    ));
    out.push((
        "offset-commit",
        ApiKey::OffsetCommit,
        vec![2, 6, 8],
        RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s("billing")))
                .with_generation_id_or_member_epoch(3)
                .with_member_id(s("rdkafka-0b9a"))
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic("orders"))
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(1234)
                                .with_committed_metadata(Some(s("m"))),
                        ]),
                ]),
        ),
    ));
    out.push((
        "fetch",
        ApiKey::Fetch,
        vec![4, 11, 12, 16],
        RequestKind::Fetch(
            FetchRequest::default()
                .with_max_wait_ms(500)
                .with_max_bytes(52_428_800)
                .with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_topic(topic("orders"))
                        .with_partitions(vec![
                            fetch_request::FetchPartition::default()
                                .with_partition(0)
                                .with_fetch_offset(42)
                                .with_partition_max_bytes(1_048_576),
                        ]),
                ]),
        ),
    ));
    out
}

fn varint(buf: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn kafka_request(root: &Path) {
    let mut out = Out::new(root, "kafka_request");
    for &(api, min, max) in SUPPORTED {
        let body = default_request(api).expect("a supported api");
        for v in min..=max {
            if let Some(f) = request_frame(api, v, &body) {
                out.seed(&format!("{api:?}-v{v}-default"), &f);
            }
        }
    }
    for (name, api, versions, body) in interesting_requests() {
        for v in versions {
            if let Some(f) = request_frame(api, v, &body) {
                out.seed(&format!("{name}-v{v}"), &f);
            }
        }
    }

    // Issue 14: the 18-byte Metadata v0 request (4-byte size prefix, then these 14
    // bytes) whose topic array count is 0x7fffffff: the stock decoder reserved 154 GB.
    let mut m = Vec::new();
    m.extend_from_slice(&3i16.to_be_bytes()); // api key: Metadata
    m.extend_from_slice(&0i16.to_be_bytes()); // version 0
    m.extend_from_slice(&1i32.to_be_bytes()); // correlation id
    m.extend_from_slice(&(-1i16).to_be_bytes()); // client id: null
    m.extend_from_slice(&0x7fff_ffffi32.to_be_bytes()); // topic count
    assert_eq!(m.len() + 4, 18);
    out.regress("metadata-v0-topic-count-0x7fffffff", &m);
    // The same with a client id, as librdkafka sends it.
    let mut m = Vec::new();
    m.extend_from_slice(&3i16.to_be_bytes());
    m.extend_from_slice(&0i16.to_be_bytes());
    m.extend_from_slice(&1i32.to_be_bytes());
    m.extend_from_slice(&7i16.to_be_bytes());
    m.extend_from_slice(b"rdkafka");
    m.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    out.regress("metadata-v0-client-id-topic-count-0x7fffffff", &m);
    // Flexible Metadata v12: a compact array length varint of 0x7fffffff.
    let mut m = Vec::new();
    m.extend_from_slice(&3i16.to_be_bytes());
    m.extend_from_slice(&12i16.to_be_bytes());
    m.extend_from_slice(&1i32.to_be_bytes());
    m.extend_from_slice(&(-1i16).to_be_bytes());
    m.push(0); // header tagged fields
    varint(&mut m, 0x7fff_ffff);
    out.regress("metadata-v12-compact-topic-count-0x7fffffff", &m);
    // Produce v3: topic array count 0x7fffffff.
    let mut m = Vec::new();
    m.extend_from_slice(&0i16.to_be_bytes());
    m.extend_from_slice(&3i16.to_be_bytes());
    m.extend_from_slice(&1i32.to_be_bytes());
    m.extend_from_slice(&(-1i16).to_be_bytes());
    m.extend_from_slice(&(-1i16).to_be_bytes()); // transactional id
    m.extend_from_slice(&1i16.to_be_bytes()); // acks
    m.extend_from_slice(&1000i32.to_be_bytes()); // timeout
    m.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    out.regress("produce-v3-topic-count-0x7fffffff", &m);
    // Produce v3, one topic and partition whose records claim 0x7fffffff bytes.
    let mut m = Vec::new();
    m.extend_from_slice(&0i16.to_be_bytes());
    m.extend_from_slice(&3i16.to_be_bytes());
    m.extend_from_slice(&1i32.to_be_bytes());
    m.extend_from_slice(&(-1i16).to_be_bytes());
    m.extend_from_slice(&(-1i16).to_be_bytes());
    m.extend_from_slice(&1i16.to_be_bytes());
    m.extend_from_slice(&1000i32.to_be_bytes());
    m.extend_from_slice(&1i32.to_be_bytes());
    m.extend_from_slice(&1i16.to_be_bytes());
    m.push(b't');
    m.extend_from_slice(&1i32.to_be_bytes());
    m.extend_from_slice(&0i32.to_be_bytes());
    m.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    out.regress("produce-v3-records-length-0x7fffffff", &m);
    // A header whose client id overruns the frame.
    let mut m = Vec::new();
    m.extend_from_slice(&18i16.to_be_bytes());
    m.extend_from_slice(&3i16.to_be_bytes());
    m.extend_from_slice(&1i32.to_be_bytes());
    m.extend_from_slice(&0x7fffi16.to_be_bytes());
    m.extend_from_slice(b"abc");
    out.regress("api-versions-v3-client-id-overruns", &m);
    // CreateTopics v2 asking for 2^31-1 partitions of a topic (a limit, not a decode
    // problem: it must decode).
    let body = RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(topic("huge"))
            .with_num_partitions(i32::MAX)
            .with_replication_factor(1),
    ]));
    out.regress(
        "create-topics-v2-2-31-partitions",
        &request_frame(ApiKey::CreateTopics, 2, &body).expect("encodes"),
    );
    println!("kafka_request: {} files", out.n);
}

fn response_frame(api: ApiKey, version: i16, body: &ResponseKind) -> Option<Vec<u8>> {
    let mut buf = BytesMut::new();
    buf.put_i16(api as i16);
    buf.put_i16(version);
    ResponseHeader::default()
        .with_correlation_id(7)
        .encode(&mut buf, api.response_header_version(version))
        .ok()?;
    body.encode(&mut buf, version).ok()?;
    Some(buf.to_vec())
}

fn kafka_response(root: &Path) {
    let mut out = Out::new(root, "kafka_response");
    let defaults: Vec<(ApiKey, ResponseKind)> = vec![
        (ApiKey::Produce, ResponseKind::Produce(Default::default())),
        (ApiKey::Fetch, ResponseKind::Fetch(Default::default())),
        (
            ApiKey::ListOffsets,
            ResponseKind::ListOffsets(Default::default()),
        ),
        (ApiKey::Metadata, ResponseKind::Metadata(Default::default())),
        (
            ApiKey::ApiVersions,
            ResponseKind::ApiVersions(Default::default()),
        ),
        (
            ApiKey::CreateTopics,
            ResponseKind::CreateTopics(Default::default()),
        ),
        (
            ApiKey::InitProducerId,
            ResponseKind::InitProducerId(Default::default()),
        ),
        (
            ApiKey::OffsetForLeaderEpoch,
            ResponseKind::OffsetForLeaderEpoch(Default::default()),
        ),
        (
            ApiKey::FindCoordinator,
            ResponseKind::FindCoordinator(Default::default()),
        ),
        (
            ApiKey::DescribeCluster,
            ResponseKind::DescribeCluster(Default::default()),
        ),
    ];
    for (api, body) in &defaults {
        let r = api.valid_versions();
        for v in [r.min, (r.min + r.max) / 2, r.max] {
            if let Some(f) = response_frame(*api, v, body) {
                out.seed(&format!("{api:?}-v{v}-default"), &f);
            }
        }
    }
    for codec in CODECS {
        let mut records = sample_batch(codec, 4).to_vec();
        records.extend_from_slice(&sample_batch(codec, 2));
        let body = ResponseKind::Fetch(FetchResponse::default().with_responses(vec![
                fetch_response::FetchableTopicResponse::default()
                    .with_topic(topic("orders"))
                    .with_partitions(vec![fetch_response::PartitionData::default()
                        .with_partition_index(0)
                        .with_high_watermark(6)
                        .with_records(Some(Bytes::from(records)))]),
            ]));
        for v in [4, 12, 16] {
            if let Some(f) = response_frame(ApiKey::Fetch, v, &body) {
                out.seed(&format!("fetch-{codec:?}-v{v}"), &f);
            }
        }
    }
    let body = ResponseKind::ApiVersions(
        ApiVersionsResponse::default().with_api_keys(
            SUPPORTED
                .iter()
                .map(|(k, lo, hi)| {
                    api_versions_response::ApiVersion::default()
                        .with_api_key(*k as i16)
                        .with_min_version(*lo)
                        .with_max_version(*hi)
                })
                .collect(),
        ),
    );
    for v in [0, 3, 4] {
        if let Some(f) = response_frame(ApiKey::ApiVersions, v, &body) {
            out.seed(&format!("api-versions-full-v{v}"), &f);
        }
    }
    println!("kafka_response: {} files", out.n);
}

fn record_batch(root: &Path) {
    let mut out = Out::new(root, "record_batch");
    for codec in CODECS {
        out.seed(&format!("{codec:?}-1"), &sample_batch(codec, 1));
        out.seed(&format!("{codec:?}-7"), &sample_batch(codec, 7));
        let mut two = batch(&sample_records(3), codec, None).to_vec();
        two.extend_from_slice(&sample_batch(codec, 2));
        out.seed(&format!("{codec:?}-two-batches"), &two);
    }
    // A LogAppendTime batch with a moved base offset and epoch, as stored in a segment.
    let mut b = sample_batch(Compression::Lz4, 3).to_vec();
    strata_proto::batch::set_base_offset(&mut b, 1_000_000);
    strata_proto::batch::set_partition_leader_epoch(&mut b, 5);
    strata_proto::batch::set_log_append_time(&mut b, 1_700_000_001_000);
    out.seed("lz4-log-append-time", &b);
    // A bomb per codec: 4 MiB of zeros, past the fuzz targets' 256 KiB cap.
    let zeros = vec![0u8; 4 << 20];
    for codec in [Compression::Gzip, Compression::Zstd, Compression::Lz4] {
        let one = NewRecord::value(Bytes::from(zeros.clone()), 1_700_000_000_000);
        out.seed(&format!("{codec:?}-bomb-4MiB"), &batch(&[one], codec, None));
    }

    // The codecs on their own: first byte picks None/Gzip/Snappy/Lz4/Zstd (0..=4).
    let data = b"{\"order\":1,\"item\":\"widget\"} {\"order\":2,\"item\":\"gadget\"}".repeat(8);
    let mut raw = vec![0u8];
    raw.extend_from_slice(&data);
    out.seed("codec-none", &raw);
    let mut gz = flate2::write::GzEncoder::new(vec![1u8], flate2::Compression::default());
    gz.write_all(&data).expect("gzip");
    out.seed("codec-gzip", &gz.finish().expect("gzip"));
    let mut sn = vec![2u8];
    sn.extend_from_slice(
        &snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("snappy"),
    );
    out.seed("codec-snappy-raw", &sn);
    let mut sj = vec![2u8];
    sj.extend_from_slice(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01");
    let block = snap::raw::Encoder::new()
        .compress_vec(&data)
        .expect("snappy");
    sj.extend_from_slice(&(block.len() as u32).to_be_bytes());
    sj.extend_from_slice(&block);
    out.seed("codec-snappy-java", &sj);
    let mut lz = lz4::EncoderBuilder::new().build(vec![3u8]).expect("lz4");
    lz.write_all(&data).expect("lz4");
    let (lz, r) = lz.finish();
    r.expect("lz4");
    out.seed("codec-lz4", &lz);
    let mut zs = vec![4u8];
    zs.extend_from_slice(&zstd::stream::encode_all(&data[..], 3).expect("zstd"));
    out.seed("codec-zstd", &zs);
    // A raw snappy block claiming 4 GiB.
    out.regress(
        "codec-snappy-claims-4GiB",
        &[2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00],
    );
    // Found by the fuzzer: a valid batch (the base offset is not CRC-covered) at base
    // offset i64::MAX; `last_offset()`/`next_offset()` and the record offsets overflow.
    let mut b = batch(&sample_records(2), Compression::None, None).to_vec();
    strata_proto::batch::set_base_offset(&mut b, i64::MAX);
    out.regress("base-offset-i64-max", &b);
    println!("record_batch: {} files", out.n);
}

fn chunked(parts: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(&(p.len() as u16).to_be_bytes());
        v.extend_from_slice(p);
    }
    v
}

fn seg(base: i64, next: i64, epoch: i32, n: u128) -> manifest::RemoteSegment {
    manifest::RemoteSegment {
        base_offset: base,
        next_offset: next,
        size_bytes: ((next - base) * 120) as u64,
        max_timestamp: 1_700_000_000_000 + next,
        leader_epoch: epoch,
        id: uuid::Uuid::from_u128(0x5f1e_0000_0000_4000_8000_0000_0000_0000 | n),
        has_producer_state: n % 2 == 0,
        has_leader_epochs: n % 3 == 0,
        has_txn_index: n % 5 == 0,
        committed_at_ms: 1_700_000_100_000 + n as i64,
    }
}

fn tier_manifest(root: &Path) {
    use manifest::{Delta, Manifest, ManifestOp};
    let mut out = Out::new(root, "tier_manifest");
    let mut m = Manifest::new();
    let mut deltas = Vec::new();
    let ops = [
        vec![ManifestOp::Add(seg(0, 1000, 1, 1))],
        vec![ManifestOp::Add(seg(1000, 2500, 1, 2))],
        vec![
            ManifestOp::Add(seg(2500, 2600, 2, 3)),
            ManifestOp::Add(seg(2600, 4000, 2, 4)),
        ],
        vec![ManifestOp::AdvanceStart {
            log_start_offset: 1200,
        }],
        vec![ManifestOp::Add(seg(4000, 4100, 3, 5))],
    ];
    for (i, ops) in ops.into_iter().enumerate() {
        let d = Delta {
            seq: i as u64 + 1,
            ops,
        };
        m.apply_delta(&d).expect("seed deltas apply");
        deltas.push(d.encode());
    }
    let empty = Manifest::new().encode_snapshot();
    let snap = m.encode_snapshot();
    let dref: Vec<&[u8]> = deltas.iter().map(Vec::as_slice).collect();
    // From no snapshot (an unreadable one), replaying every delta.
    let mut parts: Vec<&[u8]> = vec![&empty];
    parts.extend(&dref);
    out.seed("empty-snapshot-then-5-deltas", &chunked(&parts));
    out.seed("snapshot-at-5", &chunked(&[&snap]));
    // A snapshot at 3 and the two deltas after it.
    let mut m3 = Manifest::new();
    for d in &deltas[..3] {
        m3.apply_delta(&Delta::decode(d).expect("decodes"))
            .expect("applies");
    }
    let snap3 = m3.encode_snapshot();
    out.seed(
        "snapshot-at-3-then-2-deltas",
        &chunked(&[&snap3, dref[3], dref[4]]),
    );
    // A fenced leader's delta (stale epoch) after the snapshot: skipped.
    let fenced = Delta {
        seq: 6,
        ops: vec![ManifestOp::Add(seg(4100, 4200, 1, 6))],
    }
    .encode();
    let next = Delta {
        seq: 7,
        ops: vec![ManifestOp::Add(seg(4100, 4300, 4, 7))],
    }
    .encode();
    out.seed("snapshot-fenced-delta", &chunked(&[&snap, &fenced, &next]));
    // Names and the catalog descriptor (cold/tier/src/catalog.rs writes it pretty).
    let descriptor = serde_json::to_vec_pretty(&serde_json::json!({
        "version": 1,
        "cluster_id": "c0ffee00c0ffee00c0ffee00c0ffee00",
        "topic": "orders",
        "topic_id": "5f1e0000000040008000000000000001",
        "partitions": 6,
        "configs": {"remote.storage.enable": "true", "retention.ms": "604800000"},
    }))
    .expect("json");
    out.seed(
        "names-and-descriptor",
        &chunked(&[
            &empty,
            manifest::delta_name(42).as_bytes(),
            manifest::snapshot_name(256).as_bytes(),
            b"orders-5f1e0000000040008000000000000001",
            b"00000000000000001000-1-5f1e0000000040008000000000000002.timeindex",
            &descriptor,
        ]),
    );
    // Found by the fuzzer: a snapshot whose segment sizes sum past u64::MAX
    // (`Manifest::total_bytes` overflows; remote retention by size uses it).
    let mut big = Manifest::new();
    for (i, (b, n)) in [(0, 10), (10, 20)].into_iter().enumerate() {
        let mut s = seg(b, n, 1, i as u128);
        s.size_bytes = u64::MAX;
        big.apply(&ManifestOp::Add(s)).expect("applies");
    }
    out.regress(
        "segment-sizes-overflow-u64",
        &chunked(&[&big.encode_snapshot()]),
    );
    println!("tier_manifest: {} files", out.n);
}

fn offsets_records(root: &Path) {
    let mut out = Out::new(root, "offsets_records");
    fn rec(buf: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
        buf.push(value.is_some() as u8);
        buf.extend_from_slice(&(key.len() as u16).to_be_bytes());
        buf.extend_from_slice(key);
        if let Some(v) = value {
            buf.extend_from_slice(&(v.len() as u16).to_be_bytes());
            buf.extend_from_slice(v);
        }
    }
    let offset = |o: i64, meta: Option<&str>| CommittedOffset {
        offset: o,
        leader_epoch: 3,
        metadata: meta.map(str::to_string),
        commit_timestamp_ms: 1_700_000_000_000 + o,
    };
    let member = |id: &str, instance: Option<&str>, topics: &[&str]| {
        StoredMember {
        member_id: id.to_string(),
        group_instance_id: instance.map(str::to_string),
        client_id: "rdkafka".to_string(),
        client_host: "/127.0.0.1".to_string(),
        rebalance_timeout_ms: 300_000,
        session_timeout_ms: 45_000,
        subscription: subscription(topics),
        assignment: Bytes::from_static(b"\x00\x01\x00\x00\x00\x01\x00\x06orders\x00\x00\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff"),
    }
    };
    let stable = GroupMetadataValue {
        protocol_type: "consumer".to_string(),
        generation_id: 4,
        protocol_name: Some("range".to_string()),
        leader: Some("rdkafka-a".to_string()),
        current_state_timestamp_ms: 1_700_000_000_000,
        members: vec![
            member("rdkafka-a", None, &["orders"]),
            member("rdkafka-b", Some("worker-2"), &["orders", "events"]),
        ],
    };
    let emptied = GroupMetadataValue {
        protocol_type: "consumer".to_string(),
        generation_id: 5,
        protocol_name: None,
        leader: None,
        current_state_timestamp_ms: 1_700_000_050_000,
        members: vec![],
    };

    let mut log = Vec::new();
    for p in 0..3 {
        let (k, v) = offset_commit_record("billing", "orders", p, &offset(100 + p as i64, None));
        rec(&mut log, &k, Some(&v));
    }
    let (k, v) = group_metadata_record("billing", &stable);
    rec(&mut log, &k, Some(&v));
    let (k, v) = offset_commit_record("billing", "orders", 0, &offset(250, Some("checkpoint")));
    rec(&mut log, &k, Some(&v));
    rec(&mut log, &offset_tombstone("billing", "orders", 2), None);
    out.seed("stable-group-with-offsets", &log);

    let mut log = Vec::new();
    let (k, v) = group_metadata_record("audit", &stable);
    rec(&mut log, &k, Some(&v));
    let (k, v) = group_metadata_record("audit", &emptied);
    rec(&mut log, &k, Some(&v));
    rec(&mut log, &group_tombstone("audit"), None);
    out.seed("group-stable-empty-deleted", &log);

    // Older value versions, hand-encoded as Kafka's older brokers wrote them.
    let mut log = Vec::new();
    let key = {
        let mut k = vec![0, 0];
        k.extend_from_slice(&(6i16).to_be_bytes());
        k.extend_from_slice(b"legacy");
        k.extend_from_slice(&(6i16).to_be_bytes());
        k.extend_from_slice(b"orders");
        k.extend_from_slice(&4i32.to_be_bytes());
        k
    };
    for version in 0i16..=2 {
        let mut v = version.to_be_bytes().to_vec();
        v.extend_from_slice(&77i64.to_be_bytes());
        v.extend_from_slice(&0i16.to_be_bytes());
        v.extend_from_slice(&1_600_000_000_000i64.to_be_bytes());
        if version == 1 {
            v.extend_from_slice(&1_600_086_400_000i64.to_be_bytes());
        }
        rec(&mut log, &key, Some(&v));
    }
    // A group metadata value v0 (no rebalance timeout, no timestamps, no instance ids).
    let mut v = 0i16.to_be_bytes().to_vec();
    for s in ["consumer"] {
        v.extend_from_slice(&(s.len() as i16).to_be_bytes());
        v.extend_from_slice(s.as_bytes());
    }
    v.extend_from_slice(&2i32.to_be_bytes());
    v.extend_from_slice(&5i16.to_be_bytes());
    v.extend_from_slice(b"range");
    v.extend_from_slice(&3i16.to_be_bytes());
    v.extend_from_slice(b"m-1");
    v.extend_from_slice(&1i32.to_be_bytes());
    for s in ["m-1", "client", "/10.0.0.1"] {
        v.extend_from_slice(&(s.len() as i16).to_be_bytes());
        v.extend_from_slice(s.as_bytes());
    }
    v.extend_from_slice(&10_000i32.to_be_bytes());
    let sub = subscription(&["orders"]);
    v.extend_from_slice(&(sub.len() as i32).to_be_bytes());
    v.extend_from_slice(&sub);
    v.extend_from_slice(&(-1i32).to_be_bytes());
    let mut k = 2i16.to_be_bytes().to_vec();
    k.extend_from_slice(&6i16.to_be_bytes());
    k.extend_from_slice(b"legacy");
    rec(&mut log, &k, Some(&v));
    out.seed("legacy-value-versions", &log);

    // Found by the fuzzer: one member id twice, under two instance ids. Replay restores a
    // group whose static mapping "worker-1" points at a member that now has "worker-2".
    let dup = GroupMetadataValue {
        members: vec![
            member("rdkafka-a", Some("worker-1"), &["orders"]),
            member("rdkafka-a", Some("worker-2"), &["orders"]),
        ],
        ..stable.clone()
    };
    let mut log = Vec::new();
    let (k, v) = group_metadata_record("billing", &dup);
    rec(&mut log, &k, Some(&v));
    out.regress("duplicate-member-id", &log);
    println!("offsets_records: {} files", out.n);
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus");
    kafka_request(&root);
    kafka_response(&root);
    record_batch(&root);
    tier_manifest(&root);
    offsets_records(&root);
}
