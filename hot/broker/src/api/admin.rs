//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
//! AlterConfigs and IncrementalAlterConfigs.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::{Operation, ResourceType};
use strata_proto::config::{DEFAULTS, key_info};
use strata_proto::{ErrorCode, TopicConfig, TopicId};

use super::{Pending, RequestContext, authz, encode_response, msg, ready};
use crate::broker::Broker;
use crate::error::ApiError;
use crate::limits::check_new_partitions;
use crate::metadata::{INTERNAL_TOPIC_MUTABLE_CONFIGS, is_internal_topic, validate_topic_name};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// Partition replicas in the cluster now.
fn replicas_now(broker: &Broker) -> i64 {
    broker
        .cluster()
        .topics
        .values()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.replicas.len() as i64)
        .sum()
}

/// What the broker's limits ask of a topic's resolved config, beyond the key's own
/// validation.
pub(crate) fn check_topic_config(broker: &Broker, c: &TopicConfig) -> Result<(), ApiError> {
    strata_tier::Tiering::check_config(c)
        .map_err(|why| ApiError::new(ErrorCode::InvalidConfig, why))?;
    let floor = broker.config.limits.min_segment_bytes;
    if c.segment_bytes < floor {
        return Err(ApiError::new(
            ErrorCode::InvalidConfig,
            format!(
                "segment.bytes {} is below {floor}, the broker's floor (--min-segment-bytes)",
                c.segment_bytes
            ),
        ));
    }
    Ok(())
}

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// The configs CreateTopics v5+ echoes back: every key with its value and source.
fn config_entries(overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    DEFAULTS
        .iter()
        .map(|(k, default)| {
            let mut c = CreatableTopicConfigs::default();
            c.name = s(*k);
            let v = overrides.get(*k);
            c.value = Some(s(v.map_or(*default, |v| v.as_str())));
            c.config_source = if v.is_some() {
                SOURCE_DYNAMIC_TOPIC
            } else {
                SOURCE_DEFAULT
            };
            c
        })
        .collect()
}

pub(super) fn create_topics(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: CreateTopicsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = CreateTopicsResponse::default();
        let mut seen = HashSet::new();
        let dups: HashSet<String> = req
            .topics
            .iter()
            .map(|t| t.name.0.to_string())
            .filter(|n| !seen.insert(n.clone()))
            .collect();
        // Partitions the request has added so far (--max-partitions-per-request counts
        // the whole request).
        let mut added = 0i64;
        // Kafka (ControllerApis.createTopics): Create on the cluster (checked without an
        // audit line) or on each topic.
        let create_any = authz::allowed_with(
            &broker,
            &ctx,
            Operation::Create,
            ResourceType::Cluster,
            strata_authz::CLUSTER_NAME,
            false,
        );
        for t in req.topics {
            let name = t.name.0.to_string();
            let mut r = CreatableTopicResult::default();
            r.name = t.name.clone();
            r.num_partitions = -1;
            r.replication_factor = -1;
            let result: Result<(TopicId, i32, BTreeMap<String, String>, i16), ApiError> = async {
                if dups.contains(&name) {
                    return Err(ApiError::new(ErrorCode::InvalidRequest, format!("topic '{name}' appears more than once in the request")));
                }
                if !create_any && !authz::topic(&broker, &ctx, Operation::Create, &name) {
                    return Err(ApiError::new(ErrorCode::TopicAuthorizationFailed, "Authorization failed."));
                }
                validate_topic_name(&name)?;
                if is_internal_topic(&name) {
                    return Err(ApiError::new(ErrorCode::InvalidTopicException, format!("'{name}' is reserved for the broker: it is an internal topic, which the broker creates when a group or a transactional producer first needs it; pick another name")));
                }
                if t.configs.iter().any(|c| c.name.as_str() == RECOVER_CONFIG && c.value.as_deref() == Some("true")) {
                    return recover_topic(&broker, &name, req.validate_only).await;
                }
                // Replicas the client chose (kafka-topics --replica-assignment), validated
                // here and again by the controller.
                let manual = if t.assignments.is_empty() {
                    None
                } else {
                    if t.num_partitions != -1 || t.replication_factor != -1 {
                        return Err(ApiError::new(ErrorCode::InvalidRequest, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."));
                    }
                    let mut sorted: Vec<_> = t.assignments.iter().collect();
                    sorted.sort_by_key(|a| a.partition_index);
                    if sorted.iter().enumerate().any(|(i, a)| a.partition_index != i as i32) {
                        return Err(ApiError::new(ErrorCode::InvalidReplicaAssignment, "the assignment's partitions must be 0, 1, 2, ... each once"));
                    }
                    let lists: Vec<Vec<i32>> = sorted.iter().map(|a| a.broker_ids.iter().map(|b| b.0).collect()).collect();
                    validate_manual_assignment(&broker, &lists, None, 0)?;
                    Some(lists)
                };
                let (num_partitions, replication_factor) = match &manual {
                    Some(lists) => (lists.len() as i32, lists[0].len() as i16),
                    None => (t.num_partitions, t.replication_factor),
                };
                let partitions = if num_partitions == -1 { broker.config.default_partitions } else { num_partitions };
                if partitions < 1 {
                    return Err(ApiError::new(ErrorCode::InvalidPartitions, format!("number of partitions must be at least 1, not {partitions}")));
                }
                let live = broker.cluster().brokers.values().filter(|b| !b.fenced).count() as i16;
                let rf = replication_factor;
                if rf == 0 || rf < -1 {
                    return Err(ApiError::new(ErrorCode::InvalidReplicationFactor, format!("replication factor must be at least 1, not {rf}")));
                }
                if rf > live {
                    return Err(ApiError::new(ErrorCode::InvalidReplicationFactor, format!("replication factor {rf} is larger than the number of live brokers ({live})")));
                }
                // An RF of -1 is the controller's default: at most 3, at most the live brokers.
                let rf_estimate = if rf == -1 { i64::from(live.clamp(1, 3)) } else { i64::from(rf) };
                check_new_partitions(&broker.config.limits, added, i64::from(partitions), rf_estimate, replicas_now(&broker), i64::from(live))?;
                added += i64::from(partitions);
                let mut configs = BTreeMap::new();
                for c in &t.configs {
                    if let Some(v) = &c.value {
                        configs.insert(c.name.to_string(), v.to_string());
                    }
                }
                let resolved = TopicConfig::resolve(&configs).map_err(|e| ApiError::new(e.error_code(), e.to_string()))?;
                check_topic_config(&broker, &resolved)?;
                if req.validate_only {
                    if broker.cluster().topics.contains_key(&name) {
                        return Err(ApiError::new(ErrorCode::TopicAlreadyExists, format!("topic '{name}' already exists")));
                    }
                    return Ok((TopicId::ZERO, partitions, configs, rf.max(1)));
                }
                let created = match manual {
                    Some(lists) => broker.controller().create_topic_assigned(&name, lists, configs.clone()).await?,
                    None => broker.controller().create_topic(&name, partitions, rf, configs.clone()).await?,
                };
                broker.replicas.refresh_and_apply().await?;
                let rf = created.partitions.first().map_or(1, |p| p.replicas.len() as i16);
                tracing::info!(topic = %name, partitions, replication_factor = rf, "created topic");
                Ok((created.id, partitions, configs, rf))
            }
            .await;
            match result {
                Ok((id, partitions, configs, rf)) => {
                    r.topic_id = id.0;
                    // Kafka returns the new topic's partitions, replication factor and
                    // configs only to a principal with DescribeConfigs on it (checked
                    // without an audit line); v5+ says why they are missing.
                    if authz::allowed_with(
                        &broker,
                        &ctx,
                        Operation::DescribeConfigs,
                        ResourceType::Topic,
                        &name,
                        false,
                    ) {
                        r.num_partitions = partitions;
                        r.replication_factor = rf;
                        if ctx.version >= 5 {
                            r.configs = Some(config_entries(&configs));
                        }
                    } else if ctx.version >= 5 {
                        r.topic_config_error_code = ErrorCode::TopicAuthorizationFailed.code();
                    }
                }
                Err(e) => {
                    r.error_code = e.code.code();
                    r.error_message = msg(e.message);
                }
            }
            resp.topics.push(r);
        }
        encode_response(&ctx, &resp)
    })
}

/// A client's replica lists for new partitions (numbered from `first`), as Kafka checks
/// them: each non-empty, no broker twice, every broker registered, all as long as
/// `rf` when given (the topic's), else as the first.
fn validate_manual_assignment(
    broker: &Broker,
    lists: &[Vec<i32>],
    rf: Option<usize>,
    first: i32,
) -> Result<(), ApiError> {
    let bad = |reason: String| Err(ApiError::new(ErrorCode::InvalidReplicaAssignment, reason));
    let md = broker.cluster();
    let want = rf.unwrap_or_else(|| lists.first().map_or(0, Vec::len));
    for (i, replicas) in lists.iter().enumerate() {
        let p = first + i as i32;
        if replicas.is_empty() {
            return bad(format!("partition {p} has no replicas"));
        }
        if replicas.len() != want {
            return bad(format!(
                "partition {p} has {} replicas; all partitions must have {want}",
                replicas.len()
            ));
        }
        for (j, b) in replicas.iter().enumerate() {
            if replicas[..j].contains(b) {
                return bad(format!(
                    "The manual partition assignment includes the broker {b} more than once (partition {p})."
                ));
            }
            if !md.brokers.contains_key(b) {
                return bad(format!(
                    "The manual partition assignment includes broker {b}, but no such broker is registered (partition {p})."
                ));
            }
        }
    }
    Ok(())
}

/// CreateTopics with this config set to "true" recovers the topic from the object store
/// (`strata topic recover`) instead of creating it.
pub const RECOVER_CONFIG: &str = "strata.recover.from.object.store";

/// Recreates a topic from the bucket's catalog: same id, partitions and configs, its
/// objects read where they were written; each partition's local log continues after
/// the remote end, and its leader epoch starts above every epoch in the manifests.
async fn recover_topic(
    broker: &Arc<Broker>,
    name: &str,
    validate_only: bool,
) -> Result<(TopicId, i32, BTreeMap<String, String>, i16), ApiError> {
    let desc = match broker.tiering.tiering().recoverable(name).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Err(ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("the object store has no topic '{name}'"),
            ));
        }
        Err(None) => {
            return Err(ApiError::new(
                ErrorCode::InvalidConfig,
                "this broker has no object store to recover from",
            ));
        }
        Err(Some(e)) => {
            return Err(ApiError::new(
                e.error_code(),
                format!("cannot read the catalog: {e}"),
            ));
        }
    };
    if broker.cluster().topics.contains_key(name) {
        return Err(ApiError::new(
            ErrorCode::TopicAlreadyExists,
            format!("topic '{name}' already exists"),
        ));
    }
    let max_epoch = broker
        .tiering
        .tiering()
        .max_epoch(&desc)
        .await
        .map_err(|(p, e)| {
            ApiError::new(
                e.error_code(),
                format!("cannot load partition {p}'s manifest: {e}"),
            )
        })?;
    if validate_only {
        return Ok((desc.topic_id, desc.partitions, desc.configs, 1));
    }
    let restored = broker
        .controller()
        .restore_topic(strata_controller::NewTopicRequest {
            id: desc.topic_id,
            name: name.to_string(),
            partitions: desc.partitions,
            replication_factor: -1,
            configs: desc.configs.clone(),
            storage_cluster_id: Some(desc.cluster_id.clone()),
            initial_leader_epoch: max_epoch + 1,
            assignment: None,
        })
        .await?;
    broker.replicas.refresh_and_apply().await?;
    tracing::info!(topic = name, partitions = desc.partitions, from_cluster = %desc.cluster_id, "recovered topic from the object store");
    let rf = restored
        .partitions
        .first()
        .map_or(1, |p| p.replicas.len() as i16);
    Ok((desc.topic_id, desc.partitions, desc.configs, rf))
}

pub(super) fn delete_topics(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: DeleteTopicsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = DeleteTopicsResponse::default();
        // v0-5 name topics; v6 may name them or give ids.
        let mut targets: Vec<(Option<String>, uuid::Uuid)> = req
            .topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect();
        targets.extend(
            req.topics
                .iter()
                .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
        );
        // Kafka (ControllerApis.deleteTopics): Delete on the cluster (checked without an
        // audit line) allows every topic; otherwise a topic named needs Describe (before
        // its existence is told) and Delete; a topic given by id that exists needs
        // Delete, and its name is told only with Describe.
        let delete_any = authz::allowed_with(
            &broker,
            &ctx,
            Operation::Delete,
            ResourceType::Cluster,
            strata_authz::CLUSTER_NAME,
            false,
        );
        let allowed =
            |op: Operation, topic: &str| delete_any || authz::topic(&broker, &ctx, op, topic);
        for (name, id) in targets {
            let mut r = DeletableTopicResult::default();
            r.topic_id = id;
            if let Some(n) = &name
                && !allowed(Operation::Describe, n)
            {
                r.name = Some(TopicName(s(n.clone())));
                r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                resp.responses.push(r);
                continue;
            }
            let found = match &name {
                Some(n) => broker.replicas.topic(n),
                None => broker.replicas.topic_by_id(TopicId(id)),
            };
            if let Some(t) = &found
                && !allowed(Operation::Delete, &t.name)
            {
                let describable = name.is_some() || allowed(Operation::Describe, &t.name);
                r.name = describable.then(|| TopicName(s(t.name.to_string())));
                r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                resp.responses.push(r);
                continue;
            }
            match found {
                None => {
                    r.name = name.map(|n| TopicName(s(n)));
                    r.error_code = if id.is_nil() {
                        ErrorCode::UnknownTopicOrPartition
                    } else {
                        ErrorCode::UnknownTopicId
                    }
                    .code();
                    r.error_message = msg("no such topic");
                }
                Some(t) if is_internal_topic(&t.name) => {
                    r.name = Some(TopicName(s(t.name.to_string())));
                    r.topic_id = t.id.0;
                    r.error_code = ErrorCode::InvalidTopicException.code();
                    r.error_message = msg(format!(
                        "'{}' is an internal topic: deleting it would lose every group's committed offsets",
                        t.name
                    ));
                }
                Some(t) => {
                    r.name = Some(TopicName(s(t.name.to_string())));
                    r.topic_id = t.id.0;
                    let deleted = match broker.controller().delete_topic(&t.name).await {
                        Ok(_) => broker.replicas.refresh_and_apply().await,
                        Err(e) => Err(ApiError::from(e)),
                    };
                    match deleted {
                        Ok(_) => {
                            tracing::info!(topic = %t.name, "deleted topic");
                            broker.replicas.forget_remote_objects(&t);
                        }
                        Err(e) => {
                            r.error_code = e.code.code();
                            r.error_message = msg(e.message);
                        }
                    }
                }
            }
            resp.responses.push(r);
        }
        encode_response(&ctx, &resp)
    })
}

pub(super) fn create_partitions(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: CreatePartitionsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = CreatePartitionsResponse::default();
        let mut added = 0i64;
        for t in req.topics {
            let name = t.name.0.to_string();
            let mut r = CreatePartitionsTopicResult::default();
            r.name = t.name.clone();
            let result: Result<(), ApiError> = async {
                // Alter on the topic, checked before its existence (no leak).
                if !authz::topic(&broker, &ctx, Operation::Alter, &name) {
                    return Err(ApiError::new(
                        ErrorCode::TopicAuthorizationFailed,
                        format!("not authorized to alter topic '{name}'"),
                    ));
                }
                let current = broker.replicas.topic(&name).ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("topic '{name}' does not exist"),
                    )
                })?;
                if is_internal_topic(&name) {
                    return Err(ApiError::new(
                        ErrorCode::InvalidPartitions,
                        format!("'{name}' is an internal topic: groups are hashed over its partition count, so it cannot change"),
                    ));
                }
                let have = current.partition_count;
                if t.count <= have {
                    return Err(ApiError::new(
                        ErrorCode::InvalidPartitions,
                        format!("topic '{name}' has {have} partitions; the count can only grow"),
                    ));
                }
                let new = i64::from(t.count) - i64::from(have);
                let md = broker.cluster();
                let rf = md
                    .topics
                    .get(&name)
                    .and_then(|t| t.partitions.first())
                    .map_or(1, |p| p.replicas.len() as i64);
                // Replicas the client chose for the new partitions, as many as it adds,
                // each with the topic's replication factor.
                let manual = match &t.assignments {
                    None => None,
                    Some(a) => {
                        if a.len() as i64 != new {
                            return Err(ApiError::new(
                                ErrorCode::InvalidReplicaAssignment,
                                format!("Increasing the number of partitions by {new} but {} assignments provided.", a.len()),
                            ));
                        }
                        let lists: Vec<Vec<i32>> = a
                            .iter()
                            .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                            .collect();
                        validate_manual_assignment(&broker, &lists, Some(rf as usize), have)?;
                        Some(lists)
                    }
                };
                let live = md.brokers.values().filter(|b| !b.fenced).count() as i64;
                check_new_partitions(
                    &broker.config.limits,
                    added,
                    new,
                    rf,
                    replicas_now(&broker),
                    live,
                )?;
                added += new;
                if req.validate_only {
                    return Ok(());
                }
                match manual {
                    Some(lists) => {
                        broker
                            .controller()
                            .create_partitions_assigned(&name, t.count, lists)
                            .await?
                    }
                    None => broker.controller().create_partitions(&name, t.count).await?,
                };
                broker.replicas.refresh_and_apply().await?;
                Ok(())
            }
            .await;
            if let Err(e) = result {
                r.error_code = e.code.code();
                r.error_message = msg(e.message);
            }
            resp.results.push(r);
        }
        encode_response(&ctx, &resp)
    })
}

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
