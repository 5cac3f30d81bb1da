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
use std::sync::Arc;

use strata_iceberg::catalog::Operation;
use strata_iceberg::{FsCatalog, IcebergError};
use strata_parquet::{ConvertOptions, ParquetLayout, ParquetSink, SinkError};
use strata_proto::TopicConfig;
use strata_store::BlobStore;

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

/// Where [`publish`] keeps `topic`'s table: the absolute location of the directory
/// holding its `metadata/`.
pub fn table_location(
    store: &Arc<dyn BlobStore>,
    store_uri: &str,
    cluster_id: &str,
    topic: &str,
) -> String {
    FsCatalog::new(store.clone(), store_uri, cluster_id).table_location(topic)
}

/// Per Kafka partition, the last offset `topic`'s table holds (empty when there is no
/// table yet): two small reads, the version hint and the metadata JSON.
pub async fn committed_offsets(
    store: &Arc<dyn BlobStore>,
    cluster_id: &str,
    topic: &str,
) -> Result<BTreeMap<i32, i64>, PublishError> {
    // Locations are not read here, so the store's URI does not matter.
    match FsCatalog::new(store.clone(), "", cluster_id)
        .load_table(topic)
        .await
    {
        Ok(table) => Ok(table.last_committed_offsets()),
        Err(IcebergError::NoSuchTable { .. }) => Ok(BTreeMap::new()),
        Err(e) => Err(e.into()),
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
/// under `{cluster_id}/iceberg/{topic}/` in `store`, whose root is `store_uri` (the
/// absolute locations written into the metadata), creating the table first if needed
/// (its schema from the topic's Parquet settings in `config`). `None`: nothing to
/// commit.
pub async fn publish(
    store: &Arc<dyn BlobStore>,
    store_uri: &str,
    cluster_id: &str,
    topic: &str,
    partitions: i32,
    config: &TopicConfig,
) -> Result<Option<Published>, PublishError> {
    let options = ConvertOptions::from_topic_config(topic.to_string(), 0, config)?;
    let catalog = FsCatalog::new(store.clone(), store_uri, cluster_id);
    let sink = ParquetSink::new(
        store.clone(),
        ParquetLayout::new(cluster_id.to_string()),
        options.clone(),
    );
    let mut manifests = Vec::with_capacity(partitions.max(0) as usize);
    for p in 0..partitions {
        manifests.push((p, sink.manifest(topic, p).await?));
    }
    let mut attempt = 0;
    loop {
        let mut table = match catalog.load_table(topic).await {
            Ok(t) => t,
            Err(IcebergError::NoSuchTable { .. }) => {
                let schema = strata_parquet::file_schema(&options.value_format);
                match catalog.create_table(topic, &schema).await {
                    Ok(t) => t,
                    // Another broker created it meanwhile.
                    Err(IcebergError::CommitConflict { .. }) => catalog.load_table(topic).await?,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let Some(change) = reconcile(&catalog, &table, &manifests).await? else {
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
                expire_after_commit(store.as_ref(), store_uri, &mut table).await;
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
    catalog: &FsCatalog,
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
    if removed.is_empty() && !rewrites.is_empty() {
        // Files below the committed offsets that replace nothing: a backfill that ran
        // after the table had later offsets. Not published yet (see docs/parquet.md).
        tracing::debug!(
            files = rewrites.len(),
            "Parquet files below the table's committed offsets replace nothing; not published"
        );
        rewrites.clear();
        if new.is_empty() {
            return Ok(None);
        }
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// Snapshots dropped from the table's metadata.
    pub snapshots: usize,
    /// Data files no kept snapshot holds any more, deleted from the store.
    pub data_files: usize,
}

/// Expires `table`'s snapshots older than `older_than_ms` (milliseconds since the epoch)
/// beyond the newest `retain_last`, and deletes the data files no kept snapshot holds
/// any more (removed from the table by an earlier commit: Parquet retention or
/// compaction replaced them; deleting a missing object succeeds; one the store fails to
/// delete is logged and left). A commit of its own:
/// on [`IcebergError::CommitConflict`] reload and call again.
pub async fn expire(
    store: &dyn BlobStore,
    store_uri: &str,
    table: &mut strata_iceberg::Table,
    older_than_ms: i64,
    retain_last: usize,
) -> Result<ExpireReport, PublishError> {
    let expired = table
        .expire_snapshots(older_than_ms, retain_last.max(1))
        .await?;
    let root = format!("{}/", store_uri.trim_end_matches('/'));
    let mut report = ExpireReport {
        snapshots: expired.snapshot_ids.len(),
        data_files: 0,
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

/// After a commit: [`expire`] with [`SNAPSHOT_MAX_AGE_MS`] and [`MIN_SNAPSHOTS`]. A
/// failure is logged: the next commit tries again.
async fn expire_after_commit(
    store: &dyn BlobStore,
    store_uri: &str,
    table: &mut strata_iceberg::Table,
) {
    if table.metadata().snapshots.len() <= MIN_SNAPSHOTS {
        return;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    if let Err(e) = expire(
        store,
        store_uri,
        table,
        now_ms - SNAPSHOT_MAX_AGE_MS,
        MIN_SNAPSHOTS,
    )
    .await
    {
        tracing::warn!(error = %e, "Iceberg snapshot expiry failed; the next commit retries");
    }
}
