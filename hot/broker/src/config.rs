//! The broker's configuration (the part `strata serve` hands to the broker).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Default for [`BrokerConfig::log_cleaner_io_max_bytes_per_second`]: what keeps a
/// producer's p99 on another topic within 1.5x of idle while the cleaner runs flat out
/// (`benches/compaction.sh`: 1.20x at 16 MiB/s, 1.63x at 32, 2.27x at 64; unthrottled,
/// the cleaner reads about 200 MB/s here). Raise it where compaction must keep up with
/// more.
pub const DEFAULT_CLEANER_IO_BYTES_PER_SECOND: u64 = 16 << 20;

/// Broker settings. `Default` is a complete single-node broker on 127.0.0.1:9092.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// This broker's id (Kafka's node.id).
    pub node_id: i32,
    /// Where partition directories and the metadata file live.
    pub data_dir: PathBuf,
    /// The Kafka listeners (Kafka's listeners and advertised.listeners).
    pub listeners: Vec<crate::listener::ListenerConfig>,
    /// The listener other brokers (replica fetches, transaction markers) and this
    /// broker's own clients use (Kafka's inter.broker.listener.name).
    pub inter_broker_listener: crate::listener::SecurityProtocol,
    /// TLS client certificates' principals, SASL, authorization.
    pub security: crate::security::SecurityConfig,
    /// How this broker's own connections to other brokers (replica fetches,
    /// transaction markers) authenticate on the inter-broker listener.
    pub inter_broker_client: strata_client::ClientSecurity,
    /// Create a topic when a client asks for metadata of an unknown one (Kafka's
    /// auto.create.topics.enable). On by default, as Kafka's, so a development single node
    /// works with any client as it comes; production setups turn it off (a typo in a
    /// producer's topic name would otherwise create a topic).
    pub auto_create_topics: bool,
    /// Partitions of auto-created topics and of CreateTopics with num_partitions -1.
    pub default_partitions: i32,
    /// Largest request frame accepted (Kafka's socket.request.max.bytes).
    pub max_request_bytes: usize,
    /// Requests a connection may have in flight before the broker stops reading from it.
    pub max_in_flight_per_connection: usize,
    /// Upper bound on a fetch's max_wait_ms.
    pub max_fetch_wait: Duration,
    /// Fetch sessions (KIP-227) the broker keeps at once (Kafka's
    /// max.incremental.fetch.session.cache.slots); 0 turns sessions off.
    pub fetch_session_slots: usize,
    /// Partitions all fetch sessions together may name (each costs ~100 bytes).
    pub fetch_session_partitions: usize,
    /// How often rolls by segment.ms and flushes by flush.ms are checked.
    pub housekeeping_interval: Duration,
    /// How often local retention runs (Kafka's log.retention.check.interval.ms).
    pub retention_check_interval: Duration,
    /// How often recovery points are checkpointed.
    pub checkpoint_interval: Duration,
    /// How partition logs write (and read) their segments.
    pub log_io: strata_log::IoMode,
    /// Per partition, the newest bytes kept in memory in Direct mode (tail reads).
    pub log_tail_cache_bytes: usize,
    /// How long to wait for the controller quorum at start.
    pub controller_timeout: Duration,
    /// How often this broker heartbeats to the controller (its session is 9 s).
    pub heartbeat_interval: Duration,
    /// Partitions of `__consumer_offsets` when a broker first creates it (Kafka's
    /// offsets.topic.num.partitions is 50; fewer suit small clusters, and the count is
    /// fixed once the topic exists, since a group's partition depends on it).
    pub offsets_topic_partitions: i32,
    /// `segment.bytes` of `__consumer_offsets` when a broker first creates it (Kafka's
    /// offsets.topic.segment.bytes): the active segment is never compacted, so this
    /// bounds what a new coordinator replays beyond the live offsets.
    pub offsets_topic_segment_bytes: u64,
    /// Partitions of `__transaction_state` when a broker first creates it (Kafka's
    /// transaction.state.log.num.partitions is 50; as the offsets topic, fewer suit
    /// small clusters, and the count is fixed once the topic exists).
    pub transaction_state_partitions: i32,
    /// The longest transaction.timeout.ms a producer may ask for (Kafka's
    /// transaction.max.timeout.ms): longer gets INVALID_TRANSACTION_TIMEOUT.
    pub transaction_max_timeout: Duration,
    /// A transactional id idle this long is forgotten (Kafka's
    /// transactional.id.expiration.ms).
    pub transactional_id_expiration: Duration,
    /// Committed offsets of a group that has been empty this long are deleted (Kafka's
    /// offsets.retention.minutes, KIP-211); a group with members keeps them.
    pub offsets_retention: Duration,
    /// How often expired offsets are looked for (Kafka's
    /// offsets.retention.check.interval.ms).
    pub offsets_retention_check_interval: Duration,
    /// What one client may make this broker hold.
    pub limits: crate::limits::Limits,
    /// Log cleaner threads (Kafka's log.cleaner.threads); at least one.
    pub log_cleaner_threads: usize,
    /// Memory of the cleaners' offset maps, split between the threads (Kafka's
    /// log.cleaner.dedupe.buffer.size): 24 bytes per key, about 27 MiB per million keys
    /// at the map's 90% fill.
    pub log_cleaner_dedupe_buffer_bytes: usize,
    /// The cleaners' IO cap, bytes read plus written a second, 0 for none (Kafka's
    /// log.cleaner.io.max.bytes.per.second).
    pub log_cleaner_io_max_bytes_per_second: u64,
    /// How long a cleaner thread with nothing to do waits before looking again (Kafka's
    /// log.cleaner.backoff.ms).
    pub log_cleaner_backoff: Duration,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            data_dir: PathBuf::from("strata-data"),
            listeners: vec![crate::listener::ListenerConfig::plaintext(
                SocketAddr::from(([127, 0, 0, 1], 9092)),
            )],
            inter_broker_listener: crate::listener::SecurityProtocol::Plaintext,
            security: crate::security::SecurityConfig::default(),
            inter_broker_client: strata_client::ClientSecurity::default(),
            auto_create_topics: true,
            default_partitions: 1,
            max_request_bytes: 100 * 1024 * 1024,
            max_in_flight_per_connection: 256,
            max_fetch_wait: Duration::from_secs(30),
            fetch_session_slots: 1000,
            fetch_session_partitions: 200_000,
            housekeeping_interval: Duration::from_millis(500),
            retention_check_interval: Duration::from_secs(30),
            checkpoint_interval: Duration::from_secs(60),
            log_io: strata_log::IoMode::Direct,
            log_tail_cache_bytes: strata_log::DEFAULT_TAIL_CACHE_BYTES,
            controller_timeout: Duration::from_secs(60),
            heartbeat_interval: Duration::from_millis(1500),
            offsets_topic_partitions: 16,
            offsets_topic_segment_bytes: 100 << 20,
            transaction_state_partitions: 16,
            transaction_max_timeout: Duration::from_secs(15 * 60),
            transactional_id_expiration: Duration::from_secs(7 * 24 * 3600),
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            offsets_retention_check_interval: Duration::from_secs(600),
            limits: crate::limits::Limits::default(),
            log_cleaner_threads: 1,
            log_cleaner_dedupe_buffer_bytes: 128 << 20,
            log_cleaner_io_max_bytes_per_second: DEFAULT_CLEANER_IO_BYTES_PER_SECOND,
            log_cleaner_backoff: Duration::from_secs(15),
        }
    }
}

impl BrokerConfig {
    /// The log settings of a partition of a topic configured as `topic`.
    pub fn log_config(&self, topic: &strata_proto::TopicConfig) -> strata_log::LogConfig {
        strata_log::LogConfig {
            io_mode: self.log_io,
            tail_cache_bytes: self.log_tail_cache_bytes,
            ..strata_log::LogConfig::from(topic)
        }
    }
}
