//! The object store as the chunk cache's source.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use strata_cache::{ChunkSource, SourceError};
use strata_store::{BlobStore, ErrorKind};

/// Adapts a [`BlobStore`] (with its retry and timeout wrappers) to [`ChunkSource`].
#[derive(Debug)]
pub struct StoreSource(pub Arc<dyn BlobStore>);

#[async_trait]
impl ChunkSource for StoreSource {
    async fn read_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, SourceError> {
        self.0
            .get_range(key, range)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => SourceError::not_found(e.to_string()),
                k if k.is_retriable() => SourceError::transient(e.to_string()),
                _ => SourceError::permanent(e.to_string()),
            })
    }
}
