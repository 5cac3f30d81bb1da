//! Audit: one structured log line (target `strata::audit`) and a counter for every
//! authentication failure and every authorization denial, naming the principal, the
//! client's address, the operation and the resource.
//!
//! Lines go to the `strata::audit` tracing target at WARN, so an operator can route them
//! apart (`RUST_LOG=strata::audit=warn`) or silence them; the counters
//! (`strata_authentication_failures_total`, `strata_authorization_denials_total`) are
//! always complete.

use std::net::SocketAddr;

use crate::listener::SecurityProtocol;

/// A client failed to authenticate: a TLS handshake (an untrusted or missing
/// certificate), or a SASL exchange (a wrong password, an expired token).
pub fn authentication_failed(
    peer: SocketAddr,
    listener: SecurityProtocol,
    mechanism: &str,
    principal: Option<&str>,
    reason: &str,
) {
    authentication_failed_on(peer, listener.name(), mechanism, principal, reason);
}

/// The same, on a listener other than Kafka's: `HTTP` or `HTTPS` (the REST gateway's
/// credentials, the HTTP address's client certificates).
pub fn authentication_failed_on(
    peer: SocketAddr,
    listener: &'static str,
    mechanism: &str,
    principal: Option<&str>,
    reason: &str,
) {
    metrics::counter!(
        "strata_authentication_failures_total",
        "listener" => listener,
        "mechanism" => mechanism.to_string()
    )
    .increment(1);
    tracing::warn!(
        target: "strata::audit",
        event = "authentication_failed",
        %peer,
        listener,
        mechanism,
        principal = principal.unwrap_or("-"),
        reason,
        "authentication failed"
    );
}

/// A request (or a part of one) was refused by the authorizer.
pub fn authorization_denied(
    peer: SocketAddr,
    principal: &str,
    operation: &str,
    resource_type: &str,
    resource: &str,
    api: &str,
    decision: &str,
) {
    metrics::counter!(
        "strata_authorization_denials_total",
        "operation" => operation.to_string(),
        "resource_type" => resource_type.to_string()
    )
    .increment(1);
    tracing::warn!(
        target: "strata::audit",
        event = "authorization_denied",
        %peer,
        principal,
        operation,
        resource_type,
        resource,
        api,
        decision,
        "authorization denied"
    );
}
