//! Every Kafka response a peer can send us: the replica fetcher and hot/client decode
//! other brokers' answers (issue 14: lengths bounded by the frame there too). Input:
//! api key (i16), api version (i16) — what the client asked with — then the response
//! frame without its length prefix (response header, then body).
//!
//! A fetch response's records are what a follower appends: they go through the same
//! batch checks as a produce request's.
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: strata_fuzz::init(),
    |data: &[u8]| {
        if data.len() < 4 {
            return;
        }
        let key = i16::from_be_bytes([data[0], data[1]]);
        let version = i16::from_be_bytes([data[2], data[3]]);
        let Ok(api) = ApiKey::try_from(key) else {
            return;
        };
        let known = api.valid_versions();
        if version < known.min || version > known.max {
            return;
        }
        let mut frame = Bytes::copy_from_slice(&data[4..]);
        if ResponseHeader::decode(&mut frame, api.response_header_version(version)).is_err() {
            return;
        }
        let Ok(resp) = ResponseKind::decode(api, &mut frame, version) else {
            return;
        };
        if let ResponseKind::Fetch(f) = &resp {
            for t in &f.responses {
                for p in &t.partitions {
                    if let Some(records) = &p.records {
                        strata_fuzz::check_batches(records);
                    }
                }
            }
        }
    }
);
