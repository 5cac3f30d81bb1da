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
//!
//! Files: `fs_pointer` (the file-system catalog's pointers and commit point),
//! `rest_pointer` and `rest_diff` (the REST catalog's tables and commits), `table` (one
//! version and its files), `commit` and `writing` (a new snapshot and its manifests),
//! `expire` (snapshot expiry), `tests`.
//!
//! [`PutMode::Create`]: strata_store::PutMode::Create

mod commit;
mod expire;
mod fs_pointer;
mod rest_diff;
mod rest_pointer;
mod table;
#[cfg(test)]
mod tests;
mod writing;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::datatypes::Schema as ArrowSchema;
use serde_json::json;
use strata_store::BlobStore;
use uuid::Uuid;

use crate::datafile::DataFile;
use crate::error::{IcebergError, Result};
use crate::metadata::TableMetadata;
use crate::rest::RestCatalog;
use crate::schema::IcebergSchema;
use crate::spec::{DAY_FIELD_ID, PartitionSpec};
use strata_parquet::columns;

pub use rest_pointer::ROOT_PROPERTY;

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
        self.load_from_store(topic).await
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
