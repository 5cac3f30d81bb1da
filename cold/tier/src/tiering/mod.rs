//! The tier behind one handle ([`Tiering`]): the broker hands it the tiered and
//! Parquet partitions it hosts each round ([`HostedTopic`]), and it runs their archivers
//! (offload, remote retention, Parquet, remote compaction, orphan sweeps), keeps the
//! topics' descriptors in the bucket, answers the tier's status and the tables' admin
//! calls, and deletes a deleted topic's objects. What one partition's archiver does is
//! [`crate::Archiver`]'s; Iceberg publishing is [`crate::publisher`]'s.
//!
//! * `round`: one scheduling round over the hosted partitions;
//! * `status`: the tier status report (`strata tier status`, `/v1/tier/status`);
//! * `tables`: the Iceberg tables' admin calls (`strata tier iceberg`).

mod round;
mod status;
mod tables;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_log::Log;
use strata_proto::{TopicConfig, TopicId};

use crate::archiver::Leadership;
use crate::layout::PartitionKey;
use crate::service::Tier;
use crate::tiered_log::TieredLog;

pub use crate::iceberg::ExpireReport;
pub use round::RoundSettings;
pub use status::{PartitionTierStatus, TierStatus};
pub use tables::{CompactionRequest, IcebergStatus, TableAdminError};

/// Where and how often parquet.enable topics are published as Iceberg tables.
#[derive(Clone, Debug)]
pub struct TableConfig {
    /// How often each parquet.enable topic's new Parquet files are committed to its
    /// Iceberg table (`crate::iceberg`); zero: never (--iceberg-commit-interval).
    pub commit_interval: Duration,
    /// The object store root's absolute URI, as the table metadata names files; `None`:
    /// no tables (an in-memory store).
    pub store_uri: Option<String>,
    /// The Iceberg REST catalog the tables' metadata pointers are committed to; `None`:
    /// the file-system catalog in the store (`{cluster}/iceberg/{topic}/metadata/`).
    pub rest: Option<Arc<crate::iceberg::RestCatalog>>,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            commit_interval: Duration::from_secs(60),
            store_uri: None,
            rest: None,
        }
    }
}

/// What the tier needs of a hosted replica, read when it is needed (leadership moves
/// between two steps of a round).
pub trait ReplicaView: Send + Sync {
    /// Leader or follower, in which epoch, up to which high-water mark.
    fn leadership(&self) -> Leadership;
    /// The topic's config as the replica has it now.
    fn config(&self) -> TopicConfig;
}

/// A partition hosted by the broker, as the tier sees it.
#[derive(Clone)]
pub struct HostedPartition {
    /// The partition's log, local and remote.
    pub log: Arc<TieredLog>,
    pub replica: Arc<dyn ReplicaView>,
}

impl std::fmt::Debug for HostedPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedPartition")
            .field("topic", &self.log.topic())
            .field("partition", &self.log.partition())
            .finish_non_exhaustive()
    }
}

impl HostedPartition {
    pub fn index(&self) -> i32 {
        self.log.partition()
    }

    pub fn leadership(&self) -> Leadership {
        self.replica.leadership()
    }

    pub fn config(&self) -> TopicConfig {
        self.replica.config()
    }
}

/// A topic with replicas hosted by the broker, as the tier sees it.
#[derive(Clone, Debug)]
pub struct HostedTopic {
    pub name: Arc<str>,
    pub id: TopicId,
    pub config: TopicConfig,
    /// The topic's own config overrides (its descriptor in the bucket keeps them).
    pub overrides: BTreeMap<String, String>,
    /// The topic's partition count in the cluster.
    pub partition_count: i32,
    /// The cluster id the topic's objects are stored under.
    pub cluster_id: String,
    /// The replicas hosted here, in index order.
    pub partitions: Vec<HostedPartition>,
}

impl HostedTopic {
    /// The bucket key of hosted partition `p`.
    pub fn key(&self, p: &HostedPartition) -> PartitionKey {
        PartitionKey {
            cluster_id: self.cluster_id.clone(),
            topic: self.name.to_string(),
            topic_id: self.id,
            partition: p.index(),
        }
    }

    /// Partition 0's replica here, if it leads: the broker that writes the topic's
    /// descriptor and publishes its table.
    pub fn leads_first(&self) -> Option<&HostedPartition> {
        self.partitions
            .first()
            .filter(|p| p.index() == 0 && p.leadership().leader)
    }
}

/// The broker's one handle on the tier.
#[derive(Debug)]
pub struct Tiering {
    /// The store, the chunk cache and the tier's limits, when an object store is
    /// configured.
    tier: Option<Arc<Tier>>,
    tables: TableConfig,
    /// Partitions asked to compact their small Parquet files at their next round
    /// (`strata tier iceberg compact`).
    compaction_requests: Mutex<HashSet<(TopicId, i32)>>,
    /// The archivers and what the rounds remember between them.
    rounds: tokio::sync::Mutex<round::Rounds>,
}

impl Tiering {
    pub fn new(tier: Option<Arc<Tier>>, tables: TableConfig) -> Tiering {
        Tiering {
            tier,
            tables,
            compaction_requests: Mutex::new(HashSet::new()),
            rounds: tokio::sync::Mutex::new(round::Rounds::default()),
        }
    }

    /// No object store: nothing tiers, nothing is published.
    pub fn disabled() -> Tiering {
        Tiering::new(None, TableConfig::default())
    }

    /// The store, the chunk cache and the tier's limits, if an object store is
    /// configured.
    pub fn tier(&self) -> Option<&Arc<Tier>> {
        self.tier.as_ref()
    }

    pub fn tables(&self) -> &TableConfig {
        &self.tables
    }

    /// How often rounds run (`None`: no object store, no rounds).
    pub fn round_interval(&self) -> Option<Duration> {
        self.tier.as_ref().map(|t| t.config().offload_interval)
    }

    /// A partition's log as readers see it, over its local `log` (which the partition
    /// keeps writing directly).
    pub fn log(
        &self,
        local: Arc<Log>,
        topic: Arc<str>,
        topic_id: TopicId,
        index: i32,
    ) -> TieredLog {
        TieredLog::new(local, topic, topic_id, index, self.tier.clone())
    }

    /// Local bytes of tiered partitions beyond which producers are refused while
    /// offload is behind; 0 for none.
    pub fn local_disk_cap(&self) -> u64 {
        self.tier
            .as_ref()
            .map_or(0, |t| t.config().local_disk_cap_bytes)
    }

    /// Deletes a deleted tiered topic's objects from the bucket in the background (as
    /// Kafka deletes a topic's remote segments), its catalog entry with them.
    pub fn delete_topic(&self, cluster: String, name: String, id: TopicId) {
        let Some(tier) = self.tier.clone() else {
            return;
        };
        tokio::spawn(async move {
            match crate::catalog::delete_topic(tier.store(), &cluster, &name, id).await {
                Ok(n) => {
                    tracing::info!(topic = %name, objects = n, "deleted the topic's objects from the object store")
                }
                Err(e) => {
                    tracing::warn!(topic = %name, error = %e, "cannot delete the topic's objects; delete them by hand")
                }
            }
        });
    }

    /// A deleted topic's descriptor in the bucket's catalog (`strata topic recover`):
    /// `Ok(None)` when the bucket has no such topic, `Err(None)` without an object store.
    pub async fn recoverable(
        &self,
        name: &str,
    ) -> Result<Option<crate::catalog::TopicDescriptor>, Option<crate::TierError>> {
        let tier = self.tier.as_ref().ok_or(None)?;
        crate::catalog::read(tier.store(), name).await.map_err(Some)
    }

    /// The highest leader epoch in the manifests of a topic to recover (its partitions'
    /// epochs then start above it): the failing partition with its error, if one cannot
    /// be loaded.
    pub async fn max_epoch(
        &self,
        d: &crate::catalog::TopicDescriptor,
    ) -> Result<i32, (i32, crate::TierError)> {
        let mut max_epoch = 0;
        let Some(tier) = &self.tier else {
            return Ok(max_epoch);
        };
        for p in 0..d.partitions {
            let key = PartitionKey {
                cluster_id: d.cluster_id.clone(),
                topic: d.topic.clone(),
                topic_id: d.topic_id,
                partition: p,
            };
            let r = tier.open_partition(key).await.map_err(|e| (p, e))?;
            max_epoch = max_epoch.max(r.manifest_snapshot().max_epoch());
        }
        Ok(max_epoch)
    }

    /// Whether the tier can carry out a topic config, checked when it is set (CreateTopics,
    /// AlterConfigs): a `parquet.value.schema` must parse (strata-parquet's format), or
    /// every conversion of the topic would fail until it is fixed. The reason names the
    /// bad member and what is allowed.
    pub fn check_config(config: &TopicConfig) -> Result<(), String> {
        if let Some(schema) = &config.parquet_value_schema {
            strata_parquet::ValueSchema::parse(schema).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Whether a topic's config may change from `old` to `new` with its Iceberg table
    /// following (the reason when not): checked before AlterConfigs is applied.
    pub fn check_config_change(old: &TopicConfig, new: &TopicConfig) -> Result<(), String> {
        crate::iceberg::check_config_change(old, new)
    }

    /// Whether parquet.enable topics are published as Iceberg tables
    /// (`--iceberg-commit-interval` is not 0 and the store is one engines can read).
    pub fn publishing(&self) -> bool {
        !self.tables.commit_interval.is_zero() && self.tables.store_uri.is_some()
    }

    /// Where the Iceberg tables of the topics stored under `cluster` are: their files
    /// in the tier's store, their metadata pointers there or in the REST catalog.
    /// `None` for a store no engine can read, or no store.
    pub fn table_catalog(&self, cluster: &str) -> Option<crate::iceberg::Catalog> {
        let tier = self.tier.as_ref()?;
        let uri = self.tables.store_uri.as_deref()?;
        Some(
            crate::iceberg::Catalog::new(tier.store().clone(), uri, cluster)
                .with_rest(self.tables.rest.clone()),
        )
    }

    /// Whether a compaction of this partition was requested: it stays pending until
    /// its next Parquet round.
    fn compaction_requested(&self, topic: TopicId, partition: i32) -> bool {
        let pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.contains(&(topic, partition))
    }

    fn compaction_finished(&self, topic: TopicId, partition: i32) {
        let mut pending = self
            .compaction_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.remove(&(topic, partition));
    }
}
