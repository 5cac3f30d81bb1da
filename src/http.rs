//! The HTTP listener: /metrics (Prometheus), /healthz, and /v1/tier/status. The REST
//! gateway joins it later.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use strata_broker::Broker;

pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: PrometheusHandle,
    broker: Arc<Broker>,
) {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/v1/tier/status",
            get(move || {
                let b = broker.clone();
                async move { axum::Json(b.tier_status()) }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}
