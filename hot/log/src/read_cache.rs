//! Recently read segment bytes, shared by every reader of every log (direct mode).
//!
//! In direct mode nothing caches what a read brought from the device: a second consumer
//! group reading what the first just read, or a consumer behind a follower, read the
//! device again, in pieces of about a megabyte (the tail buffer only holds the newest
//! bytes of each partition). This cache holds aligned chunks ([`CHUNK`], 1 MiB) of segment
//! files, read with `O_DIRECT` [`READ_AHEAD`] chunks at a time on a miss (a sequential
//! reader's next fetches hit), least recently used dropped first, within one process-wide
//! budget (`--log-read-cache`, [`set_limit`]; 0 turns the cache off). That budget is a
//! share of the one the tail buffers draw from ([`crate::tail_budget`]): the cache holds
//! at most what the tail windows leave of it, and gives chunks back when a window needs
//! the room, so appended and read bytes together stay within one figure.
//!
//! A chunk is keyed by the log (a number per opened [`crate::Log`]), the log's read
//! generation, the segment and the chunk's position. The generation moves with every
//! change that can make a segment's bytes differ from what was read (a truncation, a
//! reset, a cleaner swapping segments in), so a read that starts after such a change
//! never finds a chunk read before it. Only bytes that cannot change within a
//! generation are cached: sealed segments, and whole chunks of the active segment below
//! what its tail buffer holds (written, and only ever appended after).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use bytes::Bytes;
use strata_proto::Offset;

/// Bytes per chunk by default (a multiple of the direct-IO block).
pub const CHUNK: u64 = 1 << 20;

static CHUNK_BYTES: AtomicU64 = AtomicU64::new(CHUNK);

/// The chunk size in force.
pub fn chunk() -> u64 {
    CHUNK_BYTES.load(Ordering::Relaxed)
}

/// Sets the chunk size (tests use small ones), rounded down to a multiple of the
/// direct-IO block (at least one block); drops what the cache holds.
pub fn set_chunk_bytes(bytes: u64) {
    let block = crate::tail::BLOCK;
    CHUNK_BYTES.store((bytes / block).max(1) * block, Ordering::Relaxed);
    lock().clear();
}

/// Chunks a miss reads at once (the one asked for and the following ones, where they
/// may be cached).
pub const READ_AHEAD: u64 = 4;

/// (log, generation, segment base, chunk start).
pub(crate) type Key = (u64, u64, Offset, u64);

static LIMIT: AtomicUsize = AtomicUsize::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static NEXT_LOG: AtomicU64 = AtomicU64::new(1);

/// Sets the budget in bytes (0, the default until called: no cache).
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
    if bytes == 0 {
        lock().clear();
    }
}

pub fn limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}

/// Bytes the cache holds now.
pub fn used() -> usize {
    lock().bytes
}

/// What the cache may hold now: its own limit, within what the tail windows leave of
/// their shared budget.
fn effective_limit() -> usize {
    limit().min(crate::tail_budget::room_for_reads())
}

/// Drops least recently used chunks until the cache holds at most `bytes` (a tail window
/// needs the room).
pub(crate) fn shrink_to(bytes: usize) {
    let mut c = lock();
    evict(&mut c, bytes);
}

fn evict(c: &mut Lru, limit: usize) {
    while c.bytes > limit {
        let Some((_, victim)) = c.order.pop_first() else {
            break;
        };
        if let Some((_, b)) = c.chunks.remove(&victim) {
            c.bytes -= b.len();
        }
    }
    crate::tail_budget::set_read(c.bytes);
}

/// Reads served from the cache, and chunks read from the device into it.
pub fn hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}

pub fn misses() -> u64 {
    MISSES.load(Ordering::Relaxed)
}

/// A number for a newly opened log (keys never outlive it: a reopened log gets another).
pub(crate) fn new_log_id() -> u64 {
    NEXT_LOG.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn enabled() -> bool {
    limit() > 0
}

#[derive(Default)]
struct Lru {
    chunks: HashMap<Key, (u64, Bytes)>,
    order: BTreeMap<u64, Key>,
    tick: u64,
    bytes: usize,
    /// Chunks a reader is reading from the device now: another reader that wants one
    /// waits for it rather than reading the same bytes again (two consumer groups
    /// reading in step read the device once).
    loading: HashMap<Key, Arc<Flight>>,
}

/// A read of chunks from the device, in progress.
#[derive(Default)]
struct Flight {
    /// `None` until it ends; then the chunk, or `None` if the read failed.
    done: Mutex<Option<Option<Bytes>>>,
    ended: Condvar,
}

impl Flight {
    fn wait(&self) -> Option<Bytes> {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(result) = done.as_ref() {
                return result.clone();
            }
            done = self.ended.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn end(&self, result: Option<Bytes>) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        self.ended.notify_all();
    }
}

impl Lru {
    fn clear(&mut self) {
        self.chunks.clear();
        self.order.clear();
        self.bytes = 0;
        crate::tail_budget::set_read(0);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Lru> {
    static CACHE: OnceLock<Mutex<Lru>> = OnceLock::new();
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The chunk at `key`, if cached (it becomes the most recently used).
#[cfg(test)]
pub(crate) fn get(key: &Key) -> Option<Bytes> {
    let mut c = lock();
    hit(&mut c, key)
}

fn hit(c: &mut Lru, key: &Key) -> Option<Bytes> {
    let tick = c.tick;
    let (at, bytes) = c.chunks.get_mut(key)?;
    c.order.remove(at);
    *at = tick;
    c.order.insert(tick, *key);
    c.tick += 1;
    HITS.fetch_add(1, Ordering::Relaxed);
    Some(bytes.clone())
}

/// The chunk at `first`: from the cache; from another reader's read of it in progress;
/// or read with `load(n)`, which returns the bytes of the first `n` of the `count`
/// chunks of `chunk` bytes from `first` on, back to back (fewer at the end of the file).
/// `n` stops short of a chunk already cached or being read.
pub(crate) fn get_or_load(
    first: Key,
    count: usize,
    chunk: u64,
    load: impl FnOnce(usize) -> std::io::Result<Bytes>,
) -> std::io::Result<Bytes> {
    let mine: Vec<(Key, Arc<Flight>)> = {
        let mut c = lock();
        if let Some(b) = hit(&mut c, &first) {
            return Ok(b);
        }
        if let Some(f) = c.loading.get(&first).cloned() {
            drop(c);
            HITS.fetch_add(1, Ordering::Relaxed);
            if let Some(b) = f.wait() {
                return Ok(b);
            }
            // That read failed: this reader reads for itself, uncached.
            return load(1);
        }
        let mut mine = Vec::new();
        for i in 0..count.max(1) {
            let k = (first.0, first.1, first.2, first.3 + i as u64 * chunk);
            if i > 0 && (c.chunks.contains_key(&k) || c.loading.contains_key(&k)) {
                break;
            }
            let f = Arc::new(Flight::default());
            c.loading.insert(k, f.clone());
            mine.push((k, f));
        }
        mine
    };
    let chunk = chunk as usize;
    let result = load(mine.len());
    let data = result.as_ref().ok().cloned().unwrap_or_default();
    let mut out = Bytes::new();
    for (i, (k, f)) in mine.iter().enumerate() {
        let s = i * chunk;
        let piece = (s < data.len()).then(|| data.slice(s..(s + chunk).min(data.len())));
        if let Some(p) = &piece {
            put(*k, p.clone());
            if i == 0 {
                out = p.clone();
            }
        }
        lock().loading.remove(k);
        f.end(piece);
    }
    result?;
    Ok(out)
}

/// Caches a chunk, dropping the least recently used ones past the budget.
pub(crate) fn put(key: Key, bytes: Bytes) {
    let limit = effective_limit();
    if bytes.len() > limit {
        return;
    }
    MISSES.fetch_add(1, Ordering::Relaxed);
    let mut c = lock();
    let c = &mut *c;
    let tick = c.tick;
    c.tick += 1;
    c.bytes += bytes.len();
    if let Some((old_at, old)) = c.chunks.insert(key, (tick, bytes)) {
        c.order.remove(&old_at);
        c.bytes -= old.len();
    }
    c.order.insert(tick, key);
    evict(c, limit);
}

/// Drops every chunk of `log` (it was closed or deleted).
pub(crate) fn forget_log(log: u64) {
    let mut c = lock();
    let c = &mut *c;
    let gone: Vec<(u64, Key)> = c
        .chunks
        .iter()
        .filter(|(k, _)| k.0 == log)
        .map(|(k, (at, _))| (*at, *k))
        .collect();
    for (at, k) in gone {
        c.order.remove(&at);
        if let Some((_, b)) = c.chunks.remove(&k) {
            c.bytes -= b.len();
        }
    }
    crate::tail_budget::set_read(c.bytes);
}

/// Test-only: serializes the tests that change the process-wide budget.
#[cfg(test)]
pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_least_recently_used_chunks_go_past_the_budget() {
        let _g = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        set_limit(0);
        set_limit(3 * 10);
        let log = new_log_id();
        let chunk = |i: u8| Bytes::from(vec![i; 10]);
        for i in 0..3u8 {
            put((log, 0, 0, i as u64), chunk(i));
        }
        assert_eq!(used(), 30);
        // Touch 0: 1 is now the oldest.
        assert_eq!(get(&(log, 0, 0, 0)), Some(chunk(0)));
        put((log, 0, 0, 3), chunk(3));
        assert_eq!(used(), 30);
        assert!(get(&(log, 0, 0, 1)).is_none());
        assert!(get(&(log, 0, 0, 0)).is_some());
        // Another generation is another key.
        assert!(get(&(log, 1, 0, 0)).is_none());
        forget_log(log);
        assert_eq!(used(), 0);
        set_limit(0);
    }

    /// Two readers wanting the same chunk at once read the device once; a failed read
    /// leaves the waiter to read for itself.
    #[test]
    fn readers_in_step_read_the_device_once() {
        let _g = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        set_limit(1 << 20);
        let log = new_log_id();
        let keys: Vec<Key> = (0..2).map(|i| (log, 0, 0, i * 10)).collect();
        let get_two =
            |load: &dyn Fn(usize) -> std::io::Result<Bytes>| get_or_load(keys[0], 2, 10, load);
        let loads = std::sync::atomic::AtomicUsize::new(0);
        let load = |n: usize| {
            loads.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(200));
            Ok(Bytes::from(vec![7u8; 10 * n]))
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| get_two(&load).unwrap());
            std::thread::sleep(std::time::Duration::from_millis(50));
            let b = s.spawn(|| get_two(&load).unwrap());
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(loads.load(Ordering::SeqCst), 1, "one device read");
        assert_eq!((a.len(), b.len()), (10, 10));
        // The read-ahead chunk was cached by the same read.
        assert!(get(&keys[1]).is_some());

        let other: Key = (log, 0, 0, 100);
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                get_or_load(other, 1, 10, |_| {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    Err(std::io::Error::other("the device failed"))
                })
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            let b = s.spawn(|| get_or_load(other, 1, 10, |n| Ok(Bytes::from(vec![1u8; 10 * n]))));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(a.is_err());
        assert_eq!(b.unwrap().len(), 10, "the waiter read for itself");
        forget_log(log);
        set_limit(0);
    }
}
