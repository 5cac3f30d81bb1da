//! A one-copy topic's reads (`ParquetReads`): record batches re-encoded from the
//! partition's Parquet files through the chunk cache, page after page from any offset;
//! a reader whose file list is older than a small-file compaction that deleted the files
//! it names reads the manifest again and goes on; retention's bound follows the files'
//! timestamps and bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use strata_cache::{CacheConfig, ChunkCache, ReaderId};
use strata_parquet::{CompactPolicy, ConvertOptions, ExpiredObjects, ParquetLayout, ParquetSink};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::batch::set_base_offset;
use strata_proto::{Compression, TopicConfig};
use strata_store::{BlobStore, ObjectBackend};
use strata_tier::StoreSource;
use strata_tier::one_copy::ParquetReads;

const CLUSTER: &str = "c1";
const TOPIC: &str = "events";
const TS0: i64 = 1_700_000_000_000;

struct Fixture {
    store: Arc<dyn BlobStore>,
    cache: Arc<ChunkCache>,
    config: TopicConfig,
    sink: ParquetSink,
}

impl Fixture {
    async fn new() -> Fixture {
        let store = ObjectBackend::memory().into_dyn();
        let config = CacheConfig {
            chunk_size: 4 << 20,
            memory_capacity: 32 << 20,
            disk: None,
            ..CacheConfig::default()
        };
        let cache = Arc::new(
            ChunkCache::new(config, Arc::new(StoreSource(store.clone())))
                .await
                .unwrap(),
        );
        let overrides: BTreeMap<String, String> = [
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
            ("remote.storage.format", "parquet"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let config = TopicConfig::resolve(&overrides).unwrap();
        let sink = ParquetSink::new(
            store.clone(),
            ParquetLayout::new(CLUSTER),
            ConvertOptions::from_topic_config(TOPIC, 0, &config).unwrap(),
        );
        Fixture {
            store,
            cache,
            config,
            sink,
        }
    }

    /// `n` one-batch segments of ten records each, from offset 0.
    async fn segments(&self, n: i64) {
        for s in 0..n {
            let base = s * 10;
            let records: Vec<NewRecord> = (0..10)
                .map(|i| NewRecord::value(value(base + i), TS0 + base + i))
                .collect();
            let mut seg = batch(&records, Compression::None, None).to_vec();
            set_base_offset(&mut seg, base);
            self.sink.write_segment(TOPIC, 0, &seg).await.unwrap();
        }
    }

    fn reads(&self) -> ParquetReads {
        ParquetReads::new(self.store.clone(), self.cache.clone(), CLUSTER, TOPIC, 0)
    }
}

fn value(o: i64) -> String {
    format!("value-{o}-{}", "v".repeat((o % 40) as usize))
}

/// Offsets and values of re-encoded batches, CRCs checked.
fn records(data: &Bytes) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut rest: &[u8] = data;
    while !rest.is_empty() {
        let (b, after) = strata_proto::RecordBatch::parse(rest).unwrap();
        b.validate_crc().unwrap();
        for r in b.records().unwrap().iter() {
            let r = r.unwrap();
            out.push((
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
        rest = after;
    }
    out
}

/// Reads from `from` up to `below` in answers of about `max_bytes`.
async fn read_all(
    reads: &ParquetReads,
    from: i64,
    below: i64,
    max_bytes: usize,
) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < below {
        let Some(data) = reads.read(at, max_bytes, below, ReaderId(1)).await.unwrap() else {
            break;
        };
        let got = records(&data);
        assert!(!got.is_empty());
        at = got.last().unwrap().0 + 1;
        out.extend(got);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_page_through_the_files_from_any_offset() {
    let f = Fixture::new().await;
    f.segments(30).await;
    let reads = f.reads();
    reads.reload().await.unwrap();
    assert_eq!((reads.start(), reads.end()), (Some(0), Some(300)));
    let want: Vec<(i64, String)> = (0..300).map(|o| (o, value(o))).collect();
    assert_eq!(read_all(&reads, 0, 300, 500).await, want);
    assert_eq!(read_all(&reads, 137, 300, 4096).await, want[137..]);
    // Below the local start only: a read stops there.
    assert_eq!(read_all(&reads, 0, 55, 1 << 20).await, want[..60]);
    // Nothing at or past the files' end.
    assert!(
        reads
            .read(300, 1024, 400, ReaderId(1))
            .await
            .unwrap()
            .is_none()
    );
    // A time lookup reads the files' timestamps.
    assert_eq!(
        reads
            .offset_for_timestamp(TS0 + 222, 300, ReaderId(2))
            .await
            .unwrap(),
        Some((222, TS0 + 222))
    );
    assert_eq!(reads.max_timestamp(), TS0 + 299);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_behind_a_compaction_reads_the_manifest_again() {
    let f = Fixture::new().await;
    f.segments(30).await;
    let reads = f.reads();
    reads.reload().await.unwrap();
    let files_before = f.sink.files(TOPIC, 0).await.unwrap().len();
    // Small-file compaction rewrites the thirty files into one and deletes them; the
    // reader still lists them.
    let policy = CompactPolicy {
        force: true,
        ..CompactPolicy::new(f.config.parquet_target_file_bytes, TS0)
    };
    f.sink
        .compact(TOPIC, 0, &policy, ExpiredObjects::Delete)
        .await
        .unwrap();
    let files_after = f.sink.files(TOPIC, 0).await.unwrap();
    assert!(
        files_after.len() < files_before,
        "{} files",
        files_after.len()
    );
    let want: Vec<(i64, String)> = (0..300).map(|o| (o, value(o))).collect();
    assert_eq!(read_all(&reads, 95, 300, 700).await, want[95..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_whole_files_by_time_and_bytes() {
    let f = Fixture::new().await;
    f.segments(10).await;
    let reads = f.reads();
    reads.reload().await.unwrap();
    let files = f.sink.files(TOPIC, 0).await.unwrap();
    // By time: records older than 45 ms at TS0 + 100 are offsets below 55; only the
    // files wholly below go (each file's newest record decides).
    assert_eq!(
        reads.retention_bound(TS0 + 100, Some(45), None, 0),
        Some(50)
    );
    // By bytes: keep at least the last three files' bytes.
    let three: u64 = files[7..].iter().map(|f| f.bytes).sum();
    assert_eq!(reads.retention_bound(TS0, None, Some(three), 0), Some(70));
    // Local bytes not in a file yet count too.
    assert_eq!(
        reads.retention_bound(TS0, None, Some(three), three),
        Some(100)
    );
    assert_eq!(reads.retention_bound(TS0, Some(1 << 40), None, 0), None);
    assert_eq!(reads.files_below(50), 5);
}
