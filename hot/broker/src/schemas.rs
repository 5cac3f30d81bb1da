//! The schema registry's broker side (issue 37): its state is the compacted internal topic
//! `_schemas` (one partition, replicated as the other internal topics, in Confluent's
//! record format), and every broker with a replica of it keeps strata-registry's
//! [`Registry`] in line with the replica's log up to the high-water mark, so it answers
//! reads. Writes go through one writer, the partition's leader: it computes the change's
//! records from its state, appends them (acks=all), and answers once its own replay of
//! the log has applied them: a registration is acknowledged only when it is durable.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use strata_log::Clock;
use strata_proto::ErrorCode;
use strata_registry::{Record, Registry, RegistryError};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::replicas::ReplicaManager;

/// Confluent's topic name for the registry's records.
pub const SCHEMAS_TOPIC: &str = "_schemas";

/// The name under which a broker registers its registry's HTTP address with the
/// controller, beside its Kafka listeners: where the others forward writes to it.
pub const REGISTRY_ENDPOINT: &str = "SCHEMA_REGISTRY";

/// How long a request waits for the registry to catch up with the log, or for a write
/// to be applied.
const CATCH_UP: Duration = Duration::from_secs(10);

/// Why a registry call failed: the registry's own refusal, or the broker's (not the
/// writer, not loaded yet, the append failed).
#[derive(Debug, thiserror::Error)]
pub enum SchemasError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// This broker cannot answer now: the client should ask again, or ask the writer.
    #[error("{message}")]
    Unavailable {
        message: String,
        /// The broker leading `_schemas`, when known (a write goes there).
        leader: Option<i32>,
    },
}

impl From<ApiError> for SchemasError {
    fn from(e: ApiError) -> SchemasError {
        SchemasError::Unavailable {
            message: e.message,
            leader: None,
        }
    }
}

/// The registry as this broker holds it.
#[derive(Debug)]
struct Loaded {
    registry: Registry,
    /// The next offset of `_schemas` to replay.
    next: i64,
}

/// The schema registry service.
#[derive(Debug)]
pub struct Schemas {
    replicas: Arc<ReplicaManager>,
    clock: Arc<dyn Clock>,
    state: RwLock<Loaded>,
    /// Told whenever records were replayed.
    applied: tokio::sync::watch::Sender<i64>,
    /// One write at a time: a change is computed from the state its predecessor left.
    writing: tokio::sync::Mutex<()>,
}

impl Schemas {
    pub fn new(replicas: Arc<ReplicaManager>, clock: Arc<dyn Clock>) -> Schemas {
        Schemas {
            replicas,
            clock,
            state: RwLock::new(Loaded {
                registry: Registry::default(),
                next: 0,
            }),
            applied: tokio::sync::watch::Sender::new(0),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads the registry's state.
    pub fn read<T>(&self, f: impl FnOnce(&Registry) -> T) -> T {
        f(&self
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .registry)
    }

    /// The schema ids registered under `subject` (its live versions), for the produce
    /// path's validation (`confluent.value.schema.validation`): from the state this
    /// broker holds, and once more after replaying what its replica has (a schema
    /// registered a moment ago) when `id` is not among them.
    pub fn accepts(&self, subject: &str, id: i32) -> bool {
        if self.read(|r| r.ids_in(subject).binary_search(&id).is_ok()) {
            return true;
        }
        self.catch_up();
        self.read(|r| r.ids_in(subject).binary_search(&id).is_ok())
    }

    /// Replays what the local replica of `_schemas` has below its high-water mark and
    /// this broker has not applied yet; from the start again if the log no longer holds
    /// what was applied (a new topic, a truncation).
    pub fn catch_up(&self) {
        let Some(p) = self.replicas.partition(SCHEMAS_TOPIC, 0) else {
            return;
        };
        let hwm = p.high_watermark();
        let mut loaded = self.state.write().unwrap_or_else(|e| e.into_inner());
        if loaded.next > p.log().log_end() || loaded.next < p.log().local_start() {
            tracing::info!(
                applied = loaded.next,
                log_start = p.log().local_start(),
                "reloading the schema registry from _schemas"
            );
            loaded.registry = Registry::default();
            loaded.next = p.log().local_start();
        }
        let mut at = loaded.next;
        while at < hwm {
            let r = match p.read_local(at, 1 << 20) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(offset = at, error = %e, "cannot read _schemas; will retry");
                    break;
                }
            };
            if r.data.is_empty() || r.next_offset <= at {
                break;
            }
            for b in strata_proto::batch::batches(&r.data) {
                let Ok(b) = b else { break };
                if b.header().is_control() {
                    continue;
                }
                let Ok(records) = b.records() else {
                    metrics::counter!("strata_schemas_skipped_total").increment(1);
                    continue;
                };
                for rec in records.iter() {
                    let Ok(rec) = rec else { break };
                    if rec.offset < at || rec.offset >= hwm {
                        continue;
                    }
                    if let Some(key) = rec.key
                        && let Err(e) = loaded.registry.replay(key, rec.value)
                    {
                        metrics::counter!("strata_schemas_skipped_total").increment(1);
                        tracing::warn!(offset = rec.offset, error = %e, "skipping an unreadable _schemas record");
                    }
                }
            }
            at = r.next_offset.min(hwm);
        }
        loaded.next = at;
        drop(loaded);
        self.applied.send_replace(at);
    }

    /// Waits until this broker has replayed `_schemas` up to `offset` (bounded).
    async fn applied_to(&self, offset: i64) -> Result<(), SchemasError> {
        let mut rx = self.applied.subscribe();
        let wait = async {
            loop {
                if *rx.borrow_and_update() >= offset {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(CATCH_UP, wait)
            .await
            .map_err(|_| SchemasError::Unavailable {
                message: format!(
                    "the schema registry has not caught up with _schemas (offset {offset}) yet; retry"
                ),
                leader: None,
            })
    }

    /// Waits until this broker's registry reflects everything `_schemas` acknowledged
    /// when the call was made (reads are then as current as the writer's).
    pub async fn current(&self) -> Result<(), SchemasError> {
        let Some(p) = self.replicas.partition(SCHEMAS_TOPIC, 0) else {
            // No replica here (yet): nothing registered, or the topic is elsewhere.
            return match self.replicas.cluster().topic(SCHEMAS_TOPIC) {
                None => Ok(()),
                Some(_) => Err(SchemasError::Unavailable {
                    message: "this broker holds no replica of _schemas; ask a broker that does"
                        .into(),
                    leader: self.leader(),
                }),
            };
        };
        self.catch_up();
        self.applied_to(p.high_watermark()).await
    }

    /// The broker leading `_schemas`, if any.
    pub fn leader(&self) -> Option<i32> {
        self.replicas
            .cluster()
            .topic(SCHEMAS_TOPIC)
            .and_then(|t| t.partition(0))
            .map(|p| p.leader)
            .filter(|l| *l >= 0)
    }

    /// Which broker should answer a request, when not this one: a write goes to the
    /// leader of `_schemas` (the topic is created first if it does not exist, so a first
    /// registration has a writer), a read to it only when this broker has no replica.
    /// Returns the broker's id and its registry's address (`host`, `port`); `None` when
    /// the request is answered here (which also reports a missing writer).
    pub async fn route(&self, write: bool) -> Result<Option<(i32, String, u16)>, SchemasError> {
        if write {
            self.replicas
                .internal_topic_partitions(SCHEMAS_TOPIC, 1)
                .await?;
        } else if self.replicas.partition(SCHEMAS_TOPIC, 0).is_some()
            || self.replicas.cluster().topic(SCHEMAS_TOPIC).is_none()
        {
            return Ok(None);
        }
        let Some(leader) = self.leader().filter(|l| *l != self.replicas.node_id()) else {
            return Ok(None);
        };
        let cluster = self.replicas.cluster();
        let endpoint = cluster
            .broker(leader)
            .and_then(|b| b.listeners.iter().find(|e| e.name == REGISTRY_ENDPOINT));
        match endpoint {
            Some(e) => Ok(Some((leader, e.host.clone(), e.port))),
            None => Err(SchemasError::Unavailable {
                message: format!(
                    "broker {leader} writes the schema registry but serves no registry address (start it with --schema-registry-addr)"
                ),
                leader: Some(leader),
            }),
        }
    }

    /// Makes a change: `compute` gives its records from the current state (or refuses);
    /// they are appended as the leader of `_schemas` (creating the topic on first use)
    /// and the call returns once they are replayed here. Returns what `compute` gave.
    pub async fn write<T>(
        &self,
        compute: impl FnOnce(&Registry) -> Result<(T, Vec<Record>), RegistryError>,
    ) -> Result<T, SchemasError> {
        let _one = self.writing.lock().await;
        // One partition, as Confluent's: one log orders every change.
        self.replicas
            .internal_topic_partitions(SCHEMAS_TOPIC, 1)
            .await?;
        let p = self
            .replicas
            .partition(SCHEMAS_TOPIC, 0)
            .filter(|p| p.is_leader())
            .ok_or_else(|| SchemasError::Unavailable {
                message: match self.leader() {
                    Some(l) => format!("broker {l} writes the schema registry; this one does not"),
                    None => "the schema registry has no writer now (_schemas has no leader); retry"
                        .into(),
                },
                leader: self.leader(),
            })?;
        // The writer's state must include everything acknowledged before it wrote. A new
        // leader's high-water mark can lag what its predecessor acknowledged (it learns
        // the mark from its followers' fetches), but its log holds all of it: wait until
        // its whole log is committed and replayed, or it would hand out ids again.
        let end = p.log_end_offset();
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        match p.wait_acked(end, p.leader_epoch(), deadline).await {
            ErrorCode::None => {}
            code => {
                return Err(SchemasError::Unavailable {
                    message: format!(
                        "the schema registry's writer is not caught up with _schemas ({code:?}); retry"
                    ),
                    leader: None,
                });
            }
        }
        self.catch_up();
        self.applied_to(end).await?;
        let (answer, records) = self.read(compute)?;
        if records.is_empty() {
            return Ok(answer);
        }
        let records: Vec<(Bytes, Option<Bytes>)> = records
            .into_iter()
            .map(|r| (Bytes::from(r.key), r.value.map(Bytes::from)))
            .collect();
        let n = records.len() as i64;
        let first = crate::coordinator::append_and_wait(&p, &*self.clock, records)
            .await
            .map_err(|e| SchemasError::Unavailable {
                message: format!("cannot write to _schemas: {e}"),
                leader: None,
            })?
            .map_err(|code| SchemasError::Unavailable {
                message: match code {
                    ErrorCode::NotLeaderOrFollower => {
                        "the schema registry's writer moved; retry".to_string()
                    }
                    code => format!("the write to _schemas was not replicated ({code:?}); retry"),
                },
                leader: None,
            })?;
        self.catch_up();
        self.applied_to(first + n).await?;
        Ok(answer)
    }

    /// Keeps the registry in line with `_schemas` (its replica here) until `shutdown`.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let s = self.clone();
            let _ = tokio::task::spawn_blocking(move || s.catch_up()).await;
        }
    }
}
