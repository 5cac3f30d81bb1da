//! The log's error type.

use std::path::PathBuf;

use strata_proto::{BatchError, ErrorCode, Offset};

use crate::producer::ProducerError;

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    #[error("batch set of {size} bytes is larger than segment.bytes {segment_bytes}")]
    RecordListTooLarge { size: usize, segment_bytes: u64 },
    #[error("offset {requested} is outside the log [{start}, {end})")]
    OffsetOutOfRange {
        requested: Offset,
        start: Offset,
        end: Offset,
    },
    #[error("empty append")]
    EmptyAppend,
    #[error(
        "the log [{start}, {end}) is not empty (or {requested} is behind it): it cannot restart at {requested}"
    )]
    NotEmpty {
        start: Offset,
        end: Offset,
        requested: Offset,
    },
    /// An idempotent producer's batch came with other batches. Produce v3 and later
    /// carry exactly one batch per partition, and the sequence checks assume it (Kafka
    /// refuses such a request with INVALID_RECORD).
    #[error("a batch with a producer id must be appended alone, got {batches} batches")]
    ProducerBatchNotAlone { batches: usize },
    /// A control batch given to [`crate::Log::append`]: only the leader writes
    /// transaction markers, through [`crate::Log::append_marker`] (Kafka refuses a
    /// producer's control batch with INVALID_RECORD).
    #[error("control batches are written by the broker only")]
    ControlBatchFromProducer,
    /// The idempotent-producer checks refused the batch.
    #[error(transparent)]
    Producer(#[from] ProducerError),
    /// A truncation target inside a batch. Kafka truncates to batch boundaries, and a
    /// follower's truncation offsets (epoch ends) always are.
    #[error(
        "offset {offset} is inside the batch [{batch_base}, {batch_next}), not at a batch boundary"
    )]
    NotBatchBoundary {
        offset: Offset,
        batch_base: Offset,
        batch_next: Offset,
    },
    /// A follower's batches overlap the log: the first must start at or after the log
    /// end and each at or after where the previous ended (Kafka's
    /// `UnexpectedAppendOffsetException`). The follower refetches from its log end.
    #[error("replicated batch starts at offset {found}, before {expected}")]
    UnexpectedAppendOffset { expected: Offset, found: Offset },
    /// One batch holds more records than the cleaner's whole offset map has room for:
    /// raise the dedupe buffer.
    #[error(
        "a batch of {records} records does not fit the cleaner's offset map ({capacity} keys): raise --log-cleaner-dedupe-buffer-size"
    )]
    DedupeBufferTooSmall { records: usize, capacity: usize },
    /// A range read ([`crate::Log::read_range`]) found no batch at `offset` that ends
    /// at or below `end`: `end` is not a batch boundary of this log, or the range is
    /// not (or no longer) all in it.
    #[error("no batch at offset {offset} below {end}")]
    NoBatch { offset: Offset, end: Offset },
    #[error("corrupt log data in {path} at byte {position}: {reason}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
}

impl LogError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::Io { op, path, source }
    }

    /// The Kafka error a client gets for this failure.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            LogError::Io { .. } | LogError::Corrupt { .. } | LogError::NoBatch { .. } => {
                ErrorCode::KafkaStorageError
            }
            LogError::InvalidBatch(e) => e.error_code(),
            LogError::RecordListTooLarge { .. } => ErrorCode::RecordListTooLarge,
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            LogError::EmptyAppend => ErrorCode::CorruptMessage,
            LogError::NotEmpty { .. } => ErrorCode::UnknownServerError,
            LogError::ProducerBatchNotAlone { .. } | LogError::ControlBatchFromProducer => {
                ErrorCode::InvalidRecord
            }
            LogError::Producer(e) => e.error_code(),
            LogError::NotBatchBoundary { .. } => ErrorCode::UnknownServerError,
            LogError::UnexpectedAppendOffset { .. } | LogError::DedupeBufferTooSmall { .. } => {
                ErrorCode::UnknownServerError
            }
        }
    }

    /// Whether the same call may succeed later (an IO error may be transient; a bad
    /// batch never becomes good).
    pub fn is_retriable(&self) -> bool {
        matches!(self, LogError::Io { .. })
    }
}
