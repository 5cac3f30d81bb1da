//! strata-tier's parsers of what it reads back from the bucket: manifest snapshot and
//! delta objects (cold/tier/src/manifest.rs, binary with a CRC-32C trailer), manifest
//! object names, and the layout's topic-directory and segment-object names
//! (cold/tier/src/layout.rs), plus the topic descriptor JSON of the catalog.
//!
//! manifest.rs and layout.rs are compiled here from their own source files (`#[path]`),
//! since they are sans-IO and need only strata-proto, uuid, crc32c and thiserror: a
//! dependency on strata-tier would pull object_store, aws-lc, foyer and tokio into the
//! fuzz build. The catalog's `TopicDescriptor` lives in catalog.rs next to the store
//! IO, so a same-shaped stand-in is parsed instead (what is real in it is the JSON
//! parser and strata_proto's `TopicId` deserializer).
//!
//! Input: chunks, each a big-endian u16 length then that many bytes. The first chunk is
//! a snapshot, the rest deltas, replayed as `manifest_store::load` does (in sequence, a
//! fenced leader's delta skipped); every chunk is also parsed as each kind of object
//! name and as a descriptor. The replay runs twice: on the chunks as given and with
//! each chunk's CRC trailer fixed up, so the fuzzer gets past the CRC.
#![no_main]

#[allow(dead_code)]
#[path = "../../cold/tier/src/manifest.rs"]
mod manifest;

#[allow(dead_code)]
#[path = "../../cold/tier/src/layout.rs"]
mod layout;

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use manifest::{Delta, Manifest, ManifestError, ManifestOp};

/// The shape of `strata_tier::catalog::TopicDescriptor` (cold/tier/src/catalog.rs).
#[allow(dead_code)]
#[derive(Debug, serde::Deserialize)]
struct TopicDescriptor {
    version: u32,
    cluster_id: String,
    topic: String,
    topic_id: strata_proto::TopicId,
    partitions: i32,
    configs: BTreeMap<String, String>,
}

fn chunks(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = u16::from_be_bytes([data[0], data[1]]) as usize;
        let rest = &data[2..];
        let take = len.min(rest.len());
        out.push(&rest[..take]);
        data = &rest[take..];
    }
    out
}

fn with_fixed_crc(chunk: &[u8]) -> Vec<u8> {
    let mut v = chunk.to_vec();
    if v.len() >= 4 {
        let body = v.len() - 4;
        let crc = crc32c::crc32c(&v[..body]);
        v[body..].copy_from_slice(&crc.to_be_bytes());
    }
    v
}

fn check_manifest(m: &Manifest) {
    let again = Manifest::decode_snapshot(&m.encode_snapshot()).expect("own snapshot decodes");
    assert_eq!(&again, m, "snapshot round trip");
    let _ = (
        m.len(),
        m.is_empty(),
        m.seq(),
        m.max_epoch(),
        m.total_bytes(),
    );
    let (start, end) = (m.log_start_offset(), m.end_offset());
    for s in m.segments() {
        let _ = s.object_stem();
        for o in [
            s.base_offset,
            s.next_offset.wrapping_sub(1),
            s.base_offset.wrapping_sub(1),
        ] {
            if let Some(found) = m.find_offset(o) {
                assert!(found.contains(o));
            }
        }
        let _ = m.find_timestamp(s.max_timestamp);
        let _ = m.next_segment(s);
        let _ = m.segments_below(s.next_offset);
        if let (Some(a), Some(b)) = (start, end) {
            let _ = m.covers(a, b);
        }
    }
}

/// `manifest_store::load` after the listing: the snapshot, then each delta in sequence.
fn replay(snapshot: &[u8], deltas: &[Vec<u8>]) {
    let mut m = match Manifest::decode_snapshot(snapshot) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.to_string();
            Manifest::new()
        }
    };
    check_manifest(&m);
    for bytes in deltas {
        let Ok(delta) = Delta::decode(bytes) else {
            continue;
        };
        assert_eq!(
            Delta::decode(&delta.encode()).as_ref(),
            Ok(&delta),
            "delta round trip"
        );
        // load() only reads the delta after the manifest's sequence number.
        if m.seq().checked_add(1) != Some(delta.seq) {
            continue;
        }
        let mut trial = m.clone();
        match delta.ops.iter().try_for_each(|op| trial.apply(op)) {
            Ok(()) => {
                m.apply_delta(&delta)
                    .expect("a delta whose ops apply applies");
                assert_eq!(m.segments(), trial.segments());
            }
            Err(ManifestError::StaleEpoch { .. }) => m.skip_delta(delta.seq),
            Err(_) => break,
        }
        check_manifest(&m);
        let _ = delta
            .ops
            .iter()
            .filter(|o| matches!(o, ManifestOp::Add(_)))
            .count();
    }
}

fuzz_target!(|data: &[u8]| {
    let parts = chunks(data);
    for c in &parts {
        if let Ok(s) = std::str::from_utf8(c) {
            if let Some(o) = manifest::parse_object_name(s) {
                let name = match o {
                    manifest::ManifestObject::Delta(n) => manifest::delta_name(n),
                    manifest::ManifestObject::Snapshot(n) => manifest::snapshot_name(n),
                };
                assert_eq!(manifest::parse_object_name(&name), Some(o));
            }
            if let Some((topic, id)) = layout::parse_topic_dir(s) {
                let _ = layout::topic_descriptor("c", &topic, id);
            }
            let _ = layout::segment_stem(s);
        }
        if let Ok(d) = serde_json::from_slice::<TopicDescriptor>(c) {
            let _ = (d.topic_id.to_string(), d.configs.len());
        }
    }
    if let Some((first, rest)) = parts.split_first() {
        let deltas: Vec<Vec<u8>> = rest.iter().map(|d| d.to_vec()).collect();
        replay(first, &deltas);
        let fixed: Vec<Vec<u8>> = rest.iter().map(|d| with_fixed_crc(d)).collect();
        replay(&with_fixed_crc(first), &fixed);
    }
});
