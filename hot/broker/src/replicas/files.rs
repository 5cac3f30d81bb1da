//! A replica manager's files: partition directories (and removing those of deleted or
//! moved replicas), the one checkpoint file of every partition's recovery point and
//! high-water mark, and the clean stop.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use strata_proto::TopicId;

use super::open::{OPEN_THREADS, on_threads};
use super::{ReplicaManager, TopicState};
use crate::checkpoints;
use crate::partition::{Partition, read_topic_id};

impl ReplicaManager {
    pub(super) fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        self.config.data_dir.join(format!("{topic}-{index}"))
    }

    /// Deletes a removed topic's directories: renamed at once (so a topic created again
    /// with the same name starts empty), removed in the background. Readers holding a
    /// partition keep reading their open files until they finish.
    pub(super) fn remove_topic_files(&self, t: &TopicState) {
        for p in &t.partitions {
            self.remove_partition_files(&t.name, t.id, p.index);
        }
    }

    /// Renames a partition's directory out of the way (a crash after it leaves nothing
    /// to reopen) and deletes it in the background.
    pub(super) fn remove_partition_files(&self, topic: &str, id: TopicId, index: i32) {
        let dir = self.partition_dir(topic, index);
        let doomed = self
            .config
            .data_dir
            .join(format!("{topic}-{index}.{id}-delete"));
        if let Err(e) = std::fs::rename(&dir, &doomed) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot rename deleted partition directory");
            return;
        }
        std::thread::spawn(move || {
            if let Err(e) = std::fs::remove_dir_all(&doomed) {
                tracing::warn!(dir = %doomed.display(), error = %e, "cannot remove deleted partition directory");
            }
        });
    }

    /// Removes partition directories that metadata no longer names (a deletion cut short
    /// by a crash, or a topic deleted and re-created while this broker was down).
    pub(crate) fn remove_stray_directories(&self) {
        let md = self.cluster();
        let Ok(entries) = std::fs::read_dir(&self.config.data_dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if !path.is_dir() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with("-delete") {
                let _ = std::fs::remove_dir_all(&path);
                continue;
            }
            let Some((topic, index)) = name.rsplit_once('-') else {
                continue;
            };
            let Ok(index) = index.parse::<i32>() else {
                continue;
            };
            // A replica reassigned away while this broker was down is not kept either.
            let node = self.node_id();
            let keep = md.topics.get(topic).is_some_and(|t| {
                t.partition(index)
                    .is_some_and(|p| p.replicas.contains(&node))
                    && read_topic_id(&path).is_none_or(|id| id == t.id)
            });
            if !keep && read_topic_id(&path).is_some() {
                tracing::info!(dir = %path.display(), "removing the directory of a deleted topic");
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }

    /// Writes every hosted partition's recovery point and high-water mark to the one
    /// checkpoint file (`crate::checkpoints`), then lets the partitions drop their own
    /// checkpoint files. A failure is logged (the next interval tries again) and
    /// returned as `false`, as is a call before [`Self::load`] finished (which writes
    /// nothing: the file still holds the values of the partitions not open yet).
    pub fn checkpoint_partitions(&self) -> bool {
        if !self.loaded() {
            return false;
        }
        let _one = self
            .checkpoint_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let started = std::time::Instant::now();
        let partitions = self.partitions();
        let mut entries = Vec::with_capacity(partitions.len());
        let mut taken = Vec::with_capacity(partitions.len());
        for p in &partitions {
            let Some(name) = p.dir_name() else { continue };
            let (entry, rp) = p.checkpoint_entry();
            entries.push((name.to_string(), entry));
            taken.push((p, rp));
        }
        if let Err(e) = checkpoints::write(&self.config.data_dir, &entries) {
            tracing::warn!(dir = %self.config.data_dir.display(), error = %e, "cannot write the partition checkpoint file: a restart rescans more");
            return false;
        }
        for (p, rp) in taken {
            p.checkpoint_saved(rp);
        }
        metrics::histogram!("strata_checkpoint_seconds").record(started.elapsed().as_secs_f64());
        true
    }

    /// Readies every partition for the stop (flush, index fsync, producer snapshot),
    /// checkpoints them, and if all of that worked, marks the stop clean
    /// (`checkpoints::CLEAN_SHUTDOWN`). Call once nothing writes to the logs any more.
    pub fn shutdown(&self) {
        // Each partition's flush and checkpoints wait on fsyncs: overlapped on
        // OPEN_THREADS threads (5,000 partitions: 5.2 s → 2.5 s, benchmarks.md).
        let partitions: Vec<Arc<Partition>> = self
            .topics()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect();
        let failed = std::sync::atomic::AtomicBool::new(false);
        on_threads(&partitions, OPEN_THREADS, |p| {
            if !p.prepare_shutdown() {
                failed.store(true, Ordering::Relaxed);
            }
        });
        if self.checkpoint_partitions()
            && !failed.load(Ordering::Relaxed)
            && let Err(e) = checkpoints::write_clean_shutdown(&self.config.data_dir)
        {
            tracing::warn!(dir = %self.config.data_dir.display(), error = %e, "cannot write the clean-shutdown marker: the next start scans every active segment whole");
        }
    }
}
