//! The gateway's `Service` as a Kafka client of its own broker.
//!
//! Why a Kafka client rather than calls into the broker: a v2 consumer instance must be
//! a real group member (an HTTP instance and a Java consumer in the same group share
//! partitions), and the produce path must keep every Kafka semantic (partitioner,
//! idempotence, acks=all, errors). Consumers, metadata and admin calls are librdkafka
//! against the broker's listener; librdkafka costs threads per client, so consumer
//! instances are capped and expire (see `crate::consumers`). Produce is the gateway's
//! own idempotent producer (`crate::producer`), in-process to the partitions this broker
//! leads.
//!
//! librdkafka calls that block run on tokio's blocking pool, never on the runtime. A
//! group member is [`consumer`]'s.

mod consumer;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use self::consumer::KafkaConsumer;
use crate::producer::{LocalLeader, NativeProducer, ProducerConfig};
use crate::queue::{ProduceQueue, QueueLimits};
use crate::service::{
    BrokerInfo, ConfigChange, ConsumerSettings, GroupConsumer, GroupInfo, GroupOffset, MemberInfo,
    NewTopicSpec, OffsetReset, PartitionInfo, ProduceRecord, Produced, ReadResult, Record, Service,
    ServiceError, TopicInfo, TopicPartition, codes,
};

/// How the gateway's Kafka clients are set up.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// The broker's Kafka address (HOST:PORT).
    pub bootstrap: String,
    /// Records the gateway holds in flight (enqueued, not yet acknowledged). A request
    /// that does not fit within `queue_wait` is refused with 429.
    pub produce_queue_records: u32,
    /// Bytes of keys, values and headers the gateway holds in flight, bounded as the
    /// records are (see `crate::queue`).
    pub produce_queue_bytes: u32,
    pub queue_wait: Duration,
    /// How long a record may wait for acks=all, retries included (message.timeout.ms).
    pub delivery_timeout: Duration,
    /// Metadata and admin calls.
    pub request_timeout: Duration,
    /// The broker in this process: produce reaches the partitions it leads without a
    /// socket.
    pub local: Option<LocalLeader>,
    /// librdkafka settings for a secured listener (security.protocol, ssl.*, sasl.*).
    pub client_properties: Vec<(String, String)>,
    /// The same security for the native producer's connections.
    pub security: strata_client::ClientSecurity,
}

impl KafkaConfig {
    pub fn new(bootstrap: impl Into<String>) -> KafkaConfig {
        KafkaConfig {
            bootstrap: bootstrap.into(),
            produce_queue_records: 100_000,
            produce_queue_bytes: 64 << 20,
            queue_wait: Duration::from_secs(1),
            delivery_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(5),
            local: None,
            client_properties: Vec::new(),
            security: strata_client::ClientSecurity::default(),
        }
    }
}

/// Readers kept for stateless reads; more are created on demand and dropped after.
const READER_POOL: usize = 4;

/// How long a topic's partition count is trusted, so produce requests do not each pay a
/// metadata round trip.
const PARTITIONS_TTL: Duration = Duration::from_secs(1);

/// `Service` over librdkafka (consumers, metadata, admin) and the native producer.
pub struct KafkaService {
    config: KafkaConfig,
    producer: NativeProducer,
    admin: Arc<AdminClient<DefaultClientContext>>,
    queue: ProduceQueue,
    readers: Arc<Mutex<Vec<BaseConsumer>>>,
    partitions: Mutex<HashMap<String, (Instant, i32)>>,
}

impl std::fmt::Debug for KafkaService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaService")
            .field("bootstrap", &self.config.bootstrap)
            .finish_non_exhaustive()
    }
}

fn err(e: KafkaError) -> ServiceError {
    let code = e.rdkafka_error_code().map_or(-1, |c| c as i32);
    ServiceError::new(code, e.to_string())
}

/// The partitions in a member's consumer-protocol assignment; none for bytes that are
/// not one.
fn assigned(b: &[u8]) -> Vec<TopicPartition> {
    strata_proto::consumer_protocol::decode_assignment(b)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(topic, partitions)| {
            partitions.into_iter().map(move |partition| TopicPartition {
                topic: topic.clone(),
                partition,
            })
        })
        .collect()
}

/// An admin call's error: one librdkafka refuses before sending (a partition count or
/// replication factor out of its range) is the caller's (an invalid argument).
fn admin_err(e: KafkaError) -> ServiceError {
    match e {
        KafkaError::AdminOpCreation(m) => ServiceError::new(codes::LOCAL_INVALID_ARG, m),
        e => err(e),
    }
}

fn blocking_err(e: tokio::task::JoinError) -> ServiceError {
    ServiceError::new(-1, format!("gateway worker failed: {e}"))
}

fn base_config(config: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.bootstrap)
        .set("client.id", "strata-gateway")
        // Describing or producing to a topic must never create it behind the user's back.
        .set("allow.auto.create.topics", "false")
        .set("log_level", "3");
    for (k, v) in &config.client_properties {
        c.set(k, v);
    }
    c
}

impl KafkaService {
    pub fn new(config: KafkaConfig) -> Result<KafkaService, ServiceError> {
        // Produce goes over the wire protocol from the gateway's own idempotent producer
        // (`crate::producer`); librdkafka serves metadata, admin calls and consumers.
        let producer = NativeProducer::start(ProducerConfig {
            request_timeout: config.request_timeout,
            delivery_timeout: config.delivery_timeout,
            local: config.local.clone(),
            security: config.security.clone(),
            ..ProducerConfig::new(config.bootstrap.clone())
        });
        let admin: AdminClient<DefaultClientContext> =
            base_config(&config).create().map_err(err)?;
        Ok(KafkaService {
            queue: ProduceQueue::new(QueueLimits {
                records: config.produce_queue_records,
                bytes: config.produce_queue_bytes,
                wait: config.queue_wait,
            }),
            config,
            producer,
            admin: Arc::new(admin),
            readers: Arc::default(),
            partitions: Mutex::default(),
        })
    }

    /// The first topic an admin call could not `verb` as an error; the partition
    /// counts of the topics it named are forgotten (they were created or deleted).
    fn topic_results(
        &self,
        results: Vec<rdkafka::admin::TopicResult>,
        verb: &str,
    ) -> Result<(), ServiceError> {
        let mut first = None;
        for r in results {
            let name = match r {
                Ok(name) => name,
                Err((name, code)) => {
                    first.get_or_insert_with(|| {
                        ServiceError::new(
                            code as i32,
                            format!("cannot {verb} topic '{name}': {code}"),
                        )
                    });
                    name
                }
            };
            if let Ok(mut m) = self.partitions.lock() {
                m.remove(&name);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Sends `req` to the first bootstrap broker that answers, over strata-client (the
    /// gateway's own security settings); `what` names it in the error when none does.
    async fn call_any<Req, Resp>(
        &self,
        api: kafka_protocol::messages::ApiKey,
        version: i16,
        req: &Req,
        what: &str,
    ) -> Result<Resp, ServiceError>
    where
        Req: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
        Resp: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion,
    {
        let timeout = self.config.request_timeout;
        let mut last = String::from("no address");
        for addr in self
            .config
            .bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            let mut conn = match strata_client::KafkaConnection::connect_with(
                addr,
                "strata-gateway",
                timeout,
                &self.config.security,
            )
            .await
            {
                Ok(c) => c,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            match conn.call(api, version, req, timeout).await {
                Ok(r) => return Ok(r),
                Err(e) => last = e.to_string(),
            }
        }
        Err(ServiceError::new(
            codes::LOCAL_ALL_BROKERS_DOWN,
            format!("no broker answered {what}: {last}"),
        ))
    }

    async fn metadata(
        &self,
        topic: Option<String>,
    ) -> Result<rdkafka::metadata::Metadata, ServiceError> {
        let admin = self.admin.clone();
        let timeout = self.config.request_timeout;
        tokio::task::spawn_blocking(move || {
            admin
                .inner()
                .fetch_metadata(topic.as_deref(), timeout)
                .map_err(err)
        })
        .await
        .map_err(blocking_err)?
    }

    /// A topic's partitions as metadata shows them, by index; unknown (or without
    /// partitions): UNKNOWN_TOPIC_OR_PARTITION.
    async fn partitions_of(&self, topic: &str) -> Result<Vec<PartitionInfo>, ServiceError> {
        let md = self.metadata(Some(topic.to_string())).await?;
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .ok_or_else(|| ServiceError::unknown_topic(topic))?;
        if let Some(e) = t.error() {
            return Err(topic_error(topic, e));
        }
        let mut partitions: Vec<PartitionInfo> = t
            .partitions()
            .iter()
            .map(|p| PartitionInfo {
                partition: p.id(),
                leader: p.leader(),
                replicas: p.replicas().to_vec(),
                isr: p.isr().to_vec(),
            })
            .collect();
        partitions.sort_by_key(|p| p.partition);
        if partitions.is_empty() {
            return Err(ServiceError::unknown_topic(topic));
        }
        Ok(partitions)
    }

    fn reader(&self) -> Result<BaseConsumer, ServiceError> {
        if let Some(c) = self.readers.lock().ok().and_then(|mut r| r.pop()) {
            return Ok(c);
        }
        base_config(&self.config)
            .set("group.id", "strata-gateway-stateless")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "error")
            .create()
            .map_err(err)
    }
}

/// A topic's metadata error: unknown (404) or something the caller may retry.
fn topic_error(topic: &str, e: rdkafka::types::RDKafkaRespErr) -> ServiceError {
    let code = rdkafka::types::RDKafkaErrorCode::from(e) as i32;
    if code == codes::UNKNOWN_TOPIC_OR_PARTITION || code == codes::INVALID_TOPIC_EXCEPTION {
        return ServiceError::unknown_topic(topic);
    }
    ServiceError::new(code, format!("topic '{topic}': {e:?}"))
}

fn to_record(m: &BorrowedMessage<'_>) -> Record {
    Record {
        topic: m.topic().to_string(),
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers: m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|x| (x.key.to_string(), x.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default(),
        timestamp: m.timestamp().to_millis(),
    }
}

#[async_trait]
impl Service for KafkaService {
    async fn ready(&self) -> bool {
        self.metadata(None).await.is_ok()
    }

    async fn list_topics(&self) -> Result<Vec<String>, ServiceError> {
        let md = self.metadata(None).await?;
        let mut names: Vec<String> = md
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.name().starts_with("__"))
            .map(|t| t.name().to_string())
            .collect();
        names.sort();
        Ok(names)
    }

    async fn describe_topic(&self, topic: &str) -> Result<TopicInfo, ServiceError> {
        let partitions = self.partitions_of(topic).await?;
        // Configs are a nicety: the topic is described without them if the admin call
        // fails.
        let mut configs = BTreeMap::new();
        let opts = AdminOptions::new().request_timeout(Some(self.config.request_timeout));
        if let Ok(results) = self
            .admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &opts)
            .await
        {
            for r in results.into_iter().flatten() {
                for e in r.entries {
                    if let Some(v) = e.value {
                        configs.insert(e.name, v);
                    }
                }
            }
        }
        Ok(TopicInfo {
            name: topic.to_string(),
            partitions,
            configs,
        })
    }

    async fn partition_count(&self, topic: &str) -> Result<i32, ServiceError> {
        let now = Instant::now();
        if let Some((at, n)) = self
            .partitions
            .lock()
            .ok()
            .and_then(|m| m.get(topic).copied())
            && now.duration_since(at) < PARTITIONS_TTL
        {
            return Ok(n);
        }
        let n = self.partitions_of(topic).await?.len() as i32;
        if let Ok(mut m) = self.partitions.lock() {
            // Bounded by the topics that exist (unknown ones are not cached).
            m.insert(topic.to_string(), (now, n));
        }
        Ok(n)
    }

    async fn produce(
        &self,
        topic: &str,
        records: Vec<ProduceRecord>,
    ) -> Result<Vec<Result<Produced, ServiceError>>, ServiceError> {
        // Held until every record is acknowledged (or failed): the records' bytes are
        // the gateway's until then.
        let admitted = self.queue.admit(&records).await?;
        let partitions = self.partition_count(topic).await?;
        let out = self.producer.produce(topic, partitions, records).await;
        drop(admitted);
        Ok(out)
    }

    async fn list_brokers(&self) -> Result<Vec<BrokerInfo>, ServiceError> {
        let md = self.metadata(None).await?;
        let mut brokers: Vec<BrokerInfo> = md
            .brokers()
            .iter()
            .map(|b| BrokerInfo {
                id: b.id(),
                host: b.host().to_string(),
                port: b.port(),
            })
            .collect();
        brokers.sort_by_key(|b| b.id);
        Ok(brokers)
    }

    async fn list_groups(&self) -> Result<Vec<GroupInfo>, ServiceError> {
        let admin = self.admin.clone();
        let timeout = self.config.request_timeout;
        tokio::task::spawn_blocking(move || {
            let list = admin.inner().fetch_group_list(None, timeout).map_err(err)?;
            let mut groups: Vec<GroupInfo> = list
                .groups()
                .iter()
                .map(|g| GroupInfo {
                    group: g.name().to_string(),
                    state: g.state().to_string(),
                    protocol_type: g.protocol_type().to_string(),
                    protocol: g.protocol().to_string(),
                    members: g
                        .members()
                        .iter()
                        .map(|m| MemberInfo {
                            member_id: m.id().to_string(),
                            client_id: m.client_id().to_string(),
                            host: m.client_host().to_string(),
                            assignment: m.assignment().map(assigned).unwrap_or_default(),
                        })
                        .collect(),
                })
                .collect();
            groups.sort_by(|a, b| a.group.cmp(&b.group));
            Ok(groups)
        })
        .await
        .map_err(blocking_err)?
    }

    async fn group_offsets(&self, group: &str) -> Result<Vec<GroupOffset>, ServiceError> {
        let md = self.metadata(None).await?;
        let mut tpl = TopicPartitionList::new();
        for t in md.topics() {
            for p in t.partitions() {
                tpl.add_partition(t.name(), p.id());
            }
        }
        let mut config = base_config(&self.config);
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false");
        let timeout = self.config.request_timeout;
        tokio::task::spawn_blocking(move || {
            let c: BaseConsumer = config.create().map_err(err)?;
            let committed = c.committed_offsets(tpl, timeout).map_err(err)?;
            let mut out = Vec::new();
            for e in committed.elements() {
                let Offset::Offset(at) = e.offset() else {
                    continue;
                };
                if at < 0 {
                    continue;
                }
                let (_, end) = c
                    .fetch_watermarks(e.topic(), e.partition(), timeout)
                    .map_err(err)?;
                out.push(GroupOffset {
                    topic: e.topic().to_string(),
                    partition: e.partition(),
                    committed: at,
                    end,
                });
            }
            Ok(out)
        })
        .await
        .map_err(blocking_err)?
    }

    async fn create_topic_with(&self, spec: &NewTopicSpec) -> Result<(), ServiceError> {
        // CreateTopics over strata-client rather than librdkafka's admin client, whose
        // binding drops the broker's error message: a refused config (a
        // parquet.value.schema that does not parse, say) is answered with the broker's
        // reason, not only its code.
        use kafka_protocol::messages::create_topics_request::{
            CreatableTopic, CreatableTopicConfig,
        };
        use kafka_protocol::messages::{
            ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName,
        };
        use kafka_protocol::protocol::StrBytes;
        let mut t = CreatableTopic::default();
        t.name = TopicName(StrBytes::from_string(spec.name.clone()));
        t.num_partitions = spec.partitions;
        t.replication_factor = spec.replication_factor;
        t.configs = spec
            .configs
            .iter()
            .map(|(k, v)| {
                let mut c = CreatableTopicConfig::default();
                c.name = StrBytes::from_string(k.clone());
                c.value = Some(StrBytes::from_string(v.clone()));
                c
            })
            .collect();
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = i32::try_from(self.config.request_timeout.as_millis()).unwrap_or(i32::MAX);
        req.validate_only = spec.validate_only;
        let r: CreateTopicsResponse = self
            .call_any(ApiKey::CreateTopics, 5, &req, "CreateTopics")
            .await?;
        if let Ok(mut m) = self.partitions.lock() {
            m.remove(&spec.name);
        }
        for t in &r.topics {
            if t.error_code != 0 {
                return Err(ServiceError::new(
                    i32::from(t.error_code),
                    t.error_message.as_ref().map_or_else(
                        || format!("cannot create topic '{}'", spec.name),
                        |m| format!("cannot create topic '{}': {m}", spec.name),
                    ),
                ));
            }
        }
        Ok(())
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), ServiceError> {
        let opts = AdminOptions::new().operation_timeout(Some(self.config.request_timeout));
        let results = self
            .admin
            .delete_topics(&[topic], &opts)
            .await
            .map_err(admin_err)?;
        self.topic_results(results, "delete")
    }

    async fn alter_topic_configs(
        &self,
        topic: &str,
        changes: &[ConfigChange],
        validate_only: bool,
    ) -> Result<(), ServiceError> {
        // librdkafka's binding has only the replacing AlterConfigs, which would reset
        // every config not named; IncrementalAlterConfigs (KIP-339) changes just these.
        use kafka_protocol::messages::incremental_alter_configs_request::{
            AlterConfigsResource, AlterableConfig,
        };
        use kafka_protocol::messages::{
            ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
        };
        use kafka_protocol::protocol::StrBytes;
        let mut res = AlterConfigsResource::default();
        res.resource_type = 2; // TOPIC
        res.resource_name = StrBytes::from_string(topic.to_string());
        for c in changes {
            let mut e = AlterableConfig::default();
            e.name = StrBytes::from_string(c.name.clone());
            match &c.value {
                Some(v) => {
                    e.config_operation = 0; // SET
                    e.value = Some(StrBytes::from_string(v.clone()));
                }
                None => e.config_operation = 1, // DELETE
            }
            res.configs.push(e);
        }
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources = vec![res];
        req.validate_only = validate_only;
        let r: IncrementalAlterConfigsResponse = self
            .call_any(
                ApiKey::IncrementalAlterConfigs,
                1,
                &req,
                "IncrementalAlterConfigs",
            )
            .await?;
        for res in &r.responses {
            if res.error_code != 0 {
                return Err(ServiceError::new(
                    i32::from(res.error_code),
                    res.error_message.as_ref().map_or_else(
                        || format!("cannot alter the configs of topic '{topic}'"),
                        |m| m.to_string(),
                    ),
                ));
            }
        }
        Ok(())
    }

    async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: Option<i64>,
        max_bytes: usize,
        max_wait: Duration,
    ) -> Result<ReadResult, ServiceError> {
        let c = self.reader()?;
        let topic = topic.to_string();
        let timeout = self.config.request_timeout;
        let readers = self.readers.clone();
        tokio::task::spawn_blocking(move || {
            let result = read_blocking(&c, &topic, partition, offset, max_bytes, max_wait, timeout);
            let _ = c.unassign();
            if result.is_ok()
                && let Ok(mut r) = readers.lock()
                && r.len() < READER_POOL
            {
                r.push(c);
            }
            result
        })
        .await
        .map_err(blocking_err)?
    }

    async fn consumer(
        &self,
        group: &str,
        settings: ConsumerSettings,
    ) -> Result<Box<dyn GroupConsumer>, ServiceError> {
        let reset = match settings.offset_reset {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
            OffsetReset::None => "error",
        };
        let c: BaseConsumer = base_config(&self.config)
            .set("group.id", group)
            .set("enable.auto.commit", settings.auto_commit.to_string())
            .set("auto.offset.reset", reset)
            .set("enable.partition.eof", "false")
            .create()
            .map_err(err)?;
        Ok(Box::new(KafkaConsumer::new(c, self.config.request_timeout)))
    }
}

fn read_blocking(
    c: &BaseConsumer,
    topic: &str,
    partition: i32,
    offset: Option<i64>,
    max_bytes: usize,
    max_wait: Duration,
    timeout: Duration,
) -> Result<ReadResult, ServiceError> {
    let (low, high) = c.fetch_watermarks(topic, partition, timeout).map_err(err)?;
    let offset = offset.unwrap_or(low);
    if offset < low || offset > high {
        return Err(ServiceError::new(
            codes::OFFSET_OUT_OF_RANGE,
            format!("offset {offset} is outside the partition's range [{low}, {high}]"),
        ));
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
        .map_err(err)?;
    c.assign(&tpl).map_err(err)?;
    // Records below the high watermark are there to read: wait for the fetch even when
    // the caller would not wait for new ones.
    let wait = if offset < high {
        max_wait.max(timeout)
    } else {
        max_wait
    };
    let mut records = Vec::new();
    let mut high_watermark = high;
    // A record past max_bytes is dropped: this consumer is reassigned on the next read.
    poll_into(c, Instant::now() + wait, max_bytes, &mut records, 0, offset)?;
    if let Some(last) = records.last() {
        high_watermark = high_watermark.max(last.offset + 1);
    }
    Ok(ReadResult {
        records,
        high_watermark,
        log_start_offset: low,
    })
}

/// Polls `c` into `out` (which already holds `bytes`), skipping records below `from`:
/// waits until `deadline` for the first record, then takes what is ready without waiting,
/// up to `max_bytes` (at least one record). Returns the record that would have passed
/// `max_bytes`, for the caller to keep. An error with nothing read is returned; after
/// some records it ends the batch.
fn poll_into(
    c: &BaseConsumer,
    deadline: Instant,
    max_bytes: usize,
    out: &mut Vec<Record>,
    mut bytes: usize,
    from: i64,
) -> Result<Option<Record>, ServiceError> {
    loop {
        let wait = if out.is_empty() {
            deadline.saturating_duration_since(Instant::now())
        } else {
            Duration::ZERO
        };
        match c.poll(wait) {
            Some(Ok(m)) if m.offset() < from => {}
            Some(Ok(m)) => {
                let r = to_record(&m);
                if !out.is_empty() && bytes + r.size() > max_bytes {
                    return Ok(Some(r));
                }
                bytes += r.size();
                out.push(r);
                if bytes >= max_bytes {
                    return Ok(None);
                }
            }
            Some(Err(e)) if out.is_empty() => return Err(err(e)),
            Some(Err(_)) => return Ok(None),
            None if !out.is_empty() || Instant::now() >= deadline => return Ok(None),
            None => {}
        }
    }
}
