//! Configuration of the chunk cache: one struct, validated, with defaults that
//! work for `strata serve` with no flags.

use std::{path::PathBuf, time::Duration};

use crate::error::CacheError;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Smallest allowed chunk. Smaller chunks mean more GETs per byte, and S3 GETs
/// are priced and throttled per request.
pub const MIN_CHUNK_SIZE: u64 = 4 * MIB;
/// Largest allowed chunk. Redpanda settled on 16 MiB chunks after whole-segment
/// hydration proved too coarse; larger chunks make a small fetch wait for a big GET.
pub const MAX_CHUNK_SIZE: u64 = 16 * MIB;

/// Configuration of a [`ChunkCache`](crate::ChunkCache).
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// Size of one cached chunk; every object is cut at multiples of it (the
    /// last chunk of an object is shorter). Must be in 4..=16 MiB.
    /// Default 8 MiB.
    pub chunk_size: u64,
    /// Bytes of chunks kept in memory (foyer's memory tier). Must hold at least
    /// two chunks. Default 1 GiB.
    pub memory_capacity: u64,
    /// The disk tier, or `None` for a memory-only cache. Default: 16 GiB in
    /// `strata-data/cache`.
    pub disk: Option<DiskConfig>,
    /// Eviction policy of the memory tier. Default [`EvictionPolicy::S3Fifo`].
    pub eviction: EvictionPolicy,
    /// Chunks to read ahead of a sequential reader; 0 disables read-ahead.
    /// This is also the per-reader budget: a reader never has more than this many
    /// chunks prefetched and not yet consumed. Default 4.
    pub readahead_chunks: u32,
    /// Global bound on prefetch reads in flight against the source. Default 16.
    pub max_inflight_prefetches: u32,
    /// Global bound on bytes prefetched for readers and not yet consumed by them
    /// (in flight or waiting). Many catch-up readers share it fairly, so their
    /// read-ahead cannot evict each other's chunks before use. These chunks are
    /// held for their readers outside the memory tier's accounting (they are
    /// usually the same buffers as cached chunks). Default 256 MiB.
    pub readahead_budget_bytes: u64,
    /// Readers tracked for sequential detection; the least recently active one
    /// is forgotten beyond this. Each tracked reader also holds the chunk it is
    /// reading (so its next read of that chunk costs no lookup). Default 4096.
    pub max_readers: usize,
    /// A reader idle this long is forgotten and its prefetched chunks released.
    /// Default 60 s.
    pub reader_idle_timeout: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            chunk_size: 8 * MIB,
            memory_capacity: GIB,
            disk: Some(DiskConfig::default()),
            eviction: EvictionPolicy::default(),
            readahead_chunks: 4,
            max_inflight_prefetches: 16,
            readahead_budget_bytes: 256 * MIB,
            max_readers: 4096,
            reader_idle_timeout: Duration::from_secs(60),
        }
    }
}

/// The disk tier: a directory of foyer block files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    /// Directory of the cache files (created if missing). One cache per
    /// directory: a lock file keeps a second one out. Default `strata-data/cache`.
    pub dir: PathBuf,
    /// Bytes of disk the cache may use. Must hold at least 8 foyer blocks of 4
    /// chunks each (a little over 256 MiB with 8 MiB chunks). Default 16 GiB.
    pub capacity: u64,
    /// Reopen what an earlier run left in `dir` (foyer recovery). Default true.
    pub recover: bool,
}

impl Default for DiskConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("strata-data/cache"),
            capacity: 16 * GIB,
            recover: true,
        }
    }
}

/// Eviction policy of the memory tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionPolicy {
    /// S3-FIFO: new chunks enter a small FIFO (10% of memory) and are promoted to
    /// the main queue only if read again while there. A one-pass scan therefore
    /// cycles through the small queue and leaves re-read chunks alone.
    #[default]
    S3Fifo,
    /// Plain LRU. A scan larger than memory flushes everything; kept for
    /// comparison (see the `scan_resistance` test).
    Lru,
}

/// Chunks of `chunk_size` that fit in one foyer disk block. Blocks are foyer's
/// unit of disk eviction; a few chunks per block keeps eviction fine-grained.
pub(crate) const CHUNKS_PER_BLOCK: u64 = 4;
/// Per-entry and per-block overhead allowance (entry header, key, blob index,
/// page alignment), so that `CHUNKS_PER_BLOCK` full chunks really fit in a block.
pub(crate) const ENTRY_OVERHEAD: u64 = 8 * KIB;
pub(crate) const BLOCK_OVERHEAD: u64 = 64 * KIB;
/// Minimum number of disk blocks: foyer wants clean blocks for its flusher and
/// reclaimer besides those holding data.
pub(crate) const MIN_DISK_BLOCKS: u64 = 8;

impl CacheConfig {
    /// Foyer disk block size for this chunk size.
    pub(crate) fn block_size(&self) -> u64 {
        CHUNKS_PER_BLOCK * (self.chunk_size + ENTRY_OVERHEAD) + BLOCK_OVERHEAD
    }

    /// Chunks the read-ahead budget allows across all readers.
    pub(crate) fn readahead_budget_chunks(&self) -> u64 {
        self.readahead_budget_bytes / self.chunk_size
    }

    /// Checks the configuration, saying which field is wrong and why.
    pub fn validate(&self) -> Result<(), CacheError> {
        let bad = |msg: String| Err(CacheError::Config(msg));
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&self.chunk_size) {
            return bad(format!(
                "chunk_size {} is outside {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}",
                self.chunk_size
            ));
        }
        if !self.chunk_size.is_multiple_of(4 * KIB) {
            return bad(format!(
                "chunk_size {} is not a multiple of 4 KiB",
                self.chunk_size
            ));
        }
        if self.memory_capacity < 2 * self.chunk_size {
            return bad(format!(
                "memory_capacity {} holds fewer than two chunks of {}",
                self.memory_capacity, self.chunk_size
            ));
        }
        if usize::try_from(self.memory_capacity).is_err() {
            return bad(format!(
                "memory_capacity {} does not fit in memory",
                self.memory_capacity
            ));
        }
        if let Some(disk) = &self.disk {
            let min = MIN_DISK_BLOCKS * self.block_size();
            if disk.capacity < min {
                return bad(format!(
                    "disk capacity {} is below {min} ({MIN_DISK_BLOCKS} blocks of {CHUNKS_PER_BLOCK} chunks)",
                    disk.capacity
                ));
            }
            if usize::try_from(disk.capacity).is_err() {
                return bad(format!("disk capacity {} is too large", disk.capacity));
            }
        }
        if self.readahead_chunks > 0 {
            if self.max_inflight_prefetches == 0 {
                return bad("max_inflight_prefetches is 0 while read-ahead is on".into());
            }
            if self.readahead_budget_bytes < self.chunk_size {
                return bad(format!(
                    "readahead_budget_bytes {} is below one chunk",
                    self.readahead_budget_bytes
                ));
            }
        }
        if self.max_readers == 0 {
            return bad("max_readers is 0".into());
        }
        Ok(())
    }
}
