//! Helpers shared by the integration tests: segments built with the kafka-protocol
//! crate's encoder (independent of the parser under test), and files read back with the
//! parquet crate's own reader.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Int32Type, Int64Type, TimestampMillisecondType};
use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression as KCompression, Record as KRecord, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType as KTimestampType,
};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::batch::set_base_offset;

pub const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// A small deterministic generator (no rand dependency needed for test data).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Records with every shape that matters: null and empty keys and values, no headers,
/// several headers, null header values.
pub fn varied_records(n: usize, seed: u64, ts0: i64) -> Vec<NewRecord> {
    let mut g = Lcg(seed);
    (0..n)
        .map(|i| {
            let key = match g.below(4) {
                0 => None,
                1 => Some(Bytes::new()),
                _ => Some(Bytes::from(format!("key-{}", g.below(1000)))),
            };
            let value = match g.below(5) {
                0 => None,
                1 => Some(Bytes::new()),
                _ => {
                    let len = g.below(300) as usize;
                    Some(Bytes::from(
                        (0..len).map(|_| g.below(256) as u8).collect::<Vec<_>>(),
                    ))
                }
            };
            let headers = (0..g.below(4))
                .map(|h| {
                    let v = match g.below(3) {
                        0 => None,
                        1 => Some(Bytes::new()),
                        _ => Some(Bytes::from(format!("hv{h}-{}", g.below(100)))),
                    };
                    (format!("h{h}"), v)
                })
                .collect();
            NewRecord {
                key,
                value,
                headers,
                timestamp: ts0 + i as i64 * 7 - (g.below(3) as i64),
            }
        })
        .collect()
}

/// Appends batches to a segment, giving offsets as a leader does.
#[derive(Default)]
pub struct SegmentBuilder {
    pub bytes: Vec<u8>,
    pub next_offset: i64,
}

impl SegmentBuilder {
    pub fn starting_at(offset: i64) -> Self {
        SegmentBuilder {
            bytes: Vec::new(),
            next_offset: offset,
        }
    }

    /// Appends an encoded batch (base offset 0) at the next offset; returns its base.
    pub fn append(&mut self, encoded: &[u8]) -> i64 {
        let base = self.next_offset;
        let start = self.bytes.len();
        self.bytes.extend_from_slice(encoded);
        set_base_offset(&mut self.bytes[start..], base);
        let (b, _) = strata_proto::RecordBatch::parse(&self.bytes[start..]).unwrap();
        self.next_offset = b.next_offset();
        base
    }

    pub fn append_records(
        &mut self,
        records: &[NewRecord],
        codec: Compression,
        producer: Option<ProducerFields>,
    ) -> i64 {
        self.append(&batch(records, codec, producer))
    }
}

fn kcodec(c: Compression) -> KCompression {
    match c {
        Compression::None => KCompression::None,
        Compression::Gzip => KCompression::Gzip,
        Compression::Snappy => KCompression::Snappy,
        Compression::Lz4 => KCompression::Lz4,
        Compression::Zstd => KCompression::Zstd,
    }
}

fn encode(records: &[KRecord], codec: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: kcodec(codec),
        },
    )
    .unwrap();
    buf.freeze()
}

fn krecord(i: usize, pid: i64, seq: i32, transactional: bool, control: bool) -> KRecord {
    KRecord {
        transactional,
        control,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: 0,
        sequence: seq.wrapping_add(i as i32),
        timestamp_type: KTimestampType::Creation,
        offset: i as i64,
        timestamp: 1_700_000_000_000 + i as i64,
        key: None,
        value: None,
        headers: Default::default(),
    }
}

/// A transactional data batch of `values` from producer `pid`.
pub fn txn_batch(pid: i64, base_sequence: i32, values: &[&str], codec: Compression) -> Bytes {
    let records: Vec<KRecord> = values
        .iter()
        .enumerate()
        .map(|(i, v)| KRecord {
            value: Some(Bytes::from(v.to_string())),
            ..krecord(i, pid, base_sequence, true, false)
        })
        .collect();
    encode(&records, codec)
}

/// Kafka's ControlRecordType ids.
pub const ABORT: i16 = 0;
pub const COMMIT: i16 = 1;

/// A control batch holding one control record of `kind` for producer `pid`: key
/// `version: int16 = 0, type: int16`, value `version: int16 = 0, coordinatorEpoch: int32`.
pub fn control_batch(pid: i64, kind: i16) -> Bytes {
    let mut key = Vec::new();
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = Vec::new();
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&7i32.to_be_bytes());
    let r = KRecord {
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        ..krecord(0, pid, -1, true, true)
    };
    encode(&[r], Compression::None)
}

/// One row as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub producer_id: Option<i64>,
    pub sequence: Option<i32>,
}

/// Reads a file with the parquet crate's reader: its batches and its metadata.
pub fn read(bytes: &[u8]) -> (Vec<RecordBatch>, Arc<ParquetMetaData>) {
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(
        Bytes::from(bytes.to_vec()),
        ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required),
    )
    .unwrap();
    let meta = builder.metadata().clone();
    let batches = builder
        .build()
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (batches, meta)
}

fn bin(a: &dyn Array, i: usize) -> Option<Vec<u8>> {
    let a = a.as_binary::<i32>();
    (!a.is_null(i)).then(|| a.value(i).to_vec())
}

/// The rows of a file with a binary value column.
pub fn rows(bytes: &[u8]) -> Vec<Row> {
    let (batches, _) = read(bytes);
    let mut out = Vec::new();
    for b in &batches {
        let col = |name: &str| b.column_by_name(name).unwrap().clone();
        let partition = col("partition");
        let partition = partition.as_primitive::<Int32Type>();
        let offset = col("offset");
        let offset = offset.as_primitive::<Int64Type>();
        let ts = col("timestamp");
        let ts = ts.as_primitive::<TimestampMillisecondType>();
        let key = col("key");
        let value = col("value");
        let headers = col("headers");
        let headers = headers.as_list::<i32>();
        let pid = col("producer_id");
        let pid = pid.as_primitive::<Int64Type>();
        let seq = col("sequence");
        let seq = seq.as_primitive::<Int32Type>();
        for i in 0..b.num_rows() {
            let hs = headers.value(i);
            let hs = hs.as_struct();
            let hk = hs.column(0).as_string::<i32>();
            let hv = hs.column(1);
            out.push(Row {
                partition: partition.value(i),
                offset: offset.value(i),
                timestamp: ts.value(i),
                key: bin(key.as_ref(), i),
                value: bin(value.as_ref(), i),
                headers: (0..hs.len())
                    .map(|j| (hk.value(j).to_string(), bin(hv.as_ref(), j)))
                    .collect(),
                producer_id: (!pid.is_null(i)).then(|| pid.value(i)),
                sequence: (!seq.is_null(i)).then(|| seq.value(i)),
            });
        }
    }
    out
}

/// The rows a segment's records should become, from what was built.
pub fn expected_row(
    partition: i32,
    offset: i64,
    r: &NewRecord,
    producer: Option<(i64, i32)>,
) -> Row {
    Row {
        partition,
        offset,
        timestamp: r.timestamp,
        key: r.key.as_ref().map(|k| k.to_vec()),
        value: r.value.as_ref().map(|v| v.to_vec()),
        headers: r
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map(|v| v.to_vec())))
            .collect(),
        producer_id: producer.map(|p| p.0),
        sequence: producer.map(|p| p.1),
    }
}

/// Key-value metadata of a file as a map.
pub fn kv(meta: &ParquetMetaData) -> std::collections::BTreeMap<String, String> {
    meta.file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
        .collect()
}

/// The keys of the Parquet objects under the store (the manifests left out), sorted.
pub async fn parquet_objects(store: &Arc<dyn strata_store::BlobStore>) -> Vec<String> {
    let mut keys: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.path)
        .filter(|p| p.ends_with(".parquet"))
        .collect();
    keys.sort();
    keys
}
