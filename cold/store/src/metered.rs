//! [`MeteredStore`]: request, byte, error and latency metrics through the `metrics` facade.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Op, Result};
use crate::store::{
    BlobStore, FileMode, MultipartUpload, ObjectMeta, PartId, PutMode, PutResult, ReadResult,
    UploadConfig,
};

/// Requests by operation and outcome (`ok` or an error kind).
pub const REQUESTS_TOTAL: &str = "strata_store_requests_total";
/// Payload bytes by operation and direction (`out`: to the store, `in`: from it).
pub const BYTES_TOTAL: &str = "strata_store_bytes_total";
/// Request latency in seconds by operation.
pub const REQUEST_SECONDS: &str = "strata_store_request_seconds";
/// Failed requests by operation and error kind.
pub const ERRORS_TOTAL: &str = "strata_store_errors_total";
/// Retries by operation and the kind of error retried (counted by [`crate::RetryStore`]).
pub const RETRIES_TOTAL: &str = "strata_store_retries_total";

/// Registers the descriptions of the store's metrics with the installed recorder.
pub fn describe_metrics() {
    metrics::describe_counter!(REQUESTS_TOTAL, "Object-store requests by op and outcome");
    metrics::describe_counter!(
        BYTES_TOTAL,
        metrics::Unit::Bytes,
        "Object-store payload bytes by op and direction"
    );
    metrics::describe_histogram!(
        REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "Object-store request latency by op"
    );
    metrics::describe_counter!(ERRORS_TOTAL, "Object-store errors by op and kind");
    metrics::describe_counter!(RETRIES_TOTAL, "Object-store retries by op and error kind");
}

/// Counts and times every call. Placed outermost, it measures what callers see (one
/// request per call, latency including retries); the retry wrapper counts retries.
#[derive(Debug, Clone)]
pub struct MeteredStore {
    inner: Arc<dyn BlobStore>,
}

impl MeteredStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BlobStore>) -> Self {
        Self { inner }
    }
}

async fn measure<T>(
    op: Op,
    bytes_out: u64,
    bytes_in: impl FnOnce(&T) -> u64,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    let start = Instant::now();
    let result = fut.await;
    let op_label = op.as_str();
    metrics::histogram!(REQUEST_SECONDS, "op" => op_label).record(start.elapsed().as_secs_f64());
    let outcome = match &result {
        Ok(v) => {
            let n = bytes_in(v);
            if n > 0 {
                metrics::counter!(BYTES_TOTAL, "op" => op_label, "direction" => "in").increment(n);
            }
            if bytes_out > 0 {
                metrics::counter!(BYTES_TOTAL, "op" => op_label, "direction" => "out")
                    .increment(bytes_out);
            }
            "ok"
        }
        Err(e) => {
            metrics::counter!(ERRORS_TOTAL, "op" => op_label, "kind" => e.kind().as_str())
                .increment(1);
            e.kind().as_str()
        }
    };
    metrics::counter!(REQUESTS_TOTAL, "op" => op_label, "outcome" => outcome).increment(1);
    result
}

impl std::fmt::Display for MeteredStore {
    /// `metered(inner)`; the alternate form (`{:#}`) is the backend alone, as users name
    /// it (`file:///dir`, `s3://bucket/prefix`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            write!(f, "{:#}", self.inner)
        } else {
            write!(f, "metered({})", self.inner)
        }
    }
}

#[async_trait]
impl BlobStore for MeteredStore {
    async fn put(&self, path: &str, data: Bytes, mode: PutMode) -> Result<PutResult> {
        let n = data.len() as u64;
        measure(Op::Put, n, |_| 0, self.inner.put(path, data, mode)).await
    }

    async fn read(&self, path: &str, range: Option<Range<u64>>) -> Result<ReadResult> {
        let op = if range.is_some() {
            Op::GetRange
        } else {
            Op::Get
        };
        measure(
            op,
            0,
            |r: &ReadResult| r.data.len() as u64,
            self.inner.read(path, range),
        )
        .await
    }

    async fn head(&self, path: &str) -> Result<ObjectMeta> {
        measure(Op::Head, 0, |_| 0, self.inner.head(path)).await
    }

    async fn delete(&self, path: &str) -> Result<()> {
        measure(Op::Delete, 0, |_| 0, self.inner.delete(path)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        measure(Op::List, 0, |_| 0, self.inner.list(prefix)).await
    }

    async fn start_multipart(
        &self,
        path: &str,
        mode: FileMode,
        part_size: u64,
    ) -> Result<Box<dyn MultipartUpload>> {
        let inner = measure(
            Op::MultipartStart,
            0,
            |_| 0,
            self.inner.start_multipart(path, mode, part_size),
        )
        .await?;
        Ok(Box::new(MeteredUpload { inner }))
    }

    fn upload_config(&self) -> UploadConfig {
        self.inner.upload_config()
    }
}

#[derive(Debug)]
struct MeteredUpload {
    inner: Box<dyn MultipartUpload>,
}

#[async_trait]
impl MultipartUpload for MeteredUpload {
    fn path(&self) -> &str {
        self.inner.path()
    }

    async fn put_part(&self, index: usize, data: Bytes) -> Result<PartId> {
        let n = data.len() as u64;
        measure(Op::PutPart, n, |_| 0, self.inner.put_part(index, data)).await
    }

    async fn complete(&self, parts: Vec<PartId>) -> Result<PutResult> {
        measure(Op::MultipartComplete, 0, |_| 0, self.inner.complete(parts)).await
    }

    async fn abort(&self) -> Result<()> {
        measure(Op::MultipartAbort, 0, |_| 0, self.inner.abort()).await
    }
}
