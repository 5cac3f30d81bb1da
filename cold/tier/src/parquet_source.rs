//! The inputs of Parquet conversion ([`strata_parquet::ByteSource`]): a sealed local
//! segment read through the log a few MiB at a time, and a remote segment's object read
//! with ranged GETs, so that conversion never holds a whole segment.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use strata_log::SealedSpan;
use strata_parquet::{ByteSource, SourceError};
use strata_proto::Offset;
use strata_store::BlobStore;

use crate::error::TierError;
use crate::manifest::RemoteSegment;
use crate::remote::RemotePartition;
use crate::service::Tier;
use crate::tiered_log::TieredLog;

/// A sealed local segment's batches from an offset to its end ([`strata_log::Log::
/// sealed_span`]). Reads block on the disk: conversion runs on its own thread.
#[derive(Debug)]
pub struct LocalSegmentSource {
    log: Arc<TieredLog>,
    span: SealedSpan,
}

impl LocalSegmentSource {
    /// The batches `[from, end)` of the sealed segment holding `from`.
    pub fn open(
        log: Arc<TieredLog>,
        from: Offset,
        end: Offset,
    ) -> Result<LocalSegmentSource, strata_log::LogError> {
        let span = log.local().sealed_span(from, end)?;
        Ok(LocalSegmentSource { log, span })
    }
}

#[async_trait]
impl ByteSource for LocalSegmentSource {
    fn len(&self) -> u64 {
        self.span.len()
    }

    async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes, SourceError> {
        self.log
            .local()
            .read_sealed(&self.span, pos, len)
            .map_err(|e| SourceError::new(true, e))
    }
}

/// A remote segment's batches from an offset to its end, by ranged GETs of its `.log`
/// object (not through the chunk cache: a conversion reads each byte twice, in order,
/// and would only push out what consumers read).
#[derive(Debug)]
pub struct RemoteSegmentSource {
    store: Arc<dyn BlobStore>,
    /// Bounds concurrent remote reads with the fetch path's ([`Tier::read_permit`]).
    tier: Option<Arc<Tier>>,
    key: String,
    start: u64,
    len: u64,
}

impl RemoteSegmentSource {
    /// The batches of `seg` from the one holding `from`.
    pub async fn open(
        store: Arc<dyn BlobStore>,
        tier: Option<Arc<Tier>>,
        remote: &RemotePartition,
        seg: &RemoteSegment,
        from: Offset,
    ) -> Result<RemoteSegmentSource, TierError> {
        let (key, start) = remote.batch_position(seg, from).await?;
        Ok(RemoteSegmentSource {
            store,
            tier,
            key,
            start,
            len: seg.size_bytes.saturating_sub(start),
        })
    }
}

#[async_trait]
impl ByteSource for RemoteSegmentSource {
    fn len(&self) -> u64 {
        self.len
    }

    async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes, SourceError> {
        let _permit = match &self.tier {
            Some(t) => Some(t.read_permit().await),
            None => None,
        };
        let at = self.start + pos;
        self.store
            .get_range(&self.key, at..at + len as u64)
            .await
            .map_err(|e| SourceError::new(e.kind().is_retriable(), e))
    }
}
