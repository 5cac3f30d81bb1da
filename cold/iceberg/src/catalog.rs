//! The catalog of topics' tables (a file-system catalog on an object store, or an
//! Iceberg REST catalog's pointers over the same files), and the commit.
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
//! unreferenced). The [`BlobStore`] provides the atomic create: S3 conditional writes,
//! `link`/`rename` without replacing on a local directory. The version hint is written
//! after the commit and may lag (a crash between the two), so loading reads the hint and
//! then probes the next versions until one is missing; without a hint it lists the
//! metadata directory and takes the highest version.
//!
//! Each commit ([`Table::commit`]) writes one manifest per partition spec of the files it
//! adds and a manifest list holding those plus the previous snapshot's manifests: carried
//! as they are, except that a manifest holding a removed file is rewritten (that file
//! `DELETED`, the others `EXISTING`, older `DELETED` entries dropped), and that past
//! [`MAX_MANIFESTS`] the smallest manifests of one spec are merged, so a commit reads and
//! writes a bounded number of manifests however long the table's history.
//!
//! [`Table::expire_snapshots`] removes old snapshots in a new version and deletes the
//! manifest lists and manifests only they referenced; it hands back, without deleting,
//! the data files no kept snapshot holds. The metadata log keeps
//! `write.metadata.previous-versions-max` entries, and new tables set
//! `write.metadata.delete-after-commit.enabled` so older metadata files are deleted.
//!
//! Manifests of a commit that lost the race stay behind unreferenced; nothing deletes
//! them yet (an orphan-file sweep would).
//!
//! With [`Catalog::with_rest`], the metadata pointer is the REST catalog's ([`crate::rest`]):
//! the same snapshots, manifests and manifest lists (written under the location the
//! catalog gives the table, which must be in the store), committed as updates the catalog
//! applies atomically after checking requirements; the catalog writes the metadata JSON
//! and keeps its log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::datatypes::Schema as ArrowSchema;
use bytes::Bytes;
use serde_json::{Value, json};
use strata_store::{BlobStore, ErrorKind, PutMode};
use uuid::Uuid;

use crate::datafile::DataFile;
use crate::error::{IcebergError, Result};
use crate::manifest::{
    FieldSummary, ManifestContext, ManifestEntry, ManifestFile, STATUS_ADDED, STATUS_DELETED,
    STATUS_EXISTING, read_manifest, read_manifest_list, write_manifest_entries,
    write_manifest_list,
};
use crate::metadata::{
    MetadataLogEntry, Snapshot, SnapshotLogEntry, SnapshotRef, TableMetadata, summary_keys,
};
use crate::rest::{self, Loaded, RestCatalog};
use crate::schema::IcebergSchema;
use crate::spec::{DAY_FIELD_ID, PartitionSpec};
use strata_parquet::columns;

/// The table property holding the name mapping.
pub const NAME_MAPPING_PROPERTY: &str = "schema.name-mapping.default";

/// Iceberg's table property: how many earlier metadata files the metadata log keeps.
pub const PREVIOUS_VERSIONS_MAX_PROPERTY: &str = "write.metadata.previous-versions-max";
/// Iceberg's default for [`PREVIOUS_VERSIONS_MAX_PROPERTY`].
pub const DEFAULT_PREVIOUS_VERSIONS_MAX: usize = 100;
/// Iceberg's table property: delete the metadata files that fall out of the metadata log
/// after a commit. New tables set it: a topic's table commits often (every publish), and
/// without it the metadata directory grows by one file per commit forever.
pub const DELETE_AFTER_COMMIT_PROPERTY: &str = "write.metadata.delete-after-commit.enabled";

/// The most manifests a snapshot lists before a commit merges some. A commit reads the
/// previous manifest list and, to remove files, its manifests: bounding their number
/// keeps a commit's cost flat however many commits came before, instead of one more
/// manifest per append forever. 64 keeps the list small for readers too (they open every
/// manifest that may match a filter).
pub const MAX_MANIFESTS: usize = 64;
/// The fewest manifests merged at once when the list is over [`MAX_MANIFESTS`], so a
/// table at the bound merges every few commits rather than at every one.
pub const MERGE_AT_ONCE: usize = 8;

/// What a snapshot does (its summary's `operation`, as the Iceberg spec names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Only adds files, of offsets after the committed ones.
    Append,
    /// Only removes files (retention).
    Delete,
    /// Removes files and adds others with different rows (e.g. records dropped).
    Overwrite,
    /// Removes files and adds others holding the same rows (compaction).
    Replace,
}

impl Operation {
    /// The summary's `operation` value.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Append => "append",
            Operation::Delete => "delete",
            Operation::Overwrite => "overwrite",
            Operation::Replace => "replace",
        }
    }
}

/// The manifests a commit read and wrote (besides the manifest lists): what merging
/// keeps bounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    pub manifests_read: usize,
    pub manifests_written: usize,
}

/// What [`Table::expire_snapshots`] expired, as absolute locations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expired {
    /// The snapshots removed from the table.
    pub snapshot_ids: Vec<i64>,
    /// Their manifest lists, deleted.
    pub manifest_lists: Vec<String>,
    /// The manifests no kept snapshot lists, deleted.
    pub manifests: Vec<String>,
    /// The data files no kept snapshot holds: not deleted, the caller owns them.
    pub data_files: Vec<String>,
    /// Manifest lists and manifests the store did not delete (still unreferenced; delete
    /// them later).
    pub not_deleted: Vec<String>,
}

/// Tables of topics under one root of a [`BlobStore`]: their metadata pointers in the
/// store itself (the file-system catalog, the default) or in an Iceberg REST catalog
/// ([`Catalog::with_rest`]). Either way the manifests go to the store, and data files are
/// where strata-parquet put them.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The REST catalog holding the tables' pointers, and the namespace they go in.
    rest: Option<(Arc<RestCatalog>, Vec<String>)>,
    store: Arc<dyn BlobStore>,
    /// The URI of the store's root, without a trailing slash (`file:///data/bucket`,
    /// `s3://bucket`; one trailing slash is dropped): locations in the metadata are
    /// absolute.
    store_uri: String,
    /// The catalog's root inside the store: a '/'-separated key prefix without leading,
    /// trailing or repeated slashes (may be empty).
    root: String,
}

impl Catalog {
    /// A catalog over `store`, whose root `store_uri` names (the scheme and place readers
    /// open: `file:///data/bucket`, `s3://bucket/prefix`), with its tables under the key
    /// prefix `root` (`""` for the store's root; leading, trailing and repeated slashes
    /// are ignored).
    pub fn new(store: Arc<dyn BlobStore>, store_uri: &str, root: &str) -> Catalog {
        Catalog {
            rest: None,
            store,
            store_uri: store_uri.strip_suffix('/').unwrap_or(store_uri).to_string(),
            root: root
                .split('/')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("/"),
        }
    }

    /// This catalog with its tables' pointers in `rest`, in its configured namespace
    /// (tables of a [`Self::nested`] catalog one level further down). The tables'
    /// locations are the REST catalog's to choose and must be inside this store.
    pub fn with_rest(mut self, rest: Option<Arc<RestCatalog>>) -> Catalog {
        self.rest = rest.map(|r| {
            let namespace = r.config().namespace.clone();
            (r, namespace)
        });
        self
    }

    /// The catalog of tables kept apart under `name`: `{root}/{name}/iceberg/{topic}/` in
    /// the store, or the namespace's child `name` in a REST catalog.
    pub fn nested(&self, name: &str) -> Catalog {
        let mut c = self.clone();
        c.root = join(&self.root, name);
        if let Some((_, namespace)) = &mut c.rest {
            namespace.push(name.to_string());
        }
        c
    }

    pub fn store(&self) -> &Arc<dyn BlobStore> {
        &self.store
    }

    /// The URI of the store's root, without a trailing slash.
    pub fn store_uri(&self) -> &str {
        &self.store_uri
    }

    /// The key prefix the catalog's Parquet files and file-system tables are under.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The absolute location of the object at `key` (relative to the store's root).
    pub fn uri(&self, key: &str) -> String {
        format!("{}/{}", self.store_uri, key)
    }

    /// Where `topic`'s table is, for people: the directory holding `metadata/` in the
    /// store, or its name in the REST catalog (which chooses its location).
    pub fn table_location(&self, topic: &str) -> String {
        match &self.rest {
            Some((rest, namespace)) => rest.describe(namespace, topic),
            None => self.uri(&self.table_dir(topic)),
        }
    }

    fn table_dir(&self, topic: &str) -> String {
        join(&join(&self.root, "iceberg"), topic)
    }

    fn metadata_dir(&self, topic: &str) -> String {
        join(&self.table_dir(topic), "metadata")
    }

    fn metadata_path(&self, topic: &str, version: u64) -> String {
        join(
            &self.metadata_dir(topic),
            &format!("v{version}.metadata.json"),
        )
    }

    /// Reads the footer of the Parquet file at `key` in the store (relative to its root,
    /// as strata-parquet's sink names it), for [`Table::append`].
    pub async fn data_file(&self, key: &str) -> Result<DataFile> {
        DataFile::read(self.store.as_ref(), key, self.uri(key)).await
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
        properties.insert(ROOT_PROPERTY.to_string(), self.root.clone());
        properties.insert(
            PREVIOUS_VERSIONS_MAX_PROPERTY.to_string(),
            DEFAULT_PREVIOUS_VERSIONS_MAX.to_string(),
        );
        properties.insert(DELETE_AFTER_COMMIT_PROPERTY.to_string(), "true".to_string());
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
        if let Some((rest, namespace)) = &self.rest {
            return self
                .create_in_rest(rest, namespace, topic, metadata, &schema)
                .await;
        }
        let table = Table {
            catalog: self.clone(),
            topic: topic.to_string(),
            version: 1,
            metadata,
            schema,
            partition_source: p,
            timestamp_source: ts,
            last_commit: CommitStats::default(),
            rest_location: None,
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
        if let Some((rest, namespace)) = &self.rest {
            let loaded =
                rest.load(namespace, topic)
                    .await?
                    .ok_or_else(|| IcebergError::NoSuchTable {
                        table: topic.to_string(),
                        location: rest.describe(namespace, topic),
                    })?;
            return self.rest_table(topic, loaded);
        }
        let dir = self.metadata_dir(topic);
        let hint = match self.store.get(&join(&dir, "version-hint.text")).await {
            Ok(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok()),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
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
                Err(e) if e.kind() == ErrorKind::NotFound => break,
                Err(e) => return Err(e.into()),
            }
        }
        let path = self.metadata_path(topic, version);
        let bytes = match self.store.get(&path).await {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => {
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
        self.table_of(topic, version, metadata, self.uri(&path), None)
    }

    /// A table of this catalog from its metadata (at `location`, for errors).
    fn table_of(
        &self,
        topic: &str,
        version: u64,
        metadata: TableMetadata,
        location: String,
        rest_location: Option<String>,
    ) -> Result<Table> {
        let corrupt = |reason: String| IcebergError::CorruptMetadata {
            location: location.clone(),
            reason,
        };
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
            last_commit: CommitStats::default(),
            rest_location,
        })
    }

    /// The table a REST catalog answered; a table another cluster created is refused.
    fn rest_table(&self, topic: &str, loaded: Loaded) -> Result<Table> {
        if let Some(owner) = loaded.metadata.properties.get(ROOT_PROPERTY)
            && *owner != self.root
        {
            return Err(IcebergError::ForeignTable {
                table: topic.to_string(),
                owner: owner.clone(),
                us: self.root.clone(),
            });
        }
        let version = rest::version_of(&loaded.metadata_location);
        self.table_of(
            topic,
            version,
            loaded.metadata,
            loaded.metadata_location.clone(),
            Some(loaded.metadata_location),
        )
    }

    /// Creates the table in the REST catalog from the metadata [`Self::create_table`]
    /// made, then makes the catalog's metadata what Strata's files need where the catalog
    /// chose otherwise: catalogs may number a new table's fields afresh (Strata's files
    /// carry their ids), and a create takes one partition spec (Strata has two).
    async fn create_in_rest(
        &self,
        rest: &RestCatalog,
        namespace: &[String],
        topic: &str,
        ours: TableMetadata,
        schema: &IcebergSchema,
    ) -> Result<Table> {
        let request = json!({
            "name": topic,
            "schema": schema.json,
            "partition-spec": ours.partition_specs[0],
            "write-order": ours.sort_orders[0],
            "stage-create": false,
            "properties": ours.properties,
        });
        let created = rest.create(namespace, topic, &request).await?;
        let mut updates = Vec::new();
        let theirs = &created.metadata;
        let same_schema = theirs
            .current_schema()
            .is_some_and(|s| comparable(s) == comparable(&schema.json));
        if !same_schema {
            let mut ids = schema.json.clone();
            let next_id = theirs
                .schemas
                .iter()
                .filter_map(|s| s["schema-id"].as_i64())
                .max()
                .map_or(0, |m| m + 1);
            ids["schema-id"] = json!(next_id);
            updates.push(json!({"action": "add-schema", "schema": ids,
                "last-column-id": ours.last_column_id.max(theirs.last_column_id)}));
            updates.push(json!({"action": "set-current-schema", "schema-id": -1}));
        }
        for spec in &ours.partition_specs {
            let present = theirs.partition_specs.iter().any(|s| {
                s["spec-id"] == spec["spec-id"]
                    && comparable(&s["fields"]) == comparable(&spec["fields"])
            });
            if !present {
                updates.push(json!({"action": "add-spec", "spec": spec}));
            }
        }
        let loaded = if updates.is_empty() {
            created
        } else {
            let requirements = vec![
                json!({"type": "assert-table-uuid", "uuid": created.metadata.table_uuid}),
                json!({"type": "assert-current-schema-id",
                    "current-schema-id": created.metadata.current_schema_id}),
            ];
            rest.commit(namespace, topic, 1, requirements, updates)
                .await?
        };
        let table = self.rest_table(topic, loaded)?;
        // What Strata's manifests and files rely on: the files' field ids and the two
        // specs with their ids.
        let m = &table.metadata;
        let fits = m
            .current_schema()
            .is_some_and(|s| comparable(s) == comparable(&schema.json))
            && ours.partition_specs.iter().all(|spec| {
                m.partition_specs.iter().any(|s| {
                    s["spec-id"] == spec["spec-id"]
                        && comparable(&s["fields"]) == comparable(&spec["fields"])
                })
            });
        if !fits {
            return Err(IcebergError::Catalog {
                uri: rest.config().uri.clone(),
                reason: format!(
                    "created table {topic}, but its schema or partition specs are not the ones \
                     Strata's files need (field ids, spec ids 0 and 1): drop the table and use \
                     a catalog that keeps the field ids a client gives"
                ),
            });
        }
        table.check_location()?;
        Ok(table)
    }

    async fn highest_listed(&self, dir: &str) -> Result<Option<u64>> {
        let highest = self
            .store
            .list(dir)
            .await?
            .iter()
            .filter_map(|meta| {
                let name = meta.path.rsplit('/').next()?;
                name.strip_prefix('v')?
                    .strip_suffix(".metadata.json")?
                    .parse::<u64>()
                    .ok()
            })
            .max();
        Ok(highest)
    }
}

/// `dir/name`, or `name` at the store's root.
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
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
    catalog: Catalog,
    topic: String,
    version: u64,
    metadata: TableMetadata,
    schema: IcebergSchema,
    partition_source: i32,
    timestamp_source: i32,
    last_commit: CommitStats,
    /// In a REST catalog: the metadata file the catalog answered with.
    rest_location: Option<String>,
}

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
    fn metadata_key(&self) -> Result<String> {
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
    fn check_location(&self) -> Result<()> {
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

    /// The commit point: writes this table's metadata as `v{version}.metadata.json`
    /// with [`PutMode::Create`], then the version hint. A store answering
    /// [`ErrorKind::AlreadyExists`] or [`ErrorKind::PreconditionFailed`] means another
    /// writer committed this version first: [`IcebergError::CommitConflict`].
    ///
    /// The store is usually wrapped with retries (`strata_store::layered`). A create
    /// whose first attempt was applied but whose answer was lost (a timeout, a dropped
    /// connection) finds the key taken when retried. The retry wrapper reads the object
    /// back and, when it holds exactly our bytes, reports success; when it cannot tell
    /// (the read-back failed too, or a store without that wrapper), the put comes back
    /// as AlreadyExists and this is a `CommitConflict` although our own version is the
    /// one committed. That is safe: the caller reloads as after any conflict and finds
    /// its own snapshot current, with its offsets in
    /// [`Table::last_committed_offsets`], so retrying the same files is refused
    /// ([`IcebergError::OffsetsAlreadyCommitted`]) instead of adding them twice, and a
    /// publisher resuming after the committed offsets has nothing left to commit.
    async fn put_version(&self, version: u64) -> Result<()> {
        let store = &self.catalog.store;
        let path = self.catalog.metadata_path(&self.topic, version);
        let body = Bytes::from(serde_json::to_vec_pretty(&self.metadata)?);
        match store.put(&path, body, PutMode::Create).await {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed
                ) =>
            {
                return Err(IcebergError::CommitConflict {
                    table: self.topic.clone(),
                    version,
                });
            }
            Err(e) => return Err(e.into()),
        }
        let hint = join(&self.catalog.metadata_dir(&self.topic), "version-hint.text");
        store
            .put(
                &hint,
                Bytes::from(version.to_string().into_bytes()),
                PutMode::Overwrite,
            )
            .await?;
        Ok(())
    }

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

    /// Merges the smallest manifests of earlier snapshots under the spec with the most of
    /// them into one, so the list has at most [`MAX_MANIFESTS`] (at least
    /// [`MERGE_AT_ONCE`] at a time, so merges are not every commit). Their files become
    /// `EXISTING`; `DELETED` entries (of earlier snapshots) are dropped.
    async fn merge_smallest(
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

    /// Commits `next` as the next version: the current metadata file goes into the
    /// metadata log, which keeps [`PREVIOUS_VERSIONS_MAX_PROPERTY`] entries; with
    /// [`DELETE_AFTER_COMMIT_PROPERTY`] the files that fell out are deleted after the
    /// commit (best effort: a file left behind is only unreferenced). In a REST catalog,
    /// commits what changed from `base` (the metadata as loaded) to `next`'s.
    async fn commit_next(&mut self, mut next: Table, base: &TableMetadata) -> Result<()> {
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

    /// Deletes a file of this catalog by its absolute location; whether it is gone.
    async fn delete_uri(&self, uri: &str) -> bool {
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
    async fn read_uri(&self, uri: &str) -> Result<Bytes> {
        let path = self.path_of(uri)?;
        Ok(self.catalog.store.get(path).await?)
    }
}

/// The table property naming the catalog root (`{cluster_id}`, or
/// `{cluster_id}/dead_letters`) of the Strata cluster that created the table: a REST
/// catalog shared by clusters must not let one commit to another's table.
pub const ROOT_PROPERTY: &str = "strata.root";

/// A schema's or spec's JSON with only what identifies it (ids, names, types,
/// requiredness, transforms): what a catalog may add (docs, defaults) left out.
fn comparable(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "type"
                            | "fields"
                            | "id"
                            | "name"
                            | "required"
                            | "element-id"
                            | "element"
                            | "element-required"
                            | "key-id"
                            | "key"
                            | "value-id"
                            | "value"
                            | "value-required"
                            | "source-id"
                            | "field-id"
                            | "transform"
                    )
                })
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(comparable).collect()),
        other => other.clone(),
    }
}

/// What a REST commit from `old` to `new` asks (the spec's `TableRequirement`s) and
/// does (its `TableUpdate`s): the schemas, properties, snapshots and `main` branch that
/// changed. The requirements make it apply only to the table as loaded.
fn rest_changes(old: &TableMetadata, new: &TableMetadata) -> (Vec<Value>, Vec<Value>) {
    let mut requirements = vec![json!({"type": "assert-table-uuid", "uuid": old.table_uuid})];
    let mut updates = Vec::new();
    let old_schemas: BTreeSet<i64> = old
        .schemas
        .iter()
        .filter_map(|s| s["schema-id"].as_i64())
        .collect();
    let added: Vec<&Value> = new
        .schemas
        .iter()
        .filter(|s| {
            s["schema-id"]
                .as_i64()
                .is_some_and(|id| !old_schemas.contains(&id))
        })
        .collect();
    if !added.is_empty() || new.current_schema_id != old.current_schema_id {
        requirements.push(json!({"type": "assert-current-schema-id",
            "current-schema-id": old.current_schema_id}));
        requirements.push(json!({"type": "assert-last-assigned-field-id",
            "last-assigned-field-id": old.last_column_id}));
    }
    for s in &added {
        updates.push(json!({"action": "add-schema", "schema": s,
            "last-column-id": new.last_column_id}));
    }
    if new.current_schema_id != old.current_schema_id {
        updates.push(json!({"action": "set-current-schema", "schema-id": new.current_schema_id}));
    }
    let changed: BTreeMap<&String, &String> = new
        .properties
        .iter()
        .filter(|(k, v)| old.properties.get(*k) != Some(*v))
        .collect();
    if !changed.is_empty() {
        updates.push(json!({"action": "set-properties", "updates": changed}));
    }
    let gone: Vec<&String> = old
        .properties
        .keys()
        .filter(|k| !new.properties.contains_key(*k))
        .collect();
    if !gone.is_empty() {
        updates.push(json!({"action": "remove-properties", "removals": gone}));
    }
    let old_ids: BTreeSet<i64> = old.snapshots.iter().map(|s| s.snapshot_id).collect();
    let new_ids: BTreeSet<i64> = new.snapshots.iter().map(|s| s.snapshot_id).collect();
    for s in new
        .snapshots
        .iter()
        .filter(|s| !old_ids.contains(&s.snapshot_id))
    {
        updates.push(json!({"action": "add-snapshot", "snapshot": s}));
    }
    let main = |m: &TableMetadata| m.refs.get("main").map(|r| r.snapshot_id);
    if main(new) != main(old)
        && let Some(id) = main(new)
    {
        updates.push(json!({"action": "set-snapshot-ref", "ref-name": "main",
            "type": "branch", "snapshot-id": id}));
    }
    let removed: Vec<i64> = old_ids.difference(&new_ids).copied().collect();
    if !removed.is_empty() {
        updates.push(json!({"action": "remove-snapshots", "snapshot-ids": removed}));
    }
    // Whatever changed, the branch must be where it was when the table was loaded.
    requirements.push(json!({"type": "assert-ref-snapshot-id", "ref": "main",
        "snapshot-id": main(old)}));
    (requirements, updates)
}

/// The partition spec of a manifest's `partition_spec_id`.
fn spec_of_id(id: i32, manifest: &str) -> Result<PartitionSpec> {
    [PartitionSpec::DEFAULT, PartitionSpec::partition_only()]
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| IcebergError::CorruptMetadata {
            location: manifest.to_string(),
            reason: format!("unknown partition spec {id}"),
        })
}

/// The new snapshot's identity while its files are written.
struct Writing {
    snapshot_id: i64,
    sequence_number: i64,
    commit_uuid: Uuid,
    meta_dir: String,
    /// Manifests written so far (their file names' `m{i}`).
    written: usize,
}

impl Writing {
    fn new(table: &Table) -> Result<Writing> {
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
    async fn put_manifest(
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

#[cfg(test)]
mod tests {
    use strata_parquet::{ValueFormat, file_schema};
    use strata_store::ObjectBackend;

    use super::*;
    use crate::manifest::tests::file;

    /// A new, empty table `t` of binary-valued files in `c`.
    async fn table(c: &Catalog) -> Table {
        c.create_table("t", &file_schema(&ValueFormat::Binary))
            .await
            .unwrap()
    }

    fn catalog() -> Catalog {
        Catalog::new(ObjectBackend::memory().into_dyn(), "memory:///", "root")
    }

    /// What a REST catalog is asked: the snapshot a commit adds and `main` moved to it,
    /// only if `main` is still where the table was loaded; an expiry's removed snapshots.
    #[tokio::test]
    async fn rest_commits_ask_for_the_change_under_the_loaded_branch() {
        let c = catalog();
        let mut t = table(&c).await;
        t.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
        let loaded = t.metadata().clone();
        let first = loaded.current_snapshot_id.unwrap();
        t.append(vec![file(0, Some(1), 10, 19)]).await.unwrap();
        let second = t.metadata().current_snapshot_id.unwrap();
        let (requirements, updates) = rest_changes(&loaded, t.metadata());
        assert!(
            requirements.contains(&json!({"type": "assert-ref-snapshot-id",
            "ref": "main", "snapshot-id": first}))
        );
        assert!(requirements.contains(&json!({"type": "assert-table-uuid",
            "uuid": loaded.table_uuid})));
        let actions: Vec<&str> = updates
            .iter()
            .map(|u| u["action"].as_str().unwrap())
            .collect();
        assert_eq!(actions, ["add-snapshot", "set-snapshot-ref"]);
        assert_eq!(updates[0]["snapshot"]["snapshot-id"], json!(second));
        assert_eq!(updates[0]["snapshot"]["parent-snapshot-id"], json!(first));
        assert_eq!(updates[1]["snapshot-id"], json!(second));
        // Before the first snapshot, `main` must not exist yet.
        let (requirements, _) = rest_changes(&table(&catalog()).await.metadata, &loaded);
        assert!(
            requirements.contains(&json!({"type": "assert-ref-snapshot-id",
            "ref": "main", "snapshot-id": null}))
        );

        let before = t.metadata().clone();
        t.expire_snapshots(i64::MAX, 1).await.unwrap();
        let (_, updates) = rest_changes(&before, t.metadata());
        assert_eq!(
            updates,
            [json!({"action": "remove-snapshots", "snapshot-ids": [first]})]
        );
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

    /// Two handles of one table, loaded at the same version, commit at the same time
    /// through one store wrapped as the broker holds it (retries, timeouts, metrics), in
    /// memory and in a local directory: exactly one wins, the other gets
    /// `CommitConflict` and changes nothing. After reloading, the loser sees the
    /// winner's offsets: its own files overlap them and are refused, files above them
    /// commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_handles_over_one_blob_store_have_exactly_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let schema = file_schema(&ValueFormat::Binary);
        for round in 0..16 {
            let (backend, uri) = if round % 2 == 0 {
                (ObjectBackend::memory().into_dyn(), "memory:///".to_string())
            } else {
                let d = dir.path().join(format!("r{round}"));
                let uri = format!("file://{}", d.display());
                (ObjectBackend::local(&d).unwrap().into_dyn(), uri)
            };
            let store = strata_store::layered(backend, strata_store::LayerConfig::default());
            let c = Catalog::new(store, &uri, "root");
            c.create_table("t", &schema).await.unwrap();
            let a = c.load_table("t").await.unwrap();
            let b = c.load_table("t").await.unwrap();
            // Two publishers of partition 0 that both read "nothing committed yet".
            let files = [file(0, Some(1), 0, 9), file(0, Some(1), 0, 14)];
            let start = Arc::new(tokio::sync::Barrier::new(2));
            let race = |mut t: Table, f: DataFile| {
                let start = start.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    let r = t.append(vec![f]).await;
                    (t, r)
                })
            };
            let (ja, jb) = (race(a, files[0].clone()), race(b, files[1].clone()));
            let (ra, rb) = (ja.await.unwrap(), jb.await.unwrap());
            // (the winner's table, its file's index, the loser's table, its index, error)
            let (won, w, mut lost_table, l, e) = match (ra, rb) {
                ((wt, Ok(_)), (lt, Err(e))) => (wt, 0, lt, 1, e),
                ((lt, Err(e)), (wt, Ok(_))) => (wt, 1, lt, 0, e),
                (a, b) => panic!("round {round}: not one winner: {:?} {:?}", a.1, b.1),
            };
            assert!(
                matches!(e, IcebergError::CommitConflict { version: 2, .. }),
                "round {round}: {e}"
            );
            assert_eq!((won.version(), lost_table.version()), (2, 1));
            assert!(lost_table.last_committed_offsets().is_empty());
            let committed = files[w].last_offset;

            // The store holds the winner's version 2, and no version 3.
            let loaded = c.load_table("t").await.unwrap();
            assert_eq!(loaded.version(), 2);
            assert_eq!(loaded.metadata(), won.metadata());
            assert_eq!(live(&loaded).await, BTreeSet::from([loc(&files[w])]));

            // The loser reloads: the winner's offsets are committed, so its own file
            // (overlapping them) is refused and files above them go in.
            lost_table = c.load_table("t").await.unwrap();
            assert_eq!(
                lost_table.last_committed_offsets(),
                BTreeMap::from([(0, committed)])
            );
            assert!(matches!(
                lost_table.append(vec![files[l].clone()]).await,
                Err(IcebergError::OffsetsAlreadyCommitted { .. })
            ));
            let next = file(0, Some(1), committed + 1, committed + 10);
            lost_table.append(vec![next.clone()]).await.unwrap();
            assert_eq!(lost_table.version(), 3);
            let t = c.load_table("t").await.unwrap();
            assert_eq!(t.version(), 3);
            assert_eq!(
                t.last_committed_offsets(),
                BTreeMap::from([(0, committed + 10)])
            );
            assert_eq!(live(&t).await, BTreeSet::from([loc(&files[w]), loc(&next)]));
        }
    }

    /// A create of the next version that the store applied but whose answer was lost
    /// (a timeout after the fact) is retried by the store wrapper, which finds its own
    /// bytes there and reports success. When it cannot tell (its read-back fails too),
    /// the commit is a `CommitConflict`; reloading finds the commit in place and its
    /// files are not added twice.
    #[tokio::test]
    async fn a_commit_whose_answer_was_lost_is_never_applied_twice() {
        use std::time::Duration;
        use strata_store::{Fault, FaultStore, LayerConfig, Op, RetryConfig};

        let faults = FaultStore::new(ObjectBackend::memory().into_dyn());
        let handle = faults.handle();
        let config = LayerConfig {
            retry: RetryConfig {
                initial_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(5),
                seed: Some(7),
                ..RetryConfig::default()
            },
            ..LayerConfig::default()
        };
        let store = strata_store::layered(Arc::new(faults), config);
        let c = Catalog::new(store, "memory:///", "root");
        let mut t = table(&c).await;
        let lost_answer = |version: u64| {
            Fault::new(ErrorKind::Timeout)
                .op(Op::Put)
                .prefix(format!("root/iceberg/t/metadata/v{version}.metadata.json"))
                .after_call()
        };

        // The retry finds its own version 2: success.
        handle.inject(lost_answer(2));
        let a = file(0, Some(1), 0, 9);
        t.append(vec![a.clone()]).await.unwrap();
        assert_eq!(handle.injected(), 1);
        assert_eq!(t.version(), 2);
        assert_eq!(c.load_table("t").await.unwrap().metadata(), t.metadata());

        // The read-back fails as well: a conflict, although version 3 is ours.
        handle.inject(lost_answer(3));
        handle.inject(
            Fault::new(ErrorKind::Permanent)
                .op(Op::Get)
                .prefix("root/iceberg/t/metadata/v3.metadata.json"),
        );
        let b = file(0, Some(1), 10, 19);
        let e = t.append(vec![b.clone()]).await.unwrap_err();
        assert!(
            matches!(e, IcebergError::CommitConflict { version: 3, .. }),
            "{e}"
        );
        assert_eq!(handle.injected(), 3);
        let mut t = c.load_table("t").await.unwrap();
        assert_eq!(t.version(), 3);
        assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 19)]));
        assert!(matches!(
            t.append(vec![b.clone()]).await,
            Err(IcebergError::OffsetsAlreadyCommitted { committed: 19, .. })
        ));
        assert_eq!(live(&t).await, BTreeSet::from([loc(&a), loc(&b)]));
    }

    #[tokio::test]
    async fn a_local_file_system_refuses_the_second_commit_too() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectBackend::local(dir.path()).unwrap().into_dyn();
        let c = Catalog::new(store, &format!("file://{}", dir.path().display()), "");
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
        let mut t = table(&c).await;
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
        let mut t = table(&c).await;
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
        let mut t = table(&c).await;
        t.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
        t.append(vec![file(0, Some(1), 10, 19)]).await.unwrap();
        let hint = "root/iceberg/t/metadata/version-hint.text";
        // A crash between the commit and the hint: the hint says 2, v3 exists.
        c.store
            .put(hint, Bytes::from_static(b"2"), PutMode::Overwrite)
            .await
            .unwrap();
        let loaded = c.load_table("t").await.unwrap();
        assert_eq!(loaded.version(), 3);
        assert_eq!(loaded.metadata(), t.metadata());
        c.store.delete(hint).await.unwrap();
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

    /// Every entry of every manifest of `s`, with the manifest it is in.
    async fn entries(t: &Table, s: &Snapshot) -> Vec<(ManifestFile, ManifestEntry)> {
        let list = read_manifest_list(&t.read_uri(&s.manifest_list).await.unwrap(), "l").unwrap();
        let mut out = Vec::new();
        for m in list {
            let bytes = t.read_uri(&m.manifest_path).await.unwrap();
            for e in read_manifest(&bytes, &m.manifest_path).unwrap() {
                out.push((m.clone(), e));
            }
        }
        out
    }

    /// The locations of the live files of the current snapshot.
    async fn live(t: &Table) -> BTreeSet<String> {
        let s = t.metadata().current_snapshot().unwrap().clone();
        entries(t, &s)
            .await
            .into_iter()
            .filter(|(_, e)| e.is_live())
            .map(|(_, e)| e.file.location)
            .collect()
    }

    async fn exists(c: &Catalog, uri: &str) -> bool {
        let rel = uri.strip_prefix("memory:///").unwrap();
        c.store.head(rel).await.is_ok()
    }

    fn loc(f: &DataFile) -> String {
        f.location.clone()
    }

    #[tokio::test]
    async fn a_delete_rewrites_the_manifest_and_keeps_every_committed_offset() {
        let c = catalog();
        let mut t = table(&c).await;
        let (a, b, p1) = (
            file(0, Some(1), 0, 9),
            file(0, Some(1), 10, 19),
            file(1, Some(1), 0, 4),
        );
        let s1 = t.append(vec![a.clone(), b.clone()]).await.unwrap();
        let s2 = t.append(vec![p1.clone()]).await.unwrap();
        let s3 = t
            .commit(vec![], &[loc(&b)], Operation::Delete)
            .await
            .unwrap();
        assert_eq!(s3.summary["operation"], "delete");
        assert_eq!(s3.summary["deleted-data-files"], "1");
        assert_eq!(s3.summary["deleted-records"], "10");
        assert_eq!(s3.summary["total-data-files"], "2");
        assert_eq!(s3.summary["total-records"], "15");
        assert!(!s3.summary.contains_key("added-data-files"));
        assert!(!s3.summary.contains_key(&summary_keys::first_offset(0)));
        // The delete does not make the table forget where either partition is.
        assert_eq!(s3.committed_offsets(), BTreeMap::from([(0, 19), (1, 4)]));
        assert_eq!(
            c.load_table("t").await.unwrap().last_committed_offsets(),
            BTreeMap::from([(0, 19), (1, 4)])
        );
        assert_eq!(live(&t).await, BTreeSet::from([loc(&a), loc(&p1)]));
        assert_eq!(
            t.last_commit_stats(),
            CommitStats {
                manifests_read: 2,
                manifests_written: 1
            }
        );

        let got = entries(&t, &s3).await;
        let of = |f: &DataFile| {
            got.iter()
                .find(|(_, e)| e.file.location == f.location)
                .unwrap()
        };
        // a: EXISTING, still with the snapshot and sequence number that added it.
        let (m, ea) = of(&a);
        assert_eq!(
            (
                ea.status,
                ea.snapshot_id,
                ea.sequence_number,
                ea.file_sequence_number
            ),
            (STATUS_EXISTING, s1.snapshot_id, 1, 1)
        );
        // b: DELETED by the delete snapshot, its data sequence number kept.
        let (mb, eb) = of(&b);
        assert_eq!(
            (eb.status, eb.snapshot_id, eb.sequence_number),
            (STATUS_DELETED, s3.snapshot_id, 1)
        );
        assert_eq!(m, mb, "one rewritten manifest");
        assert_eq!(
            (
                m.added_snapshot_id,
                m.sequence_number,
                m.min_sequence_number,
                m.added_files_count,
                m.existing_files_count,
                m.deleted_files_count,
                m.existing_rows_count,
                m.deleted_rows_count
            ),
            (s3.snapshot_id, 3, 1, 0, 1, 1, 10, 10)
        );
        // Partition 1's manifest is carried as it was.
        let (m1, e1) = of(&p1);
        assert_eq!(
            (m1.added_snapshot_id, e1.status),
            (s2.snapshot_id, STATUS_ADDED)
        );

        // Removing what the table does not hold (any more) is an error naming it.
        for missing in [loc(&b), "file:///nowhere.parquet".to_string()] {
            let e = t
                .commit(vec![], &[loc(&a), missing.clone()], Operation::Delete)
                .await
                .unwrap_err();
            assert!(
                matches!(&e, IcebergError::NoSuchDataFile { location, .. } if *location == missing),
                "{e}"
            );
            assert!(e.to_string().contains(&missing), "{e}");
        }
        assert_eq!(t.version(), 4);

        // The next rewrite drops b's DELETED entry from the earlier snapshot.
        let s4 = t
            .commit(vec![], &[loc(&a)], Operation::Delete)
            .await
            .unwrap();
        let got = entries(&t, &s4).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().all(|(_, e)| e.file.location != b.location));
        assert_eq!(s4.summary["total-data-files"], "1");
        assert_eq!(s4.committed_offsets(), BTreeMap::from([(0, 19), (1, 4)]));
        // Appends resume after the committed offset, not after what is left.
        assert!(matches!(
            t.append(vec![file(0, Some(1), 15, 25)]).await,
            Err(IcebergError::OffsetsAlreadyCommitted { committed: 19, .. })
        ));
        t.append(vec![file(0, Some(1), 20, 25)]).await.unwrap();
        assert_eq!(
            t.last_committed_offsets(),
            BTreeMap::from([(0, 25), (1, 4)])
        );
    }

    #[tokio::test]
    async fn replace_keeps_offsets_and_overwrite_advances_only_for_new_ones() {
        let c = catalog();
        let mut t = table(&c).await;
        let (a, b, p1) = (
            file(0, Some(1), 0, 9),
            file(0, Some(1), 10, 19),
            file(1, None, 0, 4),
        );
        t.append(vec![a.clone()]).await.unwrap();
        t.append(vec![b.clone(), p1.clone()]).await.unwrap();
        let ab = file(0, Some(1), 0, 19);
        // Operations must match what the commit does.
        for (add, remove, op) in [
            (vec![ab.clone()], vec![loc(&a)], Operation::Append),
            (vec![ab.clone()], vec![loc(&a)], Operation::Delete),
            (vec![], vec![], Operation::Delete),
            (vec![ab.clone()], vec![], Operation::Replace),
            (vec![], vec![loc(&a)], Operation::Overwrite),
            // Not the same rows.
            (vec![ab.clone()], vec![loc(&a)], Operation::Replace),
            // Offsets beyond the committed ones are not a rewrite.
            (
                vec![file(0, Some(1), 0, 29)],
                vec![loc(&a), loc(&b)],
                Operation::Replace,
            ),
        ] {
            let e = t.commit(add, &remove, op).await.unwrap_err();
            assert!(
                matches!(e, IcebergError::InvalidCommit { .. }),
                "{op:?}: {e}"
            );
        }
        assert_eq!(t.version(), 3);

        let s = t
            .commit(vec![ab.clone()], &[loc(&a), loc(&b)], Operation::Replace)
            .await
            .unwrap();
        assert_eq!(s.summary["operation"], "replace");
        assert_eq!(s.summary["added-data-files"], "1");
        assert_eq!(s.summary["deleted-data-files"], "2");
        assert_eq!(s.summary["total-data-files"], "2");
        assert_eq!(s.summary["total-records"], "25");
        assert!(!s.summary.contains_key(&summary_keys::first_offset(0)));
        assert_eq!(
            t.last_committed_offsets(),
            BTreeMap::from([(0, 19), (1, 4)])
        );
        assert_eq!(live(&t).await, BTreeSet::from([loc(&ab), loc(&p1)]));
        let got = entries(&t, &s).await;
        let added: Vec<_> = got
            .iter()
            .filter(|(_, e)| e.status == STATUS_ADDED && e.snapshot_id == s.snapshot_id)
            .collect();
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].1.file.location, ab.location);
        assert_eq!(added[0].1.sequence_number, 3);
        assert_eq!(
            got.iter()
                .filter(|(_, e)| e.status == STATUS_DELETED)
                .count(),
            2
        );

        // An overwrite: ab's rows rewritten (fewer), and new offsets of partition 0.
        let fewer = file(0, Some(1), 0, 14);
        let new = file(0, Some(2), 20, 25);
        let s = t
            .commit(
                vec![fewer.clone(), new.clone()],
                &[loc(&ab)],
                Operation::Overwrite,
            )
            .await
            .unwrap();
        assert_eq!(s.summary["operation"], "overwrite");
        assert_eq!(s.summary[&summary_keys::first_offset(0)], "20");
        assert_eq!(s.summary[&summary_keys::last_offset(0)], "25");
        assert_eq!(s.summary["total-records"], "26");
        assert_eq!(
            t.last_committed_offsets(),
            BTreeMap::from([(0, 25), (1, 4)])
        );
        assert_eq!(
            live(&t).await,
            BTreeSet::from([loc(&fewer), loc(&new), loc(&p1)])
        );
        // A file straddling the committed offset is neither.
        assert!(matches!(
            t.commit(
                vec![file(0, Some(2), 20, 30)],
                &[loc(&new)],
                Operation::Overwrite
            )
            .await,
            Err(IcebergError::OffsetsAlreadyCommitted { .. })
        ));
    }

    #[tokio::test]
    async fn manifests_stay_bounded_over_many_commits() {
        let c = catalog();
        let mut t = table(&c).await;
        let mut all = BTreeSet::new();
        let mut most = CommitStats::default();
        for i in 0..300i64 {
            // Two partitions, a file across midnight now and then (the other spec).
            let p = (i % 2) as i32;
            let day = (i % 7 != 0).then_some(1);
            let f = file(p, day, i * 10, i * 10 + 9);
            all.insert(loc(&f));
            t.append(vec![f]).await.unwrap();
            let s = t.metadata().current_snapshot().unwrap().clone();
            let list =
                read_manifest_list(&t.read_uri(&s.manifest_list).await.unwrap(), "l").unwrap();
            assert!(list.len() <= MAX_MANIFESTS, "commit {i}: {}", list.len());
            let st = t.last_commit_stats();
            most.manifests_read = most.manifests_read.max(st.manifests_read);
            most.manifests_written = most.manifests_written.max(st.manifests_written);
        }
        // Per commit: its own manifest, and at most one merge.
        assert_eq!(
            most,
            CommitStats {
                manifests_read: MERGE_AT_ONCE,
                manifests_written: 2
            }
        );
        assert_eq!(live(&t).await, all);
        let s = t.metadata().current_snapshot().unwrap().clone();
        let got = entries(&t, &s).await;
        assert_eq!(got.len(), 300, "each file once");
        // Merged manifests keep one spec each, and each file's own sequence number.
        for (m, e) in &got {
            assert_eq!(m.partition_spec_id, PartitionSpec::of(&e.file).id);
            let i = e.file.first_offset / 10;
            assert_eq!(e.sequence_number, i + 1);
        }
        assert_eq!(s.summary["total-data-files"], "300");
        // The metadata log stays at its default bound; older metadata files are gone.
        assert_eq!(
            t.metadata().metadata_log.len(),
            DEFAULT_PREVIOUS_VERSIONS_MAX
        );
        assert!(!exists(&c, "memory:///root/iceberg/t/metadata/v200.metadata.json").await);
        assert!(exists(&c, &t.metadata().metadata_log[0].metadata_file).await);
        let reloaded = c.load_table("t").await.unwrap();
        assert_eq!(reloaded.version(), 301);
    }

    #[tokio::test]
    async fn metadata_log_keeps_previous_versions_max() {
        let c = catalog();
        let mut t = table(&c).await;
        assert_eq!(
            t.metadata().properties[DELETE_AFTER_COMMIT_PROPERTY],
            "true"
        );
        assert_eq!(
            t.metadata().properties[PREVIOUS_VERSIONS_MAX_PROPERTY],
            "100"
        );
        t.metadata
            .properties
            .insert(PREVIOUS_VERSIONS_MAX_PROPERTY.to_string(), "3".to_string());
        for i in 0..6 {
            t.append(vec![file(0, Some(1), i * 10, i * 10 + 9)])
                .await
                .unwrap();
        }
        assert_eq!(t.version(), 7);
        let log: Vec<&str> = t
            .metadata()
            .metadata_log
            .iter()
            .map(|e| e.metadata_file.as_str())
            .collect();
        let v = |n: u64| format!("memory:///root/iceberg/t/metadata/v{n}.metadata.json");
        assert_eq!(log, [v(4), v(5), v(6)]);
        for n in 1..=3 {
            assert!(!exists(&c, &v(n)).await, "v{n} deleted");
        }
        for n in 4..=7 {
            assert!(exists(&c, &v(n)).await, "v{n} kept");
        }
        // Without delete-after-commit the files stay (Iceberg's default).
        t.metadata.properties.insert(
            DELETE_AFTER_COMMIT_PROPERTY.to_string(),
            "false".to_string(),
        );
        t.append(vec![file(0, Some(1), 100, 109)]).await.unwrap();
        assert!(exists(&c, &v(4)).await);
        assert_eq!(t.metadata().metadata_log.len(), 3);
    }

    #[tokio::test]
    async fn expiry_drops_old_snapshots_and_returns_what_they_alone_held() {
        let c = catalog();
        let mut t = table(&c).await;
        let (a, b, x) = (
            file(0, Some(1), 0, 9),
            file(1, Some(1), 0, 9),
            file(0, Some(1), 10, 19),
        );
        let s1 = t.append(vec![a.clone()]).await.unwrap();
        let s2 = t.append(vec![b.clone()]).await.unwrap();
        let s3 = t
            .commit(vec![], &[loc(&a)], Operation::Delete)
            .await
            .unwrap();
        let s4 = t.append(vec![x.clone()]).await.unwrap();
        let m1 = read_manifest_list(&t.read_uri(&s1.manifest_list).await.unwrap(), "l").unwrap();
        let stale = c.load_table("t").await.unwrap();

        // Nothing is old enough: nothing happens.
        let version = t.version();
        assert_eq!(t.expire_snapshots(0, 1).await.unwrap(), Expired::default());
        assert_eq!(t.version(), version);

        // All old enough, keep the newest two (s3, s4).
        let e = t.expire_snapshots(i64::MAX, 2).await.unwrap();
        assert_eq!(e.snapshot_ids, [s1.snapshot_id, s2.snapshot_id]);
        assert_eq!(
            e.manifest_lists,
            [s1.manifest_list.clone(), s2.manifest_list.clone()]
        );
        // s1's manifest (only a) was rewritten by the delete; s2's is still listed.
        assert_eq!(e.manifests, [m1[0].manifest_path.clone()]);
        assert_eq!(e.data_files, [loc(&a)], "a is in no kept snapshot");
        assert!(e.not_deleted.is_empty());
        for uri in e.manifest_lists.iter().chain(&e.manifests) {
            assert!(!exists(&c, uri).await, "{uri} deleted");
        }
        let loaded = c.load_table("t").await.unwrap();
        let ids: Vec<i64> = loaded
            .metadata()
            .snapshots
            .iter()
            .map(|s| s.snapshot_id)
            .collect();
        assert_eq!(ids, [s3.snapshot_id, s4.snapshot_id]);
        let log: Vec<i64> = loaded
            .metadata()
            .snapshot_log
            .iter()
            .map(|s| s.snapshot_id)
            .collect();
        assert_eq!(log, [s3.snapshot_id, s4.snapshot_id]);
        assert_eq!(loaded.metadata().current_snapshot_id, Some(s4.snapshot_id));
        assert_eq!(live(&loaded).await, BTreeSet::from([loc(&b), loc(&x)]));
        assert_eq!(
            loaded.last_committed_offsets(),
            BTreeMap::from([(0, 19), (1, 9)])
        );
        // Every kept snapshot still reads.
        for s in &loaded.metadata().snapshots {
            entries(&loaded, s).await;
        }

        // A writer that loaded before the expiry loses the race, deleting nothing.
        let mut stale = stale;
        let s4_list = s4.manifest_list.clone();
        assert!(matches!(
            stale.expire_snapshots(i64::MAX, 1).await,
            Err(IcebergError::CommitConflict { .. })
        ));
        assert!(exists(&c, &s4_list).await);
        assert!(exists(&c, &s3.manifest_list).await);

        // Never the current snapshot, even with retain_last 0.
        let e = t.expire_snapshots(i64::MAX, 0).await.unwrap();
        assert_eq!(e.snapshot_ids, [s3.snapshot_id]);
        // The delete that removed a is gone too, but a was already handed back.
        assert!(e.data_files.is_empty(), "{e:?}");
        assert_eq!(t.metadata().snapshots.len(), 1);
        assert_eq!(live(&t).await, BTreeSet::from([loc(&b), loc(&x)]));
        t.append(vec![file(0, Some(1), 20, 29)]).await.unwrap();
    }
}
