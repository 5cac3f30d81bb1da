//! The config APIs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, for
//! topics, brokers and broker loggers.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use strata_authz::Operation;
use strata_proto::config::{DEFAULTS, key_info};
use strata_proto::{ErrorCode, TopicConfig};

use super::admin::{SOURCE_DEFAULT, SOURCE_DYNAMIC_TOPIC, check_topic_config, s};
use super::{Pending, RequestContext, authz, encode_response, msg, ready};
use crate::broker::Broker;
use crate::error::ApiError;
use crate::metadata::{INTERNAL_TOPIC_MUTABLE_CONFIGS, is_internal_topic};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;

pub(super) fn describe_configs(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: DescribeConfigsRequest,
) -> Pending {
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let mut out = DescribeConfigsResult::default();
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name.clone();
        // As Kafka's ConfigHelper: no keys (null or an empty list, which kafka-python
        // sends) means every key.
        let wanted = |k: &str| {
            res.configuration_keys
                .as_ref()
                .is_none_or(|ks| ks.is_empty() || ks.iter().any(|x| x.as_str() == k))
        };
        if let Some(code) = deny_configs(
            broker,
            &ctx,
            Operation::DescribeConfigs,
            res.resource_type,
            res.resource_name.as_str(),
        ) {
            out.error_code = code.code();
            out.error_message = msg(format!(
                "not authorized to describe the configs of {}",
                res.resource_name.as_str()
            ));
            resp.results.push(out);
            continue;
        }
        match res.resource_type {
            RESOURCE_TOPIC => match broker.replicas.topic(res.resource_name.as_str()) {
                None => {
                    out.error_code = ErrorCode::UnknownTopicOrPartition.code();
                    out.error_message = msg(format!(
                        "topic '{}' does not exist",
                        res.resource_name.as_str()
                    ));
                }
                Some(t) => {
                    for (k, default) in DEFAULTS.iter().filter(|(k, _)| wanted(k)) {
                        let over = t.overrides.get(*k);
                        let mut e = DescribeConfigsResourceResult::default();
                        e.name = s(*k);
                        e.value = Some(s(over.map_or(*default, |v| v.as_str())));
                        e.config_source = if over.is_some() {
                            SOURCE_DYNAMIC_TOPIC
                        } else {
                            SOURCE_DEFAULT
                        };
                        if let Some((ty, doc)) = key_info(k) {
                            e.config_type = ty.wire_id();
                            if req.include_documentation {
                                e.documentation = msg(doc);
                            }
                        }
                        if req.include_synonyms {
                            if let Some(v) = over {
                                let mut syn = DescribeConfigsSynonym::default();
                                syn.name = s(*k);
                                syn.value = Some(s(v.clone()));
                                syn.source = SOURCE_DYNAMIC_TOPIC;
                                e.synonyms.push(syn);
                            }
                            let mut syn = DescribeConfigsSynonym::default();
                            syn.name = s(*k);
                            syn.value = Some(s(*default));
                            syn.source = SOURCE_DEFAULT;
                            e.synonyms.push(syn);
                        }
                        out.configs.push(e);
                    }
                }
            },
            RESOURCE_BROKER => {
                let name = res.resource_name.as_str();
                if !name.is_empty() && name != broker.node_id().to_string() {
                    out.error_code = ErrorCode::InvalidRequest.code();
                    out.error_message =
                        msg(format!("this is broker {}, not '{name}'", broker.node_id()));
                } else {
                    let c = &broker.config;
                    let entries = [
                        ("node.id", c.node_id.to_string()),
                        ("broker.id", c.node_id.to_string()),
                        ("log.dirs", c.data_dir.display().to_string()),
                        (
                            "auto.create.topics.enable",
                            c.auto_create_topics.to_string(),
                        ),
                        ("num.partitions", c.default_partitions.to_string()),
                        ("socket.request.max.bytes", c.max_request_bytes.to_string()),
                    ];
                    for (k, v) in entries.into_iter().filter(|(k, _)| wanted(k)) {
                        let mut e = DescribeConfigsResourceResult::default();
                        e.name = s(k);
                        e.value = Some(s(v));
                        e.read_only = true;
                        e.config_source = SOURCE_STATIC_BROKER;
                        out.configs.push(e);
                    }
                    // The dynamic ones: this broker's own value, else the cluster-wide
                    // default, else what the broker runs with (its flag, or Kafka's
                    // default: no throttle).
                    let md = broker.cluster();
                    let own = md.broker_configs.get(&broker.node_id().to_string());
                    let default = md.broker_configs.get("");
                    for k in strata_controller::DYNAMIC_BROKER_CONFIGS
                        .iter()
                        .copied()
                        .filter(|k| wanted(k))
                    {
                        let mut e = DescribeConfigsResourceResult::default();
                        e.name = s(k);
                        let (base, base_source, kind) = dynamic_base(&broker.config, k);
                        let (value, source) =
                            match (own.and_then(|c| c.get(k)), default.and_then(|c| c.get(k))) {
                                (Some(v), _) if !name.is_empty() => {
                                    (v.clone(), SOURCE_DYNAMIC_BROKER)
                                }
                                (_, Some(v)) => (v.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER),
                                _ => (base, base_source),
                            };
                        e.value = Some(s(value));
                        e.config_source = source;
                        e.config_type = kind.wire_id();
                        out.configs.push(e);
                    }
                }
            }
            other => {
                out.error_code = ErrorCode::InvalidRequest.code();
                out.error_message = msg(format!("resource type {other} is not supported"));
            }
        }
        resp.results.push(out);
    }
    ready(encode_response(&ctx, &resp))
}

/// The error for a config resource the principal may not `operation` (DescribeConfigs or
/// AlterConfigs), checked before the resource's existence, as Kafka's ConfigHelper and
/// ControllerApis: a topic needs it on the topic (TOPIC_AUTHORIZATION_FAILED), a broker
/// or broker logger on the cluster (CLUSTER_AUTHORIZATION_FAILED).
fn deny_configs(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    resource_type: i8,
    name: &str,
) -> Option<ErrorCode> {
    match resource_type {
        RESOURCE_TOPIC => (!authz::topic(broker, ctx, operation, name))
            .then_some(ErrorCode::TopicAuthorizationFailed),
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => authz::deny_cluster(broker, ctx, operation),
        _ => None,
    }
}

/// Validates and stores a topic's new override set.
async fn set_topic_configs(
    broker: &Broker,
    ctx: &RequestContext,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    if let Some(code) = deny_configs(broker, ctx, Operation::AlterConfigs, resource_type, name) {
        return Err(ApiError::new(
            code,
            format!("not authorized to alter the configs of {name}"),
        ));
    }
    if resource_type == RESOURCE_BROKER {
        return set_broker_configs(broker, name, validate_only, change).await;
    }
    if resource_type != RESOURCE_TOPIC {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("resource type {resource_type} is not supported"),
        ));
    }
    let t = broker.replicas.topic(name).ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        )
    })?;
    let mut configs = t.overrides.clone();
    change(&mut configs)?;
    if is_internal_topic(name) {
        let keys: std::collections::BTreeSet<&String> =
            configs.keys().chain(t.overrides.keys()).collect();
        for k in keys {
            if configs.get(k) != t.overrides.get(k)
                && !INTERNAL_TOPIC_MUTABLE_CONFIGS.contains(&k.as_str())
            {
                return Err(ApiError::new(
                    ErrorCode::InvalidConfig,
                    format!(
                        "'{name}' is an internal topic: its coordinator depends on '{k}', which cannot be changed"
                    ),
                ));
            }
        }
    }
    let resolved =
        TopicConfig::resolve(&configs).map_err(|e| ApiError::new(e.error_code(), e.to_string()))?;
    check_topic_config(broker, &resolved)?;
    strata_tier::Tiering::check_config_change(&t.config, &resolved)
        .map_err(|why| ApiError::new(ErrorCode::InvalidConfig, why))?;
    if validate_only {
        return Ok(());
    }
    broker.controller().set_configs(name, configs).await?;
    broker.metadata.refresh().await?;
    broker.replicas.reconcile().await?;
    tracing::info!(topic = name, "altered topic configs");
    Ok(())
}

/// What dynamic broker config `k` is when no dynamic value is set: the `strata serve`
/// flag behind it (a static broker config), or Kafka's default; with its type.
fn dynamic_base(
    c: &crate::config::BrokerConfig,
    k: &str,
) -> (String, i8, strata_proto::config::ConfigType) {
    use strata_proto::config::ConfigType;
    match k {
        "log.cleaner.threads" => (
            c.log_cleaner_threads.to_string(),
            SOURCE_STATIC_BROKER,
            ConfigType::Int,
        ),
        // Kafka's "no cap" is Double.MAX_VALUE; the flag's is 0.
        "log.cleaner.io.max.bytes.per.second" => (
            match c.log_cleaner_io_max_bytes_per_second {
                0 => "1.7976931348623157E308".to_string(),
                r => r.to_string(),
            },
            SOURCE_STATIC_BROKER,
            ConfigType::Double,
        ),
        "log.cleaner.dedupe.buffer.size" => (
            c.log_cleaner_dedupe_buffer_bytes.to_string(),
            SOURCE_STATIC_BROKER,
            ConfigType::Long,
        ),
        "log.cleaner.backoff.ms" => (
            c.log_cleaner_backoff.as_millis().to_string(),
            SOURCE_STATIC_BROKER,
            ConfigType::Long,
        ),
        _ => (i64::MAX.to_string(), SOURCE_DEFAULT, ConfigType::Long),
    }
}

/// The dynamic configs of broker `name` (its id), or with `""` the cluster-wide default
/// (Kafka's `--entity-default`): the keys of [`strata_controller::DYNAMIC_BROKER_CONFIGS`]
/// (replication throttles, the log cleaner's) change while brokers run; every other
/// broker setting is a `strata serve` flag.
async fn set_broker_configs(
    broker: &Broker,
    name: &str,
    validate_only: bool,
    change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let md = broker.cluster();
    if let Ok(id) = name.parse::<i32>()
        && !md.brokers.contains_key(&id)
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("broker {id} is not registered"),
        ));
    }
    let mut configs = md.broker_configs.get(name).cloned().unwrap_or_default();
    change(&mut configs)?;
    strata_controller::validate_broker_configs(name, &configs).map_err(|e| match e {
        // The reason alone: the controller's wording ("invalid topic config") is for topics.
        strata_controller::Rejection::InvalidConfig { reason } => {
            ApiError::new(ErrorCode::InvalidConfig, reason)
        }
        e => ApiError::new(ErrorCode::InvalidConfig, e.to_string()),
    })?;
    if validate_only {
        return Ok(());
    }
    broker
        .controller()
        .set_broker_configs(name, configs)
        .await?;
    broker.metadata.refresh().await?;
    tracing::info!(
        broker = if name.is_empty() { "default" } else { name },
        "altered dynamic broker configs"
    );
    Ok(())
}

/// A key the resource type has: a topic config, or a dynamic broker config.
fn known_key(resource_type: i8, k: &str) -> Result<(), ApiError> {
    if resource_type == RESOURCE_BROKER {
        if !strata_controller::DYNAMIC_BROKER_CONFIGS.contains(&k) {
            return Err(ApiError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "broker config '{k}' cannot change while the broker runs (the dynamic ones \
                     are {}); pass it to `strata serve`",
                    strata_controller::DYNAMIC_BROKER_CONFIGS.join(", ")
                ),
            ));
        }
        return Ok(());
    }
    if key_info(k).is_none() {
        return Err(ApiError::new(
            ErrorCode::InvalidConfig,
            format!("unknown topic config '{k}'"),
        ));
    }
    Ok(())
}

pub(super) fn alter_configs(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: AlterConfigsRequest,
) -> Pending {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    Box::pin(async move {
        let mut resp = AlterConfigsResponse::default();
        for res in req.resources {
            let mut r = AlterConfigsResourceResponse::default();
            r.resource_type = res.resource_type;
            r.resource_name = res.resource_name.clone();
            // The legacy API replaces the whole override set.
            let result = set_topic_configs(
                &broker,
                &ctx,
                res.resource_type,
                res.resource_name.as_str(),
                req.validate_only,
                |c| {
                    c.clear();
                    for e in &res.configs {
                        known_key(res.resource_type, e.name.as_str())?;
                        if let Some(v) = &e.value {
                            c.insert(e.name.to_string(), v.to_string());
                        }
                    }
                    Ok(())
                },
            )
            .await;
            if let Err(e) = result {
                r.error_code = e.code.code();
                r.error_message = msg(e.message);
            }
            resp.responses.push(r);
        }
        encode_response(&ctx, &resp)
    })
}

pub(super) fn incremental_alter_configs(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: IncrementalAlterConfigsRequest,
) -> Pending {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    const APPEND: i8 = 2;
    const SUBTRACT: i8 = 3;
    Box::pin(async move {
        let mut resp = IncrementalAlterConfigsResponse::default();
        for res in req.resources {
            let mut r = AlterConfigsResourceResponse::default();
            r.resource_type = res.resource_type;
            r.resource_name = res.resource_name.clone();
            let result = set_topic_configs(
                &broker,
                &ctx,
                res.resource_type,
                res.resource_name.as_str(),
                req.validate_only,
                |c| {
                    for e in &res.configs {
                        let k = e.name.to_string();
                        known_key(res.resource_type, &k)?;
                        let v = e.value.as_ref().map(|v| v.to_string());
                        match e.config_operation {
                            SET => {
                                let v = v.ok_or_else(|| {
                                    ApiError::new(
                                        ErrorCode::InvalidConfig,
                                        format!("SET of '{k}' needs a value"),
                                    )
                                })?;
                                c.insert(k, v);
                            }
                            DELETE => {
                                c.remove(&k);
                            }
                            APPEND | SUBTRACT => {
                                if key_info(&k).map(|x| x.0)
                                    != Some(strata_proto::config::ConfigType::List)
                                {
                                    return Err(ApiError::new(
                                        ErrorCode::InvalidConfig,
                                        format!(
                                            "'{k}' is not a list: APPEND and SUBTRACT do not apply"
                                        ),
                                    ));
                                }
                                let current = c
                                    .get(&k)
                                    .cloned()
                                    .or_else(|| TopicConfig::default_value(&k).map(str::to_string))
                                    .unwrap_or_default();
                                let mut items: Vec<String> = current
                                    .split(',')
                                    .map(|x| x.trim().to_string())
                                    .filter(|x| !x.is_empty())
                                    .collect();
                                for item in v
                                    .unwrap_or_default()
                                    .split(',')
                                    .map(|x| x.trim().to_string())
                                    .filter(|x| !x.is_empty())
                                {
                                    if e.config_operation == APPEND {
                                        if !items.contains(&item) {
                                            items.push(item);
                                        }
                                    } else {
                                        items.retain(|x| *x != item);
                                    }
                                }
                                c.insert(k, items.join(","));
                            }
                            other => {
                                return Err(ApiError::new(
                                    ErrorCode::InvalidRequest,
                                    format!("unknown config operation {other}"),
                                ));
                            }
                        }
                    }
                    Ok(())
                },
            )
            .await;
            if let Err(e) = result {
                r.error_code = e.code.code();
                r.error_message = msg(e.message);
            }
            resp.responses.push(r);
        }
        encode_response(&ctx, &resp)
    })
}
