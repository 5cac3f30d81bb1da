//! Direct-IO writes of the active segment, through an aligned in-memory tail buffer that
//! doubles as a cache for reads of the newest bytes.
//!
//! # Why
//!
//! Writing through the page cache costs the kernel a copy into freshly allocated pages
//! (`copy_folio_from_iter_atomic`) plus ext4's delayed allocation: measured on a 2-core
//! VM, 0.45 to 2.3 CPU-s per GB, against 0.1 for `O_DIRECT` writes of 1 MiB. Redpanda
//! avoids the page cache for the same reason.
//!
//! # How
//!
//! `O_DIRECT` wants the file position, the length and the memory address of a write
//! aligned to the device's logical block size; 4 KiB ([`BLOCK`]) covers every common
//! device. Batches are not block-sized, so the newest bytes of the active segment live
//! in a *window*: a buffer whose first byte is 4 KiB-aligned in memory, holding the
//! segment's bytes from a 4 KiB-aligned file position `start` up to the segment's
//! logical end. An append copies the batch bytes into the window after the end and
//! writes the blocks `[floor_4k(old end), ceil_4k(new end))` with one `pwrite`, the last
//! block zero-padded. So the partial last block written by one append is written again
//! by the next: up to 4 KiB of extra device writes per append, the price of `O_DIRECT`
//! with byte-sized records. The file is therefore up to 4095 bytes longer than the
//! segment (zeros) until the segment is sealed or the log closed, which cut it to the
//! logical size; recovery treats such a tail as padding (`Segment::scan`).
//!
//! Memory is bounded by two windows of `tail_cache_bytes / 2` each. When an append does
//! not fit in the current window, the window's partial last block is copied to the
//! start of the other window, which becomes the current one; the old one stays behind
//! as a read-only cache of the bytes before that, until the next switch. An append
//! larger than a window is written in window-sized pieces (one `pwrite` each). Windows
//! are allocated on the first append that needs them and reused afterwards, also
//! across rolls (the window of the sealed segment's tail stays readable until the new
//! segment needs the memory).
//!
//! Reads of the suffix the windows hold are copied from memory: no syscall and no
//! page-cache page, and that suffix is what tail consumers fetch. Older bytes are read
//! with `O_DIRECT` too (`direct_read`), falling back to `pread` on the segment's
//! ordinary fd; on Linux an `O_DIRECT` write invalidates the cached pages of the range
//! it writes, so buffered reads see the new bytes as well.
//!
//! Every byte below the segment's committed size is in the file before the append that
//! wrote it returns (a `pwrite` with `O_DIRECT` returns once the device has the data,
//! in its volatile cache at least), so a process killed right after loses nothing it
//! acknowledged; the device cache still needs the flush policy's fsync.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use strata_proto::Offset;

/// The alignment of direct writes: file positions, lengths and buffer addresses.
pub(crate) const BLOCK: u64 = 4096;

pub(crate) fn floor_block(x: u64) -> u64 {
    x & !(BLOCK - 1)
}

pub(crate) fn ceil_block(x: u64) -> u64 {
    floor_block(x + (BLOCK - 1))
}

/// Opens a segment file for `O_DIRECT` writes, and reads: the same fd (cached by
/// `files`) serves the active segment's direct reads.
/// `Ok(None)`: the filesystem refuses `O_DIRECT` (EINVAL, or EOPNOTSUPP from some FUSE
/// filesystems).
pub(crate) fn open_direct(path: &Path) -> io::Result<Option<File>> {
    #[cfg(test)]
    if refuse::get() == Some(refuse::Refusal::Open) {
        return Ok(None);
    }
    match rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::INVAL | Errno::OPNOTSUPP) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether an error from a direct write means "this file cannot take `O_DIRECT`
/// writes" (alignment the device does not accept, or no direct IO at all).
pub(crate) fn is_refusal(e: &io::Error) -> bool {
    Errno::from_io_error(e) == Some(Errno::INVAL)
}

/// A test-only switch that makes this thread's direct IO look refused, so the fallback
/// to buffered writes can be tested on filesystems that accept `O_DIRECT` (tmpfs does
/// since Linux 6.6, so it cannot stand in for one that refuses).
#[cfg(test)]
pub(crate) mod refuse {
    use std::cell::Cell;

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub(crate) enum Refusal {
        /// `open(O_DIRECT)` fails with EINVAL, for writes and reads.
        Open,
        /// Every direct `pwrite` fails with EINVAL.
        Write,
        /// Opening a segment with `O_DIRECT` for reads only (a sealed segment's first
        /// direct read) fails with EINVAL; direct writes work.
        ReadOpen,
        /// Every direct `pread` fails with EINVAL; direct writes work.
        Read,
    }

    thread_local! {
        static REFUSE: Cell<Option<Refusal>> = const { Cell::new(None) };
    }

    pub(crate) fn set(r: Option<Refusal>) {
        REFUSE.with(|c| c.set(r));
    }

    pub(crate) fn get() -> Option<Refusal> {
        REFUSE.with(|c| c.get())
    }
}

/// `len` zeroed bytes whose first byte is 4 KiB-aligned in memory, as `O_DIRECT` wants
/// of the buffers it reads into and writes from, without `unsafe`: a `Vec` of
/// `len + BLOCK` bytes always has a 4 KiB boundary with `len` bytes after it, whatever
/// address the allocator returns.
pub(crate) struct AlignedBuf {
    mem: Vec<u8>,
    /// Where the aligned part of `mem` starts.
    off: usize,
    len: usize,
    /// The pool and size class `mem` goes back to, if it came from one.
    class: Option<(&'static read_pool::Shared, usize)>,
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        // Zeroed memory comes from calloc (mmap for large sizes): pages are only
        // faulted in as they are used.
        let mem = vec![0u8; len + BLOCK as usize];
        AlignedBuf::with(mem, len, None)
    }

    /// A buffer for a read whose bytes end up in a response: from the broker-wide read
    /// pool when one of its size fits, and back to it when the last `Bytes` of it is
    /// dropped (see [`read_pool`]). Its bytes are zeros or an earlier read's, never
    /// uninitialised memory; readers return only what they filled.
    pub fn for_read(len: usize) -> AlignedBuf {
        AlignedBuf::from_pool(len, &read_pool::READS)
    }

    fn from_pool(len: usize, pool: &'static read_pool::Shared) -> AlignedBuf {
        match read_pool::class_of(len) {
            Some(class) => AlignedBuf::with(read_pool::take(pool, class), len, Some((pool, class))),
            None => AlignedBuf::new(len),
        }
    }

    fn with(
        mem: Vec<u8>,
        len: usize,
        class: Option<(&'static read_pool::Shared, usize)>,
    ) -> AlignedBuf {
        // The first 4 KiB boundary in the allocation. `addr()` is the address without
        // its provenance: a safe, exact computation (`align_offset` is allowed to give up).
        let block = BLOCK as usize;
        let off = (block - mem.as_ptr().addr() % block) % block;
        debug_assert!(off + len <= mem.len());
        AlignedBuf {
            mem,
            off,
            len,
            class,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.mem[self.off..self.off + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let (off, len) = (self.off, self.len);
        &mut self.mem[off..off + len]
    }

    /// The aligned bytes `[from, to)` as `Bytes`, without a copy (the allocation lives
    /// as long as the `Bytes` and its clones, then goes back to the pool it came from).
    pub fn into_bytes(self, from: usize, to: usize) -> Bytes {
        assert!(from <= to && to <= self.len);
        let range = self.off + from..self.off + to;
        match self.class {
            Some((pool, class)) => Bytes::from_owner(read_pool::Pooled {
                mem: self.mem,
                pool,
                class,
            })
            .slice(range),
            None => Bytes::from(self.mem).slice(range),
        }
    }

    /// Bytes allocated.
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.mem.len()
    }
}

/// The memory the tail windows of every log in the process take together: one budget
/// for the broker, not a fixed amount per partition (10,000 partitions at the
/// per-log 4 MiB default would be 40 GB). The read cache ([`crate::read_cache`]) holds
/// its chunks within the same budget: recently appended and recently read bytes share
/// it, and appends come first (a window that does not fit makes the read cache drop its
/// least recently used chunks before the window is made smaller).
///
/// A window asks for the log's configured size; while the budget is short it gets
/// half, a quarter, and so on down to [`MIN_WINDOW`], which is always granted (so
/// every log can append: the budget may be passed by at most two minimum windows per
/// log that appends while it is short). A smaller window only means more, smaller
/// direct writes for a large append, and fewer newest bytes served from memory. The
/// memory goes back to the budget when the window is dropped: when the log closes,
/// changes mode or size, or has taken no append for a while
/// ([`crate::Log::release_idle_tail`]).
pub mod budget {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{BLOCK, floor_block};

    /// The smallest window: granted whatever the budget says.
    pub const MIN_WINDOW: usize = 16 * 1024;

    static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
    static USED: AtomicUsize = AtomicUsize::new(0);
    /// Bytes the read cache holds (it keeps this up to date).
    static READ: AtomicUsize = AtomicUsize::new(0);

    /// Sets the budget in bytes (until called, there is none).
    pub fn set_limit(bytes: usize) {
        LIMIT.store(bytes, Ordering::Relaxed);
    }

    pub fn limit() -> usize {
        LIMIT.load(Ordering::Relaxed)
    }

    /// Bytes the windows of every log hold now.
    pub fn used() -> usize {
        USED.load(Ordering::Relaxed)
    }

    /// What the read cache may hold now: the budget less the windows.
    pub(crate) fn room_for_reads() -> usize {
        limit().saturating_sub(used())
    }

    /// The read cache's bytes, as it changes them.
    pub(crate) fn set_read(bytes: usize) {
        READ.store(bytes, Ordering::Relaxed);
    }

    /// Bytes taken from the budget, given back on drop.
    #[derive(Debug)]
    pub(crate) struct Grant(usize);

    impl Grant {
        pub fn bytes(&self) -> usize {
            self.0
        }
    }

    impl Drop for Grant {
        fn drop(&mut self) {
            USED.fetch_sub(self.0, Ordering::Relaxed);
        }
    }

    /// Takes `want` bytes (a multiple of the block size), or the largest halving of it
    /// that fits, at least [`MIN_WINDOW`] (or `want` if smaller).
    pub(crate) fn grant(want: usize) -> Grant {
        let floor = MIN_WINDOW.min(want);
        let mut size = want;
        loop {
            let used = USED.load(Ordering::Relaxed);
            let fits = used.saturating_add(size) <= limit();
            // Room the read cache holds goes back first: reads yield to appends.
            let over = (used + READ.load(Ordering::Relaxed))
                .saturating_add(size)
                .saturating_sub(limit());
            if fits && over > 0 {
                crate::read_cache::shrink_to(limit().saturating_sub(used.saturating_add(size)));
            }
            if (fits || size <= floor)
                && USED
                    .compare_exchange(used, used + size, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return Grant(size);
            }
            if !fits && size > floor {
                size = (floor_block(size as u64 / 2) as usize)
                    .max(floor)
                    .max(BLOCK as usize);
            }
        }
    }
}

/// One buffer: `cap` bytes whose first byte is 4 KiB-aligned in memory, holding the
/// bytes `[start, start + len)` of segment `seg`.
struct Window {
    mem: AlignedBuf,
    cap: usize,
    /// The memory's share of the process-wide budget.
    _grant: budget::Grant,
    /// The segment (base offset) whose bytes the window holds; `None`: nothing valid.
    seg: Option<Offset>,
    /// File position of the window's first byte, a multiple of [`BLOCK`].
    start: u64,
    len: usize,
}

impl Window {
    /// A window of `want` bytes, or less if the budget is short (see [`budget`]).
    fn new(want: usize) -> Window {
        let grant = budget::grant(want);
        let cap = grant.bytes();
        // Pages are only faulted in as appends reach them.
        Window {
            mem: AlignedBuf::new(cap),
            cap,
            _grant: grant,
            seg: None,
            start: 0,
            len: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        self.mem.bytes()
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.bytes_mut()
    }

    fn end(&self) -> u64 {
        self.start + self.len as u64
    }

    fn holds(&self, seg: Offset) -> bool {
        self.seg == Some(seg)
    }

    fn forget(&mut self) {
        self.seg = None;
        self.len = 0;
    }
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("seg", &self.seg)
            .field("start", &self.start)
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

/// The tail buffer of a log (see the module docs). Changed only under the log's write
/// lock; read under its read lock.
#[derive(Debug)]
pub(crate) struct TailCache {
    window_cap: usize,
    /// The window appends go to.
    cur: Option<Window>,
    /// The window before it: bytes before `cur`'s (of the same segment or of the
    /// segment sealed before it), read-only.
    prev: Option<Window>,
}

impl TailCache {
    /// A cache of at most `bytes` (two windows of half that, at least a block each).
    pub fn new(bytes: usize) -> TailCache {
        TailCache {
            window_cap: Self::window_cap(bytes),
            cur: None,
            prev: None,
        }
    }

    fn window_cap(bytes: usize) -> usize {
        floor_block(bytes as u64 / 2).max(BLOCK) as usize
    }

    /// Applies a new `tail_cache_bytes`: the windows are dropped if their size changes
    /// (the next append reloads the partial block from the file).
    pub fn resize(&mut self, bytes: usize) {
        let cap = Self::window_cap(bytes);
        if cap != self.window_cap {
            *self = TailCache::new(bytes);
        }
    }

    /// Forgets the bytes of segment `seg` (a cleaned segment replaced it, under the
    /// same base offset).
    pub fn forget_segment(&mut self, seg: Offset) {
        for w in [&mut self.cur, &mut self.prev].into_iter().flatten() {
            if w.holds(seg) {
                w.forget();
            }
        }
    }

    /// Forgets every cached byte, keeping the memory.
    pub fn clear(&mut self) {
        for w in [&mut self.cur, &mut self.prev].into_iter().flatten() {
            w.forget();
        }
    }

    /// Frees the memory (the log writes through the page cache from now on).
    pub fn release(&mut self) {
        self.cur = None;
        self.prev = None;
    }

    /// Whether a window is allocated.
    pub fn holds_memory(&self) -> bool {
        self.cur.is_some() || self.prev.is_some()
    }

    /// Bytes allocated for windows.
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        [&self.cur, &self.prev]
            .into_iter()
            .flatten()
            .map(|w| w.mem.allocated())
            .sum()
    }

    /// Writes `data` at byte `size` (the logical end) of segment `seg`, through
    /// `direct` (the segment opened with `O_DIRECT`). If the window does not end at
    /// `size` (first append after an open or a roll, or after an error), the partial
    /// last block is read from `file()` (the ordinary fd, opened only then) first.
    ///
    /// On error the cache is cleared, and the file may hold part of `data` (and zero
    /// padding) after `size`: the caller cuts the file back to `size`.
    pub fn append(
        &mut self,
        seg: Offset,
        size: u64,
        data: &[u8],
        direct: &File,
        file: &dyn Fn() -> io::Result<Arc<File>>,
    ) -> io::Result<()> {
        let r = self.append_inner(seg, size, data, direct, file);
        if r.is_err() {
            self.clear();
        }
        r
    }

    fn append_inner(
        &mut self,
        seg: Offset,
        size: u64,
        data: &[u8],
        direct: &File,
        file: &dyn Fn() -> io::Result<Arc<File>>,
    ) -> io::Result<()> {
        self.ensure_tail(seg, size, file)?;
        let mut rest = data;
        while !rest.is_empty() {
            let cur = self.cur.as_mut().expect("ensure_tail set the window");
            let room = cur.cap - cur.len;
            if rest.len() > room && floor_block(cur.len as u64) > 0 {
                // Moving to the other window carries over less than a block, and lets
                // this append go out in one write instead of two.
                self.switch();
                continue;
            }
            // `room` > 0 here: a full window has whole blocks, so it switched above.
            let n = rest.len().min(room);
            let old_len = cur.len;
            let new_len = old_len + n;
            let from = floor_block(old_len as u64) as usize;
            let to = ceil_block(new_len as u64) as usize; // <= cap: cap is whole blocks
            let buf = cur.bytes_mut();
            buf[old_len..new_len].copy_from_slice(&rest[..n]);
            buf[new_len..to].fill(0);
            #[cfg(test)]
            if refuse::get() == Some(refuse::Refusal::Write) {
                return Err(io::Error::from_raw_os_error(Errno::INVAL.raw_os_error()));
            }
            direct.write_all_at(&cur.bytes()[from..to], cur.start + from as u64)?;
            cur.len = new_len;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Makes `cur` a window of segment `seg` ending at `size`.
    fn ensure_tail(
        &mut self,
        seg: Offset,
        size: u64,
        file: &dyn Fn() -> io::Result<Arc<File>>,
    ) -> io::Result<()> {
        if self
            .cur
            .as_ref()
            .is_some_and(|w| w.holds(seg) && w.end() == size)
        {
            return Ok(());
        }
        let reuse = match self.cur.take() {
            // A roll: the old segment's tail stays readable in `prev`.
            Some(old) if old.seg.is_some_and(|s| s != seg) => {
                let recycled = self.prev.take();
                self.prev = Some(old);
                recycled
            }
            // Cleared, or (never expected) out of step with the segment: trust nothing.
            Some(mut old) => {
                old.forget();
                if let Some(p) = &mut self.prev {
                    p.forget();
                }
                Some(old)
            }
            None => None,
        };
        let mut w = reuse
            .filter(|w| w.cap <= self.window_cap)
            .unwrap_or_else(|| Window::new(self.window_cap));
        w.forget();
        w.start = floor_block(size);
        let partial = (size - w.start) as usize;
        if partial > 0 {
            let start = w.start;
            file()?.read_exact_at(&mut w.bytes_mut()[..partial], start)?;
        }
        w.seg = Some(seg);
        w.len = partial;
        self.cur = Some(w);
        Ok(())
    }

    /// Continues in the other window, from the current one's last block boundary.
    fn switch(&mut self) {
        let cur = self.cur.take().expect("switch needs a current window");
        let mut next = self
            .prev
            .take()
            .filter(|w| w.cap <= self.window_cap)
            .unwrap_or_else(|| Window::new(self.window_cap));
        let from = floor_block(cur.len as u64) as usize;
        let partial = cur.len - from;
        next.bytes_mut()[..partial].copy_from_slice(&cur.bytes()[from..cur.len]);
        next.seg = cur.seg;
        next.start = cur.start + from as u64;
        next.len = partial;
        self.prev = Some(cur);
        self.cur = Some(next);
    }

    /// Where the suffix of segment `seg` that the windows hold starts: every byte from
    /// there to the end of what they hold can be copied with [`Self::copy_out`].
    pub fn cached_from(&self, seg: Offset) -> Option<u64> {
        let cur = self.cur.as_ref().filter(|w| w.holds(seg));
        let prev = self.prev.as_ref().filter(|w| w.holds(seg));
        match (prev, cur) {
            // `cur` starts inside `prev`'s last block, or (after a reload) elsewhere.
            (Some(p), Some(c)) if p.start <= c.start && c.start <= p.end() => Some(p.start),
            (_, Some(c)) => Some(c.start),
            (Some(p), None) => Some(p.start),
            (None, None) => None,
        }
    }

    /// Appends to `out` the bytes `[from, to)` of segment `seg` that the windows hold
    /// contiguously from `from`; returns how many.
    pub fn copy_out(&self, seg: Offset, from: u64, to: u64, out: &mut Vec<u8>) -> u64 {
        self.each_cached(seg, from, to, |b| out.extend_from_slice(b))
    }

    /// Copies to the start of `out` the bytes `[from, to)` of segment `seg` that the
    /// windows hold contiguously from `from` (`out` holds at least `to - from` bytes);
    /// returns how many.
    pub fn copy_out_to(&self, seg: Offset, from: u64, to: u64, out: &mut [u8]) -> u64 {
        let mut n = 0;
        self.each_cached(seg, from, to, |b| {
            out[n..n + b.len()].copy_from_slice(b);
            n += b.len();
        })
    }

    /// Calls `f` with the pieces, in file order, of the bytes `[from, to)` of segment
    /// `seg` that the windows hold contiguously from `from`; returns how many.
    fn each_cached(&self, seg: Offset, from: u64, to: u64, mut f: impl FnMut(&[u8])) -> u64 {
        let mut at = from;
        // File order: `prev` holds the bytes before `cur`'s.
        for w in [&self.prev, &self.cur].into_iter().flatten() {
            if at < to && w.holds(seg) && w.start <= at && at < w.end() {
                let stop = to.min(w.end());
                f(&w.bytes()[(at - w.start) as usize..(stop - w.start) as usize]);
                at = stop;
            }
        }
        at - from
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::fs::OpenOptions;

    use rand::{RngExt, SeedableRng};

    use super::*;

    fn files(dir: &Path) -> (Arc<File>, File) {
        let path = dir.join("seg.log");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        // The system temp dir: ext4 here, or tmpfs, which takes O_DIRECT since 6.6.
        let direct = open_direct(&path)
            .unwrap()
            .expect("the temp dir's filesystem takes O_DIRECT");
        (Arc::new(file), direct)
    }

    #[test]
    fn block_rounding() {
        assert_eq!((floor_block(0), ceil_block(0)), (0, 0));
        assert_eq!((floor_block(1), ceil_block(1)), (0, 4096));
        assert_eq!((floor_block(4096), ceil_block(4096)), (4096, 4096));
        assert_eq!((floor_block(8191), ceil_block(8191)), (4096, 8192));
    }

    #[test]
    fn windows_are_aligned_and_bounded() {
        for bytes in [0, 1, 4096, 8192, 10_000, 1 << 20] {
            let w = Window::new(TailCache::window_cap(bytes));
            assert_eq!(w.bytes().as_ptr().addr() % BLOCK as usize, 0);
            assert_eq!(w.cap % BLOCK as usize, 0);
            assert!(w.cap <= (bytes / 2).max(BLOCK as usize));
        }
    }

    /// Random appends, some larger than a window, with a segment change in the middle:
    /// the file holds exactly the bytes (zero-padded to a block), the windows never
    /// exceed their bound, and every range of the cached suffix copies out exactly.
    #[test]
    fn appends_write_exact_bytes_and_the_cache_serves_its_suffix() {
        let seed: u64 = rand::random();
        eprintln!("seed {seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let bound = 16 * 1024;
        let mut cache = TailCache::new(bound);
        for seg in [0i64, 1000] {
            let seg_dir = dir.path().join(format!("{seg}"));
            std::fs::create_dir_all(&seg_dir).unwrap();
            let (file, direct) = files(&seg_dir);
            let mut want: Vec<u8> = Vec::new();
            for i in 0..200 {
                let len = match rng.random_range(0..10) {
                    0 => rng.random_range(8_000..30_000),
                    _ => rng.random_range(1..3000),
                };
                let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                cache
                    .append(seg, want.len() as u64, &data, &direct, &|| Ok(file.clone()))
                    .unwrap();
                want.extend_from_slice(&data);
                assert!(cache.allocated() <= bound + 2 * BLOCK as usize);
                let on_disk = std::fs::read(dir.path().join(format!("{seg}/seg.log"))).unwrap();
                assert_eq!(
                    on_disk.len() as u64,
                    ceil_block(want.len() as u64),
                    "append {i}"
                );
                assert!(on_disk[..want.len()] == want[..], "append {i}");
                assert!(on_disk[want.len()..].iter().all(|&b| b == 0));
                // Every range inside the cached suffix, and ranges that start before it.
                let c0 = cache.cached_from(seg).unwrap();
                assert!(c0 <= floor_block(want.len() as u64));
                for _ in 0..20 {
                    let a = rng.random_range(c0..=want.len() as u64);
                    let b = rng.random_range(a..=want.len() as u64);
                    let mut out = Vec::new();
                    assert_eq!(cache.copy_out(seg, a, b, &mut out), b - a);
                    assert!(out[..] == want[a as usize..b as usize]);
                }
                if c0 > 0 {
                    let mut out = Vec::new();
                    assert_eq!(cache.copy_out(seg, c0 - 1, want.len() as u64, &mut out), 0);
                }
            }
            // Nothing of another segment is served.
            let mut out = Vec::new();
            assert_eq!(cache.copy_out(seg + 1, 0, 10, &mut out), 0);
        }
        // After a roll the sealed segment's tail may still be served, but only its own.
        if let Some(c0) = cache.cached_from(0) {
            let end = std::fs::metadata(dir.path().join("0/seg.log"))
                .unwrap()
                .len();
            let mut out = Vec::new();
            cache.copy_out(0, c0, end, &mut out);
            let on_disk = std::fs::read(dir.path().join("0/seg.log")).unwrap();
            assert!(out[..] == on_disk[c0 as usize..c0 as usize + out.len()]);
        }
    }

    #[test]
    fn a_cleared_cache_reloads_the_partial_block_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (file, direct) = files(dir.path());
        let mut cache = TailCache::new(64 * 1024);
        let a: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        cache
            .append(7, 0, &a, &direct, &|| Ok(file.clone()))
            .unwrap();
        cache.clear();
        assert_eq!(cache.cached_from(7), None);
        let b: Vec<u8> = (0..3000u32).map(|i| (i * 3) as u8).collect();
        cache
            .append(7, 5000, &b, &direct, &|| Ok(file.clone()))
            .unwrap();
        let on_disk = std::fs::read(dir.path().join("seg.log")).unwrap();
        assert!(on_disk[..5000] == a[..] && on_disk[5000..8000] == b[..]);
        assert_eq!(cache.cached_from(7), Some(4096));
    }
}

/// Buffers of the reads that fill fetch responses, reused.
///
/// A consumer catching up makes the broker read a megabyte per partition per fetch, into
/// a buffer that lives until the response is on the socket. Allocated afresh each time,
/// those buffers went back to the kernel and came back faulted in and zeroed again,
/// depending on the allocator's trim heuristics (a third of a consuming broker's CPU in
/// one mode, none in another). Pooled, a buffer is faulted in once. The pool keeps at
/// most [`read_pool::MAX_POOLED`] bytes of idle buffers, in power-of-two size classes
/// from 64 KiB to 16 MiB (each with room for the alignment of a direct read); reads
/// outside that range allocate as before.
pub(crate) mod read_pool {
    use std::sync::Mutex;

    use super::BLOCK;

    const MIN_CLASS: u32 = 16; // 64 KiB
    const MAX_CLASS: u32 = 24; // 16 MiB
    const CLASSES: usize = (MAX_CLASS - MIN_CLASS + 1) as usize;
    /// Idle bytes the pool keeps; a buffer returned past this is freed.
    pub(crate) const MAX_POOLED: usize = 64 << 20;
    /// Room past a class's size: what a log read asks for past its byte limit (the rest
    /// of a batch, `READ_SLACK`), the read's alignment on both ends, and the buffer's
    /// own. So a 1 MiB read takes a 1 MiB buffer, not a 2 MiB one.
    const EXTRA: usize = crate::log::READ_SLACK as usize + 2 * BLOCK as usize;
    const SLACK: usize = EXTRA + BLOCK as usize;

    pub(crate) struct Pool {
        free: [Vec<Vec<u8>>; CLASSES],
        bytes: usize,
    }

    pub(crate) type Shared = Mutex<Pool>;

    const fn empty() -> Shared {
        Mutex::new(Pool {
            free: [const { Vec::new() }; CLASSES],
            bytes: 0,
        })
    }

    /// The broker's pool of read buffers.
    pub(crate) static READS: Shared = empty();

    fn size(class: usize) -> usize {
        (1usize << (MIN_CLASS as usize + class)) + SLACK
    }

    /// The class whose buffers hold `len` aligned bytes, if `len` is pooled.
    pub(crate) fn class_of(len: usize) -> Option<usize> {
        let body = len.saturating_sub(EXTRA);
        if len < 1 << MIN_CLASS || body > 1 << MAX_CLASS {
            return None;
        }
        let bits = body
            .max(1)
            .next_power_of_two()
            .trailing_zeros()
            .max(MIN_CLASS);
        Some((bits - MIN_CLASS) as usize)
    }

    pub(crate) fn take(pool: &Shared, class: usize) -> Vec<u8> {
        let reused = {
            let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
            let mem = pool.free[class].pop();
            if let Some(m) = &mem {
                pool.bytes -= m.len();
            }
            mem
        };
        reused.unwrap_or_else(|| vec![0u8; size(class)])
    }

    fn give(pool: &Shared, class: usize, mem: Vec<u8>) {
        let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
        if pool.bytes + mem.len() <= MAX_POOLED {
            pool.bytes += mem.len();
            pool.free[class].push(mem);
        }
    }

    /// Idle bytes in a pool.
    #[cfg(test)]
    fn pooled_bytes(pool: &Shared) -> usize {
        pool.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// A pooled buffer owned by the `Bytes` made of it; dropped with the last of them, it
    /// goes back to the pool.
    pub(crate) struct Pooled {
        pub(super) mem: Vec<u8>,
        pub(super) pool: &'static Shared,
        pub(super) class: usize,
    }

    impl AsRef<[u8]> for Pooled {
        fn as_ref(&self) -> &[u8] {
            &self.mem
        }
    }

    impl Drop for Pooled {
        fn drop(&mut self) {
            give(self.pool, self.class, std::mem::take(&mut self.mem));
        }
    }

    #[cfg(test)]
    mod tests {
        use super::super::AlignedBuf;
        use super::*;

        #[test]
        fn classes_hold_their_reads() {
            assert_eq!(class_of(1000), None);
            assert_eq!(class_of(64 << 10), Some(0));
            // A 1 MiB read with its slack and its alignment on both ends is a 1 MiB
            // buffer.
            assert_eq!(class_of((1 << 20) + EXTRA), Some(4));
            assert_eq!(class_of((1 << 20) + EXTRA + 1), Some(5));
            assert_eq!(class_of((16 << 20) + EXTRA + 1), None);
            for len in [64 << 10, 100_000, (1 << 20) + 8192, 16 << 20] {
                let class = class_of(len).unwrap();
                assert!(size(class) >= len + BLOCK as usize, "{len}");
            }
        }

        /// A buffer comes back when its last `Bytes` is dropped, and is handed out
        /// again (the same memory, so its pages stay faulted in); past the pool's
        /// limit, returned buffers are freed.
        #[test]
        fn buffers_return_when_their_last_bytes_drop() {
            static POOL: Shared = empty();
            let len = (8 << 20) + 100;
            let mut a = AlignedBuf::from_pool(len, &POOL);
            a.bytes_mut()[..5].copy_from_slice(b"hello");
            let at = a.bytes().as_ptr().addr();
            let b = a.into_bytes(0, 5);
            let c = b.clone();
            drop(b);
            assert_eq!(pooled_bytes(&POOL), 0, "a Bytes of it is alive");
            assert_eq!(&c[..], b"hello");
            drop(c);
            let one = size(class_of(len).unwrap());
            assert_eq!(pooled_bytes(&POOL), one);
            let again = AlignedBuf::from_pool(len, &POOL);
            assert_eq!(again.bytes().as_ptr().addr(), at, "the same buffer");
            assert_eq!(pooled_bytes(&POOL), 0);
            drop(again);
            // Sixteen 8 MiB buffers out at once: as many as fit under the limit come back.
            let bufs: Vec<_> = (0..16)
                .map(|_| AlignedBuf::from_pool(len, &POOL).into_bytes(0, 1))
                .collect();
            drop(bufs);
            assert_eq!(pooled_bytes(&POOL), MAX_POOLED / one * one);
        }
    }
}
