//! Snapshot expiry: dropping old snapshots in a new version, deleting the manifest lists
//! and manifests only they used, and handing back the data files nothing references.

use std::collections::BTreeSet;

use strata_store::ErrorKind;

use super::{CommitStats, Expired, Table, now_ms};
use crate::error::{IcebergError, Result};
use crate::manifest::{read_manifest, read_manifest_list};
use crate::metadata::Snapshot;

impl Table {
    /// Removes snapshots older than `older_than_ms` beyond the `retain_last` newest (never
    /// the current one, nor one a ref names) in a new metadata version; on
    /// [`IcebergError::CommitConflict`] reload and call again. Then deletes the manifest
    /// lists and manifests only the expired snapshots referenced, and returns them with
    /// the data files no kept snapshot holds any more (files removed by a delete,
    /// overwrite or replace whose earlier snapshots expired): those are not deleted, the
    /// caller owns them. Nothing to expire commits nothing.
    pub async fn expire_snapshots(
        &mut self,
        older_than_ms: i64,
        retain_last: usize,
    ) -> Result<Expired> {
        let mut newest: Vec<&Snapshot> = self.metadata.snapshots.iter().collect();
        newest.sort_by_key(|s| std::cmp::Reverse((s.sequence_number, s.timestamp_ms)));
        let referenced: BTreeSet<i64> = self
            .metadata
            .refs
            .values()
            .map(|r| r.snapshot_id)
            .chain(self.metadata.current_snapshot_id)
            .collect();
        let keep: BTreeSet<i64> = newest
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                *i < retain_last
                    || s.timestamp_ms >= older_than_ms
                    || referenced.contains(&s.snapshot_id)
            })
            .map(|(_, s)| s.snapshot_id)
            .collect();
        let (kept, expired): (Vec<Snapshot>, Vec<Snapshot>) = self
            .metadata
            .snapshots
            .iter()
            .cloned()
            .partition(|s| keep.contains(&s.snapshot_id));
        if expired.is_empty() {
            return Ok(Expired::default());
        }

        // What the kept snapshots reach; a kept snapshot's files must all be readable.
        let mut kept_manifests = BTreeSet::new();
        for s in &kept {
            let bytes = self.read_uri(&s.manifest_list).await?;
            for m in read_manifest_list(&bytes, &s.manifest_list)? {
                kept_manifests.insert(m.manifest_path);
            }
        }
        let mut gone_manifests = BTreeSet::new();
        for s in &expired {
            // A list already gone (an earlier expiry stopped midway) has nothing to add.
            let bytes = match self.read_uri(&s.manifest_list).await {
                Ok(b) => b,
                Err(IcebergError::Store(e)) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for m in read_manifest_list(&bytes, &s.manifest_list)? {
                if !kept_manifests.contains(&m.manifest_path) {
                    gone_manifests.insert(m.manifest_path);
                }
            }
        }
        let mut kept_files = BTreeSet::new();
        for m in &kept_manifests {
            for e in read_manifest(&self.read_uri(m).await?, m)? {
                if e.is_live() {
                    kept_files.insert(e.file.location);
                }
            }
        }
        let mut data_files = BTreeSet::new();
        for m in &gone_manifests {
            let bytes = match self.read_uri(m).await {
                Ok(b) => b,
                Err(IcebergError::Store(e)) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for e in read_manifest(&bytes, m)? {
                if e.is_live() && !kept_files.contains(&e.file.location) {
                    data_files.insert(e.file.location);
                }
            }
        }

        let mut next = self.clone();
        let m = &mut next.metadata;
        m.snapshots = kept;
        // As Iceberg does: history before an expired snapshot's entry is dropped with it,
        // so what remains is a true history of the current state.
        let mut log = Vec::new();
        for e in &m.snapshot_log {
            if keep.contains(&e.snapshot_id) {
                log.push(e.clone());
            } else {
                log.clear();
            }
        }
        m.snapshot_log = log;
        m.last_updated_ms = now_ms().max(m.last_updated_ms);
        next.last_commit = CommitStats::default();
        let base = self.metadata.clone();
        self.commit_next(next, &base).await?;

        let mut out = Expired {
            snapshot_ids: expired.iter().map(|s| s.snapshot_id).collect(),
            manifest_lists: expired.iter().map(|s| s.manifest_list.clone()).collect(),
            manifests: gone_manifests.into_iter().collect(),
            data_files: data_files.into_iter().collect(),
            not_deleted: Vec::new(),
        };
        for uri in out.manifest_lists.iter().chain(&out.manifests) {
            if !self.delete_uri(uri).await {
                out.not_deleted.push(uri.clone());
            }
        }
        Ok(out)
    }
}
