//! Who may do what in the registry, by the broker's ACLs (issue 37): a subject is guarded
//! by its topic under Confluent's TopicNameStrategy (`orders-value` and `orders-key` by
//! `Topic:orders`). Reading a subject needs Describe there, registering or deleting its
//! versions needs Write; a subject of another naming strategy (RecordNameStrategy's
//! `com.acme.Order`) is guarded by the cluster (Describe to read, Alter to change).
//! Compatibility levels and modes are changed with cluster Alter. Super users may do
//! everything (the authorizer's rule). With the authorizer off, everyone may.
//!
//! Subject routes are checked before their handler ([`guard`]); the subject list and the
//! schemas by id leave out what the caller may not describe ([`may_read`]).

use std::collections::HashMap;

use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use strata_authz::{CLUSTER_NAME, Operation, ResourceType};
use strata_broker::Broker;
use strata_gateway::auth::Caller;

use super::{Shared, error};

/// The resource that guards `subject`.
fn resource(subject: &str) -> (ResourceType, &str) {
    match subject
        .strip_suffix("-value")
        .or_else(|| subject.strip_suffix("-key"))
    {
        Some(topic) if !topic.is_empty() => (ResourceType::Topic, topic),
        _ => (ResourceType::Cluster, CLUSTER_NAME),
    }
}

fn allowed(
    b: &Broker,
    c: &Caller,
    operation: Operation,
    rt: ResourceType,
    name: &str,
    audit: bool,
) -> bool {
    !b.security.authorizer_enabled()
        || b.security.authorize(
            &c.principal,
            c.host,
            operation,
            rt,
            name,
            "schema-registry",
            audit,
        )
}

/// Whether `c` may read `subject` (filtering: not audited).
pub(super) fn may_read(b: &Broker, c: Option<&Caller>, subject: &str) -> bool {
    if !b.security.authorizer_enabled() {
        return true;
    }
    let Some(c) = c else { return false };
    let (rt, name) = resource(subject);
    allowed(b, c, Operation::Describe, rt, name, false)
}

/// What a request on a subject (or on the global config and mode) needs, if anything.
fn needs<'a>(
    method: &Method,
    route: &str,
    subject: Option<&'a str>,
) -> Option<(Operation, ResourceType, &'a str)> {
    let changes = !matches!(*method, Method::GET | Method::HEAD);
    if route.starts_with("/config") || route.starts_with("/mode") {
        return match (changes, subject) {
            (true, _) => Some((Operation::Alter, ResourceType::Cluster, CLUSTER_NAME)),
            (false, Some(s)) => Some(read_of(s)),
            (false, None) => None,
        };
    }
    let subject = subject?;
    let write = changes
        && !route.starts_with("/compatibility/")
        && (route.ends_with("/versions")
            || *method == Method::DELETE
            || route.contains("{version}"));
    if !write {
        return Some(read_of(subject));
    }
    Some(match resource(subject) {
        (ResourceType::Topic, topic) => (Operation::Write, ResourceType::Topic, topic),
        (rt, name) => (Operation::Alter, rt, name),
    })
}

fn read_of(subject: &str) -> (Operation, ResourceType, &str) {
    let (rt, name) = resource(subject);
    (Operation::Describe, rt, name)
}

/// The middleware on subject, config and mode routes (inside authentication).
pub(super) async fn guard(State(b): State<Shared>, req: Request, next: Next) -> Response {
    if !b.security.authorizer_enabled() {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let params: HashMap<String, String> =
        match <Path<HashMap<String, String>> as axum::extract::FromRequestParts<()>>::from_request_parts(
            &mut parts,
            &(),
        )
        .await
        {
            Ok(Path(p)) => p,
            Err(_) => HashMap::new(),
        };
    let Some(c) = parts.extensions.get::<Caller>().cloned() else {
        return error(401, 40101, "authentication required");
    };
    if let Some((op, rt, name)) = needs(
        &parts.method,
        &route,
        params.get("subject").map(String::as_str),
    ) && !allowed(&b, &c, op, rt, name, true)
    {
        return error(
            403,
            40301,
            format!(
                "{} may not do this: it needs {} on {}:{name}",
                c.principal,
                op.name(),
                rt.name()
            ),
        );
    }
    next.run(Request::from_parts(parts, body)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_map_to_their_topics_or_the_cluster() {
        assert_eq!(resource("orders-value"), (ResourceType::Topic, "orders"));
        assert_eq!(resource("orders-key"), (ResourceType::Topic, "orders"));
        assert_eq!(
            resource("com.acme.Order"),
            (ResourceType::Cluster, CLUSTER_NAME)
        );
        assert_eq!(resource("-value"), (ResourceType::Cluster, CLUSTER_NAME));
    }

    #[test]
    fn each_route_needs_its_operation() {
        let s = Some("orders-value");
        let post = Method::POST;
        assert_eq!(
            needs(&post, "/subjects/{subject}/versions", s),
            Some((Operation::Write, ResourceType::Topic, "orders"))
        );
        assert_eq!(
            needs(&post, "/subjects/{subject}", s),
            Some((Operation::Describe, ResourceType::Topic, "orders"))
        );
        assert_eq!(
            needs(&Method::DELETE, "/subjects/{subject}", s),
            Some((Operation::Write, ResourceType::Topic, "orders"))
        );
        assert_eq!(
            needs(
                &post,
                "/compatibility/subjects/{subject}/versions/{version}",
                s
            ),
            Some((Operation::Describe, ResourceType::Topic, "orders"))
        );
        assert_eq!(
            needs(&Method::PUT, "/config/{subject}", s),
            Some((Operation::Alter, ResourceType::Cluster, CLUSTER_NAME))
        );
        assert_eq!(needs(&Method::GET, "/config", None), None);
        assert_eq!(
            needs(&Method::DELETE, "/mode", None),
            Some((Operation::Alter, ResourceType::Cluster, CLUSTER_NAME))
        );
        assert_eq!(
            needs(
                &post,
                "/subjects/{subject}/versions",
                Some("com.acme.Order")
            ),
            Some((Operation::Alter, ResourceType::Cluster, CLUSTER_NAME))
        );
    }
}
