//! Confluent REST Proxy v2 consumer instances: each is a member of its Kafka consumer
//! group (so it shares partitions with any other member, HTTP or not), lives until it
//! is deleted or left unused for the idle timeout, and is capped in number because each
//! is a Kafka client with its own threads and connections.
//!
//! An instance belongs to the principal that created it: another principal's requests
//! are answered as for an instance that does not exist. Every request asks Read on the
//! group, and Read (Describe to look) on the topics it names, as the broker asks a Kafka
//! consumer's JoinGroup, Heartbeat, OffsetCommit and Fetch.
//!
//! The handlers are split by what they act on: [`instances`], [`subscription`],
//! [`records`] and [`offsets`]. The registry of open instances is [`Consumers`]; this
//! file holds the lookup and body parsing every handler starts with.

pub mod instances;
pub mod offsets;
pub mod records;
mod registry;
pub mod subscription;

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use strata_authz::Operation;

pub(crate) use self::registry::StreamMember;
pub use self::registry::{Consumers, Instance, spawn_reaper};
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::util::{self, JSON, V2};
use crate::{Shared, acl};

/// Media types consumer requests may carry.
const CONSUMER_TYPES: &[&str] = &[V2, "application/vnd.kafka+json", JSON];

/// The caller's instance, once it may read the group (403 otherwise; 404 for an
/// instance that is not the caller's).
fn instance(s: &Shared, c: &Caller, group: &str, name: &str) -> ApiResult<Arc<Instance>> {
    acl::group(s, c, Operation::Read, group)?;
    s.consumers.get(group, name, &c.principal)
}

/// The caller's instance `name` of `group` (Read on the group), for other modules.
pub(crate) fn instance_for(
    s: &Shared,
    c: &Caller,
    group: &str,
    name: &str,
) -> ApiResult<Arc<Instance>> {
    instance(s, c, group, name)
}

async fn body_json<T: serde::de::DeserializeOwned>(
    s: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Option<T>> {
    let bytes = util::read_body(headers, body, s.config.max_body_bytes).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    util::require_content_type(headers, CONSUMER_TYPES)?;
    util::parse_optional_json(&bytes)
}
