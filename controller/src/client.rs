//! The client brokers and tools use to talk to the controller quorum.
//!
//! A call goes to the leader it last heard of (or the voters in turn), follows "not the
//! leader, try N" answers at once, and otherwise retries with exponential backoff until
//! its deadline. Rejections come back at once. Calls that change state are built to be
//! safe to repeat, because a retry after a lost answer repeats them: a topic carries an
//! id chosen once per call (so it is created once), and AlterPartition asking for the ISR
//! that is already there succeeds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_proto::TopicId;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::ControllerError;
use crate::net::peer::{CallError, Peers};
use crate::rpc::{
    BrokerRegistration, ClientReply, ClientRequest, HeartbeatReply, NewTopicRequest, RpcRequest,
    RpcResponse, WireError,
};
use crate::security::{SecurityChange, SecurityOutcome};
use crate::state::{
    AlterPartitionRequest, BrokerRecord, ClusterMetadata, ElectionOutcome, ElectionType,
    MetadataUpdate, PartitionRecord, Reassignment, ReassignmentOutcome, TopicRecord,
};
use crate::types::BrokerId;

/// How a [`ControllerClient`] reaches the quorum and how long it tries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Controller voter addresses (`HOST:PORT`); any one that answers will do.
    pub voters: Vec<String>,
    /// A call's overall deadline, retries included (a long poll adds its wait).
    pub request_timeout: Duration,
    /// One attempt's timeout.
    pub rpc_timeout: Duration,
    /// The first retry delay; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// TLS to the voters (their RPC port requires mutual TLS when configured).
    pub tls: Option<crate::net::ClientTls>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            voters: vec!["127.0.0.1:9093".into()],
            request_timeout: Duration::from_secs(30),
            rpc_timeout: Duration::from_secs(12),
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_secs(1),
            tls: None,
        }
    }
}

/// A client of the controller quorum. Cheap to clone; clones share connections and the
/// leader hint.
#[derive(Clone, Debug)]
pub struct ControllerClient {
    shared: Arc<Shared>,
    request_timeout: Duration,
    cancel: Option<CancellationToken>,
}

#[derive(Debug)]
struct Shared {
    config: ClientConfig,
    peers: Peers,
    /// The leader's address, as last learned.
    leader: Mutex<Option<String>>,
    /// The next voter to try when no leader is known.
    next: AtomicUsize,
}

impl ControllerClient {
    /// A client of the voters at these addresses, with default timeouts.
    pub fn new<I, S>(voters: I) -> ControllerClient
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_config(ClientConfig {
            voters: voters.into_iter().map(Into::into).collect(),
            ..ClientConfig::default()
        })
    }

    pub fn with_config(config: ClientConfig) -> ControllerClient {
        let tls = config.tls.as_ref().map(|t| t.0.clone());
        ControllerClient {
            request_timeout: config.request_timeout,
            shared: Arc::new(Shared {
                config,
                peers: Peers::new(tls),
                leader: Mutex::new(None),
                next: AtomicUsize::new(0),
            }),
            cancel: None,
        }
    }

    /// The same client with another overall deadline per call (heartbeats want one
    /// shorter than their interval).
    pub fn with_deadline(&self, deadline: Duration) -> ControllerClient {
        ControllerClient {
            request_timeout: deadline,
            ..self.clone()
        }
    }

    /// The same client, whose calls end with [`ControllerError::Cancelled`] once `token`
    /// is cancelled.
    pub fn with_cancellation(&self, token: CancellationToken) -> ControllerClient {
        ControllerClient {
            cancel: Some(token),
            ..self.clone()
        }
    }

    /// Registers a broker (or a restarted one again): a new broker epoch.
    pub async fn register_broker(
        &self,
        registration: BrokerRegistration,
    ) -> Result<BrokerRecord, ControllerError> {
        match self
            .call(ClientRequest::RegisterBroker(registration), Duration::ZERO)
            .await?
        {
            ClientReply::Broker(b) => Ok(b),
            other => Err(self.unexpected(other)),
        }
    }

    /// Tells the leader the broker is alive (Kafka's BrokerHeartbeat). A fenced broker
    /// that heartbeats is unfenced.
    pub async fn heartbeat(
        &self,
        broker_id: BrokerId,
        broker_epoch: i64,
    ) -> Result<HeartbeatReply, ControllerError> {
        let req = ClientRequest::Heartbeat {
            broker_id,
            broker_epoch,
        };
        match self.call(req, Duration::ZERO).await? {
            ClientReply::Heartbeat(h) => Ok(h),
            other => Err(self.unexpected(other)),
        }
    }

    /// Creates a topic; `replication_factor` -1 takes the controller's default. Replicas
    /// are assigned by the controller leader.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError> {
        let req = NewTopicRequest {
            id: TopicId::random(),
            name: name.to_string(),
            partitions,
            replication_factor,
            configs,
            storage_cluster_id: None,
            initial_leader_epoch: 0,
            assignment: None,
        };
        self.topic_call(ClientRequest::CreateTopic(req)).await
    }

    /// Creates a topic with the replicas the caller chose: one list per partition, the
    /// first replica its preferred leader (validated by the controller: brokers
    /// registered, none twice in a list, every list as long).
    pub async fn create_topic_assigned(
        &self,
        name: &str,
        assignment: Vec<Vec<BrokerId>>,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError> {
        let req = NewTopicRequest {
            id: TopicId::random(),
            name: name.to_string(),
            partitions: i32::try_from(assignment.len()).unwrap_or(i32::MAX),
            replication_factor: i16::try_from(assignment.first().map_or(0, Vec::len))
                .unwrap_or(i16::MAX),
            configs,
            storage_cluster_id: None,
            initial_leader_epoch: 0,
            assignment: Some(assignment),
        };
        self.topic_call(ClientRequest::CreateTopic(req)).await
    }

    /// Adds a topic with the given id (recovery of a topic from object storage).
    pub async fn restore_topic(
        &self,
        topic: NewTopicRequest,
    ) -> Result<TopicRecord, ControllerError> {
        self.topic_call(ClientRequest::RestoreTopic(topic)).await
    }

    pub async fn delete_topic(&self, name: &str) -> Result<TopicRecord, ControllerError> {
        self.topic_call(ClientRequest::DeleteTopic {
            name: name.to_string(),
        })
        .await
    }

    /// Grows a topic to `count` partitions (never shrinks, as in Kafka).
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
    ) -> Result<TopicRecord, ControllerError> {
        self.topic_call(ClientRequest::CreatePartitions {
            name: name.to_string(),
            count,
            assignment: None,
        })
        .await
    }

    /// Grows a topic to `count` partitions with the replicas the caller chose for the
    /// new ones (as many replicas each as the topic's partitions have).
    pub async fn create_partitions_assigned(
        &self,
        name: &str,
        count: i32,
        assignment: Vec<Vec<BrokerId>>,
    ) -> Result<TopicRecord, ControllerError> {
        self.topic_call(ClientRequest::CreatePartitions {
            name: name.to_string(),
            count,
            assignment: Some(assignment),
        })
        .await
    }

    /// Replaces a topic's config overrides.
    pub async fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError> {
        self.topic_call(ClientRequest::SetConfigs {
            name: name.to_string(),
            configs,
        })
        .await
    }

    /// Kafka's AlterPartition (KIP-497), from the partition leader.
    pub async fn alter_partition(
        &self,
        request: AlterPartitionRequest,
    ) -> Result<PartitionRecord, ControllerError> {
        match self
            .call(ClientRequest::AlterPartition(request), Duration::ZERO)
            .await?
        {
            ClientReply::Partition(p) => Ok(p),
            other => Err(self.unexpected(other)),
        }
    }

    /// Kafka's ElectLeaders; `None` means every partition.
    pub async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionOutcome>, ControllerError> {
        let req = ClientRequest::ElectLeaders {
            election,
            partitions,
        };
        match self.call(req, Duration::ZERO).await? {
            ClientReply::Elections(e) => Ok(e),
            other => Err(self.unexpected(other)),
        }
    }

    /// KIP-455's AlterPartitionReassignments: each partition moves to its target, or
    /// its reassignment is cancelled. One outcome per entry, in order.
    pub async fn alter_reassignments(
        &self,
        reassignments: Vec<Reassignment>,
    ) -> Result<Vec<ReassignmentOutcome>, ControllerError> {
        match self
            .call(
                ClientRequest::AlterReassignments(reassignments),
                Duration::ZERO,
            )
            .await?
        {
            ClientReply::Reassignments(o) => Ok(o),
            other => Err(self.unexpected(other)),
        }
    }

    /// Removes a fenced broker that holds no replica (Kafka's UnregisterBroker).
    pub async fn unregister_broker(&self, broker: BrokerId) -> Result<(), ControllerError> {
        match self
            .call(ClientRequest::UnregisterBroker { broker }, Duration::ZERO)
            .await?
        {
            ClientReply::Done => Ok(()),
            other => Err(self.unexpected(other)),
        }
    }

    /// Replaces the dynamic configs of broker `resource` (its id as text), or with `""`
    /// the cluster-wide default; an empty map removes them.
    pub async fn set_broker_configs(
        &self,
        resource: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        let req = ClientRequest::SetBrokerConfigs {
            resource: resource.to_string(),
            configs,
        };
        match self.call(req, Duration::ZERO).await? {
            ClientReply::Done => Ok(()),
            other => Err(self.unexpected(other)),
        }
    }

    /// Reserves `count` producer ids; returns the first. Ids are never handed out twice.
    pub async fn allocate_producer_ids(&self, count: i64) -> Result<i64, ControllerError> {
        match self
            .call(ClientRequest::AllocateProducerIds { count }, Duration::ZERO)
            .await?
        {
            ClientReply::ProducerIds { first } => Ok(first),
            other => Err(self.unexpected(other)),
        }
    }

    /// Applies a change to credentials (KIP-554), ACLs or quotas.
    pub async fn alter_security(
        &self,
        change: SecurityChange,
    ) -> Result<SecurityOutcome, ControllerError> {
        match self
            .call(ClientRequest::AlterSecurity(change), Duration::ZERO)
            .await?
        {
            ClientReply::Security(o) => Ok(o),
            other => Err(self.unexpected(other)),
        }
    }

    /// The whole cluster metadata once its version exceeds `since_version` (at once if it
    /// already does), or `None` if it did not change within `wait`. Pass 0 to get the
    /// current metadata.
    pub async fn metadata(
        &self,
        since_version: u64,
        wait: Duration,
    ) -> Result<Option<ClusterMetadata>, ControllerError> {
        let req = ClientRequest::Metadata {
            since_version,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            deltas: false,
        };
        match self.call(req, wait).await? {
            ClientReply::Metadata(m) => Ok(m.map(|m| *m)),
            other => Err(self.unexpected(other)),
        }
    }

    /// As [`metadata`](Self::metadata), but the answer may be a delta: the commands
    /// since `since_version`, for a caller that holds that version and applies them with
    /// [`ClusterMetadata::apply_delta`](crate::ClusterMetadata::apply_delta).
    pub async fn metadata_update(
        &self,
        since_version: u64,
        wait: Duration,
    ) -> Result<Option<MetadataUpdate>, ControllerError> {
        let req = ClientRequest::Metadata {
            since_version,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            deltas: true,
        };
        match self.call(req, wait).await? {
            ClientReply::Metadata(m) => Ok(m.map(MetadataUpdate::Full)),
            ClientReply::MetadataDelta(d) => Ok(Some(MetadataUpdate::Delta(*d))),
            other => Err(self.unexpected(other)),
        }
    }

    async fn topic_call(&self, req: ClientRequest) -> Result<TopicRecord, ControllerError> {
        match self.call(req, Duration::ZERO).await? {
            ClientReply::Topic(t) => Ok(t),
            other => Err(self.unexpected(other)),
        }
    }

    fn unexpected(&self, reply: ClientReply) -> ControllerError {
        ControllerError::Protocol {
            addr: self.shared.config.voters.join(","),
            reason: format!("unexpected reply {reply:?}"),
        }
    }

    /// Where to send the next attempt.
    fn target(&self) -> Option<String> {
        if let Some(l) = self
            .shared
            .leader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Some(l);
        }
        let voters = &self.shared.config.voters;
        if voters.is_empty() {
            return None;
        }
        let i = self.shared.next.fetch_add(1, Ordering::Relaxed);
        Some(voters[i % voters.len()].clone())
    }

    fn set_leader(&self, addr: Option<String>) {
        *self.shared.leader.lock().unwrap_or_else(|e| e.into_inner()) = addr;
    }

    /// Sends `req` to the leader, following hints and retrying until the deadline.
    /// `extra` lengthens the deadline and each attempt (a long poll's wait).
    async fn call(
        &self,
        req: ClientRequest,
        extra: Duration,
    ) -> Result<ClientReply, ControllerError> {
        let cfg = &self.shared.config;
        let started = Instant::now();
        let deadline = started + self.request_timeout + extra;
        let rpc = RpcRequest::Client(req);
        let mut backoff = cfg.backoff_initial;
        let mut last_error: Option<ControllerError> = None;
        let mut redirects = 0;
        loop {
            let now = Instant::now();
            let Some(addr) = self.target().filter(|_| now < deadline) else {
                return Err(ControllerError::TimedOut {
                    after: now - started,
                    last_error: last_error.map(Box::new),
                });
            };
            let attempt = (cfg.rpc_timeout + extra).min(deadline - now);
            let peer = self.shared.peers.get(&addr);
            let result = match &self.cancel {
                Some(token) => tokio::select! {
                    _ = token.cancelled() => return Err(ControllerError::Cancelled),
                    r = peer.call(&rpc, attempt) => r,
                },
                None => peer.call(&rpc, attempt).await,
            };
            let mut follow_at_once = false;
            match result {
                Ok(RpcResponse::Client(Ok(reply))) => {
                    self.set_leader(Some(addr));
                    return Ok(reply);
                }
                Ok(RpcResponse::Client(Err(WireError::Rejected(r)))) => {
                    return Err(ControllerError::Rejected(r));
                }
                Ok(RpcResponse::Client(Err(e @ WireError::NotLeader { .. }))) => {
                    let hint = match &e {
                        WireError::NotLeader { leader_addr, .. } => leader_addr.clone(),
                        _ => None,
                    };
                    // Follow a hint to another node at once, a few times in a row; a
                    // node that names itself or nobody means an election is under way.
                    follow_at_once = hint.as_ref().is_some_and(|h| *h != addr) && redirects < 3;
                    if follow_at_once {
                        redirects += 1;
                    }
                    self.set_leader(hint.filter(|h| *h != addr));
                    last_error = Some(e.into());
                }
                Ok(RpcResponse::Client(Err(e @ WireError::Unavailable { .. }))) => {
                    self.set_leader(None);
                    last_error = Some(e.into());
                }
                Ok(other) => {
                    return Err(ControllerError::Protocol {
                        addr,
                        reason: format!("unexpected response {other:?}"),
                    });
                }
                Err(e) => {
                    self.set_leader(None);
                    last_error = Some(match e {
                        CallError::TimedOut(after) => ControllerError::TimedOut {
                            after,
                            last_error: None,
                        },
                        e => ControllerError::Transport {
                            addr: addr.clone(),
                            source: e.into_io(),
                        },
                    });
                }
            }
            if follow_at_once {
                continue;
            }
            redirects = 0;
            let now = Instant::now();
            if now >= deadline {
                continue;
            }
            let pause = backoff.min(deadline - now);
            backoff = (backoff * 2).min(cfg.backoff_max);
            match &self.cancel {
                Some(token) => tokio::select! {
                    _ = token.cancelled() => return Err(ControllerError::Cancelled),
                    _ = tokio::time::sleep(pause) => {}
                },
                None => tokio::time::sleep(pause).await,
            }
        }
    }
}

/// What brokers and tools need from the controller, as a trait object so tests can fake
/// it. [`ControllerClient`] is the real one.
#[async_trait::async_trait]
pub trait ControllerApi: Send + Sync + std::fmt::Debug {
    async fn register_broker(
        &self,
        registration: BrokerRegistration,
    ) -> Result<BrokerRecord, ControllerError>;
    async fn heartbeat(
        &self,
        broker_id: BrokerId,
        broker_epoch: i64,
    ) -> Result<HeartbeatReply, ControllerError>;
    async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError>;
    async fn restore_topic(&self, topic: NewTopicRequest) -> Result<TopicRecord, ControllerError>;
    async fn delete_topic(&self, name: &str) -> Result<TopicRecord, ControllerError>;
    async fn create_partitions(
        &self,
        name: &str,
        count: i32,
    ) -> Result<TopicRecord, ControllerError>;
    /// [`ControllerClient::create_topic_assigned`].
    async fn create_topic_assigned(
        &self,
        name: &str,
        assignment: Vec<Vec<BrokerId>>,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError>;
    /// [`ControllerClient::create_partitions_assigned`].
    async fn create_partitions_assigned(
        &self,
        name: &str,
        count: i32,
        assignment: Vec<Vec<BrokerId>>,
    ) -> Result<TopicRecord, ControllerError>;
    async fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError>;
    async fn alter_partition(
        &self,
        request: AlterPartitionRequest,
    ) -> Result<PartitionRecord, ControllerError>;
    async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionOutcome>, ControllerError>;
    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, ControllerError>;
    /// [`ControllerClient::unregister_broker`].
    async fn unregister_broker(&self, broker: BrokerId) -> Result<(), ControllerError>;
    /// [`ControllerClient::set_broker_configs`].
    async fn set_broker_configs(
        &self,
        resource: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ControllerError>;
    /// [`ControllerClient::alter_reassignments`].
    async fn alter_reassignments(
        &self,
        reassignments: Vec<Reassignment>,
    ) -> Result<Vec<ReassignmentOutcome>, ControllerError>;
    /// Credentials, ACLs and quotas.
    async fn alter_security(
        &self,
        change: SecurityChange,
    ) -> Result<SecurityOutcome, ControllerError>;
    async fn metadata(
        &self,
        since_version: u64,
        wait: Duration,
    ) -> Result<Option<ClusterMetadata>, ControllerError>;
    /// The whole metadata or the changes since `since_version`; by default always the
    /// whole metadata.
    async fn metadata_update(
        &self,
        since_version: u64,
        wait: Duration,
    ) -> Result<Option<MetadataUpdate>, ControllerError> {
        Ok(self
            .metadata(since_version, wait)
            .await?
            .map(|m| MetadataUpdate::Full(Box::new(m))))
    }
}

#[async_trait::async_trait]
impl ControllerApi for ControllerClient {
    async fn register_broker(
        &self,
        registration: BrokerRegistration,
    ) -> Result<BrokerRecord, ControllerError> {
        ControllerClient::register_broker(self, registration).await
    }
    async fn heartbeat(
        &self,
        broker_id: BrokerId,
        broker_epoch: i64,
    ) -> Result<HeartbeatReply, ControllerError> {
        ControllerClient::heartbeat(self, broker_id, broker_epoch).await
    }
    async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError> {
        ControllerClient::create_topic(self, name, partitions, replication_factor, configs).await
    }
    async fn restore_topic(&self, topic: NewTopicRequest) -> Result<TopicRecord, ControllerError> {
        ControllerClient::restore_topic(self, topic).await
    }
    async fn delete_topic(&self, name: &str) -> Result<TopicRecord, ControllerError> {
        ControllerClient::delete_topic(self, name).await
    }
    async fn create_partitions(
        &self,
        name: &str,
        count: i32,
    ) -> Result<TopicRecord, ControllerError> {
        ControllerClient::create_partitions(self, name, count).await
    }
    async fn create_topic_assigned(
        &self,
        name: &str,
        assignment: Vec<Vec<BrokerId>>,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError> {
        ControllerClient::create_topic_assigned(self, name, assignment, configs).await
    }
    async fn create_partitions_assigned(
        &self,
        name: &str,
        count: i32,
        assignment: Vec<Vec<BrokerId>>,
    ) -> Result<TopicRecord, ControllerError> {
        ControllerClient::create_partitions_assigned(self, name, count, assignment).await
    }
    async fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord, ControllerError> {
        ControllerClient::set_configs(self, name, configs).await
    }
    async fn alter_partition(
        &self,
        request: AlterPartitionRequest,
    ) -> Result<PartitionRecord, ControllerError> {
        ControllerClient::alter_partition(self, request).await
    }
    async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionOutcome>, ControllerError> {
        ControllerClient::elect_leaders(self, election, partitions).await
    }
    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, ControllerError> {
        ControllerClient::allocate_producer_ids(self, count).await
    }
    async fn alter_reassignments(
        &self,
        reassignments: Vec<Reassignment>,
    ) -> Result<Vec<ReassignmentOutcome>, ControllerError> {
        ControllerClient::alter_reassignments(self, reassignments).await
    }
    async fn set_broker_configs(
        &self,
        resource: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        ControllerClient::set_broker_configs(self, resource, configs).await
    }
    async fn unregister_broker(&self, broker: BrokerId) -> Result<(), ControllerError> {
        ControllerClient::unregister_broker(self, broker).await
    }
    async fn alter_security(
        &self,
        change: SecurityChange,
    ) -> Result<SecurityOutcome, ControllerError> {
        ControllerClient::alter_security(self, change).await
    }
    async fn metadata(
        &self,
        since_version: u64,
        wait: Duration,
    ) -> Result<Option<ClusterMetadata>, ControllerError> {
        ControllerClient::metadata(self, since_version, wait).await
    }
    async fn metadata_update(
        &self,
        since_version: u64,
        wait: Duration,
    ) -> Result<Option<MetadataUpdate>, ControllerError> {
        ControllerClient::metadata_update(self, since_version, wait).await
    }
}
