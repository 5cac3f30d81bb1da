//! Retention: dropping the files and dead letters below the log start from a manifest,
//! and moving the next offset past records that expired before they were converted.

use strata_proto::ids::{Offset, PartitionId};

use super::{ParquetSink, SinkError};

/// What retention does with the objects of the files it drops from a manifest
/// ([`ParquetSink::expire_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiredObjects {
    Delete,
    /// Left for the Iceberg publisher, which deletes them with the snapshots naming them.
    Keep,
}

impl ParquetSink {
    /// Retention: deletes the files wholly below `log_start_offset` (last offset <
    /// log start) and removes them, and the dead letters wholly below it, from the
    /// manifest; returns how many files. The objects go first, then the manifest, so a
    /// crash in between only leaves entries whose objects are gone, which a re-run
    /// removes (deleting a missing object succeeds).
    pub async fn expire(
        &self,
        topic: &str,
        partition: PartitionId,
        log_start_offset: Offset,
    ) -> Result<usize, SinkError> {
        self.expire_with(topic, partition, log_start_offset, ExpiredObjects::Delete)
            .await
    }

    /// [`Self::expire`], leaving the expired files' objects in place with
    /// [`ExpiredObjects::Keep`]: an Iceberg table still names them until its next commit,
    /// and whoever publishes it deletes them once no snapshot it keeps holds them.
    pub async fn expire_with(
        &self,
        topic: &str,
        partition: PartitionId,
        log_start_offset: Offset,
        objects: ExpiredObjects,
    ) -> Result<usize, SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut manifest.files)
            .into_iter()
            .partition(|f| f.last_offset < log_start_offset);
        let letters = manifest.dead_letters.len();
        manifest
            .dead_letters
            .retain(|d| d.last_offset >= log_start_offset);
        if expired.is_empty() && manifest.dead_letters.len() == letters {
            return Ok(0);
        }
        if objects == ExpiredObjects::Delete {
            for f in &expired {
                for d in &f.dead_letter_files {
                    self.store.delete(&d.key).await?;
                }
                self.store.delete(&f.key).await?;
            }
        }
        // The files now cover the log from past the last one gone.
        if let Some(last) = expired.last() {
            manifest.start_offset = manifest.start_offset.map(|s| s.max(last.last_offset + 1));
        }
        manifest.files = kept;
        self.commit(&manifest_key, &manifest, version).await?;
        Ok(expired.len())
    }

    /// Moves the partition's next offset up to `offset` without a file: the records in
    /// between expired (retention deleted them) before they were converted, so no file
    /// can hold them. Never moves it back.
    pub async fn skip_to(
        &self,
        topic: &str,
        partition: PartitionId,
        offset: Offset,
    ) -> Result<(), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        if manifest.next_offset.is_some_and(|n| n >= offset) {
            return Ok(());
        }
        manifest.next_offset = Some(offset);
        self.commit(&manifest_key, &manifest, version).await
    }
}
