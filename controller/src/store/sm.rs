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
use crate::state::{ClusterMetadata, Command, CommandOutput, CommandResult};
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
    recent: RecentCommands,
}

/// Most commands kept for deltas; a broker further behind gets the whole metadata.
const RECENT_COMMANDS: usize = 1024;
/// Most bytes (as JSON) of commands kept for deltas.
const RECENT_BYTES: usize = 16 << 20;

/// The accepted commands that made the last versions of the metadata, oldest first: what
/// a delta from a recent version is made of. Empty after a start or a snapshot install
/// (the snapshot has no commands); filled again as commands apply.
#[derive(Default)]
struct RecentCommands {
    /// `(version it made, log index, command, its JSON size)`.
    commands: std::collections::VecDeque<(u64, u64, Command, usize)>,
    bytes: usize,
}

impl RecentCommands {
    fn push(&mut self, version: u64, index: u64, command: Command) {
        let size = serde_json::to_vec(&command).map_or(usize::MAX, |v| v.len());
        if size > RECENT_BYTES {
            // Too big to keep: the next delta cannot reach over it.
            self.clear();
            return;
        }
        self.bytes += size;
        self.commands.push_back((version, index, command, size));
        while self.commands.len() > RECENT_COMMANDS || self.bytes > RECENT_BYTES {
            if let Some((.., size)) = self.commands.pop_front() {
                self.bytes -= size;
            }
        }
    }

    fn clear(&mut self) {
        self.commands.clear();
        self.bytes = 0;
    }

    /// The commands after `since` up to `current`, if every one is kept.
    fn since(&self, since: u64, current: u64) -> Option<Vec<(u64, Command)>> {
        let first = self.commands.front()?.0;
        let last = self.commands.back()?.0;
        if since + 1 < first || last != current || since >= current {
            return None;
        }
        let skip = usize::try_from(since + 1 - first).ok()?;
        Some(
            self.commands
                .iter()
                .skip(skip)
                .map(|(_, index, c, _)| (*index, c.clone()))
                .collect(),
        )
    }
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
            recent: RecentCommands::default(),
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

    /// The metadata now and, if it is newer than `since` and every command after `since`
    /// is still kept, those commands with their log indexes (a delta from `since`).
    pub fn metadata_since(
        &self,
        since: u64,
    ) -> (Arc<ClusterMetadata>, Option<Vec<(u64, Command)>>) {
        let st = self.read();
        let commands = st.recent.since(since, st.meta.version);
        (st.meta.clone(), commands)
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
                recent,
                ..
            } = &mut *st;
            // Copy-on-write: readers holding the previous Arc keep a consistent copy.
            let meta = Arc::make_mut(meta);
            let mut out = Vec::new();
            for e in entries {
                *last_applied = Some(e.log_id);
                out.push(match e.payload {
                    EntryPayload::Blank => Ok(CommandOutput::Done),
                    EntryPayload::Normal(cmd) => {
                        let out = meta.apply(&cmd, e.log_id.index);
                        if out.is_ok() {
                            recent.push(meta.version, e.log_id.index, cmd);
                        }
                        out
                    }
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
            st.recent.clear();
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn cmd(count: i64) -> Command {
        Command::AllocateProducerIds { count }
    }

    #[test]
    fn a_delta_needs_every_command_since_the_asked_version() {
        let mut r = RecentCommands::default();
        assert_eq!(r.since(0, 0), None);
        for v in 11..=20 {
            r.push(v, v * 10, cmd(v as i64));
        }
        // From 10 (the version before the oldest kept command) to 20.
        let all = r.since(10, 20).unwrap();
        assert_eq!(all.len(), 10);
        assert_eq!(all[0], (110, cmd(11)));
        assert_eq!(
            r.since(17, 20).unwrap(),
            vec![(180, cmd(18)), (190, cmd(19)), (200, cmd(20))]
        );
        // Older than what is kept, already current, or kept commands behind the state.
        assert_eq!(r.since(9, 20), None);
        assert_eq!(r.since(20, 20), None);
        assert_eq!(r.since(15, 21), None);
    }

    #[test]
    fn kept_commands_are_bounded_by_count_and_bytes() {
        let mut r = RecentCommands::default();
        for v in 1..=(RECENT_COMMANDS as u64 + 10) {
            r.push(v, v, cmd(1));
        }
        assert_eq!(r.commands.len(), RECENT_COMMANDS);
        assert_eq!(r.commands.front().unwrap().0, 11);
        assert!(r.since(10, RECENT_COMMANDS as u64 + 10).is_some());
        assert!(r.since(9, RECENT_COMMANDS as u64 + 10).is_none());

        // A command bigger than the whole budget is not kept, and no delta reaches over
        // it.
        let big = Command::SetTopicConfigs {
            name: "t".into(),
            configs: BTreeMap::from([("x".into(), "y".repeat(RECENT_BYTES))]),
        };
        r.push(RECENT_COMMANDS as u64 + 11, 1, big);
        assert!(r.commands.is_empty());
        assert_eq!(r.bytes, 0);
        r.push(RECENT_COMMANDS as u64 + 12, 2, cmd(1));
        assert!(
            r.since(RECENT_COMMANDS as u64 + 10, RECENT_COMMANDS as u64 + 12)
                .is_none()
        );
        assert!(
            r.since(RECENT_COMMANDS as u64 + 11, RECENT_COMMANDS as u64 + 12)
                .is_some()
        );
    }
}
