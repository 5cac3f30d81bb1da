//! The cache's error type: says what failed and whether a retry can help.

use std::ops::Range;

use crate::source::SourceError;

/// An error from [`ChunkCache`](crate::ChunkCache).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The configuration is invalid.
    #[error("invalid cache config: {0}")]
    Config(String),
    /// The disk tier could not be opened (directory, lock, foyer build).
    #[error("cannot open the disk cache in {dir}: {message}")]
    Open {
        /// The cache directory.
        dir: String,
        /// What went wrong.
        message: String,
    },
    /// The requested range is not within the object (or is reversed).
    #[error("range {range:?} is outside object {key} of {object_size} bytes")]
    OutOfRange {
        /// Object key.
        key: String,
        /// Requested range.
        range: Range<u64>,
        /// Object size given by the caller.
        object_size: u64,
    },
    /// The source failed to read a chunk. Every reader waiting on that chunk gets
    /// this error; nothing is cached, so the next read tries the source again.
    #[error("reading chunk {chunk} of {key} from the source failed: {source}")]
    Source {
        /// Object key.
        key: String,
        /// Chunk index.
        chunk: u64,
        /// The source's error.
        #[source]
        source: SourceError,
    },
    /// The source returned a different number of bytes than asked for (for
    /// example a truncated body). Not cached.
    #[error(
        "source returned {actual} bytes for chunk {chunk} of {key} (range {range:?}), expected {expected}"
    )]
    WrongLength {
        /// Object key.
        key: String,
        /// Chunk index.
        chunk: u64,
        /// The byte range asked for.
        range: Range<u64>,
        /// Bytes expected.
        expected: u64,
        /// Bytes returned.
        actual: u64,
    },
    /// A cached chunk has a different length than `object_size` implies: the
    /// caller passed a different size for the same object than before.
    #[error(
        "cached chunk {chunk} of {key} has {actual} bytes but object size {object_size} implies {expected}"
    )]
    SizeMismatch {
        /// Object key.
        key: String,
        /// Chunk index.
        chunk: u64,
        /// Object size given by the caller.
        object_size: u64,
        /// Length implied by `object_size`.
        expected: u64,
        /// Length of the cached chunk.
        actual: u64,
    },
    /// The cache itself failed (a foyer error, for example a disk read error).
    #[error("cache failure: {0}")]
    Internal(#[source] foyer::Error),
}

impl CacheError {
    /// Whether retrying the same read may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            CacheError::Source { source, .. } => source.is_retriable(),
            // A truncated body is a transport fault; the next GET is likely whole.
            CacheError::WrongLength { .. } => true,
            CacheError::Internal(_) => true,
            CacheError::Config(_)
            | CacheError::Open { .. }
            | CacheError::OutOfRange { .. }
            | CacheError::SizeMismatch { .. } => false,
        }
    }
}

/// Result of cache operations.
pub type Result<T, E = CacheError> = std::result::Result<T, E>;
