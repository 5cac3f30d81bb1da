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
        let committed = table.last_committed_offsets();
        let mut add = Vec::new();
        let mut listed = BTreeSet::new();
        for (p, manifest) in &manifests {
            for f in &manifest.files {
                listed.insert(catalog.uri(&f.key));
                let c = committed.get(p).copied();
                match c {
                    Some(c) if f.last_offset <= c => continue,
                    Some(c) if f.first_offset <= c => {
                        return Err(PublishError::Straddle {
                            partition: *p,
                            first: f.first_offset,
                            last: f.last_offset,
                            committed: c,
                        });
                    }
                    _ => add.push(catalog.data_file(&f.key).await?),
                }
            }
        }
        let remove: Vec<String> = table
            .live_files()
            .await?
            .into_iter()
            .filter(|location| !listed.contains(location))
            .collect();
        let operation = match (add.is_empty(), remove.is_empty()) {
            (true, true) => return Ok(None),
            (false, true) => Operation::Append,
            (true, false) => Operation::Delete,
            (false, false) => Operation::Overwrite,
        };
        let (added_files, removed_files) = (add.len(), remove.len());
        match table.commit(add, &remove, operation).await {
            Ok(_) => {
                expire(store.as_ref(), store_uri, &mut table).await;
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

/// Expires the snapshots past [`SNAPSHOT_MAX_AGE_MS`] (beyond [`MIN_SNAPSHOTS`]) and
/// deletes the data files no kept snapshot holds any more (removed from the table by
/// an earlier commit: Parquet retention has usually deleted them already, and deleting a
/// missing object succeeds). A failure is logged: the next commit tries again.
async fn expire(store: &dyn BlobStore, store_uri: &str, table: &mut strata_iceberg::Table) {
    if table.metadata().snapshots.len() <= MIN_SNAPSHOTS {
        return;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    match table
        .expire_snapshots(now_ms - SNAPSHOT_MAX_AGE_MS, MIN_SNAPSHOTS)
        .await
    {
        Ok(expired) => {
            let root = format!("{}/", store_uri.trim_end_matches('/'));
            for uri in &expired.data_files {
                let Some(key) = uri.strip_prefix(&root) else {
                    continue;
                };
                if let Err(e) = store.delete(key).await {
                    tracing::warn!(file = %uri, error = %e, "cannot delete a data file the table no longer holds");
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "Iceberg snapshot expiry failed; the next commit retries")
        }
    }
}
