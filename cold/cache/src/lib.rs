//! Strata's cache of object-storage chunks (strata-cache).
//!
//! A consumer a day behind reads segments that live only in object storage.
//! [`ChunkCache`] sits between the remote reader (`cold/tier`) and the object
//! store: it reads objects in fixed-size chunks, keeps them in a foyer hybrid
//! cache (memory, then a local disk directory), shares one source read among
//! concurrent readers of a chunk, and reads ahead of sequential readers so a
//! catching-up consumer does not wait on a cold GET after its first.
//!
//! The store is reached through the narrow [`ChunkSource`] trait defined here;
//! `cold/tier` adapts `cold/store` to it (`strata_tier::StoreSource`). The cache's
//! memory tier evicts with S3-FIFO by default, so one scan does not flush what other
//! readers use.
//!
//! Modules (private; their types are re-exported here):
//!
//! * `cache.rs`: [`ChunkCache`], the read path: memory, then disk, else one source read
//!   shared by every concurrent reader of the chunk.
//! * `readahead.rs`: sequential-reader detection per [`ReaderId`] and read-ahead
//!   planning, within a per-reader and a global budget.
//! * `source.rs`: [`ChunkSource`], what the cache needs of object storage.
//! * `config.rs`: [`CacheConfig`], validated, with defaults for `strata serve`.
//! * `key.rs`: the key of one chunk of one object.
//! * `stats.rs`: [`CacheStats`], counters for `/metrics` and `strata tier status`.
//! * `foyer_metrics.rs`: foyer's own metrics, bridged to `/metrics`.
//! * `error.rs`: [`CacheError`].

mod cache;
mod config;
mod error;
mod foyer_metrics;
mod key;
mod readahead;
mod source;
mod stats;

pub use cache::ChunkCache;
pub use config::{CacheConfig, DiskConfig, EvictionPolicy, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE};
pub use error::{CacheError, Result};
pub use readahead::ReaderId;
pub use source::{ChunkSource, SourceError, SourceErrorKind};
pub use stats::CacheStats;
