//! Authorization of requests: what each API asks of the authorizer
//! ([`crate::security::Security`]), and the audit line of every denial.

use std::sync::Arc;

use strata_authz::{Authorizer, Operation, ResourceType};
use strata_proto::ErrorCode;

use super::RequestContext;
use crate::broker::Broker;

/// The authorizer, or `None` when authorization is off.
pub(crate) fn authorizer(broker: &Broker) -> Option<Arc<Authorizer>> {
    broker.security.authorizer()
}

/// Whether the request's principal may do `operation` on the resource; a denial is
/// audited (`audit` false for what is only filtered out, as Kafka's logIfDenied).
pub(crate) fn allowed_with(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
    audit: bool,
) -> bool {
    broker.security.check(
        &ctx.principal,
        ctx.peer,
        operation,
        resource_type,
        name,
        audit.then(|| super::api_name(ctx.api)),
    )
}

/// [`allowed_with`], audited.
pub(crate) fn allowed(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
) -> bool {
    allowed_with(broker, ctx, operation, resource_type, name, true)
}

/// `Some(CLUSTER_AUTHORIZATION_FAILED)` when `operation` on the cluster is denied.
pub(crate) fn deny_cluster(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
) -> Option<ErrorCode> {
    (!allowed(
        broker,
        ctx,
        operation,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
    ))
    .then_some(ErrorCode::ClusterAuthorizationFailed)
}

/// KIP-679's check: may the principal do `operation` on some resource of the type?
pub(crate) fn allowed_on_some(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    resource_type: ResourceType,
) -> bool {
    broker
        .security
        .allowed_on_some(&ctx.principal, ctx.peer, operation, resource_type)
}

/// Topic helpers: the checks most APIs make.
pub(crate) fn topic(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    name: &str,
) -> bool {
    allowed(broker, ctx, operation, ResourceType::Topic, name)
}

pub(crate) fn group(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    name: &str,
) -> bool {
    allowed(broker, ctx, operation, ResourceType::Group, name)
}

pub(crate) fn transactional_id(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    name: &str,
) -> bool {
    allowed(broker, ctx, operation, ResourceType::TransactionalId, name)
}
