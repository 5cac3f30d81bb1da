//! Publishing a topic's Parquet files as an Iceberg table (issue 20).
//!
//! Each partition's leader converts its sealed segments to Parquet and records the files
//! in the partition's `_manifest.json` (strata-parquet's sink). One broker per topic, the
//! leader of its partition 0, then publishes them: every round ([`publish`], once per
//! `--iceberg-commit-interval`) it reads the partitions' manifests and the table's
//! current snapshot and commits, as ONE snapshot, every file above the offsets the table
//! has committed per partition, and removes the files a manifest no longer lists (Parquet
//! retention deleted them).
//!
//! Exactly once, without any state of its own: what is committed is in the table (each
//! snapshot's summary carries every partition's committed offset,
//! `strata.partition.{p}.committed-offset`), and what exists is in the manifests. A
//! round that dies between writing manifests and committing leaves unreferenced objects,
//! never a duplicate; the next round (on this broker or on a new leader of partition 0)
//! starts again from the table. Two brokers that both think they lead partition 0 race
//! on the create-only put of the next metadata version: one wins, the other gets
//! [`IcebergError::CommitConflict`], reloads, and finds nothing left to add.

use std::collections::{BTreeMap, BTreeSet};

use strata_iceberg::IcebergError;
use strata_iceberg::catalog::Operation;
pub use strata_iceberg::{Catalog, RestCatalog, RestConfig};
use strata_parquet::{ConvertOptions, ParquetLayout, ParquetSink, SinkError};
use strata_proto::TopicConfig;

/// What a round committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The table's metadata version after the commit.
    pub version: u64,
    pub added_files: usize,
    pub removed_files: usize,
    /// Per partition, the last offset the table holds now.
    pub committed: BTreeMap<i32, i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("the topic's Parquet settings: {0}")]
    Options(#[from] strata_parquet::ConvertError),
    #[error("reading the Parquet manifests: {0}")]
    Manifest(#[from] SinkError),
    #[error(transparent)]
    Iceberg(#[from] IcebergError),
    #[error(
        "partition {partition}: the Parquet file of offsets {first}..={last} straddles the table's committed offset {committed}"
    )]
    Straddle {
        partition: i32,
        first: i64,
        last: i64,
        committed: i64,
    },
    #[error(
        "partition {partition}: the Parquet file {file} rewrites rows of {kept}, which the table keeps"
    )]
    Overlap {
        partition: i32,
        file: String,
        kept: String,
    },
}

/// `topic`'s table, or `None` when it has not been created yet.
async fn load_if_exists(
    catalog: &Catalog,
    topic: &str,
) -> Result<Option<strata_iceberg::Table>, IcebergError> {
    match catalog.load_table(topic).await {
        Ok(t) => Ok(Some(t)),
        Err(IcebergError::NoSuchTable { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The Parquet sink whose manifests and files the tables of `catalog` (whose root is
/// the cluster id) are made of.
fn sink(catalog: &Catalog, options: ConvertOptions) -> ParquetSink {
    ParquetSink::new(
        catalog.store().clone(),
        ParquetLayout::new(catalog.root().to_string()),
        options,
    )
}

/// The keys (relative to the store's root) of `partition`'s files that `topic`'s
/// table holds (empty when there is no table yet): what small-file compaction may
/// replace. Reads the table's metadata and its manifests.
pub async fn table_keys(
    catalog: &Catalog,
    topic: &str,
    partition: i32,
) -> Result<BTreeSet<String>, PublishError> {
    let Some(table) = load_if_exists(catalog, topic).await? else {
        return Ok(BTreeSet::new());
    };
    let root = format!("{}/", catalog.store_uri());
    Ok(table
        .live_data_files()
        .await?
        .into_iter()
        .filter(|f| f.partition == partition)
        .filter_map(|f| Some(f.location.strip_prefix(&root)?.to_string()))
        .collect())
}

/// Whether a topic may go from `old` to `new` topic configs as far as its Parquet files
/// (and so its Iceberg table) go: once parquet.enable has been on, its files' value
/// column can only gain nullable members at the end of `parquet.value.schema` (the table
/// evolves its schema for them); switching between binary and typed values, or any other
/// change to the value schema, would give files no one schema reads. And a one-copy topic
/// (remote.storage.format=parquet) cannot go back to raw segments. `Err` says why, for
/// the INVALID_CONFIG answer.
pub fn check_config_change(old: &TopicConfig, new: &TopicConfig) -> Result<(), String> {
    use strata_proto::RemoteStorageFormat;
    if old.remote_storage_format == RemoteStorageFormat::Parquet
        && new.remote_storage_format != RemoteStorageFormat::Parquet
    {
        return Err("remote.storage.format cannot go from parquet back to segments: the bucket holds no raw segments of what is already tiered, so the log would have a hole (create a new topic to keep raw segments)".into());
    }
    if !old.parquet_enable {
        return Ok(());
    }
    let format = |c: &TopicConfig| {
        ConvertOptions::from_topic_config(String::new(), 0, c).map(|o| o.value_format)
    };
    let (Ok(before), Ok(after)) = (format(old), format(new)) else {
        // An invalid schema is refused by the conversion options' own check.
        return Ok(());
    };
    use strata_parquet::ValueFormat::{Binary, Json};
    match (&before, &after) {
        (Binary, Binary) => Ok(()),
        (Json(a), Json(b)) if a.fields() == b.fields() => Ok(()),
        (Json(a), Json(b)) => a.check_evolution(b).map_err(|why| {
            format!(
                "parquet.value.schema: {why}; the topic's Parquet files and Iceberg table keep the schema they have (create a new topic for another)"
            )
        }),
        _ => Err(format!(
            "the Parquet value column would change from {} to {}, which the topic's existing files and Iceberg table cannot share (parquet.value.format=json needs parquet.value.schema); create a new topic for another layout",
            describe(&before),
            describe(&after)
        )),
    }
}

fn describe(f: &strata_parquet::ValueFormat) -> &'static str {
    match f {
        strata_parquet::ValueFormat::Binary => "binary values",
        strata_parquet::ValueFormat::Json(_) => "typed JSON columns",
    }
}

/// A topic's table and Parquet files, for `strata tier iceberg status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableStatus {
    pub topic: String,
    /// The directory holding `metadata/`.
    pub location: String,
    /// The current `v{N}.metadata.json`; `None` before the table exists.
    pub metadata_location: Option<String>,
    pub version: Option<u64>,
    /// Snapshots the metadata keeps (time travel reaches the oldest).
    pub snapshots: usize,
    pub current_snapshot_id: Option<i64>,
    /// The current snapshot's operation (`append`, `replace`, `overwrite`, `delete`).
    pub operation: Option<String>,
    pub committed_at_ms: Option<i64>,
    /// The current snapshot's totals.
    pub records: u64,
    pub data_files: u64,
    pub bytes: u64,
    /// Per partition, the last offset the table holds.
    pub committed_offsets: BTreeMap<i32, i64>,
    /// `parquet.target.file.bytes`.
    pub target_file_bytes: u64,
    pub partitions: Vec<PartitionFiles>,
    /// Topics with typed JSON values: the dead-letter table (values that did not fit).
    pub dead_letters: Option<DeadLetterStatus>,
}

/// A topic's dead-letter table, for `strata tier iceberg status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetterStatus {
    /// The directory holding `metadata/`.
    pub location: String,
    /// The current snapshot's records and files (0 before the table exists).
    pub records: u64,
    pub data_files: u64,
}

/// One partition's Parquet files, from its manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionFiles {
    pub partition: i32,
    pub files: usize,
    /// Files below three quarters of the target: what compaction rewrites.
    pub small_files: usize,
    pub bytes: u64,
    /// The first offset not yet converted.
    pub next_offset: Option<i64>,
}

/// The status of `topic`'s table (see [`publish`] for the arguments) and of its
/// partitions' Parquet files: a read of the table's metadata and of every partition's
/// manifest.
pub async fn status(
    catalog: &Catalog,
    topic: &str,
    partitions: i32,
    config: &TopicConfig,
) -> Result<TableStatus, PublishError> {
    let table = load_if_exists(catalog, topic).await?;
    let options = ConvertOptions::from_topic_config(topic.to_string(), 0, config)?;
    let dead_letters = match options.value_format {
        strata_parquet::ValueFormat::Json(_) => {
            let dead = dead_letter_catalog(catalog);
            let t = load_if_exists(&dead, topic).await?;
            let current = t.as_ref().and_then(|t| t.metadata().current_snapshot());
            Some(DeadLetterStatus {
                location: dead.table_location(topic),
                records: current.map_or(0, |s| s.count("total-records")),
                data_files: current.map_or(0, |s| s.count("total-data-files")),
            })
        }
        strata_parquet::ValueFormat::Binary => None,
    };
    let sink = sink(catalog, options);
    let target = config.parquet_target_file_bytes;
    let mut files = Vec::new();
    for p in 0..partitions {
        let m = sink.manifest(topic, p).await?;
        files.push(PartitionFiles {
            partition: p,
            files: m.files.len(),
            small_files: m
                .files
                .iter()
                .filter(|f| strata_parquet::compact::is_small_file(f.bytes, target))
                .count(),
            bytes: m.files.iter().map(|f| f.bytes).sum(),
            next_offset: m.next_offset,
        });
    }
    let current = table.as_ref().and_then(|t| t.metadata().current_snapshot());
    Ok(TableStatus {
        topic: topic.to_string(),
        location: catalog.table_location(topic),
        metadata_location: table.as_ref().map(|t| t.metadata_location()),
        version: table.as_ref().map(|t| t.version()),
        snapshots: table.as_ref().map_or(0, |t| t.metadata().snapshots.len()),
        current_snapshot_id: current.map(|s| s.snapshot_id),
        operation: current.and_then(|s| s.summary.get("operation").cloned()),
        committed_at_ms: current.map(|s| s.timestamp_ms),
        records: current.map_or(0, |s| s.count("total-records")),
        data_files: current.map_or(0, |s| s.count("total-data-files")),
        bytes: current.map_or(0, |s| s.count("total-files-size")),
        committed_offsets: table
            .as_ref()
            .map(|t| t.last_committed_offsets())
            .unwrap_or_default(),
        target_file_bytes: target,
        partitions: files,
        dead_letters,
    })
}

/// Expires `topic`'s snapshots older than `older_than_ms` beyond the newest
/// `retain_last` ([`expire`]), and its dead-letter table's, reloading a table after
/// losing a race with a commit, then deletes the topic's orphaned Parquet objects older
/// than [`ORPHAN_GRACE_MS`] ([`remove_orphans`]). `None`: there is no table.
pub async fn expire_table(
    catalog: &Catalog,
    topic: &str,
    partitions: i32,
    older_than_ms: i64,
    retain_last: usize,
    now_ms: i64,
) -> Result<Option<ExpireReport>, PublishError> {
    let Some(mut report) = expire_with_retries(catalog, topic, older_than_ms, retain_last).await?
    else {
        return Ok(None);
    };
    let dead = dead_letter_catalog(catalog);
    if let Some(d) = expire_with_retries(&dead, topic, older_than_ms, retain_last).await? {
        report.snapshots += d.snapshots;
        report.data_files += d.data_files;
    }
    report.orphans = remove_orphans(catalog, topic, partitions, now_ms - ORPHAN_GRACE_MS).await?;
    Ok(Some(report))
}

async fn expire_with_retries(
    catalog: &Catalog,
    topic: &str,
    older_than_ms: i64,
    retain_last: usize,
) -> Result<Option<ExpireReport>, PublishError> {
    let mut attempt = 0;
    loop {
        let Some(mut table) = load_if_exists(catalog, topic).await? else {
            return Ok(None);
        };
        match expire(catalog, &mut table, older_than_ms, retain_last).await {
            Err(PublishError::Iceberg(IcebergError::CommitConflict { .. }))
                if attempt < CONFLICT_RETRIES =>
            {
                attempt += 1;
            }
            r => return r.map(Some),
        }
    }
}

/// How many times a round reloads the table after losing a commit race before it leaves
/// the rest to the next round.
const CONFLICT_RETRIES: usize = 3;

/// Snapshots older than this are expired after a commit (beyond the newest
/// [`MIN_SNAPSHOTS`]): with a commit a minute the metadata JSON, which lists every
/// snapshot and is rewritten by each commit, stays at about 60 of them. Time travel
/// reaches back this far. (Iceberg's `history.expire.max-snapshot-age-ms` defaults to
/// 5 days, for tables committed far less often.)
pub const SNAPSHOT_MAX_AGE_MS: i64 = 3_600_000;
/// Snapshots kept whatever their age.
pub const MIN_SNAPSHOTS: usize = 10;

/// Commits the new Parquet files of `topic` (partitions `0..partitions`) to its table
/// in `catalog` (`{cluster_id}/iceberg/{topic}/` in the store, or the REST catalog's
/// table of that name; data files are named by their absolute locations under the
/// store's URI), creating the table first if needed
/// (its schema from the topic's Parquet settings in `config`). `None`: nothing to
/// commit.
pub async fn publish(
    catalog: &Catalog,
    topic: &str,
    partitions: i32,
    config: &TopicConfig,
) -> Result<Option<Published>, PublishError> {
    let options = ConvertOptions::from_topic_config(topic.to_string(), 0, config)?;
    let sink = sink(catalog, options.clone());
    let mut manifests = Vec::with_capacity(partitions.max(0) as usize);
    for p in 0..partitions {
        manifests.push((p, sink.manifest(topic, p).await?));
    }
    // A topic with typed JSON values also has a dead-letter table: the rows whose value
    // did not fit, raw value and reason.
    if matches!(options.value_format, strata_parquet::ValueFormat::Json(_)) {
        let dead = dead_letter_catalog(catalog);
        let views: Vec<_> = manifests
            .iter()
            .map(|(p, m)| (*p, dead_letter_view(m)))
            .collect();
        let schema = strata_parquet::dead_letter_schema();
        if let Some(p) = publish_to(&dead, topic, &schema, &views).await? {
            tracing::debug!(topic, files = p.added_files, "committed dead-letter files");
        }
    }
    let schema = strata_parquet::file_schema(&options.value_format);
    publish_to(catalog, topic, &schema, &manifests).await
}

/// The catalog of the dead-letter tables: `{cluster_id}/dead_letters/iceberg/{topic}/`,
/// beside the files (`strata_parquet::ParquetLayout::dead_letters`), or the namespace
/// `{namespace}.dead_letters` of a REST catalog.
pub fn dead_letter_catalog(catalog: &Catalog) -> Catalog {
    catalog.nested(strata_parquet::DEAD_LETTERS_DIR)
}

/// A partition's manifest as its dead-letter table sees it: the dead-letter files of its
/// files, up to the same next offset (so that they leave the table as their files leave
/// the manifest).
fn dead_letter_view(m: &strata_parquet::Manifest) -> strata_parquet::Manifest {
    let mut view = m.clone();
    view.files = m
        .files
        .iter()
        .flat_map(|f| {
            f.dead_letter_files
                .iter()
                .map(|d| strata_parquet::ManifestEntry {
                    key: d.key.clone(),
                    first_offset: d.first_offset,
                    last_offset: d.last_offset,
                    min_timestamp: f.min_timestamp,
                    max_timestamp: f.max_timestamp,
                    rows: d.rows,
                    bytes: d.bytes,
                    compacted_from: 0,
                    schema: None,
                    dead_letter_files: Vec::new(),
                })
        })
        .collect();
    view
}

/// Commits to `name`'s table in `catalog` (created with `schema` if needed) what makes
/// it hold exactly the files `manifests` list ([`reconcile`]).
async fn publish_to(
    catalog: &Catalog,
    name: &str,
    schema: &arrow::datatypes::SchemaRef,
    manifests: &[(i32, strata_parquet::Manifest)],
) -> Result<Option<Published>, PublishError> {
    let (topic, catalog) = (name, catalog);
    let mut attempt = 0;
    loop {
        let mut table = match load_if_exists(catalog, topic).await? {
            Some(t) => t,
            None => {
                match catalog.create_table(topic, schema).await {
                    Ok(t) => t,
                    // Another broker created it meanwhile.
                    Err(IcebergError::CommitConflict { .. }) => catalog.load_table(topic).await?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let Some(change) = reconcile(catalog, &table, manifests).await? else {
            return Ok(None);
        };
        let Change {
            add,
            remove,
            operation,
        } = change;
        let (added_files, removed_files) = (add.len(), remove.len());
        match table.commit(add, &remove, operation).await {
            Ok(_) => {
                expire_after_commit(catalog, &mut table).await;
                return Ok(Some(Published {
                    version: table.version(),
                    added_files,
                    removed_files,
                    committed: table.last_committed_offsets(),
                }));
            }
            Err(IcebergError::CommitConflict { .. }) if attempt < CONFLICT_RETRIES => {
                attempt += 1;
                tracing::debug!(topic, attempt, "iceberg commit lost a race; reloading");
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// What a round commits.
struct Change {
    add: Vec<strata_iceberg::DataFile>,
    remove: Vec<String>,
    operation: Operation,
}

/// What makes the table hold exactly the files the Parquet manifests list: the files no
/// manifest lists any more (retention removed them, or compaction replaced them) go,
/// the listed files the table lacks come in. `None`: nothing to change.
///
/// A file above a partition's committed offset is new data; one at or below it rewrites
/// committed rows (compaction: [`Operation::Replace`] when that is all the round does)
/// and must not overlap any file the table keeps. Only files below the next offset of
/// the manifest as read are removed, so a manifest read before a newer commit (another
/// publisher's, racing this one) cannot take that commit's files away.
async fn reconcile(
    catalog: &Catalog,
    table: &strata_iceberg::Table,
    manifests: &[(i32, strata_parquet::Manifest)],
) -> Result<Option<Change>, PublishError> {
    let committed = table.last_committed_offsets();
    let live = table.live_data_files().await?;
    let live_locations: BTreeSet<&str> = live.iter().map(|f| f.location.as_str()).collect();
    let mut listed = BTreeSet::new();
    let (mut new, mut rewrites) = (Vec::new(), Vec::new());
    for (p, manifest) in manifests {
        for f in &manifest.files {
            let location = catalog.uri(&f.key);
            let in_table = live_locations.contains(location.as_str());
            listed.insert(location);
            if in_table {
                continue;
            }
            match committed.get(p).copied() {
                Some(c) if f.last_offset <= c => rewrites.push((*p, f)),
                Some(c) if f.first_offset <= c => {
                    return Err(PublishError::Straddle {
                        partition: *p,
                        first: f.first_offset,
                        last: f.last_offset,
                        committed: c,
                    });
                }
                _ => new.push(f),
            }
        }
    }
    let next: BTreeMap<i32, i64> = manifests
        .iter()
        .filter_map(|(p, m)| Some((*p, m.next_offset?)))
        .collect();
    let (removed, kept): (Vec<&strata_iceberg::DataFile>, Vec<_>) = live.iter().partition(|f| {
        !listed.contains(&f.location) && next.get(&f.partition).is_some_and(|&n| f.last_offset < n)
    });
    if rewrites.is_empty() && new.is_empty() && removed.is_empty() {
        return Ok(None);
    }
    // A rewrite must not overlap what the table keeps: two files with the same rows.
    for (p, f) in &rewrites {
        if let Some(k) = kept.iter().find(|k| {
            k.partition == *p && k.first_offset <= f.last_offset && f.first_offset <= k.last_offset
        }) {
            return Err(PublishError::Overlap {
                partition: *p,
                file: catalog.uri(&f.key),
                kept: k.location.clone(),
            });
        }
    }
    let rewritten_rows: u64 = rewrites.iter().map(|(_, f)| f.rows).sum();
    let removed_rows: u64 = removed.iter().map(|f| f.record_count).sum();
    // Files below the committed offsets that replace nothing (a backfill that ran after
    // the table had later offsets) are appended: the table checks they overlap nothing.
    let operation = match (new.is_empty() && rewrites.is_empty(), removed.is_empty()) {
        (false, true) => Operation::Append,
        (true, false) => Operation::Delete,
        _ if new.is_empty() && rewritten_rows == removed_rows => Operation::Replace,
        _ => Operation::Overwrite,
    };
    let mut add = Vec::with_capacity(new.len() + rewrites.len());
    for f in rewrites.iter().map(|(_, f)| *f).chain(new) {
        add.push(catalog.data_file(&f.key).await?);
    }
    Ok(Some(Change {
        add,
        remove: removed.iter().map(|f| f.location.clone()).collect(),
        operation,
    }))
}

/// What [`expire`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExpireReport {
    /// Snapshots dropped from the table's metadata.
    pub snapshots: usize,
    /// Data files no kept snapshot holds any more, deleted from the store.
    pub data_files: usize,
    /// Parquet objects no manifest and no kept snapshot names, deleted
    /// ([`remove_orphans`]; only [`expire_table`] sweeps them).
    pub orphans: usize,
}

/// Expires `table`'s snapshots older than `older_than_ms` (milliseconds since the epoch)
/// beyond the newest `retain_last`, and deletes the data files no kept snapshot holds
/// any more (removed from the table by an earlier commit: Parquet retention or
/// compaction replaced them; deleting a missing object succeeds; one the store fails to
/// delete is logged and left). A commit of its own:
/// on [`IcebergError::CommitConflict`] reload and call again.
pub async fn expire(
    catalog: &Catalog,
    table: &mut strata_iceberg::Table,
    older_than_ms: i64,
    retain_last: usize,
) -> Result<ExpireReport, PublishError> {
    let expired = table
        .expire_snapshots(older_than_ms, retain_last.max(1))
        .await?;
    let root = format!("{}/", catalog.store_uri());
    let store = catalog.store();
    let mut report = ExpireReport {
        snapshots: expired.snapshot_ids.len(),
        ..ExpireReport::default()
    };
    for uri in &expired.data_files {
        let Some(key) = uri.strip_prefix(&root) else {
            continue;
        };
        match store.delete(key).await {
            Ok(()) => report.data_files += 1,
            Err(e) => {
                tracing::warn!(file = %uri, error = %e, "cannot delete a data file the table no longer holds")
            }
        }
    }
    Ok(report)
}

/// How long an object the manifests do not list stays before [`remove_orphans`] deletes
/// it: a conversion or compaction uploads its file before the manifest names it, and a
/// round of the publisher reads the manifests before it commits.
pub const ORPHAN_GRACE_MS: i64 = 3_600_000;

/// Deletes the Parquet objects of `topic` (its files and its dead-letter files) that no
/// partition's manifest lists and no snapshot its tables keep names, and that are older
/// than `older_than_ms` (milliseconds since the epoch): files Parquet retention dropped
/// before the table ever committed them (publishing behind by more than the retention),
/// and rewrites or conversions whose manifest update never happened (a crash, a leader
/// that lost a race). Two LISTs (the topic's Parquet directory and its dead-letter
/// directory), the partitions' manifests, and every manifest of the kept snapshots of
/// the topic's table and dead-letter table. Returns how many objects it deleted.
pub async fn remove_orphans(
    catalog: &Catalog,
    topic: &str,
    partitions: i32,
    older_than_ms: i64,
) -> Result<usize, PublishError> {
    let store = catalog.store();
    let root = format!("{}/", catalog.store_uri());
    let sink = sink(catalog, ConvertOptions::new(topic.to_string(), 0));
    // The topic's files, and the dead-letter files of its typed JSON values beside them.
    let dirs = [
        sink.layout().topic_dir(topic),
        sink.layout().dead_letters().topic_dir(topic),
    ];
    // Listed before the manifests are read: an object uploaded after the listing is not
    // a candidate, and one a manifest names by the time it is read is kept.
    let mut objects = Vec::new();
    for dir in &dirs {
        let listed = store
            .list(dir)
            .await
            .map_err(|e| PublishError::Iceberg(e.into()))?;
        objects.extend(
            listed
                .into_iter()
                .filter(|o| o.path.starts_with(&format!("{dir}/"))),
        );
    }
    let mut keep = BTreeSet::new();
    for c in [catalog, &dead_letter_catalog(catalog)] {
        if let Some(table) = load_if_exists(c, topic).await? {
            keep.extend(
                table
                    .referenced_files()
                    .await?
                    .into_iter()
                    .filter_map(|l| Some(l.strip_prefix(&root)?.to_string())),
            );
        }
    }
    for p in 0..partitions {
        let m = sink.manifest(topic, p).await?;
        for f in m.files {
            keep.extend(f.dead_letter_files.into_iter().map(|d| d.key));
            keep.insert(f.key);
        }
    }
    let cutoff =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(older_than_ms.max(0) as u64);
    let mut deleted = 0;
    for o in objects {
        if !o.path.ends_with(".parquet") || keep.contains(&o.path) || o.last_modified >= cutoff {
            continue;
        }
        match store.delete(&o.path).await {
            Ok(()) => deleted += 1,
            Err(e) => {
                tracing::warn!(key = %o.path, error = %e, "cannot delete an orphaned Parquet object")
            }
        }
    }
    if deleted > 0 {
        tracing::info!(
            topic,
            deleted,
            "deleted Parquet objects no manifest and no kept snapshot names"
        );
    }
    Ok(deleted)
}

/// After a commit: [`expire`] with [`SNAPSHOT_MAX_AGE_MS`] and [`MIN_SNAPSHOTS`]. A
/// failure is logged: the next commit tries again.
async fn expire_after_commit(catalog: &Catalog, table: &mut strata_iceberg::Table) {
    if table.metadata().snapshots.len() <= MIN_SNAPSHOTS {
        return;
    }
    let now_ms = crate::remote::now_ms();
    if let Err(e) = expire(catalog, table, now_ms - SNAPSHOT_MAX_AGE_MS, MIN_SNAPSHOTS).await {
        tracing::warn!(error = %e, "Iceberg snapshot expiry failed; the next commit retries");
    }
}
