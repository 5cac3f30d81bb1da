//! [`RetryStore`]: retries throttled, transient and timed-out requests with exponential
//! backoff and full jitter.

use std::collections::HashMap;
use std::future::Future;
use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorKind, Op, Result, StoreError};
use crate::store::{
    BlobStore, FileMode, MultipartUpload, ObjectMeta, PartId, PutMode, PutResult, ReadResult,
    UploadConfig,
};

/// How [`RetryStore`] retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts per operation, the first included.
    pub max_attempts: u32,
    /// The backoff cap of the first retry; it doubles per retry up to `max_backoff`.
    pub initial_backoff: Duration,
    /// The largest backoff cap.
    pub max_backoff: Duration,
    /// No retry starts once this much time has passed since the first attempt, so a
    /// caller's wait is bounded whatever the attempt count.
    pub max_elapsed: Duration,
    /// Seeds the jitter, for deterministic tests; `None` seeds from the OS.
    pub seed: Option<u64>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_elapsed: Duration::from_secs(60),
            seed: None,
        }
    }
}

/// Retries [`ErrorKind::is_retriable`] failures (Throttled, Transient, Timeout) and
/// nothing else, sleeping a uniformly random time in `[0, min(max_backoff,
/// initial_backoff * 2^retry))` ("full jitter", which AWS recommends so that clients
/// throttled together do not retry together), within `max_attempts` and `max_elapsed`.
///
/// Time is tokio's clock (`tokio::time`), for the budget as for the sleeps, so tests
/// run it paused and deterministic; the jitter's randomness is seeded
/// ([`RetryConfig::seed`]).
///
/// Reads are verified inside each attempt ([`ReadResult::verify`]), so a body cut short
/// is retried like any transient fault and never returned.
///
/// # Ambiguous conditional puts
///
/// A put that timed out or failed mid-flight may have been applied. If a retry of a
/// `Create` put then gets AlreadyExists (or of an `Update` put, PreconditionFailed), the
/// object may be our own first attempt. The wrapper reads the object back and compares
/// it byte for byte with what it was writing: equal means our write landed and the put
/// succeeds (with the object's current etag); different means someone else's object is
/// there and the error stands. Objects put this way are small (manifests); the only
/// case this gets "wrong" is another writer storing identical bytes at the same moment,
/// which leaves the bucket exactly as our put would have.
///
/// A multipart completion retried after an ambiguous failure that then fails for good
/// (the upload id is gone: S3 answers 404 NoSuchUpload, s3s-fs 403 AccessDenied; or a
/// `Create` finds the key taken) succeeds if the object at the key has exactly the
/// uploaded size and every part's bytes, read back one part at a time, have the
/// CRC-32C of the part we sent (the wrapper keeps one checksum per part, not the
/// parts). The read-back costs one object's worth of GETs, only in this rare case.
/// A retried CreateMultipartUpload whose first answer was lost leaves an orphan upload
/// on S3: configure the bucket's AbortIncompleteMultipartUpload lifecycle rule, as AWS
/// advises.
#[derive(Debug, Clone)]
pub struct RetryStore {
    inner: Arc<dyn BlobStore>,
    policy: Arc<Policy>,
}

#[derive(Debug)]
struct Policy {
    config: RetryConfig,
    rng: Mutex<SplitMix64>,
    cancel: CancellationToken,
}

/// SplitMix64: tiny, seedable, good enough for jitter.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The last error of a retried operation, and whether an earlier attempt may have been
/// applied (it timed out or failed in flight).
struct Failed {
    error: StoreError,
    ambiguous: bool,
}

impl Policy {
    /// The backoff before retry number `retry` (from 1).
    fn backoff(&self, retry: u32) -> Duration {
        let cap = self
            .config
            .initial_backoff
            .saturating_mul(
                1u32.checked_shl(retry.saturating_sub(1))
                    .unwrap_or(u32::MAX),
            )
            .min(self.config.max_backoff);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        let r = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next();
        Duration::from_nanos(r % nanos)
    }

    async fn run<T, Fut>(
        &self,
        op: Op,
        path: &str,
        mut attempt: impl FnMut() -> Fut,
    ) -> Result<T, Failed>
    where
        Fut: Future<Output = Result<T>>,
    {
        let start = Instant::now();
        let mut ambiguous = false;
        let mut n = 0u32;
        loop {
            n += 1;
            let error = match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if matches!(error.kind(), ErrorKind::Timeout | ErrorKind::Transient) {
                ambiguous = true;
            }
            if !error.is_retriable() || n >= self.config.max_attempts {
                return Err(Failed { error, ambiguous });
            }
            let delay = self.backoff(n);
            if start.elapsed() + delay > self.config.max_elapsed {
                return Err(Failed { error, ambiguous });
            }
            metrics::counter!("strata_store_retries_total", "op" => op.as_str(), "kind" => error.kind().as_str())
                .increment(1);
            tracing::debug!(%op, path, attempt = n, ?delay, error = %error, "retrying object-store request");
            tokio::select! {
                () = self.cancel.cancelled() => {
                    return Err(Failed {
                        error: StoreError::new(ErrorKind::Cancelled, op, path, "cancelled while waiting to retry"),
                        ambiguous,
                    });
                }
                () = tokio::time::sleep(delay) => {}
            }
        }
    }
}

impl RetryStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BlobStore>, config: RetryConfig) -> Self {
        let seed = config
            .seed
            .unwrap_or_else(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
        Self {
            inner,
            policy: Arc::new(Policy {
                config,
                rng: Mutex::new(SplitMix64(seed)),
                cancel: CancellationToken::new(),
            }),
        }
    }

    /// Stops waiting between attempts when `token` fires (the attempt in flight is the
    /// timeout wrapper's to cancel), returning [`ErrorKind::Cancelled`].
    pub fn with_cancellation(self, token: CancellationToken) -> Self {
        let policy = Policy {
            config: self.policy.config.clone(),
            rng: Mutex::new(SplitMix64(
                self.policy
                    .rng
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .0,
            )),
            cancel: token,
        };
        Self {
            inner: self.inner,
            policy: Arc::new(policy),
        }
    }

    async fn resolve_put(&self, path: &str, data: &Bytes, failed: StoreError) -> Result<PutResult> {
        match self.get(path).await {
            Ok(existing) if existing == *data => {
                tracing::info!(
                    path,
                    "a retried conditional put found its own earlier write"
                );
                let meta = self.head(path).await?;
                Ok(PutResult {
                    e_tag: meta.e_tag,
                    version: meta.version,
                })
            }
            _ => Err(failed),
        }
    }
}

impl std::fmt::Display for RetryStore {
    /// `retry(inner)`; the alternate form (`{:#}`) is the backend alone, as users name
    /// it (`file:///dir`, `s3://bucket/prefix`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            write!(f, "{:#}", self.inner)
        } else {
            write!(f, "retry({})", self.inner)
        }
    }
}

#[async_trait]
impl BlobStore for RetryStore {
    async fn put(&self, path: &str, data: Bytes, mode: PutMode) -> Result<PutResult> {
        let inner = &self.inner;
        let result = self
            .policy
            .run(Op::Put, path, || {
                inner.put(path, data.clone(), mode.clone())
            })
            .await;
        match result {
            Ok(r) => Ok(r),
            Err(Failed {
                error,
                ambiguous: true,
            }) if matches!(
                (&mode, error.kind()),
                (PutMode::Create, ErrorKind::AlreadyExists)
                    | (PutMode::Update(_), ErrorKind::PreconditionFailed)
            ) =>
            {
                self.resolve_put(path, &data, error).await
            }
            Err(f) => Err(f.error),
        }
    }

    async fn read(&self, path: &str, range: Option<Range<u64>>) -> Result<ReadResult> {
        let op = if range.is_some() {
            Op::GetRange
        } else {
            Op::Get
        };
        let inner = &self.inner;
        self.policy
            .run(op, path, || {
                let range = range.clone();
                async move {
                    let r = inner.read(path, range.clone()).await?;
                    r.clone().verify(op, path, range.as_ref())?;
                    Ok(r)
                }
            })
            .await
            .map_err(|f| f.error)
    }

    async fn head(&self, path: &str) -> Result<ObjectMeta> {
        let inner = &self.inner;
        self.policy
            .run(Op::Head, path, || inner.head(path))
            .await
            .map_err(|f| f.error)
    }

    async fn delete(&self, path: &str) -> Result<()> {
        let inner = &self.inner;
        self.policy
            .run(Op::Delete, path, || inner.delete(path))
            .await
            .map_err(|f| f.error)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let inner = &self.inner;
        self.policy
            .run(Op::List, prefix, || inner.list(prefix))
            .await
            .map_err(|f| f.error)
    }

    async fn start_multipart(
        &self,
        path: &str,
        mode: FileMode,
        part_size: u64,
    ) -> Result<Box<dyn MultipartUpload>> {
        let inner = &self.inner;
        let upload = self
            .policy
            .run(Op::MultipartStart, path, || {
                inner.start_multipart(path, mode, part_size)
            })
            .await
            .map_err(|f| f.error)?;
        Ok(Box::new(RetryUpload {
            inner: upload,
            store: self.clone(),
            checksums: Mutex::new(HashMap::new()),
        }))
    }

    fn upload_config(&self) -> UploadConfig {
        self.inner.upload_config()
    }
}

#[derive(Debug)]
struct RetryUpload {
    inner: Box<dyn MultipartUpload>,
    store: RetryStore,
    /// CRC-32C of each part sent, to recognise our own object after an ambiguous
    /// completion without keeping the parts.
    checksums: Mutex<HashMap<usize, u32>>,
}

impl RetryUpload {
    /// Whether the object at our key is exactly the parts we uploaded: same size, and
    /// each part's bytes (read back one part at a time) have the CRC-32C we sent.
    async fn is_ours(&self, parts: &[PartId]) -> bool {
        let total: u64 = parts.iter().map(|p| p.size).sum();
        match self.store.head(self.path()).await {
            Ok(meta) if meta.size == total => {}
            _ => return false,
        }
        let mut offset = 0u64;
        for part in parts {
            let sent = self
                .checksums
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&part.index)
                .copied();
            let Some(sent) = sent else { return false };
            match self
                .store
                .get_range(self.path(), offset..offset + part.size)
                .await
            {
                Ok(bytes) if crc32c::crc32c(&bytes) == sent => {}
                _ => return false,
            }
            offset += part.size;
        }
        true
    }
}

#[async_trait]
impl MultipartUpload for RetryUpload {
    fn path(&self) -> &str {
        self.inner.path()
    }

    async fn put_part(&self, index: usize, data: Bytes) -> Result<PartId> {
        // Safe to repeat: uploading part `index` again replaces it.
        let crc = crc32c::crc32c(&data);
        self.checksums
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, crc);
        let inner = &self.inner;
        self.store
            .policy
            .run(Op::PutPart, self.path(), || {
                inner.put_part(index, data.clone())
            })
            .await
            .map_err(|f| f.error)
    }

    async fn complete(&self, mut parts: Vec<PartId>) -> Result<PutResult> {
        parts.sort_by_key(|p| p.index);
        let inner = &self.inner;
        let result = self
            .store
            .policy
            .run(Op::MultipartComplete, self.path(), || {
                inner.complete(parts.clone())
            })
            .await;
        match result {
            Ok(r) => Ok(r),
            // The upload id is gone after a completion (S3: 404 NoSuchUpload; s3s-fs:
            // 403) and a Create finds the key taken: whatever the definitive answer,
            // check whether the object is ours.
            Err(Failed {
                error,
                ambiguous: true,
            }) if error.kind() != ErrorKind::Cancelled => {
                if !self.is_ours(&parts).await {
                    return Err(error);
                }
                tracing::info!(
                    path = self.path(),
                    "a retried multipart completion found its own earlier completion"
                );
                let meta = self.store.head(self.path()).await?;
                Ok(PutResult {
                    e_tag: meta.e_tag,
                    version: meta.version,
                })
            }
            Err(f) => Err(f.error),
        }
    }

    async fn abort(&self) -> Result<()> {
        let inner = &self.inner;
        self.store
            .policy
            .run(Op::MultipartAbort, self.path(), || inner.abort())
            .await
            .map_err(|f| f.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(seed: u64) -> Policy {
        Policy {
            config: RetryConfig {
                seed: Some(seed),
                ..Default::default()
            },
            rng: Mutex::new(SplitMix64(seed)),
            cancel: CancellationToken::new(),
        }
    }

    #[test]
    fn backoff_is_full_jitter_under_a_doubling_cap_and_deterministic_per_seed() {
        let a = policy(7);
        let b = policy(7);
        for retry in 1..=12u32 {
            let cap =
                (Duration::from_millis(100) * 2u32.pow(retry - 1)).min(Duration::from_secs(5));
            let (da, db) = (a.backoff(retry), b.backoff(retry));
            assert_eq!(da, db, "same seed, same delays");
            assert!(da < cap, "retry {retry}: {da:?} >= {cap:?}");
        }
        let c = policy(8);
        let same = (1..=12)
            .filter(|&r| policy(7).backoff(r) == c.backoff(r))
            .count();
        assert!(same < 12, "another seed gives other delays");
    }
}
