//! `strata serve`'s settings resolved and validated into a [`ServeConfig`]: defaults
//! filled in, sizes and durations parsed, and every error naming its flag.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use strata_broker::BrokerConfig;

use super::ServeArgs;
use super::parse::{
    ObjectStoreUrl, Voter, parse_bytes, parse_host_port, parse_object_store, parse_voters,
};

/// `strata serve`'s settings, resolved and validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub data_dir: PathBuf,
    pub node_id: i32,
    /// The Kafka listeners, TLS, principals.
    pub security: crate::cli::security::Security,
    pub http_addr: SocketAddr,
    /// Where the schema registry listens (`None`: off), and whether it was asked for
    /// (then it must bind; the default is served only if free).
    pub schema_registry_addr: Option<SocketAddr>,
    pub schema_registry_explicit: bool,
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

impl ServeConfig {
    pub fn resolve(args: ServeArgs) -> anyhow::Result<ServeConfig> {
        // The --config file under the flags and the environment.
        let args = super::file::with_file(args)?;
        let data_dir = args
            .data_dir
            .unwrap_or_else(|| PathBuf::from("strata-data"));
        let node_id = args.node_id.unwrap_or(1);
        if node_id < 0 {
            bail!("--node-id {node_id} must not be negative");
        }
        let advertised = match args.advertised_kafka_addr {
            Some(v) => Some(parse_host_port("--advertised-kafka-addr", &v)?),
            None => None,
        };
        let security =
            crate::cli::security::Security::resolve(args.security, args.kafka_addr, advertised)?;
        let controller_addr = args
            .controller_addr
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9093)));
        let voters = args
            .controller_voters
            .unwrap_or_else(|| format!("{node_id}@{controller_addr}"));
        let object_store_url = args
            .object_store
            .unwrap_or_else(|| format!("file://{}", data_dir.join("cold").display()));
        let object_store = parse_object_store(&object_store_url)?;
        let size = |flag: &str, a: Option<String>, default: u64| -> anyhow::Result<u64> {
            a.map_or(Ok(default), |v| parse_bytes(flag, &v))
        };
        let cache_memory = size("--cache-memory", args.cache_memory, 512 << 20)?;
        let cache_disk = size("--cache-disk", args.cache_disk, 4 << 30)?;
        let remote_chunk = size("--remote-chunk", args.remote_chunk, 8 << 20)?;
        if !(4 << 20..=16 << 20).contains(&remote_chunk) {
            bail!("--remote-chunk {remote_chunk} must be between 4MiB and 16MiB");
        }
        let offload_rate = size("--offload-rate", args.offload_rate, 0)?;
        let local_disk_cap = size("--local-disk-cap", args.local_disk_cap, 0)?;
        let orphan_grace = match args.orphan_grace {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--orphan-grace '{v}': expected a duration such as 1h or 30s")
            })?,
            None => std::time::Duration::from_secs(3600),
        };
        let retention_check_interval = match args.retention_check_interval {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--retention-check-interval '{v}': expected a duration such as 30s or 5m")
            })?,
            None => std::time::Duration::from_secs(30),
        };
        let iceberg_commit_interval = match args
            .iceberg_commit_interval
        {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--iceberg-commit-interval '{v}': expected a duration such as 60s or 5m, or 0 for off")
            })?,
            None => std::time::Duration::from_secs(60),
        };
        let iceberg_rest = match args.iceberg_catalog_uri {
            Some(uri) => {
                let namespace = args
                    .iceberg_catalog_namespace
                    .unwrap_or_else(|| "strata".to_string());
                let config = strata_tier::iceberg::RestConfig {
                    uri: uri.clone(),
                    warehouse: args.iceberg_catalog_warehouse,
                    namespace: namespace.split('.').map(str::to_string).collect(),
                    token: args.iceberg_catalog_token,
                };
                let rest = strata_tier::iceberg::RestCatalog::new(config).map_err(|e| {
                    anyhow::anyhow!("--iceberg-catalog-uri '{uri}' / --iceberg-catalog-namespace '{namespace}': {e}")
                })?;
                Some(Arc::new(rest))
            }
            None => None,
        };
        let broker_session_timeout = match args.broker_session_timeout {
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
        let log_io = match args.log_io.as_deref() {
            None | Some("direct") => strata_log::IoMode::Direct,
            Some("buffered") => strata_log::IoMode::Buffered,
            Some(other) => bail!("--log-io '{other}': expected direct or buffered"),
        };
        let log_tail_cache = size(
            "--log-tail-cache",
            args.log_tail_cache,
            strata_log::DEFAULT_TAIL_CACHE_BYTES as u64,
        )?;
        let log_tail_cache_total =
            size("--log-tail-cache-total", args.log_tail_cache_total, 1 << 30)?;
        let log_read_cache = size("--log-read-cache", args.log_read_cache, 0)?;
        let log_open_files = args.log_open_files;
        if log_open_files.is_some_and(|n| n < 16) {
            bail!("--log-open-files must be at least 16");
        }
        let offload_concurrency = args.offload_concurrency.unwrap_or(2);
        if offload_concurrency == 0 {
            bail!("--offload-concurrency must be at least 1");
        }
        let default_partitions = args.default_partitions.unwrap_or(1);
        if default_partitions < 1 {
            bail!("--default-partitions {default_partitions} must be at least 1");
        }
        let offsets_retention = match args.offsets_retention {
            Some(v) => humantime::parse_duration(&v).with_context(|| {
                format!("--offsets-retention '{v}': expected a duration such as 7d or 12h")
            })?,
            None => BrokerConfig::default().offsets_retention,
        };
        let offsets_retention_check_interval = match args
            .offsets_retention_check_interval
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
            BrokerConfig::default().offsets_topic_segment_bytes,
        )?;
        let duration = |flag: &str, v: Option<String>, default: std::time::Duration| match v {
            Some(v) => humantime::parse_duration(&v)
                .with_context(|| format!("{flag} '{v}': expected a duration such as 15m or 7d")),
            None => Ok(default),
        };
        let transaction_max_timeout = duration(
            "--transaction-max-timeout",
            args.transaction_max_timeout,
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
            args.transactional_id_expiration,
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
        let http_auth = match args.http_auth {
            Some(v) => Some(
                v.parse::<strata_gateway::Auth>()
                    .map_err(|e| anyhow::anyhow!("--http-auth {e}"))?,
            ),
            None => None,
        };
        let http_max_body = size("--http-max-body", args.http_max_body, 8 << 20)?;
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
        let http_consumer_timeout =
            duration("--http-consumer-timeout", args.http_consumer_timeout, 300)?;
        let http_produce_timeout =
            duration("--http-produce-timeout", args.http_produce_timeout, 30)?;
        if http_produce_timeout < std::time::Duration::from_millis(100) {
            bail!("--http-produce-timeout {http_produce_timeout:?} must be at least 100ms");
        }
        let http_max_consumers = args.http_max_consumers.unwrap_or(100);
        let http_dlq_suffix = args.http_dlq_suffix.unwrap_or_else(|| ".dlq".to_string());
        if http_dlq_suffix.is_empty()
            || !http_dlq_suffix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            bail!(
                "--http-dlq-suffix '{http_dlq_suffix}': one or more of the characters a topic name may hold (letters, digits, '.', '_', '-')"
            );
        }
        let http_produce_queue = args.http_produce_queue.unwrap_or(100_000);
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
        let http_produce_queue_bytes = match args.http_produce_queue_bytes {
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
            BrokerConfig::default().max_request_bytes as u64,
        )?;
        if !(1024..=i32::MAX as u64).contains(&max_request_bytes) {
            bail!("--max-request-bytes {max_request_bytes} must be between 1KiB and 2GiB");
        }
        let queued_max_request_bytes = size(
            "--queued-max-request-bytes",
            args.queued_max_request_bytes,
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
                args.max_connections,
                defaults.max_connections,
            )?,
            max_connections_per_ip: count(
                "--max-connections-per-ip",
                args.max_connections_per_ip,
                defaults.max_connections_per_ip,
            )?,
            max_in_flight_bytes_per_connection: size(
                "--max-in-flight-bytes-per-connection",
                args.max_in_flight_bytes_per_connection,
                defaults.max_in_flight_bytes_per_connection as u64,
            )?
            .max(1) as usize,
            queued_max_request_bytes: queued_max_request_bytes as usize,
            max_partitions_per_request: partitions(
                "--max-partitions-per-request",
                args.max_partitions_per_request,
                defaults.max_partitions_per_request,
            )?,
            max_partitions_per_broker: partitions(
                "--max-partitions-per-broker",
                args.max_partitions_per_broker,
                defaults.max_partitions_per_broker,
            )?,
            max_decompressed_batch_bytes: max_decompressed_batch_bytes as usize,
            min_segment_bytes: size(
                "--min-segment-bytes",
                args.min_segment_bytes,
                defaults.min_segment_bytes,
            )?,
        };
        let broker_defaults = BrokerConfig::default();
        let log_cleaner_threads = args
            .log_cleaner_threads
            .unwrap_or(broker_defaults.log_cleaner_threads);
        if log_cleaner_threads == 0 {
            bail!(
                "--log-cleaner-threads 0: at least one cleaner is needed, or compacted topics would keep every record"
            );
        }
        let log_cleaner_dedupe_buffer_bytes = size(
            "--log-cleaner-dedupe-buffer-size",
            args.log_cleaner_dedupe_buffer_size,
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
            broker_defaults.log_cleaner_io_max_bytes_per_second,
        )?;
        let log_cleaner_backoff = match args.log_cleaner_backoff {
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
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            schema_registry_explicit: args.schema_registry_addr.is_some(),
            schema_registry_addr: match args.schema_registry_addr.as_deref().map(str::trim) {
                None => Some(SocketAddr::from(([127, 0, 0, 1], 8081))),
                Some("off") => None,
                Some(v) => Some(v.parse().map_err(|_| {
                    anyhow::anyhow!(
                        "--schema-registry-addr '{v}': expected HOST:PORT (an IP address and a port) or off"
                    )
                })?),
            },
            controller_addr,
            controller_voters: parse_voters(&voters)?,
            object_store,
            auto_create_topics: args
                .auto_create_topics
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
                .unwrap_or(BrokerConfig::default().fetch_session_slots),
            broker_session_timeout,
        })
    }
}
