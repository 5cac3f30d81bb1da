//! One segment: its files, its in-memory state, scanning and reading.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use strata_proto::batch::{self, BatchHeader, HEADER_LEN, RecordBatch};
use strata_proto::control::{self, MarkerKind};
use strata_proto::{LeaderEpoch, Offset};

use crate::direct_read;
use crate::error::LogError;
use crate::files::SegmentFile;
use crate::index::{IndexBuilder, Indexes, rel};
use crate::tail::{BLOCK, ceil_block};
use crate::txn_index::{self, AbortedTxn};

pub(crate) fn file_stem(base: Offset) -> String {
    format!("{base:020}")
}

pub(crate) fn log_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.log", file_stem(base)))
}
pub(crate) fn index_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.index", file_stem(base)))
}
pub(crate) fn time_index_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.timeindex", file_stem(base)))
}

/// A segment's state. The active segment's fields change under the log's write lock;
/// a sealed segment never changes.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base: Offset,
    pub next_offset: Offset,
    pub size: u64,
    pub max_timestamp: i64,
    /// The segment's file; its descriptors come from the process-wide cache
    /// (`files`): the ordinary one (reads, buffered writes, truncation, fsync) and,
    /// in direct mode, one opened with `O_DIRECT` (appends to the active segment,
    /// reads).
    pub file: Arc<SegmentFile>,
    /// Active segment in direct mode: appends are written with `O_DIRECT` (see
    /// `tail`). While so the file may end in up to 4095 zero bytes of padding after
    /// `size`.
    pub direct_writes: bool,
    pub path: PathBuf,
    pub sealed: bool,
    /// Active segment: the index being built. Sealed segment: unused (see `sealed_index`).
    pub builder: IndexBuilder,
    /// How many offset/time entries of `builder` are already in the index files.
    pub persisted: (usize, usize),
    /// Sealed segment: the index, loaded on first use.
    pub sealed_index: OnceLock<Arc<Indexes>>,
    /// When the first batch was appended (for segment.ms), if known.
    pub first_append_ms: Option<i64>,
    /// Bytes appended since the last fsync.
    pub dirty: bool,
    /// The aborted transactions whose marker is in this segment, in marker order (its
    /// `.txnindex`, see [`crate::txn_index`]).
    pub aborted: Vec<AbortedTxn>,
    /// Entries appended to the `.txnindex` since the last fsync.
    pub aborted_dirty: bool,
}

/// What a full scan of a segment file found.
#[derive(Debug)]
pub(crate) struct ScanResult {
    pub valid_size: u64,
    pub next_offset: Offset,
    pub builder: IndexBuilder,
    /// Why the scan stopped before the end of the file, if it did.
    pub stop_reason: Option<String>,
    /// Zero bytes after the last batch that a direct write's padding explains (the file
    /// ends at the next 4 KiB boundary): to be cut, but not data lost.
    pub padding: u64,
    pub first_batch_max_ts: Option<i64>,
    /// The runs of batches with the same partition leader epoch, in order:
    /// `(epoch, first batch's base offset, offset after the run's last batch)`. Recovery
    /// checks the leader-epoch cache against them.
    pub epochs: Vec<(LeaderEpoch, Offset, Offset)>,
}

/// Where [`Segment::scan_from`] starts: a batch boundary, the offset of the batch there,
/// and the index of the batches before it.
#[derive(Debug)]
pub(crate) struct ScanFrom {
    pub pos: u64,
    pub offset: Offset,
    pub builder: IndexBuilder,
}

/// Where [`Segment::plan_cut`] would cut a segment.
#[derive(Debug)]
pub(crate) struct Cut {
    /// The segment ends at this offset afterwards.
    pub offset: Offset,
    /// The byte position of the batch that starts at `offset`.
    pub pos: u64,
    /// The index of the batches before `pos`.
    pub builder: IndexBuilder,
}

impl Segment {
    /// Creates an empty segment's files.
    pub fn create(dir: &Path, base: Offset, index_interval: u64) -> Result<Segment, LogError> {
        let path = log_path(dir, base);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(LogError::io("create", &path))?;
        for p in [index_path(dir, base), time_index_path(dir, base)] {
            File::create(&p).map_err(LogError::io("create", &p))?;
        }
        // An aborted-transaction index of an earlier segment at this base is stale.
        txn_index::rewrite(dir, base, &[])?;
        Ok(Segment {
            base,
            next_offset: base,
            size: 0,
            max_timestamp: -1,
            file: Arc::new(SegmentFile::with_plain(path.clone(), file)),
            direct_writes: false,
            path,
            sealed: false,
            builder: IndexBuilder::new(index_interval),
            persisted: (0, 0),
            sealed_index: OnceLock::new(),
            first_append_ms: None,
            dirty: false,
            aborted: Vec::new(),
            aborted_dirty: false,
        })
    }

    pub fn open_file(path: &Path) -> Result<File, LogError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(LogError::io("open", path))
    }

    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// The ordinary descriptor (from the cache: see `files`).
    pub fn plain(&self) -> Result<Arc<File>, LogError> {
        self.file.plain().map_err(LogError::io("open", &self.path))
    }

    /// Scans the whole file, CRC-checking each batch, from the segment's base offset.
    /// Stops at the first batch that is torn, corrupt, or does not continue the offsets.
    ///
    /// If what follows the last valid batch is zeros and the file ends at the next 4 KiB
    /// boundary, it is the padding of a direct write (`tail`), not a torn batch: it is
    /// reported as `padding`, with no `stop_reason`. Anything else after the last batch
    /// (a byte that is not zero, zeros past that boundary, or zeros ending before it,
    /// which no direct write leaves) is still a stop reason. A torn batch whose surviving
    /// part is zeros ending exactly at a block boundary (the first bytes of a base
    /// offset below 2^48, cut at the boundary) looks the same and is cut silently too:
    /// the batch is lost either way, only the report differs.
    ///
    /// Reads go through `direct` (the file opened with `O_DIRECT`) when given, so that a
    /// scan does not fill the page cache with a segment that direct mode then reads
    /// with `O_DIRECT` anyway; through `file` otherwise, or if direct reads are refused.
    pub fn scan(
        file: &File,
        direct: Option<&File>,
        path: &Path,
        base: Offset,
        index_interval: u64,
        allow_gaps: bool,
    ) -> Result<ScanResult, LogError> {
        let from = ScanFrom {
            pos: 0,
            offset: base,
            builder: IndexBuilder::new(index_interval),
        };
        Self::scan_from(file, direct, path, base, allow_gaps, from)
    }

    /// [`Self::scan`] from the batch at `from.pos`, which must start at offset
    /// `from.offset`, continuing `from.builder` (the index of the batches before it:
    /// [`IndexBuilder::rewind`]). The bytes before it are not read, except the first
    /// batch's header (for `first_batch_max_ts`). The result describes the whole
    /// segment as a full scan would, except `epochs`, which covers the scanned batches
    /// only. A batch at `from.pos` that does not start at `from.offset` stops the scan
    /// there (with gaps allowed too: the index said which offset is there).
    pub fn scan_from(
        file: &File,
        direct: Option<&File>,
        path: &Path,
        base: Offset,
        allow_gaps: bool,
        from: ScanFrom,
    ) -> Result<ScanResult, LogError> {
        let mut direct = direct;
        let mut read = |pos: u64, len: usize| {
            direct_read::read_range(file, &mut direct, pos, len).map_err(LogError::io("read", path))
        };
        let len = file.metadata().map_err(LogError::io("stat", path))?.len();
        let ScanFrom {
            mut pos,
            offset: mut expected,
            mut builder,
        } = from;
        let resumed_at = (pos > 0).then_some(expected);
        let mut stop_reason = None;
        let mut first_batch_max_ts = None;
        if pos > 0 {
            let head = read(0, HEADER_LEN)?;
            match batch::parse_header(&head) {
                Ok(h) => first_batch_max_ts = Some(h.max_timestamp),
                Err(e) => {
                    // Nothing after it can be trusted either: the caller scans it all.
                    return Ok(ScanResult {
                        valid_size: 0,
                        next_offset: base,
                        builder: IndexBuilder::new(builder.interval()),
                        stop_reason: Some(format!("at byte 0: {e}")),
                        padding: 0,
                        first_batch_max_ts: None,
                        epochs: Vec::new(),
                    });
                }
            }
        }
        let mut epochs: Vec<(LeaderEpoch, Offset, Offset)> = Vec::new();
        // Read in large chunks; a batch spanning the chunk end is re-read whole.
        const CHUNK: usize = 4 << 20;
        let mut buf = Bytes::new();
        let mut buf_start: u64 = 0;
        while pos < len {
            let avail_in_buf = (buf_start + buf.len() as u64).saturating_sub(pos);
            if pos < buf_start || avail_in_buf < HEADER_LEN as u64 {
                buf_start = pos;
                buf = read(pos, CHUNK.min((len - pos) as usize))?;
            }
            let off = (pos - buf_start) as usize;
            let header = match batch::parse_header(&buf[off..]) {
                Ok(h) => h,
                Err(e) => {
                    stop_reason = Some(format!("at byte {pos}: {e}"));
                    break;
                }
            };
            let size = header.total_size() as u64;
            if pos + size > len {
                stop_reason = Some(format!(
                    "at byte {pos}: batch of {size} bytes is torn ({} on disk)",
                    len - pos
                ));
                break;
            }
            if off + size as usize > buf.len() {
                buf_start = pos;
                buf = read(pos, (size as usize).max(CHUNK.min((len - pos) as usize)))?;
            }
            let off = (pos - buf_start) as usize;
            let (b, _) = match RecordBatch::parse(&buf[off..off + size as usize]) {
                Ok(x) => x,
                Err(e) => {
                    stop_reason = Some(format!("at byte {pos}: {e}"));
                    break;
                }
            };
            if let Err(e) = b.validate_crc() {
                stop_reason = Some(format!("at byte {pos}: {e}"));
                break;
            }
            // Offsets increase. Gaps only in a log that may have them (compacted, or a
            // follower of a compacted leader): the base offset is not covered by the
            // CRC, and elsewhere a gap is a damaged base offset.
            let gap_allowed = allow_gaps && resumed_at != Some(expected);
            if (b.base_offset() != expected && !(gap_allowed && b.base_offset() > expected))
                || b.header().last_offset_delta < 0
                || b.next_offset() - base > u32::MAX as i64
            {
                stop_reason = Some(format!(
                    "at byte {pos}: batch offsets {}..={} do not follow {}",
                    b.base_offset(),
                    b.last_offset(),
                    expected
                ));
                break;
            }
            if pos + size > u32::MAX as u64 {
                stop_reason = Some(format!("at byte {pos}: segment larger than 4 GiB"));
                break;
            }
            builder.on_batch(
                rel(base, b.base_offset()),
                pos as u32,
                size,
                b.max_timestamp(),
            );
            first_batch_max_ts.get_or_insert(b.max_timestamp());
            let epoch = b.header().partition_leader_epoch;
            match epochs.last_mut() {
                Some(run) if run.0 == epoch => run.2 = b.next_offset(),
                _ => epochs.push((epoch, b.base_offset(), b.next_offset())),
            }
            expected = b.next_offset();
            pos += size;
        }
        let mut padding = 0;
        if stop_reason.is_some() && len == ceil_block(pos) {
            // Less than a block: read it whole (the scan buffer may not hold it).
            let tail = read(pos, (len - pos) as usize)?;
            if tail.len() as u64 == len - pos && tail.iter().all(|&b| b == 0) {
                debug_assert!(tail.len() < BLOCK as usize);
                padding = len - pos;
                stop_reason = None;
            }
        }
        Ok(ScanResult {
            valid_size: pos,
            next_offset: expected,
            builder,
            stop_reason,
            padding,
            first_batch_max_ts,
            epochs,
        })
    }

    /// Plans cutting the segment so that it ends at `offset` (`base <= offset <
    /// next_offset`): finds the batch that starts there, and rebuilds the index of the
    /// batches before it from the index entries below the cut and a walk of the batch
    /// headers after the last of them (at most an index interval of batches). Changes
    /// nothing. Kafka truncates to batch boundaries, and so do we: an `offset` inside
    /// a batch is refused with [`LogError::NotBatchBoundary`].
    pub fn plan_cut(&self, offset: Offset) -> Result<Cut, LogError> {
        debug_assert!(self.base <= offset && offset < self.next_offset);
        let idx = self.index()?;
        let (mut builder, from) =
            IndexBuilder::rewind(&idx, self.builder.interval(), rel(self.base, offset));
        let mut pos = from as u64;
        let corrupt = |pos: u64, reason: String| LogError::Corrupt {
            path: self.path.clone(),
            position: pos,
            reason,
        };
        loop {
            if pos == self.size {
                // `offset` is in a gap after the last batch (a compacted segment): the
                // segment ends there with all its bytes.
                return Ok(Cut {
                    offset,
                    pos,
                    builder,
                });
            }
            if pos + HEADER_LEN as u64 > self.size {
                return Err(corrupt(pos, format!("no batch starts at offset {offset}")));
            }
            let head = read_at(&*self.plain()?, &self.path, pos, HEADER_LEN)?;
            let h = batch::parse_header(&head).map_err(|e| corrupt(pos, e.to_string()))?;
            // The batch that starts at `offset`, or the first after a gap holding it
            // (compaction removed the batches there): the segment ends at `offset`.
            if h.base_offset >= offset {
                return Ok(Cut {
                    offset,
                    pos,
                    builder,
                });
            }
            if h.next_offset() > offset {
                return Err(LogError::NotBatchBoundary {
                    offset,
                    batch_base: h.base_offset,
                    batch_next: h.next_offset(),
                });
            }
            let size = h.total_size() as u64;
            builder.on_batch(
                rel(self.base, h.base_offset),
                pos as u32,
                size,
                h.max_timestamp,
            );
            pos += size;
        }
    }

    /// Cuts the segment as planned: the file ends at the cut (direct-write padding
    /// included) and is fsynced, then the index files are rewritten (fsynced for a
    /// sealed segment, which stays sealed). Recovery rescans a segment cut half-way,
    /// so the order only matters for what it finds: the log first.
    pub fn apply_cut(&mut self, cut: Cut) -> Result<(), LogError> {
        let Cut {
            offset,
            pos,
            mut builder,
        } = cut;
        rustix::fs::ftruncate(&*self.plain()?, pos)
            .map_err(|e| LogError::io("truncate", &self.path)(e.into()))?;
        self.size = pos;
        self.next_offset = offset;
        self.max_timestamp = builder.max_timestamp();
        if pos == 0 {
            self.first_append_ms = None;
        }
        self.dirty = true;
        self.sync()?;
        let dir = self.dir().to_path_buf();
        if self.sealed {
            builder.seal(rel(self.base, offset));
            write_index_files(&dir, self.base, &builder.idx, true)?;
            self.persisted = (builder.idx.offsets.len(), builder.idx.times.len());
            self.sealed_index = OnceLock::from(Arc::new(std::mem::take(&mut builder.idx)));
        } else {
            write_index_files(&dir, self.base, &builder.idx, false)?;
            self.persisted = (builder.idx.offsets.len(), builder.idx.times.len());
            self.builder = builder;
        }
        Ok(())
    }

    /// The segment's index: the builder's for the active segment, the loaded (or
    /// rebuilt) one for a sealed segment.
    pub fn index(&self) -> Result<Arc<Indexes>, LogError> {
        if !self.sealed {
            return Ok(Arc::new(self.builder.idx.clone()));
        }
        if let Some(i) = self.sealed_index.get() {
            return Ok(i.clone());
        }
        let loaded = self.load_or_rebuild_index()?;
        Ok(self.sealed_index.get_or_init(|| Arc::new(loaded)).clone())
    }

    fn load_or_rebuild_index(&self) -> Result<Indexes, LogError> {
        let dir = self.dir().to_path_buf();
        let ip = index_path(&dir, self.base);
        let tp = time_index_path(&dir, self.base);
        let next_rel = (self.next_offset - self.base) as u64;
        let decoded = match (fs::read(&ip), fs::read(&tp)) {
            (Ok(o), Ok(t)) => Indexes::decode_checked(&o, &t, self.size, next_rel),
            (Err(e), _) | (_, Err(e)) => Err(format!("cannot read index: {e}")),
        };
        let decoded = decoded.and_then(|idx| {
            // Spot-check the last entry: it must start a batch at that offset.
            if let Some(e) = idx.offsets.last() {
                let h = self
                    .plain()
                    .and_then(|f| read_at(&f, &self.path, e.pos as u64, HEADER_LEN))
                    .map_err(|e| e.to_string())
                    .and_then(|b| batch::parse_header(&b).map_err(|e| e.to_string()))?;
                if h.base_offset != self.base + e.rel as i64 {
                    return Err(format!(
                        "last index entry points at offset {} not {}",
                        h.base_offset,
                        self.base + e.rel as i64
                    ));
                }
            }
            Ok(idx)
        });
        match decoded {
            Ok(idx) => Ok(idx),
            Err(reason) => {
                tracing::warn!(segment = %self.path.display(), %reason, "rebuilding damaged index");
                // A sealed segment's builder keeps the interval it was configured with.
                let interval = self.builder.interval();
                // Below the recovery point, where the data was trusted: gaps allowed.
                let scan =
                    Segment::scan(&*self.plain()?, None, &self.path, self.base, interval, true)?;
                // A sealed segment may end in a gap (its range runs to the next
                // segment's base): its batches end at or before its recorded end.
                if scan.valid_size != self.size || scan.next_offset > self.next_offset {
                    return Err(LogError::Corrupt {
                        path: self.path.clone(),
                        position: scan.valid_size,
                        reason: scan
                            .stop_reason
                            .unwrap_or_else(|| "segment shorter than recorded".into()),
                    });
                }
                let mut b = scan.builder;
                b.seal(rel(self.base, self.next_offset));
                write_index_files(&dir, self.base, &b.idx, true)?;
                Ok(b.idx)
            }
        }
    }

    /// Appends not-yet-persisted index entries of the active segment to its files.
    pub fn persist_index(&mut self) -> Result<(), LogError> {
        let dir = self.dir().to_path_buf();
        let (po, pt) = self.persisted;
        let idx = &self.builder.idx;
        if idx.offsets.len() > po {
            let p = index_path(&dir, self.base);
            append_file(
                &p,
                (po * crate::index::OFFSET_ENTRY) as u64,
                &Indexes::encode_offsets(&idx.offsets[po..]),
            )?;
        }
        if idx.times.len() > pt {
            let p = time_index_path(&dir, self.base);
            append_file(
                &p,
                (pt * crate::index::TIME_ENTRY) as u64,
                &Indexes::encode_times(&idx.times[pt..]),
            )?;
        }
        self.persisted = (idx.offsets.len(), idx.times.len());
        Ok(())
    }

    /// Cuts the padding of direct writes: the file ends at `size` again. Done when the
    /// segment is sealed and when the log closes, so that only the active segment of a
    /// log that did not close cleanly has padding.
    pub fn trim_padding(&mut self) -> Result<(), LogError> {
        let file = self.plain()?;
        let len = file
            .metadata()
            .map_err(LogError::io("stat", &self.path))?
            .len();
        if len > self.size {
            rustix::fs::ftruncate(&*file, self.size)
                .map_err(|e| LogError::io("truncate", &self.path)(e.into()))?;
            // The next fsync must carry the new length.
            self.dirty = true;
        }
        Ok(())
    }

    /// fsyncs the log file (and the aborted-transaction index, if it grew).
    pub fn sync(&mut self) -> Result<(), LogError> {
        if self.dirty {
            self.plain()?
                .sync_data()
                .map_err(LogError::io("fsync", &self.path))?;
            self.dirty = false;
        }
        if self.aborted_dirty {
            txn_index::sync(self.dir(), self.base)?;
            self.aborted_dirty = false;
        }
        Ok(())
    }

    /// Records an aborted transaction whose marker this (active) segment holds, in
    /// memory and at the end of its `.txnindex`. An entry it has already (a replay of
    /// batches after a snapshot) is not added twice.
    pub fn add_aborted(&mut self, entry: AbortedTxn) -> Result<(), LogError> {
        if self
            .aborted
            .iter()
            .any(|e| e.last_offset == entry.last_offset)
        {
            return Ok(());
        }
        let pos = self
            .aborted
            .partition_point(|e| e.last_offset < entry.last_offset);
        let dir = self.dir().to_path_buf();
        if pos == self.aborted.len() {
            txn_index::append(&dir, self.base, &entry)?;
            self.aborted.push(entry);
            self.aborted_dirty = true;
        } else {
            self.aborted.insert(pos, entry);
            txn_index::rewrite(&dir, self.base, &self.aborted)?;
        }
        Ok(())
    }

    /// Drops the aborted transactions whose marker is at or after `offset` (a
    /// truncation cut them), rewriting the `.txnindex`.
    pub fn truncate_aborted(&mut self, offset: Offset) -> Result<(), LogError> {
        let keep = self.aborted.partition_point(|e| e.last_offset < offset);
        if keep < self.aborted.len() {
            self.aborted.truncate(keep);
            txn_index::rewrite(self.dir(), self.base, &self.aborted)?;
            self.aborted_dirty = false;
        }
        Ok(())
    }

    /// Seals the segment: final time-index entry, index files written and fsynced, log
    /// fsynced. After this the segment never changes.
    pub fn seal(&mut self) -> Result<(), LogError> {
        self.builder.seal(rel(self.base, self.next_offset));
        // No more appends: the padding of direct writes goes.
        self.direct_writes = false;
        self.trim_padding()?;
        self.sync()?;
        let dir = self.dir().to_path_buf();
        write_index_files(&dir, self.base, &self.builder.idx, true)?;
        self.persisted = (self.builder.idx.offsets.len(), self.builder.idx.times.len());
        self.sealed = true;
        let idx = std::mem::take(&mut self.builder.idx);
        let _ = self.sealed_index.set(Arc::new(idx));
        Ok(())
    }
}

/// Writes both index files of a segment whole (truncating), optionally fsyncing them.
pub(crate) fn write_index_files(
    dir: &Path,
    base: Offset,
    idx: &Indexes,
    sync: bool,
) -> Result<(), LogError> {
    for (p, bytes) in [
        (index_path(dir, base), Indexes::encode_offsets(&idx.offsets)),
        (
            time_index_path(dir, base),
            Indexes::encode_times(&idx.times),
        ),
    ] {
        let f = File::create(&p).map_err(LogError::io("create", &p))?;
        f.write_all_at(&bytes, 0)
            .map_err(LogError::io("write", &p))?;
        if sync {
            f.sync_all().map_err(LogError::io("fsync", &p))?;
        }
    }
    Ok(())
}

/// fsyncs both index files of a segment (an active segment's are appended to without).
pub(crate) fn sync_index_files(dir: &Path, base: Offset) -> Result<(), LogError> {
    for p in [index_path(dir, base), time_index_path(dir, base)] {
        File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(LogError::io("fsync", &p))?;
    }
    Ok(())
}

/// Whether both index files of a segment hold exactly `idx` (a read of two small files
/// instead of a rewrite, which truncates and reallocates them).
pub(crate) fn index_files_hold(dir: &Path, base: Offset, idx: &Indexes) -> bool {
    match (
        fs::read(index_path(dir, base)),
        fs::read(time_index_path(dir, base)),
    ) {
        (Ok(offsets), Ok(times)) => index_bytes_hold(&offsets, &times, idx),
        _ => false,
    }
}

/// Whether index files holding these bytes hold exactly `idx`.
pub(crate) fn index_bytes_hold(offsets: &[u8], times: &[u8], idx: &Indexes) -> bool {
    offsets == Indexes::encode_offsets(&idx.offsets) && times == Indexes::encode_times(&idx.times)
}

fn append_file(path: &Path, at: u64, bytes: &[u8]) -> Result<(), LogError> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(LogError::io("open", path))?;
    f.set_len(at).map_err(LogError::io("truncate", path))?;
    f.write_all_at(bytes, at)
        .map_err(LogError::io("write", path))
}

/// Calls `f` with the header of every batch from byte `pos` up to `limit`, reading the
/// file in bounded chunks: headers only, so a large segment (or a large batch) is never
/// held in memory, and compressed batches are not decompressed. A header that does not
/// frame is corruption: the caller only walks data recovery has already accepted.
///
/// Reads go through `direct` (`O_DIRECT`) when given, as [`Segment::scan`]'s do.
pub(crate) fn walk_headers(
    file: &File,
    direct: Option<&File>,
    path: &Path,
    pos: u64,
    limit: u64,
    f: &mut dyn FnMut(&BatchHeader),
) -> Result<(), LogError> {
    walk_headers_and_markers(file, direct, path, pos, limit, &mut |h, _| f(h))
}

/// [`walk_headers`], with the kind of each transaction marker: a control batch (a few
/// dozen bytes; one over 64 KiB is not a marker Strata wrote, and reads as `None`) is
/// read whole and its record parsed.
pub(crate) fn walk_headers_and_markers(
    file: &File,
    direct: Option<&File>,
    path: &Path,
    mut pos: u64,
    limit: u64,
    f: &mut dyn FnMut(&BatchHeader, Option<MarkerKind>),
) -> Result<(), LogError> {
    const CHUNK: u64 = 256 << 10;
    let mut direct = direct;
    let mut buf = Bytes::new();
    let mut buf_start: u64 = 0;
    while pos < limit {
        let header_in_buf =
            pos >= buf_start && pos + HEADER_LEN as u64 <= buf_start + buf.len() as u64;
        if !header_in_buf {
            buf_start = pos;
            buf = direct_read::read_range(file, &mut direct, pos, CHUNK.min(limit - pos) as usize)
                .map_err(LogError::io("read", path))?;
        }
        let off = (pos - buf_start) as usize;
        let h = batch::parse_header(&buf[off..]).map_err(|e| LogError::Corrupt {
            path: path.to_path_buf(),
            position: pos,
            reason: e.to_string(),
        })?;
        let mut marker = None;
        if h.is_control() && h.total_size() <= 64 << 10 {
            let end = pos + h.total_size() as u64;
            if end > buf_start + buf.len() as u64 {
                buf_start = pos;
                buf = direct_read::read_range(
                    file,
                    &mut direct,
                    pos,
                    CHUNK.min(limit - pos) as usize,
                )
                .map_err(LogError::io("read", path))?;
            }
            let off = (pos - buf_start) as usize;
            // A control batch that does not read as a marker ends no transaction here
            // (Kafka skips control records it does not know the same way).
            match RecordBatch::parse(&buf[off..])
                .map_err(|e| e.to_string())
                .and_then(|(b, _)| control::marker_kind(&b).map_err(|e| e.to_string()))
            {
                Ok(kind) => marker = kind,
                Err(reason) => {
                    tracing::warn!(segment = %path.display(), position = pos, %reason, "control batch is not a transaction marker")
                }
            }
        }
        f(&h, marker);
        pos += h.total_size() as u64;
    }
    Ok(())
}

/// Reads exactly `len` bytes at `pos` (fewer only at end of file).
///
/// The buffer is filled by `pread` straight into the vector's spare capacity (rustix's
/// safe wrapper), so a 1 MiB read does not first zero 1 MiB that the kernel then
/// overwrites: that memset was 16% of a sequential read's CPU.
pub(crate) fn read_at(file: &File, path: &Path, pos: u64, len: usize) -> Result<Vec<u8>, LogError> {
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    read_into(file, path, pos, len, &mut buf)?;
    Ok(buf)
}

/// Appends up to `len` bytes read at `pos` to `buf` (fewer only at end of file), the
/// same way as [`read_at`]: into the spare capacity, without zeroing it first. Returns
/// how many.
pub(crate) fn read_into(
    file: &File,
    path: &Path,
    pos: u64,
    len: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, LogError> {
    let base = buf.len();
    buf.reserve_exact(len);
    while buf.len() - base < len {
        let at = pos + (buf.len() - base) as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(buf), at) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(LogError::io("read", path)(std::io::Error::from(e))),
        }
    }
    // The spare capacity may have been larger than asked for.
    buf.truncate(base + len);
    Ok(buf.len() - base)
}
