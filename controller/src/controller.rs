//! One controller voter: the raft node, its RPC server and the leader's duties.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, Raft, RaftMetrics, ServerState};
use strata_proto::TopicId;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::assign::assign_replicas;
use crate::client::{ClientConfig, ControllerClient};
use crate::clock::{Clock, TokioClock};
use crate::config::ControllerConfig;
use crate::duties::{Duties, DutySettings, HeartbeatAction};
use crate::error::{ControllerError, Rejection};
use crate::net::peer::Peers;
use crate::net::raft_net::NetworkFactory;
use crate::net::server::{RpcHandler, serve};
use crate::rpc::{
    BrokerRegistration, ClientReply, ClientRequest, HeartbeatReply, NewTopicRequest, RpcRequest,
    RpcResponse, WireError,
};
use crate::state::{
    ClusterMetadata, Command, CommandOutput, MetadataDelta, NewTopic, validate_configs,
    validate_topic_name,
};
use crate::store::{LogStore, StateMachineStore};
use crate::types::{NodeId, TypeConfig};

/// Longest a metadata long poll may wait.
const MAX_LONG_POLL: Duration = Duration::from_secs(300);

/// What [`Controller::start_with`] takes besides the configuration.
#[derive(Debug)]
pub struct StartOptions {
    /// The clock the leader's duties read (broker sessions, rebalancing delay).
    pub clock: Arc<dyn Clock>,
    /// A listener already bound to the controller address (tests bind port 0 first to
    /// learn every voter's address); `None` binds `listen_addr`.
    pub listener: Option<std::net::TcpListener>,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            clock: Arc::new(TokioClock),
            listener: None,
        }
    }
}

/// A running controller voter. [`Controller::shutdown`] stops it; dropping it stops its
/// server and duties too.
#[derive(Debug)]
pub struct Controller {
    node: Arc<Node>,
    tasks: TaskTracker,
    local_addr: SocketAddr,
}

struct Node {
    id: NodeId,
    config: ControllerConfig,
    raft: Raft<TypeConfig>,
    sm: StateMachineStore,
    clock: Arc<dyn Clock>,
    duties: Mutex<Duties>,
    /// The raft term in which this node, as leader, caught up and set up its duties.
    ready_term: Mutex<Option<u64>>,
    /// Serialises leader set-up.
    ready_lock: tokio::sync::Mutex<()>,
    /// Serialises proposals computed from the leader's view of the state (replica
    /// assignments), so concurrent creations see each other's replicas and balance.
    assign_lock: tokio::sync::Mutex<()>,
    voters: BTreeMap<NodeId, String>,
    stop: CancellationToken,
}

impl Controller {
    /// Starts a voter with the system clock, binding `config.listen_addr`.
    pub async fn start(config: ControllerConfig) -> Result<Controller, ControllerError> {
        Self::start_with(config, StartOptions::default()).await
    }

    /// Starts a voter. When this voter's directory is new and it has the lowest id of
    /// the voters, it initialises the cluster's membership; the others wait to hear from
    /// a leader. Returns once the voter serves RPCs (not once a leader is elected: see
    /// [`Controller::wait_for_leader`]).
    pub async fn start_with(
        config: ControllerConfig,
        options: StartOptions,
    ) -> Result<Controller, ControllerError> {
        config.validate()?;
        let raft_config = Arc::new(config.openraft_config()?);
        let listener = match options.listener {
            Some(l) => l
                .set_nonblocking(true)
                .and_then(|()| TcpListener::from_std(l)),
            None => TcpListener::bind(config.listen_addr).await,
        }
        .map_err(|source| ControllerError::Listen {
            addr: config.listen_addr.to_string(),
            source,
        })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ControllerError::Listen {
                addr: config.listen_addr.to_string(),
                source,
            })?;

        let dir = config.data_dir.clone();
        let segment_bytes = config.raft.segment_bytes;
        let (log_store, sm) =
            tokio::task::spawn_blocking(move || crate::store::open(&dir, segment_bytes))
                .await
                .map_err(|e| ControllerError::Raft(format!("opening storage: {e}")))??;
        let pristine = log_store.is_pristine();
        let log_store: LogStore = log_store;

        let network = NetworkFactory {
            node_id: config.node_id,
            peers: Arc::new(Peers::new(config.tls.as_ref().map(|t| t.client.clone()))),
        };
        let raft = Raft::new(config.node_id, raft_config, network, log_store, sm.clone())
            .await
            .map_err(|e| ControllerError::Raft(e.to_string()))?;

        let voters: BTreeMap<NodeId, String> = config.voters.iter().cloned().collect();
        let node = Arc::new(Node {
            id: config.node_id,
            duties: Mutex::new(Duties::new(DutySettings {
                session_timeout: config.session_timeout,
                rebalance_delay: config.rebalance_delay,
            })),
            config,
            raft,
            sm,
            clock: options.clock,
            ready_term: Mutex::new(None),
            ready_lock: tokio::sync::Mutex::new(()),
            assign_lock: tokio::sync::Mutex::new(()),
            voters,
            stop: CancellationToken::new(),
        });

        let tasks = TaskTracker::new();
        tasks.spawn(serve(
            listener,
            node.clone(),
            node.stop.clone(),
            tasks.clone(),
            node.config.tls.as_ref().map(|t| t.server.clone()),
        ));
        tasks.spawn(duty_loop(node.clone()));

        let lowest = node.voters.keys().next().copied();
        if pristine && lowest == Some(node.id) {
            let members: BTreeMap<NodeId, BasicNode> = node
                .voters
                .iter()
                .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
                .collect();
            match node.raft.initialize(members).await {
                Ok(()) => tracing::info!(node = node.id, "initialised the controller quorum"),
                // Already initialised by an earlier run that crashed before writing its
                // vote, or by another voter: nothing to do.
                Err(RaftError::APIError(e)) => {
                    tracing::info!(node = node.id, error = %e, "not initialising the quorum")
                }
                Err(RaftError::Fatal(e)) => return Err(ControllerError::Raft(e.to_string())),
            }
        }
        Ok(Controller {
            node,
            tasks,
            local_addr,
        })
    }

    pub fn node_id(&self) -> NodeId {
        self.node.id
    }

    /// The address this voter listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A client for this controller's quorum (every voter's address, this one first).
    pub fn client(&self) -> ControllerClient {
        let mut voters = vec![self.node.voters[&self.node.id].clone()];
        voters.extend(
            self.node
                .voters
                .iter()
                .filter(|(id, _)| **id != self.node.id)
                .map(|(_, a)| a.clone()),
        );
        ControllerClient::with_config(ClientConfig {
            voters,
            ..ClientConfig::default()
        })
    }

    /// The metadata as applied on this voter (it may trail the leader's).
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.node.sm.metadata()
    }

    /// The raft leader as this voter knows it.
    pub fn leader(&self) -> Option<NodeId> {
        self.node.raft.metrics().borrow().current_leader
    }

    pub fn is_leader(&self) -> bool {
        self.node.leader_term().is_ok()
    }

    /// Openraft's metrics of this voter.
    pub fn raft_metrics(&self) -> RaftMetrics<NodeId, BasicNode> {
        self.node.raft.metrics().borrow().clone()
    }

    /// Waits until this voter knows a leader, for at most `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, ControllerError> {
        let mut rx = self.node.raft.metrics();
        let wait = rx.wait_for(|m| m.current_leader.is_some());
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(m)) => Ok(m.current_leader.expect("waited for Some")),
            Ok(Err(_)) => Err(ControllerError::Unavailable {
                reason: "the raft node stopped".into(),
            }),
            Err(_) => Err(ControllerError::TimedOut {
                after: timeout,
                last_error: None,
            }),
        }
    }

    /// Waits until this voter has applied metadata of at least `version`.
    pub async fn wait_for_version(
        &self,
        version: u64,
        timeout: Duration,
    ) -> Result<Arc<ClusterMetadata>, ControllerError> {
        let mut rx = self.node.sm.subscribe();
        match tokio::time::timeout(timeout, rx.wait_for(|v| *v >= version)).await {
            Ok(Ok(_)) => Ok(self.node.sm.metadata()),
            Ok(Err(_)) => Err(ControllerError::Unavailable {
                reason: "the state machine stopped".into(),
            }),
            Err(_) => Err(ControllerError::TimedOut {
                after: timeout,
                last_error: None,
            }),
        }
    }

    /// Runs the leader's duties once now (the tick loop runs them every `tick` anyway).
    pub async fn run_duties(&self) -> Result<(), ControllerError> {
        self.node.run_duties().await.map_err(ControllerError::from)
    }

    /// Stops serving, stops the duties and shuts the raft node down.
    pub async fn shutdown(self) -> Result<(), ControllerError> {
        self.node.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        self.node
            .raft
            .shutdown()
            .await
            .map_err(|e| ControllerError::Raft(format!("raft shutdown: {e}")))
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.node.stop.cancel();
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("voters", &self.voters)
            .field("sm", &self.sm)
            .finish_non_exhaustive()
    }
}

async fn duty_loop(node: Arc<Node>) {
    let mut tick = tokio::time::interval(node.config.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = node.stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = node.run_duties().await {
            tracing::debug!(node = node.id, error = ?e, "controller duties");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    fn not_leader(&self, m: &RaftMetrics<NodeId, BasicNode>) -> WireError {
        let leader_addr = m.current_leader.and_then(|l| {
            m.membership_config
                .membership()
                .get_node(&l)
                .map(|n| n.addr.clone())
                .or_else(|| self.voters.get(&l).cloned())
        });
        WireError::NotLeader {
            node: self.id,
            leader: m.current_leader,
            leader_addr,
        }
    }

    /// This node's term if it is the leader.
    fn leader_term(&self) -> Result<u64, WireError> {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        if m.state == ServerState::Leader && m.current_leader == Some(self.id) {
            Ok(m.current_term)
        } else {
            Err(self.not_leader(&m))
        }
    }

    /// Makes sure this node is the leader and has set up for its term: its state machine
    /// has applied everything committed before (so assignments and liveness start from
    /// the whole state), the cluster id is set, and every broker's session starts now.
    async fn ensure_ready(&self) -> Result<(), WireError> {
        let term = self.leader_term()?;
        if *lock(&self.ready_term) == Some(term) {
            return Ok(());
        }
        let _g = self.ready_lock.lock().await;
        if *lock(&self.ready_term) == Some(term) {
            return Ok(());
        }
        let caught_up =
            tokio::time::timeout(self.config.request_timeout, self.raft.ensure_linearizable())
                .await;
        match caught_up {
            Ok(Ok(_)) => {}
            Ok(Err(RaftError::APIError(e))) => {
                return Err(match e {
                    CheckIsLeaderError::ForwardToLeader(f) => WireError::NotLeader {
                        node: self.id,
                        leader: f.leader_id,
                        leader_addr: f.leader_node.map(|n| n.addr),
                    },
                    e => WireError::Unavailable {
                        reason: e.to_string(),
                    },
                });
            }
            Ok(Err(RaftError::Fatal(e))) => {
                return Err(WireError::Unavailable {
                    reason: format!("raft stopped: {e}"),
                });
            }
            Err(_) => {
                return Err(WireError::Unavailable {
                    reason: "the new leader did not catch up in time".into(),
                });
            }
        }
        if self.sm.metadata().cluster_id.is_empty() {
            let cluster_id = self
                .config
                .initial_cluster_id
                .clone()
                .unwrap_or_else(new_cluster_id);
            self.propose(Command::InitCluster { cluster_id }).await?;
        }
        lock(&self.duties).became_leader(self.clock.now(), &self.sm.metadata());
        *lock(&self.ready_term) = Some(term);
        tracing::info!(node = self.id, term, "controller leader ready");
        Ok(())
    }

    /// Proposes a command and waits for it to be applied here.
    async fn propose(&self, cmd: Command) -> Result<CommandOutput, WireError> {
        let write = self.raft.client_write(cmd);
        match tokio::time::timeout(self.config.request_timeout, write).await {
            Ok(Ok(resp)) => resp.data.map_err(WireError::Rejected),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(WireError::NotLeader {
                    node: self.id,
                    leader: f.leader_id,
                    leader_addr: f.leader_node.map(|n| n.addr),
                })
            }
            Ok(Err(RaftError::APIError(e))) => Err(WireError::Unavailable {
                reason: e.to_string(),
            }),
            Ok(Err(RaftError::Fatal(e))) => Err(WireError::Unavailable {
                reason: format!("raft stopped: {e}"),
            }),
            Err(_) => Err(WireError::Unavailable {
                reason: format!(
                    "not committed within {:?} (no quorum?)",
                    self.config.request_timeout
                ),
            }),
        }
    }

    async fn run_duties(&self) -> Result<(), WireError> {
        if self.leader_term().is_err() {
            *lock(&self.ready_term) = None;
            return Ok(());
        }
        self.ensure_ready().await?;
        let commands = {
            let meta = self.sm.metadata();
            lock(&self.duties).tick(self.clock.now(), &meta)
        };
        for cmd in commands {
            tracing::info!(node = self.id, command = ?cmd, "controller duty");
            let fencing = matches!(cmd, Command::FenceBroker { .. });
            match self.propose(cmd).await {
                Ok(_) if fencing => {
                    metrics::counter!("strata_controller_broker_fencings_total").increment(1)
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(node = self.id, error = ?e, "controller duty failed"),
            }
        }
        Ok(())
    }

    fn default_replication_factor(&self, meta: &ClusterMetadata) -> i32 {
        match self.config.default_replication_factor {
            Some(rf) => i32::from(rf),
            None => i32::try_from(meta.live_brokers().len().clamp(1, 3)).unwrap_or(1),
        }
    }

    async fn create_topic(
        &self,
        req: NewTopicRequest,
        restore: bool,
    ) -> Result<ClientReply, WireError> {
        validate_topic_name(&req.name)?;
        validate_configs(&req.configs)?;
        let _g = self.assign_lock.lock().await;
        let meta = self.sm.metadata();
        if let Some(t) = meta.topic(&req.name) {
            if t.id == req.id {
                return Ok(ClientReply::Topic(t.clone()));
            }
            return Err(Rejection::TopicAlreadyExists { name: req.name }.into());
        }
        let assignment = match req.assignment {
            // Validated with the command (brokers registered, none twice, one replication
            // factor).
            Some(a) => a,
            None => {
                let rf = match req.replication_factor {
                    -1 => self.default_replication_factor(&meta),
                    rf => i32::from(rf),
                };
                assign_replicas(&meta, req.partitions, rf, 0)?
            }
        };
        let topic = NewTopic {
            id: req.id,
            name: req.name,
            configs: req.configs,
            assignment,
            storage_cluster_id: req.storage_cluster_id,
            initial_leader_epoch: if restore { req.initial_leader_epoch } else { 0 },
        };
        let cmd = if restore {
            Command::RestoreTopic(topic)
        } else {
            Command::CreateTopic(topic)
        };
        self.propose(cmd).await.and_then(topic_reply)
    }

    async fn create_partitions(
        &self,
        name: String,
        count: i32,
        manual: Option<Vec<Vec<crate::BrokerId>>>,
    ) -> Result<ClientReply, WireError> {
        let _g = self.assign_lock.lock().await;
        let meta = self.sm.metadata();
        let t = meta
            .topic(&name)
            .ok_or_else(|| Rejection::UnknownTopic { name: name.clone() })?;
        let current = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
        if count <= current {
            return Err(Rejection::InvalidPartitions {
                count,
                reason: format!("topic '{name}' has {current} partitions; the count can only grow"),
            }
            .into());
        }
        let rf = t
            .partitions
            .first()
            .map(|p| i32::try_from(p.replicas.len()).unwrap_or(1))
            .unwrap_or(1);
        let assignment = match manual {
            Some(a) => {
                if let Some((i, r)) = a
                    .iter()
                    .enumerate()
                    .find(|(_, r)| i32::try_from(r.len()).ok() != Some(rf))
                {
                    return Err(Rejection::InvalidReplicaAssignment {
                        reason: format!(
                            "new partition {} has {} replicas; the topic's partitions have {rf}",
                            current as usize + i,
                            r.len()
                        ),
                    }
                    .into());
                }
                a
            }
            None => assign_replicas(&meta, count - current, rf, current)?,
        };
        self.propose(Command::CreatePartitions {
            name,
            count,
            assignment,
        })
        .await
        .and_then(topic_reply)
    }

    async fn heartbeat(&self, broker_id: i32, broker_epoch: i64) -> Result<ClientReply, WireError> {
        let action = {
            let meta = self.sm.metadata();
            lock(&self.duties).heartbeat(self.clock.now(), &meta, broker_id, broker_epoch)?
        };
        let mut fenced = false;
        if let HeartbeatAction::Unfence { epoch } = action {
            match self
                .propose(Command::UnfenceBroker {
                    broker: broker_id,
                    epoch,
                })
                .await
            {
                Ok(_) => {}
                Err(WireError::Rejected(r)) => return Err(WireError::Rejected(r)),
                Err(e) => {
                    tracing::debug!(broker = broker_id, error = ?e, "unfencing failed");
                    fenced = true;
                }
            }
        }
        Ok(ClientReply::Heartbeat(HeartbeatReply {
            fenced,
            metadata_version: self.sm.metadata().version,
        }))
    }

    async fn long_poll(
        &self,
        since: u64,
        wait: Duration,
        deltas: bool,
    ) -> Result<ClientReply, WireError> {
        let mut rx = self.sm.subscribe();
        let changed = tokio::select! {
            _ = self.stop.cancelled() => {
                return Err(WireError::Unavailable { reason: "shutting down".into() });
            }
            r = tokio::time::timeout(wait.min(MAX_LONG_POLL), rx.wait_for(|v| *v > since)) => {
                matches!(r, Ok(Ok(_)))
            }
        };
        if !changed {
            return Ok(ClientReply::Metadata(None));
        }
        let leader = self.raft.metrics().borrow().current_leader;
        let (meta, commands) = self.sm.metadata_since(since);
        // Version 0 asks for the whole metadata (a broker starting, or one that could
        // not apply a delta).
        if deltas
            && since > 0
            && let Some(commands) = commands
        {
            metrics::counter!("strata_controller_metadata_replies_total", "kind" => "delta")
                .increment(1);
            return Ok(ClientReply::MetadataDelta(Box::new(MetadataDelta {
                from_version: since,
                to_version: meta.version,
                controller_leader: leader,
                commands,
            })));
        }
        metrics::counter!("strata_controller_metadata_replies_total", "kind" => "full")
            .increment(1);
        let mut meta = (*meta).clone();
        meta.controller_leader = leader;
        Ok(ClientReply::Metadata(Some(Box::new(meta))))
    }

    async fn handle_client(&self, req: ClientRequest) -> Result<ClientReply, WireError> {
        if let ClientRequest::Metadata {
            since_version,
            wait_ms,
            deltas,
        } = req
        {
            // Served by the leader only: a follower cut off from the quorum would serve
            // stale metadata for as long as it stays cut off.
            self.leader_term()?;
            return self
                .long_poll(since_version, Duration::from_millis(wait_ms), deltas)
                .await;
        }
        self.ensure_ready().await?;
        match req {
            ClientRequest::RegisterBroker(BrokerRegistration {
                broker_id,
                host,
                port,
                rack,
                listeners,
            }) => {
                if host.is_empty() || listeners.iter().any(|e| e.host.is_empty()) {
                    return Err(Rejection::InvalidRequest {
                        reason: "the broker's host is empty".into(),
                    }
                    .into());
                }
                let out = self
                    .propose(Command::RegisterBroker {
                        broker: broker_id,
                        host,
                        port,
                        rack,
                        listeners,
                    })
                    .await?;
                match out {
                    CommandOutput::Broker(b) => {
                        lock(&self.duties).registered(self.clock.now(), b.id, b.epoch);
                        Ok(ClientReply::Broker(b))
                    }
                    other => Err(unexpected(other)),
                }
            }
            ClientRequest::Heartbeat {
                broker_id,
                broker_epoch,
            } => self.heartbeat(broker_id, broker_epoch).await,
            ClientRequest::CreateTopic(t) => self.create_topic(t, false).await,
            ClientRequest::RestoreTopic(t) => self.create_topic(t, true).await,
            ClientRequest::DeleteTopic { name } => self
                .propose(Command::DeleteTopic { name })
                .await
                .and_then(topic_reply),
            ClientRequest::CreatePartitions {
                name,
                count,
                assignment,
            } => self.create_partitions(name, count, assignment).await,
            ClientRequest::SetConfigs { name, configs } => {
                validate_configs(&configs)?;
                self.propose(Command::SetTopicConfigs { name, configs })
                    .await
                    .and_then(topic_reply)
            }
            ClientRequest::AlterPartition(r) => {
                match self.propose(Command::AlterPartition(r)).await? {
                    CommandOutput::Partition(p) => Ok(ClientReply::Partition(p)),
                    other => Err(unexpected(other)),
                }
            }
            ClientRequest::ElectLeaders {
                election,
                partitions,
            } => {
                let partitions = partitions.unwrap_or_else(|| {
                    self.sm
                        .metadata()
                        .partitions()
                        .map(|(t, p)| (t.name.clone(), p.partition))
                        .collect()
                });
                match self
                    .propose(Command::ElectLeaders {
                        election,
                        partitions,
                    })
                    .await?
                {
                    CommandOutput::Elections(e) => Ok(ClientReply::Elections(e)),
                    other => Err(unexpected(other)),
                }
            }
            ClientRequest::AllocateProducerIds { count } => {
                match self.propose(Command::AllocateProducerIds { count }).await? {
                    CommandOutput::ProducerIds { first, .. } => {
                        Ok(ClientReply::ProducerIds { first })
                    }
                    other => Err(unexpected(other)),
                }
            }
            ClientRequest::AlterSecurity(change) => {
                match self.propose(Command::AlterSecurity(change)).await? {
                    CommandOutput::Security(o) => Ok(ClientReply::Security(o)),
                    other => Err(unexpected(other)),
                }
            }
            ClientRequest::AlterReassignments(reassignments) => {
                match self
                    .propose(Command::AlterReassignments { reassignments })
                    .await?
                {
                    CommandOutput::Reassignments(o) => Ok(ClientReply::Reassignments(o)),
                    other => Err(unexpected(other)),
                }
            }
            ClientRequest::UnregisterBroker { broker } => {
                self.propose(Command::UnregisterBroker { broker }).await?;
                Ok(ClientReply::Done)
            }
            ClientRequest::SetBrokerConfigs { resource, configs } => {
                crate::state::validate_broker_configs(&resource, &configs)?;
                self.propose(Command::SetBrokerConfigs { resource, configs })
                    .await?;
                Ok(ClientReply::Done)
            }
            ClientRequest::Metadata { .. } => unreachable!("answered above"),
        }
    }
}

fn topic_reply(out: CommandOutput) -> Result<ClientReply, WireError> {
    match out {
        CommandOutput::Topic(t) => Ok(ClientReply::Topic(t)),
        other => Err(unexpected(other)),
    }
}

fn unexpected(out: CommandOutput) -> WireError {
    WireError::Unavailable {
        reason: format!("unexpected command output {out:?}"),
    }
}

/// Kafka cluster ids are 22-character URL-safe base64 UUIDs; any stable string works.
fn new_cluster_id() -> String {
    let id = TopicId::random().0;
    id.simple().to_string()[..22].to_string()
}

impl RpcHandler for Node {
    async fn handle(&self, req: RpcRequest) -> RpcResponse {
        match req {
            RpcRequest::AppendEntries(r) => {
                RpcResponse::AppendEntries(self.raft.append_entries(r).await)
            }
            RpcRequest::Vote(r) => RpcResponse::Vote(self.raft.vote(r).await),
            RpcRequest::InstallSnapshot(r) => {
                RpcResponse::InstallSnapshot(self.raft.install_snapshot(r).await)
            }
            RpcRequest::Client(c) => RpcResponse::Client(self.handle_client(c).await),
        }
    }
}
