//! The converter's error: what went wrong, and whether trying again can help.

use arrow::error::ArrowError;
use parquet::errors::ParquetError;
use strata_proto::batch::BatchError;
use strata_proto::ids::{Offset, ProducerId};

use crate::value_schema::SchemaError;

/// Why a conversion failed. A record that does not fit the JSON value schema is not an
/// error (it goes to `_raw`); these are.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input has no batch at all, so there is no offset range to name the file by.
    #[error("no record batches to convert")]
    Empty,
    /// The segment bytes do not split into batches (a torn or corrupt segment).
    #[error("batch at byte {position} of the segment does not frame: {source}")]
    Framing {
        position: usize,
        #[source]
        source: BatchError,
    },
    /// A batch failed its CRC, its codec, or its records do not parse.
    #[error("batch at offset {base_offset}: {source}")]
    Batch {
        base_offset: Offset,
        #[source]
        source: BatchError,
    },
    /// A control batch whose record is not a valid control record.
    #[error("control batch at offset {base_offset}: {reason}")]
    BadControlRecord {
        base_offset: Offset,
        reason: &'static str,
    },
    /// Batches are not in increasing offset order.
    #[error("batch at offset {base_offset} follows a batch ending at {previous_last_offset}")]
    OutOfOrder {
        base_offset: Offset,
        previous_last_offset: Offset,
    },
    /// A transaction is still open at the end of the input and no later marker says how it
    /// ended; see [`crate::PendingTxnPolicy`].
    #[error(
        "transaction of producer {producer_id} starting at offset {first_offset} has no commit or abort marker in the input"
    )]
    PendingTransaction {
        producer_id: ProducerId,
        first_offset: Offset,
    },
    /// The options are unusable (for example a zstd level out of range).
    #[error("invalid conversion options: {0}")]
    InvalidOptions(String),
    /// The topic's `parquet.value.schema` is not a valid schema.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Building Arrow arrays failed (a bug: the converter builds them to the schema).
    #[error("building Arrow arrays: {0}")]
    Arrow(#[from] ArrowError),
    /// The Parquet writer failed; with a caller's writer this includes its IO errors.
    #[error("writing Parquet: {0}")]
    Parquet(#[from] ParquetError),
}

impl ConvertError {
    /// Whether the same conversion can succeed later. Everything but a pending transaction
    /// (resolved once more of the log is available) and the caller's own IO is a property
    /// of the input or the options, so retrying it gives the same answer.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ConvertError::PendingTransaction { .. }
                | ConvertError::Parquet(ParquetError::External(_))
        )
    }

    /// Whether the input itself is at fault, so the same bytes never convert whatever
    /// is retried: a batch that does not frame, fails its CRC, does not decompress (or
    /// decompresses past the cap), or whose records do not parse; batches out of order;
    /// and what the Arrow or Parquet writer refuses of the data. Not the options or the
    /// value schema (the operator fixes those, and every segment would fail alike), not
    /// a pending transaction, not the caller's IO. What [`crate::ParquetSink`] records
    /// as a dead letter instead of stalling on it.
    pub fn is_bad_data(&self) -> bool {
        match self {
            ConvertError::Framing { .. }
            | ConvertError::Batch { .. }
            | ConvertError::BadControlRecord { .. }
            | ConvertError::OutOfOrder { .. }
            | ConvertError::Arrow(_) => true,
            ConvertError::Parquet(e) => !matches!(e, ParquetError::External(_)),
            // No batch at all names no range to set aside.
            ConvertError::Empty
            | ConvertError::PendingTransaction { .. }
            | ConvertError::InvalidOptions(_)
            | ConvertError::Schema(_) => false,
        }
    }

    /// The base offset of the batch at fault, when one is.
    pub(crate) fn batch_offset(&self) -> Option<Offset> {
        match self {
            ConvertError::Batch { base_offset, .. }
            | ConvertError::BadControlRecord { base_offset, .. } => Some(*base_offset),
            _ => None,
        }
    }
}
