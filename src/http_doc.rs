//! The OpenAPI description of the broker's own HTTP endpoints (`/metrics` and `/v1/...`,
//! served by [`crate::http`]), merged into the gateway's `/openapi.json` so that one
//! document lists every path the HTTP address answers.

use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    paths(
        metrics,
        tier_status,
        hot_partitions,
        cleaner_status,
        iceberg_status,
        iceberg_compact,
        iceberg_expire
    ),
    tags((name = "broker", description = "The broker's own state: metrics, tiering, the log cleaner, Iceberg tables. /metrics is open; the rest need Describe (GET) or Alter (POST) on the cluster when the authorizer is on."))
)]
struct BrokerApi;

/// The description of the broker's own endpoints.
pub fn document() -> utoipa::openapi::OpenApi {
    BrokerApi::openapi()
}

/// Prometheus text exposition of the broker's metrics (open, as Kafka's JMX exporter).
#[utoipa::path(get, path = "/metrics", tag = "broker",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
#[allow(dead_code)]
fn metrics() {}

/// Every hosted partition's tiering state (`strata tier status`): local and remote
/// ranges, offload lag, Parquet progress and a conversion that keeps failing.
#[utoipa::path(get, path = "/v1/tier/status", tag = "broker",
    responses((status = 200, description = "The tier status", body = Object, content_type = "application/json")))]
#[allow(dead_code)]
fn tier_status() {}

/// The busiest partitions this broker leads and their hottest keys (`strata topic hot`).
#[utoipa::path(get, path = "/v1/partitions/hot", tag = "broker",
    params(
        ("top" = Option<usize>, Query, description = "How many partitions (default 10)"),
        ("keys" = Option<usize>, Query, description = "Hot keys per partition"),
        ("topic" = Option<String>, Query, description = "Only this topic's partitions"),
    ),
    responses(
        (status = 200, description = "The hottest partitions", body = Object, content_type = "application/json"),
        (status = 400, description = "A bad parameter, named", body = String),
    ))]
#[allow(dead_code)]
fn hot_partitions() {}

/// Every compacted partition's cleaner state (`strata topic describe --http`).
#[utoipa::path(get, path = "/v1/cleaner/status", tag = "broker",
    responses((status = 200, description = "The log cleaner's state", body = Object, content_type = "application/json")))]
#[allow(dead_code)]
fn cleaner_status() {}

/// A parquet.enable topic's Iceberg table and Parquet files (`strata tier iceberg status`).
#[utoipa::path(get, path = "/v1/tier/iceberg/{topic}", tag = "broker",
    params(("topic" = String, Path, description = "A parquet.enable topic hosted here")),
    responses(
        (status = 200, description = "The table's status", body = Object, content_type = "application/json"),
        (status = 404, description = "No such topic here, or not parquet.enable", body = String),
        (status = 409, description = "This broker has no object store engines can read", body = String),
        (status = 502, description = "The object store or the table failed", body = String),
    ))]
#[allow(dead_code)]
fn iceberg_status() {}

/// Rewrites the topic's small Parquet files at its partitions' next round
/// (`strata tier iceberg compact`).
#[utoipa::path(post, path = "/v1/tier/iceberg/{topic}/compact", tag = "broker",
    params(("topic" = String, Path, description = "A parquet.enable topic hosted here")),
    responses(
        (status = 200, description = "The partitions asked here, and those led elsewhere", body = Object, content_type = "application/json"),
        (status = 404, description = "No such topic here, or not parquet.enable", body = String),
        (status = 409, description = "This broker has no object store", body = String),
    ))]
#[allow(dead_code)]
fn iceberg_compact() {}

/// Expires the table's old snapshots and the files only they held
/// (`strata tier iceberg expire`).
#[utoipa::path(post, path = "/v1/tier/iceberg/{topic}/expire", tag = "broker",
    params(
        ("topic" = String, Path, description = "A parquet.enable topic hosted here"),
        ("max_age_ms" = Option<i64>, Query, description = "Expire snapshots older than this (default an hour)"),
        ("retain_last" = Option<usize>, Query, description = "Always keep this many newest snapshots (default 10)"),
    ),
    responses(
        (status = 200, description = "What was expired and deleted", body = Object, content_type = "application/json"),
        (status = 400, description = "A bad parameter, named", body = String),
        (status = 404, description = "No such topic or table here", body = String),
        (status = 409, description = "This broker has no object store engines can read", body = String),
        (status = 502, description = "The object store or the table failed", body = String),
    ))]
#[allow(dead_code)]
fn iceberg_expire() {}
