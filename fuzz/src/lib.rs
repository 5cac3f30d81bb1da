//! Checks shared by the fuzz targets in `fuzz_targets/`.
//!
//! The targets run under libFuzzer with `-rss_limit_mb` and `-malloc_limit_mb` (see
//! `fuzz/run`): a panic, an abort, or one allocation above the malloc limit is a crash.
//! Inputs are small (a few KiB), so an allocation that large can only come from a length
//! or count read off the input, never from the input's own size.

use std::collections::BTreeMap;

use strata_proto::TopicConfig;
use strata_proto::batch::{self, RecordBatch};
use strata_proto::compression;

/// The decompressed-size cap the batch checks run with: far below the broker's default
/// (64 MiB), so a decompression bomb costs a fuzz iteration a fraction of a millisecond;
/// what is checked is that the cap holds, whatever its value.
pub const DECOMPRESSED_CAP: usize = 256 << 10;

/// Sets the process-wide cap of [`RecordBatch::records`] to [`DECOMPRESSED_CAP`].
pub fn init() {
    compression::set_max_decompressed_bytes(DECOMPRESSED_CAP);
}

/// What the broker does with a produce request's (or a fetched response's) records:
/// frame every batch, validate it, check its decompressed size, decompress it and walk
/// its records. Each framed batch is checked twice: as it came, and with its CRC fixed
/// up (CRC-32C over `attributes..end`, as strata_proto computes it), so the fuzzer gets
/// past the CRC into the codecs and the record parser.
pub fn check_batches(buf: &[u8]) {
    walk(buf);
    let mut fixed = buf.to_vec();
    if fix_crcs(&mut fixed) && fixed != buf {
        walk(&fixed);
    }
}

/// Rewrites the CRC of every batch that frames in `buf`; whether any did.
pub fn fix_crcs(buf: &mut [u8]) -> bool {
    let mut at = 0;
    let mut any = false;
    while let Ok(h) = batch::parse_header(&buf[at..]) {
        let size = h.total_size();
        if buf.len() - at < size {
            break;
        }
        let crc = crc32c::crc32c(&buf[at + 21..at + size]);
        buf[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
        any = true;
        at += size;
    }
    any
}

fn walk(buf: &[u8]) {
    for b in batch::batches(buf) {
        let Ok(b) = b else { break };
        check_batch(&b);
    }
}

/// Every read-only operation on one framed batch, plus the rewrites on a copy.
pub fn check_batch(b: &RecordBatch<'_>) {
    let h = *b.header();
    assert_eq!(b.len(), h.total_size());
    let _ = (
        h.last_sequence(),
        h.is_transactional(),
        h.is_control(),
        h.timestamp_type(),
    );
    let _ = (h.has_producer_id(), b.base_offset(), b.max_timestamp());
    // Offsets come straight off the wire: these must not overflow-panic (they wrap in
    // release builds, and a debug build is what the tests run).
    let _ = (b.last_offset(), b.next_offset());
    let crc_ok = b.validate_crc().is_ok();
    let append_ok = b.validate_for_append().is_ok();
    assert!(
        !append_ok || crc_ok,
        "validate_for_append passed with a bad CRC"
    );
    let _ = b.compression().map(|c| c.id());
    if let Err(e) = b.validate_for_append() {
        let _ = (e.error_code(), e.to_string());
    }

    let size_ok = b.check_decompressed_size(DECOMPRESSED_CAP);
    let records = b.records();
    // The produce path's size check (a counting pass) and the readers' decompression
    // must agree on what passes the cap.
    match (&size_ok, &records) {
        (Ok(()), Ok(_)) | (Err(_), Err(_)) => {}
        (a, r) => panic!(
            "check_decompressed_size says {a:?} but records() says {:?}",
            r.as_ref().map(|_| "Ok")
        ),
    }
    if let Ok(recs) = records {
        let mut n = 0usize;
        for r in recs.iter() {
            let Ok(r) = r else { break };
            n += 1;
            let _ = (
                r.offset,
                r.timestamp,
                r.key.map(<[u8]>::len),
                r.value.map(<[u8]>::len),
            );
            for (k, v) in &r.headers {
                let _ = (k.len(), v.map(<[u8]>::len));
            }
        }
        assert!(n <= h.record_count.max(0) as usize);
    }

    // The broker's in-place rewrites, on a copy of the batch: the leader's offsets (a
    // log's next offset) and epoch.
    let mut copy = b.as_bytes().to_vec();
    batch::set_base_offset(&mut copy, 1_000_000);
    batch::set_partition_leader_epoch(&mut copy, h.partition_leader_epoch.wrapping_add(1));
    let (again, rest) = RecordBatch::parse(&copy).expect("a rewritten batch still frames");
    assert!(rest.is_empty());
    assert_eq!(
        again.validate_crc().is_ok(),
        crc_ok,
        "offset/epoch rewrite changed the CRC check"
    );
    batch::set_log_append_time(&mut copy, 1_700_000_000_000);
    let (stamped, _) = RecordBatch::parse(&copy).expect("a stamped batch still frames");
    assert!(
        stamped.validate_crc().is_ok(),
        "set_log_append_time left a bad CRC"
    );
}

/// Topic configs as CreateTopics / AlterConfigs hand them to the broker.
pub fn check_topic_configs<'a>(entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) {
    let mut map = BTreeMap::new();
    for (k, v) in entries {
        if let Some(v) = v {
            if let Err(e) = TopicConfig::validate_entry(k, v) {
                let _ = (e.error_code(), e.to_string());
            }
            map.insert(k.to_string(), v.to_string());
        }
        let _ = TopicConfig::default_value(k);
    }
    if let Ok(c) = TopicConfig::resolve(&map) {
        let _ = (
            c.effective_local_retention_ms(),
            c.effective_local_retention_bytes(),
        );
    }
}
