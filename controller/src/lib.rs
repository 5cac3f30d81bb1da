//! Strata's metadata quorum: an openraft cluster of controller voters that keeps the
//! cluster's metadata (brokers, topics, partition assignments, leaders, ISRs, epochs,
//! credentials, ACLs, quotas, dynamic broker configs). It owns that metadata: brokers
//! and tools change it only through its client, and every voter applies the same
//! commands in log order, so every voter holds the same state.
//!
//! * [`state`]: the replicated state ([`ClusterMetadata`]) and the pure commands that change it.
//! * [`security`]: the replicated security metadata: SCRAM credentials, ACLs and quotas.
//! * [`assign`]: replica assignment for new topics and partitions (the leader computes it).
//! * [`duties`]: what only the raft leader does, sans-IO: broker liveness and rebalancing.
//! * [`clock`]: the time the leader's duties read, so tests drive it without sleeping.
//! * [`store`]: the durable raft log, vote and state-machine snapshots in a directory.
//! * [`net`]: length-prefixed JSON frames over TCP, with per-call timeouts and pooling.
//! * [`rpc`]: the messages voters and clients exchange over [`net`].
//! * [`types`]: openraft's type configuration, and the voter and broker id types.
//! * [`config`]: a voter's configuration ([`ControllerConfig`]) and its raft tuning.
//! * [`controller`]: one voter ([`Controller`]): raft node, RPC server, leader duties.
//! * [`client`]: [`ControllerClient`]: follows leader hints, retries, long-polls metadata.
//! * [`error`]: [`Rejection`] and [`ControllerError`], mapped to Kafka codes in one place.
//!
//! # Running N voters
//!
//! Every voter gets the same voter list and its own id, address and directory:
//!
//! ```no_run
//! # async fn run() -> Result<(), strata_controller::ControllerError> {
//! use strata_controller::{Controller, ControllerConfig};
//! let voters = ControllerConfig::parse_voters("1@127.0.0.1:9093,2@127.0.0.2:9093,3@127.0.0.3:9093")?;
//! let controller = Controller::start(ControllerConfig {
//!     node_id: 2,
//!     listen_addr: "127.0.0.2:9093".parse().expect("an address"),
//!     voters,
//!     data_dir: "strata-data-2/controller".into(),
//!     ..ControllerConfig::default()
//! })
//! .await?;
//! let client = controller.client(); // or ControllerClient::new(["127.0.0.1:9093", ...])
//! # Ok(()) }
//! ```
//!
//! The voter with the lowest id initialises the quorum the first time (when its
//! directory is empty); the others wait for it. A quorum of N voters survives
//! (N - 1) / 2 failures: use 3 or 5. With one voter (the embedded default,
//! [`ControllerConfig::default`]) the controller is its own quorum and starts in well
//! under a second.

pub mod assign;
pub mod client;
pub mod clock;
pub mod config;
pub mod controller;
pub mod duties;
pub mod error;
pub mod net;
pub mod rpc;
pub mod security;
pub mod state;
pub mod store;
pub mod types;

pub use client::{ClientConfig, ControllerApi, ControllerClient};
pub use clock::{Clock, ManualClock, TokioClock};
pub use config::{ConfigError, ControllerConfig, RaftTuning};
pub use controller::{Controller, StartOptions};
pub use error::{ControllerError, Rejection};
pub use net::{ClientTls, RpcTls};
pub use rpc::{BrokerRegistration, HeartbeatReply, NewTopicRequest};
pub use security::{
    QuotaAlteration, ScramCredentialRecord, ScramDeletion, ScramUpsertion, SecurityChange,
    SecurityMetadata, SecurityOutcome, UserOutcome,
};
pub use state::{
    AlterPartitionRequest, BrokerRecord, ClusterMetadata, Command, CommandOutput,
    DYNAMIC_BROKER_CONFIGS, DeltaError, ElectionError, ElectionOutcome, ElectionType, Endpoint,
    MetadataDelta, MetadataUpdate, NO_LEADER, PartitionRecord, Reassignment, ReassignmentOutcome,
    TopicRecord, validate_broker_configs, validate_topic_name,
};
pub use types::{BrokerId, NodeId, TypeConfig};
