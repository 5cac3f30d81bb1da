//! ACL administration (KIP-11, KIP-140, KIP-290): CreateAcls, DescribeAcls, DeleteAcls.
//! The ACLs are cluster metadata: changed through the controller, replicated to every
//! voter and broker. Creating and deleting needs Alter on the cluster, describing
//! Describe on it (as Kafka).

use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, Operation,
    PatternType, Permission, Principal, ResourcePattern, ResourcePatternFilter, ResourceType,
};
use strata_controller::{SecurityChange, SecurityOutcome};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, encode_response, msg, ready};
use crate::broker::Broker;

fn enums(
    resource_type: i8,
    pattern_type: i8,
    operation: i8,
    permission: i8,
) -> Result<(ResourceType, PatternType, Operation, Permission), String> {
    Ok((
        ResourceType::from_code(resource_type)
            .ok_or_else(|| format!("unknown resource type {resource_type}"))?,
        PatternType::from_code(pattern_type)
            .ok_or_else(|| format!("unknown pattern type {pattern_type}"))?,
        Operation::from_code(operation).ok_or_else(|| format!("unknown operation {operation}"))?,
        Permission::from_code(permission)
            .ok_or_else(|| format!("unknown permission type {permission}"))?,
    ))
}

/// A binding to create, as CreateAcls carries it, validated.
fn binding(
    c: &kafka_protocol::messages::create_acls_request::AclCreation,
) -> Result<AclBinding, String> {
    let (rt, pt, op, perm) = enums(
        c.resource_type,
        c.resource_pattern_type,
        c.operation,
        c.permission_type,
    )?;
    let principal = Principal::new(c.principal.to_string()).map_err(|e| e.to_string())?;
    let b = AclBinding::new(
        ResourcePattern::new(rt, c.resource_name.to_string(), pt),
        AccessControlEntry::new(principal, c.host.to_string(), op, perm),
    );
    b.validate().map_err(|e| e.to_string())?;
    Ok(b)
}

#[allow(clippy::too_many_arguments)]
fn filter(
    resource_type: i8,
    name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclBindingFilter, String> {
    let (rt, pt, op, perm) = enums(resource_type, pattern_type, operation, permission)?;
    let f = AclBindingFilter::new(
        ResourcePatternFilter::new(rt, name.map(|s| s.to_string()), pt),
        AccessControlEntryFilter {
            principal: principal.map(|s| s.to_string()),
            host: host.map(|s| s.to_string()),
            operation: op,
            permission: perm,
        },
    );
    f.validate().map_err(|e| e.to_string())?;
    Ok(f)
}

pub(super) fn create(broker: Arc<Broker>, ctx: RequestContext, req: CreateAclsRequest) -> Pending {
    Box::pin(async move {
        let mut resp = CreateAclsResponse::default();
        let result = |code: ErrorCode, message: Option<String>| {
            let mut r = AclCreationResult::default();
            r.error_code = code.code();
            r.error_message = message.map(StrBytes::from_string);
            r
        };
        if super::authz::deny_cluster(&broker, &ctx, Operation::Alter).is_some() {
            resp.results = req
                .creations
                .iter()
                .map(|_| {
                    result(
                        ErrorCode::ClusterAuthorizationFailed,
                        Some("creating ACLs needs Alter on the cluster".into()),
                    )
                })
                .collect();
            return encode_response(&ctx, &resp);
        }
        let parsed: Vec<Result<AclBinding, String>> = req.creations.iter().map(binding).collect();
        let valid: Vec<AclBinding> = parsed
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let mut applied: Vec<Option<String>> = Vec::new();
        let mut failure: Option<(ErrorCode, String)> = None;
        if !valid.is_empty() {
            match broker
                .security
                .change(SecurityChange::CreateAcls(valid))
                .await
            {
                Ok(SecurityOutcome::CreatedAcls(r)) => applied = r,
                Ok(other) => failure = Some((ErrorCode::UnknownServerError, format!("{other:?}"))),
                Err(e) => failure = Some(e),
            }
        }
        let mut applied = applied.into_iter();
        resp.results = parsed
            .into_iter()
            .map(|r| match r {
                Err(e) => result(ErrorCode::InvalidRequest, Some(e)),
                Ok(_) => match &failure {
                    Some((code, m)) => result(*code, Some(m.clone())),
                    None => match applied.next().flatten() {
                        Some(e) => result(ErrorCode::InvalidRequest, Some(e)),
                        None => result(ErrorCode::None, None),
                    },
                },
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}

/// Groups bindings by resource pattern, as DescribeAcls and DeleteAcls answer them.
fn describe_resources(bindings: &[AclBinding]) -> Vec<DescribeAclsResource> {
    let mut out: Vec<DescribeAclsResource> = Vec::new();
    for b in bindings {
        let same = out.last().is_some_and(|r| {
            r.resource_type == b.pattern.resource_type.code()
                && r.resource_name.as_str() == b.pattern.name
                && r.pattern_type == b.pattern.pattern_type.code()
        });
        if !same {
            let mut r = DescribeAclsResource::default();
            r.resource_type = b.pattern.resource_type.code();
            r.resource_name = StrBytes::from_string(b.pattern.name.clone());
            r.pattern_type = b.pattern.pattern_type.code();
            out.push(r);
        }
        let mut a = AclDescription::default();
        a.principal = StrBytes::from_string(b.entry.principal.to_string());
        a.host = StrBytes::from_string(b.entry.host.clone());
        a.operation = b.entry.operation.code();
        a.permission_type = b.entry.permission.code();
        if let Some(r) = out.last_mut() {
            r.acls.push(a);
        }
    }
    out
}

pub(super) fn describe(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: DescribeAclsRequest,
) -> Pending {
    let mut resp = DescribeAclsResponse::default();
    if let Some(code) = super::authz::deny_cluster(broker, &ctx, Operation::Describe) {
        resp.error_code = code.code();
        resp.error_message = msg("describing ACLs needs Describe on the cluster");
        return ready(encode_response(&ctx, &resp));
    }
    match filter(
        req.resource_type_filter,
        req.resource_name_filter.as_ref(),
        req.pattern_type_filter,
        req.principal_filter.as_ref(),
        req.host_filter.as_ref(),
        req.operation,
        req.permission_type,
    ) {
        Err(e) => {
            resp.error_code = ErrorCode::InvalidRequest.code();
            resp.error_message = msg(e);
        }
        Ok(f) => {
            // Sorted by pattern, so each resource is one entry.
            let found = broker.cluster().security.acls.list(&f);
            resp.resources = describe_resources(&found);
        }
    }
    ready(encode_response(&ctx, &resp))
}

pub(super) fn delete(broker: Arc<Broker>, ctx: RequestContext, req: DeleteAclsRequest) -> Pending {
    Box::pin(async move {
        let mut resp = DeleteAclsResponse::default();
        let failed = |code: ErrorCode, m: String| {
            let mut r = DeleteAclsFilterResult::default();
            r.error_code = code.code();
            r.error_message = Some(StrBytes::from_string(m));
            r
        };
        if super::authz::deny_cluster(&broker, &ctx, Operation::Alter).is_some() {
            resp.filter_results = req
                .filters
                .iter()
                .map(|_| {
                    failed(
                        ErrorCode::ClusterAuthorizationFailed,
                        "deleting ACLs needs Alter on the cluster".into(),
                    )
                })
                .collect();
            return encode_response(&ctx, &resp);
        }
        let parsed: Vec<Result<AclBindingFilter, String>> = req
            .filters
            .iter()
            .map(|f| {
                filter(
                    f.resource_type_filter,
                    f.resource_name_filter.as_ref(),
                    f.pattern_type_filter,
                    f.principal_filter.as_ref(),
                    f.host_filter.as_ref(),
                    f.operation,
                    f.permission_type,
                )
            })
            .collect();
        let valid: Vec<AclBindingFilter> = parsed
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let mut deleted: Vec<Vec<AclBinding>> = Vec::new();
        let mut failure: Option<(ErrorCode, String)> = None;
        if !valid.is_empty() {
            match broker
                .security
                .change(SecurityChange::DeleteAcls(valid))
                .await
            {
                Ok(SecurityOutcome::DeletedAcls(d)) => deleted = d,
                Ok(other) => failure = Some((ErrorCode::UnknownServerError, format!("{other:?}"))),
                Err(e) => failure = Some(e),
            }
        }
        let mut deleted = deleted.into_iter();
        resp.filter_results = parsed
            .into_iter()
            .map(|r| match r {
                Err(e) => failed(ErrorCode::InvalidRequest, e),
                Ok(_) => match &failure {
                    Some((code, m)) => failed(*code, m.clone()),
                    None => {
                        let mut out = DeleteAclsFilterResult::default();
                        out.matching_acls = deleted
                            .next()
                            .unwrap_or_default()
                            .into_iter()
                            .map(|b| {
                                let mut m = DeleteAclsMatchingAcl::default();
                                m.resource_type = b.pattern.resource_type.code();
                                m.resource_name = StrBytes::from_string(b.pattern.name);
                                m.pattern_type = b.pattern.pattern_type.code();
                                m.principal = StrBytes::from_string(b.entry.principal.to_string());
                                m.host = StrBytes::from_string(b.entry.host);
                                m.operation = b.entry.operation.code();
                                m.permission_type = b.entry.permission.code();
                                m
                            })
                            .collect();
                        out
                    }
                },
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}
