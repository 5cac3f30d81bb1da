//! Where a conversion's input comes from: a [`ByteSource`] read a few MiB at a time, and
//! the [`BatchReader`] that frames it into batches with one read buffer, so that a 1 GiB
//! segment never has to be in memory at once.
//!
//! The archiver implements the source for a sealed local segment (`strata_log::Log::
//! read_sealed`) and for a remote segment's object (ranged GETs); slices and [`Bytes`]
//! implement it here, which keeps the `&[u8]` entry points of [`crate::ParquetSink`].

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use strata_proto::batch::{self, HEADER_LEN, RecordBatch};

use crate::error::ConvertError;

/// The bytes a [`BatchReader`] asks its source for at once: large enough that a remote
/// source makes few requests, small next to a row group.
pub const READ_CHUNK: usize = 4 << 20;

/// A conversion's input: concatenated record batches (a segment, or part of one), read
/// by position. Reads come in order during a pass, but a conversion makes two passes
/// (and a salvage after bad data more), so a source must serve any position again and
/// return the same bytes each time.
///
/// Local implementations may block on IO inside `read_at`: conversion runs on its own
/// thread (see the archiver's `at_background_priority`).
#[async_trait]
pub trait ByteSource: Send + Sync {
    /// How many bytes the source holds.
    fn len(&self) -> u64;

    /// Whether it holds none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Exactly the bytes `[pos, pos + len)`; callers never ask past [`Self::len`].
    async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes, SourceError>;
}

/// A source that could not be read (the disk, the object store): never the data's
/// fault, so never a dead letter.
#[derive(Debug, thiserror::Error)]
#[error("reading the conversion's input: {source}")]
pub struct SourceError {
    retryable: bool,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl SourceError {
    pub fn new(
        retryable: bool,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        SourceError {
            retryable,
            source: source.into(),
        }
    }

    /// Whether reading again can succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

/// Bytes in memory (reads are slices, no copy).
#[async_trait]
impl ByteSource for Bytes {
    fn len(&self) -> u64 {
        Bytes::len(self) as u64
    }

    async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes, SourceError> {
        let range = checked(pos, len, Bytes::len(self))?;
        Ok(self.slice(range))
    }
}

/// A borrowed slice (reads are copies of a chunk each).
#[derive(Debug, Clone, Copy)]
pub struct SliceSource<'a>(pub &'a [u8]);

#[async_trait]
impl ByteSource for SliceSource<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes, SourceError> {
        let range = checked(pos, len, self.0.len())?;
        Ok(Bytes::copy_from_slice(&self.0[range]))
    }
}

fn checked(pos: u64, len: usize, size: usize) -> Result<Range<usize>, SourceError> {
    usize::try_from(pos)
        .ok()
        .and_then(|p| Some(p..p.checked_add(len)?))
        .filter(|r| r.end <= size)
        .ok_or_else(|| {
            SourceError::new(
                false,
                format!("read of {len} bytes at {pos} past the end ({size} bytes)"),
            )
        })
}

/// One framed batch and where it is, relative to the start of the range read.
#[derive(Debug, Clone)]
pub(crate) struct Framed {
    pub bytes: Bytes,
    pub start: u64,
    pub end: u64,
}

impl Framed {
    /// The batch (framing was checked when it was read).
    pub fn batch(&self) -> Result<RecordBatch<'_>, ConvertError> {
        RecordBatch::parse(&self.bytes)
            .map(|(b, _)| b)
            .map_err(|source| ConvertError::Framing {
                position: self.start as usize,
                source,
            })
    }
}

/// Why [`BatchReader::next`] stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The bytes stop framing here ([`ConvertError::Framing`]).
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// Frames the batches of `range` of a source in order, holding one read buffer of about
/// [`READ_CHUNK`] (or one batch, when a batch is larger). Framing errors are exactly
/// those of [`strata_proto::batch::batches`] over the range's bytes, positions included,
/// so a conversion that streams reports what one over a slice did.
pub(crate) struct BatchReader<'s> {
    src: &'s dyn ByteSource,
    range: Range<u64>,
    /// Bytes read from `buf_pos` on.
    buf: Bytes,
    buf_pos: u64,
    /// The next batch's position in the source.
    pos: u64,
    chunk: usize,
    done: bool,
}

impl<'s> BatchReader<'s> {
    pub fn new(src: &'s dyn ByteSource, range: Range<u64>) -> Self {
        BatchReader {
            src,
            buf: Bytes::new(),
            buf_pos: range.start,
            pos: range.start,
            range,
            chunk: READ_CHUNK,
            done: false,
        }
    }

    /// The next batch, `None` at the range's end; after an error, `None`.
    pub async fn next(&mut self) -> Option<Result<Framed, ReadError>> {
        if self.done || self.pos >= self.range.end {
            return None;
        }
        let r = self.frame().await;
        if r.is_err() {
            self.done = true;
            self.buf = Bytes::new();
        }
        Some(r)
    }

    async fn frame(&mut self) -> Result<Framed, ReadError> {
        let rest = self.range.end - self.pos;
        let position = (self.pos - self.range.start) as usize;
        let framing = |source| ConvertError::Framing { position, source };
        let head_len = (HEADER_LEN as u64).min(rest) as usize;
        let head = self.bytes(head_len).await?;
        let header = batch::parse_header(&head).map_err(framing)?;
        let size = header.total_size();
        if rest < size as u64 {
            // As `RecordBatch::parse` says it over the whole rest of the input.
            return Err(framing(batch::BatchError::Truncated {
                need: size,
                have: usize::try_from(rest).unwrap_or(usize::MAX),
            })
            .into());
        }
        let bytes = self.bytes(size).await?;
        let start = self.pos - self.range.start;
        self.pos += size as u64;
        Ok(Framed {
            bytes,
            start,
            end: start + size as u64,
        })
    }

    /// `len` bytes from `pos` (within the range), reading when the buffer ends first.
    async fn bytes(&mut self, len: usize) -> Result<Bytes, SourceError> {
        let end = self.pos + len as u64;
        if self.pos < self.buf_pos || end > self.buf_pos + self.buf.len() as u64 {
            // Let go of the old chunk before reading the next one.
            self.buf = Bytes::new();
            let want = (len.max(self.chunk) as u64).min(self.range.end - self.pos);
            self.buf = self.src.read_at(self.pos, want as usize).await?;
            self.buf_pos = self.pos;
            if (self.buf.len() as u64) < want {
                return Err(SourceError::new(
                    true,
                    format!(
                        "asked for {want} bytes at {}, got {}",
                        self.pos,
                        self.buf.len()
                    ),
                ));
            }
        }
        let at = (self.pos - self.buf_pos) as usize;
        Ok(self.buf.slice(at..at + len))
    }
}
