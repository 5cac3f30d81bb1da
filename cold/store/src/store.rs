//! The [`BlobStore`] trait and the plain types it speaks.

use std::fmt;
use std::ops::Range;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{ErrorKind, Op, Result, StoreError};

/// How a put treats an object already at the key.
///
/// `Create` and `Update` are the conditional writes that make the bucket safe to use
/// for metadata: a manifest is committed with `Update(version read)`, so a fenced leader
/// that read an older version gets [`ErrorKind::PreconditionFailed`] instead of
/// overwriting its successor's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PutMode {
    /// Replace whatever is there (S3 last-writer-wins).
    #[default]
    Overwrite,
    /// Write only if no object exists: S3 `If-None-Match: *`. Fails with
    /// [`ErrorKind::AlreadyExists`].
    Create,
    /// Write only if the current object is still this version: S3 `If-Match: <etag>`.
    /// Fails with [`ErrorKind::PreconditionFailed`]; [`ErrorKind::Unsupported`] on the
    /// local filesystem, which has no atomic compare-and-swap.
    Update(Version),
}

/// How [`BlobStore::put_file`] treats an object already at the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileMode {
    /// Replace whatever is there.
    #[default]
    Overwrite,
    /// Fail with [`ErrorKind::AlreadyExists`] if an object exists.
    Create,
}

impl From<FileMode> for PutMode {
    fn from(mode: FileMode) -> Self {
        match mode {
            FileMode::Overwrite => PutMode::Overwrite,
            FileMode::Create => PutMode::Create,
        }
    }
}

/// One version of an object, as returned by a put or a head, to condition an `Update` on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Version {
    /// The entity tag (S3 ETag, quotes included as the server sent them).
    pub e_tag: Option<String>,
    /// The version id where the bucket keeps versions.
    pub version: Option<String>,
}

/// What a successful put returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PutResult {
    /// The new object's entity tag.
    pub e_tag: Option<String>,
    /// The new object's version id, where the bucket keeps versions.
    pub version: Option<String>,
}

impl PutResult {
    /// The version to pass to a later [`PutMode::Update`].
    pub fn version(&self) -> Version {
        Version {
            e_tag: self.e_tag.clone(),
            version: self.version.clone(),
        }
    }
}

/// An object's metadata, from [`BlobStore::head`] or [`BlobStore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The key relative to the store's root.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// The entity tag, where the backend has one.
    pub e_tag: Option<String>,
    /// The version id, where the bucket keeps versions.
    pub version: Option<String>,
    /// When the object was last written.
    pub last_modified: SystemTime,
}

impl ObjectMeta {
    /// The version to pass to a later [`PutMode::Update`].
    pub fn version(&self) -> Version {
        Version {
            e_tag: self.e_tag.clone(),
            version: self.version.clone(),
        }
    }
}

/// A GET's body together with what the server said it was sending.
///
/// The claimed `range` is kept next to the body so that any layer can check that the
/// body is complete ([`ReadResult::verify`]): an HTTP body can end early (a proxy or a
/// server that dies mid-response) and a short chunk must never reach a Kafka fetch as
/// if it were the segment's bytes.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// The bytes received.
    pub data: Bytes,
    /// The byte range of the object the server said it was sending.
    pub range: Range<u64>,
    /// The object's total size as the server reported it.
    pub object_size: u64,
}

impl ReadResult {
    /// Returns the body if it is exactly what was asked for and what the server claimed
    /// to send. A range past the end of the object is [`ErrorKind::InvalidInput`]; a body
    /// shorter (or longer) than claimed is [`ErrorKind::Transient`], since a new request
    /// may well get all of it.
    pub fn verify(self, op: Op, path: &str, requested: Option<&Range<u64>>) -> Result<Bytes> {
        if let Some(want) = requested
            && *want != self.range
        {
            if want.end > self.object_size {
                return Err(StoreError::new(
                    ErrorKind::InvalidInput,
                    op,
                    path,
                    format!(
                        "range {}..{} is past the end of the object ({} bytes)",
                        want.start, want.end, self.object_size
                    ),
                ));
            }
            return Err(StoreError::new(
                ErrorKind::Transient,
                op,
                path,
                format!(
                    "asked for bytes {}..{}, the server sent {}..{}",
                    want.start, want.end, self.range.start, self.range.end
                ),
            ));
        }
        let claimed = self.range.end.saturating_sub(self.range.start);
        if self.data.len() as u64 != claimed {
            return Err(StoreError::new(
                ErrorKind::Transient,
                op,
                path,
                format!(
                    "body has {} bytes, the server announced {claimed} (a short or torn response)",
                    self.data.len()
                ),
            ));
        }
        Ok(self.data)
    }
}

/// A finished part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartId {
    /// The part's index, from 0.
    pub index: usize,
    /// The part's size in bytes.
    pub size: u64,
    /// The backend's id for the part (the S3 part ETag).
    pub content_id: String,
}

/// How [`BlobStore::put_file`] splits a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadConfig {
    /// Files smaller than this go up in one PUT; larger ones as a multipart upload.
    pub multipart_threshold: u64,
    /// The size of every part but the last. S3 requires at least 5 MiB; 8 MiB keeps the
    /// memory of an upload at `part_size * max_in_flight` and one retried part cheap.
    pub part_size: u64,
    /// How many parts are uploaded at once (each holds `part_size` bytes in memory).
    pub max_in_flight: usize,
}

/// S3's minimum size for every part but the last.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

impl Default for UploadConfig {
    fn default() -> Self {
        Self {
            multipart_threshold: 16 * 1024 * 1024,
            part_size: 8 * 1024 * 1024,
            max_in_flight: 4,
        }
    }
}

impl UploadConfig {
    /// Checks the sizes against S3's limits.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| {
            Err(StoreError::new(
                ErrorKind::InvalidInput,
                Op::Open,
                "upload",
                msg,
            ))
        };
        if self.part_size < MIN_PART_SIZE {
            return bad(format!(
                "part size {} is below S3's minimum of {MIN_PART_SIZE} bytes",
                self.part_size
            ));
        }
        if self.multipart_threshold < self.part_size {
            return bad(format!(
                "multipart threshold {} is below the part size {}",
                self.multipart_threshold, self.part_size
            ));
        }
        if self.max_in_flight == 0 {
            return bad("max_in_flight must be at least 1".into());
        }
        Ok(())
    }
}

/// Strata's one interface to object storage (S3, S3-compatible servers such as MinIO,
/// a local directory, or memory).
///
/// Keys are '/'-separated paths relative to the store's root (bucket plus prefix, or
/// the local directory); segments may not be empty, `.` or `..`. Cross-cutting concerns
/// are wrapper types around an `Arc<dyn BlobStore>` ([`crate::RetryStore`],
/// [`crate::TimeoutStore`], [`crate::MeteredStore`], [`crate::FaultStore`]), not
/// options of this trait, so each concern composes with the others and is tested alone.
/// Users hold an `Arc<dyn BlobStore>`.
///
/// Implementors provide the required methods; [`get`](Self::get),
/// [`get_range`](Self::get_range) and [`put_file`](Self::put_file) are built on them and
/// should not be overridden: `put_file` calls `put` and `start_multipart` on `self`,
/// which is how a wrapper's retry, timeout, metrics or faults apply to every part.
#[async_trait]
pub trait BlobStore: fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// Writes `data` at `path` in one request, under `mode`'s condition.
    async fn put(&self, path: &str, data: Bytes, mode: PutMode) -> Result<PutResult>;

    /// Reads the whole object (`range: None`) or a byte range of it, returning the body
    /// with what the server claimed; callers use [`get`](Self::get) /
    /// [`get_range`](Self::get_range), which verify it.
    async fn read(&self, path: &str, range: Option<Range<u64>>) -> Result<ReadResult>;

    /// The object's size, entity tag and modification time.
    async fn head(&self, path: &str) -> Result<ObjectMeta>;

    /// Deletes the object. Deleting a missing object succeeds (S3 does the same), so a
    /// cleanup pass interrupted half-way can simply run again.
    async fn delete(&self, path: &str) -> Result<()>;

    /// Every object under `prefix` (a '/'-separated directory-like prefix; "" for all),
    /// in no promised order.
    ///
    /// For recovery and orphan cleanup only, never on a hot path: S3 lists 1000 keys per
    /// request, and a bucket holding years of segments has millions, so one listing is
    /// thousands of requests. Reads find objects through the manifest instead.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>>;

    /// Starts a multipart upload to `path`. Every part but the last must be exactly
    /// `part_size` bytes. Used by [`put_file`](Self::put_file); exposed so that wrappers
    /// can act on each part.
    async fn start_multipart(
        &self,
        path: &str,
        mode: FileMode,
        part_size: u64,
    ) -> Result<Box<dyn MultipartUpload>>;

    /// The part size, threshold and concurrency [`put_file`](Self::put_file) uses.
    fn upload_config(&self) -> UploadConfig;

    /// Reads the whole object. Never returns fewer bytes than the object has: a body cut
    /// short is an error.
    async fn get(&self, path: &str) -> Result<Bytes> {
        self.read(path, None).await?.verify(Op::Get, path, None)
    }

    /// Reads exactly the bytes `range` of the object, or fails. A range past the end is
    /// [`ErrorKind::InvalidInput`]; an empty range returns no bytes without a request
    /// (S3 cannot express it), even for a missing object.
    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes> {
        if range.start > range.end {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                Op::GetRange,
                path,
                format!("range {}..{} is reversed", range.start, range.end),
            ));
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        self.read(path, Some(range.clone()))
            .await?
            .verify(Op::GetRange, path, Some(&range))
    }

    /// Uploads the local file `file` to `path` without loading it into memory: one PUT
    /// below [`UploadConfig::multipart_threshold`], otherwise a multipart upload of
    /// `part_size` parts with at most `max_in_flight` in flight. A failed part or
    /// completion aborts the upload before the error is returned, and so does dropping
    /// the future (the abort is then spawned), so no multipart upload is left behind.
    async fn put_file(
        &self,
        path: &str,
        file: &std::path::Path,
        mode: FileMode,
    ) -> Result<PutResult> {
        crate::upload::upload_file(self, path, file, mode).await
    }
}

/// One multipart upload in progress.
///
/// Parts carry their index, so uploading a part again replaces it (S3 UploadPart with the
/// same part number): that is what makes a retried part safe.
#[async_trait]
pub trait MultipartUpload: fmt::Debug + Send + Sync + 'static {
    /// The key being uploaded, relative to the store's root.
    fn path(&self) -> &str;

    /// Uploads part `index` (from 0).
    async fn put_part(&self, index: usize, data: Bytes) -> Result<PartId>;

    /// Assembles the parts (every index from 0 exactly once) into the object.
    async fn complete(&self, parts: Vec<PartId>) -> Result<PutResult>;

    /// Discards the upload and its parts. Aborting an upload that no longer exists
    /// succeeds.
    async fn abort(&self) -> Result<()>;
}

/// Checks that `parts` are the indexes `0..n` once each, sorts them, and checks the
/// sizes against `part_size` (every part but the last exactly `part_size`).
pub(crate) fn sorted_parts(
    path: &str,
    mut parts: Vec<PartId>,
    part_size: u64,
) -> Result<Vec<PartId>> {
    parts.sort_by_key(|p| p.index);
    let bad = |msg: String| {
        Err(StoreError::new(
            ErrorKind::InvalidInput,
            Op::MultipartComplete,
            path,
            msg,
        ))
    };
    for (i, part) in parts.iter().enumerate() {
        if part.index != i {
            return bad(format!("part {i} is missing or repeated"));
        }
        if i + 1 < parts.len() && part.size != part_size {
            return bad(format!(
                "part {i} has {} bytes; every part but the last must have {part_size}",
                part.size
            ));
        }
    }
    Ok(parts)
}
