//! The one narrow trait the cache needs from object storage.
//!
//! `cold/store` owns the real object-store client; `cold/tier` adapts it to
//! [`ChunkSource`]. Keeping the trait here (and this small) lets the cache be
//! built and tested without the store, and keeps retry/timeout policy in the
//! store's wrappers, the one place that policy lives for every user of the store,
//! rather than in the cache.

use std::{fmt::Debug, ops::Range};

use async_trait::async_trait;
use bytes::Bytes;

/// Reads byte ranges of immutable objects.
///
/// Objects are immutable once written (segment objects carry a uuid in their
/// name), which is what makes caching them by `(key, chunk)` sound.
#[async_trait]
pub trait ChunkSource: Send + Sync + Debug + 'static {
    /// Exactly the bytes of `range` of object `key`: an error, never short data.
    ///
    /// The cache checks the length anyway and turns a wrong length into an
    /// error, so a truncated body never becomes a cached chunk.
    async fn read_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, SourceError>;
}

/// What kind of failure a [`SourceError`] is, which decides whether a retry can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// Throttling, a timeout, a reset connection, a 5xx: the same read may succeed later.
    Transient,
    /// The object does not exist (for example deleted by remote retention while a
    /// consumer was still reading it). Retrying the same key will not help.
    NotFound,
    /// Anything else that a retry cannot fix (bad credentials, invalid range, ...).
    Permanent,
}

/// A failed [`ChunkSource::read_range`].
///
/// `Clone` because one failed read is handed to every reader that was waiting
/// on the same chunk (single flight).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?} source error: {message}")]
pub struct SourceError {
    kind: SourceErrorKind,
    message: String,
}

impl SourceError {
    /// An error of the given kind.
    pub fn new(kind: SourceErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A transient error: a retry may succeed.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(SourceErrorKind::Transient, message)
    }

    /// The object does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(SourceErrorKind::NotFound, message)
    }

    /// A permanent error: a retry will fail the same way.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(SourceErrorKind::Permanent, message)
    }

    /// The kind of failure.
    pub fn kind(&self) -> SourceErrorKind {
        self.kind
    }

    /// Whether retrying the same read may succeed.
    pub fn is_retriable(&self) -> bool {
        self.kind == SourceErrorKind::Transient
    }

    /// The source's description of the failure.
    pub fn message(&self) -> &str {
        &self.message
    }
}
