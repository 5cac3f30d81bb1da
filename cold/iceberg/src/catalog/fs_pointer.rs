//! The file-system catalog's pointers: where a table's metadata files are in the store,
//! finding its current version from the version hint and a listing, and the create-only
//! put of the next version that is the commit point.

use bytes::Bytes;
use strata_store::{ErrorKind, PutMode};

use super::{Catalog, Table, join};
use crate::error::{IcebergError, Result};
use crate::metadata::TableMetadata;

impl Catalog {
    pub(super) fn table_dir(&self, topic: &str) -> String {
        join(&join(&self.root, "iceberg"), topic)
    }

    pub(super) fn metadata_dir(&self, topic: &str) -> String {
        join(&self.table_dir(topic), "metadata")
    }

    pub(super) fn metadata_path(&self, topic: &str, version: u64) -> String {
        join(
            &self.metadata_dir(topic),
            &format!("v{version}.metadata.json"),
        )
    }

    /// Loads the current version of `topic`'s table from the store.
    pub(super) async fn load_from_store(&self, topic: &str) -> Result<Table> {
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

impl Table {
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
    pub(super) async fn put_version(&self, version: u64) -> Result<()> {
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
}
