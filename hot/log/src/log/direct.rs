//! How the active segment is written and read with `O_DIRECT`: opening it for direct
//! writes, the descriptor for direct reads, the fall-back to the page cache when the
//! filesystem refuses, and the write of appended bytes.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Inner;
use crate::config::IoMode;
use crate::error::LogError;
use crate::segment::Segment;
use crate::tail;

impl Inner {
    /// Opens the active segment for direct writes, if the config asks for them and the
    /// filesystem has not refused them.
    pub(super) fn open_direct(&mut self, dir: &Path) -> Result<(), LogError> {
        if self.config.io_mode != IoMode::Direct || self.direct_refused {
            // Buffered from this segment on: the tail buffer has no more use.
            self.tail.release();
            return Ok(());
        }
        let active = self.active_mut();
        if active.direct_writes {
            return Ok(());
        }
        // The descriptor is opened read-write now (so that a refusal shows here), and
        // serves the segment's direct reads too, as long as the cache keeps it.
        match active.file.direct(true) {
            Ok(Some(_)) => active.direct_writes = true,
            Ok(None) => self.fall_back(dir, "open with O_DIRECT refused"),
            Err(e) => return Err(LogError::io("open O_DIRECT", &active.path)(e)),
        }
        Ok(())
    }

    /// The fd to read `seg` with `O_DIRECT` through, if this log reads that way: in
    /// direct mode, unless the filesystem refused direct IO, and for the active segment
    /// only while it is written with `O_DIRECT` (otherwise its newest bytes are in the
    /// page cache, which a buffered read finds and a direct read would first write
    /// back). From the descriptor cache, opened read-only on a miss.
    pub(super) fn direct_reader(&self, dir: &Path, seg: &Segment) -> Option<Arc<std::fs::File>> {
        if self.config.io_mode != IoMode::Direct
            || self.direct_refused
            || self.direct_reads_refused.load(Ordering::Relaxed)
            || (!seg.sealed && !seg.direct_writes)
        {
            return None;
        }
        match seg.file.direct(false) {
            Ok(Some(f)) => Some(f),
            Ok(None) => {
                self.refuse_direct_reads(dir, "open with O_DIRECT refused");
                None
            }
            Err(e) => {
                // Out of fds, say: this read goes through the page cache.
                tracing::debug!(segment = %seg.path.display(), error = %e, "cannot open for direct reads");
                None
            }
        }
    }

    /// Gives up direct reads for this log (the filesystem refuses them), once.
    pub(super) fn refuse_direct_reads(&self, dir: &Path, why: &str) {
        if !self.direct_reads_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(dir = %dir.display(), why, "the filesystem refuses direct reads: this log reads through the page cache");
        }
    }

    /// Gives up direct IO for this log (the filesystem refuses it), once.
    fn fall_back(&mut self, dir: &Path, why: &str) {
        self.direct_refused = true;
        self.active_mut().direct_writes = false;
        self.tail.release();
        tracing::warn!(dir = %dir.display(), why, "the filesystem refuses direct IO: this log writes through the page cache");
    }

    /// Writes `bytes` after the active segment's last byte (the caller then counts them
    /// in its size). On error nothing is left after that byte.
    pub(super) fn write_active(&mut self, dir: &Path, bytes: &[u8]) -> Result<(), LogError> {
        let Inner {
            segments,
            tail,
            direct_written,
            ..
        } = self;
        let active = segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment");
        if active.direct_writes {
            let direct = match active.file.direct(true) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    return Err(LogError::io("open O_DIRECT", &active.path)(
                        std::io::Error::other("O_DIRECT refused on reopen"),
                    ));
                }
                Err(e) => return Err(LogError::io("open O_DIRECT", &active.path)(e)),
            };
            let file = &active.file;
            match tail.append(active.base, active.size, bytes, &direct, &|| file.plain()) {
                Ok(()) => {
                    *direct_written = true;
                    return Ok(());
                }
                // The first direct write is where some filesystems say no (alignment
                // they do not take, or no direct IO behind an open that worked).
                Err(e) if !*direct_written && tail::is_refusal(&e) => {
                    let _ = active.plain().map(|f| f.set_len(active.size));
                    self.fall_back(dir, "direct write refused");
                }
                Err(e) => {
                    // Cut a partial append and the padding: the committed size stays
                    // the end of the file.
                    let _ = active.plain().map(|f| f.set_len(active.size));
                    return Err(LogError::io("write", &active.path)(e));
                }
            }
        }
        let active = self.active_mut();
        let file = active.plain()?;
        if let Err(e) = file.write_all_at(bytes, active.size) {
            // Leave no partial bytes behind the committed size.
            let _ = file.set_len(active.size);
            return Err(LogError::io("write", &active.path)(e));
        }
        Ok(())
    }
}
