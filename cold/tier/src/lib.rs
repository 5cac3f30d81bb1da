//! Strata's tiered storage.
//!
//! * [`manifest`]: a partition's list of remote segments, persisted as an append-only
//!   log of create-only delta objects plus periodic snapshots.

pub mod manifest;

pub use manifest::{Delta, Manifest, ManifestError, ManifestOp, RemoteSegment};
