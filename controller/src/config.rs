//! The controller's configuration.
//!
//! The defaults make a single-voter controller on 127.0.0.1:9093 with data under
//! ./strata-data/controller: what `strata serve` with no flags embeds.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::types::NodeId;

/// Why a configuration is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("invalid controller voters '{input}': {reason}")]
    InvalidVoters { input: String, reason: String },
    #[error("invalid controller setting {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Raft timing and log-compaction settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftTuning {
    /// How often the leader sends heartbeats (openraft's heartbeat_interval).
    pub heartbeat_interval: Duration,
    /// A follower that hears no leader for a random time in this range campaigns
    /// (Kafka's controller.quorum.election.timeout.ms is 1 s).
    pub election_timeout_min: Duration,
    pub election_timeout_max: Duration,
    /// Take a snapshot after this many applied entries since the last one.
    pub snapshot_after_entries: u64,
    /// Log entries kept behind a snapshot, so a briefly absent voter catches up from the
    /// log rather than by snapshot.
    pub keep_after_snapshot: u64,
    /// Start a new log segment file past this size.
    pub segment_bytes: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_interval: Duration::from_millis(100),
            // A dead leader is replaced in ~1-2 s (a candidate's first try may be
            // refused while the others' leader lease runs); heartbeats every 100 ms
            // leave six missed before anyone campaigns, enough on a loaded machine.
            election_timeout_min: Duration::from_millis(600),
            election_timeout_max: Duration::from_millis(1200),
            snapshot_after_entries: 1000,
            keep_after_snapshot: 1000,
            segment_bytes: crate::store::log::DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// One controller voter's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// This voter's id (`--node-id`); must be one of `voters`.
    pub node_id: NodeId,
    /// Where this voter listens for raft and client RPCs (`--controller-addr`).
    pub listen_addr: SocketAddr,
    /// Every voter's id and address (`--controller-voters 1@HOST:PORT,...`). The lowest
    /// id initialises the cluster when all voters are new.
    pub voters: Vec<(NodeId, String)>,
    /// Where the raft log, vote and snapshots live.
    pub data_dir: PathBuf,
    /// Fence a broker that has not heartbeated for this long (Kafka's
    /// broker.session.timeout.ms, 9 s).
    pub session_timeout: Duration,
    /// How often the leader checks liveness and balance.
    pub tick: Duration,
    /// Move leadership back to a partition's first replica once it has been in the ISR
    /// this long (Kafka's auto.leader.rebalance.enable); `None` turns it off.
    pub rebalance_delay: Option<Duration>,
    /// Upper bound for one proposal to be committed and applied before the server gives
    /// up on it (the client sees Unavailable and retries).
    pub request_timeout: Duration,
    /// The replication factor of a topic created with -1 (Kafka's
    /// default.replication.factor). `None`: min(3, unfenced brokers).
    pub default_replication_factor: Option<i16>,
    /// The cluster id to bootstrap with (for example the id a single-node broker already
    /// stored objects under); a new random one when `None`. Ignored once bootstrapped.
    pub initial_cluster_id: Option<String>,
    pub raft: RaftTuning,
    /// Mutual TLS on the RPC port and on this voter's calls to the others.
    pub tls: Option<crate::net::RpcTls>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        let addr: SocketAddr = ([127, 0, 0, 1], 9093).into();
        ControllerConfig {
            node_id: 1,
            listen_addr: addr,
            voters: vec![(1, addr.to_string())],
            data_dir: PathBuf::from("strata-data/controller"),
            session_timeout: Duration::from_secs(9),
            tick: Duration::from_millis(250),
            rebalance_delay: Some(Duration::from_secs(10)),
            request_timeout: Duration::from_secs(10),
            default_replication_factor: None,
            initial_cluster_id: None,
            raft: RaftTuning::default(),
            tls: None,
        }
    }
}

impl ControllerConfig {
    /// A single voter listening on `listen_addr`, the only member of its quorum.
    pub fn single_node(node_id: NodeId, listen_addr: SocketAddr, data_dir: PathBuf) -> Self {
        ControllerConfig {
            node_id,
            listen_addr,
            voters: vec![(node_id, listen_addr.to_string())],
            data_dir,
            ..ControllerConfig::default()
        }
    }

    /// Parses `--controller-voters`: `ID@HOST:PORT` separated by commas.
    pub fn parse_voters(input: &str) -> Result<Vec<(NodeId, String)>, ConfigError> {
        let bad = |reason: String| ConfigError::InvalidVoters {
            input: input.to_string(),
            reason,
        };
        let mut out = Vec::new();
        for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, addr) = part
                .split_once('@')
                .ok_or_else(|| bad(format!("'{part}' is not ID@HOST:PORT")))?;
            let id: NodeId = id
                .trim()
                .parse()
                .map_err(|_| bad(format!("'{id}' is not a node id")))?;
            let addr = addr.trim();
            let port_ok = addr
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !port_ok {
                return Err(bad(format!("'{addr}' is not HOST:PORT")));
            }
            out.push((id, addr.to_string()));
        }
        if out.is_empty() {
            return Err(bad("no voters".into()));
        }
        Ok(out)
    }

    /// Checks the settings together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_string(),
            })
        };
        let ids: BTreeSet<NodeId> = self.voters.iter().map(|(id, _)| *id).collect();
        if self.voters.is_empty() {
            return invalid("voters", "at least one voter is needed");
        }
        if ids.len() != self.voters.len() {
            return invalid("voters", "voter ids must be distinct");
        }
        if !ids.contains(&self.node_id) {
            return invalid("node_id", "this node is not one of the voters");
        }
        let r = &self.raft;
        if r.election_timeout_min.is_zero() || r.election_timeout_min >= r.election_timeout_max {
            return invalid(
                "raft.election_timeout",
                "need 0 < election_timeout_min < election_timeout_max",
            );
        }
        if r.heartbeat_interval.is_zero() || r.heartbeat_interval >= r.election_timeout_min {
            return invalid(
                "raft.heartbeat_interval",
                "need 0 < heartbeat_interval < election_timeout_min",
            );
        }
        if self.tick.is_zero() {
            return invalid("tick", "must be positive");
        }
        if self.session_timeout <= self.tick {
            return invalid("session_timeout", "must be longer than the tick");
        }
        if self.default_replication_factor.is_some_and(|rf| rf < 1) {
            return invalid("default_replication_factor", "must be at least 1");
        }
        Ok(())
    }

    /// Openraft's configuration for these settings.
    pub(crate) fn openraft_config(&self) -> Result<openraft::Config, ConfigError> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let c = openraft::Config {
            cluster_name: "strata-controller".into(),
            heartbeat_interval: ms(self.raft.heartbeat_interval),
            election_timeout_min: ms(self.raft.election_timeout_min),
            election_timeout_max: ms(self.raft.election_timeout_max),
            // A snapshot chunk must arrive within this; the state is small.
            install_snapshot_timeout: ms(self.raft.election_timeout_max).max(1000),
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(
                self.raft.snapshot_after_entries.max(1),
            ),
            max_in_snapshot_log_to_keep: self.raft.keep_after_snapshot,
            ..Default::default()
        };
        c.validate().map_err(|e| ConfigError::Invalid {
            field: "raft",
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_parse_and_validate() {
        let v = ControllerConfig::parse_voters("1@127.0.0.1:9093, 2@host-b:9093").unwrap();
        assert_eq!(
            v,
            vec![(1, "127.0.0.1:9093".into()), (2, "host-b:9093".into())]
        );
        for bad in ["", "1", "x@h:1", "1@h", "1@:9"] {
            assert!(ControllerConfig::parse_voters(bad).is_err(), "{bad}");
        }
        let mut c = ControllerConfig::default();
        c.validate().unwrap();
        c.openraft_config().unwrap();
        c.node_id = 7;
        assert!(c.validate().is_err());
        let mut c = ControllerConfig::default();
        c.voters.push((1, "x:1".into()));
        assert!(c.validate().is_err());
        let mut c = ControllerConfig::default();
        c.raft.heartbeat_interval = c.raft.election_timeout_min;
        assert!(c.validate().is_err());
    }
}
