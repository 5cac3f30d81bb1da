//! `strata serve`'s flags: each also an environment variable and a --config key.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

// One struct for every layer: clap fills it from the flags and the environment, serde
// reads the --config file into it, and `file::with_file` merges the two (see there).
// Serialized, an unset setting is left out, so that it does not hide the file's value.
#[derive(Args, Serialize, Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServeArgs {
    /// A TOML file with any of these settings (keys are the flag names).
    #[arg(long, env = "STRATA_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Where partitions and metadata live [default: ./strata-data]
    #[arg(long, env = "STRATA_DATA_DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// This broker's id [default: 1]
    #[arg(long, env = "STRATA_NODE_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<i32>,
    /// The PLAINTEXT Kafka listener (the same as --listeners PLAINTEXT://ADDR, and may
    /// be given next to --listeners' others) [default: 127.0.0.1:9092]; port 0 picks a
    /// free port.
    #[arg(long, env = "STRATA_KAFKA_ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_addr: Option<SocketAddr>,
    /// HOST:PORT clients of the PLAINTEXT listener are told to connect to [default: the
    /// listener's address]. Required when --kafka-addr binds 0.0.0.0.
    #[arg(long, env = "STRATA_ADVERTISED_KAFKA_ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertised_kafka_addr: Option<String>,
    /// HTTP address for /metrics, /healthz and the REST gateway [default: 127.0.0.1:8080]
    #[arg(long, env = "STRATA_HTTP_ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_addr: Option<SocketAddr>,
    /// The schema registry's REST address (Confluent's API), or `off`. The default is
    /// served when it is free (a development broker needs no flag, as Redpanda's);
    /// given, it must bind [default: 127.0.0.1:8081]
    #[arg(long, env = "STRATA_SCHEMA_REGISTRY_ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_registry_addr: Option<String>,
    /// The controller quorum's listener [default: 127.0.0.1:9093]
    #[arg(long, env = "STRATA_CONTROLLER_ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_addr: Option<SocketAddr>,
    /// Controller voters as ID@HOST:PORT,... [default: 1@127.0.0.1:9093]
    #[arg(long, env = "STRATA_CONTROLLER_VOTERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_voters: Option<String>,
    /// file://DIR or s3://BUCKET/PREFIX [default: file://<data-dir>/cold]
    #[arg(long, env = "STRATA_OBJECT_STORE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_store: Option<String>,
    /// Create unknown topics when clients ask for them (Kafka's auto.create.topics.enable;
    /// turn it off in production) [default: true]
    #[arg(long, env = "STRATA_AUTO_CREATE_TOPICS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_create_topics: Option<bool>,
    /// Partitions of auto-created topics and of CreateTopics without a count [default: 1]
    #[arg(long, env = "STRATA_DEFAULT_PARTITIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_partitions: Option<i32>,
    /// Committed offsets of a consumer group that has been empty this long (standalone
    /// commits: this long after the commit) are deleted; groups with members keep theirs
    /// (Kafka's offsets.retention.minutes, KIP-211), e.g. 7d [default: 7d]
    #[arg(long, env = "STRATA_OFFSETS_RETENTION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offsets_retention: Option<String>,
    /// How often expired committed offsets are looked for (Kafka's
    /// offsets.retention.check.interval.ms) [default: 10m]
    #[arg(long, env = "STRATA_OFFSETS_RETENTION_CHECK_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offsets_retention_check_interval: Option<String>,
    /// segment.bytes of `__consumer_offsets` when this broker creates it (Kafka's
    /// offsets.topic.segment.bytes); at least 1MiB [default: 100MiB]
    #[arg(long, env = "STRATA_OFFSETS_TOPIC_SEGMENT_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offsets_topic_segment_bytes: Option<String>,
    /// The longest transaction.timeout.ms a transactional producer may ask for (Kafka's
    /// transaction.max.timeout.ms); longer gets INVALID_TRANSACTION_TIMEOUT [default: 15m]
    #[arg(long, env = "STRATA_TRANSACTION_MAX_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_max_timeout: Option<String>,
    /// A transactional id idle this long is forgotten (Kafka's
    /// transactional.id.expiration.ms) [default: 7d]
    #[arg(long, env = "STRATA_TRANSACTIONAL_ID_EXPIRATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactional_id_expiration: Option<String>,
    /// Memory for cached object-store chunks, e.g. 512MiB [default: 512MiB]
    #[arg(long, env = "STRATA_CACHE_MEMORY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_memory: Option<String>,
    /// Local disk for cached object-store chunks in DATA_DIR/cache, 0 for none [default: 4GiB]
    #[arg(long, env = "STRATA_CACHE_DISK")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_disk: Option<String>,
    /// Size of the chunks remote reads fetch and cache, 4MiB to 16MiB [default: 8MiB]
    #[arg(long, env = "STRATA_REMOTE_CHUNK")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_chunk: Option<String>,
    /// Segment uploads in flight at once [default: 2]
    #[arg(long, env = "STRATA_OFFLOAD_CONCURRENCY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload_concurrency: Option<usize>,
    /// Upload rate cap, e.g. 100MiB (per second), 0 for none [default: 0]
    #[arg(long, env = "STRATA_OFFLOAD_RATE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload_rate: Option<String>,
    /// Local bytes of tiered topics beyond which producers are refused while offload is
    /// behind (object store down), 0 for no cap [default: 0]
    #[arg(long, env = "STRATA_LOCAL_DISK_CAP")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_disk_cap: Option<String>,
    /// Age after which objects no manifest names are deleted, e.g. 1h [default: 1h]
    #[arg(long, env = "STRATA_ORPHAN_GRACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphan_grace: Option<String>,
    /// How partition logs write: direct (O_DIRECT, no page cache: less CPU per GB) or
    /// buffered (through the page cache, as Kafka) [default: direct]
    #[arg(long, env = "STRATA_LOG_IO")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_io: Option<String>,
    /// Per partition, at most this many of the newest bytes kept in memory for
    /// direct writes and tail reads in direct mode, e.g. 16MiB [default: 4MiB]
    #[arg(long, env = "STRATA_LOG_TAIL_CACHE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail_cache: Option<String>,
    /// All partitions' tail buffers and the read cache together (appends first: the
    /// read cache gives room back to a new buffer); past it, new buffers are smaller
    /// (down to two 16KiB windows a partition), e.g. 4GiB [default: 1GiB]
    #[arg(long, env = "STRATA_LOG_TAIL_CACHE_TOTAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail_cache_total: Option<String>,
    /// In direct mode, recently read segment bytes kept in memory for every reader of
    /// every partition (a second consumer group, a consumer behind another, reads
    /// memory rather than the device), at most this much of what the tail buffers leave
    /// of --log-tail-cache-total, e.g. 512MiB; off unless given [default: 0]
    #[arg(long, env = "STRATA_LOG_READ_CACHE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_read_cache: Option<String>,
    /// How many segment files the broker keeps open at most, for all partitions
    /// together (least recently used closed first; reopened on demand) [default: half
    /// the open-file limit, at most 1000]
    #[arg(long, env = "STRATA_LOG_OPEN_FILES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_open_files: Option<usize>,
    /// How many fetch sessions (KIP-227: followers and consumers fetch only what
    /// changed) the broker keeps at once; 0 turns them off (Kafka's
    /// max.incremental.fetch.session.cache.slots) [default: 1000]
    #[arg(long, env = "STRATA_FETCH_SESSION_CACHE_SLOTS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fetch_session_cache_slots: Option<usize>,
    /// How often retention runs, local and remote (Kafka's
    /// log.retention.check.interval.ms), e.g. 5m [default: 30s]
    #[arg(long, env = "STRATA_RETENTION_CHECK_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_check_interval: Option<String>,
    /// How often the Parquet files of each parquet.enable topic are committed to its
    /// Iceberg table (`{cluster}/iceberg/{topic}/` in the object store), one snapshot per
    /// topic per interval; 0 turns publishing off [default: 60s]
    #[arg(long, env = "STRATA_ICEBERG_COMMIT_INTERVAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iceberg_commit_interval: Option<String>,
    /// Commit the Iceberg tables to this Iceberg REST catalog (Polaris, Nessie,
    /// Lakekeeper, Gravitino, Glue's REST endpoint), e.g. http://catalog:8181, instead of
    /// the file-system catalog in the object store. The catalog's warehouse must be in
    /// the broker's object store (Strata writes the manifests there) [default: none]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_URI")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iceberg_catalog_uri: Option<String>,
    /// The warehouse to ask the REST catalog for, when it serves several (Polaris: the
    /// catalog name; Lakekeeper: the warehouse name) [default: none]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_WAREHOUSE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iceberg_catalog_warehouse: Option<String>,
    /// The REST catalog namespace the topics' tables go in, dot-separated levels; one
    /// per cluster (dead-letter tables go in its child `dead_letters`) [default: strata]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_NAMESPACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iceberg_catalog_namespace: Option<String>,
    /// A bearer token for the REST catalog [default: none]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_TOKEN", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iceberg_catalog_token: Option<String>,
    /// A broker that has not heartbeated to the controller this long is fenced and its
    /// partitions get new leaders (Kafka's broker.session.timeout.ms); brokers heartbeat
    /// six times per timeout. Give every voter the same value [default: 3s]
    #[arg(long, env = "STRATA_BROKER_SESSION_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_session_timeout: Option<String>,
    /// Authentication of the REST gateway and /v1/tier/status: comma-separated
    /// bearer:TOKEN or basic:USER:PASSWORD entries, each optionally =User:NAME, the Kafka
    /// principal its calls run as (basic: User:USER, bearer: User:http) for the
    /// authorizer (/healthz, /readyz, /openapi.json and /metrics stay open)
    /// [default: none]
    #[arg(long, env = "STRATA_HTTP_AUTH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_auth: Option<String>,
    /// Largest REST request body (and record of a streamed v3 produce) [default: 8MiB]
    #[arg(long, env = "STRATA_HTTP_MAX_BODY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_max_body: Option<String>,
    /// A REST consumer instance unused this long is closed (Confluent's
    /// consumer.instance.timeout.ms) [default: 5m]
    #[arg(long, env = "STRATA_HTTP_CONSUMER_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_consumer_timeout: Option<String>,
    /// REST consumer instances and SSE streams open at once [default: 100]
    #[arg(long, env = "STRATA_HTTP_MAX_CONSUMERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_max_consumers: Option<usize>,
    /// A record an HTTP consumer rejects (POST .../nack) goes to the topic named its
    /// topic's name plus this [default: .dlq]
    #[arg(long, env = "STRATA_HTTP_DLQ_SUFFIX")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_dlq_suffix: Option<String>,
    /// Records the REST gateway holds in flight; requests beyond it get 429
    /// [default: 100000]
    #[arg(long, env = "STRATA_HTTP_PRODUCE_QUEUE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_produce_queue: Option<usize>,
    /// Bytes of record keys, values and headers the REST gateway holds in flight;
    /// requests beyond it get 429. At least --http-max-body [default: 64MiB, or
    /// --http-max-body if larger]
    #[arg(long, env = "STRATA_HTTP_PRODUCE_QUEUE_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_produce_queue_bytes: Option<String>,
    /// How long a REST-produced record may wait for acks=all, retries included
    /// [default: 30s]
    #[arg(long, env = "STRATA_HTTP_PRODUCE_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_produce_timeout: Option<String>,
    /// Largest Kafka request accepted (Kafka's socket.request.max.bytes) [default: 100MiB]
    #[arg(long, env = "STRATA_MAX_REQUEST_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<String>,
    /// Kafka connections open at once; more are closed at accept (Kafka's
    /// max.connections) [default: 10000]
    #[arg(long, env = "STRATA_MAX_CONNECTIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Kafka connections open at once from one client address (Kafka's
    /// max.connections.per.ip) [default: 1000]
    #[arg(long, env = "STRATA_MAX_CONNECTIONS_PER_IP")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_ip: Option<usize>,
    /// Request bytes one connection may have unanswered before the broker stops reading
    /// it [default: 100MiB]
    #[arg(long, env = "STRATA_MAX_IN_FLIGHT_BYTES_PER_CONNECTION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight_bytes_per_connection: Option<String>,
    /// Request bytes all connections may hold at once, non-produce requests counted 40x
    /// for what decoding makes of them (Kafka's queued.max.request.bytes) [default: 1GiB]
    #[arg(long, env = "STRATA_QUEUED_MAX_REQUEST_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_max_request_bytes: Option<String>,
    /// Partitions one CreateTopics or CreatePartitions request may add [default: 10000]
    #[arg(long, env = "STRATA_MAX_PARTITIONS_PER_REQUEST")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_partitions_per_request: Option<i64>,
    /// Partition replicas per broker (averaged over the live brokers) beyond which new
    /// topics and partitions are refused [default: 10000]
    #[arg(long, env = "STRATA_MAX_PARTITIONS_PER_BROKER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_partitions_per_broker: Option<i64>,
    /// What one record batch may decompress to; larger ones are refused with
    /// CORRUPT_MESSAGE [default: 64MiB]
    #[arg(long, env = "STRATA_MAX_DECOMPRESSED_BATCH_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_decompressed_batch_bytes: Option<String>,
    /// The smallest segment.bytes a topic may set; 1MiB is Kafka 4.0's floor (KIP-1030)
    /// [default: 14, Kafka 3.x's]
    #[arg(long, env = "STRATA_MIN_SEGMENT_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_segment_bytes: Option<String>,
    /// Threads cleaning compacted topics (Kafka's log.cleaner.threads), at least 1
    /// [default: 1]
    #[arg(long, env = "STRATA_LOG_CLEANER_THREADS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_cleaner_threads: Option<usize>,
    /// Memory of the cleaners' offset maps, shared by the threads: 24 bytes a key, about
    /// 27MiB per million distinct keys; a partition with more keys is cleaned in several
    /// passes (Kafka's log.cleaner.dedupe.buffer.size) [default: 128MiB]
    #[arg(long, env = "STRATA_LOG_CLEANER_DEDUPE_BUFFER_SIZE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_cleaner_dedupe_buffer_size: Option<String>,
    /// The cleaners' IO cap, bytes read plus written per second, 0 for none (Kafka's
    /// log.cleaner.io.max.bytes.per.second) [default: 16MiB]
    #[arg(long, env = "STRATA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_cleaner_io_max_bytes_per_second: Option<String>,
    /// How long an idle cleaner waits before looking for work again (Kafka's
    /// log.cleaner.backoff.ms), e.g. 15s [default: 15s]
    #[arg(long, env = "STRATA_LOG_CLEANER_BACKOFF")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_cleaner_backoff: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    pub security: crate::cli::security::SecurityArgs,
}
