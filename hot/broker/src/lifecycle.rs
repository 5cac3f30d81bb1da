//! This broker's membership of the cluster (Kafka's `BrokerLifecycleManager`): its
//! registration with the controller, its broker epoch and its heartbeats.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use strata_controller::{BrokerRegistration, Endpoint};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::metadata::MetadataCache;

/// This broker's registration with the controller.
#[derive(Debug)]
pub struct Lifecycle {
    node_id: i32,
    metadata: Arc<MetadataCache>,
    /// Every listener's advertised address (registered with the controller).
    advertised: Vec<Endpoint>,
    /// The listener other brokers reach this one on (its address is the broker's).
    inter_broker_listener: String,
    /// This broker's registration epoch with the controller.
    broker_epoch: AtomicI64,
    /// Stops the heartbeats, which start as soon as the broker registers (before its
    /// partitions open: opening thousands can outlast the session timeout) and end
    /// with the server ([`crate::Server`]) or when the broker is dropped.
    heartbeats_stop: CancellationToken,
}

impl Lifecycle {
    pub fn new(
        node_id: i32,
        metadata: Arc<MetadataCache>,
        advertised: Vec<Endpoint>,
        inter_broker_listener: &str,
    ) -> Lifecycle {
        Lifecycle {
            node_id,
            metadata,
            advertised,
            inter_broker_listener: inter_broker_listener.to_string(),
            broker_epoch: AtomicI64::new(-1),
            heartbeats_stop: CancellationToken::new(),
        }
    }

    /// Registers with the controller (again after a fencing or a controller restart
    /// that forgot us); the new broker epoch fences requests made under the old one.
    pub async fn register(&self) -> Result<(), ApiError> {
        let (host, port) = self.advertised();
        let rec = self
            .metadata
            .controller()
            .register_broker(BrokerRegistration {
                broker_id: self.node_id,
                host,
                port,
                rack: None,
                listeners: self.advertised.clone(),
            })
            .await?;
        self.broker_epoch.store(rec.epoch, Ordering::Release);
        self.metadata.refresh().await?;
        tracing::info!(
            broker = self.node_id,
            epoch = rec.epoch,
            "registered with the controller"
        );
        Ok(())
    }

    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    pub fn advertised(&self) -> (String, u16) {
        self.advertised
            .iter()
            .find(|e| e.name == self.inter_broker_listener)
            .map(|e| (e.host.clone(), e.port))
            .unwrap_or_default()
    }

    /// Starts the heartbeats (until [`Self::stop_heartbeats`] or this is dropped).
    pub fn start_heartbeats(self: &Arc<Self>, interval: Duration) {
        tokio::spawn(heartbeats(
            Arc::downgrade(self),
            interval,
            self.heartbeats_stop.clone(),
        ));
    }

    pub fn stop_heartbeats(&self) {
        self.heartbeats_stop.cancel();
    }
}

/// Heartbeats keep this broker unfenced (the controller fences it after 9 s of silence
/// and moves its leaderships). A rejected heartbeat (stale epoch: the controller forgot
/// or fenced us) registers again. They run from registration on, while the partitions
/// are still opening, until `stop` or the broker is dropped.
async fn heartbeats(
    lifecycle: std::sync::Weak<Lifecycle>,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; registration just started the session.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(lifecycle) = lifecycle.upgrade() else {
            return;
        };
        match lifecycle
            .metadata
            .controller()
            .heartbeat(lifecycle.node_id, lifecycle.broker_epoch())
            .await
        {
            Ok(reply) if reply.fenced => {
                tracing::warn!("the controller fenced this broker; registering again");
                let _ = lifecycle.register().await;
            }
            Ok(_) => {}
            Err(strata_controller::ControllerError::Rejected(r)) => {
                tracing::warn!(rejection = %r, "heartbeat refused; registering again");
                let _ = lifecycle.register().await;
            }
            Err(e) => tracing::debug!(error = %e, "heartbeat failed"),
        }
    }
}
