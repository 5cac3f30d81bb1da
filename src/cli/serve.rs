//! `strata serve`: the broker process.
//!
//! Every flag can also be set as STRATA_<FLAG> (for example STRATA_DATA_DIR) and in a
//! TOML file given with --config, whose keys are the flag names (`data-dir = "..."`).
//! Precedence: flag, then environment, then file, then default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use strata_broker::{Broker, BrokerConfig, Server};
use strata_cache::{CacheConfig, ChunkCache, DiskConfig};
use strata_controller::{Controller, ControllerClient, ControllerConfig, StartOptions};
use strata_log::SystemClock;
use strata_tier::{StoreSource, Tier, TierConfig};

#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// A TOML file with any of these settings (keys are the flag names).
    #[arg(long, env = "STRATA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where partitions and metadata live [default: ./strata-data]
    #[arg(long, env = "STRATA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// This broker's id [default: 1]
    #[arg(long, env = "STRATA_NODE_ID")]
    pub node_id: Option<i32>,
    /// The PLAINTEXT Kafka listener (the same as --listeners PLAINTEXT://ADDR, and may
    /// be given next to --listeners' others) [default: 127.0.0.1:9092]; port 0 picks a
    /// free port.
    #[arg(long, env = "STRATA_KAFKA_ADDR")]
    pub kafka_addr: Option<SocketAddr>,
    /// HOST:PORT clients of the PLAINTEXT listener are told to connect to [default: the
    /// listener's address]. Required when --kafka-addr binds 0.0.0.0.
    #[arg(long, env = "STRATA_ADVERTISED_KAFKA_ADDR")]
    pub advertised_kafka_addr: Option<String>,
    /// HTTP address for /metrics, /healthz and the REST gateway [default: 127.0.0.1:8080]
    #[arg(long, env = "STRATA_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// The controller quorum's listener [default: 127.0.0.1:9093]
    #[arg(long, env = "STRATA_CONTROLLER_ADDR")]
    pub controller_addr: Option<SocketAddr>,
    /// Controller voters as ID@HOST:PORT,... [default: 1@127.0.0.1:9093]
    #[arg(long, env = "STRATA_CONTROLLER_VOTERS")]
    pub controller_voters: Option<String>,
    /// file://DIR or s3://BUCKET/PREFIX [default: file://<data-dir>/cold]
    #[arg(long, env = "STRATA_OBJECT_STORE")]
    pub object_store: Option<String>,
    /// Create unknown topics when clients ask for them (Kafka's auto.create.topics.enable;
    /// turn it off in production) [default: true]
    #[arg(long, env = "STRATA_AUTO_CREATE_TOPICS")]
    pub auto_create_topics: Option<bool>,
    /// Partitions of auto-created topics and of CreateTopics without a count [default: 1]
    #[arg(long, env = "STRATA_DEFAULT_PARTITIONS")]
    pub default_partitions: Option<i32>,
    /// Committed offsets of a consumer group that has been empty this long (standalone
    /// commits: this long after the commit) are deleted; groups with members keep theirs
    /// (Kafka's offsets.retention.minutes, KIP-211), e.g. 7d [default: 7d]
    #[arg(long, env = "STRATA_OFFSETS_RETENTION")]
    pub offsets_retention: Option<String>,
    /// How often expired committed offsets are looked for (Kafka's
    /// offsets.retention.check.interval.ms) [default: 10m]
    #[arg(long, env = "STRATA_OFFSETS_RETENTION_CHECK_INTERVAL")]
    pub offsets_retention_check_interval: Option<String>,
    /// segment.bytes of `__consumer_offsets` when this broker creates it (Kafka's
    /// offsets.topic.segment.bytes); at least 1MiB [default: 100MiB]
    #[arg(long, env = "STRATA_OFFSETS_TOPIC_SEGMENT_BYTES")]
    pub offsets_topic_segment_bytes: Option<String>,
    /// The longest transaction.timeout.ms a transactional producer may ask for (Kafka's
    /// transaction.max.timeout.ms); longer gets INVALID_TRANSACTION_TIMEOUT [default: 15m]
    #[arg(long, env = "STRATA_TRANSACTION_MAX_TIMEOUT")]
    pub transaction_max_timeout: Option<String>,
    /// A transactional id idle this long is forgotten (Kafka's
    /// transactional.id.expiration.ms) [default: 7d]
    #[arg(long, env = "STRATA_TRANSACTIONAL_ID_EXPIRATION")]
    pub transactional_id_expiration: Option<String>,
    /// Memory for cached object-store chunks, e.g. 512MiB [default: 512MiB]
    #[arg(long, env = "STRATA_CACHE_MEMORY")]
    pub cache_memory: Option<String>,
    /// Local disk for cached object-store chunks in DATA_DIR/cache, 0 for none [default: 4GiB]
    #[arg(long, env = "STRATA_CACHE_DISK")]
    pub cache_disk: Option<String>,
    /// Size of the chunks remote reads fetch and cache, 4MiB to 16MiB [default: 8MiB]
    #[arg(long, env = "STRATA_REMOTE_CHUNK")]
    pub remote_chunk: Option<String>,
    /// Segment uploads in flight at once [default: 2]
    #[arg(long, env = "STRATA_OFFLOAD_CONCURRENCY")]
    pub offload_concurrency: Option<usize>,
    /// Upload rate cap, e.g. 100MiB (per second), 0 for none [default: 0]
    #[arg(long, env = "STRATA_OFFLOAD_RATE")]
    pub offload_rate: Option<String>,
    /// Local bytes of tiered topics beyond which producers are refused while offload is
    /// behind (object store down), 0 for no cap [default: 0]
    #[arg(long, env = "STRATA_LOCAL_DISK_CAP")]
    pub local_disk_cap: Option<String>,
    /// Age after which objects no manifest names are deleted, e.g. 1h [default: 1h]
    #[arg(long, env = "STRATA_ORPHAN_GRACE")]
    pub orphan_grace: Option<String>,
    /// How partition logs write: direct (O_DIRECT, no page cache: less CPU per GB) or
    /// buffered (through the page cache, as Kafka) [default: direct]
    #[arg(long, env = "STRATA_LOG_IO")]
    pub log_io: Option<String>,
    /// Per partition, at most this many of the newest bytes kept in memory for
    /// direct writes and tail reads in direct mode, e.g. 16MiB [default: 4MiB]
    #[arg(long, env = "STRATA_LOG_TAIL_CACHE")]
    pub log_tail_cache: Option<String>,
    /// All partitions' tail buffers and the read cache together (appends first: the
    /// read cache gives room back to a new buffer); past it, new buffers are smaller
    /// (down to two 16KiB windows a partition), e.g. 4GiB [default: 1GiB]
    #[arg(long, env = "STRATA_LOG_TAIL_CACHE_TOTAL")]
    pub log_tail_cache_total: Option<String>,
    /// In direct mode, recently read segment bytes kept in memory for every reader of
    /// every partition (a second consumer group, a consumer behind another, reads
    /// memory rather than the device), at most this much of what the tail buffers leave
    /// of --log-tail-cache-total, e.g. 512MiB; off unless given [default: 0]
    #[arg(long, env = "STRATA_LOG_READ_CACHE")]
    pub log_read_cache: Option<String>,
    /// How many segment files the broker keeps open at most, for all partitions
    /// together (least recently used closed first; reopened on demand) [default: half
    /// the open-file limit, at most 1000]
    #[arg(long, env = "STRATA_LOG_OPEN_FILES")]
    pub log_open_files: Option<usize>,
    /// How many fetch sessions (KIP-227: followers and consumers fetch only what
    /// changed) the broker keeps at once; 0 turns them off (Kafka's
    /// max.incremental.fetch.session.cache.slots) [default: 1000]
    #[arg(long, env = "STRATA_FETCH_SESSION_CACHE_SLOTS")]
    pub fetch_session_cache_slots: Option<usize>,
    /// How often retention runs, local and remote (Kafka's
    /// log.retention.check.interval.ms), e.g. 5m [default: 30s]
    #[arg(long, env = "STRATA_RETENTION_CHECK_INTERVAL")]
    pub retention_check_interval: Option<String>,
    /// How often the Parquet files of each parquet.enable topic are committed to its
    /// Iceberg table (`{cluster}/iceberg/{topic}/` in the object store), one snapshot per
    /// topic per interval; 0 turns publishing off [default: 60s]
    #[arg(long, env = "STRATA_ICEBERG_COMMIT_INTERVAL")]
    pub iceberg_commit_interval: Option<String>,
    /// Commit the Iceberg tables to this Iceberg REST catalog (Polaris, Nessie,
    /// Lakekeeper, Gravitino, Glue's REST endpoint), e.g. http://catalog:8181, instead of
    /// the file-system catalog in the object store. The catalog's warehouse must be in
    /// the broker's object store (Strata writes the manifests there) [default: none]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_URI")]
    pub iceberg_catalog_uri: Option<String>,
    /// The warehouse to ask the REST catalog for, when it serves several (Polaris: the
    /// catalog name; Lakekeeper: the warehouse name) [default: none]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_WAREHOUSE")]
    pub iceberg_catalog_warehouse: Option<String>,
    /// The REST catalog namespace the topics' tables go in, dot-separated levels; one
    /// per cluster (dead-letter tables go in its child `dead_letters`) [default: strata]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_NAMESPACE")]
    pub iceberg_catalog_namespace: Option<String>,
    /// A bearer token for the REST catalog [default: none]
    #[arg(long, env = "STRATA_ICEBERG_CATALOG_TOKEN", hide_env_values = true)]
    pub iceberg_catalog_token: Option<String>,
    /// A broker that has not heartbeated to the controller this long is fenced and its
    /// partitions get new leaders (Kafka's broker.session.timeout.ms); brokers heartbeat
    /// six times per timeout. Give every voter the same value [default: 3s]
    #[arg(long, env = "STRATA_BROKER_SESSION_TIMEOUT")]
    pub broker_session_timeout: Option<String>,
    /// Authentication of the REST gateway and /v1/tier/status: comma-separated
    /// bearer:TOKEN or basic:USER:PASSWORD entries, each optionally =User:NAME, the Kafka
    /// principal its calls run as (basic: User:USER, bearer: User:http) for the
    /// authorizer (/healthz, /readyz, /openapi.json and /metrics stay open)
    /// [default: none]
    #[arg(long, env = "STRATA_HTTP_AUTH")]
    pub http_auth: Option<String>,
    /// Largest REST request body (and record of a streamed v3 produce) [default: 8MiB]
    #[arg(long, env = "STRATA_HTTP_MAX_BODY")]
    pub http_max_body: Option<String>,
    /// A REST consumer instance unused this long is closed (Confluent's
    /// consumer.instance.timeout.ms) [default: 5m]
    #[arg(long, env = "STRATA_HTTP_CONSUMER_TIMEOUT")]
    pub http_consumer_timeout: Option<String>,
    /// REST consumer instances and SSE streams open at once [default: 100]
    #[arg(long, env = "STRATA_HTTP_MAX_CONSUMERS")]
    pub http_max_consumers: Option<usize>,
    /// A record an HTTP consumer rejects (POST .../nack) goes to the topic named its
    /// topic's name plus this [default: .dlq]
    #[arg(long, env = "STRATA_HTTP_DLQ_SUFFIX")]
    pub http_dlq_suffix: Option<String>,
    /// Records the REST gateway holds in flight; requests beyond it get 429
    /// [default: 100000]
    #[arg(long, env = "STRATA_HTTP_PRODUCE_QUEUE")]
    pub http_produce_queue: Option<usize>,
    /// Bytes of record keys, values and headers the REST gateway holds in flight;
    /// requests beyond it get 429. At least --http-max-body [default: 64MiB, or
    /// --http-max-body if larger]
    #[arg(long, env = "STRATA_HTTP_PRODUCE_QUEUE_BYTES")]
    pub http_produce_queue_bytes: Option<String>,
    /// How long a REST-produced record may wait for acks=all, retries included
    /// [default: 30s]
    #[arg(long, env = "STRATA_HTTP_PRODUCE_TIMEOUT")]
    pub http_produce_timeout: Option<String>,
    /// Largest Kafka request accepted (Kafka's socket.request.max.bytes) [default: 100MiB]
    #[arg(long, env = "STRATA_MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<String>,
    /// Kafka connections open at once; more are closed at accept (Kafka's
    /// max.connections) [default: 10000]
    #[arg(long, env = "STRATA_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Kafka connections open at once from one client address (Kafka's
    /// max.connections.per.ip) [default: 1000]
    #[arg(long, env = "STRATA_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// Request bytes one connection may have unanswered before the broker stops reading
    /// it [default: 100MiB]
    #[arg(long, env = "STRATA_MAX_IN_FLIGHT_BYTES_PER_CONNECTION")]
    pub max_in_flight_bytes_per_connection: Option<String>,
    /// Request bytes all connections may hold at once, non-produce requests counted 40x
    /// for what decoding makes of them (Kafka's queued.max.request.bytes) [default: 1GiB]
    #[arg(long, env = "STRATA_QUEUED_MAX_REQUEST_BYTES")]
    pub queued_max_request_bytes: Option<String>,
    /// Partitions one CreateTopics or CreatePartitions request may add [default: 10000]
    #[arg(long, env = "STRATA_MAX_PARTITIONS_PER_REQUEST")]
    pub max_partitions_per_request: Option<i64>,
    /// Partition replicas per broker (averaged over the live brokers) beyond which new
    /// topics and partitions are refused [default: 10000]
    #[arg(long, env = "STRATA_MAX_PARTITIONS_PER_BROKER")]
    pub max_partitions_per_broker: Option<i64>,
    /// What one record batch may decompress to; larger ones are refused with
    /// CORRUPT_MESSAGE [default: 64MiB]
    #[arg(long, env = "STRATA_MAX_DECOMPRESSED_BATCH_BYTES")]
    pub max_decompressed_batch_bytes: Option<String>,
    /// The smallest segment.bytes a topic may set (Kafka 4.0's floor) [default: 1MiB]
    #[arg(long, env = "STRATA_MIN_SEGMENT_BYTES")]
    pub min_segment_bytes: Option<String>,
    /// Threads cleaning compacted topics (Kafka's log.cleaner.threads), at least 1
    /// [default: 1]
    #[arg(long, env = "STRATA_LOG_CLEANER_THREADS")]
    pub log_cleaner_threads: Option<usize>,
    /// Memory of the cleaners' offset maps, shared by the threads: 24 bytes a key, about
    /// 27MiB per million distinct keys; a partition with more keys is cleaned in several
    /// passes (Kafka's log.cleaner.dedupe.buffer.size) [default: 128MiB]
    #[arg(long, env = "STRATA_LOG_CLEANER_DEDUPE_BUFFER_SIZE")]
    pub log_cleaner_dedupe_buffer_size: Option<String>,
    /// The cleaners' IO cap, bytes read plus written per second, 0 for none (Kafka's
    /// log.cleaner.io.max.bytes.per.second) [default: 16MiB]
    #[arg(long, env = "STRATA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND")]
    pub log_cleaner_io_max_bytes_per_second: Option<String>,
    /// How long an idle cleaner waits before looking for work again (Kafka's
    /// log.cleaner.backoff.ms), e.g. 15s [default: 15s]
    #[arg(long, env = "STRATA_LOG_CLEANER_BACKOFF")]
    pub log_cleaner_backoff: Option<String>,
    #[command(flatten)]
    pub security: super::security::SecurityArgs,
}

/// The same settings in a TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct FileSettings {
    data_dir: Option<PathBuf>,
    node_id: Option<i32>,
    kafka_addr: Option<SocketAddr>,
    advertised_kafka_addr: Option<String>,
    http_addr: Option<SocketAddr>,
    controller_addr: Option<SocketAddr>,
    controller_voters: Option<String>,
    object_store: Option<String>,
    auto_create_topics: Option<bool>,
    default_partitions: Option<i32>,
    offsets_retention: Option<String>,
    offsets_retention_check_interval: Option<String>,
    offsets_topic_segment_bytes: Option<String>,
    transaction_max_timeout: Option<String>,
    transactional_id_expiration: Option<String>,
    cache_memory: Option<String>,
    cache_disk: Option<String>,
    remote_chunk: Option<String>,
    offload_concurrency: Option<usize>,
    offload_rate: Option<String>,
    local_disk_cap: Option<String>,
    orphan_grace: Option<String>,
    retention_check_interval: Option<String>,
    iceberg_commit_interval: Option<String>,
    iceberg_catalog_uri: Option<String>,
    iceberg_catalog_warehouse: Option<String>,
    iceberg_catalog_namespace: Option<String>,
    iceberg_catalog_token: Option<String>,
    log_io: Option<String>,
    log_tail_cache: Option<String>,
    log_tail_cache_total: Option<String>,
    log_read_cache: Option<String>,
    log_open_files: Option<usize>,
    fetch_session_cache_slots: Option<usize>,
    broker_session_timeout: Option<String>,
    http_auth: Option<String>,
    http_max_body: Option<String>,
    http_consumer_timeout: Option<String>,
    http_max_consumers: Option<usize>,
    http_dlq_suffix: Option<String>,
    http_produce_queue: Option<usize>,
    http_produce_queue_bytes: Option<String>,
    http_produce_timeout: Option<String>,
    max_request_bytes: Option<String>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    max_in_flight_bytes_per_connection: Option<String>,
    queued_max_request_bytes: Option<String>,
    max_partitions_per_request: Option<i64>,
    max_partitions_per_broker: Option<i64>,
    max_decompressed_batch_bytes: Option<String>,
    min_segment_bytes: Option<String>,
    log_cleaner_threads: Option<usize>,
    log_cleaner_dedupe_buffer_size: Option<String>,
    log_cleaner_io_max_bytes_per_second: Option<String>,
    log_cleaner_backoff: Option<String>,
}

/// An object store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectStoreUrl {
    File(PathBuf),
    S3 { bucket: String, prefix: String },
}

/// A controller voter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub addr: String,
}

/// `strata serve`'s settings, resolved and validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub data_dir: PathBuf,
    pub node_id: i32,
    /// The Kafka listeners, TLS, principals.
    pub security: super::security::Security,
    pub http_addr: SocketAddr,
    pub controller_addr: SocketAddr,
    pub controller_voters: Vec<Voter>,
    pub object_store: ObjectStoreUrl,
    pub auto_create_topics: bool,
    pub default_partitions: i32,
    pub offsets_retention: std::time::Duration,
    pub offsets_retention_check_interval: std::time::Duration,
    pub offsets_topic_segment_bytes: u64,
    pub transaction_max_timeout: std::time::Duration,
    pub transactional_id_expiration: std::time::Duration,
    /// The URL as given (or the default), for opening the store.
    pub object_store_url: String,
    pub cache_memory: u64,
    pub cache_disk: u64,
    pub remote_chunk: u64,
    pub offload_concurrency: usize,
    pub offload_rate: u64,
    pub local_disk_cap: u64,
    pub orphan_grace: std::time::Duration,
    pub retention_check_interval: std::time::Duration,
    /// Zero: off.
    pub iceberg_commit_interval: std::time::Duration,
    /// `None`: the file-system catalog in the object store.
    pub iceberg_rest: Option<Arc<strata_tier::iceberg::RestCatalog>>,
    pub log_io: strata_log::IoMode,
    pub log_tail_cache: u64,
    pub log_tail_cache_total: u64,
    pub log_read_cache: u64,
    /// `None`: derived from the open-file limit at start (see [`log_open_files`]).
    pub log_open_files: Option<usize>,
    pub fetch_session_cache_slots: usize,
    pub broker_session_timeout: std::time::Duration,
    /// REST gateway settings.
    pub http_auth: Option<strata_gateway::Auth>,
    pub http_max_body: u64,
    pub http_consumer_timeout: std::time::Duration,
    pub http_max_consumers: usize,
    pub http_dlq_suffix: String,
    pub http_produce_queue: u32,
    pub http_produce_queue_bytes: u32,
    pub http_produce_timeout: std::time::Duration,
    /// Kafka's socket.request.max.bytes.
    pub max_request_bytes: usize,
    /// What one client may make the broker hold.
    pub limits: strata_broker::limits::Limits,
    /// The log cleaner: threads, offset-map memory, IO cap, idle wait.
    pub log_cleaner_threads: usize,
    pub log_cleaner_dedupe_buffer_bytes: u64,
    pub log_cleaner_io_max_bytes_per_second: u64,
    pub log_cleaner_backoff: std::time::Duration,
}

/// Parses a byte size: a number with an optional unit (B, KB, MB, GB, KiB, MiB, GiB, TiB).
pub fn parse_bytes(flag: &str, v: &str) -> anyhow::Result<u64> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .with_context(|| format!("{flag} '{v}': expected a size such as 512MiB or 4GiB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        other => {
            bail!("{flag} '{v}': unknown unit '{other}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB)")
        }
    };
    n.checked_mul(mult)
        .with_context(|| format!("{flag} '{v}' is too large"))
}

fn parse_host_port(flag: &str, v: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = v
        .rsplit_once(':')
        .with_context(|| format!("{flag} '{v}' must be HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("{flag} '{v}': '{port}' is not a port number"))?;
    if host.is_empty() {
        bail!("{flag} '{v}' has no host");
    }
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

pub fn parse_voters(v: &str) -> anyhow::Result<Vec<Voter>> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .with_context(|| format!("--controller-voters entry '{part}' must be ID@HOST:PORT"))?;
        let id: i32 = id.parse().with_context(|| {
            format!("--controller-voters entry '{part}': '{id}' is not a node id")
        })?;
        parse_host_port("--controller-voters", addr)?;
        if out.iter().any(|x: &Voter| x.id == id) {
            bail!("--controller-voters names node {id} twice");
        }
        out.push(Voter {
            id,
            addr: addr.to_string(),
        });
    }
    if out.is_empty() {
        bail!("--controller-voters is empty: give at least one ID@HOST:PORT");
    }
    Ok(out)
}

pub fn parse_object_store(v: &str) -> anyhow::Result<ObjectStoreUrl> {
    if let Some(path) = v.strip_prefix("file://") {
        if path.is_empty() {
            bail!(
                "--object-store '{v}' has no directory: use file:///absolute/dir or file://relative/dir"
            );
        }
        return Ok(ObjectStoreUrl::File(PathBuf::from(path)));
    }
    if let Some(rest) = v.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            bail!("--object-store '{v}' has no bucket: use s3://BUCKET/PREFIX");
        }
        return Ok(ObjectStoreUrl::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        });
    }
    bail!("--object-store '{v}' is neither file://DIR nor s3://BUCKET/PREFIX")
}

impl ServeConfig {
    pub fn resolve(args: ServeArgs) -> anyhow::Result<ServeConfig> {
        let (file, security_file): (FileSettings, super::security::SecurityFile) =
            match &args.config {
                Some(path) => {
                    let text = std::fs::read_to_string(path).with_context(|| {
                        format!("--config {}: cannot read the file", path.display())
                    })?;
                    let invalid = || format!("--config {}: invalid settings", path.display());
                    let mut table: toml::Table = toml::from_str(&text).with_context(invalid)?;
                    // The listener and security keys are read by their own module.
                    let security: toml::Table = super::security::SecurityFile::KEYS
                        .iter()
                        .filter_map(|k| table.remove(*k).map(|v| (k.to_string(), v)))
                        .collect();
                    (
                        table.try_into().with_context(invalid)?,
                        security.try_into().with_context(invalid)?,
                    )
                }
                None => Default::default(),
            };
        let data_dir = args
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("strata-data"));
        let node_id = args.node_id.or(file.node_id).unwrap_or(1);
        if node_id < 0 {
            bail!("--node-id {node_id} must not be negative");
        }
        let advertised = match args.advertised_kafka_addr.or(file.advertised_kafka_addr) {
            Some(v) => Some(parse_host_port("--advertised-kafka-addr", &v)?),
            None => None,
        };
        let security = super::security::Security::resolve(
            args.security,
            security_file,
            args.kafka_addr.or(file.kafka_addr),
            advertised,
        )?;
        let controller_addr = args
            .controller_addr
            .or(file.controller_addr)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9093)));
        let voters = args
            .controller_voters
            .or(file.controller_voters)
            .unwrap_or_else(|| format!("{node_id}@{controller_addr}"));
        let object_store_url = args
            .object_store
            .or(file.object_store)
            .unwrap_or_else(|| format!("file://{}", data_dir.join("cold").display()));
        let object_store = parse_object_store(&object_store_url)?;
        let size = |flag: &str,
                    a: Option<String>,
                    f: Option<String>,
                    default: u64|
         -> anyhow::Result<u64> {
            a.or(f).map_or(Ok(default), |v| parse_bytes(flag, &v))
        };
        let cache_memory = size(
            "--cache-memory",
            args.cache_memory,
            file.cache_memory,
            512 << 20,
        )?;
        let cache_disk = size("--cache-disk", args.cache_disk, file.cache_disk, 4 << 30)?;
        let remote_chunk = size(
            "--remote-chunk",
            args.remote_chunk,
            file.remote_chunk,
            8 << 20,
        )?;
        if !(4 << 20..=16 << 20).contains(&remote_chunk) {
            bail!("--remote-chunk {remote_chunk} must be between 4MiB and 16MiB");
        }
        let offload_rate = size("--offload-rate", args.offload_rate, file.offload_rate, 0)?;
        let local_disk_cap = size(
            "--local-disk-cap",
            args.local_disk_cap,
            file.local_disk_cap,
            0,
        )?;
        let orphan_grace = match args.orphan_grace.or(file.orphan_grace) {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--orphan-grace '{v}': expected a duration such as 1h or 30s")
            })?,
            None => std::time::Duration::from_secs(3600),
        };
        let retention_check_interval = match args
            .retention_check_interval
            .or(file.retention_check_interval)
        {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--retention-check-interval '{v}': expected a duration such as 30s or 5m")
            })?,
            None => std::time::Duration::from_secs(30),
        };
        let iceberg_commit_interval = match args
            .iceberg_commit_interval
            .or(file.iceberg_commit_interval)
        {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--iceberg-commit-interval '{v}': expected a duration such as 60s or 5m, or 0 for off")
            })?,
            None => std::time::Duration::from_secs(60),
        };
        let iceberg_rest = match args.iceberg_catalog_uri.or(file.iceberg_catalog_uri) {
            Some(uri) => {
                let namespace = args
                    .iceberg_catalog_namespace
                    .or(file.iceberg_catalog_namespace)
                    .unwrap_or_else(|| "strata".to_string());
                let config = strata_tier::iceberg::RestConfig {
                    uri: uri.clone(),
                    warehouse: args
                        .iceberg_catalog_warehouse
                        .or(file.iceberg_catalog_warehouse),
                    namespace: namespace.split('.').map(str::to_string).collect(),
                    token: args.iceberg_catalog_token.or(file.iceberg_catalog_token),
                };
                let rest = strata_tier::iceberg::RestCatalog::new(config).map_err(|e| {
                    anyhow::anyhow!("--iceberg-catalog-uri '{uri}' / --iceberg-catalog-namespace '{namespace}': {e}")
                })?;
                Some(Arc::new(rest))
            }
            None => None,
        };
        let broker_session_timeout =
            match args.broker_session_timeout.or(file.broker_session_timeout) {
                Some(v) => humantime::parse_duration(&v).with_context(|| {
                    format!("--broker-session-timeout '{v}': expected a duration such as 3s or 9s")
                })?,
                None => std::time::Duration::from_secs(3),
            };
        if broker_session_timeout < std::time::Duration::from_millis(600) {
            bail!(
                "--broker-session-timeout {broker_session_timeout:?} is too short: at least 600ms (brokers heartbeat six times per timeout)"
            );
        }
        let log_io = match args.log_io.or(file.log_io).as_deref() {
            None | Some("direct") => strata_log::IoMode::Direct,
            Some("buffered") => strata_log::IoMode::Buffered,
            Some(other) => bail!("--log-io '{other}': expected direct or buffered"),
        };
        let log_tail_cache = size(
            "--log-tail-cache",
            args.log_tail_cache,
            file.log_tail_cache,
            strata_log::DEFAULT_TAIL_CACHE_BYTES as u64,
        )?;
        let log_tail_cache_total = size(
            "--log-tail-cache-total",
            args.log_tail_cache_total,
            file.log_tail_cache_total,
            1 << 30,
        )?;
        let log_read_cache = size(
            "--log-read-cache",
            args.log_read_cache,
            file.log_read_cache,
            0,
        )?;
        let log_open_files = args.log_open_files.or(file.log_open_files);
        if log_open_files.is_some_and(|n| n < 16) {
            bail!("--log-open-files must be at least 16");
        }
        let offload_concurrency = args
            .offload_concurrency
            .or(file.offload_concurrency)
            .unwrap_or(2);
        if offload_concurrency == 0 {
            bail!("--offload-concurrency must be at least 1");
        }
        let default_partitions = args
            .default_partitions
            .or(file.default_partitions)
            .unwrap_or(1);
        if default_partitions < 1 {
            bail!("--default-partitions {default_partitions} must be at least 1");
        }
        let offsets_retention = match args.offsets_retention.or(file.offsets_retention) {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--offsets-retention '{v}': expected a duration such as 7d or 12h")
            })?,
            None => BrokerConfig::default().offsets_retention,
        };
        let offsets_retention_check_interval = match args
            .offsets_retention_check_interval
            .or(file.offsets_retention_check_interval)
        {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!(
                    "--offsets-retention-check-interval '{v}': expected a duration such as 10m or 30s"
                )
            })?,
            None => BrokerConfig::default().offsets_retention_check_interval,
        };
        let offsets_topic_segment_bytes = size(
            "--offsets-topic-segment-bytes",
            args.offsets_topic_segment_bytes,
            file.offsets_topic_segment_bytes,
            BrokerConfig::default().offsets_topic_segment_bytes,
        )?;
        let duration = |flag: &str, v: Option<String>, default: std::time::Duration| match v {
            Some(v) => humantime::parse_duration(&v)
                .with_context(|| format!("{flag} '{v}': expected a duration such as 15m or 7d")),
            None => Ok(default),
        };
        let transaction_max_timeout = duration(
            "--transaction-max-timeout",
            args.transaction_max_timeout
                .or(file.transaction_max_timeout),
            BrokerConfig::default().transaction_max_timeout,
        )?;
        if transaction_max_timeout.is_zero()
            || transaction_max_timeout.as_millis() > i32::MAX as u128
        {
            bail!(
                "--transaction-max-timeout must be between 1ms and about 24 days (it is milliseconds in an int32)"
            );
        }
        let transactional_id_expiration = duration(
            "--transactional-id-expiration",
            args.transactional_id_expiration
                .or(file.transactional_id_expiration),
            BrokerConfig::default().transactional_id_expiration,
        )?;
        if transactional_id_expiration.is_zero() {
            bail!("--transactional-id-expiration must be more than zero");
        }
        if offsets_topic_segment_bytes < 1 << 20 {
            bail!(
                "--offsets-topic-segment-bytes {offsets_topic_segment_bytes} must be at least 1MiB"
            );
        }
        let http_auth = match args.http_auth.or(file.http_auth) {
            Some(v) => Some(
                v.parse::<strata_gateway::Auth>()
                    .map_err(|e| anyhow::anyhow!("--http-auth {e}"))?,
            ),
            None => None,
        };
        let http_max_body = size(
            "--http-max-body",
            args.http_max_body,
            file.http_max_body,
            8 << 20,
        )?;
        if http_max_body < 1024 {
            bail!("--http-max-body {http_max_body} must be at least 1KiB");
        }
        let duration =
            |flag: &str, v: Option<String>, default: u64| -> anyhow::Result<std::time::Duration> {
                match v {
                    Some(v) => humantime::parse_duration(&v).with_context(|| {
                        format!("{flag} '{v}': expected a duration such as 30s or 5m")
                    }),
                    None => Ok(std::time::Duration::from_secs(default)),
                }
            };
        let http_consumer_timeout = duration(
            "--http-consumer-timeout",
            args.http_consumer_timeout.or(file.http_consumer_timeout),
            300,
        )?;
        let http_produce_timeout = duration(
            "--http-produce-timeout",
            args.http_produce_timeout.or(file.http_produce_timeout),
            30,
        )?;
        if http_produce_timeout < std::time::Duration::from_millis(100) {
            bail!("--http-produce-timeout {http_produce_timeout:?} must be at least 100ms");
        }
        let http_max_consumers = args
            .http_max_consumers
            .or(file.http_max_consumers)
            .unwrap_or(100);
        let http_dlq_suffix = args
            .http_dlq_suffix
            .or(file.http_dlq_suffix)
            .unwrap_or_else(|| ".dlq".to_string());
        if http_dlq_suffix.is_empty()
            || !http_dlq_suffix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            bail!(
                "--http-dlq-suffix '{http_dlq_suffix}': one or more of the characters a topic name may hold (letters, digits, '.', '_', '-')"
            );
        }
        let http_produce_queue = args
            .http_produce_queue
            .or(file.http_produce_queue)
            .unwrap_or(100_000);
        let http_produce_queue = match u32::try_from(http_produce_queue) {
            Ok(0) => bail!("--http-produce-queue must be at least 1"),
            Ok(n) => n,
            Err(_) => bail!(
                "--http-produce-queue {http_produce_queue} must be at most {}",
                u32::MAX
            ),
        };
        // The byte queue must hold the largest body the gateway accepts, or such a
        // request could never be produced. Left to its default it grows to fit
        // --http-max-body; set below it, the two contradict each other. Its ceiling is
        // what one semaphore acquire can take (u32 permits).
        let http_produce_queue_bytes = match args
            .http_produce_queue_bytes
            .or(file.http_produce_queue_bytes)
        {
            Some(v) => {
                let n = parse_bytes("--http-produce-queue-bytes", &v)?;
                if n < 1024 {
                    bail!("--http-produce-queue-bytes {n} must be at least 1KiB");
                }
                if n < http_max_body {
                    bail!(
                        "--http-produce-queue-bytes {n} is below --http-max-body ({http_max_body}): a body the gateway accepts could never be produced; raise --http-produce-queue-bytes or lower --http-max-body"
                    );
                }
                u32::try_from(n).map_err(|_| {
                    anyhow::anyhow!(
                        "--http-produce-queue-bytes {n} must be at most {} (just under 4GiB)",
                        u32::MAX
                    )
                })?
            }
            None => u32::try_from(http_max_body.max(64 << 20)).unwrap_or(u32::MAX),
        };
        let defaults = strata_broker::limits::Limits::default();
        let count = |flag: &str, v: Option<usize>, default: usize| -> anyhow::Result<usize> {
            let n = v.unwrap_or(default);
            if n == 0 {
                bail!("{flag} must be at least 1");
            }
            Ok(n)
        };
        let partitions = |flag: &str, v: Option<i64>, default: i64| -> anyhow::Result<i64> {
            let n = v.unwrap_or(default);
            if n < 1 {
                bail!("{flag} {n} must be at least 1");
            }
            Ok(n)
        };
        let max_request_bytes = size(
            "--max-request-bytes",
            args.max_request_bytes,
            file.max_request_bytes,
            BrokerConfig::default().max_request_bytes as u64,
        )?;
        if !(1024..=i32::MAX as u64).contains(&max_request_bytes) {
            bail!("--max-request-bytes {max_request_bytes} must be between 1KiB and 2GiB");
        }
        let queued_max_request_bytes = size(
            "--queued-max-request-bytes",
            args.queued_max_request_bytes,
            file.queued_max_request_bytes,
            defaults.queued_max_request_bytes as u64,
        )?;
        if queued_max_request_bytes < max_request_bytes {
            bail!(
                "--queued-max-request-bytes {queued_max_request_bytes} must be at least --max-request-bytes ({max_request_bytes}), or the largest request could never be read"
            );
        }
        let max_decompressed_batch_bytes = size(
            "--max-decompressed-batch-bytes",
            args.max_decompressed_batch_bytes,
            file.max_decompressed_batch_bytes,
            defaults.max_decompressed_batch_bytes as u64,
        )?;
        if max_decompressed_batch_bytes < 1 << 20 {
            bail!(
                "--max-decompressed-batch-bytes {max_decompressed_batch_bytes} must be at least 1MiB"
            );
        }
        let limits = strata_broker::limits::Limits {
            max_connections: count(
                "--max-connections",
                args.max_connections.or(file.max_connections),
                defaults.max_connections,
            )?,
            max_connections_per_ip: count(
                "--max-connections-per-ip",
                args.max_connections_per_ip.or(file.max_connections_per_ip),
                defaults.max_connections_per_ip,
            )?,
            max_in_flight_bytes_per_connection: size(
                "--max-in-flight-bytes-per-connection",
                args.max_in_flight_bytes_per_connection,
                file.max_in_flight_bytes_per_connection,
                defaults.max_in_flight_bytes_per_connection as u64,
            )?
            .max(1) as usize,
            queued_max_request_bytes: queued_max_request_bytes as usize,
            max_partitions_per_request: partitions(
                "--max-partitions-per-request",
                args.max_partitions_per_request
                    .or(file.max_partitions_per_request),
                defaults.max_partitions_per_request,
            )?,
            max_partitions_per_broker: partitions(
                "--max-partitions-per-broker",
                args.max_partitions_per_broker
                    .or(file.max_partitions_per_broker),
                defaults.max_partitions_per_broker,
            )?,
            max_decompressed_batch_bytes: max_decompressed_batch_bytes as usize,
            min_segment_bytes: size(
                "--min-segment-bytes",
                args.min_segment_bytes,
                file.min_segment_bytes,
                defaults.min_segment_bytes,
            )?,
        };
        let broker_defaults = BrokerConfig::default();
        let log_cleaner_threads = args
            .log_cleaner_threads
            .or(file.log_cleaner_threads)
            .unwrap_or(broker_defaults.log_cleaner_threads);
        if log_cleaner_threads == 0 {
            bail!(
                "--log-cleaner-threads 0: at least one cleaner is needed, or compacted topics would keep every record"
            );
        }
        let log_cleaner_dedupe_buffer_bytes = size(
            "--log-cleaner-dedupe-buffer-size",
            args.log_cleaner_dedupe_buffer_size,
            file.log_cleaner_dedupe_buffer_size,
            broker_defaults.log_cleaner_dedupe_buffer_bytes as u64,
        )?;
        // Each thread's map must hold at least one large batch's keys.
        if log_cleaner_dedupe_buffer_bytes < (log_cleaner_threads as u64) << 20 {
            bail!(
                "--log-cleaner-dedupe-buffer-size {log_cleaner_dedupe_buffer_bytes} is too small: at least 1MiB per cleaner thread"
            );
        }
        let log_cleaner_io_max_bytes_per_second = size(
            "--log-cleaner-io-max-bytes-per-second",
            args.log_cleaner_io_max_bytes_per_second,
            file.log_cleaner_io_max_bytes_per_second,
            broker_defaults.log_cleaner_io_max_bytes_per_second,
        )?;
        let log_cleaner_backoff = match args.log_cleaner_backoff.or(file.log_cleaner_backoff) {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--log-cleaner-backoff '{v}': expected a duration such as 15s or 500ms")
            })?,
            None => broker_defaults.log_cleaner_backoff,
        };
        Ok(ServeConfig {
            log_cleaner_threads,
            log_cleaner_dedupe_buffer_bytes,
            log_cleaner_io_max_bytes_per_second,
            log_cleaner_backoff,
            max_request_bytes: max_request_bytes as usize,
            limits,
            http_auth,
            http_max_body,
            http_consumer_timeout,
            http_max_consumers,
            http_dlq_suffix,
            http_produce_queue,
            http_produce_queue_bytes,
            http_produce_timeout,
            data_dir,
            node_id,
            security,
            http_addr: args
                .http_addr
                .or(file.http_addr)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            controller_addr,
            controller_voters: parse_voters(&voters)?,
            object_store,
            auto_create_topics: args
                .auto_create_topics
                .or(file.auto_create_topics)
                .unwrap_or(BrokerConfig::default().auto_create_topics),
            default_partitions,
            offsets_retention,
            offsets_retention_check_interval,
            offsets_topic_segment_bytes,
            transaction_max_timeout,
            transactional_id_expiration,
            object_store_url,
            cache_memory,
            cache_disk,
            remote_chunk,
            offload_concurrency,
            offload_rate,
            local_disk_cap,
            orphan_grace,
            retention_check_interval,
            iceberg_commit_interval,
            iceberg_rest,
            log_io,
            log_tail_cache,
            log_tail_cache_total,
            log_read_cache,
            log_open_files,
            fetch_session_cache_slots: args
                .fetch_session_cache_slots
                .or(file.fetch_session_cache_slots)
                .unwrap_or(BrokerConfig::default().fetch_session_slots),
            broker_session_timeout,
        })
    }

    fn broker_config(&self) -> BrokerConfig {
        BrokerConfig {
            node_id: self.node_id,
            data_dir: self.data_dir.clone(),
            listeners: self.security.listeners.clone(),
            inter_broker_listener: self.security.inter_broker_listener,
            inter_broker_client: self.security.inter_broker_client.clone(),
            security: strata_broker::security::SecurityConfig {
                principal_mapping: self.security.principal_mapping.clone(),
                sasl: self.security.sasl.clone(),
                authorizer: self.security.authorizer.clone(),
            },
            auto_create_topics: self.auto_create_topics,
            default_partitions: self.default_partitions,
            offsets_retention: self.offsets_retention,
            offsets_retention_check_interval: self.offsets_retention_check_interval,
            offsets_topic_segment_bytes: self.offsets_topic_segment_bytes,
            transaction_max_timeout: self.transaction_max_timeout,
            transactional_id_expiration: self.transactional_id_expiration,
            retention_check_interval: self.retention_check_interval,
            log_io: self.log_io,
            log_tail_cache_bytes: self.log_tail_cache as usize,
            heartbeat_interval: self.broker_session_timeout / 6,
            fetch_session_slots: self.fetch_session_cache_slots,
            max_request_bytes: self.max_request_bytes,
            limits: self.limits.clone(),
            log_cleaner_threads: self.log_cleaner_threads,
            log_cleaner_dedupe_buffer_bytes: self.log_cleaner_dedupe_buffer_bytes as usize,
            log_cleaner_io_max_bytes_per_second: self.log_cleaner_io_max_bytes_per_second,
            log_cleaner_backoff: self.log_cleaner_backoff,
            ..BrokerConfig::default()
        }
    }
}

/// Binds the Kafka listener with a 4096-connection accept queue (tokio's default is
/// 1024): a burst of connects (clients restarting together, or a flood) waits in the
/// kernel's queue to be admitted or refused by --max-connections, instead of having
/// handshakes dropped and retried for seconds.
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = ServeConfig::resolve(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strata")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config))
}

/// The segment descriptors the broker keeps open: `--log-open-files`, or half the
/// open-file limit (the rest is for connections, the cache and the controller), at
/// most 1000 and at least 16.
fn log_open_files(flag: Option<usize>, nofile: Option<u64>) -> usize {
    flag.unwrap_or_else(|| {
        let half = nofile.map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX));
        half.clamp(16, 1000)
    })
}

async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    // Partitions and connections each hold descriptors: take what the hard limit allows.
    let limit = strata_broker::resources::raise_nofile_limit();
    let open_files = log_open_files(config.log_open_files, limit.soft);
    strata_log::files::set_capacity(open_files);
    strata_log::tail_budget::set_limit(
        usize::try_from(config.log_tail_cache_total).unwrap_or(usize::MAX),
    );
    strata_log::read_cache::set_limit(usize::try_from(config.log_read_cache).unwrap_or(usize::MAX));
    tracing::info!(
        segment_files = open_files,
        "at most {open_files} segment files open at once (--log-open-files)"
    );
    std::fs::create_dir_all(&config.data_dir).with_context(|| {
        format!(
            "--data-dir {}: cannot create the directory",
            config.data_dir.display()
        )
    })?;
    // This node is a controller voter when --controller-voters names it. A single voter
    // may listen on port 0 (tests, several brokers on one machine): it binds first and
    // names itself by the port it got.
    let mut voters = config.controller_voters.clone();
    let controller = if voters.iter().any(|v| v.id == config.node_id) {
        let mut listener = None;
        if config.controller_addr.port() == 0 {
            if voters.len() != 1 {
                bail!(
                    "--controller-addr {}: port 0 works only for a single-voter quorum; give every voter a fixed port in --controller-voters",
                    config.controller_addr
                );
            }
            let l = std::net::TcpListener::bind(config.controller_addr).with_context(|| {
                format!(
                    "--controller-addr {}: cannot listen",
                    config.controller_addr
                )
            })?;
            voters[0].addr = l.local_addr()?.to_string();
            listener = Some(l);
        }
        let controller_config = ControllerConfig {
            node_id: config.node_id as u64,
            listen_addr: config.controller_addr,
            voters: voters
                .iter()
                .map(|v| (v.id as u64, v.addr.clone()))
                .collect(),
            data_dir: config.data_dir.join("controller"),
            session_timeout: config.broker_session_timeout,
            tls: config.security.controller_tls.clone(),
            ..ControllerConfig::default()
        };
        let options = StartOptions {
            listener,
            ..StartOptions::default()
        };
        let c = Controller::start_with(controller_config, options)
            .await
            .with_context(|| {
                format!(
                    "cannot start the controller on --controller-addr {} (is another broker using it?)",
                    config.controller_addr
                )
            })?;
        Some(c)
    } else {
        None
    };
    let client = ControllerClient::with_config(strata_controller::ClientConfig {
        voters: voters.iter().map(|v| v.addr.clone()).collect(),
        tls: config
            .security
            .controller_tls
            .as_ref()
            .map(|t| strata_controller::ClientTls(t.client.clone())),
        ..strata_controller::ClientConfig::default()
    });
    // The tier behind one handle: the broker hands it the partitions it hosts each
    // round; the Iceberg publisher beside the broker (below) commits the tables.
    let tiering = Arc::new(strata_tier::Tiering::new(
        Some(open_tier(&config).await?),
        strata_tier::TableConfig {
            commit_interval: config.iceberg_commit_interval,
            store_uri: iceberg_store_uri(&config.object_store_url),
            rest: config.iceberg_rest.clone(),
        },
    ));
    // Bound before registering, so the advertised ports are known (port 0 picks one).
    let mut bound = Vec::new();
    for l in &config.security.listeners {
        let listener = listen(l.bind).with_context(|| {
            format!(
                "--listeners {}://{}: cannot listen (is another broker running?)",
                l.protocol, l.bind
            )
        })?;
        let tls = match (&config.security.tls, l.protocol.uses_tls()) {
            (Some(files), true) => Some(
                strata_broker::tls::TlsServer::load(
                    files.clone(),
                    l.protocol == strata_broker::listener::SecurityProtocol::Ssl,
                )
                .with_context(|| format!("the {} listener's TLS settings", l.protocol))?,
            ),
            _ => None,
        };
        bound.push(strata_broker::BoundListener {
            config: l.clone(),
            listener,
            tls,
        });
    }
    let mut endpoints = Vec::new();
    for b in &bound {
        let (host, port) = b.config.advertised(b.listener.local_addr()?);
        endpoints.push(strata_controller::Endpoint {
            name: b.config.name().to_string(),
            host,
            port,
        });
    }
    let advertised = endpoints
        .iter()
        .find(|e| e.name == config.security.inter_broker_listener.name())
        .map(|e| (e.host.clone(), e.port))
        .context("the inter-broker listener is not among the listeners")?;
    let broker = Broker::open(
        config.broker_config(),
        Arc::new(client),
        Arc::new(SystemClock),
        tiering.clone(),
        endpoints,
    )
    .await
    .with_context(|| {
        format!(
            "cannot join the cluster (controller voters {}; are a majority of them running?) or open the data directory {}",
            voters
                .iter()
                .map(|v| format!("{}@{}", v.id, v.addr))
                .collect::<Vec<_>>()
                .join(","),
            config.data_dir.display()
        )
    })?;
    if let Some((user, password)) = &config.security.bootstrap_user {
        broker
            .security
            .bootstrap_user(user, password)
            .await
            .map_err(|e| anyhow::anyhow!("--bootstrap-user {user}: {e}"))?;
    }
    let http = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("--http-addr {}: cannot listen", config.http_addr))?;
    let http_addr = http.local_addr()?;
    // Answering at once: while the partitions open, requests for them get
    // NOT_LEADER_OR_FOLLOWER (clients retry), not a connection that waits.
    let server = Server::start_on(broker.clone(), bound);
    let started = std::time::Instant::now();
    broker.load().await.with_context(|| {
        format!(
            "cannot open the partitions in the data directory {}",
            config.data_dir.display()
        )
    })?;
    tracing::info!(
        partitions = broker.replicas.partitions().len(),
        seconds = started.elapsed().as_secs_f64(),
        "partitions open"
    );
    // The gateway is a Kafka client of this broker: of its own listener (by the address
    // it advertises, which is what metadata tells clients anyway), and in-process for
    // producing to the partitions it leads.
    let (gateway, gateway_handle) = gateway_router(&config, &advertised, &broker)?;
    let http_tls = match (&config.security.tls, config.security.http_tls) {
        (Some(files), true) => {
            let client_auth = config.security.http_client_auth;
            let files = strata_broker::tls::TlsFiles {
                client_auth,
                ..files.clone()
            };
            let mtls = client_auth != strata_broker::tls::ClientAuth::None;
            Some(
                strata_broker::tls::TlsServer::load(files, mtls)
                    .context("--http-tls: the HTTP address's TLS settings")?,
            )
        }
        _ => None,
    };
    if let Some(t) = &http_tls {
        // Reloaded as the Kafka listeners' certificates are, for the process's life.
        strata_broker::tls::spawn_reloader(
            vec![t.clone()],
            std::time::Duration::from_secs(5),
            Default::default(),
        );
    }
    let http_task = tokio::spawn(crate::http::serve(
        http,
        metrics,
        broker.clone(),
        gateway,
        config.http_auth.clone(),
        http_tls,
    ));
    // Tests and scripts read this line to learn the bound ports.
    println!(
        "strata listening kafka={} http={} controller={} data={} listeners={}",
        server.local_addr,
        http_addr,
        controller
            .as_ref()
            .map_or_else(|| "-".to_string(), |c| c.local_addr().to_string()),
        display(&config.data_dir),
        server
            .local_addrs
            .iter()
            .map(|(p, a)| format!("{p}://{a}"))
            .collect::<Vec<_>>()
            .join(","),
    );
    tracing::info!(kafka = %server.local_addr, http = %http_addr, cluster = %broker.cluster_id(), "strata serving");
    tracing::info!(controller = %config.controller_addr, voters = ?config.controller_voters, voter = controller.is_some(), object_store = ?config.object_store, "controller and object store settings");

    let publisher_stop = tokio_util::sync::CancellationToken::new();
    let publisher = {
        let b = broker.clone();
        strata_tier::publisher::spawn(
            tiering,
            move || b.tiering.hosted(),
            || strata_log::Clock::now_ms(&SystemClock),
            publisher_stop.clone(),
        )
    };

    shutdown_signal().await;
    tracing::info!("shutting down");
    publisher_stop.cancel();
    let _ = publisher.await;
    // The gateway first: its Kafka clients (consumer instances leaving their groups)
    // close while the listener they talk to is still up.
    gateway_handle.close().await;
    http_task.abort();
    let _ = http_task.await;
    server.stop().await;
    let b = broker.clone();
    tokio::task::spawn_blocking(move || b.shutdown()).await?;
    if let Some(c) = controller
        && let Err(e) = c.shutdown().await
    {
        tracing::warn!(error = %e, "controller shutdown");
    }
    Ok(())
}

/// The REST gateway over a Kafka client of this broker: produce reaches the partitions
/// this broker leads in-process (the same request frames, no socket) and other leaders
/// over TCP; consumers are librdkafka clients of the broker's own listener.
fn gateway_router(
    config: &ServeConfig,
    advertised: &(String, u16),
    broker: &Arc<strata_broker::Broker>,
) -> anyhow::Result<(axum::Router, strata_gateway::Handle)> {
    let cluster_id = broker.cluster_id();
    let host = if advertised.0.contains(':') {
        format!("[{}]", advertised.0)
    } else {
        advertised.0.clone()
    };
    let kafka = strata_gateway::kafka::KafkaConfig {
        produce_queue_records: config.http_produce_queue,
        produce_queue_bytes: config.http_produce_queue_bytes,
        delivery_timeout: config.http_produce_timeout,
        local: Some(strata_gateway::producer::LocalLeader {
            node_id: broker.node_id(),
            broker: Arc::new(strata_broker::LocalLink::new(broker.clone())),
        }),
        client_properties: config.security.inter_broker_properties.clone(),
        security: config.security.inter_broker_client.clone(),
        ..strata_gateway::kafka::KafkaConfig::new(format!("{host}:{}", advertised.1))
    };
    let service = strata_gateway::kafka::KafkaService::new(kafka)
        .map_err(|e| anyhow::anyhow!("cannot start the REST gateway's Kafka client: {e}"))?;
    let gateway = strata_gateway::GatewayConfig {
        cluster_id,
        auth: config.http_auth.clone(),
        authorizer: crate::http::authorizer(broker),
        audit: Some(crate::http::audit()),
        max_body_bytes: usize::try_from(config.http_max_body).unwrap_or(usize::MAX),
        consumer_idle_timeout: config.http_consumer_timeout,
        max_consumers: config.http_max_consumers,
        dlq_suffix: config.http_dlq_suffix.clone(),
        ..strata_gateway::GatewayConfig::default()
    };
    Ok(strata_gateway::gateway(Arc::new(service), gateway))
}

/// The absolute URI of the object store's root, as Iceberg metadata names its files (an
/// engine opens them from there): `file:///abs/dir` for a local directory, the URL as
/// given for S3; `None` for the in-memory store, which no engine can read.
fn iceberg_store_uri(url: &str) -> Option<String> {
    if let Some(dir) = url.strip_prefix("file://") {
        let abs = std::fs::canonicalize(dir).ok()?;
        return Some(format!("file://{}", abs.display()));
    }
    url.starts_with("s3://")
        .then(|| url.trim_end_matches('/').to_string())
}

/// The object store behind its retry/timeout/metrics wrappers, and the chunk cache.
async fn open_tier(config: &ServeConfig) -> anyhow::Result<Arc<Tier>> {
    strata_store::describe_metrics();
    let backend = strata_store::open_url(&config.object_store_url)
        .with_context(|| format!("--object-store {}: cannot open the object store (for S3, check AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION)", config.object_store_url))?;
    let store = strata_store::layered(backend.into_dyn(), strata_store::LayerConfig::default());
    let disk = (config.cache_disk > 0).then(|| DiskConfig {
        dir: config.data_dir.join("cache"),
        capacity: config.cache_disk,
        recover: true,
    });
    let cache_config = CacheConfig {
        chunk_size: config.remote_chunk,
        memory_capacity: config.cache_memory,
        disk,
        ..CacheConfig::default()
    };
    let cache = ChunkCache::new(cache_config, Arc::new(StoreSource(store.clone())))
        .await
        .context("cannot open the segment cache (--cache-memory, --cache-disk, --remote-chunk)")?;
    let tier_config = TierConfig {
        upload_concurrency: config.offload_concurrency,
        upload_bytes_per_sec: config.offload_rate,
        local_disk_cap_bytes: config.local_disk_cap,
        orphan_grace: config.orphan_grace,
        ..TierConfig::default()
    };
    Ok(Arc::new(Tier::new(store, Arc::new(cache), tier_config)))
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_make_a_single_node_broker() {
        let c = ServeConfig::resolve(ServeArgs::default()).unwrap();
        assert_eq!(c.security.listeners[0].bind.to_string(), "127.0.0.1:9092");
        assert_eq!(c.http_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("strata-data"));
        // A development single node creates topics on first use, as Kafka does by default.
        assert!(c.auto_create_topics);
        assert_eq!(
            c.object_store,
            ObjectStoreUrl::File(PathBuf::from("strata-data/cold"))
        );
        assert_eq!(
            c.controller_voters,
            vec![Voter {
                id: 1,
                addr: "127.0.0.1:9093".into()
            }]
        );
    }

    #[test]
    fn bad_values_name_their_flag() {
        let e = parse_object_store("ftp://x").unwrap_err().to_string();
        assert!(e.contains("--object-store"), "{e}");
        assert_eq!(
            parse_object_store("s3://b/p/q/").unwrap(),
            ObjectStoreUrl::S3 {
                bucket: "b".into(),
                prefix: "p/q".into()
            }
        );
        let e = parse_voters("1@a:1,x@b:2").unwrap_err().to_string();
        assert!(e.contains("--controller-voters"), "{e}");
        let e = ServeConfig::resolve(ServeArgs {
            kafka_addr: Some("0.0.0.0:9092".parse().unwrap()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--advertised-kafka-addr"), "{e}");
    }

    #[test]
    fn file_settings_apply_below_flags() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        std::fs::write(
            &f,
            "data-dir = \"/tmp/x\"\nnode-id = 7\nauto-create-topics = false\n",
        )
        .unwrap();
        let c = ServeConfig::resolve(ServeArgs {
            config: Some(f.clone()),
            node_id: Some(3),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.node_id, 3);
        assert!(!c.auto_create_topics, "the file turns the default off");
        let c = ServeConfig::resolve(ServeArgs {
            config: Some(f.clone()),
            auto_create_topics: Some(true),
            ..Default::default()
        })
        .unwrap();
        assert!(c.auto_create_topics, "a flag beats the file");
        std::fs::write(&f, "data_dir = \"/tmp/x\"\n").unwrap();
        let e = ServeConfig::resolve(ServeArgs {
            config: Some(f),
            ..Default::default()
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("--config"), "{e:#}");
    }

    #[test]
    fn http_gateway_settings_resolve() {
        let c = ServeConfig::resolve(ServeArgs::default()).unwrap();
        assert!(c.http_auth.is_none());
        assert_eq!(c.http_max_body, 8 << 20);
        assert_eq!(c.http_consumer_timeout, std::time::Duration::from_secs(300));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        std::fs::write(
            &f,
            "http-auth = \"basic:ann:pw\"\nhttp-max-body = \"1MiB\"\nhttp-consumer-timeout = \"1m\"\n",
        )
        .unwrap();
        let c = ServeConfig::resolve(ServeArgs {
            config: Some(f),
            http_produce_queue: Some(7),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            c.http_auth,
            Some(strata_gateway::Auth::Basic {
                user: "ann".into(),
                password: "pw".into()
            })
        );
        assert_eq!(c.http_max_body, 1 << 20);
        assert_eq!(c.http_consumer_timeout, std::time::Duration::from_secs(60));
        assert_eq!(c.http_produce_queue, 7);
        // Left to its default, the byte queue grows to hold the largest body.
        assert_eq!(c.http_produce_queue_bytes, 64 << 20);
        let c = ServeConfig::resolve(ServeArgs {
            http_max_body: Some("100MiB".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.http_produce_queue_bytes, 100 << 20);
        let dir2 = tempfile::tempdir().unwrap();
        let f2 = dir2.path().join("s.toml");
        std::fs::write(&f2, "http-produce-queue-bytes = \"16MiB\"\n").unwrap();
        let c = ServeConfig::resolve(ServeArgs {
            config: Some(f2),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.http_produce_queue_bytes, 16 << 20);
        for (queue, body, want) in [
            ("512", None, "at least 1KiB"),
            ("1MiB", Some("2MiB"), "--http-max-body"),
            ("4GiB", None, "at most"),
            ("lots", None, "--http-produce-queue-bytes"),
        ] {
            let e = ServeConfig::resolve(ServeArgs {
                http_produce_queue_bytes: Some(queue.into()),
                http_max_body: body.map(Into::into),
                ..Default::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(want), "{queue}: {e}");
            assert!(e.contains("--http-produce-queue-bytes"), "{queue}: {e}");
        }
        let e = ServeConfig::resolve(ServeArgs {
            http_produce_queue: Some(0),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--http-produce-queue"), "{e}");
        let e = ServeConfig::resolve(ServeArgs {
            http_auth: Some("token".into()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--http-auth"), "{e}");
        // The secret never reaches a log line that prints the settings.
        let c = ServeConfig::resolve(ServeArgs {
            http_auth: Some("bearer:hunter2".into()),
            ..Default::default()
        })
        .unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
