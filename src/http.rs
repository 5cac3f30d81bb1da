//! The HTTP listener: /metrics (Prometheus) and /healthz. The REST gateway joins it later.

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

pub async fn serve(listener: tokio::net::TcpListener, metrics: PrometheusHandle) {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .route("/healthz", get(|| async { "ok\n" }));
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}
