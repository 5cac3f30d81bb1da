//! Producer-state snapshot files: `{offset:020}.snapshot` in the log directory holds the
//! producer state of every batch below `offset` (the encoding is in `producer.rs`).
//! Like Kafka's `.snapshot` files, they only save replay time: any of them may be lost
//! or damaged, and the state is then rebuilt from an older one and the log.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use strata_proto::Offset;

use crate::error::LogError;
use crate::producer::ProducerState;
use crate::segment::file_stem;

const SUFFIX: &str = ".snapshot";

pub(crate) fn path(dir: &Path, offset: Offset) -> PathBuf {
    dir.join(format!("{}{SUFFIX}", file_stem(offset)))
}

/// The offsets of the snapshot files in `dir`, ascending.
pub(crate) fn list(dir: &Path) -> Result<Vec<Offset>, LogError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        let name = entry.file_name();
        if let Some(offset) = name
            .to_str()
            .and_then(|n| n.strip_suffix(SUFFIX))
            .and_then(|stem| stem.parse::<Offset>().ok())
            .filter(|&o| o >= 0)
        {
            out.push(offset);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Writes the state as the snapshot at `offset`: temp file, fsync, rename, so a reader
/// sees either the old file or the whole new one. With `sync_dir` the rename is made
/// durable too; otherwise the caller fsyncs the directory (or accepts losing the file,
/// which costs only replay time).
pub(crate) fn write(
    dir: &Path,
    offset: Offset,
    state: &ProducerState,
    sync_dir: bool,
) -> Result<(), LogError> {
    let path = path(dir, offset);
    // "….snapshot.tmp": `Log::open` removes every *.tmp left by a crash.
    let tmp = path.with_extension("snapshot.tmp");
    let mut f = fs::File::create(&tmp).map_err(LogError::io("create", &tmp))?;
    f.write_all(&state.encode_snapshot(offset))
        .map_err(LogError::io("write", &tmp))?;
    f.sync_all().map_err(LogError::io("fsync", &tmp))?;
    fs::rename(&tmp, &path).map_err(LogError::io("rename", &path))?;
    if sync_dir {
        crate::checkpoint::sync_directory(dir)?;
    }
    Ok(())
}

pub(crate) fn remove(dir: &Path, offset: Offset) -> Result<(), LogError> {
    let p = path(dir, offset);
    match fs::remove_file(&p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LogError::io("delete", &p)(e)),
        _ => Ok(()),
    }
}

/// What [`load_latest`] found.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// The newest valid snapshot at or below the log end, and its state.
    pub snapshot: Option<(Offset, ProducerState)>,
    /// Snapshots deleted: past the log end (left by a truncation; they describe batches
    /// that are gone) or undecodable.
    pub rejected: Vec<Offset>,
}

/// Loads the newest valid snapshot at or below `log_end`, deleting the newer ones and
/// the damaged ones it meets on the way. A stale snapshot must not survive: once the log
/// grows past its offset again, it would describe batches the log no longer holds, so
/// failing to delete one is an error.
pub(crate) fn load_latest(dir: &Path, log_end: Offset) -> Result<Loaded, LogError> {
    let mut out = Loaded::default();
    for offset in list(dir)?.into_iter().rev() {
        if offset > log_end {
            tracing::info!(dir = %dir.display(), offset, log_end, "deleting producer snapshot past the log end");
            remove(dir, offset)?;
            out.rejected.push(offset);
            continue;
        }
        let p = path(dir, offset);
        let bytes = fs::read(&p).map_err(LogError::io("read", &p))?;
        match ProducerState::decode_snapshot(&bytes) {
            Ok((covered, state)) if covered == offset => {
                out.snapshot = Some((offset, state));
                break;
            }
            Ok((covered, _)) => {
                tracing::warn!(path = %p.display(), covered, "producer snapshot names another offset; deleting it");
            }
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "deleting damaged producer snapshot");
            }
        }
        remove(dir, offset)?;
        out.rejected.push(offset);
    }
    Ok(out)
}

/// After the log start moved to `log_start`: deletes the snapshots below it except the
/// newest one at or below it, which is where a rebuild starts. Producer state outlives
/// the batches that created it (KIP-360: it goes by `producer.id.expiration.ms`, not by
/// retention), so that snapshot carries the state of producers whose batches are gone.
/// Failures only leave extra files behind, so they are logged, not returned.
pub(crate) fn retain_from(dir: &Path, log_start: Offset) {
    let offsets = match list(dir) {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list producer snapshots");
            return;
        }
    };
    let Some(&keep) = offsets.iter().rev().find(|&&o| o <= log_start) else {
        return;
    };
    for &offset in offsets.iter().take_while(|&&o| o < keep) {
        if let Err(e) = remove(dir, offset) {
            tracing::warn!(error = %e, "cannot delete old producer snapshot");
        }
    }
}
