//! Every request this broker decodes, at every version it accepts, with each length
//! field in turn replaced by 0x7fffffff, -2, a frame-overrunning count or a huge
//! varint: `parse_request` answers with an error (or a valid decode) and allocates no
//! more than a small multiple of the frame's size. Before kafka-protocol was patched
//! (vendor/kafka-protocol), the 18-byte Metadata request below aborted the process on a
//! 154 GB allocation.
//!
//! One test in its own binary: the counting allocator below sees every thread, so
//! nothing else may run beside it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use strata_broker::api::{SUPPORTED, parse_request};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// What one decode may allocate in all: a small multiple of the frame (decoded
/// structures are larger than their wire form: a two-byte string becomes a 32-byte
/// handle in a 100-byte struct) plus the error message.
fn budget(frame_len: usize) -> usize {
    64 * frame_len + (16 << 10)
}

fn frame_of<R: Encodable + HeaderVersion>(api: ApiKey, version: i16, req: &R) -> Option<Bytes> {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    header.client_id = Some(StrBytes::from_static_str("hostile"));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, R::header_version(version)).ok()?;
    req.encode(&mut buf, version).ok()?;
    Some(buf.freeze())
}

/// Requests worth mutating for `api`: the default one and, for the APIs with nested
/// arrays, one with an element at each level, so inner lengths are reached too.
fn samples(api: ApiKey, version: i16) -> Vec<Bytes> {
    let topic = || TopicName(StrBytes::from_static_str("t"));
    macro_rules! defaults {
        ($($k:ident => $t:ident),* $(,)?) => {
            match api {
                $(ApiKey::$k => frame_of(api, version, &$t::default()),)*
                _ => None,
            }
        };
    }
    let mut out: Vec<Bytes> = defaults! {
        Produce => ProduceRequest, Fetch => FetchRequest, ListOffsets => ListOffsetsRequest,
        Metadata => MetadataRequest, ApiVersions => ApiVersionsRequest,
        CreateTopics => CreateTopicsRequest, DeleteTopics => DeleteTopicsRequest,
        InitProducerId => InitProducerIdRequest, DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest, CreatePartitions => CreatePartitionsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
        DescribeCluster => DescribeClusterRequest,
        OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
        FindCoordinator => FindCoordinatorRequest, JoinGroup => JoinGroupRequest,
        SyncGroup => SyncGroupRequest, Heartbeat => HeartbeatRequest,
        LeaveGroup => LeaveGroupRequest, OffsetCommit => OffsetCommitRequest,
        OffsetFetch => OffsetFetchRequest, ListGroups => ListGroupsRequest,
        DescribeGroups => DescribeGroupsRequest, DeleteGroups => DeleteGroupsRequest,
        OffsetDelete => OffsetDeleteRequest,
        AddPartitionsToTxn => AddPartitionsToTxnRequest, AddOffsetsToTxn => AddOffsetsToTxnRequest,
        EndTxn => EndTxnRequest, WriteTxnMarkers => WriteTxnMarkersRequest,
        TxnOffsetCommit => TxnOffsetCommitRequest,
        DescribeTransactions => DescribeTransactionsRequest,
        ListTransactions => ListTransactionsRequest,
        DescribeProducers => DescribeProducersRequest,
        SaslHandshake => SaslHandshakeRequest, SaslAuthenticate => SaslAuthenticateRequest,
        DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
        AlterUserScramCredentials => AlterUserScramCredentialsRequest,
        DescribeAcls => DescribeAclsRequest, CreateAcls => CreateAclsRequest,
        DeleteAcls => DeleteAclsRequest,
        DescribeClientQuotas => DescribeClientQuotasRequest,
        AlterClientQuotas => AlterClientQuotasRequest,
        DeleteRecords => DeleteRecordsRequest, DescribeLogDirs => DescribeLogDirsRequest,
        ElectLeaders => ElectLeadersRequest,
        AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
        ListPartitionReassignments => ListPartitionReassignmentsRequest,
        UnregisterBroker => UnregisterBrokerRequest,
    }
    .into_iter()
    .collect();
    let nested = match api {
        ApiKey::Produce => {
            let mut p = produce_request::PartitionProduceData::default();
            p.records = Some(Bytes::from_static(&[0u8; 16]));
            let mut t = produce_request::TopicProduceData::default();
            t.name = topic();
            t.partition_data = vec![p];
            let mut r = ProduceRequest::default();
            r.topic_data = vec![t];
            frame_of(api, version, &r)
        }
        ApiKey::Fetch => {
            let mut t = fetch_request::FetchTopic::default();
            t.topic = topic();
            t.partitions = vec![fetch_request::FetchPartition::default()];
            let mut r = FetchRequest::default();
            r.topics = vec![t];
            frame_of(api, version, &r)
        }
        ApiKey::Metadata => {
            let mut t = metadata_request::MetadataRequestTopic::default();
            t.name = Some(topic());
            let mut r = MetadataRequest::default();
            r.topics = Some(vec![t]);
            frame_of(api, version, &r)
        }
        ApiKey::CreateTopics => {
            let mut c = create_topics_request::CreatableTopicConfig::default();
            c.name = StrBytes::from_static_str("segment.bytes");
            c.value = Some(StrBytes::from_static_str("1"));
            let mut a = create_topics_request::CreatableReplicaAssignment::default();
            a.broker_ids = vec![BrokerId(1)];
            let mut t = create_topics_request::CreatableTopic::default();
            t.name = topic();
            t.configs = vec![c];
            t.assignments = vec![a];
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![t];
            frame_of(api, version, &r)
        }
        ApiKey::OffsetCommit => {
            let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
            t.name = topic();
            t.partitions = vec![offset_commit_request::OffsetCommitRequestPartition::default()];
            let mut r = OffsetCommitRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g"));
            r.topics = vec![t];
            frame_of(api, version, &r)
        }
        ApiKey::WriteTxnMarkers => {
            let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
            t.name = topic();
            t.partition_indexes = vec![0, 1];
            let mut m = write_txn_markers_request::WritableTxnMarker::default();
            m.topics = vec![t];
            let mut r = WriteTxnMarkersRequest::default();
            r.markers = vec![m];
            frame_of(api, version, &r)
        }
        ApiKey::TxnOffsetCommit => {
            let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
            t.name = topic();
            t.partitions =
                vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()];
            let mut r = TxnOffsetCommitRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g"));
            r.topics = vec![t];
            frame_of(api, version, &r)
        }
        ApiKey::AddPartitionsToTxn => {
            let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
            t.name = topic();
            t.partitions = vec![0, 1];
            let mut r = AddPartitionsToTxnRequest::default();
            if version >= 4 {
                let mut x = add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
                x.topics = vec![t];
                r.transactions = vec![x];
            } else {
                r.v3_and_below_topics = vec![t];
            }
            frame_of(api, version, &r)
        }
        ApiKey::DeleteRecords => {
            let mut p = delete_records_request::DeleteRecordsPartition::default();
            p.offset = 5;
            let mut t = delete_records_request::DeleteRecordsTopic::default();
            t.name = topic();
            t.partitions = vec![p];
            let mut r = DeleteRecordsRequest::default();
            r.topics = vec![t];
            frame_of(api, version, &r)
        }
        ApiKey::DescribeLogDirs => {
            let mut t = describe_log_dirs_request::DescribableLogDirTopic::default();
            t.topic = topic();
            t.partitions = vec![0, 1];
            let mut r = DescribeLogDirsRequest::default();
            r.topics = Some(vec![t]);
            frame_of(api, version, &r)
        }
        ApiKey::ElectLeaders => {
            let mut t = elect_leaders_request::TopicPartitions::default();
            t.topic = topic();
            t.partitions = vec![0, 1];
            let mut r = ElectLeadersRequest::default();
            r.topic_partitions = Some(vec![t]);
            frame_of(api, version, &r)
        }
        ApiKey::AlterPartitionReassignments => {
            let mut p = alter_partition_reassignments_request::ReassignablePartition::default();
            p.replicas = Some(vec![BrokerId(1), BrokerId(2)]);
            let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
            t.name = topic();
            t.partitions = vec![p];
            let mut r = AlterPartitionReassignmentsRequest::default();
            r.topics = vec![t];
            frame_of(api, version, &r)
        }
        ApiKey::ListPartitionReassignments => {
            let mut t =
                list_partition_reassignments_request::ListPartitionReassignmentsTopics::default();
            t.name = topic();
            t.partition_indexes = vec![0, 1];
            let mut r = ListPartitionReassignmentsRequest::default();
            r.topics = Some(vec![t]);
            frame_of(api, version, &r)
        }
        ApiKey::JoinGroup => {
            let mut p = join_group_request::JoinGroupRequestProtocol::default();
            p.name = StrBytes::from_static_str("range");
            p.metadata = Bytes::from_static(b"meta");
            let mut r = JoinGroupRequest::default();
            r.protocols = vec![p];
            frame_of(api, version, &r)
        }
        _ => None,
    };
    out.extend(nested);
    out
}

/// Values written over each position in turn: lengths an attacker would pick.
fn poisons() -> Vec<Vec<u8>> {
    vec![
        0x7fff_ffffu32.to_be_bytes().to_vec(), // INT32 count / length
        (-2i32).to_be_bytes().to_vec(),        // negative, not null
        0x7fffu16.to_be_bytes().to_vec(),      // INT16 string length
        0x0010_0000u32.to_be_bytes().to_vec(), // overruns a small frame
        vec![0xff, 0xff, 0xff, 0xff, 0x0f],    // varint 2^32-1 (compact lengths)
        vec![0xff, 0xff, 0xff, 0x7f],          // varint 2^28-1
    ]
}

fn check(frame: Bytes, what: &str) {
    let len = frame.len();
    let region = Region::new(GLOBAL);
    let result = parse_request(frame);
    drop(result);
    let allocated = region.change().bytes_allocated;
    assert!(
        allocated <= budget(len),
        "{what}: decoding a {len}-byte frame allocated {allocated} bytes (budget {})",
        budget(len)
    );
}

#[test]
fn no_length_on_the_wire_makes_a_decode_allocate_beyond_the_frame() {
    // The 18-byte Metadata v0 request of issue 14 (with its size prefix): header (api
    // 3, v0, correlation 1, null client id), then a topic count of 0x7fffffff.
    let mut f = BytesMut::new();
    f.put_i16(3);
    f.put_i16(0);
    f.put_i32(1);
    f.put_i16(-1);
    f.put_i32(0x7fff_ffff);
    let f = f.freeze();
    assert_eq!(4 + f.len(), 18);
    check(f.clone(), "the 18-byte Metadata v0 request");
    assert!(parse_request(f).is_err());

    let mut checked = 0usize;
    for &(api, min, max) in SUPPORTED {
        for version in min..=max {
            let frames = samples(api, version);
            assert!(!frames.is_empty(), "no sample for {api:?} v{version}");
            for frame in frames {
                // Every position past the api key and version (those pick the decoder).
                for at in 4..frame.len() {
                    for poison in poisons() {
                        let mut m = frame.to_vec();
                        let end = (at + poison.len()).min(m.len());
                        m[at..end].copy_from_slice(&poison[..end - at]);
                        check(
                            Bytes::from(m.clone()),
                            &format!("{api:?} v{version} at {at}"),
                        );
                        // The same, cut short right after the poison.
                        m.truncate(end);
                        check(Bytes::from(m), &format!("{api:?} v{version} cut at {end}"));
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "only {checked} mutations");
}
