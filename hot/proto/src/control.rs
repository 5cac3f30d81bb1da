//! Transaction markers: the control batches that end a transaction in each partition it
//! wrote to (KIP-98).
//!
//! A marker is a RecordBatch v2 with the transactional and control bits set, the
//! producer's id and epoch, no sequence (-1), and one uncompressed record whose key is
//! Kafka's `ControlRecordType` (version i16 0, type i16: 0 ABORT, 1 COMMIT) and whose
//! value is an `EndTransactionMarker` (version i16 0, coordinator epoch i32). It takes
//! an offset like any record; consumers skip it.

use crate::batch::{BatchError, RecordBatch};
use crate::{Offset, ProducerEpoch, ProducerId};

/// How a transaction ended in a partition.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum MarkerKind {
    Commit,
    Abort,
}

impl MarkerKind {
    /// Kafka's `ControlRecordType` id.
    pub fn id(self) -> i16 {
        match self {
            MarkerKind::Abort => 0,
            MarkerKind::Commit => 1,
        }
    }
}

/// A transaction marker to append.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Marker {
    pub kind: MarkerKind,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The transaction coordinator's epoch (the leader epoch of its
    /// `__transaction_state` partition): a marker from an older coordinator is refused.
    pub coordinator_epoch: i32,
    pub timestamp: i64,
}

/// Bytes of an encoded marker: the 61-byte batch header and one 17-byte record.
pub const MARKER_BATCH_LEN: usize = 61 + 17;

impl Marker {
    /// Encodes the marker as a batch at base offset 0 (the log assigns the offset),
    /// partition leader epoch -1 (the log stamps it), with its CRC.
    pub fn encode(&self) -> Vec<u8> {
        let mut record = Vec::with_capacity(16);
        // Record body: attributes, timestamp delta 0, offset delta 0, key (4 bytes),
        // value (6 bytes), no headers; zigzag varints.
        record.push(0); // attributes
        record.push(0); // timestamp delta
        record.push(0); // offset delta
        record.push(8); // key length 4
        record.extend_from_slice(&0i16.to_be_bytes());
        record.extend_from_slice(&self.kind.id().to_be_bytes());
        record.push(12); // value length 6
        record.extend_from_slice(&0i16.to_be_bytes());
        record.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        record.push(0); // no headers
        let body_len = record.len() as u8; // 16, one varint byte
        let mut out = Vec::with_capacity(MARKER_BATCH_LEN);
        out.extend_from_slice(&0i64.to_be_bytes()); // base offset
        let batch_len = (MARKER_BATCH_LEN - 12) as i32;
        out.extend_from_slice(&batch_len.to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        out.push(2); // magic
        out.extend_from_slice(&[0; 4]); // CRC, below
        out.extend_from_slice(&0x30i16.to_be_bytes()); // transactional | control
        out.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
        out.extend_from_slice(&1i32.to_be_bytes()); // one record
        out.push(body_len << 1); // zigzag varint of the record's length
        out.extend_from_slice(&record);
        debug_assert_eq!(out.len(), MARKER_BATCH_LEN);
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

/// A control batch that is not a marker Strata can read.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    #[error("control batch at offset {offset}: {source}")]
    Batch { offset: Offset, source: BatchError },
    #[error("control batch at offset {offset}: {reason}")]
    Bad {
        offset: Offset,
        reason: &'static str,
    },
}

/// Reads the marker kind of a control batch: `None` for a control record of another
/// type (Kafka has others, for KRaft's own log) or a control batch whose record
/// compaction removed. Kafka reads a newer key version as far as it understands it;
/// so does this.
pub fn marker_kind(b: &RecordBatch<'_>) -> Result<Option<MarkerKind>, MarkerError> {
    let offset = b.base_offset();
    let records = b
        .records()
        .map_err(|source| MarkerError::Batch { offset, source })?;
    let Some(first) = records.iter().next() else {
        return Ok(None);
    };
    let record = first.map_err(|source| MarkerError::Batch { offset, source })?;
    let bad = |reason| MarkerError::Bad { offset, reason };
    let key = record.key.ok_or(bad("control record without a key"))?;
    if key.len() < 4 {
        return Err(bad("control record key shorter than version and type"));
    }
    if i16::from_be_bytes([key[0], key[1]]) < 0 {
        return Err(bad("negative control record key version"));
    }
    Ok(match i16::from_be_bytes([key[2], key[3]]) {
        0 => Some(MarkerKind::Abort),
        1 => Some(MarkerKind::Commit),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_marker_encodes_as_a_valid_control_batch_and_reads_back() {
        for kind in [MarkerKind::Commit, MarkerKind::Abort] {
            let m = Marker {
                kind,
                producer_id: 4242,
                producer_epoch: 7,
                coordinator_epoch: 3,
                timestamp: 1_700_000_000_000,
            };
            let bytes = m.encode();
            assert_eq!(bytes.len(), MARKER_BATCH_LEN);
            let (b, rest) = RecordBatch::parse(&bytes).unwrap();
            assert!(rest.is_empty());
            b.validate_for_append().unwrap();
            let h = b.header();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.producer_id, h.producer_epoch), (4242, 7));
            assert_eq!((h.base_sequence, h.record_count), (-1, 1));
            assert_eq!(marker_kind(&b).unwrap(), Some(kind));
            let records = b.records().unwrap();
            let r = records.iter().next().unwrap().unwrap();
            assert_eq!(r.value.unwrap(), &[0, 0, 0, 0, 0, 3]);
        }
    }
}
