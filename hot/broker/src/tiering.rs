//! The broker's side of the tier (its half of Kafka's `RemoteLogManager`): each round
//! it hands the topics it hosts to strata-tier's [`Tiering`], which runs their
//! archivers; and it answers the tier's status and the tables' admin calls for the
//! topics hosted here. Everything the tier does is in cold/tier.

use std::sync::Arc;

use strata_tier::tiering::{
    CompactionRequest, ExpireReport, IcebergStatus, TableAdminError, TierStatus,
};
use strata_tier::{HostedPartition, HostedTopic, ReplicaView, RoundSettings, Tiering};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::partition::Partition;
use crate::replicas::{ReplicaManager, TopicState};

/// The tier scheduler: the hosted topics as the tier sees them, and its rounds.
#[derive(Debug)]
pub struct TierScheduler {
    replicas: Arc<ReplicaManager>,
    tiering: Arc<Tiering>,
    clock: Arc<dyn strata_log::Clock>,
    config: Arc<BrokerConfig>,
}

impl ReplicaView for Partition {
    fn leadership(&self) -> strata_tier::Leadership {
        Partition::leadership(self)
    }

    fn config(&self) -> strata_proto::TopicConfig {
        Partition::config(self)
    }
}

impl TierScheduler {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        tiering: Arc<Tiering>,
        clock: Arc<dyn strata_log::Clock>,
        config: Arc<BrokerConfig>,
    ) -> TierScheduler {
        TierScheduler {
            replicas,
            tiering,
            clock,
            config,
        }
    }

    /// The tier's one handle.
    pub fn tiering(&self) -> &Arc<Tiering> {
        &self.tiering
    }

    /// `t` as the tier sees it.
    fn hosted_topic(&self, t: &TopicState) -> HostedTopic {
        HostedTopic {
            name: t.name.clone(),
            id: t.id,
            config: t.config.clone(),
            overrides: t.overrides.clone(),
            partition_count: t.partition_count,
            cluster_id: t
                .storage_cluster_id
                .clone()
                .unwrap_or_else(|| self.replicas.cluster_id()),
            partitions: t
                .partitions
                .iter()
                .map(|p| HostedPartition {
                    log: p.log().clone(),
                    replica: p.clone(),
                })
                .collect(),
        }
    }

    /// Every topic with a replica here, as the tier sees it.
    pub fn hosted(&self) -> Vec<HostedTopic> {
        self.replicas
            .topics()
            .iter()
            .map(|t| self.hosted_topic(t))
            .collect()
    }

    fn hosted_named(&self, topic: &str) -> Option<HostedTopic> {
        self.replicas.topic(topic).map(|t| self.hosted_topic(&t))
    }

    /// Every partition's tiering state.
    pub fn tier_status(&self) -> TierStatus {
        self.tiering.status(
            &self.hosted(),
            self.replicas.tiered_local_bytes(),
            self.clock.now_ms(),
        )
    }

    /// `topic`'s Iceberg table and Parquet files.
    pub async fn iceberg_status(&self, topic: &str) -> Result<IcebergStatus, TableAdminError> {
        let hosted = self.hosted_named(topic);
        self.tiering.iceberg_status(topic, hosted.as_ref()).await
    }

    /// Asks the partitions of `topic` this broker leads to rewrite all their small
    /// Parquet files at their next round.
    pub fn request_compaction(&self, topic: &str) -> Result<CompactionRequest, TableAdminError> {
        self.tiering
            .request_compaction(topic, self.hosted_named(topic).as_ref())
    }

    /// Expires `topic`'s table snapshots older than `max_age_ms` beyond the newest
    /// `retain_last` (see [`Tiering::iceberg_expire`]).
    pub async fn iceberg_expire(
        &self,
        topic: &str,
        max_age_ms: i64,
        retain_last: usize,
    ) -> Result<ExpireReport, TableAdminError> {
        let hosted = self.hosted_named(topic);
        self.tiering
            .iceberg_expire(
                topic,
                hosted.as_ref(),
                max_age_ms,
                retain_last,
                self.clock.now_ms(),
            )
            .await
    }

    /// The rounds, until `shutdown`: every round interval, attach the remote tier of
    /// partitions that have none yet, then one [`Tiering::round`] over the hosted
    /// topics. Nothing without an object store.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(every) = self.tiering.round_interval() else {
            return;
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let settings = RoundSettings {
            retention_check_interval: self.config.retention_check_interval,
            cleaner_map_bytes: self.config.log_cleaner_dedupe_buffer_bytes
                / self.config.log_cleaner_threads.max(1),
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.replicas.attach_remotes().await;
            let topics: Vec<HostedTopic> = self
                .hosted()
                .into_iter()
                .filter(|t| t.config.remote_storage_enable || t.config.parquet_enable)
                .collect();
            let now_ms = self.clock.now_ms();
            self.tiering.round(&topics, settings, now_ms).await;
        }
    }
}
