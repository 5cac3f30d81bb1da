//! Rewriting a stored RecordBatch v2 with some of its records, as Kafka's log cleaner
//! does (`MemoryRecords.filterTo`): the batch keeps its base offset, its last offset
//! delta, its producer id, epoch and base sequence, its partition leader epoch and its
//! codec; the kept records keep their offsets (their offset deltas are unchanged), so a
//! compacted log has gaps but no record ever moves. A batch whose records all go keeps
//! its header as an empty batch where the caller needs it (the last batch of an
//! idempotent producer, whose sequence the producer state remembers).
//!
//! KIP-534: when a batch keeps tombstones (records with a null value) the cleaner
//! stamps a *delete horizon* into it (attribute bit 6, the horizon in the base
//! timestamp, record timestamps re-encoded as deltas from it, so every reader still
//! sees the same timestamps); once the horizon has passed, a later pass removes them.

use crate::batch::{
    BatchError, BatchHeader, Compression, HEADER_LEN, MAGIC_V2, Record, RecordBatch,
};

/// Attribute bit 6: the base timestamp holds the delete horizon (KIP-534).
pub const DELETE_HORIZON_BIT: i16 = 0x40;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
/// Attribute bits 0-2: the codec.
const CODEC_BITS: i16 = 0x07;

impl BatchHeader {
    /// The delete horizon the cleaner stamped into this batch (KIP-534), if any.
    pub fn delete_horizon(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_BIT != 0).then_some(self.base_timestamp)
    }
}

/// A new batch holding `kept` (records of the batch `original` describes, in offset
/// order, at least one), with the delete horizon `delete_horizon` stamped in when given
/// (else the original's, if it had one). Compressed with the original's codec. The
/// max timestamp is the kept records' largest (the original's for LogAppendTime
/// batches, whose records all carry it).
pub fn rewrite_batch(
    original: &BatchHeader,
    kept: &[Record<'_>],
    delete_horizon: Option<i64>,
) -> Result<Vec<u8>, BatchError> {
    let codec = Compression::from_attributes(original.attributes)?;
    rebuild(original, kept, delete_horizon, codec)
}

/// The batch `b` with every record, compressed with `codec` instead of its own (a topic's
/// compression.type): the same base offset and offset deltas, producer id, epoch and
/// sequence, transactional flag, timestamps, keys, values and headers. Kafka's
/// LogValidator does the same when the topic's codec is not the producer's.
pub fn recompress_batch(b: &RecordBatch<'_>, codec: Compression) -> Result<Vec<u8>, BatchError> {
    let records = b.records()?;
    let all = records.iter().collect::<Result<Vec<_>, _>>()?;
    rebuild(b.header(), &all, None, codec)
}

fn rebuild(
    original: &BatchHeader,
    kept: &[Record<'_>],
    delete_horizon: Option<i64>,
    codec: Compression,
) -> Result<Vec<u8>, BatchError> {
    let horizon = delete_horizon.or(original.delete_horizon());
    let log_append_time = original.attributes & TIMESTAMP_TYPE_BIT != 0;
    let first_ts = kept
        .first()
        .map_or(original.base_timestamp, |r| r.timestamp);
    // Record timestamps are deltas from the base timestamp, which is the horizon when
    // one is stamped.
    let base_timestamp = horizon.unwrap_or(first_ts);
    let max_timestamp = if log_append_time {
        original.max_timestamp
    } else {
        kept.iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(original.max_timestamp)
    };
    let mut records = Vec::with_capacity(kept.iter().map(record_size_hint).sum());
    let mut scratch = Vec::new();
    for r in kept {
        scratch.clear();
        scratch.push(0); // record attributes: unused in v2
        put_varlong(&mut scratch, r.timestamp.wrapping_sub(base_timestamp));
        let delta = r.offset - original.base_offset;
        if !(0..=i64::from(original.last_offset_delta)).contains(&delta) {
            return Err(BatchError::InvalidRecord("kept record outside its batch"));
        }
        put_varint(&mut scratch, delta as i32);
        put_bytes(&mut scratch, r.key);
        put_bytes(&mut scratch, r.value);
        put_varint(&mut scratch, r.headers.len() as i32);
        for (k, v) in &r.headers {
            put_bytes(&mut scratch, Some(k.as_bytes()));
            put_bytes(&mut scratch, *v);
        }
        put_varint(&mut records, scratch.len() as i32);
        records.extend_from_slice(&scratch);
    }
    let body = crate::compression::compress(codec, &records)?;
    let mut attributes = (original.attributes & !CODEC_BITS) | codec.id();
    if horizon.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    }
    Ok(assemble(
        original,
        attributes,
        base_timestamp,
        max_timestamp,
        kept.len() as i32,
        &body,
    ))
}

/// The header of `original` with no records (Kafka's `writeEmptyHeader`): what the
/// cleaner keeps of a batch it emptied when the producer state still needs it. Its
/// offsets, producer fields and timestamps are the original's; it is uncompressed.
pub fn empty_batch(original: &BatchHeader) -> Vec<u8> {
    let attributes = original.attributes & !CODEC_BITS & !DELETE_HORIZON_BIT;
    assemble(
        original,
        attributes,
        original.max_timestamp,
        original.max_timestamp,
        0,
        &[],
    )
}

fn assemble(
    original: &BatchHeader,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    record_count: i32,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&original.base_offset.to_be_bytes());
    out.extend_from_slice(&((HEADER_LEN - 12 + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&original.partition_leader_epoch.to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&[0; 4]); // the CRC, below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&original.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&original.producer_id.to_be_bytes());
    out.extend_from_slice(&original.producer_epoch.to_be_bytes());
    out.extend_from_slice(&original.base_sequence.to_be_bytes());
    out.extend_from_slice(&record_count.to_be_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

fn record_size_hint(r: &Record<'_>) -> usize {
    16 + r.key.map_or(0, <[u8]>::len)
        + r.value.map_or(0, <[u8]>::len)
        + r.headers
            .iter()
            .map(|(k, v)| 10 + k.len() + v.map_or(0, <[u8]>::len))
            .sum::<usize>()
}

fn put_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_unsigned(out, ((v << 1) ^ (v >> 31)) as u32 as u64);
}

fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_unsigned(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::Bytes;

    use super::*;
    use crate::batch::build::{NewRecord, ProducerFields, batch};
    use crate::batch::{RecordBatch, parse_header};

    fn sample() -> Vec<NewRecord> {
        (0..7)
            .map(|i| NewRecord {
                key: Some(Bytes::from(format!("k{}", i % 3))),
                value: (i != 4).then(|| Bytes::from(vec![i as u8; 50 + i * 10])),
                headers: vec![("h".into(), Some(Bytes::from_static(b"v")))],
                timestamp: 1_000 + i as i64 * 7,
            })
            .collect()
    }

    /// (offset, timestamp, key, value)
    type Owned = (i64, i64, Option<Vec<u8>>, Option<Vec<u8>>);

    fn owned(b: &RecordBatch<'_>) -> Vec<Owned> {
        b.records()
            .unwrap()
            .iter()
            .map(|r| {
                let r = r.unwrap();
                (
                    r.offset,
                    r.timestamp,
                    r.key.map(<[u8]>::to_vec),
                    r.value.map(<[u8]>::to_vec),
                )
            })
            .collect()
    }

    /// compression.type: a batch recompressed into every other codec keeps its records,
    /// offsets, producer fields and headers, and is a valid batch of the new codec.
    #[test]
    fn recompressing_keeps_every_record_and_the_producer_fields() {
        let producer = ProducerFields {
            producer_id: 9,
            producer_epoch: 2,
            base_sequence: 40,
        };
        for from in Compression::ALL {
            let mut bytes = batch(&sample(), from, Some(producer)).to_vec();
            crate::batch::set_base_offset(&mut bytes, 100);
            let (original, _) = RecordBatch::parse(&bytes).unwrap();
            for to in Compression::ALL {
                let out = recompress_batch(&original, to).unwrap();
                let (b, rest) = RecordBatch::parse(&out).unwrap();
                assert!(rest.is_empty());
                b.validate_crc().unwrap();
                assert_eq!(b.compression().unwrap(), to, "{from} -> {to}");
                let (h, o) = (b.header(), original.header());
                assert_eq!(
                    (h.base_offset, h.last_offset_delta, h.record_count),
                    (o.base_offset, o.last_offset_delta, o.record_count)
                );
                assert_eq!(
                    (
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.max_timestamp
                    ),
                    (
                        o.producer_id,
                        o.producer_epoch,
                        o.base_sequence,
                        o.max_timestamp
                    )
                );
                assert_eq!(owned(&b), owned(&original), "{from} -> {to}");
                let headers = |b: &RecordBatch<'_>| -> Vec<usize> {
                    b.records()
                        .unwrap()
                        .iter()
                        .map(|r| r.unwrap().headers.len())
                        .collect()
                };
                assert_eq!(headers(&b), headers(&original));
            }
        }
    }

    #[test]
    fn a_rewrite_keeps_offsets_timestamps_and_the_batch_frame_for_every_codec() {
        for codec in Compression::ALL {
            let producer = ProducerFields {
                producer_id: 9,
                producer_epoch: 2,
                base_sequence: 40,
            };
            let mut bytes = batch(&sample(), codec, Some(producer)).to_vec();
            crate::batch::set_base_offset(&mut bytes, 100);
            crate::batch::set_partition_leader_epoch(&mut bytes, 6);
            let (orig, _) = RecordBatch::parse(&bytes).unwrap();
            let all = owned(&orig);
            let records = orig.records().unwrap();
            // Keep the records at odd offsets (the last one goes).
            let kept: Vec<Record<'_>> = records
                .iter()
                .map(Result::unwrap)
                .filter(|r| r.offset % 2 == 1)
                .collect();
            for horizon in [None, Some(5_000)] {
                let out = rewrite_batch(orig.header(), &kept, horizon).unwrap();
                let (b, rest) = RecordBatch::parse(&out).unwrap();
                assert!(rest.is_empty());
                b.validate_crc().unwrap();
                let h = b.header();
                let o = orig.header();
                assert_eq!(
                    (h.base_offset, h.last_offset_delta, h.partition_leader_epoch),
                    (100, 6, 6),
                    "{codec:?}"
                );
                assert_eq!(
                    (h.producer_id, h.producer_epoch, h.base_sequence),
                    (o.producer_id, o.producer_epoch, o.base_sequence)
                );
                assert_eq!(b.compression().unwrap(), codec);
                assert_eq!(h.record_count, 3);
                assert_eq!(h.delete_horizon(), horizon);
                assert_eq!(h.max_timestamp, 1_000 + 5 * 7);
                let want: Vec<_> = all.iter().filter(|r| r.0 % 2 == 1).cloned().collect();
                assert_eq!(owned(&b), want, "{codec:?} {horizon:?}");
                // A second rewrite keeps the stamped horizon.
                let again = rewrite_batch(
                    h,
                    &b.records()
                        .unwrap()
                        .iter()
                        .map(Result::unwrap)
                        .collect::<Vec<_>>(),
                    None,
                )
                .unwrap();
                assert_eq!(parse_header(&again).unwrap().delete_horizon(), horizon);
            }
        }
    }

    #[test]
    fn an_emptied_batch_keeps_its_header_fields() {
        let producer = ProducerFields {
            producer_id: 3,
            producer_epoch: 1,
            base_sequence: 10,
        };
        let mut bytes = batch(&sample(), Compression::Zstd, Some(producer)).to_vec();
        crate::batch::set_base_offset(&mut bytes, 50);
        let (orig, _) = RecordBatch::parse(&bytes).unwrap();
        let out = empty_batch(orig.header());
        let (b, _) = RecordBatch::parse(&out).unwrap();
        b.validate_crc().unwrap();
        let h = b.header();
        assert_eq!(
            (h.base_offset, h.next_offset(), h.record_count),
            (50, 57, 0)
        );
        assert_eq!(h.last_sequence(), orig.header().last_sequence());
        assert_eq!(h.producer_id, 3);
        assert_eq!(b.records().unwrap().iter().count(), 0);
    }

    #[test]
    fn a_kept_record_outside_the_batch_is_refused() {
        let bytes = batch(&sample(), Compression::None, None).to_vec();
        let (orig, _) = RecordBatch::parse(&bytes).unwrap();
        let records = orig.records().unwrap();
        let mut r = records.iter().next().unwrap().unwrap();
        r.offset = 99;
        assert!(rewrite_batch(orig.header(), &[r], None).is_err());
    }
}
