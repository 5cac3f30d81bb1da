//! Every Kafka request the broker decodes, as `dispatch` in hot/broker/src/api/mod.rs
//! does it. Input: one request frame without its length prefix, i.e. api key (i16),
//! api version (i16), the rest of the request header, then the body.
//!
//! The header is decoded at the header version the api key and version call for (the
//! broker does so before it checks the version); the body is decoded for every api key
//! at every version kafka-protocol knows (a superset of what the broker accepts), and
//! ApiVersions at any version, as the broker answers it. Past the decoder, what the
//! broker does first with the parts clients control is run too: a produce request's
//! record batches (framing, CRC, codecs, records) and CreateTopics/AlterConfigs topic
//! configs.
//!
//! Under `-malloc_limit_mb`, an allocation sized by a count or length on the wire
//! rather than by the bytes received is a crash (issue 14: an 18-byte Metadata v0
//! request with a topic count of 0x7fffffff made the broker abort on 154 GB).
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;

use strata_proto::api::SUPPORTED;

fuzz_target!(
    init: {
        strata_fuzz::init();
        for (api, min, max) in SUPPORTED {
            let known = api.valid_versions();
            assert!(known.min <= *min && *max <= known.max, "{api:?} {min}..={max} vs {known:?}");
        }
    },
    |data: &[u8]| {
        if data.len() < 4 {
            return;
        }
        let key = i16::from_be_bytes([data[0], data[1]]);
        let version = i16::from_be_bytes([data[2], data[3]]);
        let Ok(api) = ApiKey::try_from(key) else {
            return;
        };
        let mut frame = Bytes::copy_from_slice(data);
        let header_version = api.request_header_version(version);
        let Ok(header) = RequestHeader::decode(&mut frame, header_version) else {
            return;
        };
        assert_eq!((header.request_api_key, header.request_api_version), (key, version));
        let _ = header.client_id.as_ref().map(|s| s.to_string());
        drop(header);

        let known = api.valid_versions();
        if version < known.min || version > known.max {
            if api == ApiKey::ApiVersions {
                // The broker answers an ApiVersions from the future without decoding it;
                // the decoder must still refuse it cleanly.
                let _ = RequestKind::decode(api, &mut frame, version);
            }
            return;
        }
        let Ok(req) = RequestKind::decode(api, &mut frame, version) else {
            return;
        };
        match &req {
            RequestKind::Produce(p) => {
                for t in &p.topic_data {
                    for part in &t.partition_data {
                        if let Some(records) = &part.records {
                            strata_fuzz::check_batches(records);
                        }
                    }
                }
            }
            RequestKind::CreateTopics(c) => {
                for t in &c.topics {
                    strata_fuzz::check_topic_configs(
                        t.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())),
                    );
                }
            }
            RequestKind::AlterConfigs(a) => {
                for r in &a.resources {
                    strata_fuzz::check_topic_configs(
                        r.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())),
                    );
                }
            }
            RequestKind::IncrementalAlterConfigs(a) => {
                for r in &a.resources {
                    strata_fuzz::check_topic_configs(
                        r.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())),
                    );
                }
            }
            _ => {}
        }
    }
);
