//! Where the recovery point is kept between runs: the log's own `recovery-point` file,
//! or its owner's shared checkpoint ([`RecoveryCheckpoint`]).

use std::path::Path;
use std::sync::atomic::Ordering;

use strata_proto::Offset;

use super::{Inner, Log, RECOVERY_POINT_FILE};
use crate::checkpoint;
use crate::error::LogError;

/// Where a log keeps its recovery point between runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RecoveryCheckpoint {
    /// In its own `recovery-point` file, written at every roll, checkpoint and close:
    /// a log opened on its own (the `strata log` tools, tests).
    Own,
    /// With every other partition's, in one file its owner (the broker) writes at each
    /// checkpoint interval and at shutdown, as Kafka's `recovery-point-offset-checkpoint`:
    /// 10,000 partitions cost one fsync per interval rather than 10,000. `hint` is the
    /// value that file held for this log (if any). The log still writes its own file
    /// where the point moves back (a truncation) or an open repaired something; that
    /// file wins while it is lower, and [`Log::recovery_checkpoint_saved`] removes it once
    /// the owner's file holds a newer value.
    ///
    /// `clean`: the owner stopped cleanly and nothing wrote to the log since: it was
    /// flushed, its active segment's index files fsynced ([`Log::prepare_shutdown`]), and
    /// `hint` taken after that. The open then trusts the active segment's index below
    /// `hint` and CRC-scans only from its last entry (Kafka's `.kafka_cleanshutdown`),
    /// falling back to a whole scan if what it finds there does not end exactly at `hint`.
    Shared { hint: Option<Offset>, clean: bool },
}

/// A recovery point taken for the owner's shared checkpoint file
/// ([`Log::recovery_checkpoint`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SharedRecoveryPoint {
    pub offset: Offset,
    /// How many times the log had written its own recovery-point file when taken.
    own_writes: u64,
}

/// The log's own `recovery-point` file, as far as a [`RecoveryCheckpoint::Shared`] log
/// knows it.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct OwnRecoveryFile {
    pub(super) shared: bool,
    /// The file may exist (it was there at open, or written since).
    pub(super) present: bool,
    /// Writes since open: a value taken for the shared file before the last write may
    /// be above what the file says now.
    pub(super) writes: u64,
}

impl Log {
    /// Writes the recovery-point checkpoint, so the next open rescans less; nothing if
    /// it has not moved since the last call, or if its owner keeps it
    /// ([`RecoveryCheckpoint::Shared`]: see [`Self::recovery_checkpoint`]).
    pub fn checkpoint(&self) -> Result<(), LogError> {
        // Under the write lock: a truncation writing a lower point meanwhile must not be
        // overwritten with this higher one.
        let mut g = self.write_lock();
        let rp = g.recovery_point;
        if g.own_recovery.shared || self.checkpointed.load(Ordering::Relaxed) == rp {
            return Ok(());
        }
        write_own_recovery_point(&self.dir, &mut g, rp, false)?;
        self.checkpointed.store(rp, Ordering::Relaxed);
        Ok(())
    }

    /// The recovery point for the owner's shared checkpoint file
    /// ([`RecoveryCheckpoint::Shared`]): everything below it is durable now.
    pub fn recovery_checkpoint(&self) -> SharedRecoveryPoint {
        let g = self.read_lock();
        SharedRecoveryPoint {
            offset: g.recovery_point,
            own_writes: g.own_recovery.writes,
        }
    }

    /// The owner has made a file holding `saved` durable: the log's own recovery-point
    /// file is removed unless written since `saved` was taken (a truncation that moved
    /// the point back must keep its lower value). A removal a crash undoes brings back a
    /// value no higher than `saved`, which the next open takes (the lower one wins), so
    /// the removal is not fsynced.
    pub fn recovery_checkpoint_saved(&self, saved: SharedRecoveryPoint) -> Result<(), LogError> {
        let mut g = self.write_lock();
        let own = &mut g.own_recovery;
        if !own.shared || !own.present || own.writes != saved.own_writes {
            return Ok(());
        }
        let path = self.dir.join(RECOVERY_POINT_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("remove", &path)(e)),
        }
        own.present = false;
        Ok(())
    }
}

/// Writes the log's own recovery-point file (fsynced; with `sync_dir` its rename too).
pub(super) fn write_own_recovery_point(
    dir: &Path,
    g: &mut Inner,
    offset: Offset,
    sync_dir: bool,
) -> Result<(), LogError> {
    checkpoint::write(&dir.join(RECOVERY_POINT_FILE), offset, sync_dir)?;
    g.own_recovery.present = true;
    g.own_recovery.writes += 1;
    Ok(())
}
