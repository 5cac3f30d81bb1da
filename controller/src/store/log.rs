//! The raft log: CRC-framed entries in append-only segment files, plus the vote.
//!
//! Entries are also kept in memory (the metadata log is small and snapshots purge it),
//! so replication reads never touch the disk; the files exist to survive restarts.
//! Writes run on tokio's blocking pool: an fsync must not stall the async workers.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, OptionalSend, RaftLogReader, StorageIOError};

use super::StoreError;
use super::file::{Frame, encode_frame, read_frame, read_frames, sync_dir, write_atomic};
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// The default size at which a new segment file is started.
pub const DEFAULT_SEGMENT_BYTES: u64 = 8 << 20;

/// The durable raft log and vote of one voter. Cheap to clone (shared).
#[derive(Clone)]
pub struct LogStore {
    mem: Arc<RwLock<LogMem>>,
    files: Arc<Mutex<LogFiles>>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mem = read(&self.mem);
        f.debug_struct("LogStore")
            .field("entries", &mem.entries.len())
            .field("purged", &mem.purged)
            .field("vote", &mem.vote)
            .finish()
    }
}

#[derive(Default)]
struct LogMem {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    entries: BTreeMap<u64, Entry>,
}

struct LogFiles {
    dir: PathBuf,
    log_dir: PathBuf,
    segment_bytes: u64,
    /// Segment first index -> file length.
    segments: BTreeMap<u64, u64>,
    /// Entry index -> (segment first index, byte offset of its frame).
    positions: BTreeMap<u64, (u64, u64)>,
    /// The last segment, open for appending.
    active: Option<(u64, File)>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(l: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

fn segment_path(log_dir: &Path, base: u64) -> PathBuf {
    log_dir.join(format!("{base:020}.log"))
}

fn decode<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn encode<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("log types serialize to JSON")
}

/// Reads a single-frame file.
fn read_one<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match read_frames(path)? {
        None => Ok(None),
        Some(frames) => match frames.as_slice() {
            [one] => decode(path, one).map(Some),
            _ => Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("{} frames, expected one", frames.len()),
            }),
        },
    }
}

fn to_storage(e: StoreError, what: fn(AnyError) -> StorageIOError<u64>) -> StorageError {
    what(AnyError::new(&e)).into()
}

async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(StoreError::Io {
            path: PathBuf::new(),
            source: std::io::Error::other(format!("storage task failed: {e}")),
        }),
    }
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, cutting off a torn tail of the last segment.
    pub fn open(dir: &Path, segment_bytes: u64) -> Result<LogStore, StoreError> {
        let log_dir = dir.join("log");
        fs::create_dir_all(&log_dir).map_err(StoreError::io(&log_dir))?;
        let vote: Option<Vote> = read_one(&dir.join("vote"))?;
        let purged: Option<LogId> = read_one(&dir.join("purged"))?;
        // Written without fsync: a damaged copy is only a lost hint.
        let committed: Option<LogId> = read_one(&dir.join("committed")).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "ignoring the committed-log-id hint");
            None
        });

        let mut bases = Vec::new();
        for item in fs::read_dir(&log_dir).map_err(StoreError::io(&log_dir))? {
            let item = item.map_err(StoreError::io(&log_dir))?;
            let name = item.file_name();
            let name = name.to_string_lossy();
            if let Some(base) = name
                .strip_suffix(".log")
                .and_then(|s| s.parse::<u64>().ok())
            {
                bases.push(base);
            }
        }
        bases.sort_unstable();

        let mut mem = LogMem {
            vote,
            committed,
            purged,
            entries: BTreeMap::new(),
        };
        let mut files = LogFiles {
            dir: dir.to_path_buf(),
            log_dir: log_dir.clone(),
            segment_bytes: segment_bytes.max(1),
            segments: BTreeMap::new(),
            positions: BTreeMap::new(),
            active: None,
        };
        let purged_index = purged.map(|l| l.index);
        let mut prev: Option<u64> = None;
        for (i, base) in bases.iter().copied().enumerate() {
            let last_segment = i + 1 == bases.len();
            let path = segment_path(&log_dir, base);
            let buf = fs::read(&path).map_err(StoreError::io(&path))?;
            let mut at = 0;
            loop {
                match read_frame(&buf, at) {
                    Frame::Ok(payload, next) => {
                        let entry: Entry = decode(&path, payload)?;
                        let index = entry.log_id.index;
                        if let Some(p) = prev {
                            // Segments wholly below the purge point may outlive a crash
                            // between the purge record and their removal.
                            let below_purge =
                                purged_index.is_some_and(|f| p <= f && index <= f + 1);
                            if index != p + 1 && !below_purge {
                                return Err(StoreError::Corrupt {
                                    path,
                                    reason: format!("entry {index} follows entry {p}"),
                                });
                            }
                        }
                        prev = Some(index);
                        files.positions.insert(index, (base, at as u64));
                        if purged_index.is_none_or(|p| index > p) {
                            mem.entries.insert(index, entry);
                        }
                        at = next;
                    }
                    Frame::End => break,
                    Frame::Torn(reason) if last_segment => {
                        // A crash mid-append: the entry was never acknowledged (the
                        // flush callback runs after fsync), so cutting it off is safe.
                        tracing::warn!(path = %path.display(), offset = at, %reason, "cutting off a torn log tail");
                        let f = OpenOptions::new()
                            .write(true)
                            .open(&path)
                            .map_err(StoreError::io(&path))?;
                        f.set_len(at as u64).map_err(StoreError::io(&path))?;
                        f.sync_all().map_err(StoreError::io(&path))?;
                        break;
                    }
                    Frame::Torn(reason) | Frame::Corrupt(reason) => {
                        return Err(StoreError::Corrupt {
                            path,
                            reason: format!("at byte {at}: {reason}"),
                        });
                    }
                }
            }
            files.segments.insert(base, at as u64);
        }
        if let Some((&base, _)) = files.segments.iter().next_back() {
            let path = segment_path(&log_dir, base);
            let f = OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(StoreError::io(&path))?;
            files.active = Some((base, f));
        }
        Ok(LogStore {
            mem: Arc::new(RwLock::new(mem)),
            files: Arc::new(Mutex::new(files)),
        })
    }

    /// The vote as last saved.
    pub fn vote(&self) -> Option<Vote> {
        read(&self.mem).vote
    }

    /// Whether this voter has ever been part of a cluster (a vote or any log).
    pub fn is_pristine(&self) -> bool {
        let m = read(&self.mem);
        m.vote.is_none() && m.entries.is_empty() && m.purged.is_none()
    }
}

impl LogFiles {
    fn append(&mut self, frames: Vec<(u64, Vec<u8>)>) -> Result<(), StoreError> {
        let Some(&(first_index, _)) = frames.first() else {
            return Ok(());
        };
        // Openraft truncates conflicting entries before appending; be safe regardless.
        if self.positions.range(first_index..).next().is_some() {
            self.truncate(first_index)?;
        }
        let mut pending: Vec<u8> = Vec::new();
        for (index, frame) in frames {
            let roll = match &self.active {
                None => true,
                Some((base, _)) => {
                    self.segments.get(base).copied().unwrap_or(0) + pending.len() as u64
                        >= self.segment_bytes
                        && self.segments.get(base).copied().unwrap_or(0) > 0
                }
            };
            if roll {
                self.flush_pending(&mut pending)?;
                let path = segment_path(&self.log_dir, index);
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(StoreError::io(&path))?;
                sync_dir(&path).map_err(StoreError::io(&path))?;
                self.segments.insert(index, 0);
                self.active = Some((index, f));
            }
            let (base, _) = self.active.as_ref().expect("rolled above");
            let base = *base;
            let offset = self.segments[&base] + pending.len() as u64;
            self.positions.insert(index, (base, offset));
            pending.extend_from_slice(&frame);
        }
        self.flush_pending(&mut pending)
    }

    /// Writes and fsyncs `pending` to the active segment.
    fn flush_pending(&mut self, pending: &mut Vec<u8>) -> Result<(), StoreError> {
        if pending.is_empty() {
            return Ok(());
        }
        let Some((base, f)) = self.active.as_mut() else {
            return Ok(());
        };
        let path = segment_path(&self.log_dir, *base);
        f.write_all(pending).map_err(StoreError::io(&path))?;
        f.sync_data().map_err(StoreError::io(&path))?;
        *self.segments.entry(*base).or_default() += pending.len() as u64;
        pending.clear();
        Ok(())
    }

    /// Removes entries from `index` on, from the files.
    fn truncate(&mut self, index: u64) -> Result<(), StoreError> {
        let Some((_, &(seg, offset))) = self.positions.range(index..).next() else {
            return Ok(());
        };
        self.positions.retain(|i, _| *i < index);
        self.active = None;
        let later: Vec<u64> = self.segments.range(seg + 1..).map(|(b, _)| *b).collect();
        for base in later.into_iter().rev() {
            let path = segment_path(&self.log_dir, base);
            fs::remove_file(&path).map_err(StoreError::io(&path))?;
            self.segments.remove(&base);
        }
        let path = segment_path(&self.log_dir, seg);
        if offset == 0 {
            fs::remove_file(&path).map_err(StoreError::io(&path))?;
            self.segments.remove(&seg);
        } else {
            let f = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(StoreError::io(&path))?;
            f.set_len(offset).map_err(StoreError::io(&path))?;
            f.sync_all().map_err(StoreError::io(&path))?;
            self.segments.insert(seg, offset);
        }
        sync_dir(&path).map_err(StoreError::io(&path))?;
        self.reopen_active()
    }

    fn reopen_active(&mut self) -> Result<(), StoreError> {
        self.active = None;
        if let Some((&base, _)) = self.segments.iter().next_back() {
            let path = segment_path(&self.log_dir, base);
            let f = OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(StoreError::io(&path))?;
            self.active = Some((base, f));
        }
        Ok(())
    }

    /// Records the purge point, then deletes segments holding only purged entries.
    fn purge(&mut self, upto: LogId) -> Result<(), StoreError> {
        write_atomic(&self.dir.join("purged"), &[&encode(&upto)], true)?;
        self.positions.retain(|i, _| *i > upto.index);
        let bases: Vec<u64> = self.segments.keys().copied().collect();
        let mut removed = false;
        for base in bases {
            // A segment is wholly purged when no kept entry lives in it.
            let live = self.positions.values().any(|(b, _)| *b == base);
            let is_active = self.active.as_ref().is_some_and(|(a, _)| *a == base);
            if !live && (!is_active || self.positions.is_empty()) {
                let path = segment_path(&self.log_dir, base);
                fs::remove_file(&path).map_err(StoreError::io(&path))?;
                self.segments.remove(&base);
                removed = true;
            }
        }
        if removed {
            sync_dir(&segment_path(&self.log_dir, 0)).map_err(StoreError::io(&self.log_dir))?;
            if self
                .active
                .as_ref()
                .is_some_and(|(a, _)| !self.segments.contains_key(a))
            {
                self.reopen_active()?;
            }
        }
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(read(&self.mem)
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let m = read(&self.mem);
        let last = m
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(m.purged);
        Ok(LogState {
            last_purged_log_id: m.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let files = self.files.clone();
        let bytes = encode(vote);
        blocking(move || {
            let dir = lock(&files).dir.clone();
            write_atomic(&dir.join("vote"), &[&bytes], true)
        })
        .await
        .map_err(|e| to_storage(e, StorageIOError::write_vote))?;
        write(&self.mem).vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(read(&self.mem).vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let files = self.files.clone();
        let bytes = encode(&committed);
        // Not fsynced: openraft re-derives the committed index from the quorum anyway;
        // this only lets a restarted voter apply its log before it hears from a leader.
        blocking(move || {
            let dir = lock(&files).dir.clone();
            write_atomic(&dir.join("committed"), &[&bytes], false)
        })
        .await
        .map_err(|e| to_storage(e, StorageIOError::write))?;
        write(&self.mem).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(read(&self.mem).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let frames: Vec<(u64, Vec<u8>)> = entries
            .iter()
            .map(|e| {
                let mut f = Vec::new();
                encode_frame(&encode(e), &mut f);
                (e.log_id.index, f)
            })
            .collect();
        let files = self.files.clone();
        let result = blocking(move || lock(&files).append(frames)).await;
        match result {
            Ok(()) => {
                {
                    let mut m = write(&self.mem);
                    if let Some(first) = entries.first() {
                        let from = first.log_id.index;
                        m.entries.retain(|i, _| *i < from);
                    }
                    for e in entries {
                        m.entries.insert(e.log_id.index, e);
                    }
                }
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let io = std::io::Error::other(e.to_string());
                callback.log_io_completed(Err(io));
                Err(to_storage(e, StorageIOError::write_logs))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let files = self.files.clone();
        let index = log_id.index;
        // Drop from memory first: a reader must never see entries the files no longer
        // hold (openraft does not read them anyway while it truncates).
        write(&self.mem).entries.retain(|i, _| *i < index);
        blocking(move || lock(&files).truncate(index))
            .await
            .map_err(|e| to_storage(e, StorageIOError::write_logs))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let files = self.files.clone();
        blocking(move || lock(&files).purge(log_id))
            .await
            .map_err(|e| to_storage(e, StorageIOError::write_logs))?;
        let mut m = write(&self.mem);
        m.purged = Some(log_id);
        m.entries.retain(|i, _| *i > log_id.index);
        Ok(())
    }
}
