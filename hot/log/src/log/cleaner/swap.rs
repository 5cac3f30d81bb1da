//! Swapping a cleaned segment in, crash-safely (Kafka's `.cleaned` / `.swap` files):
//!
//! 1. The new segment is written beside the old ones as `{base}.log.cleaned` with
//!    `{base}.index.cleaned`, `{base}.timeindex.cleaned` and, when it keeps ABORT
//!    markers with their data's removal pending, `{base}.txnindex.cleaned`, and fsynced.
//! 2. `{base}.txnindex.cleaned` (if any) is renamed to `{base}.txnindex.pending`, then
//!    `{base}.log.cleaned` to `{base}.log.swap` and the directory fsynced: the commit
//!    point.
//! 3. The old segments' files are deleted, the index files renamed into place (the
//!    pending aborted-transaction index too), then `{base}.log.swap` renamed to
//!    `{base}.log`, and the directory fsynced.
//!
//! Recovery ([`recover_swaps`], before the log's segments are listed) deletes every
//! `.cleaned` file (a pass that had not committed: the old segments are all there) and
//! every `.txnindex.pending` without a `.log.swap` beside it, and completes every
//! `.swap`: the segments it replaces are those based in
//! `[base, end of the swap file's last batch)`; what is left of them is deleted, the
//! pending aborted-transaction index and the swap file renamed into place (its other
//! indexes are rebuilt by the scan that follows). So a crash at any point leaves the old
//! segments or the new one, never both, never neither, each with its own `.txnindex`.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use strata_proto::Offset;

use crate::checkpoint;
use crate::error::LogError;
use crate::files::SegmentFile;
use crate::index::{IndexBuilder, Indexes};
use crate::log::delete_segment_files;
use crate::segment::{self, Segment};
use crate::txn_index::{self, AbortedTxn};

/// The cleaner checkpoint's file: the offset the log is cleaned up to.
pub(crate) const CLEANER_CHECKPOINT: &str = "cleaner-offset-checkpoint";
const CLEANED: &str = ".cleaned";
const SWAP: &str = ".swap";
const PENDING: &str = ".pending";

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// The files of a cleaned segment not yet swapped in.
#[derive(Clone, Debug, Default)]
pub(crate) struct CleanedFiles {
    pub base: Offset,
    pub log: PathBuf,
    pub index: PathBuf,
    pub time_index: PathBuf,
    pub size: u64,
    pub next_offset: Offset,
    pub max_timestamp: i64,
    /// The new segment's aborted transactions (`.txnindex.cleaned` when not empty).
    pub aborted: Vec<AbortedTxn>,
}

/// A cleaned segment's log file being written (the sink of a
/// [`super::filter::SegmentBuilder`]).
pub(crate) struct CleanedWriter {
    dir: PathBuf,
    base: Offset,
    path: PathBuf,
    out: BufWriter<File>,
}

impl std::fmt::Debug for CleanedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanedWriter")
            .field("path", &self.path)
            .finish()
    }
}

impl Write for CleanedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl CleanedWriter {
    pub fn create(dir: &Path, base: Offset) -> Result<CleanedWriter, LogError> {
        let path = with_suffix(&segment::log_path(dir, base), CLEANED);
        let file = File::create(&path).map_err(LogError::io("create", &path))?;
        Ok(CleanedWriter {
            dir: dir.to_path_buf(),
            base,
            path,
            out: BufWriter::with_capacity(1 << 20, file),
        })
    }

    /// Deletes whatever cleaned files of the segment based at `base` exist.
    pub fn remove_all(dir: &Path, base: Offset) {
        for p in [
            segment::log_path(dir, base),
            segment::index_path(dir, base),
            segment::time_index_path(dir, base),
            txn_index::path(dir, base),
        ] {
            let _ = fs::remove_file(with_suffix(&p, CLEANED));
        }
    }

    /// Writes the index files and fsyncs all three; the log holds `size` bytes, its
    /// batches end at `next_offset`.
    pub fn finish(
        self,
        idx: &Indexes,
        size: u64,
        next_offset: Offset,
        max_timestamp: i64,
        aborted: Vec<AbortedTxn>,
    ) -> Result<CleanedFiles, LogError> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| LogError::io("write", &self.path)(e.into_error()))?;
        file.sync_all().map_err(LogError::io("fsync", &self.path))?;
        let index = with_suffix(&segment::index_path(&self.dir, self.base), CLEANED);
        let time_index = with_suffix(&segment::time_index_path(&self.dir, self.base), CLEANED);
        let txns = with_suffix(&txn_index::path(&self.dir, self.base), CLEANED);
        let mut files = vec![
            (&index, Indexes::encode_offsets(&idx.offsets)),
            (&time_index, Indexes::encode_times(&idx.times)),
        ];
        if !aborted.is_empty() {
            files.push((&txns, txn_index::encode(&aborted)));
        }
        for (p, bytes) in files {
            let f = File::create(p).map_err(LogError::io("create", p))?;
            let mut w = BufWriter::new(&f);
            w.write_all(&bytes).map_err(LogError::io("write", p))?;
            w.flush().map_err(LogError::io("write", p))?;
            drop(w);
            f.sync_all().map_err(LogError::io("fsync", p))?;
        }
        Ok(CleanedFiles {
            base: self.base,
            log: self.path,
            index,
            time_index,
            size,
            next_offset,
            max_timestamp,
            aborted,
        })
    }
}

/// Deletes a cleaned segment that will not be swapped in.
pub(crate) fn discard(files: &CleanedFiles) {
    for p in [&files.log, &files.index, &files.time_index] {
        if p.as_os_str().is_empty() {
            continue;
        }
        let _ = fs::remove_file(p);
    }
    if let Some(dir) = files.log.parent() {
        let _ = fs::remove_file(with_suffix(&txn_index::path(dir, files.base), CLEANED));
    }
}

/// Swaps `files` in for the segments based at `bases` (the caller holds the log's write
/// lock and has checked they are the ones cleaned), returning the new segment.
pub(crate) fn commit(
    dir: &Path,
    bases: &[Offset],
    files: CleanedFiles,
    index: Indexes,
    interval: u64,
) -> Result<Segment, LogError> {
    let base = files.base;
    let final_log = segment::log_path(dir, base);
    let swap = with_suffix(&final_log, SWAP);
    let txns = txn_index::path(dir, base);
    let pending = with_suffix(&txns, PENDING);
    if !files.aborted.is_empty() {
        let cleaned = with_suffix(&txns, CLEANED);
        fs::rename(&cleaned, &pending).map_err(LogError::io("rename", &cleaned))?;
    }
    fs::rename(&files.log, &swap).map_err(LogError::io("rename", &files.log))?;
    checkpoint::sync_directory(dir)?;
    // Committed: from here recovery completes the swap.
    for &b in bases {
        delete_segment_files(dir, b);
    }
    fs::rename(&files.index, segment::index_path(dir, base))
        .map_err(LogError::io("rename", &files.index))?;
    fs::rename(&files.time_index, segment::time_index_path(dir, base))
        .map_err(LogError::io("rename", &files.time_index))?;
    if !files.aborted.is_empty() {
        fs::rename(&pending, &txns).map_err(LogError::io("rename", &pending))?;
    }
    fs::rename(&swap, &final_log).map_err(LogError::io("rename", &swap))?;
    checkpoint::sync_directory(dir)?;
    Ok(Segment {
        base,
        next_offset: files.next_offset,
        size: files.size,
        max_timestamp: files.max_timestamp,
        file: Arc::new(SegmentFile::new(final_log.clone())),
        direct_writes: false,
        path: final_log,
        sealed: true,
        builder: IndexBuilder::new(interval),
        persisted: (index.offsets.len(), index.times.len()),
        sealed_index: OnceLock::from(Arc::new(index)),
        first_append_ms: None,
        dirty: false,
        aborted: files.aborted,
        aborted_dirty: false,
    })
}

/// Finishes or rolls back what a cleaner pass left in `dir` (see the module docs).
/// Returns the bases of the swaps it completed.
pub(crate) fn recover_swaps(dir: &Path) -> Result<Vec<Offset>, LogError> {
    let mut swaps = Vec::new();
    let mut bases = Vec::new();
    let mut pending = Vec::new();
    for entry in fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(CLEANED) {
            let _ = fs::remove_file(entry.path());
        } else if let Some(stem) = name.strip_suffix(".log.swap")
            && let Ok(base) = stem.parse::<Offset>()
        {
            swaps.push(base);
        } else if let Some(stem) = name.strip_suffix(".txnindex.pending")
            && let Ok(base) = stem.parse::<Offset>()
        {
            pending.push(base);
        } else if let Some(stem) = name.strip_suffix(".log")
            && let Ok(base) = stem.parse::<Offset>()
        {
            bases.push(base);
        }
    }
    swaps.sort_unstable();
    for &base in &swaps {
        let swap = with_suffix(&segment::log_path(dir, base), SWAP);
        let end = last_offset_of(&swap)?;
        for &b in bases.iter().filter(|&&b| b >= base && b < end) {
            delete_segment_files(dir, b);
        }
        // Its indexes may be the old segment's or the new one's: rebuilt either way.
        let _ = fs::remove_file(segment::index_path(dir, base));
        let _ = fs::remove_file(segment::time_index_path(dir, base));
        // Its aborted-transaction index is the pending one (the old ones went with
        // their segments above), or none when it kept no ABORT marker.
        let txns = txn_index::path(dir, base);
        let p = with_suffix(&txns, PENDING);
        if p.exists() {
            fs::rename(&p, &txns).map_err(LogError::io("rename", &p))?;
        }
        fs::rename(&swap, segment::log_path(dir, base)).map_err(LogError::io("rename", &swap))?;
        tracing::info!(dir = %dir.display(), base, end, "completed a cleaned segment's swap");
    }
    // A pending aborted-transaction index without its swap: the pass had not committed.
    for base in pending {
        if swaps.binary_search(&base).is_err() {
            let _ = fs::remove_file(with_suffix(&txn_index::path(dir, base), PENDING));
        }
    }
    if !swaps.is_empty() {
        checkpoint::sync_directory(dir)?;
    }
    Ok(swaps)
}

/// The offset after the last batch of a segment file (its base if it holds none).
fn last_offset_of(path: &Path) -> Result<Offset, LogError> {
    let file = File::open(path).map_err(LogError::io("open", path))?;
    let len = file.metadata().map_err(LogError::io("stat", path))?.len();
    let mut end = 0;
    segment::walk_headers(&file, None, path, 0, len, &mut |h| end = h.next_offset())?;
    Ok(end)
}
