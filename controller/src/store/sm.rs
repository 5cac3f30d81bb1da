//! The state machine: [`ClusterMetadata`] in memory, snapshots on disk.
//!
//! Applied state is not written per command: after a restart, openraft re-applies the
//! log from the last snapshot (the log store keeps what the snapshot does not cover).
//! A snapshot is one file, `snapshot`, replaced atomically: a frame with the snapshot's
//! meta (last log id, membership, id), then a frame with the metadata as JSON.

use std::fmt::Debug;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use tokio::sync::watch;

use super::StoreError;
use super::file::{read_frames, write_atomic};
use crate::state::{ClusterMetadata, CommandOutput, CommandResult};
use crate::types::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};

type Snapshot = openraft::Snapshot<TypeConfig>;

/// The replicated metadata of one voter. Cheap to clone (shared).
#[derive(Clone)]
pub struct StateMachineStore {
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    state: RwLock<SmState>,
    /// The metadata version after every apply; long polls wait on it.
    version: watch::Sender<u64>,
    snapshot_seq: AtomicU64,
    /// Serialises snapshot file writes (a build and an install may overlap).
    snapshot_io: tokio::sync::Mutex<()>,
}

struct SmState {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    meta: Arc<ClusterMetadata>,
    current: Option<StoredSnapshot>,
}

#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

impl Debug for StateMachineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.read();
        f.debug_struct("StateMachineStore")
            .field("last_applied", &st.last_applied)
            .field("version", &st.meta.version)
            .finish()
    }
}

fn corrupt(path: &Path, reason: impl ToString) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

impl StateMachineStore {
    /// Opens the state machine of `dir`, starting from its snapshot if there is one.
    pub fn open(dir: &Path) -> Result<StateMachineStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(StoreError::io(dir))?;
        let path = dir.join("snapshot");
        let mut state = SmState {
            last_applied: None,
            membership: StoredMembership::default(),
            meta: Arc::new(ClusterMetadata::default()),
            current: None,
        };
        if let Some(frames) = read_frames(&path)? {
            let [meta, data] = frames.as_slice() else {
                return Err(corrupt(
                    &path,
                    format!("{} frames, expected 2", frames.len()),
                ));
            };
            let meta: SnapshotMeta = serde_json::from_slice(meta).map_err(|e| corrupt(&path, e))?;
            let metadata: ClusterMetadata =
                serde_json::from_slice(data).map_err(|e| corrupt(&path, e))?;
            state.last_applied = meta.last_log_id;
            state.membership = meta.last_membership.clone();
            state.meta = Arc::new(metadata);
            state.current = Some(StoredSnapshot {
                meta,
                data: data.clone(),
            });
        }
        let (version, _) = watch::channel(state.meta.version);
        Ok(StateMachineStore {
            shared: Arc::new(Shared {
                dir: dir.to_path_buf(),
                state: RwLock::new(state),
                version,
                snapshot_seq: AtomicU64::new(0),
                snapshot_io: tokio::sync::Mutex::new(()),
            }),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, SmState> {
        self.shared.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, SmState> {
        self.shared.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The metadata as applied so far on this voter.
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.read().meta.clone()
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId> {
        self.read().last_applied
    }

    /// Watches the metadata version.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.version.subscribe()
    }

    async fn write_snapshot(&self, snap: &StoredSnapshot) -> Result<(), StoreError> {
        let path = self.shared.dir.join("snapshot");
        let meta = serde_json::to_vec(&snap.meta).expect("snapshot meta serializes");
        let data = snap.data.clone();
        let _io = self.shared.snapshot_io.lock().await;
        match tokio::task::spawn_blocking(move || write_atomic(&path, &[&meta, &data], true)).await
        {
            Ok(r) => r,
            Err(e) => Err(StoreError::Io {
                path: self.shared.dir.join("snapshot"),
                source: std::io::Error::other(format!("snapshot task failed: {e}")),
            }),
        }
    }

    /// Makes `snap` the current snapshot unless a newer one already is.
    fn set_current(&self, snap: StoredSnapshot) {
        let mut st = self.write();
        let newer = st
            .current
            .as_ref()
            .is_some_and(|c| c.meta.last_log_id > snap.meta.last_log_id);
        if !newer {
            st.current = Some(snap);
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let (last_applied, membership, meta) = {
            let st = self.read();
            (st.last_applied, st.membership.clone(), st.meta.clone())
        };
        let data = serde_json::to_vec(&*meta).expect("metadata serializes");
        let seq = self.shared.snapshot_seq.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{seq}", l.leader_id, l.index),
            None => format!("--{seq}"),
        };
        let snap = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: last_applied,
                last_membership: membership,
                snapshot_id,
            },
            data,
        };
        self.write_snapshot(&snap).await.map_err(|e| {
            StorageError::from(StorageIOError::write_snapshot(
                Some(snap.meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        self.set_current(snap.clone());
        Ok(Snapshot {
            meta: snap.meta,
            snapshot: Box::new(Cursor::new(snap.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let st = self.read();
        Ok((st.last_applied, st.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let version = {
            let mut st = self.write();
            let SmState {
                last_applied,
                membership,
                meta,
                ..
            } = &mut *st;
            // Copy-on-write: readers holding the previous Arc keep a consistent copy.
            let meta = Arc::make_mut(meta);
            let mut out = Vec::new();
            for e in entries {
                *last_applied = Some(e.log_id);
                out.push(match e.payload {
                    EntryPayload::Blank => Ok(CommandOutput::Done),
                    EntryPayload::Normal(cmd) => meta.apply(&cmd, e.log_id.index),
                    EntryPayload::Membership(m) => {
                        *membership = StoredMembership::new(Some(e.log_id), m);
                        Ok(CommandOutput::Done)
                    }
                });
            }
            (meta.version, out)
        };
        self.shared.version.send_replace(version.0);
        Ok(version.1)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let metadata: ClusterMetadata = serde_json::from_slice(&data).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(
                Some(meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        let snap = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.write_snapshot(&snap).await.map_err(|e| {
            StorageError::from(StorageIOError::write_snapshot(
                Some(meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        let version = metadata.version;
        {
            let mut st = self.write();
            st.last_applied = meta.last_log_id;
            st.membership = meta.last_membership.clone();
            st.meta = Arc::new(metadata);
            st.current = Some(snap);
        }
        self.shared.version.send_replace(version);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self.read().current.clone().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
