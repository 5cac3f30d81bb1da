//! The broker: one object per process that composes the services, each an `Arc` with
//! its own state and lock, each depending only on services below it:
//!
//! ```text
//!   api/ (handlers)  server (connections, dispatch)
//!   ─────────────────────────────────────────────────────────────────────────
//!   Groups   Txns ─▶ Groups   TierScheduler   cleaner   replication (fetchers)
//!   ─────────────────────────────────────────────────────────────────────────
//!   ReplicaManager (partitions, reconcile, checkpoints)   Security   FetchSessions
//!   ─────────────────────────────────────────────────────────────────────────
//!   Lifecycle (registration)   MetadataCache   Partition   Throttles   config
//! ```
//!
//! Handlers are given the `Broker` and reach the service they need through its fields;
//! nothing below the handlers knows the `Broker` (as Kafka's `KafkaApis` is given the
//! `ReplicaManager`, `GroupCoordinator`, `TransactionCoordinator` and so on).

use std::sync::Arc;
use std::time::Duration;

use strata_controller::{ClusterMetadata, ControllerApi, Endpoint};
use strata_log::Clock;
use strata_tier::Tiering;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::fetch_sessions::FetchSessions;
use crate::groups::Groups;
use crate::lifecycle::Lifecycle;
use crate::metadata::MetadataCache;
use crate::replicas::ReplicaManager;
use crate::schemas::Schemas;
use crate::security::Security;
use crate::throttle::Throttles;
use crate::tiering::TierScheduler;
use crate::txns::Txns;

/// The broker's services. One per process; every connection holds an `Arc`.
#[derive(Debug)]
pub struct Broker {
    pub config: Arc<BrokerConfig>,
    /// The cluster metadata as this broker last fetched it, and the controller client.
    pub metadata: Arc<MetadataCache>,
    pub clock: Arc<dyn Clock>,
    /// Registration with the controller, the broker epoch, heartbeats.
    pub lifecycle: Arc<Lifecycle>,
    /// The partitions hosted here, kept in line with the metadata.
    pub replicas: Arc<ReplicaManager>,
    /// Authentication, the ACL authorizer, client quotas.
    pub security: Arc<Security>,
    /// Fetch sessions (KIP-227).
    pub fetch_sessions: Arc<FetchSessions>,
    /// Replication throttles for replicas catching up (as leader, and as follower).
    pub throttles: Arc<Throttles>,
    /// The consumer group coordinator (the `__consumer_offsets` partitions led here).
    pub groups: Arc<Groups>,
    /// The transaction coordinator (the `__transaction_state` partitions led here) and
    /// producer ids.
    pub txns: Arc<Txns>,
    /// The schema registry (its state is the `_schemas` topic).
    pub schemas: Arc<Schemas>,
    /// The tier: offload, remote retention and Parquet of the partitions hosted here
    /// (strata-tier's `Tiering`, handed the hosted topics each round).
    pub tiering: Arc<TierScheduler>,
}

impl Broker {
    /// Joins the cluster: fetches metadata from the controller, registers this broker
    /// (at `advertised`) and removes directories of deleted topics. The replicas
    /// metadata assigns here open with [`Self::load`], which the caller may run while
    /// the server ([`crate::Server`], with the background duties) already answers:
    /// requests for a partition still opening get NOT_LEADER_OR_FOLLOWER
    /// ([`ReplicaManager::missing_partition_code`]) and clients retry.
    pub async fn open(
        config: BrokerConfig,
        controller: Arc<dyn ControllerApi>,
        clock: Arc<dyn Clock>,
        tiering: Arc<Tiering>,
        advertised: Vec<Endpoint>,
    ) -> Result<Arc<Broker>, ApiError> {
        let listener = config.inter_broker_listener.name();
        if !advertised.iter().any(|e| e.name == listener) {
            return Err(ApiError::new(
                strata_proto::ErrorCode::InvalidRequest,
                format!(
                    "the inter-broker listener {} is not among the listeners",
                    config.inter_broker_listener
                ),
            ));
        }
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            ApiError::new(
                strata_proto::ErrorCode::KafkaStorageError,
                format!("cannot create data dir {}: {e}", config.data_dir.display()),
            )
        })?;
        // Every crate that reads records (the log, the tier, Parquet, the coordinators)
        // decompresses through strata-proto under this one cap.
        strata_proto::compression::set_max_decompressed_bytes(
            config.limits.max_decompressed_batch_bytes,
        );
        let config = Arc::new(config);
        let metadata =
            Arc::new(MetadataCache::connect(controller, config.controller_timeout).await?);
        let lifecycle = Arc::new(Lifecycle::new(
            config.node_id,
            metadata.clone(),
            advertised,
            listener,
        ));
        let replicas = ReplicaManager::new(
            config.clone(),
            metadata.clone(),
            clock.clone(),
            lifecycle.clone(),
            tiering.clone(),
        );
        let security = Arc::new(Security::new(config.security.clone(), metadata.clone()));
        let fetch_sessions = Arc::new(FetchSessions::new(
            config.fetch_session_slots,
            config.fetch_session_partitions,
        ));
        let groups = Arc::new(Groups::new(replicas.clone(), clock.clone(), config.clone()));
        let txns = Arc::new(Txns::new(
            replicas.clone(),
            groups.clone(),
            clock.clone(),
            config.clone(),
        ));
        let schemas = Arc::new(Schemas::new(replicas.clone(), clock.clone()));
        let tiering = Arc::new(TierScheduler::new(
            replicas.clone(),
            tiering,
            clock.clone(),
            config.clone(),
        ));
        let broker = Arc::new(Broker {
            config,
            metadata,
            clock,
            lifecycle,
            replicas,
            security,
            fetch_sessions,
            throttles: Arc::new(Throttles::default()),
            groups,
            txns,
            schemas,
            tiering,
        });
        broker.lifecycle.register().await?;
        broker
            .lifecycle
            .start_heartbeats(broker.config.heartbeat_interval);
        broker.replicas.remove_stray_directories();
        Ok(broker)
    }

    /// Opens and recovers every replica metadata assigns here (the first reconcile).
    /// Until it returns, partitions not open yet answer NOT_LEADER_OR_FOLLOWER.
    pub async fn load(&self) -> Result<(), ApiError> {
        self.replicas.load().await
    }

    /// Starts the background duties of every service; they stop with `shutdown`.
    pub(crate) fn start(
        self: &Arc<Self>,
        shutdown: &CancellationToken,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        crate::replication::start(
            &Arc::new(crate::replication::Replication {
                replicas: self.replicas.clone(),
                metadata: self.metadata.clone(),
                lifecycle: self.lifecycle.clone(),
                throttles: self.throttles.clone(),
                config: self.config.clone(),
            }),
            shutdown,
        );
        crate::cleaner::start(&self.replicas, &self.config, shutdown);
        vec![
            tokio::spawn(housekeeping(self.clone(), shutdown.clone())),
            tokio::spawn(self.tiering.clone().run(shutdown.clone())),
            tokio::spawn(self.groups.clone().run(shutdown.clone())),
            tokio::spawn(self.txns.clone().run(shutdown.clone())),
            tokio::spawn(self.schemas.clone().run(shutdown.clone())),
        ]
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// The cluster metadata as this broker last saw it.
    pub fn cluster(&self) -> Arc<ClusterMetadata> {
        self.metadata.current()
    }

    pub fn controller(&self) -> &Arc<dyn ControllerApi> {
        self.metadata.controller()
    }

    pub fn cluster_id(&self) -> String {
        self.cluster().cluster_id.clone()
    }

    /// Appends the series /metrics renders from the services' state
    /// ([`crate::exposition::render`]).
    pub fn render_metrics(&self, out: &mut String) {
        crate::exposition::render(&self.replicas, &self.groups, &self.fetch_sessions, out);
    }

    /// Readies every partition for the stop and marks it clean
    /// ([`ReplicaManager::shutdown`]). Call once nothing writes to the logs any more.
    pub fn shutdown(&self) {
        self.replicas.shutdown();
    }
}

/// Housekeeping on its own thread pool slot: segment.ms rolls, flush.ms, retention, checkpoints.
async fn housekeeping(broker: Arc<Broker>, shutdown: CancellationToken) {
    let c = broker.config.clone();
    let mut tick = tokio::time::interval(c.housekeeping_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_retention = tokio::time::Instant::now();
    let mut last_checkpoint = tokio::time::Instant::now();
    let mut last_files = tokio::time::Instant::now();
    let mut last_traffic = tokio::time::Instant::now();
    let mut files_warned = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = tokio::time::Instant::now();
        let retention = now - last_retention >= c.retention_check_interval;
        let checkpoint = now - last_checkpoint >= c.checkpoint_interval;
        if retention {
            last_retention = now;
        }
        if checkpoint {
            last_checkpoint = now;
        }
        if now - last_files >= Duration::from_secs(10) {
            last_files = now;
            broker.security.expire_quotas();
            crate::resources::watch_open_files(&mut files_warned);
        }
        let traffic = now - last_traffic >= crate::traffic::SAMPLE_INTERVAL;
        if traffic {
            last_traffic = now;
        }
        let b = broker.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if traffic {
                b.replicas.sample_traffic();
            }
            b.replicas.housekeeping(retention, checkpoint)
        })
        .await;
    }
}
