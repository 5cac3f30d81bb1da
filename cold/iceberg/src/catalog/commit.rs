//! The commit: a new snapshot adding and removing data files (offsets checked, the schema
//! evolved for new columns, manifests rewritten, the summary's counts and offsets), and
//! committing the next metadata version to either catalog.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_store::PutMode;

use super::rest_diff::rest_changes;
use super::writing::{Writing, spec_of_id};
use super::{
    CommitStats, DEFAULT_PREVIOUS_VERSIONS_MAX, DELETE_AFTER_COMMIT_PROPERTY, MAX_MANIFESTS,
    NAME_MAPPING_PROPERTY, Operation, PREVIOUS_VERSIONS_MAX_PROPERTY, Table, join, now_ms,
};
use crate::datafile::DataFile;
use crate::error::{IcebergError, Result};
use crate::manifest::{
    ManifestEntry, STATUS_ADDED, STATUS_DELETED, STATUS_EXISTING, read_manifest,
    read_manifest_list, write_manifest_list,
};
use crate::metadata::{
    MetadataLogEntry, Snapshot, SnapshotLogEntry, SnapshotRef, TableMetadata, summary_keys,
};
use crate::spec::PartitionSpec;

impl Table {
    /// Adds `files` in a new `append` snapshot and commits it as the next metadata
    /// version: [`Self::commit`] with nothing removed. On success `self` is the new
    /// version. Files of a partition must come after what the table holds of it
    /// ([`Self::last_committed_offsets`]) and must not overlap.
    pub async fn append(&mut self, files: Vec<DataFile>) -> Result<Snapshot> {
        self.commit(files, &[], Operation::Append).await
    }

    /// Adds `add` and removes the data files at the locations `remove` in one snapshot,
    /// committed as the next metadata version; on success `self` is the new version, on
    /// [`IcebergError::CommitConflict`] reload the table and call again. A conflict can
    /// also be this very commit, applied by the store but its answer lost past the
    /// retry wrapper's read-back: the reloaded table then holds it, and its offsets in
    /// [`Self::last_committed_offsets`] say what not to add again.
    ///
    /// An append may also add files at or below a partition's committed offset (a
    /// backfill of older offsets) that overlap no file the table holds (the table's
    /// files are read to check); one that does is [`IcebergError::OffsetsAlreadyCommitted`].
    ///
    /// `operation` must match the change: [`Operation::Append`] only adds,
    /// [`Operation::Delete`] only removes, [`Operation::Overwrite`] and
    /// [`Operation::Replace`] remove and add (`Replace` when the added files hold the
    /// same rows, e.g. compaction: record counts must match and the files must lie within
    /// the committed offsets). Added files of offsets after a partition's committed offset
    /// advance it; every partition's committed offset is carried into the new snapshot,
    /// whatever the operation, so [`Self::last_committed_offsets`] never goes back.
    ///
    /// A manifest holding a removed file is rewritten with it `DELETED` and its other
    /// files `EXISTING`; the others are carried as they are. When the manifest list would
    /// exceed [`MAX_MANIFESTS`], the smallest manifests of one spec are merged.
    ///
    /// Added files whose schema has columns the table lacks evolve it first
    /// ([`IcebergSchema::evolve`]): the snapshot is committed under a new schema (the
    /// next schema id, made current) that reads every older file too;
    /// [`IcebergError::SchemaMismatch`] when a file cannot be read through one schema
    /// with the table's.
    ///
    /// [`IcebergSchema::evolve`]: crate::schema::IcebergSchema::evolve
    pub async fn commit(
        &mut self,
        add: Vec<DataFile>,
        remove: &[String],
        operation: Operation,
    ) -> Result<Snapshot> {
        let saved = (self.schema.clone(), self.metadata.clone());
        let committed = match self.evolve_for(&add) {
            Ok(()) => self.commit_snapshot(add, remove, operation, &saved.1).await,
            Err(e) => Err(e),
        };
        if committed.is_err() {
            (self.schema, self.metadata) = saved;
        }
        committed
    }

    /// Makes the table's schema one that reads every file of `files` (and every file it
    /// holds): unchanged, or evolved into a new current schema.
    fn evolve_for(&mut self, files: &[DataFile]) -> Result<()> {
        let next_id = self
            .metadata
            .schemas
            .iter()
            .filter_map(|s| s["schema-id"].as_i64())
            .max()
            .map_or(0, |m| m + 1);
        let next_id = i32::try_from(next_id).unwrap_or(i32::MAX);
        let mut schema = self.schema.clone();
        for f in files {
            if f.schema.fields() == schema.fields() {
                continue;
            }
            match schema.evolve(&f.schema, next_id) {
                Ok(None) => {}
                Ok(Some(evolved)) => schema = evolved,
                Err(reason) => {
                    return Err(IcebergError::SchemaMismatch {
                        location: f.location.clone(),
                        reason,
                    });
                }
            }
        }
        if schema == self.schema {
            return Ok(());
        }
        let m = &mut self.metadata;
        m.schemas.push(schema.json.clone());
        m.current_schema_id = next_id;
        m.last_column_id = m.last_column_id.max(schema.last_column_id);
        m.properties.insert(
            NAME_MAPPING_PROPERTY.to_string(),
            serde_json::to_string(&schema.name_mapping)?,
        );
        self.schema = schema;
        Ok(())
    }

    /// `base`: the metadata as loaded, before [`Self::evolve_for`] (what a REST commit's
    /// updates are the difference from).
    async fn commit_snapshot(
        &mut self,
        add: Vec<DataFile>,
        remove: &[String],
        operation: Operation,
        base: &TableMetadata,
    ) -> Result<Snapshot> {
        let invalid = |reason: String| IcebergError::InvalidCommit {
            table: self.topic.clone(),
            operation: operation.name(),
            reason,
        };
        let remove: BTreeSet<&str> = remove.iter().map(String::as_str).collect();
        match operation {
            Operation::Append if !remove.is_empty() => {
                return Err(invalid(
                    "an append removes no files: use Overwrite, Replace or Delete".to_string(),
                ));
            }
            Operation::Delete if !add.is_empty() || remove.is_empty() => {
                return Err(invalid(
                    "a delete removes files and adds none: use Overwrite to add".to_string(),
                ));
            }
            Operation::Overwrite | Operation::Replace if remove.is_empty() || add.is_empty() => {
                return Err(invalid(
                    "an overwrite or replace both removes and adds files: use Append or \
                     Delete"
                        .to_string(),
                ));
            }
            _ => {}
        }

        // Offsets: new data after the table's and not overlapping; rewritten data (an
        // overwrite's or a replace's) within what the table has committed.
        let start = self.last_committed_offsets();
        let mut committed = start.clone();
        let mut ordered: Vec<&DataFile> = add.iter().collect();
        ordered.sort_by_key(|f| (f.partition, f.first_offset));
        let mut added: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        // An append's files below what the table has committed (a backfill of older
        // offsets): taken if they overlap no file the table holds, read only then.
        let mut live: Option<Vec<DataFile>> = None;
        for f in &ordered {
            let rewrite = start.get(&f.partition).is_some_and(|&c| f.last_offset <= c);
            if operation == Operation::Append && rewrite {
                if live.is_none() {
                    live = Some(self.live_data_files().await?);
                }
                let clash = live.iter().flatten().any(|l| {
                    l.location == f.location
                        || (l.partition == f.partition
                            && l.first_offset <= f.last_offset
                            && f.first_offset <= l.last_offset)
                });
                if clash {
                    return Err(IcebergError::OffsetsAlreadyCommitted {
                        partition: f.partition,
                        first: f.first_offset,
                        last: f.last_offset,
                        committed: start.get(&f.partition).copied().unwrap_or(-1),
                    });
                }
                continue;
            }
            match operation {
                Operation::Replace if !rewrite => {
                    return Err(invalid(format!(
                        "{} holds offsets {}..={} of partition {}, beyond the committed {:?}: \
                         a replace only rewrites committed rows",
                        f.location,
                        f.first_offset,
                        f.last_offset,
                        f.partition,
                        start.get(&f.partition)
                    )));
                }
                Operation::Replace | Operation::Overwrite if rewrite => continue,
                _ => {}
            }
            if let Some(&c) = committed.get(&f.partition)
                && f.first_offset <= c
            {
                return Err(IcebergError::OffsetsAlreadyCommitted {
                    partition: f.partition,
                    first: f.first_offset,
                    last: f.last_offset,
                    committed: c,
                });
            }
            committed.insert(f.partition, f.last_offset);
            let r = added
                .entry(f.partition)
                .or_insert((f.first_offset, f.last_offset));
            r.1 = f.last_offset;
        }

        let parent = self.metadata.current_snapshot().cloned();
        let mut w = Writing::new(self)?;
        let mut stats = CommitStats::default();

        // The previous snapshot's manifests; those holding a removed file rewritten.
        let mut carried = match &parent {
            Some(parent) => {
                let bytes = self.read_uri(&parent.manifest_list).await?;
                read_manifest_list(&bytes, &parent.manifest_list)?
            }
            None => Vec::new(),
        };
        let mut removed: Vec<DataFile> = Vec::new();
        if !remove.is_empty() {
            let mut rewrites: Vec<Option<Vec<ManifestEntry>>> = Vec::new();
            for m in &carried {
                let entries =
                    read_manifest(&self.read_uri(&m.manifest_path).await?, &m.manifest_path)?;
                stats.manifests_read += 1;
                if !entries
                    .iter()
                    .any(|e| e.is_live() && remove.contains(e.file.location.as_str()))
                {
                    rewrites.push(None);
                    continue;
                }
                let mut out = Vec::new();
                // DELETED entries of earlier snapshots are dropped: that snapshot's own
                // manifests still record the removal.
                for mut e in entries.into_iter().filter(ManifestEntry::is_live) {
                    if remove.contains(e.file.location.as_str()) {
                        e.status = STATUS_DELETED;
                        e.snapshot_id = w.snapshot_id;
                        removed.push(e.file.clone());
                    } else {
                        e.status = STATUS_EXISTING;
                    }
                    out.push(e);
                }
                rewrites.push(Some(out));
            }
            let found: BTreeSet<&str> = removed.iter().map(|f| f.location.as_str()).collect();
            if let Some(missing) = remove.iter().find(|l| !found.contains(*l)) {
                return Err(IcebergError::NoSuchDataFile {
                    table: self.topic.clone(),
                    location: missing.to_string(),
                });
            }
            if operation == Operation::Replace {
                let rows = |files: &mut dyn Iterator<Item = &DataFile>| -> u64 {
                    files.map(|f| f.record_count).sum()
                };
                let (a, r) = (rows(&mut add.iter()), rows(&mut removed.iter()));
                if a != r {
                    return Err(invalid(format!(
                        "the added files hold {a} records, the removed {r}: a replace keeps \
                         the rows (use Overwrite to change them)"
                    )));
                }
            }
            for (m, rewrite) in carried.iter_mut().zip(rewrites) {
                if let Some(entries) = rewrite {
                    let spec = spec_of_id(m.partition_spec_id, &m.manifest_path)?;
                    *m = w.put_manifest(self, &entries, spec).await?;
                    stats.manifests_written += 1;
                }
            }
        }

        // One new manifest per spec of the added files, listed first.
        let mut by_spec: BTreeMap<PartitionSpec, Vec<ManifestEntry>> = BTreeMap::new();
        for f in &ordered {
            by_spec
                .entry(PartitionSpec::of(f))
                .or_default()
                .push(ManifestEntry {
                    status: STATUS_ADDED,
                    snapshot_id: w.snapshot_id,
                    sequence_number: w.sequence_number,
                    file_sequence_number: w.sequence_number,
                    file: (*f).clone(),
                });
        }
        let mut manifests = Vec::new();
        for (spec, entries) in &by_spec {
            manifests.push(w.put_manifest(self, entries, *spec).await?);
            stats.manifests_written += 1;
        }
        manifests.extend(carried);
        if manifests.len() > MAX_MANIFESTS {
            self.merge_smallest(&mut manifests, &mut w, &mut stats)
                .await?;
        }
        let list = write_manifest_list(
            &manifests,
            w.snapshot_id,
            parent.as_ref().map(|p| p.snapshot_id),
            w.sequence_number,
        )?;
        let list_path = join(
            &w.meta_dir,
            &format!("snap-{}-1-{}.avro", w.snapshot_id, w.commit_uuid),
        );
        self.catalog
            .store
            .put(&list_path, Bytes::from(list), PutMode::Overwrite)
            .await?;

        // Summary.
        let added_files = add.len() as u64;
        let added_records: u64 = add.iter().map(|f| f.record_count).sum();
        let added_size: u64 = add.iter().map(|f| f.file_size_in_bytes).sum();
        let deleted_files = removed.len() as u64;
        let deleted_records: u64 = removed.iter().map(|f| f.record_count).sum();
        let deleted_size: u64 = removed.iter().map(|f| f.file_size_in_bytes).sum();
        let changed: BTreeSet<(i32, Option<i32>)> = add
            .iter()
            .chain(&removed)
            .map(|f| (f.partition, f.day))
            .collect();
        let prev = |key: &str| parent.as_ref().map_or(0, |p| p.count(key));
        let total =
            |key: &str, plus: u64, minus: u64| (prev(key) + plus).saturating_sub(minus).to_string();
        let mut summary = BTreeMap::new();
        let mut put = |k: &str, v: String| summary.insert(k.to_string(), v);
        put("operation", operation.name().to_string());
        if !add.is_empty() || operation == Operation::Append {
            put("added-data-files", added_files.to_string());
            put("added-records", added_records.to_string());
            put("added-files-size", added_size.to_string());
        }
        if !removed.is_empty() {
            put("deleted-data-files", deleted_files.to_string());
            put("deleted-records", deleted_records.to_string());
            put("removed-files-size", deleted_size.to_string());
        }
        put("changed-partition-count", changed.len().to_string());
        put(
            "total-data-files",
            total("total-data-files", added_files, deleted_files),
        );
        put(
            "total-records",
            total("total-records", added_records, deleted_records),
        );
        put(
            "total-files-size",
            total("total-files-size", added_size, deleted_size),
        );
        for k in [
            "total-delete-files",
            "total-position-deletes",
            "total-equality-deletes",
        ] {
            put(k, "0".to_string());
        }
        for (p, (first, last)) in &added {
            put(&summary_keys::first_offset(*p), first.to_string());
            put(&summary_keys::last_offset(*p), last.to_string());
        }
        for (p, c) in &committed {
            put(&summary_keys::committed_offset(*p), c.to_string());
        }

        let timestamp_ms = now_ms().max(self.metadata.last_updated_ms);
        let snapshot_id = w.snapshot_id;
        let snapshot = Snapshot {
            snapshot_id,
            parent_snapshot_id: parent.as_ref().map(|p| p.snapshot_id),
            sequence_number: w.sequence_number,
            timestamp_ms,
            manifest_list: self.catalog.uri(&list_path),
            summary,
            schema_id: Some(self.metadata.current_schema_id),
        };
        let mut next = self.clone();
        let m = &mut next.metadata;
        m.last_sequence_number = w.sequence_number;
        m.last_updated_ms = timestamp_ms;
        m.current_snapshot_id = Some(snapshot_id);
        m.snapshots.push(snapshot.clone());
        m.snapshot_log.push(SnapshotLogEntry {
            snapshot_id,
            timestamp_ms,
        });
        m.refs.insert(
            "main".to_string(),
            SnapshotRef {
                snapshot_id,
                kind: "branch".to_string(),
            },
        );
        next.last_commit = stats;
        self.commit_next(next, base).await?;
        Ok(snapshot)
    }

    /// Commits `next` as the next version: the current metadata file goes into the
    /// metadata log, which keeps [`PREVIOUS_VERSIONS_MAX_PROPERTY`] entries; with
    /// [`DELETE_AFTER_COMMIT_PROPERTY`] the files that fell out are deleted after the
    /// commit (best effort: a file left behind is only unreferenced). In a REST catalog,
    /// commits what changed from `base` (the metadata as loaded) to `next`'s.
    pub(super) async fn commit_next(
        &mut self,
        mut next: Table,
        base: &TableMetadata,
    ) -> Result<()> {
        if let Some((rest, namespace)) = &self.catalog.rest {
            let (requirements, updates) = rest_changes(base, &next.metadata);
            let loaded = rest
                .commit(
                    namespace,
                    &self.topic,
                    self.version + 1,
                    requirements,
                    updates,
                )
                .await?;
            let mut table = self.catalog.rest_table(&self.topic, loaded)?;
            table.last_commit = next.last_commit;
            *self = table;
            return Ok(());
        }
        let m = &mut next.metadata;
        m.metadata_log.push(MetadataLogEntry {
            metadata_file: self.metadata_location(),
            timestamp_ms: self.metadata.last_updated_ms,
        });
        let max = m
            .properties
            .get(PREVIOUS_VERSIONS_MAX_PROPERTY)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(DEFAULT_PREVIOUS_VERSIONS_MAX)
            .max(1);
        let excess = m.metadata_log.len().saturating_sub(max);
        let dropped: Vec<MetadataLogEntry> = m.metadata_log.drain(..excess).collect();
        let delete = m
            .properties
            .get(DELETE_AFTER_COMMIT_PROPERTY)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        next.version = self.version + 1;
        next.put_version(next.version).await?;
        *self = next;
        if delete {
            for d in dropped {
                self.delete_uri(&d.metadata_file).await;
            }
        }
        Ok(())
    }
}
