//! The Iceberg tables' admin calls (`strata tier iceberg status|compact|expire`), on a
//! parquet.enable topic hosted here.

use std::sync::Arc;

use super::{HostedTopic, Tiering};
use crate::service::Tier;

/// Why an Iceberg or Parquet admin call (`strata tier iceberg`) failed.
#[derive(Debug, thiserror::Error)]
pub enum TableAdminError {
    /// No such topic here, or not a parquet.enable topic: HTTP 404.
    #[error("{0}")]
    NotFound(String),
    /// This broker cannot do it (no object store, no Iceberg tables): HTTP 409.
    #[error("{0}")]
    Unavailable(String),
    /// The store or the table failed: HTTP 502.
    #[error("{0}")]
    Failed(String),
}

/// What [`Tiering::request_compaction`] asked for.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CompactionRequest {
    pub topic: String,
    /// Partitions this broker leads: each compacts at its next Parquet round.
    pub partitions: Vec<i32>,
    /// The topic's other partitions, led by other brokers: ask those.
    pub elsewhere: Vec<i32>,
}

/// [`crate::iceberg::TableStatus`], with what only this broker knows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IcebergStatus {
    #[serde(flatten)]
    pub table: crate::iceberg::TableStatus,
    /// This broker publishes parquet.enable topics as tables (`--iceberg-commit-interval`).
    pub publishing: bool,
    /// Partitions whose requested compaction has not finished yet.
    pub compaction_pending: Vec<i32>,
}

impl Tiering {
    /// `topic` as hosted here (`hosted`) with parquet.enable, and the tier.
    fn parquet_topic<'a>(
        &self,
        topic: &str,
        hosted: Option<&'a HostedTopic>,
    ) -> Result<(&'a HostedTopic, Arc<Tier>), TableAdminError> {
        let t = hosted.ok_or_else(|| {
            TableAdminError::NotFound(format!(
                "topic '{topic}' has no replica on this broker; ask a broker that hosts it"
            ))
        })?;
        if !t.config.parquet_enable {
            return Err(TableAdminError::NotFound(format!(
                "topic '{topic}' does not have parquet.enable=true: it has no Parquet files or Iceberg table"
            )));
        }
        let tier = self.tier().cloned().ok_or_else(|| {
            TableAdminError::Unavailable("this broker has no object store (--object-store)".into())
        })?;
        Ok((t, tier))
    }

    fn iceberg_catalog(&self, cluster: &str) -> Result<crate::iceberg::Catalog, TableAdminError> {
        self.table_catalog(cluster).ok_or_else(|| {
            TableAdminError::Unavailable(
                "this broker's object store is not one an engine can read (memory://): no Iceberg tables".into(),
            )
        })
    }

    /// `topic`'s Iceberg table and Parquet files.
    pub async fn iceberg_status(
        &self,
        topic: &str,
        hosted: Option<&HostedTopic>,
    ) -> Result<IcebergStatus, TableAdminError> {
        let (t, _) = self.parquet_topic(topic, hosted)?;
        let catalog = self.iceberg_catalog(&t.cluster_id)?;
        let table = crate::iceberg::status(&catalog, topic, t.partition_count, &t.config)
            .await
            .map_err(|e| TableAdminError::Failed(e.to_string()))?;
        let pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut compaction_pending: Vec<i32> = pending
            .iter()
            .filter(|(id, _)| *id == t.id)
            .map(|(_, p)| *p)
            .collect();
        compaction_pending.sort_unstable();
        Ok(IcebergStatus {
            table,
            publishing: self.publishing(),
            compaction_pending,
        })
    }

    /// Asks the partitions of `topic` this broker leads to rewrite all their small
    /// Parquet files at their next round (the tier scheduler's, so that the partition's
    /// manifest keeps one writer), rather than only full groups and past days.
    pub fn request_compaction(
        &self,
        topic: &str,
        hosted: Option<&HostedTopic>,
    ) -> Result<CompactionRequest, TableAdminError> {
        let (t, _) = self.parquet_topic(topic, hosted)?;
        let partitions: Vec<i32> = t
            .partitions
            .iter()
            .filter(|p| p.leadership().leader)
            .map(|p| p.index())
            .collect();
        let elsewhere = (0..t.partition_count)
            .filter(|i| !partitions.contains(i))
            .collect();
        let mut pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.extend(partitions.iter().map(|p| (t.id, *p)));
        Ok(CompactionRequest {
            topic: topic.to_string(),
            partitions,
            elsewhere,
        })
    }

    /// Expires `topic`'s table snapshots older than `max_age_ms` beyond the newest
    /// `retain_last`, deletes the data files no kept snapshot holds, and sweeps the
    /// topic's orphaned Parquet objects.
    pub async fn iceberg_expire(
        &self,
        topic: &str,
        hosted: Option<&HostedTopic>,
        max_age_ms: i64,
        retain_last: usize,
        now_ms: i64,
    ) -> Result<crate::iceberg::ExpireReport, TableAdminError> {
        let (t, _) = self.parquet_topic(topic, hosted)?;
        let catalog = self.iceberg_catalog(&t.cluster_id)?;
        crate::iceberg::expire_table(
            &catalog,
            topic,
            t.partition_count,
            now_ms.saturating_sub(max_age_ms),
            retain_last,
            now_ms,
        )
        .await
        .map_err(|e| TableAdminError::Failed(e.to_string()))?
        .ok_or_else(|| {
            TableAdminError::NotFound(format!(
                "topic '{topic}' has no Iceberg table yet: it is created at the first commit of its Parquet files"
            ))
        })
    }
}
