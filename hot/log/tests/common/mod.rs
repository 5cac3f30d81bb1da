//! Helpers shared by the log's integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use strata_log::{IoMode, Log, LogConfig, ManualClock, RecoveryReport};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::batch::{self, RecordBatch};

/// A batch of `n` records of `size` bytes each, values derived from `seed`.
pub fn make_batch(n: usize, size: usize, seed: u64, ts: i64) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| {
            let v: Vec<u8> = (0..size)
                .map(|j| (seed as usize * 31 + i * 7 + j) as u8)
                .collect();
            NewRecord {
                key: Some(Bytes::from(format!("k{seed}-{i}"))),
                value: Some(Bytes::from(v)),
                headers: vec![],
                timestamp: ts + i as i64,
            }
        })
        .collect();
    batch(&records, Compression::None, None).to_vec()
}

/// The default config, writing in `mode`.
pub fn base_config(mode: IoMode) -> LogConfig {
    LogConfig {
        io_mode: mode,
        ..LogConfig::default()
    }
}

/// A small config that rolls and indexes often. In direct mode its tail cache holds
/// two 8 KiB windows, so reads cross from the file into the cache.
pub fn small_config(mode: IoMode) -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        tail_cache_bytes: 16 * 1024,
        ..base_config(mode)
    }
}

/// Runs each named `fn(IoMode)` as two tests: `direct::NAME` and `buffered::NAME`.
#[allow(unused_macros)]
macro_rules! both_modes {
    ($($name:ident),+ $(,)?) => {
        mod direct {
            $(
                #[test]
                fn $name() {
                    super::$name(strata_log::IoMode::Direct)
                }
            )+
        }
        mod buffered {
            $(
                #[test]
                fn $name() {
                    super::$name(strata_log::IoMode::Buffered)
                }
            )+
        }
    };
}
#[allow(unused_imports)]
pub(crate) use both_modes;

pub fn open(
    dir: &std::path::Path,
    config: LogConfig,
    clock: &Arc<ManualClock>,
) -> (Log, RecoveryReport) {
    Log::open(dir, config, clock.clone()).expect("open")
}

/// Reads the whole log from `from` to the end, batch by batch, checking framing and CRCs.
pub fn read_all(log: &Log, from: i64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = from;
    let end = log.log_end_offset();
    while offset < end {
        let r = log.read(offset, 1000, None).expect("read");
        assert!(!r.data.is_empty(), "empty read at {offset} below end {end}");
        for b in batch::batches(&r.data) {
            let b = b.expect("whole batches");
            b.validate_crc().expect("crc");
            out.push(b.as_bytes().to_vec());
        }
        assert!(r.next_offset > offset);
        offset = r.next_offset;
    }
    out
}

/// The base offset of a stored batch.
pub fn base_of(bytes: &[u8]) -> i64 {
    RecordBatch::parse(bytes).expect("batch").0.base_offset()
}

/// A batch as a leader stored it: `make_batch` with its base offset and partition
/// leader epoch set (neither is covered by the CRC), ready for `append_replicated`.
pub fn leader_batch(base: i64, epoch: i32, n: usize, size: usize, seed: u64, ts: i64) -> Vec<u8> {
    let mut b = make_batch(n, size, seed, ts);
    batch::set_base_offset(&mut b, base);
    batch::set_partition_leader_epoch(&mut b, epoch);
    b
}

/// The leader-epoch cache as (epoch, start offset) pairs.
pub fn epochs(log: &Log) -> Vec<(i32, i64)> {
    log.epoch_entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}
