//! Open segment files through one process-wide, bounded cache of descriptors.
//!
//! # Why
//!
//! Kafka keeps every segment of every partition open (and asks for a huge
//! `ulimit -n`); a broker with 10,000 partitions then holds 20,000 descriptors before a
//! single client connects, and one more partition than the limit allows fails to open.
//! Here a segment names its file ([`SegmentFile`]) and takes a descriptor from the cache
//! only for the operation at hand: an append, a read, a truncation, an fsync. The cache
//! keeps at most [`capacity`] descriptors (least recently used evicted first), so the
//! count is set by configuration, not by the partition count.
//!
//! # Invariants
//!
//! - A descriptor is handed out as an `Arc<File>`: evicting it drops the cache's
//!   reference only, and an operation holding it finishes on it (the count may pass
//!   the capacity by the operations in flight, one or two descriptors each).
//! - A caller takes the descriptor while it holds the log's lock, as it read the
//!   segment's state: a segment that retention or a truncation deletes afterwards is
//!   still readable through the descriptor it holds, exactly as when every segment
//!   stayed open. A reopen happens only under the lock, where the file exists.
//! - Dropping a [`SegmentFile`] (its segment left the log) removes its descriptors.
//! - Reopening the active segment after an eviction is safe in both IO modes: its bytes
//!   are in the file (a direct write's padding included), and an fsync through a new
//!   descriptor flushes the file's dirty pages whichever descriptor wrote them (Linux
//!   reports a writeback error that no descriptor has seen to the next fsync, on any
//!   descriptor of the file).
//! - Running out of descriptors (EMFILE, ENFILE) at an open evicts half the cache and
//!   tries once more, so that the connections' sockets get descriptors back.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::io::Errno;

/// The capacity until [`set_capacity`] is called (the broker sets its own default).
pub const DEFAULT_OPEN_FILES: usize = 1024;

/// Which descriptor of a segment file.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    /// Read-write, through the page cache: buffered appends and reads, truncation,
    /// fsync.
    Plain,
    /// With `O_DIRECT`: the active segment's appends (opened read-write), direct reads.
    Direct,
}

type Key = (u64, Kind);

struct Lru {
    files: BTreeMap<Key, (Arc<File>, u64)>,
    /// Last use → key: the first entry is the least recently used.
    order: BTreeMap<u64, Key>,
    tick: u64,
}

impl Lru {
    fn touch(&mut self, key: Key) -> Option<Arc<File>> {
        let tick = self.tick + 1;
        let (file, used) = self.files.get_mut(&key)?;
        self.order.remove(used);
        *used = tick;
        self.tick = tick;
        self.order.insert(tick, key);
        Some(file.clone())
    }

    /// Removes least recently used entries until at most `keep` remain; returns them,
    /// to be closed once the lock is released.
    fn evict_to(&mut self, keep: usize) -> Vec<Arc<File>> {
        let mut out = Vec::new();
        while self.files.len() > keep {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some((f, _)) = self.files.remove(&key) {
                out.push(f);
            }
        }
        out
    }
}

/// A bounded cache of open descriptors (see the module doc).
pub(crate) struct FileCache {
    lru: Mutex<Lru>,
    capacity: AtomicUsize,
    opens: AtomicU64,
    next_id: AtomicU64,
}

static CACHE: FileCache = FileCache::new(DEFAULT_OPEN_FILES);

/// Sets how many segment descriptors the process keeps open at most (at least 2:
/// an active segment in direct mode takes two at once). Evicts at once if there are
/// more.
pub fn set_capacity(n: usize) {
    CACHE.set_capacity(n);
}

/// How many segment descriptors the cache may keep open.
pub fn capacity() -> usize {
    CACHE.capacity.load(Ordering::Relaxed)
}

/// How many segment descriptors the cache holds now.
pub fn cached() -> usize {
    CACHE.len()
}

/// How many segment files have been opened since the process started (each miss of
/// the cache is one open).
pub fn opens() -> u64 {
    CACHE.opens.load(Ordering::Relaxed)
}

impl FileCache {
    const fn new(capacity: usize) -> FileCache {
        FileCache {
            lru: Mutex::new(Lru {
                files: BTreeMap::new(),
                order: BTreeMap::new(),
                tick: 0,
            }),
            capacity: AtomicUsize::new(capacity),
            opens: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        // The map is consistent after every statement that a panic could interrupt.
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_capacity(&self, n: usize) {
        let n = n.max(2);
        self.capacity.store(n, Ordering::Relaxed);
        let evicted = self.lock().evict_to(n);
        drop(evicted);
    }

    fn len(&self) -> usize {
        self.lock().files.len()
    }

    /// The descriptor `key` names, opened with `open` on a miss.
    fn get(&self, key: Key, mut open: impl FnMut() -> io::Result<File>) -> io::Result<Arc<File>> {
        if let Some(f) = self.lock().touch(key) {
            return Ok(f);
        }
        // Opened without the lock: a path lookup must not stall every other segment.
        let file = match open() {
            Err(e) if is_out_of_files(&e) => {
                let half = self.len() / 2;
                drop(self.lock().evict_to(half));
                open()?
            }
            r => r?,
        };
        self.opens.fetch_add(1, Ordering::Relaxed);
        let file = Arc::new(file);
        let mut evicted = Vec::new();
        let kept = {
            let mut g = self.lock();
            // Another thread may have opened it meanwhile: its descriptor is kept.
            if let Some(f) = g.touch(key) {
                f
            } else {
                g.tick += 1;
                let tick = g.tick;
                g.files.insert(key, (file.clone(), tick));
                g.order.insert(tick, key);
                let cap = self.capacity.load(Ordering::Relaxed);
                evicted = g.evict_to(cap);
                file
            }
        };
        drop(evicted);
        Ok(kept)
    }

    fn remove(&self, id: u64) {
        let removed: Vec<_> = {
            let mut g = self.lock();
            [Kind::Plain, Kind::Direct]
                .into_iter()
                .filter_map(|k| {
                    let (f, used) = g.files.remove(&(id, k))?;
                    g.order.remove(&used);
                    Some(f)
                })
                .collect()
        };
        drop(removed);
    }
}

fn is_out_of_files(e: &io::Error) -> bool {
    matches!(Errno::from_io_error(e), Some(Errno::MFILE | Errno::NFILE))
}

/// A segment's file, named; its descriptors come from the process-wide cache.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    id: u64,
    path: PathBuf,
}

impl SegmentFile {
    /// The file at `path`, not opened yet.
    pub fn new(path: PathBuf) -> SegmentFile {
        SegmentFile {
            id: CACHE.next_id.fetch_add(1, Ordering::Relaxed),
            path,
        }
    }

    /// The file at `path`, whose ordinary descriptor the caller has just opened.
    pub fn with_plain(path: PathBuf, file: File) -> SegmentFile {
        let f = SegmentFile::new(path);
        let mut file = Some(file);
        // Cannot fail: the open hands over the descriptor given.
        let _ = CACHE.get((f.id, Kind::Plain), || {
            file.take()
                .ok_or_else(|| io::Error::other("descriptor already taken"))
        });
        f
    }

    /// The ordinary (read-write) descriptor.
    pub fn plain(&self) -> io::Result<Arc<File>> {
        CACHE.get((self.id, Kind::Plain), || {
            OpenOptions::new().read(true).write(true).open(&self.path)
        })
    }

    /// The `O_DIRECT` descriptor, opened read-write (`write`, for the active segment's
    /// appends) or read-only on a miss. A descriptor opened read-write serves reads as
    /// well, and keeps doing so once the segment is sealed, until evicted. `Ok(None)`:
    /// the filesystem refuses `O_DIRECT`.
    pub fn direct(&self, write: bool) -> io::Result<Option<Arc<File>>> {
        let refused = std::cell::Cell::new(false);
        let r = CACHE.get((self.id, Kind::Direct), || {
            let opened = if write {
                crate::tail::open_direct(&self.path)
            } else {
                crate::direct_read::open(&self.path)
            };
            match opened? {
                Some(f) => Ok(f),
                None => {
                    refused.set(true);
                    Err(io::Error::from_raw_os_error(Errno::INVAL.raw_os_error()))
                }
            }
        });
        match r {
            Ok(f) => Ok(Some(f)),
            Err(_) if refused.get() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        CACHE.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;

    fn cache_with(n: usize) -> FileCache {
        let c = FileCache::new(n);
        c.set_capacity(n);
        c
    }

    use std::path::Path;

    fn open(path: &Path) -> impl Fn() -> io::Result<File> + '_ {
        move || File::open(path)
    }

    #[test]
    fn holds_at_most_its_capacity_and_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..5)
            .map(|i| {
                let p = dir.path().join(format!("{i}"));
                File::create(&p).unwrap().write_all(b"x").unwrap();
                p
            })
            .collect();
        let c = cache_with(3);
        for (i, p) in paths.iter().enumerate().take(3) {
            c.get((i as u64, Kind::Plain), open(p)).unwrap();
        }
        // 0 is used again: 1 is now the least recently used.
        c.get((0, Kind::Plain), || panic!("0 is cached")).unwrap();
        let held = c.get((3, Kind::Plain), open(&paths[3])).unwrap();
        assert_eq!(c.len(), 3);
        c.get((0, Kind::Plain), || panic!("0 stayed")).unwrap();
        c.get((2, Kind::Plain), || panic!("2 stayed")).unwrap();
        let mut reopened = false;
        c.get((1, Kind::Plain), || {
            reopened = true;
            File::open(&paths[1])
        })
        .unwrap();
        assert!(reopened, "1 was evicted");
        // 3 was evicted just now, but the descriptor handed out still reads.
        assert_eq!(c.len(), 3);
        let mut b = [0u8; 1];
        use std::os::unix::fs::FileExt;
        held.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"x");
        c.remove(0);
        c.remove(1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.opens.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn a_lower_capacity_evicts_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        File::create(&p).unwrap();
        let c = cache_with(10);
        for i in 0..10 {
            c.get((i, Kind::Plain), open(&p)).unwrap();
        }
        assert_eq!(c.len(), 10);
        c.set_capacity(4);
        assert_eq!(c.len(), 4);
        c.set_capacity(0);
        assert_eq!(c.len(), 2, "at least two");
    }

    #[test]
    fn out_of_files_evicts_half_and_retries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        File::create(&p).unwrap();
        let c = cache_with(8);
        for i in 0..8 {
            c.get((i, Kind::Plain), open(&p)).unwrap();
        }
        let tries = std::cell::Cell::new(0);
        c.get((100, Kind::Plain), || {
            tries.set(tries.get() + 1);
            if tries.get() == 1 {
                Err(io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()))
            } else {
                File::open(&p)
            }
        })
        .unwrap();
        assert_eq!(tries.get(), 2);
        assert_eq!(c.len(), 5, "half of 8 kept, plus the new one");
    }
}
