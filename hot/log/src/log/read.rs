//! Reads of an open [`Log`]: whole batches from an offset (KIP-74), ranges of batches
//! for the offloader and the Parquet converter, segment bytes from the tail buffer, the
//! page cache or `O_DIRECT`, and the time lookup behind ListOffsets.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use strata_proto::Offset;
use strata_proto::batch::{self, HEADER_LEN, RecordBatch};

use super::{Log, RANGE_CHUNK, READ_SLACK, ReadResult};
use crate::direct_read::{self, AlignedBuf};
use crate::error::LogError;
use crate::index::{Indexes, rel};
use crate::read_cache;
use crate::segment::{self, read_at};
use crate::tail::{ceil_block, floor_block};
use crate::txn_index::{self, AbortedTxn};
use crate::window::{self, Window};

/// One segment as a read found it: its files, whether it was sealed and how large,
/// and the log's read generation then (for the read cache).
struct SegmentRead<'a> {
    base: Offset,
    file: &'a std::fs::File,
    path: &'a Path,
    sealed: bool,
    size: u64,
    generation: u64,
}

impl Log {
    /// The last stable offset with the high-water mark at `high_watermark` (KIP-98): the
    /// first offset of the oldest transaction that is open, or whose marker is not yet
    /// below the high-water mark; the high-water mark when there is none. A
    /// read_committed consumer reads below it.
    pub fn last_stable_offset(&self, high_watermark: Offset) -> Offset {
        let g = self.read_lock();
        g.producers
            .first_unstable_offset(high_watermark)
            .map_or(high_watermark, |first| first.min(high_watermark))
    }

    /// Forgets the ended transactions whose marker the high-water mark has passed (the
    /// owner calls this as its high-water mark moves, now and then: until it does,
    /// [`Self::last_stable_offset`] skips them one by one).
    pub fn prune_stable_transactions(&self, high_watermark: Offset) {
        let mut g = self.write_lock();
        g.producers.prune_stable(high_watermark);
    }

    /// The aborted-transaction entries whose marker lies in `[from, to)`.
    pub(crate) fn aborted_in(&self, from: Offset, to: Offset) -> Vec<AbortedTxn> {
        let g = self.read_lock();
        g.segments
            .values()
            .flat_map(|s| s.aborted.iter())
            .filter(|e| (from..to).contains(&e.last_offset))
            .copied()
            .collect()
    }

    /// The aborted transactions a read_committed fetch of `[from, upper)` returns with
    /// its batches (Kafka's `collectAbortedTransactions`): those whose ABORT marker is
    /// at or after `from` and whose first offset is below `upper`, from the `.txnindex`
    /// of the segment holding `from` and the later ones.
    pub fn aborted_transactions(&self, from: Offset, upper: Offset) -> Vec<AbortedTxn> {
        let g = self.read_lock();
        let start = g
            .segments
            .range(..=from)
            .next_back()
            .map_or(from, |(&b, _)| b);
        let mut out = Vec::new();
        txn_index::collect(
            g.segments.range(start..).flat_map(|(_, s)| &s.aborted),
            from,
            upper,
            &mut out,
        );
        out
    }

    /// Whether a read from `offset` may wait on the device: in direct mode, unless the
    /// active segment's tail buffer holds it (judged by the index position the read
    /// starts at); through the page cache (buffered mode, or O_DIRECT refused), a read of
    /// a sealed segment (its bytes may have left the page cache, and its index may not
    /// be loaded yet), not of the active one (just written). A sealed segment's bytes
    /// may be in the read cache or the page cache; this says "may".
    pub fn read_may_wait(&self, offset: Offset) -> bool {
        let g = self.read_lock();
        let Some(seg) = g.segment_for(offset) else {
            return false;
        };
        if seg.sealed {
            return true;
        }
        if g.config.io_mode != crate::IoMode::Direct || g.direct_refused {
            return false;
        }
        let pos = seg
            .builder
            .idx
            .position_for(rel(seg.base, offset.max(seg.base))) as u64;
        g.tail.cached_from(seg.base).is_none_or(|c| pos < c)
    }

    /// Reads whole batches starting with the one that contains `offset`, up to
    /// `max_bytes` (but always at least one whole batch, as Kafka does since KIP-74), and
    /// only batches that end at or below `max_offset` when given (the high-water mark).
    /// Reads come from one segment; the caller continues from `next_offset`.
    pub fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        max_offset: Option<Offset>,
    ) -> Result<ReadResult, LogError> {
        let empty = || ReadResult {
            data: Bytes::new(),
            next_offset: offset,
        };
        let (seg_base, seg_next, file, direct, path, mut pos, limit, sealed, generation) = {
            let g = self.read_lock();
            let (start, end) = (g.log_start_offset, g.log_end_offset());
            if offset < start || offset > end {
                return Err(LogError::OffsetOutOfRange {
                    requested: offset,
                    start,
                    end,
                });
            }
            if offset == end || max_offset.is_some_and(|m| offset >= m) {
                return Ok(empty());
            }
            let Some(seg) = g.segment_for(offset) else {
                return Ok(empty());
            };
            let target = rel(seg.base, offset.max(seg.base));
            let pos = if seg.sealed {
                seg.index()?.position_for(target)
            } else {
                seg.builder.idx.position_for(target)
            };
            (
                seg.base,
                seg.sealed.then_some(seg.next_offset),
                seg.plain()?,
                g.direct_reader(&self.dir, seg),
                seg.path.clone(),
                pos as u64,
                seg.size,
                seg.sealed,
                g.read_generation,
            )
        };
        let src = SegmentRead {
            base: seg_base,
            file: &file,
            path: &path,
            sealed,
            size: limit,
            generation,
        };
        // One read from the index entry covers the walk to the wanted batch (at most an
        // index interval plus one batch) and the data: no separate header reads.
        let corrupt = |at: u64, e: batch::BatchError| LogError::Corrupt {
            path: path.clone(),
            position: at,
            reason: e.to_string(),
        };
        loop {
            if pos >= limit {
                // `offset` is in a gap at the end of a sealed segment (a truncation cut it
                // in a compacted range): the next batch is in the next segment.
                if let Some(next) = seg_next.filter(|&n| n > offset) {
                    return self.read(next, max_bytes, max_offset);
                }
                return Ok(empty());
            }
            let want = (max_bytes as u64)
                .saturating_add(READ_SLACK)
                .min(limit - pos);
            let data = self.read_segment(&src, direct.as_deref(), pos, want as usize)?;
            let window = window::find_window(&data, offset, max_bytes, max_offset)
                .map_err(|e| corrupt(pos + e.at as u64, e.error))?;
            match window {
                Window::Found {
                    start,
                    end,
                    next_offset,
                } => {
                    return Ok(ReadResult {
                        data: data.slice(start..end),
                        next_offset,
                    });
                }
                // Not one batch header before the segment's end (the file is shorter
                // than its recorded size): retrying here would loop forever.
                Window::NotFound { skip: 0 } => {
                    return Err(corrupt(
                        pos,
                        batch::BatchError::Truncated {
                            need: HEADER_LEN,
                            have: data.len(),
                        },
                    ));
                }
                // The walk ran past this read: continue from where it stopped.
                Window::NotFound { skip } => pos += skip as u64,
                Window::PastMaxOffset => return Ok(empty()),
                Window::Incomplete {
                    start,
                    len,
                    next_offset,
                } => {
                    // KIP-74: the first batch is returned whole even when larger than
                    // max_bytes.
                    let at = pos + start as u64;
                    let data = self.read_segment(&src, direct.as_deref(), at, len)?;
                    if data.len() < len {
                        return Err(corrupt(
                            at,
                            batch::BatchError::Truncated {
                                need: len,
                                have: data.len(),
                            },
                        ));
                    }
                    return Ok(ReadResult {
                        data: data.slice(..len),
                        next_offset,
                    });
                }
            }
        }
    }

    /// The batches from `from` (a batch boundary) up to `end` (a batch boundary after
    /// it, at most the log end), back to back: what reads from `from` on return until
    /// they reach `end`. [`LogError::NoBatch`] if a read there returns nothing (`end`
    /// is inside a batch, or the range is not all in the log); a range below the log
    /// start is [`LogError::OffsetOutOfRange`], as for [`Self::read`].
    pub fn read_range(&self, from: Offset, end: Offset) -> Result<Vec<u8>, LogError> {
        let mut out = Vec::new();
        self.read_range_chunks(from, end, &mut |chunk| {
            out.extend_from_slice(&chunk);
            Ok(())
        })?;
        Ok(out)
    }

    /// Where the batches `[from, end)` of one sealed segment lie in its file (`end` at
    /// most the segment's next offset), with the file held open: what
    /// [`Self::read_sealed`] then reads piece by piece, for background work that streams
    /// a segment (Parquet conversion reads it twice, a few MiB at a time) instead of
    /// copying it whole as [`Self::read_range`] does. The open descriptors keep the
    /// bytes readable if retention deletes the segment or the cleaner replaces it
    /// meanwhile, so every read of one span sees the same bytes.
    /// [`LogError::NoBatch`] when `from` is not in a sealed segment that reaches `end`.
    pub fn sealed_span(&self, from: Offset, end: Offset) -> Result<SealedSpan, LogError> {
        let (mut span, from_hint, end_hint) = {
            let g = self.read_lock();
            let (start, log_end) = (g.log_start_offset, g.log_end_offset());
            if from < start || from > log_end {
                return Err(LogError::OffsetOutOfRange {
                    requested: from,
                    start,
                    end: log_end,
                });
            }
            let seg = g
                .segment_for(from)
                .filter(|s| s.sealed && end <= s.next_offset)
                .ok_or(LogError::NoBatch { offset: from, end })?;
            let idx = seg.index()?;
            let hint = |o: Offset| idx.position_for(rel(seg.base, o.max(seg.base))) as u64;
            let span = SealedSpan {
                base: seg.base,
                file: seg.plain()?,
                direct: g.direct_reader(&self.dir, seg),
                path: seg.path.clone(),
                size: seg.size,
                generation: g.read_generation,
                start: 0,
                end: seg.size,
            };
            (span, hint(from), (end < seg.next_offset).then(|| hint(end)))
        };
        span.start = first_batch_from(&span, from_hint, from)?;
        if let Some(h) = end_hint {
            span.end = first_batch_from(&span, h.max(span.start), end)?;
        }
        Ok(span)
    }

    /// Bytes `[pos, pos + len)` of a span (positions from its start), fewer only past its
    /// end: through the same paths as [`Self::read`] (`O_DIRECT` in direct mode, the read
    /// cache when it is on).
    pub fn read_sealed(&self, span: &SealedSpan, pos: u64, len: usize) -> Result<Bytes, LogError> {
        let at = span.start.saturating_add(pos).min(span.end);
        let len = len.min((span.end - at) as usize);
        let src = SegmentRead {
            base: span.base,
            file: &span.file,
            path: &span.path,
            sealed: true,
            size: span.size,
            generation: span.generation,
        };
        self.read_segment(&src, span.direct.as_deref(), at, len)
    }

    /// [`Self::read_range`], handing each read's batches to `f` as they come (at most
    /// [`RANGE_CHUNK`] bytes, or one batch, each) instead of gathering them.
    pub fn read_range_chunks(
        &self,
        from: Offset,
        end: Offset,
        f: &mut dyn FnMut(Bytes) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        self.read_range_in(from, end, RANGE_CHUNK, f)
    }

    /// [`Self::read_range_chunks`] in reads of about `chunk` bytes (background work
    /// reads in small pieces, so that no single read holds the disk long in front of a
    /// producer's append).
    pub(crate) fn read_range_in(
        &self,
        from: Offset,
        end: Offset,
        chunk: usize,
        f: &mut dyn FnMut(Bytes) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let mut at = from;
        while at < end {
            let r = self.read(at, chunk, Some(end))?;
            if r.data.is_empty() || r.next_offset <= at {
                return Err(LogError::NoBatch { offset: at, end });
            }
            at = r.next_offset;
            f(r.data)?;
        }
        Ok(())
    }

    /// Bytes `[pos, pos + len)` of segment `seg` (fewer only past the end of the file):
    /// the part the tail cache holds is copied from memory, under the read lock (a
    /// memcpy, no syscall); the part before it is read from the file without the lock,
    /// with `O_DIRECT` through `direct` when given (see `direct_read`), else through
    /// `file` and the page cache. Bytes below a segment's size never change, so it does
    /// not matter whether a byte comes from the cache or the file, nor that the cache
    /// moves on meanwhile.
    fn read_segment(
        &self,
        src: &SegmentRead<'_>,
        direct: Option<&std::fs::File>,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, LogError> {
        match direct {
            Some(direct) => self.read_segment_direct(src, direct, pos, len),
            None => self.read_segment_buffered(src, pos, len),
        }
    }

    fn read_segment_buffered(
        &self,
        src: &SegmentRead<'_>,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, LogError> {
        let (seg, file, path) = (src.base, src.file, src.path);
        let end = pos + len as u64;
        let mut out = Vec::with_capacity(len);
        let mut at = pos;
        while at < end {
            let cached_from = {
                let g = self.read_lock();
                at += g.tail.copy_out(seg, at, end, &mut out);
                g.tail.cached_from(seg)
            };
            if at >= end {
                break;
            }
            // From the file: up to where the cache starts, if that is inside the range.
            let stop = cached_from.filter(|&c| c > at && c < end).unwrap_or(end);
            let want = (stop - at) as usize;
            let got = segment::read_into(file, path, at, want, &mut out)?;
            at += got as u64;
            if got < want || stop == end {
                break;
            }
        }
        Ok(Bytes::from(out))
    }

    /// [`Self::read_segment`] in direct mode: one aligned buffer covers the blocks of
    /// `[pos, pos + len)`; the file's part of the range is read into it with `O_DIRECT`
    /// in whole blocks (where the cache starts is a block boundary), the cache's part
    /// copied after it, and the result is a slice of the buffer. A direct read may
    /// rewrite bytes of the buffer already copied from the cache (the start of a block,
    /// or a gap between the windows): below the segment's size, file and cache agree.
    fn read_segment_direct(
        &self,
        src: &SegmentRead<'_>,
        direct: &std::fs::File,
        pos: u64,
        len: usize,
    ) -> Result<Bytes, LogError> {
        let seg = src.base;
        let end = pos + len as u64;
        let base = floor_block(pos);
        let mut buf = AlignedBuf::for_read((ceil_block(end) - base) as usize);
        let mut direct = Some(direct);
        let mut at = pos;
        while at < end {
            let cached_from = {
                let g = self.read_lock();
                let out = &mut buf.bytes_mut()[(at - base) as usize..];
                at += g.tail.copy_out_to(seg, at, end, out);
                g.tail.cached_from(seg)
            };
            if at >= end {
                break;
            }
            // From the file: up to where the cache starts, if that is inside the range.
            let stop = cached_from.filter(|&c| c > at && c < end).unwrap_or(end);
            let from = floor_block(at);
            let region = &mut buf.bytes_mut()[(from - base) as usize..];
            let got = self
                .fill_cached(src, &mut direct, region, from, stop)
                .map_err(LogError::io("read", src.path))?;
            if direct.is_none() {
                self.read_lock()
                    .refuse_direct_reads(&self.dir, "direct read refused");
            }
            let reached = from + got as u64;
            if reached < stop {
                // The end of the file.
                at = at.max(reached);
                break;
            }
            at = stop;
        }
        let (from, to) = ((pos - base) as usize, (at.max(pos) - base) as usize);
        Ok(buf.into_bytes(from, to))
    }

    /// Fills `buf` (file position `from`, a block boundary) with the file's bytes up to
    /// `stop`, as `direct_read::fill` does, through the read cache ([`read_cache`]) for
    /// the bytes that cannot change in this generation: a sealed segment's, and whole
    /// chunks of the active segment below `stop` (where its tail buffer starts, or the
    /// end of the read). A miss reads up to [`read_cache::READ_AHEAD`] chunks at once.
    /// Returns how many bytes it filled from `from` (fewer than asked only at the end of
    /// the file).
    fn fill_cached(
        &self,
        src: &SegmentRead<'_>,
        direct: &mut Option<&std::fs::File>,
        buf: &mut [u8],
        from: u64,
        stop: u64,
    ) -> std::io::Result<usize> {
        let file = src.file;
        if !read_cache::enabled() {
            return direct_read::fill(file, direct, buf, from, (stop - from) as usize);
        }
        let chunk_len = read_cache::chunk();
        // Chunks may be cached up to here.
        let cacheable = if src.sealed {
            src.size
        } else {
            stop / chunk_len * chunk_len
        };
        let mut at = from;
        while at < stop {
            let c0 = at / chunk_len * chunk_len;
            let off = (at - from) as usize;
            if c0 >= cacheable || (!src.sealed && c0 + chunk_len > cacheable) {
                // The rest is not cached: straight from the file (`at` is a block
                // boundary: `from`, or a chunk's start).
                let got =
                    direct_read::fill(file, direct, &mut buf[off..], at, (stop - at) as usize)?;
                return Ok(off + got);
            }
            // This chunk and the following cacheable ones, read at once on a miss.
            let end = (c0 + read_cache::READ_AHEAD * chunk_len).min(cacheable);
            let first = (self.read_cache_id, src.generation, src.base, c0);
            let chunks = (end - c0).div_ceil(chunk_len) as usize;
            let chunk = read_cache::get_or_load(first, chunks, chunk_len, |n| {
                let len = (n as u64 * chunk_len).min(end - c0) as usize;
                direct_read::read_range(file, direct, c0, len)
            })?;
            let within = (at - c0) as usize;
            let upto = ((stop - c0) as usize).min(chunk.len());
            if upto <= within {
                // The file ends before `at`.
                break;
            }
            buf[off..off + upto - within].copy_from_slice(&chunk[within..upto]);
            at += (upto - within) as u64;
            if chunk.len() < chunk_len as usize {
                break;
            }
        }
        Ok((at - from) as usize)
    }

    /// The first record with a timestamp at or after `timestamp` (Kafka's ListOffsets by
    /// time): its offset and timestamp, or `None` if every record is older. Found through
    /// the segments' max timestamps and time indexes, then a walk of at most one index
    /// interval of batches.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(Offset, i64)>, LogError> {
        let candidates: Vec<(Arc<std::fs::File>, PathBuf, u64, u64, Offset)> = {
            let g = self.read_lock();
            let start = g.log_start_offset;
            let mut out = Vec::new();
            for seg in g.segments.values() {
                if seg.next_offset <= start || seg.max_timestamp < timestamp {
                    continue;
                }
                let with_index = |idx: &Indexes| {
                    let from = seg.base + idx.start_for_timestamp(timestamp) as i64;
                    let from = from.max(start).min(seg.next_offset);
                    idx.position_for(rel(seg.base, from))
                };
                let pos = if seg.sealed {
                    with_index(seg.index()?.as_ref())
                } else {
                    with_index(&seg.builder.idx)
                };
                out.push((seg.plain()?, seg.path.clone(), pos as u64, seg.size, start));
            }
            out
        };
        for (file, path, mut pos, limit, start) in candidates {
            while pos < limit {
                let head = read_at(&file, &path, pos, HEADER_LEN)?;
                let h = batch::parse_header(&head).map_err(|e| LogError::Corrupt {
                    path: path.clone(),
                    position: pos,
                    reason: e.to_string(),
                })?;
                let size = h.total_size() as u64;
                if h.max_timestamp >= timestamp && h.next_offset() > start {
                    let bytes = read_at(&file, &path, pos, size as usize)?;
                    let (b, _) = RecordBatch::parse(&bytes)?;
                    let recs = b.records()?;
                    for r in recs.iter() {
                        let r = r?;
                        if r.offset >= start && r.timestamp >= timestamp {
                            return Ok(Some((r.offset, r.timestamp)));
                        }
                    }
                }
                pos += size;
            }
        }
        Ok(None)
    }
}

/// A sealed segment's batches as a byte range of its open file: see [`Log::sealed_span`].
#[derive(Debug, Clone)]
pub struct SealedSpan {
    base: Offset,
    file: Arc<std::fs::File>,
    direct: Option<Arc<std::fs::File>>,
    path: PathBuf,
    size: u64,
    generation: u64,
    /// Where the first batch starts in the file.
    start: u64,
    /// Where the batches end.
    end: u64,
}

impl SealedSpan {
    /// The bytes the span holds.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The segment's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The position of the first batch at or after `pos` (an index entry's position) whose
/// last offset is at least `offset`; the span's size when there is none. Reads headers
/// only, at most an index interval of them.
fn first_batch_from(span: &SealedSpan, mut pos: u64, offset: Offset) -> Result<u64, LogError> {
    while pos < span.size {
        let head = read_at(&span.file, &span.path, pos, HEADER_LEN)?;
        let h = batch::parse_header(&head).map_err(|e| LogError::Corrupt {
            path: span.path.clone(),
            position: pos,
            reason: e.to_string(),
        })?;
        if h.last_offset() >= offset {
            return Ok(pos);
        }
        pos += h.total_size() as u64;
    }
    Ok(span.size)
}
