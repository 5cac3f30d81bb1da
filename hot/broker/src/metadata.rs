//! Cluster metadata as this broker sees it.
//!
//! The controller quorum (strata-controller, openraft) owns the metadata: brokers,
//! topics, partition assignments, leaders, ISRs and epochs. The broker changes it only
//! through the controller's client trait ([`strata_controller::ControllerApi`], which
//! tests can fake) and keeps a copy current with a long poll ([`MetadataCache`]);
//! every change to the copy is applied to the partitions hosted here.

use std::sync::Arc;
use std::time::Duration;

use strata_controller::{
    ClusterMetadata, ControllerApi, ControllerError, MetadataDelta, MetadataUpdate,
};
use strata_proto::ErrorCode;
use tokio::sync::watch;

use crate::error::ApiError;

/// Kafka's topic-name rules, shared with the controller.
pub use strata_proto::topic_name::{InvalidTopicName, validate_topic_name};

impl From<InvalidTopicName> for ApiError {
    fn from(e: InvalidTopicName) -> Self {
        ApiError::new(ErrorCode::InvalidTopicException, e.to_string())
    }
}

/// Topics only the broker's own coordinators write (Kafka's Topic.isInternal):
/// clients may read them, but not produce to, delete, repartition or reconfigure them.
pub fn is_internal_topic(name: &str) -> bool {
    name == crate::groups::OFFSETS_TOPIC
        || name == crate::txns::TXN_TOPIC
        || name == crate::schemas::SCHEMAS_TOPIC
}

/// The topic configs a client may change on an internal topic: the ones that do not
/// change what its coordinator reads back (retention, cleanup, tiering and Parquet
/// would drop or move commits under it).
pub const INTERNAL_TOPIC_MUTABLE_CONFIGS: &[&str] = &[
    "segment.bytes",
    "segment.ms",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "flush.messages",
    "flush.ms",
    "index.interval.bytes",
];

impl From<ControllerError> for ApiError {
    fn from(e: ControllerError) -> Self {
        ApiError::new(e.error_code(), e.to_string())
    }
}

/// The newest cluster metadata this broker has, kept current by [`MetadataCache::run`].
#[derive(Debug)]
pub struct MetadataCache {
    controller: Arc<dyn ControllerApi>,
    tx: watch::Sender<Arc<ClusterMetadata>>,
}

impl MetadataCache {
    /// Fetches the metadata once, waiting for a controller leader up to `timeout`.
    pub async fn connect(
        controller: Arc<dyn ControllerApi>,
        timeout: Duration,
    ) -> Result<MetadataCache, ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match controller.metadata(0, Duration::ZERO).await {
                Ok(Some(md)) => {
                    let (tx, _) = watch::channel(Arc::new(md));
                    return Ok(MetadataCache { controller, tx });
                }
                Ok(None) => {}
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(ApiError::new(
                        e.error_code(),
                        format!(
                            "no controller answered within {timeout:?} ({e}): check --controller-voters and that a majority of voters runs"
                        ),
                    ));
                }
                Err(e) => tracing::debug!(error = %e, "waiting for the controller"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn controller(&self) -> &Arc<dyn ControllerApi> {
        &self.controller
    }

    pub fn current(&self) -> Arc<ClusterMetadata> {
        self.tx.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterMetadata>> {
        self.tx.subscribe()
    }

    /// Brings the copy up to the controller's version now (after a change this broker
    /// asked for, so that the change is visible here when the request is answered).
    pub async fn refresh(&self) -> Result<Arc<ClusterMetadata>, ApiError> {
        let since = self.current().version;
        if let Some(update) = self
            .controller
            .metadata_update(since, Duration::ZERO)
            .await?
        {
            self.absorb(update).await?;
        }
        Ok(self.current())
    }

    /// Takes what a long poll brought. A delta that does not fit this copy (another
    /// update came between, or it cannot be applied) is replaced by the whole metadata.
    async fn absorb(&self, update: MetadataUpdate) -> Result<(), ControllerError> {
        match update {
            MetadataUpdate::Full(md) => {
                metrics::counter!("strata_metadata_updates_total", "kind" => "full").increment(1);
                self.publish(*md);
            }
            MetadataUpdate::Delta(delta) => {
                metrics::counter!("strata_metadata_updates_total", "kind" => "delta").increment(1);
                if let Err(reason) = self.apply_delta(&delta) {
                    tracing::warn!(%reason, "a metadata delta does not apply; fetching the whole metadata");
                    if let Some(md) = self.controller.metadata(0, Duration::ZERO).await? {
                        metrics::counter!("strata_metadata_updates_total", "kind" => "full")
                            .increment(1);
                        self.publish(md);
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies `delta` to a copy of the current metadata and publishes it; nothing when
    /// the copy is already at or past the delta's end.
    fn apply_delta(&self, delta: &MetadataDelta) -> Result<(), String> {
        let mut result = Ok(());
        self.tx.send_if_modified(|cur| {
            if cur.version >= delta.to_version {
                return false;
            }
            let mut next = ClusterMetadata::clone(cur);
            match next.apply_delta(delta) {
                Ok(()) => {
                    *cur = Arc::new(next);
                    true
                }
                Err(e) => {
                    result = Err(e.to_string());
                    false
                }
            }
        });
        result
    }

    fn publish(&self, md: ClusterMetadata) {
        self.tx.send_if_modified(|cur| {
            if md.version > cur.version
                || (md.version == cur.version && md.controller_leader != cur.controller_leader)
            {
                *cur = Arc::new(md);
                true
            } else {
                false
            }
        });
    }

    /// Long-polls the controller for newer metadata until cancelled.
    pub async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            let since = self.current().version;
            let r = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = self.controller.metadata_update(since, Duration::from_secs(5)) => r,
            };
            let r = match r {
                Ok(Some(update)) => self.absorb(update).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "metadata long poll failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
