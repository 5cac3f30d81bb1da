//! Table metadata JSON, format version 2 (the spec's "Table Metadata" section).
//!
//! Schemas and partition specs are kept as the JSON the spec defines (see
//! [`crate::schema`] and [`crate::spec`]); snapshots, logs and refs are typed because the
//! commit reads them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Snapshot summary keys Strata adds: per Kafka partition, the offsets this snapshot
/// added and the highest offset any snapshot up to this one committed.
pub mod summary_keys {
    /// `strata.partition.{p}.first-offset`: the first offset this snapshot added.
    pub fn first_offset(partition: i32) -> String {
        format!("strata.partition.{partition}.first-offset")
    }
    /// `strata.partition.{p}.last-offset`: the last offset this snapshot added.
    pub fn last_offset(partition: i32) -> String {
        format!("strata.partition.{partition}.last-offset")
    }
    /// `strata.partition.{p}.committed-offset`: the last offset ever added to the table,
    /// carried forward for every partition by every snapshot (deletes and replaces
    /// included: removing files does not un-publish their offsets), so the current
    /// snapshot alone says where to resume.
    pub fn committed_offset(partition: i32) -> String {
        format!("strata.partition.{partition}.committed-offset")
    }
    pub(crate) const PREFIX: &str = "strata.partition.";
    pub(crate) const COMMITTED_SUFFIX: &str = ".committed-offset";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    pub format_version: u8,
    pub table_uuid: String,
    pub location: String,
    pub last_sequence_number: i64,
    pub last_updated_ms: i64,
    pub last_column_id: i32,
    pub schemas: Vec<Value>,
    pub current_schema_id: i32,
    pub partition_specs: Vec<Value>,
    pub default_spec_id: i32,
    pub last_partition_id: i32,
    pub properties: BTreeMap<String, String>,
    /// `None` before the first snapshot (written absent; -1, as Java's catalogs write
    /// it, reads as `None`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "snapshot_id_or_none"
    )]
    pub current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    #[serde(default)]
    pub snapshot_log: Vec<SnapshotLogEntry>,
    #[serde(default)]
    pub metadata_log: Vec<MetadataLogEntry>,
    pub sort_orders: Vec<Value>,
    pub default_sort_order_id: i32,
    #[serde(default)]
    pub refs: BTreeMap<String, SnapshotRef>,
}

fn snapshot_id_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Option::<i64>::deserialize(d)?.filter(|&id| id != -1))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    pub snapshot_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_snapshot_id: Option<i64>,
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub manifest_list: String,
    pub summary: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<i32>,
}

impl Snapshot {
    /// Per Kafka partition, the last offset committed up to this snapshot.
    pub fn committed_offsets(&self) -> BTreeMap<i32, i64> {
        self.summary
            .iter()
            .filter_map(|(k, v)| {
                let p = k
                    .strip_prefix(summary_keys::PREFIX)?
                    .strip_suffix(summary_keys::COMMITTED_SUFFIX)?;
                Some((p.parse().ok()?, v.parse().ok()?))
            })
            .collect()
    }

    /// A summary count (0 when absent).
    pub fn count(&self, key: &str) -> u64 {
        self.summary
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotLogEntry {
    pub snapshot_id: i64,
    pub timestamp_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetadataLogEntry {
    pub metadata_file: String,
    pub timestamp_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotRef {
    pub snapshot_id: i64,
    #[serde(rename = "type")]
    pub kind: String,
}

impl TableMetadata {
    pub fn current_snapshot(&self) -> Option<&Snapshot> {
        let id = self.current_snapshot_id?;
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    pub fn current_schema(&self) -> Option<&Value> {
        self.schemas
            .iter()
            .find(|s| s["schema-id"].as_i64() == Some(i64::from(self.current_schema_id)))
    }
}
