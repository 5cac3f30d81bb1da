//! Strata's cache of object-storage chunks.
//!
//! A consumer a day behind reads segments that live only in object storage.
//! [`ChunkCache`] sits between the remote reader (`cold/tier`) and the object
//! store: it reads objects in fixed-size chunks, keeps them in a foyer hybrid
//! cache (memory, then a local disk directory), shares one source read among
//! concurrent readers of a chunk, and reads ahead of sequential readers so a
//! catching-up consumer does not wait on a cold GET after its first.
//!
//! The store is reached through the narrow [`ChunkSource`] trait defined here;
//! `cold/tier` adapts `cold/store` to it.

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
