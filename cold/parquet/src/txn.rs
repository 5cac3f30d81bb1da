//! Which batches are transaction control records or aborted data, so they never become rows.
//!
//! Strata refuses transactional produce today, but segments written elsewhere (a migrated
//! Kafka log) may hold transactions, and the files must show what a `read_committed`
//! consumer sees.
//!
//! # How aborted data is found
//!
//! In Kafka (KIP-98) a transactional producer writes its data in batches with the
//! transactional bit set, and the transaction coordinator ends the transaction by writing
//! a control batch (control bit set, same producer id) holding one control record whose
//! key is `version: int16, type: int16`, type 0 = ABORT and 1 = COMMIT (Kafka's
//! `ControlRecordType`; other types, such as KRaft's, are not transaction markers). A
//! producer id has at most one transaction open at a time, so a marker ends exactly the
//! transactional batches of that producer since its previous marker.
//!
//! Kafka brokers keep an index of aborted transactions per segment and hand it to
//! `read_committed` fetches; we do not have it, and do not need it: the markers are in the
//! log. The converter walks the batches once before writing, keeping for each producer id
//! the transactional batches of its open transaction. A COMMIT forgets them (they are
//! rows); an ABORT marks them aborted (no rows). Control batches are never rows. This is
//! the same decision a `read_committed` consumer makes with the broker's list of aborted
//! transactions (producer id and first offset), made from the markers directly.
//!
//! A transaction still open at the end of the input has its marker in a later segment.
//! The caller can pass the markers of what follows ([`scan_markers`] over the next
//! segments, in [`crate::ConvertOptions::later_markers`]); a transaction that is still
//! unresolved is handled by [`PendingTxnPolicy`], which by default fails the conversion
//! (retryable: wait until the log has the marker, as Kafka's last stable offset waits).

use std::collections::HashMap;

use strata_proto::BatchHeader;
use strata_proto::batch::{self, RecordBatch};
use strata_proto::control;
use strata_proto::ids::{Offset, ProducerId};

use crate::error::ConvertError;

/// How a transaction ended (strata-proto's, re-exported).
pub use strata_proto::control::MarkerKind;

/// A transaction marker: producer `producer_id`'s transaction ended at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: ProducerId,
    pub offset: Offset,
    pub kind: MarkerKind,
}

/// What to do with a transaction whose marker is neither in the input nor in
/// [`crate::ConvertOptions::later_markers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PendingTxnPolicy {
    /// Fail with [`ConvertError::PendingTransaction`] (retryable). Writing would be a
    /// guess, and a Parquet file is not rewritten.
    #[default]
    Fail,
    /// Write the records, as if committed (what `read_uncommitted` shows).
    Include,
    /// Leave the records out, as if aborted.
    Exclude,
}

/// What becomes of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    Rows,
    Control,
    Aborted,
}

/// Reads the marker of a control batch: `None` for a control record that is not a
/// transaction marker, or for a control batch emptied by compaction
/// ([`strata_proto::control::marker_kind`]).
pub(crate) fn control_marker(b: &RecordBatch<'_>) -> Result<Option<MarkerKind>, ConvertError> {
    control::marker_kind(b).map_err(|e| match e {
        control::MarkerError::Batch { offset, source } => ConvertError::Batch {
            base_offset: offset,
            source,
        },
        control::MarkerError::Bad { offset, reason } => ConvertError::BadControlRecord {
            base_offset: offset,
            reason,
        },
    })
}

/// The transaction markers in a segment, in offset order: what a conversion of the
/// segment before it needs in [`crate::ConvertOptions::later_markers`]. Reads only
/// control batches.
pub fn scan_markers(segment: &[u8]) -> Result<Vec<TxnMarker>, ConvertError> {
    let mut out = Vec::new();
    let mut iter = batch::batches(segment);
    loop {
        let position = segment.len() - iter.remaining().len();
        let Some(next) = iter.next() else {
            return Ok(out);
        };
        let b = next.map_err(|source| ConvertError::Framing { position, source })?;
        let h = b.header();
        if !h.is_control() {
            continue;
        }
        b.validate_crc().map_err(|source| ConvertError::Batch {
            base_offset: h.base_offset,
            source,
        })?;
        if let Some(kind) = control_marker(&b)? {
            out.push(TxnMarker {
                producer_id: h.producer_id,
                offset: h.base_offset,
                kind,
            });
        }
    }
}

/// Decides each batch's [`Fate`], in one pass over the headers (data batches are not
/// decompressed). Keeps only the base offsets of transactional batches (open, then
/// aborted), not one entry per batch, so a streaming conversion's first pass over a
/// large segment stays small.
#[derive(Debug, Default)]
pub(crate) struct FateScan {
    /// Base offsets of the batches of aborted transactions.
    aborted: Vec<Offset>,
    /// Per producer: first offset and the base offsets of its open transaction's batches.
    open: HashMap<ProducerId, (Offset, Vec<Offset>)>,
}

/// Each batch's fate, by its header: what [`FateScan::finish`] decided.
#[derive(Debug, Default)]
pub(crate) struct Fates {
    /// Sorted.
    aborted: Vec<Offset>,
}

impl Fates {
    /// The fate of a batch the scan saw (base offsets are unique: the scan refuses
    /// batches out of order).
    pub(crate) fn of(&self, h: &BatchHeader) -> Fate {
        if h.is_control() {
            Fate::Control
        } else if self.aborted.binary_search(&h.base_offset).is_ok() {
            Fate::Aborted
        } else {
            Fate::Rows
        }
    }
}

impl FateScan {
    pub(crate) fn push(&mut self, b: &RecordBatch<'_>) -> Result<(), ConvertError> {
        let h = b.header();
        if h.is_control() {
            if let Some(kind) = control_marker(b)? {
                self.resolve(h.producer_id, kind);
            }
        } else if h.is_transactional() {
            self.open
                .entry(h.producer_id)
                .or_insert_with(|| (h.base_offset, Vec::new()))
                .1
                .push(h.base_offset);
        }
        Ok(())
    }

    fn resolve(&mut self, producer_id: ProducerId, kind: MarkerKind) {
        // A marker without open batches ends a transaction whose data came before the
        // input: nothing to do here.
        if let Some((_, batches)) = self.open.remove(&producer_id)
            && kind == MarkerKind::Abort
        {
            self.aborted.extend(batches);
        }
    }

    /// Resolves what is still open with `later` markers, then `policy`.
    pub(crate) fn finish(
        mut self,
        later: &[TxnMarker],
        policy: PendingTxnPolicy,
    ) -> Result<Fates, ConvertError> {
        let mut pending: Vec<(ProducerId, Offset)> = self
            .open
            .iter()
            .map(|(p, (first, _))| (*p, *first))
            .collect();
        // Deterministic: the earliest open transaction is the one reported.
        pending.sort_by_key(|(_, first)| *first);
        for (producer_id, first_offset) in pending {
            let marker = later
                .iter()
                .filter(|m| m.producer_id == producer_id && m.offset > first_offset)
                .min_by_key(|m| m.offset);
            let kind = match (marker, policy) {
                (Some(m), _) => m.kind,
                (None, PendingTxnPolicy::Include) => MarkerKind::Commit,
                (None, PendingTxnPolicy::Exclude) => MarkerKind::Abort,
                (None, PendingTxnPolicy::Fail) => {
                    return Err(ConvertError::PendingTransaction {
                        producer_id,
                        first_offset,
                    });
                }
            };
            self.resolve(producer_id, kind);
        }
        self.aborted.sort_unstable();
        Ok(Fates {
            aborted: self.aborted,
        })
    }
}
