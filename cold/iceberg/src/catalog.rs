//! A file-system catalog on an object store, and the append commit.
//!
//! A topic's table lives at `{root}/iceberg/{topic}/`:
//!
//! ```text
//! metadata/v{N}.metadata.json          table metadata, version N (1, 2, ...)
//! metadata/version-hint.text           "N": the current version, a hint
//! metadata/{uuid}-m{i}.avro            manifests
//! metadata/snap-{id}-1-{uuid}.avro     manifest lists
//! ```
//!
//! The commit point is writing `v{N+1}.metadata.json` with [`PutMode::Create`]: of two
//! writers that both read version N, one creates the file and the other gets
//! [`IcebergError::CommitConflict`] and must reload and retry (its manifests stay behind
//! unreferenced). The object store provides the atomic create: S3 conditional writes,
//! `link`/`rename` without replacing on a local file system. The version hint is written
//! after the commit and may lag (a crash between the two), so loading reads the hint and
//! then probes the next versions until one is missing; without a hint it lists the
//! metadata directory and takes the highest version.
//!
//! Each append writes one manifest per partition spec of its files and a manifest list
//! holding those plus the previous snapshot's manifests, which are never rewritten.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::datatypes::Schema as ArrowSchema;
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde_json::json;
use uuid::Uuid;

use crate::datafile::DataFile;
use crate::error::{IcebergError, Result};
use crate::manifest::{
    FieldSummary, ManifestContext, ManifestFile, read_manifest_list, write_manifest,
    write_manifest_list,
};
use crate::metadata::{
    MetadataLogEntry, Snapshot, SnapshotLogEntry, SnapshotRef, TableMetadata, summary_keys,
};
use crate::schema::IcebergSchema;
use crate::spec::{DAY_FIELD_ID, PartitionSpec};
use strata_parquet::columns;

/// The table property holding the name mapping.
pub const NAME_MAPPING_PROPERTY: &str = "schema.name-mapping.default";

/// Tables of topics under one root of an object store.
#[derive(Debug, Clone)]
pub struct FsCatalog {
    store: Arc<dyn ObjectStore>,
    /// The URI of the store's root, without a trailing slash (`file:///data/bucket`,
    /// `s3://bucket`; one trailing slash is dropped): locations in the metadata are
    /// absolute.
    store_uri: String,
    /// The catalog's root inside the store (may be empty).
    root: Path,
}

impl FsCatalog {
    pub fn new(store: Arc<dyn ObjectStore>, store_uri: &str, root: Path) -> FsCatalog {
        FsCatalog {
            store,
            store_uri: store_uri.strip_suffix('/').unwrap_or(store_uri).to_string(),
            root,
        }
    }

    /// The absolute location of `path` in the store.
    pub fn uri(&self, path: &Path) -> String {
        format!("{}/{}", self.store_uri, path)
    }

    fn table_dir(&self, topic: &str) -> Path {
        self.root.clone().join("iceberg").join(topic)
    }

    fn metadata_path(&self, topic: &str, version: u64) -> Path {
        self.table_dir(topic)
            .join("metadata")
            .join(format!("v{version}.metadata.json"))
    }

    /// Reads the footer of the Parquet file at `path` in the store, for [`Table::append`].
    pub async fn data_file(&self, path: &Path) -> Result<DataFile> {
        DataFile::read(&self.store, path, self.uri(path)).await
    }

    /// Creates the table of `topic` for files with this Arrow schema (a strata-parquet
    /// file schema, with field ids), as version 1 without snapshots.
    pub async fn create_table(&self, topic: &str, arrow: &ArrowSchema) -> Result<Table> {
        let schema = IcebergSchema::from_arrow(arrow, 0)?;
        let source = |name: &str| {
            schema
                .top_level_id(name)
                .ok_or_else(|| IcebergError::UnsupportedColumn {
                    column: name.to_string(),
                    reason: "missing: not a strata-parquet file schema".to_string(),
                })
        };
        let (p, ts) = (source(columns::PARTITION)?, source(columns::TIMESTAMP)?);
        let location = self.uri(&self.table_dir(topic));
        let mut properties = BTreeMap::new();
        properties.insert(
            NAME_MAPPING_PROPERTY.to_string(),
            serde_json::to_string(&schema.name_mapping)?,
        );
        properties.insert("strata.topic".to_string(), topic.to_string());
        let metadata = TableMetadata {
            format_version: 2,
            table_uuid: Uuid::new_v4().to_string(),
            location,
            last_sequence_number: 0,
            last_updated_ms: now_ms(),
            last_column_id: schema.last_column_id,
            schemas: vec![schema.json.clone()],
            current_schema_id: 0,
            partition_specs: vec![
                PartitionSpec::DEFAULT.json(p, ts),
                PartitionSpec::partition_only().json(p, ts),
            ],
            default_spec_id: PartitionSpec::DEFAULT.id,
            last_partition_id: DAY_FIELD_ID,
            properties,
            current_snapshot_id: None,
            snapshots: Vec::new(),
            snapshot_log: Vec::new(),
            metadata_log: Vec::new(),
            sort_orders: vec![json!({"order-id": 0, "fields": []})],
            default_sort_order_id: 0,
            refs: BTreeMap::new(),
        };
        let table = Table {
            catalog: self.clone(),
            topic: topic.to_string(),
            version: 1,
            metadata,
            schema,
            partition_source: p,
            timestamp_source: ts,
        };
        match table.put_version(1).await {
            Err(IcebergError::CommitConflict { .. }) => Err(IcebergError::TableExists {
                table: topic.to_string(),
            }),
            Err(e) => Err(e),
            Ok(()) => Ok(table),
        }
    }

    /// Loads the current version of `topic`'s table.
    pub async fn load_table(&self, topic: &str) -> Result<Table> {
        let dir = self.table_dir(topic).join("metadata");
        let hint = match self.store.get(&dir.clone().join("version-hint.text")).await {
            Ok(r) => std::str::from_utf8(&r.bytes().await?)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let mut version = match hint {
            Some(v) => v,
            None => self
                .highest_listed(&dir)
                .await?
                .ok_or_else(|| IcebergError::NoSuchTable {
                    table: topic.to_string(),
                    location: self.uri(&dir),
                })?,
        };
        // The hint may lag a commit.
        loop {
            match self
                .store
                .head(&self.metadata_path(topic, version + 1))
                .await
            {
                Ok(_) => version += 1,
                Err(object_store::Error::NotFound { .. }) => break,
                Err(e) => return Err(e.into()),
            }
        }
        let path = self.metadata_path(topic, version);
        let bytes = match self.store.get(&path).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(IcebergError::NoSuchTable {
                    table: topic.to_string(),
                    location: self.uri(&path),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let corrupt = |reason: String| IcebergError::CorruptMetadata {
            location: self.uri(&path),
            reason,
        };
        let metadata: TableMetadata =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        let schema_json = metadata
            .current_schema()
            .ok_or_else(|| corrupt("no current schema".to_string()))?
            .clone();
        let top = |name: &str| {
            schema_json["fields"]
                .as_array()
                .and_then(|f| f.iter().find(|f| f["name"] == name))
                .and_then(|f| f["id"].as_i64())
                .and_then(|id| i32::try_from(id).ok())
                .ok_or_else(|| corrupt(format!("no column {name}")))
        };
        let (partition_source, timestamp_source) =
            (top(columns::PARTITION)?, top(columns::TIMESTAMP)?);
        let schema = IcebergSchema {
            json: schema_json,
            last_column_id: metadata.last_column_id,
            name_mapping: metadata
                .properties
                .get(NAME_MAPPING_PROPERTY)
                .and_then(|m| serde_json::from_str(m).ok())
                .unwrap_or_default(),
        };
        Ok(Table {
            catalog: self.clone(),
            topic: topic.to_string(),
            version,
            metadata,
            schema,
            partition_source,
            timestamp_source,
        })
    }

    async fn highest_listed(&self, dir: &Path) -> Result<Option<u64>> {
        let mut listing = self.store.list(Some(dir));
        let mut highest = None;
        while let Some(meta) = listing.next().await {
            let meta = meta?;
            let version = meta
                .location
                .filename()
                .and_then(|n| n.strip_prefix('v'))
                .and_then(|n| n.strip_suffix(".metadata.json"))
                .and_then(|n| n.parse::<u64>().ok());
            highest = highest.max(version);
        }
        Ok(highest)
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One version of a topic's table.
#[derive(Debug, Clone)]
pub struct Table {
    catalog: FsCatalog,
    topic: String,
    version: u64,
    metadata: TableMetadata,
    schema: IcebergSchema,
    partition_source: i32,
    timestamp_source: i32,
}

impl Table {
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
        self.catalog
            .uri(&self.catalog.metadata_path(&self.topic, self.version))
    }

    /// Per Kafka partition, the last offset in the table: a publisher resumes after it.
    /// Empty before the first append.
    pub fn last_committed_offsets(&self) -> BTreeMap<i32, i64> {
        self.metadata
            .current_snapshot()
            .map(Snapshot::committed_offsets)
            .unwrap_or_default()
    }

    async fn put_version(&self, version: u64) -> Result<()> {
        let store = &self.catalog.store;
        let path = self.catalog.metadata_path(&self.topic, version);
        let body = serde_json::to_vec_pretty(&self.metadata)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match store.put_opts(&path, PutPayload::from(body), opts).await {
            Ok(_) => {}
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                return Err(IcebergError::CommitConflict {
                    table: self.topic.clone(),
                    version,
                });
            }
            Err(e) => return Err(e.into()),
        }
        let hint = self
            .catalog
            .table_dir(&self.topic)
            .join("metadata")
            .join("version-hint.text");
        store
            .put(&hint, PutPayload::from(version.to_string().into_bytes()))
            .await?;
        Ok(())
    }

    /// Adds `files` in a new snapshot and commits it as the next metadata version. On
    /// success `self` is the new version. Files of a partition must come after what the
    /// table holds of it ([`Self::last_committed_offsets`]) and must not overlap.
    pub async fn append(&mut self, files: Vec<DataFile>) -> Result<Snapshot> {
        // Offsets: no overlap with the table or with each other.
        let mut committed = self.last_committed_offsets();
        let mut ordered: Vec<&DataFile> = files.iter().collect();
        ordered.sort_by_key(|f| (f.partition, f.first_offset));
        let mut added: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        for f in &ordered {
            if f.schema.fields() != self.schema.fields() {
                return Err(IcebergError::SchemaMismatch {
                    location: f.location.clone(),
                });
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

        let store = &self.catalog.store;
        let meta_dir = self.catalog.table_dir(&self.topic).join("metadata");
        let parent = self.metadata.current_snapshot().cloned();
        let sequence_number = self.metadata.last_sequence_number + 1;
        let snapshot_id = loop {
            let (hi, _) = Uuid::new_v4().as_u64_pair();
            let id = i64::try_from(hi >> 1).unwrap_or(1).max(1);
            if !self.metadata.snapshots.iter().any(|s| s.snapshot_id == id) {
                break id;
            }
        };
        let commit_uuid = Uuid::new_v4();

        // One manifest per spec.
        let mut by_spec: BTreeMap<PartitionSpec, Vec<&DataFile>> = BTreeMap::new();
        for f in &ordered {
            by_spec.entry(PartitionSpec::of(f)).or_default().push(f);
        }
        let mut manifests = Vec::new();
        for (i, (spec, files)) in by_spec.iter().enumerate() {
            let bytes = write_manifest(
                files,
                ManifestContext {
                    schema: &self.schema,
                    spec: *spec,
                    partition_source: self.partition_source,
                    timestamp_source: self.timestamp_source,
                    snapshot_id,
                    sequence_number,
                },
            )?;
            let path = meta_dir.clone().join(format!("{commit_uuid}-m{i}.avro"));
            let length = bytes.len() as i64;
            store.put(&path, PutPayload::from(bytes)).await?;
            manifests.push(ManifestFile {
                manifest_path: self.catalog.uri(&path),
                manifest_length: length,
                partition_spec_id: spec.id,
                sequence_number,
                min_sequence_number: sequence_number,
                added_snapshot_id: snapshot_id,
                added_files_count: i32::try_from(files.len()).unwrap_or(i32::MAX),
                existing_files_count: 0,
                deleted_files_count: 0,
                added_rows_count: files.iter().map(|f| f.record_count as i64).sum(),
                existing_rows_count: 0,
                deleted_rows_count: 0,
                partitions: FieldSummary::of(files, *spec),
            });
        }
        // The previous snapshot's manifests, as they are.
        if let Some(parent) = &parent {
            let bytes = self.read_uri(&parent.manifest_list).await?;
            manifests.extend(read_manifest_list(&bytes, &parent.manifest_list)?);
        }
        let list = write_manifest_list(
            &manifests,
            snapshot_id,
            parent.as_ref().map(|p| p.snapshot_id),
            sequence_number,
        )?;
        let list_path = meta_dir
            .clone()
            .join(format!("snap-{snapshot_id}-1-{commit_uuid}.avro"));
        store.put(&list_path, PutPayload::from(list)).await?;

        // Summary.
        let added_files = files.len() as u64;
        let added_records: u64 = files.iter().map(|f| f.record_count).sum();
        let added_size: u64 = files.iter().map(|f| f.file_size_in_bytes).sum();
        let changed: BTreeSet<(i32, Option<i32>)> =
            files.iter().map(|f| (f.partition, f.day)).collect();
        let prev = |key: &str| parent.as_ref().map_or(0, |p| p.count(key));
        let mut summary = BTreeMap::new();
        let mut put = |k: &str, v: String| summary.insert(k.to_string(), v);
        put("operation", "append".to_string());
        put("added-data-files", added_files.to_string());
        put("added-records", added_records.to_string());
        put("added-files-size", added_size.to_string());
        put("changed-partition-count", changed.len().to_string());
        put(
            "total-data-files",
            (prev("total-data-files") + added_files).to_string(),
        );
        put(
            "total-records",
            (prev("total-records") + added_records).to_string(),
        );
        put(
            "total-files-size",
            (prev("total-files-size") + added_size).to_string(),
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
        let snapshot = Snapshot {
            snapshot_id,
            parent_snapshot_id: parent.as_ref().map(|p| p.snapshot_id),
            sequence_number,
            timestamp_ms,
            manifest_list: self.catalog.uri(&list_path),
            summary,
            schema_id: Some(self.metadata.current_schema_id),
        };
        let mut next = self.clone();
        let m = &mut next.metadata;
        m.metadata_log.push(MetadataLogEntry {
            metadata_file: self.metadata_location(),
            timestamp_ms: self.metadata.last_updated_ms,
        });
        m.last_sequence_number = sequence_number;
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
        next.version = self.version + 1;
        next.put_version(next.version).await?;
        *self = next;
        Ok(snapshot)
    }

    /// Reads a file of this catalog by its absolute location.
    async fn read_uri(&self, uri: &str) -> Result<Bytes> {
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
        let path = Path::parse(rel).map_err(|e| IcebergError::CorruptMetadata {
            location: self.metadata_location(),
            reason: e.to_string(),
        })?;
        Ok(self.catalog.store.get(&path).await?.bytes().await?)
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use strata_parquet::{ValueFormat, file_schema};

    use super::*;
    use crate::manifest::tests::file;

    fn catalog() -> FsCatalog {
        FsCatalog::new(Arc::new(InMemory::new()), "memory:///", Path::from("root"))
    }

    #[tokio::test]
    async fn concurrent_commits_to_one_version_conflict() {
        let c = catalog();
        let schema = file_schema(&ValueFormat::Binary);
        c.create_table("orders", &schema).await.unwrap();
        assert!(matches!(
            c.create_table("orders", &schema).await,
            Err(IcebergError::TableExists { .. })
        ));
        let mut a = c.load_table("orders").await.unwrap();
        let mut b = c.load_table("orders").await.unwrap();
        assert_eq!((a.version(), b.version()), (1, 1));
        a.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
        assert_eq!(a.version(), 2);
        let e = b.append(vec![file(1, Some(1), 0, 4)]).await.unwrap_err();
        assert!(
            matches!(e, IcebergError::CommitConflict { version: 2, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("reload"), "{e}");
        // The loser's table is unchanged; after a reload it commits on top.
        assert_eq!(b.version(), 1);
        let mut b = c.load_table("orders").await.unwrap();
        assert_eq!(b.last_committed_offsets(), BTreeMap::from([(0, 9)]));
        b.append(vec![file(1, Some(1), 0, 4)]).await.unwrap();
        let t = c.load_table("orders").await.unwrap();
        assert_eq!(t.version(), 3);
        assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 9), (1, 4)]));
        let s = t.metadata().current_snapshot().unwrap();
        assert_eq!(s.summary["total-data-files"], "2");
        assert_eq!(s.summary["total-records"], "15");
        assert_eq!(s.summary["added-records"], "5");
        assert_eq!(s.summary[&summary_keys::first_offset(1)], "0");
        assert_eq!(s.summary[&summary_keys::last_offset(1)], "4");
        // Partition 0 was not added to here, but its committed offset is carried.
        assert!(!s.summary.contains_key(&summary_keys::first_offset(0)));
        assert_eq!(s.summary[&summary_keys::committed_offset(0)], "9");
        assert_eq!(t.metadata().metadata_log.len(), 2);
        assert_eq!(t.metadata().refs["main"].snapshot_id, s.snapshot_id);
    }

    #[tokio::test]
    async fn a_local_file_system_refuses_the_second_commit_too() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let c = FsCatalog::new(
            store,
            &format!("file://{}", dir.path().display()),
            Path::default(),
        );
        let schema = file_schema(&ValueFormat::Binary);
        let mut a = c.create_table("t", &schema).await.unwrap();
        let mut b = c.load_table("t").await.unwrap();
        a.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
        let e = b.append(vec![file(0, Some(1), 0, 9)]).await.unwrap_err();
        assert!(
            matches!(e, IcebergError::CommitConflict { version: 2, .. }),
            "{e}"
        );
        assert!(
            dir.path()
                .join("iceberg/t/metadata/v2.metadata.json")
                .exists()
        );
        let hint = std::fs::read_to_string(dir.path().join("iceberg/t/metadata/version-hint.text"))
            .unwrap();
        assert_eq!(hint, "2");
        assert!(matches!(
            c.create_table("t", &schema).await,
            Err(IcebergError::TableExists { .. })
        ));
    }

    #[tokio::test]
    async fn offsets_already_in_the_table_are_refused() {
        let c = catalog();
        let mut t = c
            .create_table("t", &file_schema(&ValueFormat::Binary))
            .await
            .unwrap();
        t.append(vec![file(0, Some(1), 0, 9), file(0, Some(1), 10, 19)])
            .await
            .unwrap();
        assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 19)]));
        let e = t.append(vec![file(0, Some(2), 15, 30)]).await.unwrap_err();
        assert!(
            matches!(
                e,
                IcebergError::OffsetsAlreadyCommitted { committed: 19, .. }
            ),
            "{e}"
        );
        // Two files of one append may not overlap either.
        let e = t
            .append(vec![file(0, Some(2), 20, 30), file(0, Some(2), 25, 40)])
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                IcebergError::OffsetsAlreadyCommitted { committed: 30, .. }
            ),
            "{e}"
        );
        assert_eq!(t.version(), 2);
        t.append(vec![file(0, Some(2), 20, 30)]).await.unwrap();
        assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 30)]));
    }

    #[tokio::test]
    async fn snapshots_carry_earlier_manifests_forward() {
        let c = catalog();
        let mut t = c
            .create_table("t", &file_schema(&ValueFormat::Binary))
            .await
            .unwrap();
        let s1 = t.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
        // A file spanning days goes to spec 1: two new manifests.
        let s2 = t
            .append(vec![file(0, Some(2), 10, 19), file(1, None, 0, 5)])
            .await
            .unwrap();
        let list1 = read_manifest_list(&t.read_uri(&s1.manifest_list).await.unwrap(), "1").unwrap();
        let list2 = read_manifest_list(&t.read_uri(&s2.manifest_list).await.unwrap(), "2").unwrap();
        assert_eq!(list1.len(), 1);
        assert_eq!(list2.len(), 3);
        assert_eq!(list2[2], list1[0], "the old manifest is listed as it was");
        assert_eq!(
            list2
                .iter()
                .map(|m| m.partition_spec_id)
                .collect::<Vec<_>>(),
            [0, 1, 0]
        );
        assert_eq!(list2[0].sequence_number, 2);
        assert_eq!(s2.parent_snapshot_id, Some(s1.snapshot_id));
        assert_eq!(s2.sequence_number, 2);
    }

    #[tokio::test]
    async fn loading_follows_a_lagging_or_missing_hint() {
        let c = catalog();
        let mut t = c
            .create_table("t", &file_schema(&ValueFormat::Binary))
            .await
            .unwrap();
        t.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
        t.append(vec![file(0, Some(1), 10, 19)]).await.unwrap();
        let hint = Path::from("root/iceberg/t/metadata/version-hint.text");
        // A crash between the commit and the hint: the hint says 2, v3 exists.
        c.store
            .put(&hint, PutPayload::from_static(b"2"))
            .await
            .unwrap();
        let loaded = c.load_table("t").await.unwrap();
        assert_eq!(loaded.version(), 3);
        assert_eq!(loaded.metadata(), t.metadata());
        c.store.delete(&hint).await.unwrap();
        assert_eq!(c.load_table("t").await.unwrap().version(), 3);
        assert!(matches!(
            c.load_table("other").await,
            Err(IcebergError::NoSuchTable { .. })
        ));
        assert_eq!(
            loaded.metadata_location(),
            "memory:///root/iceberg/t/metadata/v3.metadata.json"
        );
    }
}
