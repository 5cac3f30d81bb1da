//! The HTTP listener: /metrics (Prometheus), /v1/tier/status, /v1/cleaner/status, and
//! the REST gateway
//! (strata-gateway: /healthz, /readyz, /openapi.json, the Confluent-compatible API).

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use strata_broker::Broker;

/// `auth` (`--http-auth`) guards the two status routes as it guards the gateway: they
/// name every topic and partition. /metrics stays open, as Prometheus scrapes it without
/// credentials (Kafka's JMX exporter is unauthenticated too); guard it at the network.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: PrometheusHandle,
    broker: Arc<Broker>,
    gateway: Router,
    auth: Option<strata_gateway::Auth>,
) {
    let cleaner_broker = broker.clone();
    let tier = Router::new()
        .route(
            "/v1/tier/status",
            get(move || {
                let b = broker.clone();
                async move { axum::Json(b.tier_status()) }
            }),
        )
        .route(
            "/v1/cleaner/status",
            get(move || {
                let b = cleaner_broker.clone();
                // The assessment reads a header per compacted partition: off the runtime.
                async move {
                    match tokio::task::spawn_blocking(move || b.cleaner_status()).await {
                        Ok(s) => Ok(axum::Json(s)),
                        Err(_) => Err(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
                    }
                }
            }),
        );
    let app = Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .merge(strata_gateway::require_auth(tier, auth))
        .merge(gateway);
    // Small writes (a server-sent event, a short JSON answer) go out at once: with Nagle's
    // algorithm on, each would wait for the client's delayed ACK (up to 40 ms).
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an HTTP connection");
        }
    });
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}
