//! `O_DIRECT` reads of the segment bytes that the tail cache does not hold (direct mode).
//!
//! # Why
//!
//! Direct writes leave nothing in the page cache, so a consumer catching up on older
//! data read it through the page cache cold: every 4 KiB page allocated on first touch
//! and filled by the device, then thrown away by reclaim later. On the 2-core VM this
//! was measured on, a buffered read of a direct-written file cost 1.7 to 2 CPU-s per GB
//! (the page allocation, mostly) and ran at 550 MB/s; `O_DIRECT` reads of 1 MiB cost 0.1
//! CPU-s per GB and ran at about 1 GB/s. The log keeps no page cache of its own beyond
//! the tail buffer: a consumer re-reading the same range reads the device again, as
//! Redpanda's does without its own batch cache.
//!
//! # How
//!
//! A read of bytes `[pos, end)` reads the aligned superset `[floor_4k(pos),
//! ceil_4k(end))` into a buffer whose first byte is 4 KiB-aligned in memory
//! ([`AlignedBuf`]), and the caller returns the exact bytes as a slice of that buffer
//! (`Bytes`, no copy). The fd is the segment's `O_DIRECT` fd from the descriptor cache
//! (`files`): the active segment's write fd (opened read-write for that), or one opened
//! read-only on a miss. So a segment has at most two fds: its ordinary one and one
//! `O_DIRECT` one.
//!
//! Every byte below a segment's size is in the file before the append that wrote it
//! returns, so whatever a read asks for (never past the size it saw) is on the device.
//! The block that holds the logical end may be rewritten by the next append while a
//! read reads it; the bytes before the end are the same in both versions. Past the end
//! of a sealed segment's file (cut to its size) a direct read comes back short, at an
//! unaligned length: the rest, if any, is read through the ordinary fd (which finds
//! nothing there).
//!
//! A filesystem that refuses `O_DIRECT` reads (EINVAL at open or at a read) makes the
//! log read through the page cache from then on, with one warning; the read that found
//! out is served through the page cache too.

use std::fs::File;
use std::io;
use std::path::Path;

use bytes::Bytes;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

#[cfg(test)]
use crate::tail::refuse;
use crate::tail::{BLOCK, ceil_block, floor_block};

pub(crate) use crate::tail::AlignedBuf;

/// Opens a segment file read-only with `O_DIRECT`. `Ok(None)`: the filesystem refuses
/// `O_DIRECT` (EINVAL, or EOPNOTSUPP from some FUSE filesystems).
pub(crate) fn open(path: &Path) -> io::Result<Option<File>> {
    #[cfg(test)]
    if matches!(
        refuse::get(),
        Some(refuse::Refusal::Open | refuse::Refusal::ReadOpen)
    ) {
        return Ok(None);
    }
    match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::INVAL | Errno::OPNOTSUPP) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether an error from a direct read means "this file cannot be read with
/// `O_DIRECT`" (alignment the device does not accept, or no direct IO at all).
pub(crate) fn is_refusal(e: Errno) -> bool {
    e == Errno::INVAL
}

/// Reads whole blocks from `pos` through `direct` (an `O_DIRECT` fd) into `buf`: `pos`,
/// `buf`'s address and its length are multiples of [`BLOCK`]. Returns how many bytes
/// it read: all of `buf` unless the file ends first (then possibly an unaligned count).
pub(crate) fn read(direct: &File, buf: &mut [u8], pos: u64) -> Result<usize, Errno> {
    debug_assert!(
        pos.is_multiple_of(BLOCK)
            && (buf.len() as u64).is_multiple_of(BLOCK)
            && (buf.as_ptr().addr() as u64).is_multiple_of(BLOCK),
        "unaligned direct read of {} bytes at {pos}",
        buf.len()
    );
    #[cfg(test)]
    if refuse::get() == Some(refuse::Refusal::Read) {
        return Err(Errno::INVAL);
    }
    let mut n = 0;
    // A short read happens at the end of the file, which need not be block-aligned:
    // stop there rather than ask for an unaligned position.
    while n < buf.len() && (n as u64).is_multiple_of(BLOCK) {
        match rustix::io::pread(direct, &mut buf[n..], pos + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    #[cfg(test)]
    stats::add(n as u64);
    Ok(n)
}

/// Fills `buf` with the bytes at `pos` through `file` (an ordinary fd, any alignment).
/// Returns how many: all of `buf` unless the file ends first.
pub(crate) fn read_buffered(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match rustix::io::pread(file, &mut buf[n..], pos + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// Reads the file's bytes `[from, from + want)` into `buf` (4 KiB-aligned in memory,
/// at least `ceil_4k(want)` long; `from` a multiple of [`BLOCK`]): whole blocks with
/// `O_DIRECT` through `*direct` when given, and whatever that did not get (past a short
/// read at the end of the file) through `file`. If the direct read is refused, sets
/// `*direct` to `None` and reads through `file`: the caller sees the refusal there.
/// Returns how many bytes it read from `from`: `want` unless the file ends first (it may
/// read past `want`, up to the block boundary).
pub(crate) fn fill(
    file: &File,
    direct: &mut Option<&File>,
    buf: &mut [u8],
    from: u64,
    want: usize,
) -> io::Result<usize> {
    let mut got = 0;
    if let Some(d) = *direct {
        let blocks = ceil_block(want as u64) as usize;
        match read(d, &mut buf[..blocks], from) {
            Ok(n) => got = n,
            Err(e) if is_refusal(e) => *direct = None,
            Err(e) => return Err(e.into()),
        }
    }
    if got < want {
        got += read_buffered(file, &mut buf[got..want], from + got as u64)?;
    }
    Ok(got)
}

/// The file's bytes `[pos, pos + len)` (fewer only at the end of the file), read as
/// [`fill`] does, as a slice of the aligned buffer they were read into (no copy).
pub(crate) fn read_range(
    file: &File,
    direct: &mut Option<&File>,
    pos: u64,
    len: usize,
) -> io::Result<Bytes> {
    let base = floor_block(pos);
    let skip = (pos - base) as usize;
    let mut buf = AlignedBuf::for_read(ceil_block(pos + len as u64 - base) as usize);
    let got = fill(file, direct, buf.bytes_mut(), base, skip + len)?;
    Ok(buf.into_bytes(skip, got.clamp(skip, skip + len)))
}

/// Test-only: how many bytes this thread read with `O_DIRECT`, so tests can tell which
/// path served a read.
#[cfg(test)]
pub(crate) mod stats {
    use std::cell::Cell;

    thread_local! {
        static DIRECT_BYTES: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn add(n: u64) {
        DIRECT_BYTES.with(|c| c.set(c.get() + n));
    }

    /// Bytes read with `O_DIRECT` by this thread so far.
    pub(crate) fn direct_bytes() -> u64 {
        DIRECT_BYTES.with(|c| c.get())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::FileExt;

    use super::*;

    /// Aligned reads of every block-aligned range, including ranges past the end of a
    /// file whose length is not a multiple of a block, return exactly the file's bytes.
    #[test]
    fn aligned_reads_return_the_files_bytes_and_stop_at_its_end() {
        // The system temp dir: ext4 here, or tmpfs, which takes O_DIRECT since 6.6.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..5 * BLOCK as usize + 123)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let direct = open(&path).unwrap().expect("the target dir takes O_DIRECT");
        let file = File::open(&path).unwrap();
        let len = data.len() as u64;
        for from in (0..=6).map(|b| b * BLOCK) {
            for blocks in 1..=7u64 {
                let mut buf = AlignedBuf::new((blocks * BLOCK) as usize);
                let n = read(&direct, buf.bytes_mut(), from).unwrap();
                let want = (blocks * BLOCK).min(len.saturating_sub(from)) as usize;
                assert_eq!(n, want, "{blocks} blocks at {from}");
                let at = (from as usize).min(data.len());
                assert!(buf.bytes()[..n] == data[at..at + n]);
                // The buffered reader agrees, at any alignment.
                let mut plain = vec![0u8; (blocks * BLOCK) as usize];
                assert_eq!(read_buffered(&file, &mut plain, from).unwrap(), n);
                assert_eq!(plain[..n], buf.bytes()[..n]);
            }
        }
        // An odd position through the buffered reader.
        let mut plain = vec![0u8; 10];
        assert_eq!(read_buffered(&file, &mut plain, 4095).unwrap(), 10);
        let mut expect = [0u8; 10];
        file.read_exact_at(&mut expect, 4095).unwrap();
        assert_eq!(plain, expect);
    }

    #[test]
    fn aligned_buffers_slice_without_a_copy() {
        let mut buf = AlignedBuf::new(3 * BLOCK as usize);
        assert_eq!(buf.bytes().as_ptr().addr() % BLOCK as usize, 0);
        buf.bytes_mut()[100..110].copy_from_slice(b"0123456789");
        let at = buf.bytes().as_ptr().addr();
        let b = buf.into_bytes(100, 110);
        assert_eq!(&b[..], b"0123456789");
        assert_eq!(b.as_ptr().addr(), at + 100, "a slice of the same memory");
    }
}
