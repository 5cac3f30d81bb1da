//! The streaming conversion the sink runs: a first pass over a [`ByteSource`] that
//! frames and checks every batch and decides its fate, then a second pass that converts
//! and uploads the file as its row groups fill, as a multipart upload of fixed-size
//! parts (one PUT when the file is smaller than a part). Memory is a read buffer, the
//! row group being built and one part, whatever the segment's size.
//!
//! # Why two passes
//!
//! The file's key names the UTC date of its first row and its offset range, and the
//! upload must know its key before the first part goes up; the rows a file starts with
//! also depend on how transactions end, which a marker at the segment's end can decide
//! (an aborted transaction's batches are not rows). So the first pass does what the
//! in-memory converter did before writing a row (framing, offset order, CRCs, control
//! records, transaction fates) and keeps only a few numbers and the aborted batches'
//! offsets; the second pass writes. The key is taken when the first part is due (or at
//! the end), by which time the first row has been converted. Uploading under a
//! temporary key and copying it into place would spare the first pass but not its CRC
//! and fate checks, and cost a server-side copy of every file; a second read of a
//! sealed segment is cheaper than a copy of its Parquet file and keeps the key
//! deterministic, so a retry after a crash overwrites the same object.

use std::io::Write;
use std::ops::Range;

use bytes::Bytes;
use strata_proto::batch::BatchError;
use strata_proto::ids::Offset;
use strata_store::{BlobStore, FileMode, MultipartUpload, PartId, PutMode, StoreError};

use crate::convert::{Converter, Summary, dead_letter_file};
use crate::error::ConvertError;
use crate::options::ConvertOptions;
use crate::sink::DeadLetterFile;
use crate::source::{BatchReader, ByteSource, ReadError};
use crate::txn::FateScan;

/// What the first pass found.
#[derive(Debug)]
pub(crate) struct Scan {
    /// The first batch's base offset and the last batch's last offset; `None`: no batch.
    pub offsets: Option<(Offset, Offset)>,
    /// Where the batches scanned end, from the range's start.
    pub end: u64,
    /// With a stop offset: the base offset of a batch that straddles it.
    pub straddle: Option<Offset>,
    /// The first error a conversion of the batches fails on, other than framing (which
    /// the scan returns at once): for the caller to raise after its manifest checks, as
    /// the in-memory conversion did.
    pub problem: Option<ConvertError>,
    fates: FateScan,
}

/// The first pass over `range` of `src`. With `stop`, only the batches below that
/// offset: the scan ends at the first batch at or past it, or notes one straddling it.
/// Framing errors (up to `stop`) and the source's errors are returned.
pub(crate) async fn scan(
    src: &dyn ByteSource,
    range: Range<u64>,
    verify_crc: bool,
    stop: Option<Offset>,
) -> Result<Scan, ReadError> {
    let mut s = Scan {
        offsets: None,
        end: 0,
        straddle: None,
        problem: None,
        fates: FateScan::default(),
    };
    let mut previous: Option<Offset> = None;
    let mut reader = BatchReader::new(src, range);
    while let Some(framed) = reader.next().await {
        let framed = framed?;
        let b = framed.batch()?;
        let h = *b.header();
        if let Some(stop) = stop {
            if h.base_offset >= stop {
                break;
            }
            if h.last_offset() >= stop {
                s.straddle = Some(h.base_offset);
                break;
            }
        }
        s.offsets = Some((s.offsets.map_or(h.base_offset, |o| o.0), h.last_offset()));
        s.end = framed.end;
        if s.problem.is_some() {
            // Framing only from here: a later framing error still comes first.
            continue;
        }
        // The in-memory conversion's checks, in its order.
        let problem = if h.last_offset_delta < 0 {
            Some(ConvertError::Batch {
                base_offset: h.base_offset,
                source: BatchError::BadRecordCount {
                    count: h.record_count,
                    last_offset_delta: h.last_offset_delta,
                },
            })
        } else if let Some(p) = previous
            && h.base_offset <= p
        {
            Some(ConvertError::OutOfOrder {
                base_offset: h.base_offset,
                previous_last_offset: p,
            })
        } else if let Some(source) = verify_crc.then(|| b.validate_crc().err()).flatten() {
            Some(ConvertError::Batch {
                base_offset: h.base_offset,
                source,
            })
        } else {
            s.fates.push(&b).err()
        };
        previous = Some(h.last_offset());
        s.problem = problem;
    }
    Ok(s)
}

/// The file a streaming conversion wrote: its key, size and summary.
#[derive(Debug)]
pub(crate) struct Streamed {
    pub key: String,
    pub bytes: u64,
    pub summary: Summary,
    /// The dead-letter files uploaded with it.
    pub dead_letter_files: Vec<DeadLetterFile>,
}

/// Why the second pass failed.
#[derive(Debug)]
pub(crate) enum StreamError {
    Read(ReadError),
    Store(StoreError),
}

impl From<ReadError> for StreamError {
    fn from(e: ReadError) -> Self {
        StreamError::Read(e)
    }
}

impl From<ConvertError> for StreamError {
    fn from(e: ConvertError) -> Self {
        StreamError::Read(ReadError::Convert(e))
    }
}

impl From<StoreError> for StreamError {
    fn from(e: StoreError) -> Self {
        StreamError::Store(e)
    }
}

/// The second pass: converts the batches of `range` (which `scan` checked) and uploads
/// the file under `key(first row's timestamp)`; `None` when the batches hold no row
/// (nothing is uploaded). A failure aborts a multipart upload in progress, so no part
/// and no object is left at the key.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn convert_and_upload(
    src: &dyn ByteSource,
    range: Range<u64>,
    scan: Scan,
    opts: &ConvertOptions,
    props: parquet::file::properties::WriterProperties,
    store: &dyn BlobStore,
    part_size: usize,
    key: &(dyn Fn(i64) -> String + Sync),
    dead_letter_key: &(dyn Fn(i64, Offset, Offset) -> String + Sync),
) -> Result<Option<Streamed>, StreamError> {
    let Some((first, last)) = scan.offsets else {
        return Err(ConvertError::Empty.into());
    };
    let fates = scan
        .fates
        .finish(&opts.later_markers, opts.pending_transactions)?;
    let mut conv = Converter::new(opts, props, first, last, PartBuffer::default())?;
    let mut upload = Upload::new(store, part_size);
    let mut dead_letter_files = Vec::new();
    let written = async {
        let mut reader = BatchReader::new(src, range);
        while let Some(framed) = reader.next().await {
            let framed = framed?;
            let b = framed.batch()?;
            conv.push(&b, fates.of(b.header()))?;
            if conv.out_mut().0.len() >= upload.part_size
                && let Some(ts) = conv.first_timestamp()
            {
                upload.send_parts(&mut conv.out_mut().0, ts, key).await?;
            }
            if conv.dead_letter_bytes() >= DEAD_LETTER_FILE_BYTES {
                dead_letter_files
                    .extend(upload_dead_letters(&mut conv, opts, store, dead_letter_key).await?);
            }
        }
        conv.flush_chunk()?;
        dead_letter_files
            .extend(upload_dead_letters(&mut conv, opts, store, dead_letter_key).await?);
        let (out, summary) = conv.finish()?;
        if summary.rows == 0 {
            return Ok(None);
        }
        let ts = summary
            .first_timestamp
            .or(summary.min_timestamp)
            .unwrap_or_default();
        let bytes = summary.file_bytes;
        let key = upload.finish(out.0, ts, key).await?;
        Ok(Some(Streamed {
            key,
            bytes,
            summary,
            dead_letter_files: std::mem::take(&mut dead_letter_files),
        }))
    }
    .await;
    if written.is_err() {
        upload.abort().await;
    }
    written
}

/// Dead-letter rows are written out as a file once their values reach this many bytes
/// (and at the end of the segment), so a segment of misfits is never held whole.
const DEAD_LETTER_FILE_BYTES: usize = 32 << 20;

/// Writes the converter's dead-letter rows so far as one file and uploads it (one PUT,
/// overwriting: a retry writes the same rows under the same key).
async fn upload_dead_letters<W: Write + Send>(
    conv: &mut Converter<W>,
    opts: &ConvertOptions,
    store: &dyn BlobStore,
    key: &(dyn Fn(i64, Offset, Offset) -> String + Sync),
) -> Result<Option<DeadLetterFile>, StreamError> {
    let rows = conv.take_dead_letters();
    let Some(file) = dead_letter_file(&rows, opts)? else {
        return Ok(None);
    };
    drop(rows);
    let path = key(file.first_timestamp, file.first_offset, file.last_offset);
    let bytes = file.bytes.len() as u64;
    store
        .put(&path, Bytes::from(file.bytes), PutMode::Overwrite)
        .await?;
    Ok(Some(DeadLetterFile {
        key: path,
        first_offset: file.first_offset,
        last_offset: file.last_offset,
        rows: file.rows,
        bytes,
    }))
}

/// The converter's output not yet uploaded. A `Vec` whose parts are copied out, not a
/// `BytesMut` split into them: a `BytesMut` that keeps growing after `split_to` extends
/// its original allocation past the bytes already sent, and would hold the whole file.
#[derive(Debug, Default)]
struct PartBuffer(Vec<u8>);

impl Write for PartBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One file's upload: parts of `part_size` as they fill, the multipart upload started
/// with the first one; a single PUT when the whole file is smaller than a part. Parts go
/// up one at a time on the converting thread: conversion, not the upload, is the slow
/// side, and one part in flight keeps memory at one part.
pub(crate) struct Upload<'a> {
    store: &'a dyn BlobStore,
    part_size: usize,
    key: Option<String>,
    multipart: Option<Box<dyn MultipartUpload>>,
    parts: Vec<PartId>,
}

impl<'a> Upload<'a> {
    /// An upload to `store` in parts of `part_size`, its key chosen with the first part.
    pub(crate) fn new(store: &'a dyn BlobStore, part_size: usize) -> Upload<'a> {
        Upload {
            store,
            part_size: part_size.max(1),
            key: None,
            multipart: None,
            parts: Vec::new(),
        }
    }

    pub(crate) fn part_size(&self) -> usize {
        self.part_size
    }

    fn key(&mut self, ts: i64, key: &(dyn Fn(i64) -> String + Sync)) -> String {
        self.key.get_or_insert_with(|| key(ts)).clone()
    }

    /// Uploads the full parts at the front of `buf` (and, with `last`, the rest).
    async fn send(
        &mut self,
        buf: &mut Vec<u8>,
        ts: i64,
        key: &(dyn Fn(i64) -> String + Sync),
        last: bool,
    ) -> Result<(), StoreError> {
        while buf.len() >= self.part_size || (last && !buf.is_empty()) {
            let path = self.key(ts, key);
            let multipart = match &mut self.multipart {
                Some(m) => m,
                None => {
                    // Overwrite: a retry after a crash replaces the same object.
                    let m = self
                        .store
                        .start_multipart(&path, FileMode::Overwrite, self.part_size as u64)
                        .await?;
                    self.multipart.insert(m)
                }
            };
            let n = self.part_size.min(buf.len());
            let data = Bytes::copy_from_slice(&buf[..n]);
            buf.drain(..n);
            let index = self.parts.len();
            self.parts.push(multipart.put_part(index, data).await?);
        }
        // A row group's flush grew the buffer to its size: give that back, so that
        // between flushes only the part being filled is held.
        if buf.capacity() > 2 * self.part_size {
            buf.shrink_to(self.part_size);
        }
        Ok(())
    }

    pub(crate) async fn send_parts(
        &mut self,
        buf: &mut Vec<u8>,
        ts: i64,
        key: &(dyn Fn(i64) -> String + Sync),
    ) -> Result<(), StoreError> {
        self.send(buf, ts, key, false).await
    }

    /// Uploads the rest and completes the object; returns its key.
    pub(crate) async fn finish(
        &mut self,
        mut buf: Vec<u8>,
        ts: i64,
        key: &(dyn Fn(i64) -> String + Sync),
    ) -> Result<String, StoreError> {
        let path = self.key(ts, key);
        if self.multipart.is_none() && buf.len() < self.part_size {
            // Overwrite, as above.
            self.store
                .put(&path, Bytes::from(buf), PutMode::Overwrite)
                .await?;
            return Ok(path);
        }
        self.send(&mut buf, ts, key, true).await?;
        if let Some(m) = &self.multipart {
            m.complete(std::mem::take(&mut self.parts)).await?;
        }
        self.multipart = None;
        Ok(path)
    }

    /// Discards a multipart upload in progress (S3 keeps, and bills, the parts of an
    /// upload that is neither completed nor aborted).
    pub(crate) async fn abort(&mut self) {
        if let Some(m) = self.multipart.take()
            && let Err(e) = m.abort().await
        {
            tracing::warn!(key = m.path(), error = %e, "could not abort a failed Parquet upload");
        }
    }
}
