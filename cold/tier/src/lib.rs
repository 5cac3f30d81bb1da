//! Strata's tiered storage (KIP-405's model): sealed segments move to object storage,
//! a manifest per partition names them, and reads below the local log start come back
//! through the chunk cache as the same batch bytes a local read returns.
//!
//! * [`manifest`]: a partition's list of remote segments (sans-IO);
//! * [`manifest_store`]: the manifest in the bucket, as create-only delta objects plus
//!   snapshots;
//! * [`remote`]: one partition's remote tier: offload, read, time lookup, retention,
//!   orphan cleanup;
//! * [`layout`]: object names;
//! * [`tiered_log`]: one partition's log, local and remote, as readers see it;
//! * [`archiver`]: one partition's offload, remote retention, manifest reloads and
//!   Parquet conversion, driven by the broker's scheduler.

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
pub use tiered_log::{AttachError, ParquetCoverage, ReadError, TieredLog};
pub use tiering::{HostedPartition, HostedTopic, ReplicaView, RoundSettings, TableConfig, Tiering};
