//! The HTTP listener: /metrics (Prometheus), /v1/tier/status, and the REST gateway
//! (strata-gateway: /healthz, /readyz, /openapi.json, the Confluent-compatible API).

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use strata_broker::Broker;

pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: PrometheusHandle,
    broker: Arc<Broker>,
    gateway: Router,
) {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .route(
            "/v1/tier/status",
            get(move || {
                let b = broker.clone();
                async move { axum::Json(b.tier_status()) }
            }),
        )
        .merge(gateway);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}
