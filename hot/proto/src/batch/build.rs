//! Builds batches, for tests, benchmarks and the console producer. Encoding is done by
//! the kafka-protocol crate, so batches built here are an independent check of the
//! parser in [`super`].

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression as KCompression, Record as KRecord, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType as KTimestampType,
};

use super::Compression;

/// A record to put in a batch.
#[derive(Clone, Debug, Default)]
pub struct NewRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    pub timestamp: i64,
}

impl NewRecord {
    pub fn value(value: impl Into<Bytes>, timestamp: i64) -> Self {
        NewRecord {
            value: Some(value.into()),
            timestamp,
            ..Default::default()
        }
    }
}

/// Producer fields for an idempotent batch.
#[derive(Clone, Copy, Debug)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// Encodes `records` as one RecordBatch v2 with base offset 0.
pub fn batch(
    records: &[NewRecord],
    compression: Compression,
    producer: Option<ProducerFields>,
) -> Bytes {
    let codec = match compression {
        Compression::None => KCompression::None,
        Compression::Gzip => KCompression::Gzip,
        Compression::Snappy => KCompression::Snappy,
        Compression::Lz4 => KCompression::Lz4,
        Compression::Zstd => KCompression::Zstd,
    };
    let (pid, pepoch, seq) = match producer {
        Some(p) => (p.producer_id, p.producer_epoch, p.base_sequence),
        None => (-1, -1, -1),
    };
    let krecords: Vec<KRecord> = records
        .iter()
        .enumerate()
        .map(|(i, r)| KRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: pepoch,
            // The encoder starts a new batch whenever offset - sequence changes, so the
            // "no sequence" case (-1) must advance with the offset too.
            sequence: seq.wrapping_add(i as i32),
            timestamp_type: KTimestampType::Creation,
            offset: i as i64,
            timestamp: r.timestamp,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.clone().into(), v.clone()))
                .collect(),
        })
        .collect();
    // Sized up front: growing by doubling would copy a large batch several times.
    let estimate = 61
        + records
            .iter()
            .map(|r| {
                24 + r.key.as_ref().map_or(0, Bytes::len)
                    + r.value.as_ref().map_or(0, Bytes::len)
                    + r.headers
                        .iter()
                        .map(|(k, v)| 10 + k.len() + v.as_ref().map_or(0, Bytes::len))
                        .sum::<usize>()
            })
            .sum::<usize>();
    let mut buf = BytesMut::with_capacity(estimate);
    RecordBatchEncoder::encode(
        &mut buf,
        krecords.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: codec,
        },
    )
    // Encoding into a growable buffer only fails for codec errors, which the
    // compiled-in codecs do not produce for in-memory input.
    .expect("encoding a record batch into memory cannot fail");
    buf.freeze()
}
