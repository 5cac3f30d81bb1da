//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions (the config APIs
//! are in `configs.rs`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::{Operation, ResourceType};
use strata_proto::config::DEFAULTS;
use strata_proto::{ErrorCode, TopicConfig, TopicId};

use super::{Pending, RequestContext, authz, encode_response, msg};
use crate::broker::Broker;
use crate::error::ApiError;
use crate::limits::check_new_partitions;
use crate::metadata::{is_internal_topic, validate_topic_name};

pub(super) const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub(super) const SOURCE_DEFAULT: i8 = 5;

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

pub(super) fn s(v: impl Into<String>) -> StrBytes {
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
