//! The openraft type configuration of the metadata quorum.

use std::io::Cursor;

use crate::state::{Command, CommandResult};

/// A controller voter's id (`--node-id`; raft's node id).
pub type NodeId = u64;
/// A broker's id, as Kafka numbers brokers (int32 on the wire).
pub type BrokerId = i32;

openraft::declare_raft_types!(
    /// Openraft types: commands in, results out, `BasicNode { addr }` for a voter's
    /// controller address, snapshots as bytes in memory (the state is small).
    pub TypeConfig:
        D = Command,
        R = CommandResult,
);

pub(crate) type LogId = openraft::LogId<NodeId>;
pub(crate) type Vote = openraft::Vote<NodeId>;
pub(crate) type Entry = openraft::Entry<TypeConfig>;
pub(crate) type StorageError = openraft::StorageError<NodeId>;
pub(crate) type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub(crate) type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;

// Keep `Cursor` visibly used: the macro names it unqualified for `SnapshotData`.
#[allow(dead_code)]
type SnapshotData = Cursor<Vec<u8>>;
