//! Strata's broker (strata-broker): the Kafka listener, the partitions this broker hosts,
//! and the Kafka APIs over them. It is the tokio side of the hot path; the state machines
//! it drives are sans-IO crates (strata-replica, strata-group, strata-txn, strata-auth,
//! strata-authz, strata-quota), and the log is strata-log.
//!
//! [`Broker`] is one object per process: a set of `Arc`s, one per service, each with its
//! own state and lock, each using only services below it (the diagram is in [`broker`]).
//! Handlers in [`api`] are given the `Broker` and reach a service through its fields;
//! only [`server`] calls into [`api`]. A produce goes handler → [`partition::Partition`]
//! → `strata_log::Log`, never through the tier. Object storage is reached only through
//! strata-tier's `TieredLog` (a partition's reads) and its one `Tiering` handle, never
//! the cache, the store or Parquet directly. docs/overview.md walks a produce and a remote fetch through these modules.
//!
//! The services:
//!
//! * [`lifecycle`]: [`lifecycle::Lifecycle`], registration with the controller, the
//!   broker epoch, heartbeats.
//! * [`metadata`]: [`MetadataCache`], the cluster metadata as this broker last fetched
//!   it (long poll, deltas), and the controller client.
//! * [`replicas`]: [`replicas::ReplicaManager`], the partitions hosted here kept in line
//!   with metadata (reconcile, open, offline), checkpoints and the clean stop,
//!   AlterPartition forwarding, housekeeping, attaching remote tiers.
//! * [`partition`]: [`partition::Partition`], one hosted replica: its local log (written
//!   here), its `TieredLog` (read), its replica state machine, the acks=all wait.
//! * [`security`]: [`security::Security`], SASL credentials, the ACL authorizer cached
//!   per metadata version, client quotas.
//! * [`fetch_sessions`]: fetch sessions (KIP-227).
//! * [`throttle`]: replication throttles (KIP-73).
//! * [`groups`]: [`groups::Groups`], the consumer-group coordinator service
//!   (`__consumer_offsets`) over strata-group: loading, commits, expiry, lag.
//! * [`txns`]: [`txns::Txns`], the transaction coordinator service
//!   (`__transaction_state`) over strata-txn, markers and producer ids.
//! * [`coordinator`]: what `groups` and `txns` share: the load plan, the log reader,
//!   `append_and_wait`.
//! * [`tiering`]: [`tiering::TierScheduler`], which hands the hosted topics to
//!   strata-tier's `Tiering` every round and answers `/v1/tier/status` and the table
//!   admin calls for them.
//!
//! The rest:
//!
//! * [`server`]: the TCP listeners, framing, in-order responses per connection, and
//!   [`LocalLink`] (this broker as an in-process `strata_client::LocalBroker`).
//! * [`api`]: one handler module per group of Kafka APIs, and `dispatch`.
//! * [`broker`]: [`Broker`]: `open`, `load`, `start` (background duties), `shutdown`.
//! * [`replication`]: applying metadata as it changes, leader ticks, and the replica
//!   fetchers (one per leader, with fetch sessions).
//! * [`cleaner`]: the log cleaner threads: which compacted partition to clean next.
//! * [`checkpoints`]: the one `partition-checkpoints` file and the clean-shutdown marker.
//! * [`config`]: [`BrokerConfig`], what `strata serve` hands the broker.
//! * [`error`]: [`ApiError`] and its Kafka error codes.
//! * [`listener`]: listeners named by security protocol (`SASL_SSL://host:port`).
//! * [`tls`]: TLS for the listeners, reloaded without a restart.
//! * [`audit`]: a log line and a counter per authentication failure and authorization
//!   denial.
//! * [`limits`]: what one client may make the broker hold (connections, request bytes,
//!   partitions).
//! * [`resources`]: the open-file limit.
//! * [`blocking`]: work that may wait on the device (an fsync, a roll), kept off the
//!   async worker's other tasks.
//! * [`waker`]: one waker per long-polling fetch, however many partitions it reads.
//! * [`traffic`]: per-partition produce and fetch rates and hot keys.
//! * [`exposition`]: /metrics series rendered from state (group lag, partition traffic).
//! * `kafka_client`: strata-client, re-exported.

pub mod api;
pub mod audit;
pub mod blocking;
pub mod broker;
pub mod checkpoints;
pub mod cleaner;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod exposition;
pub mod fetch_sessions;
pub mod groups;
pub mod lifecycle;
pub mod limits;
pub mod listener;
pub use strata_client as kafka_client;
pub mod metadata;
pub mod partition;
pub mod replicas;
pub mod replication;
pub mod resources;
pub mod schemas;
pub mod security;
pub mod server;
pub mod throttle;
pub mod tiering;
pub mod tls;
pub mod traffic;
pub mod txns;
pub mod waker;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use error::ApiError;
pub use metadata::MetadataCache;
pub use server::{BoundListener, LocalLink, Server};
