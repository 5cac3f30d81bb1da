//! Confluent REST Proxy v2 consumer instances: each is a member of its Kafka consumer
//! group (so it shares partitions with any other member, HTTP or not), lives until it
//! is deleted or left unused for the idle timeout, and is capped in number because each
//! is a Kafka client with its own threads and connections.
//!
//! An instance belongs to the principal that created it: another principal's requests
//! are answered as for an instance that does not exist. Every request asks Read on the
//! group, and Read (Describe to look) on the topics it names, as the broker asks a Kafka
//! consumer's JoinGroup, Heartbeat, OffsetCommit and Fetch.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_authz::{Operation, ResourceType};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::{self, ApiError, ApiResult, ErrorBody};
use crate::service::{
    ConsumerSettings, End, GroupConsumer, OffsetReset, PartitionOffset, Record, TopicPartition,
};
use crate::util::{self, JSON, V2};
use crate::v2::{ConsumerRecord, Format, encode_record};
use crate::{Shared, acl};

/// Media types consumer requests may carry.
const CONSUMER_TYPES: &[&str] = &[V2, "application/vnd.kafka+json", JSON];

/// One v2 consumer instance.
pub struct Instance {
    pub group: String,
    pub name: String,
    /// The principal that created it, the only one that may use it.
    pub principal: String,
    pub format: Format,
    pub consumer: Box<dyn GroupConsumer>,
    last_used: Mutex<Instant>,
    /// One request at a time per instance, as Confluent's.
    busy: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("group", &self.group)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Instance {
    fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    /// Holds the instance for one request (Confluent serves one at a time).
    pub(crate) async fn busy(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.touch();
        self.busy.lock().await
    }

    fn idle_since(&self) -> Instant {
        self.last_used
            .lock()
            .map_or_else(|_| Instant::now(), |t| *t)
    }
}

/// An SSE session: its group, the principal that opened it, and its member.
pub(crate) struct StreamMember {
    pub group: String,
    pub principal: String,
    pub consumer: Arc<dyn GroupConsumer>,
}

impl std::fmt::Debug for StreamMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMember")
            .field("group", &self.group)
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

/// The open instances and SSE streams.
#[derive(Debug)]
pub struct Consumers {
    instances: Mutex<HashMap<(String, String), Arc<Instance>>>,
    /// SSE sessions by id.
    pub(crate) streams: Mutex<HashMap<String, StreamMember>>,
    idle: Duration,
    max: usize,
}

impl std::fmt::Debug for dyn GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupConsumer")
    }
}

impl Consumers {
    pub fn new(idle: Duration, max: usize) -> Arc<Consumers> {
        Arc::new(Consumers {
            instances: Mutex::default(),
            streams: Mutex::default(),
            idle,
            max,
        })
    }

    fn open(&self) -> usize {
        self.instances.lock().map_or(0, |m| m.len()) + self.streams.lock().map_or(0, |m| m.len())
    }

    /// Whether another instance or stream may open.
    pub fn has_room(&self) -> bool {
        self.open() < self.max
    }

    /// `principal`'s instance `name` of `group` (another principal's is not found).
    pub fn get(&self, group: &str, name: &str, principal: &str) -> ApiResult<Arc<Instance>> {
        let i = self
            .instances
            .lock()
            .ok()
            .and_then(|m| m.get(&(group.to_string(), name.to_string())).cloned())
            .filter(|i| i.principal == principal)
            .ok_or_else(ApiError::instance_not_found)?;
        i.touch();
        Ok(i)
    }

    /// Removes `principal`'s instance (another principal's stays).
    fn remove(&self, group: &str, name: &str, principal: &str) -> Option<Arc<Instance>> {
        let mut m = self.instances.lock().ok()?;
        let key = (group.to_string(), name.to_string());
        if m.get(&key)?.principal != principal {
            return None;
        }
        m.remove(&key)
    }

    /// Closes every instance and stream member (at shutdown, while the broker is up).
    pub async fn close_all(&self) {
        let instances: Vec<Arc<Instance>> = self
            .instances
            .lock()
            .map(|mut m| m.drain().map(|(_, i)| i).collect())
            .unwrap_or_default();
        let streams: Vec<Arc<dyn GroupConsumer>> = self
            .streams
            .lock()
            .map(|mut m| m.drain().map(|(_, member)| member.consumer).collect())
            .unwrap_or_default();
        let closing = instances
            .iter()
            .map(|i| i.consumer.close())
            .chain(streams.iter().map(|c| c.close()));
        futures::future::join_all(closing).await;
    }

    /// Instances idle past the timeout, removed.
    pub fn expired(&self, now: Instant) -> Vec<Arc<Instance>> {
        let Ok(mut m) = self.instances.lock() else {
            return Vec::new();
        };
        let gone: Vec<(String, String)> = m
            .iter()
            .filter(|(_, i)| now.saturating_duration_since(i.idle_since()) >= self.idle)
            .map(|(k, _)| k.clone())
            .collect();
        gone.into_iter().filter_map(|k| m.remove(&k)).collect()
    }
}

/// Closes idle instances until the registry is dropped.
pub fn spawn_reaper(consumers: &Arc<Consumers>) {
    let weak: Weak<Consumers> = Arc::downgrade(consumers);
    let every = (consumers.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(c) = weak.upgrade() else { return };
            for i in c.expired(Instant::now()) {
                tracing::info!(group = %i.group, instance = %i.name, "closing an idle consumer instance");
                metrics::counter!("strata_http_consumer_instances_expired_total").increment(1);
                i.consumer.close().await;
            }
        }
    });
}

/// The caller's instance, once it may read the group (403 otherwise; 404 for an
/// instance that is not the caller's).
fn instance(s: &Shared, c: &Caller, group: &str, name: &str) -> ApiResult<Arc<Instance>> {
    acl::group(s, c, Operation::Read, group)?;
    s.consumers.get(group, name, &c.principal)
}

/// The caller's instance `name` of `group` (Read on the group), for other modules.
pub(crate) fn instance_for(
    s: &Shared,
    c: &Caller,
    group: &str,
    name: &str,
) -> ApiResult<Arc<Instance>> {
    instance(s, c, group, name)
}

/// Seeks each partition of `records` back to its first record, so the next poll reads
/// them again.
pub(crate) async fn give_back(consumer: &dyn GroupConsumer, records: &[Record]) -> ApiResult<()> {
    let mut back: HashMap<(String, i32), i64> = HashMap::new();
    for r in records {
        back.entry((r.topic.clone(), r.partition))
            .and_modify(|o| *o = (*o).min(r.offset))
            .or_insert(r.offset);
    }
    let seeks = back
        .into_iter()
        .map(|((topic, partition), offset)| PartitionOffset {
            topic,
            partition,
            offset,
        })
        .collect();
    consumer.seek(seeks).await?;
    Ok(())
}

/// The records a poll got, when the caller may read every topic they come from (Kafka's
/// Fetch asks Read on each). Otherwise none is answered: all are given back (nothing is
/// skipped; the next poll reads them again) and the answer is 403, naming the topics the
/// caller may describe. Records of a topic it may not read come from a `topic_pattern`
/// that matches it, or from an ACL removed since the subscription.
pub(crate) async fn screen(
    s: &Shared,
    c: &Caller,
    consumer: &dyn GroupConsumer,
    records: Vec<Record>,
) -> ApiResult<Vec<Record>> {
    if !acl::enabled(s) || records.is_empty() {
        return Ok(records);
    }
    let topics: BTreeSet<&str> = records.iter().map(|r| r.topic.as_str()).collect();
    let denied: Vec<&str> = topics
        .into_iter()
        .filter(|t| !acl::allowed(s, c, Operation::Read, ResourceType::Topic, t, true))
        .collect();
    if denied.is_empty() {
        return Ok(records);
    }
    let named: Vec<&str> = denied
        .iter()
        .copied()
        .filter(|t| acl::may_describe(s, c, t))
        .collect();
    let e = if named.len() == denied.len() {
        acl::topics_denied(named)
    } else {
        acl::forbidden(format!(
            "Not authorized to access topics: [{}] (and topics assigned to this member \
             that you may not describe: subscribe only to topics you may read)",
            named.join(", ")
        ))
    };
    give_back(consumer, &records).await?;
    Err(e)
}

fn instance_uri(headers: &HeaderMap, group: &str, name: &str) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!(
        "http://{host}/consumers/{}/instances/{}",
        util::pct(group),
        util::pct(name)
    )
}

async fn body_json<T: serde::de::DeserializeOwned>(
    s: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Option<T>> {
    let bytes = util::read_body(headers, body, s.config.max_body_bytes).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    util::require_content_type(headers, CONSUMER_TYPES)?;
    util::parse_optional_json(&bytes)
}

/// A request to create a consumer instance (Confluent's field names).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CreateConsumer {
    /// Instance name [default: generated]; 1 to 249 of [a-zA-Z0-9._-]
    pub name: Option<String>,
    /// binary (default) or json
    pub format: Option<String>,
    /// earliest, latest (default) or none
    #[serde(rename = "auto.offset.reset")]
    pub auto_offset_reset: Option<String>,
    /// "true" or "false" (default)
    #[serde(rename = "auto.commit.enable")]
    #[schema(value_type = Option<String>)]
    pub auto_commit_enable: Option<Value>,
    /// Accepted for compatibility; librdkafka's defaults apply
    #[serde(rename = "fetch.min.bytes")]
    #[schema(value_type = Option<String>)]
    pub fetch_min_bytes: Option<Value>,
    /// Accepted for compatibility; a records request names its own timeout
    #[serde(rename = "consumer.request.timeout.ms")]
    #[schema(value_type = Option<String>)]
    pub consumer_request_timeout_ms: Option<Value>,
}

/// A created instance.
#[derive(Debug, Serialize, ToSchema)]
pub struct Created {
    pub instance_id: String,
    pub base_uri: String,
}

fn parse_settings(req: &CreateConsumer) -> ApiResult<(Format, ConsumerSettings)> {
    let bad = |m: String| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            error::INVALID_CONSUMER_CONFIG,
            m,
        )
    };
    let format = match req
        .format
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("binary") => Format::Binary,
        Some("json") => Format::Json,
        Some(f) => {
            return Err(bad(format!(
                "format '{f}' is not supported: use binary or json (there is no schema registry)"
            )));
        }
    };
    let offset_reset = match req.auto_offset_reset.as_deref() {
        None | Some("latest") | Some("largest") => OffsetReset::Latest,
        Some("earliest") | Some("smallest") => OffsetReset::Earliest,
        Some("none") => OffsetReset::None,
        Some(o) => {
            return Err(bad(format!(
                "auto.offset.reset '{o}': use earliest, latest or none"
            )));
        }
    };
    let auto_commit = match &req.auto_commit_enable {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(v) => return Err(bad(format!("auto.commit.enable {v}: use true or false"))),
    };
    Ok((
        format,
        ConsumerSettings {
            offset_reset,
            auto_commit,
        },
    ))
}

/// Create a consumer instance in a group.
#[utoipa::path(post, path = "/consumers/{group}", tag = "v2 consumers",
    params(("group" = String, Path, description = "Consumer group")),
    request_body(content(
        (CreateConsumer = "application/vnd.kafka.v2+json"),
        (CreateConsumer = "application/json"),
    )),
    responses(
        (status = 200, description = "The instance", body = Created, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group (40301)", body = ErrorBody),
        (status = 409, description = "An instance of that name exists (40902)", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid settings (42204)", body = ErrorBody),
        (status = 429, description = "Too many open instances (42902)", body = ErrorBody),
    ))]
pub async fn create(
    State(s): State<Shared>,
    caller: Caller,
    Path(group): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    acl::group(&s, &caller, Operation::Read, &group)?;
    let req: CreateConsumer = body_json(&s, &headers, body).await?.unwrap_or_default();
    if !util::valid_name(&group) {
        return Err(ApiError::invalid_field(
            "the group name must be 1 to 249 printable characters",
        ));
    }
    let (format, settings) = parse_settings(&req)?;
    let name = match req.name {
        Some(n) if util::valid_topic_name(&n) => n,
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                error::INVALID_CONSUMER_CONFIG,
                "name must be 1 to 249 of [a-zA-Z0-9._-]",
            ));
        }
        None => format!("rest-consumer-{}", uuid::Uuid::new_v4()),
    };
    let key = (group.clone(), name.clone());
    let exists = |s: &Shared| {
        s.consumers
            .instances
            .lock()
            .is_ok_and(|m| m.contains_key(&key))
    };
    if exists(&s) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            error::CONSUMER_ALREADY_EXISTS,
            "Consumer with specified consumer ID already exists in the specified consumer group.",
        ));
    }
    if !s.consumers.has_room() {
        return Err(too_many());
    }
    let consumer = s.service.consumer(&group, settings).await?;
    let instance = Arc::new(Instance {
        group: group.clone(),
        name: name.clone(),
        principal: caller.principal.clone(),
        format,
        consumer,
        last_used: Mutex::new(Instant::now()),
        busy: tokio::sync::Mutex::new(()),
    });
    // Check again under the lock: two creates of one name may race.
    let raced = {
        let Ok(mut m) = s.consumers.instances.lock() else {
            return Err(ApiError::instance_not_found());
        };
        match m.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => true,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(instance.clone());
                false
            }
        }
    };
    if raced {
        instance.consumer.close().await;
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            error::CONSUMER_ALREADY_EXISTS,
            "Consumer with specified consumer ID already exists in the specified consumer group.",
        ));
    }
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Created {
            base_uri: instance_uri(&headers, &group, &name),
            instance_id: name,
        },
    ))
}

pub fn too_many() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        error::TOO_MANY_CONSUMERS,
        "Too many consumer instances and streams are open; delete some or wait for idle ones to expire.",
    )
}

/// Delete a consumer instance (it leaves its group).
#[utoipa::path(delete, path = "/consumers/{group}/instances/{instance}", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn delete_instance(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    acl::group(&s, &caller, Operation::Read, &group)?;
    let i = s
        .consumers
        .remove(&group, &name, &caller.principal)
        .ok_or_else(ApiError::instance_not_found)?;
    let _busy = i.busy.lock().await;
    i.consumer.close().await;
    Ok(StatusCode::NO_CONTENT)
}

/// Topics to subscribe to: a list, or (Confluent's `topic_pattern`) a regular expression
/// that a whole topic name must match; topics created later join at the consumer's next
/// metadata refresh.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Subscription {
    #[serde(default)]
    pub topics: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_pattern: Option<String>,
}

/// Subscribe the instance to topics (replacing its subscription).
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Subscription = "application/vnd.kafka.v2+json"),
        (Subscription = "application/json"),
    )),
    responses(
        (status = 204, description = "Subscribed"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn subscribe(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Subscription = body_json(&s, &headers, body)
        .await?
        .ok_or_else(|| ApiError::invalid_body("a body {\"topics\": [...]} is required"))?;
    match (req.topics.is_empty(), req.topic_pattern) {
        (true, None) => Err(ApiError::invalid_body(
            "give topics (a non-empty list) or topic_pattern (a regular expression)",
        )),
        (false, Some(_)) => Err(ApiError::invalid_body(
            "give topics or topic_pattern, not both",
        )),
        (true, Some(pattern)) => {
            if let Err(e) = regex::Regex::new(&format!("^(?:{pattern})$")) {
                return Err(ApiError::invalid_field(format!(
                    "topic_pattern '{pattern}' is not a regular expression: {e}"
                )));
            }
            let _busy = i.busy.lock().await;
            i.consumer.subscribe_pattern(&pattern).await?;
            Ok(StatusCode::NO_CONTENT)
        }
        (false, None) => {
            acl::topics(
                &s,
                &caller,
                Operation::Read,
                req.topics.iter().map(String::as_str),
            )?;
            if let Some(t) = req.topics.iter().find(|t| !util::valid_topic_name(t)) {
                return Err(ApiError::invalid_field(format!(
                    "'{t}' is not a valid topic name"
                )));
            }
            let _busy = i.busy.lock().await;
            i.consumer.subscribe(req.topics).await?;
            Ok(StatusCode::NO_CONTENT)
        }
    }
}

/// The instance's subscription.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 200, description = "Subscribed topics", body = Subscription, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn get_subscription(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let i = instance(&s, &caller, &group, &name)?;
    let mut topics = i.consumer.subscription().await?;
    topics.retain(|t| acl::may_describe(&s, &caller, t));
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Subscription {
            topics,
            topic_pattern: None,
        },
    ))
}

/// Unsubscribe the instance from every topic.
#[utoipa::path(delete, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 204, description = "Unsubscribed"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn unsubscribe(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let _busy = i.busy.lock().await;
    i.consumer.unsubscribe().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A topic-partition.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct PartitionJson {
    pub topic: String,
    pub partition: i32,
}

/// Partitions.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Partitions {
    pub partitions: Vec<PartitionJson>,
}

/// The partitions the group assigned to the instance.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/assignments", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses(
        (status = 200, description = "Assigned partitions", body = Partitions, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
    ))]
pub async fn assignments(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let i = instance(&s, &caller, &group, &name)?;
    let partitions = i
        .consumer
        .assignment()
        .await?
        .into_iter()
        .filter(|p| acl::may_describe(&s, &caller, &p.topic))
        .map(|p| PartitionJson {
            topic: p.topic,
            partition: p.partition,
        })
        .collect();
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Partitions { partitions },
    ))
}

/// Query of a records request.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RecordsQuery {
    /// Milliseconds to wait for records [default: 1000]
    pub timeout: Option<u64>,
    /// Byte budget for keys, values and headers (at least one record is returned)
    pub max_bytes: Option<u64>,
}

/// Fetch records for the instance's assigned partitions.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/records", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path), RecordsQuery),
    responses(
        (status = 200, description = "Records", body = [ConsumerRecord], content_type = "application/vnd.kafka.binary.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 406, description = "Accept names another format than the instance's (40601)", body = ErrorBody),
        (status = 422, description = "A record is not JSON in a json instance (42203)", body = ErrorBody),
    ))]
pub async fn records(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    query: Result<Query<RecordsQuery>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = query.map_err(|e| ApiError::invalid_field(e.body_text()))?;
    let i = instance(&s, &caller, &group, &name)?;
    if let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) {
        let other = match i.format {
            Format::Binary => "vnd.kafka.json",
            Format::Json => "vnd.kafka.binary",
        };
        if accept.contains(other) && !accept.contains(i.format.media()) {
            return Err(ApiError::new(
                StatusCode::NOT_ACCEPTABLE,
                error::CONSUMER_FORMAT_MISMATCH,
                format!(
                    "The instance reads the {:?} format; accept {}",
                    i.format,
                    i.format.media()
                ),
            ));
        }
    }
    let timeout = q
        .timeout
        .map_or(s.config.default_poll_timeout, Duration::from_millis)
        .min(s.config.max_poll_timeout);
    let max_bytes = q.max_bytes.map_or(s.config.default_max_bytes, |b| {
        b.clamp(1, s.config.default_max_bytes.max(1) as u64 * 8) as usize
    });
    let _busy = i.busy.lock().await;
    let got = i.consumer.poll(timeout, max_bytes).await;
    i.touch();
    let got = screen(&s, &caller, i.consumer.as_ref(), got?).await?;
    let mut out = Vec::with_capacity(got.len());
    for (n, r) in got.iter().enumerate() {
        match encode_record(r, i.format) {
            Ok(x) => out.push(x),
            Err(e) => {
                // Give the records from here on back: the next read starts at them.
                give_back(i.consumer.as_ref(), &got[n..]).await?;
                if out.is_empty() {
                    return Err(ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        error::NOT_JSON_RECORD,
                        e,
                    ));
                }
                break;
            }
        }
    }
    Ok(util::json_response(StatusCode::OK, i.format.media(), &out))
}

/// A topic-partition's offset.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct OffsetJson {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Offsets.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Offsets {
    pub offsets: Vec<OffsetJson>,
}

/// A commit's body: the offsets to commit. Without them (`{}`, `"offsets": null` or
/// `"offsets": []`, as without a body) everything the instance has read is committed, as
/// Confluent's.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CommitOffsets {
    pub offsets: Option<Vec<OffsetJson>>,
}

/// A committed offset.
#[derive(Debug, Serialize, ToSchema)]
pub struct CommittedJson {
    pub topic: String,
    pub partition: i32,
    /// The next offset the group reads (-1: none committed)
    pub offset: i64,
    pub metadata: String,
}

/// Committed offsets.
#[derive(Debug, Serialize, ToSchema)]
pub struct Committed {
    pub offsets: Vec<CommittedJson>,
}

fn check_partitions<'a>(it: impl Iterator<Item = (&'a str, i32)>) -> ApiResult<()> {
    for (t, p) in it {
        if !util::valid_topic_name(t) {
            return Err(ApiError::invalid_field(format!(
                "'{t}' is not a valid topic name"
            )));
        }
        if p < 0 {
            return Err(ApiError::invalid_field(format!(
                "partition {p} must not be negative"
            )));
        }
    }
    Ok(())
}

fn check_offsets(offsets: &[OffsetJson]) -> ApiResult<()> {
    check_partitions(offsets.iter().map(|o| (o.topic.as_str(), o.partition)))?;
    if let Some(o) = offsets.iter().find(|o| o.offset < 0) {
        return Err(ApiError::invalid_field(format!(
            "offset {} must not be negative",
            o.offset
        )));
    }
    Ok(())
}

/// Commit offsets. With offsets in the body, each given offset is the last record
/// processed (the group resumes after it, as Confluent's); without a body, or without
/// offsets in it, everything the instance has read so far.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/offsets", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (CommitOffsets = "application/vnd.kafka.v2+json"),
        (CommitOffsets = "application/json"),
    )),
    responses(
        (status = 204, description = "Committed"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "The instance does not own a partition now (rebalanced)", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn commit(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Option<CommitOffsets> = body_json(&s, &headers, body).await?;
    let offsets = match req.and_then(|r| r.offsets) {
        Some(offsets) if !offsets.is_empty() => {
            acl::topics(
                &s,
                &caller,
                Operation::Read,
                offsets.iter().map(|o| o.topic.as_str()),
            )?;
            check_offsets(&offsets)?;
            Some(
                offsets
                    .into_iter()
                    .map(|o| PartitionOffset {
                        topic: o.topic,
                        partition: o.partition,
                        offset: o.offset.saturating_add(1),
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    let _busy = i.busy.lock().await;
    i.consumer.commit(offsets).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The group's committed offsets for the given partitions (the body, as Confluent's
/// GET with a body), or for the instance's assignment without one.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/offsets", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Partitions = "application/vnd.kafka.v2+json"),
        (Partitions = "application/json"),
    )),
    responses(
        (status = 200, description = "Committed offsets", body = Committed, content_type = "application/vnd.kafka.v2+json"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn committed(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Option<Partitions> = body_json(&s, &headers, body).await?;
    let partitions: Vec<TopicPartition> = req
        .map(|r| r.partitions)
        .unwrap_or_default()
        .into_iter()
        .map(|p| TopicPartition {
            topic: p.topic,
            partition: p.partition,
        })
        .collect();
    acl::topics(
        &s,
        &caller,
        Operation::Describe,
        partitions.iter().map(|p| p.topic.as_str()),
    )?;
    check_partitions(partitions.iter().map(|p| (p.topic.as_str(), p.partition)))?;
    let got = i.consumer.committed(partitions).await?;
    let offsets = got
        .into_iter()
        .filter(|o| acl::may_describe(&s, &caller, &o.topic))
        .map(|o| CommittedJson {
            topic: o.topic,
            partition: o.partition,
            offset: o.offset,
            metadata: String::new(),
        })
        .collect();
    Ok(util::json_response(
        StatusCode::OK,
        V2,
        &Committed { offsets },
    ))
}

/// Set the next offsets the instance reads (the partitions must be assigned to it).
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Offsets = "application/vnd.kafka.v2+json"),
        (Offsets = "application/json"),
    )),
    responses(
        (status = 204, description = "Positioned"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "A partition is not assigned to the instance", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn seek(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Offsets = body_json(&s, &headers, body)
        .await?
        .ok_or_else(|| ApiError::invalid_body("a body {\"offsets\": [...]} is required"))?;
    acl::topics(
        &s,
        &caller,
        Operation::Read,
        req.offsets.iter().map(|o| o.topic.as_str()),
    )?;
    check_offsets(&req.offsets)?;
    let _busy = i.busy.lock().await;
    i.consumer
        .seek(
            req.offsets
                .into_iter()
                .map(|o| PartitionOffset {
                    topic: o.topic,
                    partition: o.partition,
                    offset: o.offset,
                })
                .collect(),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn seek_to(
    s: Shared,
    caller: Caller,
    group: String,
    name: String,
    headers: HeaderMap,
    body: Body,
    end: End,
) -> ApiResult<StatusCode> {
    let i = instance(&s, &caller, &group, &name)?;
    let req: Partitions = body_json(&s, &headers, body)
        .await?
        .ok_or_else(|| ApiError::invalid_body("a body {\"partitions\": [...]} is required"))?;
    acl::topics(
        &s,
        &caller,
        Operation::Read,
        req.partitions.iter().map(|p| p.topic.as_str()),
    )?;
    check_partitions(
        req.partitions
            .iter()
            .map(|p| (p.topic.as_str(), p.partition)),
    )?;
    let _busy = i.busy.lock().await;
    i.consumer
        .seek_to(
            req.partitions
                .into_iter()
                .map(|p| TopicPartition {
                    topic: p.topic,
                    partition: p.partition,
                })
                .collect(),
            end,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Move to the first offset of the given partitions.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions/beginning", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Partitions = "application/vnd.kafka.v2+json"),
        (Partitions = "application/json"),
    )),
    responses(
        (status = 204, description = "Positioned"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "A partition is not assigned to the instance", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn seek_beginning(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    seek_to(s, caller, group, name, headers, body, End::Beginning).await
}

/// Move past the last offset of the given partitions.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions/end", tag = "v2 consumers",
    params(("group" = String, Path), ("instance" = String, Path)),
    request_body(content(
        (Partitions = "application/vnd.kafka.v2+json"),
        (Partitions = "application/json"),
    )),
    responses(
        (status = 204, description = "Positioned"),
        (status = 403, description = "Not authorized to read the group or a topic (40301)", body = ErrorBody),
        (status = 404, description = "Unknown instance (40403)", body = ErrorBody),
        (status = 409, description = "A partition is not assigned to the instance", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    ))]
pub async fn seek_end(
    State(s): State<Shared>,
    caller: Caller,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    seek_to(s, caller, group, name, headers, body, End::End).await
}
