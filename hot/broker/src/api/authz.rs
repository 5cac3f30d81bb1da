//! Authorization of requests: what each API asks of the authorizer, and the audit line
//! of every denial. With the authorizer off (the default), everything is allowed, as
//! Kafka without an authorizer.
//!
//! The ACLs live in the cluster metadata; the authorizer built over them is cached per
//! metadata version (rebuilt only when the metadata changes), so a check is an atomic
//! load and the strata-authz lookup (about 150-250 ns with 10,000 ACLs).

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use strata_authz::{Authorizer, AuthorizerConfig, Operation, ResourceType};
use strata_proto::ErrorCode;

use super::RequestContext;
use crate::broker::Broker;

/// The authorizer of the current metadata version.
#[derive(Debug, Default)]
pub(crate) struct AuthzCache {
    current: ArcSwapOption<(u64, Arc<Authorizer>)>,
}

impl AuthzCache {
    fn get(&self, broker: &Broker, config: &AuthorizerConfig) -> Arc<Authorizer> {
        let md = broker.cluster();
        if let Some(c) = &*self.current.load()
            && c.0 == md.version
        {
            return c.1.clone();
        }
        let a = Arc::new(Authorizer::new(config.clone(), md.security.acls.clone()));
        self.current.store(Some(Arc::new((md.version, a.clone()))));
        a
    }
}

/// The authorizer, or `None` when authorization is off.
pub(crate) fn authorizer(broker: &Broker) -> Option<Arc<Authorizer>> {
    let config = broker.config.security.authorizer.as_ref()?;
    Some(broker.authz.get(broker, config))
}

/// Whether `principal` from `peer` may do `operation` on the resource: the one check
/// behind every API and the gateway. A denial is audited as `audit_api` (`None` for
/// what is only filtered out, as Kafka's logIfDenied).
fn check(
    broker: &Broker,
    principal: &str,
    peer: std::net::SocketAddr,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
    audit_api: Option<&str>,
) -> bool {
    if principal == crate::server::INTERNAL {
        return true;
    }
    let Some(a) = authorizer(broker) else {
        return true;
    };
    let decision = a.authorize(principal, peer.ip(), operation, resource_type, name);
    let ok = decision.is_allowed();
    if let (false, Some(api)) = (ok, audit_api) {
        crate::audit::authorization_denied(
            peer,
            principal,
            operation.name(),
            resource_type.name(),
            name,
            api,
            &decision.to_string(),
        );
    }
    ok
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
    check(
        broker,
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
    if *ctx.principal == *crate::server::INTERNAL {
        return true;
    }
    let Some(a) = authorizer(broker) else {
        return true;
    };
    a.authorize_by_resource_type(&ctx.principal, ctx.peer.ip(), operation, resource_type)
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

impl Broker {
    /// Whether `principal` (`User:NAME`) connecting from `host` may do `operation` on the
    /// resource, by this broker's authorizer (always, with it off). For front ends that
    /// authenticate on their own (the REST gateway); a denial is audited as `api` when
    /// `audit` (not for what is only left out of an answer).
    #[allow(clippy::too_many_arguments)]
    pub fn authorize(
        &self,
        principal: &str,
        host: std::net::IpAddr,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
        api: &'static str,
        audit: bool,
    ) -> bool {
        check(
            self,
            principal,
            std::net::SocketAddr::new(host, 0),
            operation,
            resource_type,
            name,
            audit.then_some(api),
        )
    }

    /// Whether an authorizer is on.
    pub fn authorizer_enabled(&self) -> bool {
        self.config.security.authorizer.is_some()
    }

    /// The principal (`User:NAME`) of a verified client certificate, mapped by
    /// `--ssl-principal-mapping-rules` (for the HTTP address's client certificates).
    pub fn certificate_principal(&self, cert_der: &[u8]) -> Result<String, String> {
        self.config.security.certificate_principal(cert_der)
    }
}
