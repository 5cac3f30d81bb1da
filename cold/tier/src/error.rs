//! The tier's error type.

use strata_proto::ErrorCode;

use crate::manifest::ManifestError;

#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("object store: {0}")]
    Store(#[from] strata_store::StoreError),
    #[error("segment cache: {0}")]
    Cache(#[from] strata_cache::CacheError),
    #[error("manifest: {0}")]
    Manifest(#[from] ManifestError),
    /// Another leader committed to this partition's manifest since we loaded it.
    #[error("fenced: manifest sequence {seq} was committed by another leader")]
    Fenced { seq: u64 },
    #[error("offset {offset} is not in object storage")]
    NotRemote { offset: i64 },
    #[error("corrupt remote data in {key}: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("local segment file: {0}")]
    Io(#[from] std::io::Error),
    /// Re-cutting a local segment for upload failed.
    #[error("local log: {0}")]
    Log(#[from] strata_log::LogError),
}

impl TierError {
    /// The Kafka error a fetch or list-offsets gets for this failure.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            // A client retries these: the store may come back, the cache may refill.
            TierError::Store(_) | TierError::Cache(_) | TierError::Io(_) | TierError::Log(_) => {
                ErrorCode::KafkaStorageError
            }
            TierError::NotRemote { .. } => ErrorCode::OffsetOutOfRange,
            TierError::Fenced { .. } => ErrorCode::NotLeaderOrFollower,
            TierError::Manifest(_) | TierError::Corrupt { .. } => ErrorCode::KafkaStorageError,
        }
    }

    pub fn is_retriable(&self) -> bool {
        match self {
            TierError::Store(e) => e.is_retriable(),
            TierError::Cache(e) => e.is_retriable(),
            TierError::Io(_) => true,
            TierError::Log(e) => e.is_retriable(),
            _ => false,
        }
    }
}
