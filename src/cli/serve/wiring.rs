//! `strata serve`'s process: the controller, the tier, the listeners, the broker, the
//! HTTP address and the REST gateway opened in order, then shutdown on a signal.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use strata_broker::{Broker, BrokerConfig, Server};
use strata_cache::{CacheConfig, ChunkCache, DiskConfig};
use strata_controller::{Controller, ControllerClient, ControllerConfig, StartOptions};
use strata_log::SystemClock;
use strata_tier::{StoreSource, Tier, TierConfig};

use super::{ServeArgs, ServeConfig};

impl ServeConfig {
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
    let registry = match config.schema_registry_addr {
        None => None,
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) if config.schema_registry_explicit => {
                return Err(anyhow::anyhow!(
                    "--schema-registry-addr {addr}: cannot listen: {e}"
                ));
            }
            Err(e) => {
                tracing::warn!(%addr, error = %e, "the schema registry's default address is taken: it is not served; pass --schema-registry-addr to serve it elsewhere");
                None
            }
        },
    };
    // Registered beside the Kafka listeners: the other brokers forward registry
    // writes to the writer's address.
    if let Some(addr) = registry.as_ref().and_then(|l| l.local_addr().ok()) {
        let host = if addr.ip().is_unspecified() {
            advertised.0.clone()
        } else {
            addr.ip().to_string()
        };
        endpoints.push(strata_controller::Endpoint {
            name: strata_broker::schemas::REGISTRY_ENDPOINT.to_string(),
            host,
            port: addr.port(),
        });
    }
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
    let registry_addr = registry
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map_or_else(|| "-".to_string(), |a| a.to_string());
    let registry_task = registry.map(|l| {
        let app = crate::registry::router(
            broker.clone(),
            config.http_auth.clone(),
            Some(crate::http::audit()),
        );
        tokio::spawn(async move {
            if let Err(e) = axum::serve(l, app).await {
                tracing::warn!(error = %e, "the schema registry's listener stopped");
            }
        })
    });
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
        "strata listening kafka={} http={} controller={} data={} listeners={} registry={}",
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
        registry_addr,
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
    if let Some(t) = registry_task {
        t.abort();
    }
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
        health: Some(crate::http::health(broker)),
        extra_openapi: Some(strata_gateway::ExtraOpenApi(crate::http_doc::document())),
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
