//! The producer snapshot's bytes: [`ProducerState::encode_snapshot`] and
//! [`ProducerState::decode_snapshot`], with a CRC-32C and bounds-checked reads.

use std::collections::{BTreeMap, VecDeque};

use strata_proto::{Offset, ProducerId};

use super::{BATCHES_PER_PRODUCER, BatchMetadata, ProducerEntry, ProducerState};

/// A producer snapshot could not be decoded. The caller discards the snapshot and
/// rebuilds the state from the log instead.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("producer snapshot truncated: need {need} more bytes at byte {at}")]
    Truncated { at: usize, need: usize },
    #[error("unsupported producer snapshot version {0}")]
    UnsupportedVersion(u16),
    #[error("producer snapshot CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("invalid producer snapshot: {0}")]
    Invalid(&'static str),
}

// Snapshot format, version 2 (all integers big-endian). Like Kafka's producer snapshot
// (a version and a CRC-32C up front), but keeping every cached batch, not only the
// last, so a retry of any of the last five still deduplicates after a restart.
//
//   u16  version (1)
//   u32  CRC-32C of every byte after this field
//   i64  offset: the state covers exactly the batches below it
//   u32  producer count, then per producer, by increasing id:
//        i64 producer id, i16 epoch, i64 last timestamp,
//        i64 first offset of the open transaction (-1: none; absent in version 1),
//        u8 batch count (0..=5),
//        then per batch, oldest first:
//        i32 first seq, i32 last seq, i64 first offset, i64 last offset, i64 max timestamp
pub(super) const SNAPSHOT_VERSION: u16 = 2;
/// Snapshots written before transactions (no open-transaction field) still load.
pub(super) const SNAPSHOT_VERSION_1: u16 = 1;
pub(super) const SNAPSHOT_HEADER: usize = 2 + 4;
pub(super) const BATCH_BYTES: usize = 4 + 4 + 8 + 8 + 8;

impl ProducerState {
    /// Encodes the state, covering every batch below `offset`.
    pub fn encode_snapshot(&self, offset: Offset) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            SNAPSHOT_HEADER + 12 + self.producers.len() * (19 + 2 * BATCH_BYTES),
        );
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // CRC, filled in below
        out.extend_from_slice(&offset.to_be_bytes());
        let count = u32::try_from(self.producers.len())
            .expect("fewer than 2^32 producers: each needs an appended batch");
        out.extend_from_slice(&count.to_be_bytes());
        for (&id, e) in &self.producers {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
            // At most BATCHES_PER_PRODUCER (5), so it fits a byte.
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.max_timestamp.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out[SNAPSHOT_HEADER..]);
        out[2..SNAPSHOT_HEADER].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a snapshot: the offset it covers and the state. Torn, corrupt or
    /// implausible input gives an error, never a panic or a partial state.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<(Offset, ProducerState), SnapshotError> {
        let mut r = Reader { bytes, at: 0 };
        let version = u16::from_be_bytes(r.array()?);
        if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_1 {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let stored = u32::from_be_bytes(r.array()?);
        let computed = crc32c::crc32c(&bytes[SNAPSHOT_HEADER..]);
        if stored != computed {
            return Err(SnapshotError::CrcMismatch { stored, computed });
        }
        let offset = i64::from_be_bytes(r.array()?);
        if offset < 0 {
            return Err(SnapshotError::Invalid("negative offset"));
        }
        let count = u32::from_be_bytes(r.array()?);
        let mut producers = BTreeMap::new();
        let mut previous: Option<ProducerId> = None;
        for _ in 0..count {
            let id = i64::from_be_bytes(r.array()?);
            if id < 0 {
                return Err(SnapshotError::Invalid("negative producer id"));
            }
            if previous.is_some_and(|p| p >= id) {
                return Err(SnapshotError::Invalid(
                    "producer ids not strictly increasing",
                ));
            }
            previous = Some(id);
            let epoch = i16::from_be_bytes(r.array()?);
            let last_timestamp = i64::from_be_bytes(r.array()?);
            let current_txn_first_offset = if version == SNAPSHOT_VERSION_1 {
                None
            } else {
                match i64::from_be_bytes(r.array()?) {
                    -1 => None,
                    first if (0..offset).contains(&first) => Some(first),
                    _ => return Err(SnapshotError::Invalid("open transaction out of range")),
                }
            };
            let [n] = r.array::<1>()?;
            if n as usize > BATCHES_PER_PRODUCER {
                return Err(SnapshotError::Invalid("too many batches for a producer"));
            }
            let mut batches = VecDeque::with_capacity(n as usize);
            for _ in 0..n {
                let b = BatchMetadata {
                    first_seq: i32::from_be_bytes(r.array()?),
                    last_seq: i32::from_be_bytes(r.array()?),
                    first_offset: i64::from_be_bytes(r.array()?),
                    last_offset: i64::from_be_bytes(r.array()?),
                    max_timestamp: i64::from_be_bytes(r.array()?),
                };
                if b.first_seq < 0 || b.last_seq < 0 {
                    return Err(SnapshotError::Invalid("negative sequence"));
                }
                if b.first_offset < 0 || b.last_offset < b.first_offset || b.last_offset >= offset {
                    return Err(SnapshotError::Invalid("batch offsets out of range"));
                }
                batches.push_back(b);
            }
            producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp,
                    current_txn_first_offset,
                },
            );
        }
        if r.at != bytes.len() {
            return Err(SnapshotError::Invalid("trailing bytes"));
        }
        let mut state = ProducerState {
            producers,
            unstable: BTreeMap::new(),
        };
        state.rebuild_unstable();
        Ok((offset, state))
    }
}

/// A bounds-checked big-endian reader.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let end = self.at.checked_add(N).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(SnapshotError::Truncated {
                at: self.at,
                need: N - (self.bytes.len() - self.at),
            });
        };
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(a)
    }
}
