//! The registry of open consumer instances and SSE stream members: lookup by owner,
//! the cap on how many may be open, and the reaper that closes idle instances.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::dlq::OnDecodeError;
use crate::error::{ApiError, ApiResult};
use crate::service::GroupConsumer;
use crate::v2::Format;

/// One v2 consumer instance.
pub struct Instance {
    pub group: String,
    pub name: String,
    /// The principal that created it, the only one that may use it.
    pub principal: String,
    pub format: Format,
    /// What a poll does with a record it cannot show in `format`.
    pub on_decode_error: OnDecodeError,
    pub consumer: Box<dyn GroupConsumer>,
    pub(super) last_used: Mutex<Instant>,
    /// One request at a time per instance, as Confluent's.
    pub(super) busy: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("group", &self.group)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Instance {
    pub(super) fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    /// Holds the instance for one request (Confluent serves one at a time).
    pub(crate) async fn busy(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.touch();
        self.busy.lock().await
    }

    fn idle_since(&self) -> Instant {
        self.last_used
            .lock()
            .map_or_else(|_| Instant::now(), |t| *t)
    }
}

/// An SSE session: its group, the principal that opened it, and its member.
pub(crate) struct StreamMember {
    pub group: String,
    pub principal: String,
    pub consumer: Arc<dyn GroupConsumer>,
}

impl std::fmt::Debug for StreamMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMember")
            .field("group", &self.group)
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

/// The open instances and SSE streams.
#[derive(Debug)]
pub struct Consumers {
    pub(super) instances: Mutex<HashMap<(String, String), Arc<Instance>>>,
    /// SSE sessions by id.
    pub(crate) streams: Mutex<HashMap<String, StreamMember>>,
    idle: Duration,
    max: usize,
}

impl std::fmt::Debug for dyn GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupConsumer")
    }
}

impl Consumers {
    pub fn new(idle: Duration, max: usize) -> Arc<Consumers> {
        Arc::new(Consumers {
            instances: Mutex::default(),
            streams: Mutex::default(),
            idle,
            max,
        })
    }

    fn open(&self) -> usize {
        self.instances.lock().map_or(0, |m| m.len()) + self.streams.lock().map_or(0, |m| m.len())
    }

    /// Whether another instance or stream may open.
    pub fn has_room(&self) -> bool {
        self.open() < self.max
    }

    /// `principal`'s instance `name` of `group` (another principal's is not found).
    pub fn get(&self, group: &str, name: &str, principal: &str) -> ApiResult<Arc<Instance>> {
        let i = self
            .instances
            .lock()
            .ok()
            .and_then(|m| m.get(&(group.to_string(), name.to_string())).cloned())
            .filter(|i| i.principal == principal)
            .ok_or_else(ApiError::instance_not_found)?;
        i.touch();
        Ok(i)
    }

    /// Removes `principal`'s instance (another principal's stays).
    pub(super) fn remove(&self, group: &str, name: &str, principal: &str) -> Option<Arc<Instance>> {
        let mut m = self.instances.lock().ok()?;
        let key = (group.to_string(), name.to_string());
        if m.get(&key)?.principal != principal {
            return None;
        }
        m.remove(&key)
    }

    /// Closes every instance and stream member (at shutdown, while the broker is up).
    pub async fn close_all(&self) {
        let instances: Vec<Arc<Instance>> = self
            .instances
            .lock()
            .map(|mut m| m.drain().map(|(_, i)| i).collect())
            .unwrap_or_default();
        let streams: Vec<Arc<dyn GroupConsumer>> = self
            .streams
            .lock()
            .map(|mut m| m.drain().map(|(_, member)| member.consumer).collect())
            .unwrap_or_default();
        let closing = instances
            .iter()
            .map(|i| i.consumer.close())
            .chain(streams.iter().map(|c| c.close()));
        futures::future::join_all(closing).await;
    }

    /// Instances idle past the timeout, removed.
    pub fn expired(&self, now: Instant) -> Vec<Arc<Instance>> {
        let Ok(mut m) = self.instances.lock() else {
            return Vec::new();
        };
        let gone: Vec<(String, String)> = m
            .iter()
            .filter(|(_, i)| now.saturating_duration_since(i.idle_since()) >= self.idle)
            .map(|(k, _)| k.clone())
            .collect();
        gone.into_iter().filter_map(|k| m.remove(&k)).collect()
    }
}

/// Closes idle instances until the registry is dropped.
pub fn spawn_reaper(consumers: &Arc<Consumers>) {
    let weak: Weak<Consumers> = Arc::downgrade(consumers);
    let every = (consumers.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(c) = weak.upgrade() else { return };
            for i in c.expired(Instant::now()) {
                tracing::info!(group = %i.group, instance = %i.name, "closing an idle consumer instance");
                metrics::counter!("strata_http_consumer_instances_expired_total").increment(1);
                i.consumer.close().await;
            }
        }
    });
}
