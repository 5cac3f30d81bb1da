//! Strata's broker: the Kafka listener, the partitions this broker hosts, and the Kafka
//! APIs over them.
//!
//! * [`server`]: the TCP listener, framing, and in-order responses per connection.
//! * [`api`]: one module per group of Kafka APIs (produce, fetch, list offsets,
//!   metadata, topic administration, cluster).
//! * [`broker`]: topics and partitions, kept in line with metadata.
//! * [`metadata`]: the [`MetadataStore`] trait the broker changes metadata through, and
//!   the local-file store the single-node broker uses.

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
