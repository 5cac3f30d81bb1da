//! Strata's HTTP REST gateway. It owns the REST API the broker serves: Confluent REST
//! Proxy v2 (topics, produce, consumer instances) and v3 (produce and admin). It also
//! serves stateless partition reads, server-sent event streams that commit as the client
//! acknowledges, dead letters, `Idempotency-Key` on produce, /healthz and /readyz, and
//! an OpenAPI document at /openapi.json generated from the handlers.
//!
//! The gateway talks to the cluster only through [`service::Service`].
//! [`kafka::KafkaService`] implements it with librdkafka against the broker's own Kafka
//! listener.
//!
//! Public modules:
//! - [`acl`]: authorization of each call by the Kafka ACLs a Kafka client would need.
//! - [`auth`]: `--http-auth` identities, and the [`Caller`] a request carries.
//! - [`consumers`]: v2 consumer instances: their registry, idle expiry and handlers.
//! - [`dlq`]: dead letters: a rejected record is copied to its dead-letter topic; what
//!   json readers do with a record that is not JSON.
//! - [`error`]: errors in Confluent's shape; Kafka error codes mapped to statuses.
//! - [`idempotency`]: `Idempotency-Key` on produce: the first answer kept and replayed.
//! - [`kafka`]: [`kafka::KafkaService`], the [`Service`] as a Kafka client of the broker.
//! - [`openapi`]: the OpenAPI document, generated from the handlers' annotations.
//! - [`producer`]: the produce path: an idempotent Kafka producer over the wire protocol.
//! - [`queue`]: the produce queue: what requests may hold in memory, in records and bytes.
//! - [`service`]: [`Service`], the one interface between the gateway and a Kafka cluster.
//!
//! The other routes' handlers are private: `v2`, `v3` (produce), `v3_admin` and
//! `v3_alter` (admin reads and writes), `sse` (streams), with `util` for their plumbing.

pub mod acl;
pub mod auth;
pub mod consumers;
pub mod dlq;
pub mod error;
pub mod idempotency;
pub mod kafka;
pub mod openapi;
pub mod producer;
pub mod queue;
pub mod service;
mod sse;
mod util;
mod v2;
mod v3;
mod v3_admin;
mod v3_alter;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};

pub use acl::{Access, Authorizer};
pub use auth::{
    ANONYMOUS, Audit, Auth, AuthFailure, BEARER_PRINCIPAL, Caller, Credentials, Identity, Peer,
};
pub use error::{ApiError, ErrorBody};
pub use service::{Service, ServiceError};

use crate::consumers::Consumers;
use crate::idempotency::Idempotency;

/// Requires `auth` on every route of `router`, answering as the gateway does: 401 with
/// `WWW-Authenticate`, credentials that match no identity reported to `audit`. Every request that passes carries its [`Caller`] in its
/// extensions (`User:ANONYMOUS` when `auth` is None), for a check such as
/// [`require_access`]. For routes outside the gateway that the same `--http-auth`
/// guards (the broker's /v1/tier/status).
pub fn require_auth<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    auth: Option<Auth>,
    audit: Option<Audit>,
) -> Router<S> {
    let guard = Arc::new((auth, audit));
    router.route_layer(middleware::from_fn(move |mut req: Request, next: Next| {
        let guard = guard.clone();
        async move {
            match auth::authenticate(
                guard.0.as_ref(),
                guard.1.as_ref(),
                req.headers(),
                req.extensions(),
            ) {
                Ok(caller) => {
                    req.extensions_mut().insert(caller);
                    next.run(req).await
                }
                Err(e) => e.into_response(),
            }
        }
    }))
}

/// Requires `operation` on a resource of every route of `router` (by `authorizer`;
/// nothing when None), answering 403 as the gateway does. Goes inside
/// [`require_auth`], whose [`Caller`] it checks: a request without one is 401.
pub fn require_access<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    authorizer: Option<Authorizer>,
    operation: strata_authz::Operation,
    resource_type: strata_authz::ResourceType,
    name: &'static str,
) -> Router<S> {
    let Some(authorizer) = authorizer else {
        return router;
    };
    router.route_layer(middleware::from_fn(move |req: Request, next: Next| {
        let authorizer = authorizer.clone();
        async move {
            let Some(c) = req.extensions().get::<Caller>() else {
                return unauthorized();
            };
            let ok = authorizer.allows(&Access {
                principal: &c.principal,
                host: c.host,
                operation,
                resource_type,
                name,
                audit: true,
            });
            if ok {
                next.run(req).await
            } else {
                acl::forbidden(match resource_type {
                    strata_authz::ResourceType::Cluster => "Cluster authorization failed.".into(),
                    _ => format!("Not authorized to access {}: {name}", resource_type.name()),
                })
                .into_response()
            }
        }
    }))
}

fn unauthorized() -> Response {
    auth::unauthorized().into_response()
}

/// The gateway's settings.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The cluster id v3 paths name.
    pub cluster_id: String,
    /// Who may call (None: anyone, as `User:ANONYMOUS`).
    pub auth: Option<Auth>,
    /// What each caller's principal may do (None: everything, as Kafka without an
    /// authorizer).
    pub authorizer: Option<Authorizer>,
    /// Where credentials that match no identity are reported (None: nowhere).
    pub audit: Option<Audit>,
    /// Largest request body (and, in a streamed v3 produce, largest record).
    pub max_body_bytes: usize,
    /// A v2 consumer instance unused this long is closed (Confluent's
    /// consumer.instance.timeout.ms, 5 minutes).
    pub consumer_idle_timeout: Duration,
    /// Consumer instances and SSE streams open at once (each is a Kafka client with its
    /// own threads and connections).
    pub max_consumers: usize,
    /// Idempotency keys remembered, and for how long.
    pub idempotency_keys: usize,
    pub idempotency_ttl: Duration,
    /// A records request's wait when it names none (Confluent's
    /// consumer.request.timeout.ms) and the most it may ask for.
    pub default_poll_timeout: Duration,
    pub max_poll_timeout: Duration,
    /// A records request's byte budget when it names none.
    pub default_max_bytes: usize,
    /// A nacked record goes to `{topic}{dlq_suffix}` (`.dlq`).
    pub dlq_suffix: String,
    /// What is wrong but does not stop the process (a Parquet conversion that keeps
    /// failing, say): /healthz lists it. None: nothing to ask.
    pub health: Option<Health>,
    /// Paths the process serves beside the gateway (the broker's /metrics and /v1/...),
    /// merged into /openapi.json so that it lists every path of the HTTP address.
    pub extra_openapi: Option<ExtraOpenApi>,
}

/// The OpenAPI description of paths served beside the gateway.
#[derive(Clone)]
pub struct ExtraOpenApi(pub utoipa::openapi::OpenApi);

impl std::fmt::Debug for ExtraOpenApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExtraOpenApi(..)")
    }
}

/// Problems the process knows of that a restart would not fix, one line each.
#[derive(Clone)]
pub struct Health(pub Arc<dyn Fn() -> Vec<String> + Send + Sync>);

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Health(..)")
    }
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            cluster_id: "strata".into(),
            auth: None,
            authorizer: None,
            audit: None,
            max_body_bytes: 8 << 20,
            consumer_idle_timeout: Duration::from_secs(300),
            max_consumers: 100,
            idempotency_keys: 10_000,
            idempotency_ttl: Duration::from_secs(3600),
            default_poll_timeout: Duration::from_secs(1),
            max_poll_timeout: Duration::from_secs(30),
            default_max_bytes: 8 << 20,
            dlq_suffix: ".dlq".to_string(),
            health: None,
            extra_openapi: None,
        }
    }
}

/// What every handler shares.
pub struct AppState {
    pub service: Arc<dyn Service>,
    pub config: GatewayConfig,
    pub consumers: Arc<Consumers>,
    pub idempotency: Arc<Idempotency>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

pub type Shared = Arc<AppState>;

/// Routes as they are added, so a test can compare them with the OpenAPI document.
struct Routes {
    router: Router<Shared>,
    served: Vec<(String, String)>,
}

impl Routes {
    fn add(mut self, path: &str, methods: &[&str], route: MethodRouter<Shared>) -> Routes {
        for m in methods {
            self.served.push((m.to_string(), path.to_string()));
        }
        self.router = self.router.route(path, route);
        self
    }
}

fn routes() -> Routes {
    let r = Routes {
        router: Router::new(),
        served: Vec::new(),
    };
    r.add("/healthz", &["get"], get(healthz))
        .add("/readyz", &["get"], get(readyz))
        .add("/openapi.json", &["get"], get(openapi::serve))
        .add("/topics", &["get"], get(v2::list_topics))
        .add(
            "/topics/{topic}",
            &["get", "post"],
            get(v2::get_topic).post(v2::produce),
        )
        .add(
            "/topics/{topic}/partitions/{partition}",
            &["post"],
            post(v2::produce_partition),
        )
        .add(
            "/topics/{topic}/partitions/{partition}/records",
            &["get"],
            get(v2::read_partition),
        )
        .add(
            "/consumers/{group}",
            &["post"],
            post(consumers::instances::create),
        )
        .add(
            "/consumers/{group}/instances/{instance}",
            &["delete"],
            delete(consumers::instances::delete_instance),
        )
        .add(
            "/consumers/{group}/instances/{instance}/subscription",
            &["get", "post", "delete"],
            get(consumers::subscription::get_subscription)
                .post(consumers::subscription::subscribe)
                .delete(consumers::subscription::unsubscribe),
        )
        .add(
            "/consumers/{group}/instances/{instance}/assignments",
            &["get"],
            get(consumers::subscription::assignments),
        )
        .add(
            "/consumers/{group}/instances/{instance}/records",
            &["get"],
            get(consumers::records::records),
        )
        .add(
            "/consumers/{group}/instances/{instance}/offsets",
            &["get", "post"],
            get(consumers::offsets::committed).post(consumers::offsets::commit),
        )
        .add(
            "/consumers/{group}/instances/{instance}/positions",
            &["post"],
            post(consumers::offsets::seek),
        )
        .add(
            "/consumers/{group}/instances/{instance}/positions/beginning",
            &["post"],
            post(consumers::offsets::seek_beginning),
        )
        .add(
            "/consumers/{group}/instances/{instance}/positions/end",
            &["post"],
            post(consumers::offsets::seek_end),
        )
        .add(
            "/consumers/{group}/instances/{instance}/nack",
            &["post"],
            post(dlq::nack_instance),
        )
        .add(
            "/consumers/{group}/stream/{session}/nack",
            &["post"],
            post(dlq::nack_stream),
        )
        .add("/consumers/{group}/stream", &["get"], get(sse::stream))
        .add(
            "/consumers/{group}/stream/{session}/ack",
            &["post"],
            post(sse::ack),
        )
        .add("/v3/clusters", &["get"], get(v3::list_clusters))
        .add(
            "/v3/clusters/{cluster}/brokers",
            &["get"],
            get(v3_admin::list_brokers),
        )
        .add(
            "/v3/clusters/{cluster}/consumer-groups",
            &["get"],
            get(v3_admin::list_groups),
        )
        .add(
            "/v3/clusters/{cluster}/consumer-groups/{group}",
            &["get"],
            get(v3_admin::get_group),
        )
        .add(
            "/v3/clusters/{cluster}/consumer-groups/{group}/consumers",
            &["get"],
            get(v3_admin::list_consumers),
        )
        .add(
            "/v3/clusters/{cluster}/consumer-groups/{group}/lags",
            &["get"],
            get(v3_admin::list_lags),
        )
        .add(
            "/v3/clusters/{cluster}/consumer-groups/{group}/lag-summary",
            &["get"],
            get(v3_admin::lag_summary),
        )
        .add(
            "/v3/clusters/{cluster}/topics",
            &["get", "post"],
            get(v3_admin::list_topics).post(v3_alter::create_topic),
        )
        .add(
            "/v3/clusters/{cluster}/topics/{topic}",
            &["get", "delete"],
            get(v3_admin::get_topic).delete(v3_alter::delete_topic),
        )
        .add(
            "/v3/clusters/{cluster}/topics/{topic}/partitions",
            &["get"],
            get(v3_admin::list_partitions),
        )
        .add(
            "/v3/clusters/{cluster}/topics/{topic}/partitions/{partition}",
            &["get"],
            get(v3_admin::get_partition),
        )
        .add(
            "/v3/clusters/{cluster}/topics/{topic}/configs",
            &["get"],
            get(v3_admin::list_topic_configs),
        )
        .add(
            "/v3/clusters/{cluster}/topics/{topic}/configs/{name}",
            &["get", "put", "delete"],
            get(v3_alter::get_topic_config)
                .put(v3_alter::update_topic_config)
                .delete(v3_alter::reset_topic_config),
        )
        .add(
            "/v3/clusters/{cluster}/topics/{topic}/configs:alter",
            &["post"],
            post(v3_alter::alter_topic_configs),
        )
        .add(
            "/v3/clusters/{cluster}/topics/{topic}/records",
            &["post"],
            post(v3::produce),
        )
}

/// The (method, path) pairs the router serves.
pub fn served_routes() -> Vec<(String, String)> {
    routes().served
}

/// Paths that stay open when authentication is on.
const OPEN_PATHS: &[&str] = &["/healthz", "/readyz", "/openapi.json"];

/// The gateway's router. Starts the task that closes idle consumer instances, so it
/// must be called inside a tokio runtime.
pub fn router(service: Arc<dyn Service>, config: GatewayConfig) -> Router {
    gateway(service, config).0
}

/// Closes a gateway's consumer instances and streams.
#[derive(Debug, Clone)]
pub struct Handle {
    consumers: Arc<Consumers>,
}

impl Handle {
    /// Every consumer instance and stream member leaves its group. Call before the
    /// broker stops, so they leave cleanly instead of timing out.
    pub async fn close(&self) {
        self.consumers.close_all().await;
    }
}

/// The router and a handle to close it down.
pub fn gateway(service: Arc<dyn Service>, config: GatewayConfig) -> (Router, Handle) {
    let consumers = Consumers::new(config.consumer_idle_timeout, config.max_consumers);
    consumers::spawn_reaper(&consumers);
    let state = Arc::new(AppState {
        idempotency: Idempotency::new(config.idempotency_keys, config.idempotency_ttl),
        service,
        consumers: consumers.clone(),
        config,
    });
    let router = routes()
        .router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn(record_metrics))
        .with_state(state);
    (router, Handle { consumers })
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, 404, "HTTP 404 Not Found")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        405,
        "HTTP 405 Method Not Allowed",
    )
}

/// Liveness: the process answers (always 200: a restart would not fix what it lists).
/// The body is `ok`, then a `degraded: ...` line for each problem the broker knows of
/// that needs an operator (a Parquet conversion that keeps failing, say).
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process is up; `degraded:` lines name what needs an operator", body = String, content_type = "text/plain")))]
pub async fn healthz(State(s): State<Shared>) -> String {
    let mut body = String::from("ok\n");
    if let Some(health) = &s.config.health {
        for problem in (health.0)() {
            body.push_str("degraded: ");
            body.push_str(&problem);
            body.push('\n');
        }
    }
    body
}

/// Readiness: the gateway reaches the broker.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "The broker answers", body = String, content_type = "text/plain"),
        (status = 503, description = "The broker does not answer", body = ErrorBody),
    ))]
pub async fn readyz(State(s): State<Shared>) -> Response {
    if s.service.ready().await {
        "ready\n".into_response()
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            error::KAFKA_UNAVAILABLE,
            "The gateway cannot reach the broker.",
        )
        .into_response()
    }
}

/// Puts the request's [`Caller`] in its extensions, or answers 401 when
/// authentication is on and the request carries none of its identities. The open paths
/// need no credentials and get no caller.
async fn authenticate(State(s): State<Shared>, mut req: Request, next: Next) -> Response {
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    match auth::authenticate(
        s.config.auth.as_ref(),
        s.config.audit.as_ref(),
        req.headers(),
        req.extensions(),
    ) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

/// Counts requests and their latency by route (the route's template, never the raw
/// path, so label values stay bounded).
async fn record_metrics(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().as_str().to_string();
    let has_body = request_has_body(&req);
    let start = Instant::now();
    let mut response = next.run(req).await;
    // A refusal may come before the body is read (a 403 before a chunked stream, a 413
    // on its length): the server then cannot reuse the connection, so it says so. A
    // client that pooled it anyway would send its next request into a closed socket.
    if has_body && (response.status().is_client_error() || response.status().is_server_error()) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let status = response.status().as_u16().to_string();
    metrics::counter!("strata_http_requests_total", "method" => method.clone(), "route" => route.clone(), "status" => status).increment(1);
    metrics::histogram!("strata_http_request_duration_seconds", "method" => method, "route" => route)
        .record(start.elapsed().as_secs_f64());
    response
}

/// Whether the request carries a body (a length above zero, or chunked).
fn request_has_body(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(header::TRANSFER_ENCODING)
        || h.get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

#[cfg(test)]
mod tests;
