//! Why writing, listing or expiring failed: [`SinkError`], and where its variants come from.

use strata_proto::ids::Offset;
use strata_store::StoreError;

use crate::error::ConvertError;
use crate::source::{ReadError, SourceError};
use crate::stream::StreamError;

/// Why writing, listing or expiring failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The segment does not convert (see [`ConvertError::is_retryable`]).
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// The object store failed (see [`ErrorKind::is_retriable`]).
    ///
    /// [`ErrorKind::is_retriable`]: strata_store::ErrorKind::is_retriable
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The input could not be read (see [`SourceError::is_retryable`]).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The segment does not start where the partition's files end: a gap, or an overlap
    /// with what is already written.
    #[error("segment starts at offset {got}, the partition's Parquet files end before {expected}")]
    NotContiguous { expected: Offset, got: Offset },
    /// The manifest changed between our read and our write: another writer (a leader
    /// that took over). Reload and decide again; a retry skips what the other wrote.
    #[error("the Parquet manifest {key} was changed by another writer")]
    Conflict { key: String },
    /// The manifest does not parse or does not belong to this partition.
    #[error("Parquet manifest {key}: {reason}")]
    BadManifest { key: String, reason: String },
}

impl SinkError {
    /// Whether the same call can succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            SinkError::Convert(e) => e.is_retryable(),
            SinkError::Store(e) => e.kind().is_retriable(),
            SinkError::Source(e) => e.is_retryable(),
            SinkError::Conflict { .. } => true,
            SinkError::NotContiguous { .. } | SinkError::BadManifest { .. } => false,
        }
    }

    /// Whether the segment's own bytes are at fault ([`ConvertError::is_bad_data`]):
    /// what [`ParquetSink::write_segment_or_dead_letter`] sets aside.
    ///
    /// [`ParquetSink::write_segment_or_dead_letter`]: super::ParquetSink::write_segment_or_dead_letter
    pub fn is_bad_data(&self) -> bool {
        matches!(self, SinkError::Convert(e) if e.is_bad_data())
    }
}

impl From<ReadError> for SinkError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Convert(e) => SinkError::Convert(e),
            ReadError::Source(e) => SinkError::Source(e),
        }
    }
}

impl From<StreamError> for SinkError {
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::Read(e) => e.into(),
            StreamError::Store(e) => SinkError::Store(e),
        }
    }
}
