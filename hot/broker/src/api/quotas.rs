//! Client quota administration (KIP-546): DescribeClientQuotas and AlterClientQuotas.
//! Quotas are cluster metadata, changed through the controller. Describing needs
//! DescribeConfigs on the cluster, altering AlterConfigs on it (as Kafka).

use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlterEntity, EntryData as AlterEntry,
};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::Operation;
use strata_controller::{QuotaAlteration, SecurityChange, SecurityOutcome};
use strata_proto::ErrorCode;
use strata_quota::{DescribeFilter, FilterComponent, QuotaKey};

use super::{Pending, RequestContext, encode_response, msg, ready};
use crate::broker::Broker;

pub(super) fn describe(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: DescribeClientQuotasRequest,
) -> Pending {
    let mut resp = DescribeClientQuotasResponse::default();
    if let Some(code) = super::authz::deny_cluster(broker, &ctx, Operation::DescribeConfigs) {
        resp.error_code = code.code();
        resp.error_message = msg("describing quotas needs DescribeConfigs on the cluster");
        return ready(encode_response(&ctx, &resp));
    }
    let filter = req
        .components
        .iter()
        .map(|c| FilterComponent::from_wire(&c.entity_type, c.match_type, c._match.as_deref()))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|components| DescribeFilter::new(components, req.strict));
    match filter {
        Err(e) => {
            resp.error_code = ErrorCode::InvalidRequest.code();
            resp.error_message = msg(e.to_string());
        }
        Ok(f) => {
            let found = broker.cluster().security.quotas.describe(&f);
            resp.entries = Some(
                found
                    .into_iter()
                    .map(|(entity, values)| {
                        let mut e = EntryData::default();
                        e.entity = entity
                            .components()
                            .into_iter()
                            .map(|(t, name)| {
                                let mut d = EntityData::default();
                                d.entity_type = StrBytes::from_static_str(t.as_str());
                                d.entity_name = name.map(|n| StrBytes::from_string(n.to_string()));
                                d
                            })
                            .collect();
                        e.values = values
                            .into_iter()
                            .map(|(k, v)| {
                                let mut d = ValueData::default();
                                d.key = StrBytes::from_static_str(k.as_str());
                                d.value = v;
                                d
                            })
                            .collect();
                        e
                    })
                    .collect(),
            );
        }
    }
    ready(encode_response(&ctx, &resp))
}

pub(super) fn alter(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: AlterClientQuotasRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = AlterClientQuotasResponse::default();
        let entity_of = |e: &kafka_protocol::messages::alter_client_quotas_request::EntryData| {
            e.entity
                .iter()
                .map(|d| {
                    let mut out = AlterEntity::default();
                    out.entity_type = d.entity_type.clone();
                    out.entity_name = d.entity_name.clone();
                    out
                })
                .collect::<Vec<_>>()
        };
        let answer = |e: &kafka_protocol::messages::alter_client_quotas_request::EntryData,
                      code: ErrorCode,
                      message: Option<String>| {
            let mut out = AlterEntry::default();
            out.entity = entity_of(e);
            out.error_code = code.code();
            out.error_message = message.map(StrBytes::from_string);
            out
        };
        if super::authz::deny_cluster(&broker, &ctx, Operation::AlterConfigs).is_some() {
            resp.entries = req
                .entries
                .iter()
                .map(|e| {
                    answer(
                        e,
                        ErrorCode::ClusterAuthorizationFailed,
                        Some("altering quotas needs AlterConfigs on the cluster".into()),
                    )
                })
                .collect();
            return encode_response(&ctx, &resp);
        }
        // Each entry is checked here as the controller would (a bad one is refused alone),
        // then the valid ones go to the controller in one command.
        let parsed: Vec<Result<QuotaAlteration, String>> = req
            .entries
            .iter()
            .map(|e| {
                let entity: Vec<(String, Option<String>)> = e
                    .entity
                    .iter()
                    .map(|d| {
                        (
                            d.entity_type.to_string(),
                            d.entity_name.as_ref().map(|n| n.to_string()),
                        )
                    })
                    .collect();
                strata_quota::ClientQuotaEntity::from_wire(
                    entity.iter().map(|(t, n)| (t.as_str(), n.as_deref())),
                )
                .map_err(|e| e.to_string())?;
                let mut ops = Vec::new();
                for op in &e.ops {
                    let key = QuotaKey::parse(&op.key).map_err(|e| e.to_string())?;
                    if !op.remove {
                        key.validate(op.value).map_err(|e| e.to_string())?;
                    }
                    ops.push((key.as_str().to_string(), (!op.remove).then_some(op.value)));
                }
                Ok(QuotaAlteration { entity, ops })
            })
            .collect();
        let valid: Vec<QuotaAlteration> = parsed
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let mut applied: Vec<Option<String>> = Vec::new();
        let mut failure: Option<(ErrorCode, String)> = None;
        if !valid.is_empty() && !req.validate_only {
            match broker
                .security
                .change(SecurityChange::AlterQuotas(valid))
                .await
            {
                Ok(SecurityOutcome::AlteredQuotas(r)) => applied = r,
                Ok(other) => failure = Some((ErrorCode::UnknownServerError, format!("{other:?}"))),
                Err(e) => failure = Some(e),
            }
        }
        let mut applied = applied.into_iter();
        resp.entries = req
            .entries
            .iter()
            .zip(parsed)
            .map(|(e, r)| match r {
                Err(m) => answer(e, ErrorCode::InvalidRequest, Some(m)),
                Ok(_) if req.validate_only => answer(e, ErrorCode::None, None),
                Ok(_) => match &failure {
                    Some((code, m)) => answer(e, *code, Some(m.clone())),
                    None => match applied.next().flatten() {
                        Some(m) => answer(e, ErrorCode::InvalidRequest, Some(m)),
                        None => answer(e, ErrorCode::None, None),
                    },
                },
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}
