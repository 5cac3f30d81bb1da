//! Counters: exported through the `metrics` facade and kept locally so that
//! `strata tier status` can read the hit ratio without a metrics backend.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use metrics::{Unit, counter, describe_counter};

pub(crate) const HITS: &str = "strata_cache_hits_total";
pub(crate) const MISSES: &str = "strata_cache_misses_total";
pub(crate) const READAHEAD: &str = "strata_cache_readahead_total";
pub(crate) const SOURCE_BYTES: &str = "strata_cache_source_bytes_total";
pub(crate) const SOURCE_READS: &str = "strata_cache_source_reads_total";
pub(crate) const SOURCE_ERRORS: &str = "strata_cache_source_errors_total";
pub(crate) const READAHEAD_THROTTLED: &str = "strata_cache_readahead_throttled_total";

pub(crate) fn describe() {
    describe_counter!(
        HITS,
        Unit::Count,
        "Chunk lookups served without waiting on object storage, by tier (memory, disk, readahead)"
    );
    describe_counter!(
        MISSES,
        Unit::Count,
        "Chunk lookups that waited on an object-storage read"
    );
    describe_counter!(READAHEAD, Unit::Count, "Read-ahead prefetches started");
    describe_counter!(
        READAHEAD_THROTTLED,
        Unit::Count,
        "Read-ahead prefetches refused by the global in-flight or budget bound"
    );
    describe_counter!(
        SOURCE_BYTES,
        Unit::Bytes,
        "Bytes read from object storage into the cache"
    );
    describe_counter!(
        SOURCE_READS,
        Unit::Count,
        "Ranged reads sent to object storage"
    );
    describe_counter!(
        SOURCE_ERRORS,
        Unit::Count,
        "Failed object-storage reads (including wrong-length bodies)"
    );
}

/// Where a chunk lookup was served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HitTier {
    Memory,
    Disk,
    Readahead,
}

impl HitTier {
    fn label(self) -> &'static str {
        match self {
            HitTier::Memory => "memory",
            HitTier::Disk => "disk",
            HitTier::Readahead => "readahead",
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    readahead_hits: AtomicU64,
    misses: AtomicU64,
    readahead_issued: AtomicU64,
    readahead_throttled: AtomicU64,
    source_reads: AtomicU64,
    source_bytes: AtomicU64,
    source_errors: AtomicU64,
}

impl Counters {
    pub fn hit(&self, tier: HitTier, n: u64) {
        if n == 0 {
            return;
        }
        let c = match tier {
            HitTier::Memory => &self.memory_hits,
            HitTier::Disk => &self.disk_hits,
            HitTier::Readahead => &self.readahead_hits,
        };
        c.fetch_add(n, Relaxed);
        counter!(HITS, "tier" => tier.label()).increment(n);
    }

    pub fn miss(&self) {
        self.misses.fetch_add(1, Relaxed);
        counter!(MISSES).increment(1);
    }

    pub fn readahead(&self, issued: u64, throttled: u64) {
        if issued > 0 {
            self.readahead_issued.fetch_add(issued, Relaxed);
            counter!(READAHEAD).increment(issued);
        }
        if throttled > 0 {
            self.readahead_throttled.fetch_add(throttled, Relaxed);
            counter!(READAHEAD_THROTTLED).increment(throttled);
        }
    }

    pub fn source_read(&self) {
        self.source_reads.fetch_add(1, Relaxed);
        counter!(SOURCE_READS).increment(1);
    }

    pub fn source_bytes(&self, n: u64) {
        self.source_bytes.fetch_add(n, Relaxed);
        counter!(SOURCE_BYTES).increment(n);
    }

    pub fn source_error(&self) {
        self.source_errors.fetch_add(1, Relaxed);
        counter!(SOURCE_ERRORS).increment(1);
    }

    pub fn snapshot(&self) -> CacheStats {
        let memory_hits = self.memory_hits.load(Relaxed);
        let disk_hits = self.disk_hits.load(Relaxed);
        let readahead_hits = self.readahead_hits.load(Relaxed);
        CacheStats {
            hits: memory_hits + disk_hits + readahead_hits,
            misses: self.misses.load(Relaxed),
            memory_hits,
            disk_hits,
            readahead_hits,
            readahead_issued: self.readahead_issued.load(Relaxed),
            readahead_throttled: self.readahead_throttled.load(Relaxed),
            source_reads: self.source_reads.load(Relaxed),
            source_bytes: self.source_bytes.load(Relaxed),
            source_errors: self.source_errors.load(Relaxed),
            ..CacheStats::default()
        }
    }
}

/// A snapshot of the cache's counters and occupancy (for `strata tier status`).
///
/// Counts are per chunk lookup: a read spanning three chunks is three lookups.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups served without waiting on the source (`memory_hits + disk_hits + readahead_hits`).
    pub hits: u64,
    /// Lookups that waited on a source read (their own, or one already in flight).
    pub misses: u64,
    /// Hits in the memory tier (including a reader re-reading the chunk it holds).
    pub memory_hits: u64,
    /// Hits in the disk tier.
    pub disk_hits: u64,
    /// Hits on a chunk prefetched for this reader and ready before it asked.
    pub readahead_hits: u64,
    /// Prefetches started.
    pub readahead_issued: u64,
    /// Prefetches refused by the global in-flight or budget bound.
    pub readahead_throttled: u64,
    /// Reads sent to the source.
    pub source_reads: u64,
    /// Bytes read from the source.
    pub source_bytes: u64,
    /// Failed source reads (errors and wrong-length bodies).
    pub source_errors: u64,
    /// Bytes of chunks in the memory tier.
    pub memory_used_bytes: u64,
    /// Memory tier capacity.
    pub memory_capacity_bytes: u64,
    /// Disk tier capacity (0 without a disk tier).
    pub disk_capacity_bytes: u64,
    /// Bytes written to the disk tier since start.
    pub disk_write_bytes: u64,
    /// Bytes read from the disk tier since start.
    pub disk_read_bytes: u64,
    /// Readers currently tracked.
    pub readers: u64,
    /// Prefetch reads in flight at the source.
    pub readahead_inflight: u64,
    /// Prefetched chunks waiting for their reader.
    pub readahead_held: u64,
}

impl CacheStats {
    /// `hits / (hits + misses)`, or 0 before any lookup.
    pub fn hit_ratio(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}
