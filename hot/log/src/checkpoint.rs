//! Small checkpoint files holding one offset, replaced atomically.

use std::fs;
use std::io::Write;
use std::path::Path;

use strata_proto::Offset;

use crate::epoch::{self, LeaderEpochCache};
use crate::error::LogError;

/// Reads a checkpoint; `None` if absent or unreadable (a torn checkpoint is treated as
/// absent: every checkpoint we keep is a lower bound that is safe to lose).
pub(crate) fn read(path: &Path) -> Option<Offset> {
    let text = fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None; // unknown version
    }
    let value: Offset = lines.next()?.trim().parse().ok()?;
    // The trailing "end" line proves the write was complete.
    (lines.next()? == "end").then_some(value)
}

/// Writes a checkpoint: temp file, fsync, rename. With `sync_dir` the rename itself is
/// made durable too (needed when the value must not go backwards after a crash).
pub(crate) fn write(path: &Path, value: Offset, sync_dir: bool) -> Result<(), LogError> {
    write_bytes(path, format!("0\n{value}\nend\n").as_bytes(), sync_dir)
}

/// Replaces the file at `path` with `bytes` atomically: temp file, fsync, rename, and
/// with `sync_dir` an fsync of the directory.
pub(crate) fn write_bytes(path: &Path, bytes: &[u8], sync_dir: bool) -> Result<(), LogError> {
    replace(path, bytes, true)?;
    if sync_dir && let Some(dir) = path.parent() {
        sync_directory(dir)?;
    }
    Ok(())
}

/// The leader-epoch checkpoint at `path`; `None` if absent, torn or invalid (the caller
/// rebuilds the cache from the batches then).
pub(crate) fn read_epochs(path: &Path) -> Option<LeaderEpochCache> {
    epoch::decode(&fs::read(path).ok()?)
}

/// Writes the leader-epoch checkpoint durably (rename and directory fsynced): an entry
/// that came back after a crash could describe batches the log no longer has.
pub(crate) fn write_epochs(path: &Path, cache: &LeaderEpochCache) -> Result<(), LogError> {
    write_bytes(path, &epoch::encode(cache), true)
}

/// Writes the leader-epoch checkpoint without waiting for the device: temp file and
/// rename, no fsync. For an epoch assigned at the log end or ahead of the batches it
/// describes (Kafka does the same since KAFKA-15046): the log fsyncs it and its rename
/// (`sync_epochs`) before its recovery point passes those batches, and recovery adds
/// back an entry for batches above the recovery point that a power loss took from the
/// file (a torn file reads as absent and is rebuilt from the batches).
pub(crate) fn write_epochs_unsynced(path: &Path, cache: &LeaderEpochCache) -> Result<(), LogError> {
    replace(path, &epoch::encode(cache), false)
}

/// Writes `bytes` to a temp file (fsynced with `sync`) and renames it over `path`.
fn replace(path: &Path, bytes: &[u8], sync: bool) -> Result<(), LogError> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).map_err(LogError::io("create", &tmp))?;
    f.write_all(bytes).map_err(LogError::io("write", &tmp))?;
    if sync {
        f.sync_all().map_err(LogError::io("fsync", &tmp))?;
    }
    fs::rename(&tmp, path).map_err(LogError::io("rename", path))
}

/// fsyncs the file at `path` if it exists.
pub(crate) fn sync_file(path: &Path) -> Result<(), LogError> {
    match fs::File::open(path) {
        Ok(f) => f.sync_all().map_err(LogError::io("fsync", path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("open", path)(e)),
    }
}

/// fsyncs a directory so that created, renamed and removed entries are durable.
pub(crate) fn sync_directory(dir: &Path) -> Result<(), LogError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(LogError::io("fsync dir", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cp");
        assert_eq!(read(&p), None);
        write(&p, 42, true).unwrap();
        assert_eq!(read(&p), Some(42));
        fs::write(&p, "0\n43\n").unwrap();
        assert_eq!(read(&p), None);
        fs::write(&p, "garbage").unwrap();
        assert_eq!(read(&p), None);
    }
}
