//! One version of a topic's table: where it is, what it holds (the live and referenced
//! data files), and reading and deleting its files by absolute location.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_store::ErrorKind;

use super::{CommitStats, Table};
use crate::datafile::DataFile;
use crate::error::{IcebergError, Result};
use crate::manifest::{ManifestEntry, read_manifest, read_manifest_list};
use crate::metadata::{Snapshot, TableMetadata};

impl Table {
    /// The manifests the commit that made this version read and wrote (zero for a loaded
    /// table).
    pub fn last_commit_stats(&self) -> CommitStats {
        self.last_commit
    }

    pub fn metadata(&self) -> &TableMetadata {
        &self.metadata
    }

    /// The metadata version this table is at.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The absolute location of the current `v{N}.metadata.json` (what
    /// `StaticTable.from_metadata` takes).
    pub fn metadata_location(&self) -> String {
        match &self.rest_location {
            Some(l) => l.clone(),
            None => self
                .catalog
                .uri(&self.catalog.metadata_path(&self.topic, self.version)),
        }
    }

    /// The key of the directory this table's manifests go in: `metadata/` under its
    /// location, which must be in the store.
    pub(super) fn metadata_key(&self) -> Result<String> {
        if self.rest_location.is_none() {
            return Ok(self.catalog.metadata_dir(&self.topic));
        }
        let location = self.metadata.location.trim_end_matches('/');
        let dir = format!("{location}/metadata");
        let key = self
            .path_of(&dir)
            .map_err(|_| IcebergError::LocationOutsideStore {
                table: self.topic.clone(),
                location: location.to_string(),
                store: self.catalog.store_uri.clone(),
            })?;
        Ok(key.to_string())
    }

    /// [`IcebergError::LocationOutsideStore`] unless Strata can write this table's
    /// manifests.
    pub(super) fn check_location(&self) -> Result<()> {
        self.metadata_key().map(|_| ())
    }

    /// Per Kafka partition, the last offset in the table: a publisher resumes after it.
    /// Empty before the first append.
    pub fn last_committed_offsets(&self) -> BTreeMap<i32, i64> {
        self.metadata
            .current_snapshot()
            .map(Snapshot::committed_offsets)
            .unwrap_or_default()
    }

    /// The locations of the data files the current snapshot holds live (what a scan
    /// reads), in manifest order; empty before the first commit. Reads the current
    /// manifest list and every manifest in it (at most [`MAX_MANIFESTS`]).
    ///
    /// [`MAX_MANIFESTS`]: super::MAX_MANIFESTS
    pub async fn live_files(&self) -> Result<Vec<String>> {
        Ok(self
            .live_data_files()
            .await?
            .into_iter()
            .map(|f| f.location)
            .collect())
    }

    /// [`Self::live_files`] as the manifests describe them (see [`ManifestEntry::file`]
    /// for what a manifest does not hold: `first_offset`/`last_offset` are the `offset`
    /// column's bounds).
    pub async fn live_data_files(&self) -> Result<Vec<DataFile>> {
        let Some(s) = self.metadata.current_snapshot() else {
            return Ok(Vec::new());
        };
        let list = read_manifest_list(&self.read_uri(&s.manifest_list).await?, &s.manifest_list)?;
        let mut out = Vec::new();
        for m in list {
            let entries = read_manifest(&self.read_uri(&m.manifest_path).await?, &m.manifest_path)?;
            out.extend(
                entries
                    .into_iter()
                    .filter(ManifestEntry::is_live)
                    .map(|e| e.file),
            );
        }
        Ok(out)
    }

    /// The locations of every data file a snapshot the metadata keeps names, live or
    /// deleted by it: what an orphan sweep must not touch. Reads every kept snapshot's
    /// manifest list and each distinct manifest once.
    pub async fn referenced_files(&self) -> Result<BTreeSet<String>> {
        let mut manifests = BTreeSet::new();
        for s in &self.metadata.snapshots {
            let list =
                read_manifest_list(&self.read_uri(&s.manifest_list).await?, &s.manifest_list)?;
            manifests.extend(list.into_iter().map(|m| m.manifest_path));
        }
        let mut out = BTreeSet::new();
        for m in manifests {
            let entries = read_manifest(&self.read_uri(&m).await?, &m)?;
            out.extend(entries.into_iter().map(|e| e.file.location));
        }
        Ok(out)
    }

    /// Deletes a file of this catalog by its absolute location; whether it is gone.
    pub(super) async fn delete_uri(&self, uri: &str) -> bool {
        let Ok(path) = self.path_of(uri) else {
            return false;
        };
        // Deleting a missing object succeeds; NotFound is accepted all the same.
        match self.catalog.store.delete(path).await {
            Ok(()) => true,
            Err(e) => e.kind() == ErrorKind::NotFound,
        }
    }

    /// The key in the store of an absolute location of this catalog.
    fn path_of<'a>(&self, uri: &'a str) -> Result<&'a str> {
        let prefix = format!("{}/", self.catalog.store_uri);
        let rel = uri
            .strip_prefix(&prefix)
            .ok_or_else(|| IcebergError::CorruptMetadata {
                location: self.metadata_location(),
                reason: format!(
                    "{uri} is outside the catalog's store {}",
                    self.catalog.store_uri
                ),
            })?;
        // A store key: '/'-separated, no empty, `.` or `..` segment.
        if let Some(bad) = rel
            .split('/')
            .find(|s| s.is_empty() || *s == "." || *s == "..")
        {
            return Err(IcebergError::CorruptMetadata {
                location: self.metadata_location(),
                reason: format!("{uri}: invalid path segment {bad:?}"),
            });
        }
        Ok(rel)
    }

    /// Reads a file of this catalog by its absolute location.
    pub(super) async fn read_uri(&self, uri: &str) -> Result<Bytes> {
        let path = self.path_of(uri)?;
        Ok(self.catalog.store.get(path).await?)
    }
}
