//! Authorization of REST calls: each asks what a Kafka client doing the same would be
//! asked by the broker (Write on a topic to produce, Read on a topic and on the group to
//! consume, Describe on a topic to see it), of the principal its `--http-auth` identity
//! maps to. The gateway's own Kafka clients run as the broker, so these checks are what
//! guards the data over HTTP.
//!
//! As in Kafka, authorization comes before existence: a topic the principal may not
//! describe answers 403 whether it exists or not, and listings leave out what it may not
//! describe.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use axum::http::StatusCode;
use strata_authz::{Operation, ResourceType};

use crate::Shared;
use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult};

/// One question to the authorizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access<'a> {
    /// `User:NAME`.
    pub principal: &'a str,
    /// The HTTP client's address.
    pub host: IpAddr,
    pub operation: Operation,
    pub resource_type: ResourceType,
    pub name: &'a str,
    /// False when a denial only leaves something out of an answer (a topic listing),
    /// which Kafka does not log (its `logIfDenied`); true when it refuses the call.
    pub audit: bool,
}

type Decide = dyn Fn(&Access<'_>) -> bool + Send + Sync;

/// Decides whether a principal may do an operation on a resource (the broker's
/// authorizer, in `strata serve`). None in [`crate::GatewayConfig`]: everything is
/// allowed, as Kafka without an authorizer.
#[derive(Clone)]
pub struct Authorizer(Arc<Decide>);

impl Authorizer {
    pub fn new(decide: impl Fn(&Access<'_>) -> bool + Send + Sync + 'static) -> Authorizer {
        Authorizer(Arc::new(decide))
    }

    pub fn allows(&self, access: &Access<'_>) -> bool {
        (self.0)(access)
    }
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorizer")
    }
}

/// Whether the caller may; `audit` as [`Access::audit`].
pub(crate) fn allowed(
    s: &Shared,
    c: &Caller,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
    audit: bool,
) -> bool {
    let Some(a) = &s.config.authorizer else {
        return true;
    };
    a.allows(&Access {
        principal: &c.principal,
        host: c.host,
        operation,
        resource_type,
        name,
        audit,
    })
}

/// Whether an authorizer is on (checks can be skipped, and listings left whole, without).
pub(crate) fn enabled(s: &Shared) -> bool {
    s.config.authorizer.is_some()
}

/// 403 with Confluent's code for a Kafka authorization error.
pub(crate) fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, error::NOT_AUTHORIZED, message)
}

/// Kafka's TopicAuthorizationException message.
pub(crate) fn topics_denied<'a>(topics: impl IntoIterator<Item = &'a str>) -> ApiError {
    let names: Vec<&str> = topics.into_iter().collect();
    forbidden(format!(
        "Not authorized to access topics: [{}]",
        names.join(", ")
    ))
}

/// `operation` on a topic, or 403.
pub(crate) fn topic(s: &Shared, c: &Caller, operation: Operation, topic: &str) -> ApiResult<()> {
    if allowed(s, c, operation, ResourceType::Topic, topic, true) {
        Ok(())
    } else {
        Err(topics_denied([topic]))
    }
}

/// `operation` on every topic named, or 403 naming those denied.
pub(crate) fn topics<'a>(
    s: &Shared,
    c: &Caller,
    operation: Operation,
    topics: impl IntoIterator<Item = &'a str>,
) -> ApiResult<()> {
    if !enabled(s) {
        return Ok(());
    }
    let distinct: BTreeSet<&str> = topics.into_iter().collect();
    let denied: Vec<&str> = distinct
        .into_iter()
        .filter(|t| !allowed(s, c, operation, ResourceType::Topic, t, true))
        .collect();
    if denied.is_empty() {
        Ok(())
    } else {
        Err(topics_denied(denied))
    }
}

/// DescribeConfigs or AlterConfigs on a topic, or 403 saying which.
pub(crate) fn topic_configs(
    s: &Shared,
    c: &Caller,
    operation: Operation,
    topic: &str,
) -> ApiResult<()> {
    if allowed(s, c, operation, ResourceType::Topic, topic, true) {
        return Ok(());
    }
    let verb = if operation == Operation::AlterConfigs {
        "alter"
    } else {
        "describe"
    };
    Err(forbidden(format!(
        "Not authorized to {verb} the configs of topic '{topic}'."
    )))
}

/// `operation` on a consumer group, or 403 (Kafka's GroupAuthorizationException).
pub(crate) fn group(s: &Shared, c: &Caller, operation: Operation, group: &str) -> ApiResult<()> {
    if allowed(s, c, operation, ResourceType::Group, group, true) {
        Ok(())
    } else {
        Err(forbidden(format!(
            "Not authorized to access group: {group}"
        )))
    }
}

/// Whether the caller may see a topic exists (Describe), unaudited: for leaving topics
/// out of an answer.
pub(crate) fn may_describe(s: &Shared, c: &Caller, topic: &str) -> bool {
    allowed(s, c, Operation::Describe, ResourceType::Topic, topic, false)
}
