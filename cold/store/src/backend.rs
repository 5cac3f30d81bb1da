//! The backends: object_store's S3 client, its local filesystem and its in-memory store,
//! behind [`BlobStore`], and the URL parsing that picks one.

use std::fmt;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, S3ConditionalPut, S3CopyIfNotExists};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::multipart::MultipartStore;
use object_store::path::Path as OsPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutOptions, PutPayload};

use crate::error::{ErrorKind, Op, Result, StoreError, map_object_store_error};
use crate::store::{
    BlobStore, FileMode, MultipartUpload, ObjectMeta, PartId, PutMode, PutResult, ReadResult,
    UploadConfig, sorted_parts,
};

/// Where `Create`-mode multipart uploads are staged on S3 and in memory, relative to the
/// store's root. object_store cannot send `If-None-Match: *` with
/// CompleteMultipartUpload, so such an upload completes under
/// `_staging/{uuid}` and is then copied to its key with a conditional copy
/// (S3 UploadPartCopy + CompleteMultipartUpload with `If-None-Match: *`). A crash can
/// leave objects here; an orphan cleanup pass may delete any older than its grace period.
pub const STAGING_PREFIX: &str = "_staging";

const SETTING: &str = "--object-store";

/// The object_store-backed implementation of [`BlobStore`].
#[derive(Debug)]
pub struct ObjectBackend {
    name: String,
    store: Arc<dyn ObjectStore>,
    /// The prefix inside the bucket, for S3 (the local store's root is its directory).
    root: Option<OsPath>,
    multipart: MultipartImpl,
    upload: UploadConfig,
}

#[derive(Clone)]
enum MultipartImpl {
    /// S3 and InMemory: object_store's low-level, part-numbered API.
    Store(Arc<dyn MultipartStore>),
    /// The local filesystem: parts written at their offsets into one staging file.
    Local(Arc<LocalFileSystem>),
}

impl fmt::Debug for MultipartImpl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(_) => f.write_str("MultipartStore"),
            Self::Local(fs) => write!(f, "Local({fs})"),
        }
    }
}

impl fmt::Display for ObjectBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

fn open_error(url: &str, problem: impl fmt::Display) -> StoreError {
    StoreError::new(
        ErrorKind::InvalidInput,
        Op::Open,
        SETTING,
        format!("{SETTING} '{url}': {problem}"),
    )
}

/// Opens the store named by `url` (`file://DIR` or `s3://BUCKET/PREFIX`), reading S3
/// settings from the process's `AWS_*` environment variables.
pub fn open_url(url: &str) -> Result<ObjectBackend> {
    open_url_with_env(url, std::env::vars())
}

/// [`open_url`] with the `AWS_*` settings given explicitly (tests must not change the
/// process environment, which other threads read).
///
/// - `file://DIR`: a local directory, created if missing (`file:///abs` or
///   `file://relative/dir`). Writes are fsynced: the offloader deletes local segments
///   once their upload returns, so the copy must be on disk by then.
/// - `s3://BUCKET/PREFIX`: S3 or an S3-compatible server, configured as
///   `AmazonS3Builder::from_env` would be from `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
///   `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP` and the other `AWS_*` keys
///   object_store knows. Conditional puts use `If-None-Match`/`If-Match` (object_store's
///   `ETagMatch`, which AWS S3 supports since 2024 and MinIO, R2 and s3s-fs support too),
///   and object_store's own retries are off: [`crate::RetryStore`] retries, so throttling
///   is visible in metrics and attempts are not multiplied.
/// - `memory://`: an in-memory store, for tests.
pub fn open_url_with_env<K, V>(
    url: &str,
    env: impl IntoIterator<Item = (K, V)>,
) -> Result<ObjectBackend>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    if let Some(dir) = url.strip_prefix("file://") {
        if dir.is_empty() {
            return Err(open_error(url, "no directory"));
        }
        return ObjectBackend::local(dir).map_err(|e| open_error(url, e.message()));
    }
    if url == "memory://" {
        return Ok(ObjectBackend::memory());
    }
    let Some(rest) = url.strip_prefix("s3://") else {
        return Err(open_error(url, "expected file://DIR or s3://BUCKET/PREFIX"));
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(open_error(url, "no bucket"));
    }
    let prefix = prefix.trim_matches('/');
    let root = if prefix.is_empty() {
        None
    } else {
        Some(OsPath::parse(prefix).map_err(|e| open_error(url, format!("bad prefix: {e}")))?)
    };
    let mut builder = AmazonS3Builder::new();
    for (key, value) in env {
        let (key, value) = (key.as_ref(), value.as_ref());
        if key.starts_with("AWS_")
            && let Ok(config_key) = key.to_ascii_lowercase().parse()
        {
            builder = builder.with_config(config_key, value);
        }
    }
    let retry = object_store::RetryConfig {
        max_retries: 0,
        ..Default::default()
    };
    let s3 = builder
        .with_bucket_name(bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_copy_if_not_exists(S3CopyIfNotExists::Multipart)
        .with_retry(retry)
        .build()
        .map_err(|e| {
            open_error(
                url,
                format!(
                    "{e} (check AWS_ENDPOINT_URL, AWS_REGION, AWS_ALLOW_HTTP and the credentials)"
                ),
            )
        })?;
    let s3 = Arc::new(s3);
    Ok(ObjectBackend {
        name: format!("s3://{bucket}/{prefix}"),
        store: s3.clone(),
        root,
        multipart: MultipartImpl::Store(s3),
        upload: UploadConfig::default(),
    })
}

impl ObjectBackend {
    /// A local directory store rooted at `dir` (created if missing).
    pub fn local(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let fail = |e: &dyn fmt::Display| {
            StoreError::new(
                ErrorKind::InvalidInput,
                Op::Open,
                dir.display().to_string(),
                format!("cannot use {} as an object store: {e}", dir.display()),
            )
        };
        std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        let fs = LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| fail(&e))?
            .with_fsync(true)
            // Removing the last segment of a partition removes its empty directories.
            .with_automatic_cleanup(true);
        let fs = Arc::new(fs);
        Ok(Self {
            name: format!("file://{}", dir.display()),
            store: fs.clone(),
            root: None,
            multipart: MultipartImpl::Local(fs),
            upload: UploadConfig::default(),
        })
    }

    /// An in-memory store, for tests of other crates.
    pub fn memory() -> Self {
        let mem = Arc::new(InMemory::new());
        Self {
            name: "memory://".into(),
            store: mem.clone(),
            root: None,
            multipart: MultipartImpl::Store(mem),
            upload: UploadConfig::default(),
        }
    }

    /// Sets how [`BlobStore::put_file`] splits files.
    pub fn with_upload_config(mut self, upload: UploadConfig) -> Result<Self> {
        upload.validate()?;
        self.upload = upload;
        Ok(self)
    }

    /// The backend as the `Arc<dyn BlobStore>` users hold.
    pub fn into_dyn(self) -> Arc<dyn BlobStore> {
        Arc::new(self)
    }

    fn key(&self, op: Op, path: &str) -> Result<OsPath> {
        if path.is_empty() {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                op,
                path,
                "empty key",
            ));
        }
        self.prefix(op, path)
    }

    fn prefix(&self, op: Op, path: &str) -> Result<OsPath> {
        let bad = |msg: String| StoreError::new(ErrorKind::InvalidInput, op, path, msg);
        let parsed = OsPath::parse(path).map_err(|e| bad(e.to_string()))?;
        // Path::parse drops a leading or trailing '/': refuse rather than alias two keys.
        if parsed.as_ref() != path {
            return Err(bad("keys may not start or end with '/'".into()));
        }
        match &self.root {
            None => Ok(parsed),
            Some(root) if path.is_empty() => Ok(root.clone()),
            Some(root) => OsPath::parse(format!("{root}/{path}")).map_err(|e| bad(e.to_string())),
        }
    }

    fn relative<'a>(&self, full: &'a OsPath) -> Option<&'a str> {
        match &self.root {
            None => Some(full.as_ref()),
            Some(root) => full
                .as_ref()
                .strip_prefix(root.as_ref())
                .and_then(|r| r.strip_prefix('/')),
        }
    }

    fn meta(&self, m: object_store::ObjectMeta) -> Option<ObjectMeta> {
        Some(ObjectMeta {
            path: self.relative(&m.location)?.to_string(),
            size: m.size,
            e_tag: m.e_tag,
            version: m.version,
            last_modified: m.last_modified.into(),
        })
    }
}

fn put_result(r: object_store::PutResult) -> PutResult {
    PutResult {
        e_tag: r.e_tag,
        version: r.version,
    }
}

#[async_trait]
impl BlobStore for ObjectBackend {
    async fn put(&self, path: &str, data: Bytes, mode: PutMode) -> Result<PutResult> {
        let key = self.key(Op::Put, path)?;
        let mode = match mode {
            PutMode::Overwrite => object_store::PutMode::Overwrite,
            PutMode::Create => object_store::PutMode::Create,
            PutMode::Update(v) => {
                if v.e_tag.is_none() && v.version.is_none() {
                    return Err(StoreError::new(
                        ErrorKind::InvalidInput,
                        Op::Put,
                        path,
                        "an Update put needs the etag or version it is conditioned on",
                    ));
                }
                object_store::PutMode::Update(object_store::UpdateVersion {
                    e_tag: v.e_tag,
                    version: v.version,
                })
            }
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        self.store
            .put_opts(&key, PutPayload::from(data), opts)
            .await
            .map(put_result)
            .map_err(|e| map_object_store_error(Op::Put, path, e))
    }

    async fn read(&self, path: &str, range: Option<Range<u64>>) -> Result<ReadResult> {
        let op = if range.is_some() {
            Op::GetRange
        } else {
            Op::Get
        };
        let key = self.key(op, path)?;
        let opts = GetOptions {
            range: range.map(GetRange::Bounded),
            ..Default::default()
        };
        let map = |e| map_object_store_error(op, path, e);
        let result = self.store.get_opts(&key, opts).await.map_err(map)?;
        let (range, object_size) = (result.range.clone(), result.meta.size);
        let data = result.bytes().await.map_err(map)?;
        Ok(ReadResult {
            data,
            range,
            object_size,
        })
    }

    async fn head(&self, path: &str) -> Result<ObjectMeta> {
        let key = self.key(Op::Head, path)?;
        let meta = self
            .store
            .head(&key)
            .await
            .map_err(|e| map_object_store_error(Op::Head, path, e))?;
        self.meta(meta).ok_or_else(|| {
            StoreError::new(
                ErrorKind::Permanent,
                Op::Head,
                path,
                "object outside the store's root",
            )
        })
    }

    async fn delete(&self, path: &str) -> Result<()> {
        let key = self.key(Op::Delete, path)?;
        match self.store.delete(&key).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_object_store_error(Op::Delete, path, e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let key = self.prefix(Op::List, prefix)?;
        let key = (!key.as_ref().is_empty()).then_some(key);
        let metas: Vec<_> = self
            .store
            .list(key.as_ref())
            .try_collect()
            .await
            .map_err(|e| map_object_store_error(Op::List, prefix, e))?;
        Ok(metas.into_iter().filter_map(|m| self.meta(m)).collect())
    }

    async fn start_multipart(
        &self,
        path: &str,
        mode: FileMode,
        part_size: u64,
    ) -> Result<Box<dyn MultipartUpload>> {
        let key = self.key(Op::MultipartStart, path)?;
        if part_size == 0 {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                Op::MultipartStart,
                path,
                "part size 0",
            ));
        }
        match &self.multipart {
            MultipartImpl::Local(fs) => Ok(Box::new(
                LocalUpload::start(fs.clone(), path, key, mode, part_size).await?,
            )),
            MultipartImpl::Store(mp) => {
                let upload_key = match mode {
                    FileMode::Overwrite => key.clone(),
                    FileMode::Create => {
                        let staging = format!("{STAGING_PREFIX}/{}", uuid::Uuid::new_v4());
                        self.key(Op::MultipartStart, &staging)?
                    }
                };
                let id = mp
                    .create_multipart(&upload_key)
                    .await
                    .map_err(|e| map_object_store_error(Op::MultipartStart, path, e))?;
                Ok(Box::new(StoreUpload {
                    path: path.to_string(),
                    store: self.store.clone(),
                    mp: mp.clone(),
                    key,
                    upload_key,
                    id,
                    mode,
                    part_size,
                    staged: AtomicBool::new(false),
                    outcome: Outcome::default(),
                }))
            }
        }
    }

    fn upload_config(&self) -> UploadConfig {
        self.upload
    }
}

/// The definitive answer of a multipart completion, replayed if `complete` is called
/// again on the same upload (a retry whose first attempt's answer was lost): the staging
/// file or object it consumed is gone by then, so redoing the work would give another,
/// misleading answer (NotFound instead of AlreadyExists).
#[derive(Debug, Default)]
struct Outcome(std::sync::Mutex<Option<std::result::Result<PutResult, (ErrorKind, String)>>>);

impl Outcome {
    fn get(&self, path: &str) -> Option<Result<PutResult>> {
        let guard = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.as_ref().map(|r| match r {
            Ok(put) => Ok(put.clone()),
            Err((kind, message)) => Err(StoreError::new(
                *kind,
                Op::MultipartComplete,
                path,
                message.clone(),
            )),
        })
    }

    fn record(&self, r: Result<PutResult>) -> Result<PutResult> {
        let keep = match &r {
            Ok(put) => Some(Ok(put.clone())),
            Err(e) if !e.is_retriable() => Some(Err((e.kind(), e.message().to_string()))),
            Err(_) => None,
        };
        if keep.is_some() {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = keep;
        }
        r
    }
}

/// A multipart upload through object_store's [`MultipartStore`] (S3, InMemory).
struct StoreUpload {
    path: String,
    store: Arc<dyn ObjectStore>,
    mp: Arc<dyn MultipartStore>,
    key: OsPath,
    /// `key` itself, or the staging key of a `Create` upload.
    upload_key: OsPath,
    id: String,
    mode: FileMode,
    part_size: u64,
    /// A `Create` upload's staging object is complete; a retried `complete` only copies.
    staged: AtomicBool,
    outcome: Outcome,
}

impl fmt::Debug for StoreUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreUpload")
            .field("path", &self.path)
            .field("upload_key", &self.upload_key)
            .field("id", &self.id)
            .field("mode", &self.mode)
            .finish()
    }
}

#[async_trait]
impl MultipartUpload for StoreUpload {
    fn path(&self) -> &str {
        &self.path
    }

    async fn put_part(&self, index: usize, data: Bytes) -> Result<PartId> {
        let size = data.len() as u64;
        if size > self.part_size {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                Op::PutPart,
                &self.path,
                format!(
                    "part {index} has {size} bytes, more than the part size {}",
                    self.part_size
                ),
            ));
        }
        let id = self
            .mp
            .put_part(&self.upload_key, &self.id, index, PutPayload::from(data))
            .await
            .map_err(|e| map_object_store_error(Op::PutPart, &self.path, e))?;
        Ok(PartId {
            index,
            size,
            content_id: id.content_id,
        })
    }

    async fn complete(&self, parts: Vec<PartId>) -> Result<PutResult> {
        let op = Op::MultipartComplete;
        let map = |e| map_object_store_error(op, &self.path, e);
        let parts = sorted_parts(&self.path, parts, self.part_size)?;
        let total: u64 = parts.iter().map(|p| p.size).sum();
        let ids: Vec<_> = parts
            .into_iter()
            .map(|p| object_store::multipart::PartId {
                content_id: p.content_id,
            })
            .collect();
        if self.mode == FileMode::Overwrite {
            return self
                .mp
                .complete_multipart(&self.upload_key, &self.id, ids)
                .await
                .map(put_result)
                .map_err(map);
        }
        if let Some(r) = self.outcome.get(&self.path) {
            return r;
        }
        if !self.staged.load(Ordering::Acquire) {
            match self
                .mp
                .complete_multipart(&self.upload_key, &self.id, ids)
                .await
            {
                Ok(_) => {}
                // An earlier call may have completed it and lost the answer: the upload
                // id is then gone (S3 answers 404 NoSuchUpload, s3s-fs 403). Carry on if
                // the staging object is all there.
                Err(e) => {
                    let e = map(e);
                    if e.is_retriable() {
                        return Err(e);
                    }
                    match self.store.head(&self.upload_key).await {
                        Ok(m) if m.size == total => {}
                        _ => return Err(e),
                    }
                }
            }
            self.staged.store(true, Ordering::Release);
        }
        let copied = self
            .store
            .copy_if_not_exists(&self.upload_key, &self.key)
            .await;
        // Keep the staging object after a retriable failure so a retried complete can
        // copy it; abort() removes it.
        let definitive = match &copied {
            Ok(()) => true,
            Err(e) => !map_object_store_error(op, &self.path, clone_kind(e)).is_retriable(),
        };
        if definitive && let Err(e) = self.store.delete(&self.upload_key).await {
            tracing::warn!(path = %self.path, staging = %self.upload_key, error = %e, "could not delete a staging object");
        }
        if let Err(e) = copied {
            return self.outcome.record(Err(map(e)));
        }
        let meta = self.store.head(&self.key).await.map_err(map)?;
        self.outcome.record(Ok(PutResult {
            e_tag: meta.e_tag,
            version: meta.version,
        }))
    }

    async fn abort(&self) -> Result<()> {
        let map = |e| map_object_store_error(Op::MultipartAbort, &self.path, e);
        match self.mp.abort_multipart(&self.upload_key, &self.id).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(map(e)),
        }
        if self.mode == FileMode::Create {
            match self.store.delete(&self.upload_key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(map(e)),
            }
        }
        Ok(())
    }
}

/// object_store's error is not `Clone`; this keeps what classification needs.
fn clone_kind(e: &object_store::Error) -> object_store::Error {
    use object_store::Error as E;
    match e {
        E::NotFound { path, .. } => E::NotFound {
            path: path.clone(),
            source: e.to_string().into(),
        },
        E::AlreadyExists { path, .. } => E::AlreadyExists {
            path: path.clone(),
            source: e.to_string().into(),
        },
        E::Precondition { path, .. } => E::Precondition {
            path: path.clone(),
            source: e.to_string().into(),
        },
        E::NotSupported { .. } | E::NotImplemented { .. } => E::NotSupported {
            source: e.to_string().into(),
        },
        _ => E::Generic {
            store: "copy",
            source: e.to_string().into(),
        },
    }
}

/// A multipart upload into the local directory: parts are written at their offsets
/// (`index * part_size`) into one staging file next to the target, named `{key}#{digits}`
/// as object_store's own staging files are, so listings skip it. Completing renames it
/// over the target (`Overwrite`) or hard-links it (`Create`: `link` fails if the target
/// exists, atomically), after fsyncing the file and then the directory.
struct LocalUpload {
    path: String,
    fs: Arc<LocalFileSystem>,
    key: OsPath,
    dest: PathBuf,
    staging: PathBuf,
    file: Arc<std::fs::File>,
    mode: FileMode,
    part_size: u64,
    outcome: Outcome,
}

impl fmt::Debug for LocalUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalUpload")
            .field("path", &self.path)
            .field("staging", &self.staging)
            .field("mode", &self.mode)
            .finish()
    }
}

fn io_error(op: Op, path: &str, e: std::io::Error) -> StoreError {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => ErrorKind::NotFound,
        std::io::ErrorKind::AlreadyExists => ErrorKind::AlreadyExists,
        std::io::ErrorKind::Interrupted => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    };
    StoreError::with_source(kind, op, path, e)
}

async fn blocking<T: Send + 'static>(
    op: Op,
    path: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| io_error(op, path, e)),
        Err(e) => Err(StoreError::with_source(ErrorKind::Permanent, op, path, e)),
    }
}

fn fsync_dir(dir: Option<&std::path::Path>) -> std::io::Result<()> {
    match dir {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

impl LocalUpload {
    async fn start(
        fs: Arc<LocalFileSystem>,
        path: &str,
        key: OsPath,
        mode: FileMode,
        part_size: u64,
    ) -> Result<Self> {
        let dest = fs
            .path_to_filesystem(&key)
            .map_err(|e| map_object_store_error(Op::MultipartStart, path, e))?;
        let d = dest.clone();
        let (file, staging) = blocking(Op::MultipartStart, path, move || {
            if let Some(parent) = d.parent() {
                std::fs::create_dir_all(parent)?;
            }
            loop {
                let mut name = d.clone().into_os_string();
                name.push(format!(
                    "#{}",
                    uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000_000_000
                ));
                let staging = PathBuf::from(name);
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&staging)
                {
                    Ok(f) => return Ok((f, staging)),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
        })
        .await?;
        Ok(Self {
            path: path.to_string(),
            fs,
            key,
            dest,
            staging,
            file: Arc::new(file),
            mode,
            part_size,
            outcome: Outcome::default(),
        })
    }
}

#[async_trait]
impl MultipartUpload for LocalUpload {
    fn path(&self) -> &str {
        &self.path
    }

    async fn put_part(&self, index: usize, data: Bytes) -> Result<PartId> {
        let size = data.len() as u64;
        if size > self.part_size {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                Op::PutPart,
                &self.path,
                format!(
                    "part {index} has {size} bytes, more than the part size {}",
                    self.part_size
                ),
            ));
        }
        let offset = index as u64 * self.part_size;
        let file = self.file.clone();
        blocking(Op::PutPart, &self.path, move || {
            file.write_all_at(&data, offset)
        })
        .await?;
        Ok(PartId {
            index,
            size,
            content_id: String::new(),
        })
    }

    async fn complete(&self, parts: Vec<PartId>) -> Result<PutResult> {
        let op = Op::MultipartComplete;
        let parts = sorted_parts(&self.path, parts, self.part_size)?;
        if let Some(r) = self.outcome.get(&self.path) {
            return r;
        }
        let total: u64 = parts.iter().map(|p| p.size).sum();
        let (file, staging, dest, mode) = (
            self.file.clone(),
            self.staging.clone(),
            self.dest.clone(),
            self.mode,
        );
        let done = blocking(op, &self.path, move || {
            file.set_len(total)?;
            file.sync_all()?;
            match mode {
                FileMode::Overwrite => std::fs::rename(&staging, &dest)?,
                FileMode::Create => {
                    let linked = std::fs::hard_link(&staging, &dest);
                    std::fs::remove_file(&staging)?;
                    linked?;
                }
            }
            fsync_dir(dest.parent())
        })
        .await;
        if let Err(e) = done {
            return self.outcome.record(Err(e));
        }
        let meta = self
            .fs
            .head(&self.key)
            .await
            .map_err(|e| map_object_store_error(op, &self.path, e))?;
        self.outcome.record(Ok(PutResult {
            e_tag: meta.e_tag,
            version: meta.version,
        }))
    }

    async fn abort(&self) -> Result<()> {
        let staging = self.staging.clone();
        blocking(
            Op::MultipartAbort,
            &self.path,
            move || match std::fs::remove_file(&staging) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                r => r,
            },
        )
        .await
    }
}
