//! Strata's tiered storage (strata-tier, KIP-405's model): sealed segments move to object
//! storage, a manifest per partition names them, and reads below the local log start come
//! back through the chunk cache as the same batch bytes a local read returns. It also
//! turns segments into Parquet files (strata-parquet) and publishes them as Iceberg
//! tables (strata-iceberg).
//!
//! It has two homes per partition. What a reader sees, and what local retention may
//! delete, is the partition's [`TieredLog`]. What moves bytes into the bucket and keeps
//! them in shape is its [`Archiver`]. The broker sees the rest through one handle,
//! [`Tiering`]: each round it hands over the topics it hosts and the handle runs their
//! archivers; the [`publisher`] commits the Iceberg tables beside it. The broker reaches
//! the cache, the store and Parquet only through this crate.
//!
//! The seam with strata-log is narrow. strata-log describes a sealed segment
//! (`Log::sealed_segment`: its files, its producer snapshot, its slice of the epoch
//! cache), re-cuts one that straddles the remote end (`Log::recut`), restarts an empty
//! log at the remote end (`Log::restore_at`), reads a range (`Log::read_range`), and
//! offers the two pure pieces a remote read shares with a local one: the index decoder
//! (`index::Indexes`) and the batch-window walk (`window::find_window`). This crate
//! never opens a `Log` and never builds a log file name; the `Log` it reads is the one
//! the broker's `Partition` writes (an `Arc` both hold).
//!
//! * [`tiering`]: [`Tiering`], the broker's one handle: rounds over the hosted topics,
//!   the tier status, the tables' admin calls, a deleted topic's objects, recovery.
//! * [`publisher`]: the Iceberg publisher `strata serve` starts beside the broker.
//! * [`tiered_log`]: [`TieredLog`], one partition's log as readers see it (KIP-405's
//!   `UnifiedLog`): log start, local start, log end, reads local or remote, time lookups,
//!   what local retention may delete.
//! * [`archiver`]: [`Archiver`], one partition's manifest reloads, offload with backoff,
//!   remote retention, orphan sweep, and Parquet conversion and backfill; typed errors
//!   [`ArchiveError`] and [`ParquetError`].
//! * [`service`]: [`Tier`], the broker-wide service: store, cache, upload concurrency and
//!   rate, the remote-read pool; what gets offloaded ([`offload_candidates`]) and the
//!   re-cut of a straddling segment.
//! * [`remote`]: [`RemotePartition`], one partition's remote tier: upload, read through
//!   the cache, time lookup, retention, orphan cleanup, aborted-transaction indexes.
//! * [`manifest`]: a partition's list of remote segments and its operations (sans-IO).
//! * [`manifest_store`]: the manifest in the bucket: create-only delta objects (the
//!   sequence number fences a second leader) plus snapshots.
//! * [`layout`]: object names in the bucket.
//! * [`catalog`]: topic descriptors, so the bucket alone can recover a topic.
//! * [`compaction`]: compaction of a compacted topic's remote segments.
//! * [`one_copy`]: a `remote.storage.format=parquet` topic's reads below the local
//!   start, re-encoded from its Parquet files.
//! * [`parquet_source`]: the bytes Parquet conversion reads: a sealed local segment, or
//!   a remote segment's object by ranged GETs.
//! * [`iceberg`]: a topic's Parquet files as an Iceberg table: one commit, status,
//!   snapshot expiry, orphan removal (the [`publisher`] runs them).
//! * [`source`]: [`StoreSource`], strata-store as the chunk cache's `ChunkSource`.
//! * [`error`]: the tier's error type, [`TierError`].

pub mod archiver;
pub mod catalog;
pub mod compaction;
pub mod error;
pub mod iceberg;
pub mod layout;
pub mod manifest;
pub mod manifest_store;
pub mod one_copy;
pub mod parquet_source;
pub mod publisher;
pub mod remote;
pub mod service;
pub mod source;
pub mod tiered_log;
pub mod tiering;

pub use archiver::{ArchiveError, Archiver, Leadership, ParquetError};
pub use error::TierError;
pub use layout::PartitionKey;
pub use manifest::{Delta, Manifest, ManifestError, ManifestOp, RemoteSegment};
pub use remote::{RemotePartition, RemoteRead};
pub use service::{Tier, TierConfig, offload_candidates, recut, straddling_segment};
pub use source::StoreSource;
pub use strata_parquet::DeadLetter;
pub use tiered_log::{AttachError, ParquetCoverage, ParquetFailure, ReadError, TieredLog};
pub use tiering::{HostedPartition, HostedTopic, ReplicaView, RoundSettings, TableConfig, Tiering};
