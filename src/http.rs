//! The HTTP listener: /metrics (Prometheus), /v1/tier/status, /v1/cleaner/status,
//! /v1/partitions/hot, and the REST gateway
//! (strata-gateway: /healthz, /readyz, /openapi.json, the Confluent-compatible API).

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use strata_broker::Broker;

/// The broker's authorizer as the gateway asks it (None with the authorizer off): the
/// principal an `--http-auth` identity maps to, from the HTTP client's address. A call
/// refused is audited as the API `rest`; what only leaves a topic out of an answer
/// ([`strata_gateway::Access::audit`] false) is not, as Kafka's Metadata filters without
/// logging. The broker's own authorizer (cached per metadata version) answers both.
pub fn authorizer(broker: &Arc<Broker>) -> Option<strata_gateway::Authorizer> {
    if !broker.security.authorizer_enabled() {
        return None;
    }
    let broker = broker.clone();
    Some(strata_gateway::Authorizer::new(move |a| {
        broker.security.authorize(
            a.principal,
            a.host,
            a.operation,
            a.resource_type,
            a.name,
            "rest",
            a.audit,
        )
    }))
}

/// What /healthz lists besides `ok`: each partition here whose Parquet conversion keeps
/// failing (local retention waits for it, so the local log grows until it is fixed).
pub fn health(broker: &Arc<Broker>) -> strata_gateway::Health {
    let broker = Arc::downgrade(broker);
    strata_gateway::Health(Arc::new(move || {
        let Some(broker) = broker.upgrade() else {
            return Vec::new();
        };
        broker
            .tiering
            .tier_status()
            .partitions
            .into_iter()
            .filter_map(|p| {
                let error = p.parquet_error?;
                Some(format!(
                    "the Parquet conversion of {}-{} has failed {} times since {} (local retention waits for it): {error}",
                    p.topic,
                    p.partition,
                    p.parquet_failures,
                    crate::cli::format_ms(p.parquet_failing_since_ms.unwrap_or(0)),
                ))
            })
            .collect()
    }))
}

/// REST credentials that match no identity, written to the broker's audit log (as a
/// Kafka listener's failures are).
pub fn audit() -> strata_gateway::Audit {
    strata_gateway::Audit::new(|f| {
        let unknown = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        strata_broker::audit::authentication_failed_on(
            f.peer.unwrap_or(unknown),
            f.listener,
            f.mechanism,
            f.user.as_deref(),
            f.reason,
        );
    })
}

/// `auth` (`--http-auth`) guards the two status routes as it guards the gateway: they
/// name every topic and partition, so with the authorizer on they also need Describe on
/// the cluster (as Kafka's DescribeLogDirs does). /metrics stays open, as Prometheus
/// scrapes it without credentials (Kafka's JMX exporter is unauthenticated too); guard
/// it at the network.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: PrometheusHandle,
    broker: Arc<Broker>,
    gateway: Router,
    auth: Option<strata_gateway::Auth>,
    tls: Option<Arc<strata_broker::tls::TlsServer>>,
) {
    let cleaner_broker = broker.clone();
    let broker_for_tls = broker.clone();
    let metrics_broker = broker.clone();
    let hot_broker = broker.clone();
    let iceberg_broker = broker.clone();
    let compact_broker = broker.clone();
    let expire_broker = broker.clone();
    let authorizer = authorizer(&broker);
    let admin_authorizer = authorizer.clone();
    let tier = Router::new()
        .route(
            "/v1/tier/status",
            get(move || {
                let b = broker.clone();
                async move { axum::Json(b.tiering.tier_status()) }
            }),
        )
        .route(
            "/v1/partitions/hot",
            get(move |q: axum::extract::Query<HotQuery>| {
                let b = hot_broker.clone();
                async move { hot_partitions(&b, &q) }
            }),
        )
        .route(
            "/v1/tier/iceberg/{topic}",
            get(
                move |axum::extract::Path(topic): axum::extract::Path<String>| {
                    let b = iceberg_broker.clone();
                    async move { table_answer(b.tiering.iceberg_status(&topic).await) }
                },
            ),
        )
        .route(
            "/v1/cleaner/status",
            get(move || {
                let b = cleaner_broker.clone();
                // The assessment reads a header per compacted partition: off the runtime.
                async move {
                    match tokio::task::spawn_blocking(move || {
                        strata_broker::cleaner::status(&b.replicas)
                    })
                    .await
                    {
                        Ok(s) => Ok(axum::Json(s)),
                        Err(_) => Err(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
                    }
                }
            }),
        );
    // What changes a table or its files needs Alter on the cluster, as Kafka's
    // AlterConfigs on the broker does.
    let table_admin = Router::new()
        .route(
            "/v1/tier/iceberg/{topic}/compact",
            post(
                move |axum::extract::Path(topic): axum::extract::Path<String>| {
                    let b = compact_broker.clone();
                    std::future::ready(table_answer(b.tiering.request_compaction(&topic)))
                },
            ),
        )
        .route(
            "/v1/tier/iceberg/{topic}/expire",
            post(
                move |axum::extract::Path(topic): axum::extract::Path<String>,
                      q: axum::extract::Query<ExpireQuery>| {
                    let b = expire_broker.clone();
                    async move { expire_table(&b, &topic, &q).await }
                },
            ),
        );
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let mut text = metrics.render();
                metrics_broker.render_metrics(&mut text);
                std::future::ready(text)
            }),
        )
        .merge(strata_gateway::require_auth(
            strata_gateway::require_access(
                tier,
                authorizer,
                strata_authz::Operation::Describe,
                strata_authz::ResourceType::Cluster,
                strata_authz::CLUSTER_NAME,
            ),
            auth.clone(),
            Some(audit()),
        ))
        .merge(strata_gateway::require_auth(
            strata_gateway::require_access(
                table_admin,
                admin_authorizer,
                strata_authz::Operation::Alter,
                strata_authz::ResourceType::Cluster,
                strata_authz::CLUSTER_NAME,
            ),
            auth,
            Some(audit()),
        ))
        .merge(gateway);
    use axum::serve::ListenerExt;
    let app_router = app; // made a service below, with the connect info of its listener
    let served = match tls {
        None => {
            // The client's address reaches the authorizer (ACLs may name hosts).
            let app = app_router.into_make_service_with_connect_info::<std::net::SocketAddr>();
            // Small writes (a server-sent event, a short JSON answer) go out at once: with
            // Nagle's algorithm on, each would wait for the client's delayed ACK (up to
            // 40 ms).
            let listener = listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY on an HTTP connection");
                }
            });
            axum::serve(listener, app).await
        }
        Some(tls) => {
            // Over TLS the connection's identity comes with it: ConnectInfo<Peer>.
            let app = app_router.into_make_service_with_connect_info::<strata_gateway::Peer>();
            let listener = TlsListener::start(listener, tls, broker_for_tls).tap_io(|_| {});
            axum::serve(listener, app).await
        }
    };
    if let Err(e) = served {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}

/// The HTTP address over TLS: connections are accepted and their handshakes run on tasks
/// of their own (a client that stalls its handshake holds only its own task, for at most
/// 10 s), and handed to the server as they complete, with the principal of the client's
/// certificate if it sent one (`--http-client-auth`; rustls has verified it).
struct TlsListener {
    local: strata_gateway::Peer,
    ready: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        strata_gateway::Peer,
    )>,
}

impl TlsListener {
    fn start(
        listener: tokio::net::TcpListener,
        tls: Arc<strata_broker::tls::TlsServer>,
        broker: Arc<Broker>,
    ) -> TlsListener {
        let local = strata_gateway::Peer {
            addr: listener
                .local_addr()
                .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
            certificate: None,
        };
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "HTTP accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                if tx.is_closed() {
                    return;
                }
                let acceptor = tls.acceptor();
                let tx = tx.clone();
                let broker = broker.clone();
                tokio::spawn(async move {
                    let handshake = acceptor.accept(tcp);
                    match tokio::time::timeout(std::time::Duration::from_secs(10), handshake).await
                    {
                        Ok(Ok(stream)) => {
                            let certificate = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .map(|leaf| broker.security.certificate_principal(leaf.as_ref()));
                            if let Some(Err(why)) = &certificate {
                                strata_broker::audit::authentication_failed_on(
                                    peer, "HTTPS", "TLS", None, why,
                                );
                            }
                            let peer = strata_gateway::Peer {
                                addr: peer,
                                certificate,
                            };
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            // An untrusted or missing client certificate fails here.
                            tracing::debug!(%peer, error = %e, "HTTP TLS handshake failed");
                            if matches!(
                                e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()),
                                Some(
                                    rustls::Error::InvalidCertificate(_)
                                        | rustls::Error::NoCertificatesPresented
                                )
                            ) {
                                strata_broker::audit::authentication_failed_on(
                                    peer,
                                    "HTTPS",
                                    "TLS",
                                    None,
                                    &e.to_string(),
                                );
                            }
                        }
                        Err(_) => tracing::debug!(%peer, "HTTP TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { local, ready }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = strata_gateway::Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local.clone())
    }
}

/// An Iceberg admin call's answer: its JSON, or the error as text with 404 (no such
/// topic or table here), 409 (this broker cannot) or 502 (the store failed).
fn table_answer<T: serde::Serialize>(
    r: Result<T, strata_tier::tiering::TableAdminError>,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use strata_tier::tiering::TableAdminError as E;
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => {
            let code = match &e {
                E::NotFound(_) => StatusCode::NOT_FOUND,
                E::Unavailable(_) => StatusCode::CONFLICT,
                E::Failed(_) => StatusCode::BAD_GATEWAY,
            };
            (code, e.to_string()).into_response()
        }
    }
}

/// POST /v1/tier/iceberg/{topic}/expire: snapshots older than `max_age_ms` (default an
/// hour) beyond the newest `retain_last` (default 10) go.
#[derive(serde::Deserialize)]
struct ExpireQuery {
    max_age_ms: Option<i64>,
    retain_last: Option<usize>,
}

async fn expire_table(broker: &Broker, topic: &str, q: &ExpireQuery) -> axum::response::Response {
    use axum::response::IntoResponse;
    let max_age = q
        .max_age_ms
        .unwrap_or(strata_tier::iceberg::SNAPSHOT_MAX_AGE_MS);
    let retain_last = q.retain_last.unwrap_or(strata_tier::iceberg::MIN_SNAPSHOTS);
    if max_age < 0 {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            format!("max_age_ms={max_age}: give 0 or more milliseconds"),
        )
            .into_response();
    }
    if retain_last == 0 {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "retain_last=0: the current snapshot is always kept; give 1 or more".to_string(),
        )
            .into_response();
    }
    table_answer(
        broker
            .tiering
            .iceberg_expire(topic, max_age, retain_last)
            .await,
    )
}

/// GET /v1/partitions/hot: `top` partitions (default 10), `keys` keys each (default 5),
/// of `topic` if given.
#[derive(serde::Deserialize)]
struct HotQuery {
    top: Option<usize>,
    keys: Option<usize>,
    topic: Option<String>,
}

/// The busiest partitions this broker leads (`strata topic hot`), or 400 naming a bad
/// parameter.
fn hot_partitions(broker: &Broker, q: &HotQuery) -> axum::response::Response {
    use axum::response::IntoResponse;
    let bad = |m: String| (axum::http::StatusCode::BAD_REQUEST, m).into_response();
    let top = q.top.unwrap_or(10);
    let keys = q.keys.unwrap_or(5);
    if !(1..=100_000).contains(&top) {
        return bad(format!("top={top}: give 1 to 100000 partitions"));
    }
    let max_keys = strata_broker::traffic::SKETCH_KEYS;
    if keys > max_keys {
        return bad(format!(
            "keys={keys}: at most {max_keys} (the keys tracked per partition)"
        ));
    }
    axum::Json(
        broker
            .replicas
            .hot_partitions(top, keys, q.topic.as_deref()),
    )
    .into_response()
}
