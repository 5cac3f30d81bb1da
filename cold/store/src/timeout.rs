//! [`TimeoutStore`]: a deadline per attempt, and cancellation.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorKind, Op, Result, StoreError};
use crate::store::{
    BlobStore, FileMode, MultipartUpload, ObjectMeta, PartId, PutMode, PutResult, ReadResult,
    UploadConfig,
};

/// Deadlines per kind of request. Requests that carry a payload get
/// `transfer_base + bytes / min_throughput`, so an 8 MiB part is not held to the
/// deadline of a HEAD and a stalled 8 MiB part is not waited on for minutes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeoutConfig {
    /// HEAD.
    pub head: Duration,
    /// DELETE.
    pub delete: Duration,
    /// One LIST (all its pages).
    pub list: Duration,
    /// A whole-object GET, whose size is not known in advance (manifests, indexes).
    pub get: Duration,
    /// CreateMultipartUpload.
    pub multipart_start: Duration,
    /// CompleteMultipartUpload: S3 may take a while to assemble many parts.
    pub multipart_complete: Duration,
    /// AbortMultipartUpload.
    pub multipart_abort: Duration,
    /// The fixed part of a put, a part upload or a ranged GET.
    pub transfer_base: Duration,
    /// The slowest transfer rate (bytes per second) we wait for before giving up on an
    /// attempt, for puts, parts and ranged GETs.
    pub min_throughput: u64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self {
            head: Duration::from_secs(5),
            delete: Duration::from_secs(5),
            list: Duration::from_secs(30),
            get: Duration::from_secs(30),
            multipart_start: Duration::from_secs(10),
            multipart_complete: Duration::from_secs(60),
            multipart_abort: Duration::from_secs(10),
            transfer_base: Duration::from_secs(5),
            min_throughput: 1024 * 1024,
        }
    }
}

impl TimeoutConfig {
    /// Every deadline set to `d` and no allowance per byte; for tests.
    pub fn uniform(d: Duration) -> Self {
        Self {
            head: d,
            delete: d,
            list: d,
            get: d,
            multipart_start: d,
            multipart_complete: d,
            multipart_abort: d,
            transfer_base: d,
            min_throughput: u64::MAX,
        }
    }

    /// The deadline of a request carrying `bytes` bytes.
    pub fn for_transfer(&self, bytes: u64) -> Duration {
        let per_byte = Duration::from_secs_f64(bytes as f64 / self.min_throughput.max(1) as f64);
        self.transfer_base.saturating_add(per_byte)
    }
}

/// Fails each attempt that runs past its deadline with [`ErrorKind::Timeout`], and every
/// call in flight with [`ErrorKind::Cancelled`] once the cancellation token fires.
///
/// The two are different answers: a timeout is the remote end's fault and
/// worth retrying; a cancellation is our own decision (shutdown, a fetch whose client
/// went away) and is never retried. Dropping the returned future also cancels the
/// request, with no answer at all.
///
/// Put it below [`crate::RetryStore`] so that the deadline is per attempt. A timed-out
/// request may still be applied by the server later; the retry wrapper's documentation
/// says how conditional puts deal with that.
#[derive(Debug, Clone)]
pub struct TimeoutStore {
    inner: Arc<dyn BlobStore>,
    config: Arc<TimeoutConfig>,
    cancel: CancellationToken,
}

impl TimeoutStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BlobStore>, config: TimeoutConfig) -> Self {
        Self {
            inner,
            config: Arc::new(config),
            cancel: CancellationToken::new(),
        }
    }

    /// Cancels every call in flight, and fails every later one, when `token` fires.
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }
}

/// Runs `fut` unless `token` fires first, in which case the result is
/// [`ErrorKind::Cancelled`]: for callers that want to cancel one call rather than the
/// whole store.
pub async fn cancellable<T>(
    token: &CancellationToken,
    op: Op,
    path: &str,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::select! {
        biased;
        () = token.cancelled() => Err(StoreError::new(ErrorKind::Cancelled, op, path, "cancelled")),
        r = fut => r,
    }
}

async fn deadline<T>(
    cancel: &CancellationToken,
    op: Op,
    path: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    let timed = async {
        match tokio::time::timeout(limit, fut).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::new(
                ErrorKind::Timeout,
                op,
                path,
                format!("no answer within the {limit:?} deadline of one attempt"),
            )),
        }
    };
    cancellable(cancel, op, path, timed).await
}

impl std::fmt::Display for TimeoutStore {
    /// `timeout(inner)`; the alternate form (`{:#}`) is the backend alone, as users name
    /// it (`file:///dir`, `s3://bucket/prefix`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            write!(f, "{:#}", self.inner)
        } else {
            write!(f, "timeout({})", self.inner)
        }
    }
}

#[async_trait]
impl BlobStore for TimeoutStore {
    async fn put(&self, path: &str, data: Bytes, mode: PutMode) -> Result<PutResult> {
        let limit = self.config.for_transfer(data.len() as u64);
        deadline(
            &self.cancel,
            Op::Put,
            path,
            limit,
            self.inner.put(path, data, mode),
        )
        .await
    }

    async fn read(&self, path: &str, range: Option<Range<u64>>) -> Result<ReadResult> {
        let (op, limit) = match &range {
            Some(r) => (
                Op::GetRange,
                self.config.for_transfer(r.end.saturating_sub(r.start)),
            ),
            None => (Op::Get, self.config.get),
        };
        deadline(&self.cancel, op, path, limit, self.inner.read(path, range)).await
    }

    async fn head(&self, path: &str) -> Result<ObjectMeta> {
        deadline(
            &self.cancel,
            Op::Head,
            path,
            self.config.head,
            self.inner.head(path),
        )
        .await
    }

    async fn delete(&self, path: &str) -> Result<()> {
        deadline(
            &self.cancel,
            Op::Delete,
            path,
            self.config.delete,
            self.inner.delete(path),
        )
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        deadline(
            &self.cancel,
            Op::List,
            prefix,
            self.config.list,
            self.inner.list(prefix),
        )
        .await
    }

    async fn start_multipart(
        &self,
        path: &str,
        mode: FileMode,
        part_size: u64,
    ) -> Result<Box<dyn MultipartUpload>> {
        let limit = self.config.multipart_start;
        let inner = deadline(
            &self.cancel,
            Op::MultipartStart,
            path,
            limit,
            self.inner.start_multipart(path, mode, part_size),
        )
        .await?;
        Ok(Box::new(TimeoutUpload {
            inner,
            config: self.config.clone(),
            cancel: self.cancel.clone(),
        }))
    }

    fn upload_config(&self) -> UploadConfig {
        self.inner.upload_config()
    }
}

#[derive(Debug)]
struct TimeoutUpload {
    inner: Box<dyn MultipartUpload>,
    config: Arc<TimeoutConfig>,
    cancel: CancellationToken,
}

#[async_trait]
impl MultipartUpload for TimeoutUpload {
    fn path(&self) -> &str {
        self.inner.path()
    }

    async fn put_part(&self, index: usize, data: Bytes) -> Result<PartId> {
        // Per part, not per file: a 2 GiB segment is not one 30-minute deadline.
        let limit = self.config.for_transfer(data.len() as u64);
        let path = self.path();
        deadline(
            &self.cancel,
            Op::PutPart,
            path,
            limit,
            self.inner.put_part(index, data),
        )
        .await
    }

    async fn complete(&self, parts: Vec<PartId>) -> Result<PutResult> {
        let limit = self.config.multipart_complete;
        deadline(
            &self.cancel,
            Op::MultipartComplete,
            self.path(),
            limit,
            self.inner.complete(parts),
        )
        .await
    }

    async fn abort(&self) -> Result<()> {
        // Cleanup runs even after cancellation (that is when put_file aborts), bounded by
        // its deadline only.
        let limit = self.config.multipart_abort;
        let never = CancellationToken::new();
        deadline(
            &never,
            Op::MultipartAbort,
            self.path(),
            limit,
            self.inner.abort(),
        )
        .await
    }
}
