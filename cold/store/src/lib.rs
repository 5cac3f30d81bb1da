//! Strata's object store (strata-store): one narrow async trait, [`BlobStore`], over the object_store
//! crate (S3 and S3-compatible servers such as MinIO, a local directory, memory).
//!
//! Tiered storage keeps sealed segments, their indexes and the partition manifests in a
//! bucket (docs/architecture.md, "Object layout in the bucket"). This crate is the only
//! code that talks to it. The trait is small on purpose: put (with `Create`/`Update`
//! conditions for metadata, so a fenced writer's put fails instead of overwriting its
//! successor's), put_file (multipart for segments), get, get_range, head, delete and
//! list. Everything cross-cutting is a wrapper that implements the same trait around an
//! `Arc<dyn BlobStore>`, so each concern is one type, composed with the others in a
//! chosen order and tested alone:
//!
//! - [`RetryStore`]: exponential backoff with full jitter on throttling (S3 503 SlowDown),
//!   transient failures and timeouts; seeded jitter; resolves ambiguous conditional puts.
//! - [`TimeoutStore`]: a deadline per attempt, sized to the payload; cancellation.
//! - [`MeteredStore`]: requests, bytes, errors and latency by operation.
//! - [`FaultStore`]: injected errors, delays, truncated bodies, failed parts, for tests.
//!
//! [`layered`] builds the production stack, `metered(retry(timeout(backend)))`: the
//! timeout sits below the retry so that it bounds each attempt, and the metrics sit on
//! top so that they see what callers see. Tests put a [`FaultStore`] right above the
//! backend.
//!
//! ```no_run
//! # async fn demo() -> strata_store::Result<()> {
//! use strata_store::{layered, open_url, LayerConfig, PutMode};
//! let store = layered(open_url("file:///tmp/strata-cold")?.into_dyn(), LayerConfig::default());
//! store.put("cluster/topics/t-1/0/manifest/00000001", "m".into(), PutMode::Create).await?;
//! let bytes = store.get_range("cluster/topics/t-1/0/manifest/00000001", 0..1).await?;
//! # Ok(()) }
//! ```
//!
//! Errors are one type, [`StoreError`], whose [`ErrorKind`] says whether retrying helps.
//! With the `testing` feature, [`testing`] holds the conformance suite every backend
//! passes and a helper that runs a real S3 server (s3s-fs) on loopback.
//!
//! Modules (private but [`testing`]; their types are re-exported here):
//!
//! * `store.rs`: the [`BlobStore`] trait and the types it speaks ([`PutMode`], ...).
//! * `backend.rs`: [`ObjectBackend`] over object_store (S3, local directory, memory),
//!   [`open_url`], and [`STAGING_PREFIX`] for create-mode multipart staging.
//! * `upload.rs`: `put_file`, a local file to one object (multipart when large, aborted
//!   on failure) through the trait's own calls, so every wrapper sees every request.
//! * `retry.rs`, `timeout.rs`, `metered.rs`, `fault.rs`: the wrappers above.
//! * `error.rs`: [`StoreError`], the one place object_store's errors are mapped.

mod backend;
mod error;
mod fault;
mod metered;
mod retry;
mod store;
mod timeout;
mod upload;

#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

pub use backend::{ObjectBackend, STAGING_PREFIX, open_url, open_url_with_env};
pub use error::{BoxError, ErrorKind, Op, Result, StoreError};
pub use fault::{Fault, FaultHandle, FaultStore, RandomFaults};
pub use metered::{
    BYTES_TOTAL, ERRORS_TOTAL, MeteredStore, REQUEST_SECONDS, REQUESTS_TOTAL, RETRIES_TOTAL,
    describe_metrics,
};
pub use retry::{RetryConfig, RetryStore};
pub use store::{
    BlobStore, FileMode, MIN_PART_SIZE, MultipartUpload, ObjectMeta, PartId, PutMode, PutResult,
    ReadResult, UploadConfig, Version,
};
pub use timeout::{TimeoutConfig, TimeoutStore, cancellable};
pub use tokio_util::sync::CancellationToken;

/// The settings of the production wrapper stack.
#[derive(Debug, Clone, Default)]
pub struct LayerConfig {
    /// Retry policy.
    pub retry: RetryConfig,
    /// Per-attempt deadlines.
    pub timeout: TimeoutConfig,
    /// Cancels every call in flight (and later ones) when it fires, e.g. at shutdown.
    pub cancel: Option<CancellationToken>,
}

/// Wraps `backend` as `metered(retry(timeout(backend)))`.
pub fn layered(backend: Arc<dyn BlobStore>, config: LayerConfig) -> Arc<dyn BlobStore> {
    let mut timeout = TimeoutStore::new(backend, config.timeout);
    let mut retry_config = config.retry;
    if let Some(token) = &config.cancel {
        timeout = timeout.with_cancellation(token.clone());
    }
    retry_config.max_attempts = retry_config.max_attempts.max(1);
    let mut retry = RetryStore::new(Arc::new(timeout), retry_config);
    if let Some(token) = config.cancel {
        retry = retry.with_cancellation(token);
    }
    Arc::new(MeteredStore::new(Arc::new(retry)))
}
