//! The OpenAPI document, generated from the handlers' annotations.

use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::{consumers, dlq, sse, v2, v3, v3_admin, v3_alter};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Strata REST gateway",
        description = "Confluent REST Proxy v2 (topics, produce, consumer instances) and v3 (produce; admin: topics, partitions, configs, brokers, consumer groups and lag), plus stateless reads and server-sent event streams. Errors are {\"error_code\", \"message\"}. When authentication is configured, every path except /healthz, /readyz and /openapi.json needs a bearer token or basic credentials (401 otherwise); with the broker's authorizer on, each call needs the Kafka ACLs a Kafka client doing the same would need (403, error_code 40301, otherwise).",
    ),
    paths(
        crate::healthz,
        crate::readyz,
        serve,
        v2::list_topics,
        v2::get_topic,
        v2::produce,
        v2::produce_partition,
        v2::read_partition,
        consumers::instances::create,
        consumers::instances::delete_instance,
        consumers::subscription::subscribe,
        consumers::subscription::get_subscription,
        consumers::subscription::unsubscribe,
        consumers::subscription::assignments,
        consumers::records::records,
        consumers::offsets::commit,
        consumers::offsets::committed,
        consumers::offsets::seek,
        consumers::offsets::seek_beginning,
        consumers::offsets::seek_end,
        sse::stream,
        sse::ack,
        dlq::nack_instance,
        dlq::nack_stream,
        v3::list_clusters,
        v3::produce,
        v3_admin::list_topics,
        v3_admin::get_topic,
        v3_admin::list_partitions,
        v3_admin::get_partition,
        v3_admin::list_topic_configs,
        v3_alter::create_topic,
        v3_alter::delete_topic,
        v3_alter::get_topic_config,
        v3_alter::update_topic_config,
        v3_alter::reset_topic_config,
        v3_alter::alter_topic_configs,
        v3_admin::list_brokers,
        v3_admin::list_groups,
        v3_admin::get_group,
        v3_admin::list_consumers,
        v3_admin::list_lags,
        v3_admin::lag_summary,
    ),
    components(schemas(v2::Format)),
    modifiers(&Security),
)]
#[derive(Debug)]
pub struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Basic).build()),
        );
    }
}

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object)))]
pub async fn serve(axum::extract::State(s): axum::extract::State<crate::Shared>) -> Response {
    let mut doc = document();
    if let Some(extra) = &s.config.extra_openapi {
        doc.merge(extra.0.clone());
    }
    axum::Json(doc).into_response()
}
