//! Writing a new snapshot's manifests: its identity while they are written, one manifest
//! and its manifest-list entry, and merging the smallest manifests past [`MAX_MANIFESTS`].

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_store::PutMode;
use uuid::Uuid;

use super::{CommitStats, MAX_MANIFESTS, MERGE_AT_ONCE, Table, join};
use crate::datafile::DataFile;
use crate::error::{IcebergError, Result};
use crate::manifest::{
    FieldSummary, ManifestContext, ManifestEntry, ManifestFile, STATUS_ADDED, STATUS_DELETED,
    STATUS_EXISTING, read_manifest, write_manifest_entries,
};
use crate::spec::PartitionSpec;

impl Table {
    /// Merges the smallest manifests of earlier snapshots under the spec with the most of
    /// them into one, so the list has at most [`MAX_MANIFESTS`] (at least
    /// [`MERGE_AT_ONCE`] at a time, so merges are not every commit). Their files become
    /// `EXISTING`; `DELETED` entries (of earlier snapshots) are dropped.
    pub(super) async fn merge_smallest(
        &self,
        manifests: &mut Vec<ManifestFile>,
        w: &mut Writing,
        stats: &mut CommitStats,
    ) -> Result<()> {
        let mut groups: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (i, m) in manifests.iter().enumerate() {
            if m.added_snapshot_id != w.snapshot_id {
                groups.entry(m.partition_spec_id).or_default().push(i);
            }
        }
        let Some((&spec_id, _)) = groups.iter().max_by_key(|(_, g)| g.len()) else {
            return Ok(());
        };
        let mut group = groups.remove(&spec_id).unwrap_or_default();
        group.sort_by_key(|&i| (manifests[i].manifest_length, i));
        let n = (manifests.len() - MAX_MANIFESTS + 1)
            .max(MERGE_AT_ONCE)
            .min(group.len());
        if n < 2 {
            return Ok(());
        }
        let mut chosen: Vec<usize> = group[..n].to_vec();
        let spec = spec_of_id(spec_id, &manifests[chosen[0]].manifest_path)?;
        // In list order, so the merged entries keep the order they had.
        chosen.sort_unstable();
        let mut entries = Vec::new();
        for &i in &chosen {
            let m = &manifests[i];
            let read = read_manifest(&self.read_uri(&m.manifest_path).await?, &m.manifest_path)?;
            stats.manifests_read += 1;
            entries.extend(
                read.into_iter()
                    .filter(ManifestEntry::is_live)
                    .map(|mut e| {
                        e.status = STATUS_EXISTING;
                        e
                    }),
            );
        }
        let merged = w.put_manifest(self, &entries, spec).await?;
        stats.manifests_written += 1;
        for &i in chosen.iter().rev() {
            manifests.remove(i);
        }
        manifests.push(merged);
        Ok(())
    }
}

/// The partition spec of a manifest's `partition_spec_id`.
pub(super) fn spec_of_id(id: i32, manifest: &str) -> Result<PartitionSpec> {
    [PartitionSpec::DEFAULT, PartitionSpec::partition_only()]
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| IcebergError::CorruptMetadata {
            location: manifest.to_string(),
            reason: format!("unknown partition spec {id}"),
        })
}

/// The new snapshot's identity while its files are written.
pub(super) struct Writing {
    pub(super) snapshot_id: i64,
    pub(super) sequence_number: i64,
    pub(super) commit_uuid: Uuid,
    pub(super) meta_dir: String,
    /// Manifests written so far (their file names' `m{i}`).
    written: usize,
}

impl Writing {
    pub(super) fn new(table: &Table) -> Result<Writing> {
        let snapshot_id = loop {
            let (hi, _) = Uuid::new_v4().as_u64_pair();
            let id = i64::try_from(hi >> 1).unwrap_or(1).max(1);
            if !table.metadata.snapshots.iter().any(|s| s.snapshot_id == id) {
                break id;
            }
        };
        Ok(Writing {
            snapshot_id,
            sequence_number: table.metadata.last_sequence_number + 1,
            commit_uuid: Uuid::new_v4(),
            meta_dir: table.metadata_key()?,
            written: 0,
        })
    }

    /// Writes a manifest of `entries` under `spec` as this snapshot's, and describes it
    /// for the manifest list.
    pub(super) async fn put_manifest(
        &mut self,
        table: &Table,
        entries: &[ManifestEntry],
        spec: PartitionSpec,
    ) -> Result<ManifestFile> {
        let bytes = write_manifest_entries(
            entries,
            ManifestContext {
                schema: &table.schema,
                spec,
                partition_source: table.partition_source,
                timestamp_source: table.timestamp_source,
                snapshot_id: self.snapshot_id,
                sequence_number: self.sequence_number,
            },
        )?;
        let path = join(
            &self.meta_dir,
            &format!("{}-m{}.avro", self.commit_uuid, self.written),
        );
        self.written += 1;
        let length = bytes.len() as i64;
        table
            .catalog
            .store
            .put(&path, Bytes::from(bytes), PutMode::Overwrite)
            .await?;
        let count = |status: i32| {
            let of = entries.iter().filter(|e| e.status == status);
            (
                i32::try_from(of.clone().count()).unwrap_or(i32::MAX),
                of.map(|e| i64::try_from(e.file.record_count).unwrap_or(i64::MAX))
                    .sum::<i64>(),
            )
        };
        let (added_files_count, added_rows_count) = count(STATUS_ADDED);
        let (existing_files_count, existing_rows_count) = count(STATUS_EXISTING);
        let (deleted_files_count, deleted_rows_count) = count(STATUS_DELETED);
        let files: Vec<&DataFile> = entries.iter().map(|e| &e.file).collect();
        Ok(ManifestFile {
            manifest_path: table.catalog.uri(&path),
            manifest_length: length,
            partition_spec_id: spec.id,
            sequence_number: self.sequence_number,
            // The spec: the least data sequence number of the live files.
            min_sequence_number: entries
                .iter()
                .filter(|e| e.is_live())
                .map(|e| e.sequence_number)
                .min()
                .unwrap_or(self.sequence_number),
            added_snapshot_id: self.snapshot_id,
            added_files_count,
            existing_files_count,
            deleted_files_count,
            added_rows_count,
            existing_rows_count,
            deleted_rows_count,
            partitions: FieldSummary::of(&files, spec),
        })
    }
}
