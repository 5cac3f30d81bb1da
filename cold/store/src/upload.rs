//! `put_file`: a local file of any size to one object, through the trait's own `put` and
//! multipart calls so that every wrapper sees every request.

use std::sync::Arc;

use bytes::BytesMut;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::error::{ErrorKind, Op, Result, StoreError};
use crate::store::{BlobStore, FileMode, MultipartUpload, PartId, PutResult};

pub(crate) async fn upload_file<S: BlobStore + ?Sized>(
    store: &S,
    path: &str,
    file: &std::path::Path,
    mode: FileMode,
) -> Result<PutResult> {
    let config = store.upload_config();
    let io_err = |e: std::io::Error| {
        StoreError::with_source(
            classify_io(&e),
            Op::ReadFile,
            path,
            FileError(file.display().to_string(), e),
        )
    };
    let mut f = tokio::fs::File::open(file).await.map_err(io_err)?;
    let size = f.metadata().await.map_err(io_err)?.len();

    if size < config.multipart_threshold {
        let mut buf = Vec::with_capacity(size as usize);
        f.read_to_end(&mut buf).await.map_err(io_err)?;
        if buf.len() as u64 != size {
            return Err(changed(path, file, size, buf.len() as u64));
        }
        return store.put(path, buf.into(), mode.into()).await;
    }

    let part_size = config.part_size.max(1);
    let upload: Arc<dyn MultipartUpload> =
        Arc::from(store.start_multipart(path, mode, part_size).await?);
    // From here on every way out, including the caller dropping this future, aborts the
    // upload unless it completed: S3 keeps (and bills) the parts of an upload that is
    // neither completed nor aborted until a lifecycle rule removes them.
    let mut guard = AbortOnDrop(Some(Arc::clone(&upload)));
    let result = upload_parts(
        upload.as_ref(),
        &mut f,
        file,
        size,
        part_size,
        config.max_in_flight,
    )
    .await;
    let result = match result {
        Ok(parts) => upload.complete(parts).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(put) => {
            guard.0 = None;
            Ok(put)
        }
        Err(e) => {
            guard.0 = None;
            if let Err(abort) = upload.abort().await {
                tracing::warn!(path, error = %abort, "could not abort a failed multipart upload");
            }
            Err(e)
        }
    }
}

async fn upload_parts(
    upload: &dyn MultipartUpload,
    f: &mut tokio::fs::File,
    file: &std::path::Path,
    size: u64,
    part_size: u64,
    max_in_flight: usize,
) -> Result<Vec<PartId>> {
    let path = upload.path().to_string();
    let count = size.div_ceil(part_size) as usize;
    let mut parts = Vec::with_capacity(count);
    let mut in_flight = FuturesUnordered::new();
    f.seek(std::io::SeekFrom::Start(0))
        .await
        .map_err(|e| StoreError::with_source(classify_io(&e), Op::ReadFile, &path, e))?;
    let mut next = 0usize;
    loop {
        // Read the next part only when there is room: memory stays at
        // part_size * max_in_flight whatever the file size.
        while next < count && in_flight.len() < max_in_flight.max(1) {
            let len = part_size.min(size - next as u64 * part_size) as usize;
            let mut buf = BytesMut::zeroed(len);
            f.read_exact(&mut buf).await.map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    changed(&path, file, size, next as u64 * part_size)
                } else {
                    StoreError::with_source(classify_io(&e), Op::ReadFile, &path, e)
                }
            })?;
            let index = next;
            let data = buf.freeze();
            in_flight.push(async move { upload.put_part(index, data).await });
            next += 1;
        }
        match in_flight.next().await {
            Some(Ok(part)) => parts.push(part),
            Some(Err(e)) => {
                // Let the other parts in flight finish before the caller aborts: a part
                // that reaches the server after the abort is stored anyway and orphaned
                // (AWS: "you might need to abort a multipart upload multiple times").
                while in_flight.next().await.is_some() {}
                return Err(e);
            }
            None => break,
        }
    }
    // A file that grew while we read it would be uploaded cut off: refuse.
    let now = f
        .metadata()
        .await
        .map_err(|e| StoreError::with_source(classify_io(&e), Op::ReadFile, &path, e))?
        .len();
    if now != size {
        return Err(changed(&path, file, size, now));
    }
    parts.sort_by_key(|p| p.index);
    Ok(parts)
}

fn changed(path: &str, file: &std::path::Path, before: u64, after: u64) -> StoreError {
    StoreError::new(
        ErrorKind::InvalidInput,
        Op::ReadFile,
        path,
        format!(
            "{} changed size during the upload ({before} bytes, then {after})",
            file.display()
        ),
    )
}

fn classify_io(e: &std::io::Error) -> ErrorKind {
    match e.kind() {
        std::io::ErrorKind::NotFound => ErrorKind::InvalidInput,
        std::io::ErrorKind::Interrupted => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}: {1}")]
struct FileError(String, #[source] std::io::Error);

/// Aborts the upload in a spawned task if the upload future is dropped half-way.
struct AbortOnDrop(Option<Arc<dyn MultipartUpload>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(upload) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                if let Err(e) = upload.abort().await {
                    tracing::warn!(error = %e, "could not abort a cancelled multipart upload");
                }
            });
        }
    }
}
