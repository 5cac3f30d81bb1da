//! HTTP semantics against an in-memory service: content types, error shapes, body
//! limits, idempotency, authentication, consumer instances, and the OpenAPI document
//! against the routes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::service::*;
use crate::{GatewayConfig, router};

/// Topics in memory; produce can be made to fail or to take a while.
#[derive(Default)]
struct Fake {
    topics: Mutex<HashMap<String, Vec<Vec<Record>>>>,
    fail: Mutex<Option<i32>>,
    delay: Mutex<Duration>,
    produce_calls: AtomicUsize,
    /// What every consumer's poll answers (nothing: it waits, as a real member).
    feed: Arc<Mutex<Vec<Record>>>,
    /// Every consumer's seeks, in order: where each said its next read of a partition
    /// starts (a move past a record or a hold too).
    seeks: Arc<Mutex<Vec<PartitionOffset>>>,
    /// What list_groups answers.
    groups: Mutex<Vec<GroupInfo>>,
    /// (group, committed offset) for group_offsets.
    group_offsets: Mutex<Vec<(String, GroupOffset)>>,
    /// Each topic's own config values (describe_topic adds the defaults).
    configs: Mutex<HashMap<String, BTreeMap<String, String>>>,
}

impl Fake {
    fn with_topic(name: &str, partitions: usize) -> Arc<Fake> {
        let f = Fake::default();
        f.topics
            .lock()
            .unwrap()
            .insert(name.into(), vec![Vec::new(); partitions]);
        Arc::new(f)
    }

    fn appended(&self, topic: &str) -> usize {
        self.topics.lock().unwrap()[topic]
            .iter()
            .map(Vec::len)
            .sum()
    }
}

#[async_trait]
impl Service for Fake {
    async fn ready(&self) -> bool {
        true
    }
    async fn list_brokers(&self) -> Result<Vec<BrokerInfo>, ServiceError> {
        Ok(vec![BrokerInfo {
            id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
        }])
    }
    async fn list_groups(&self) -> Result<Vec<GroupInfo>, ServiceError> {
        Ok(self.groups.lock().unwrap().clone())
    }
    async fn group_offsets(&self, group: &str) -> Result<Vec<GroupOffset>, ServiceError> {
        Ok(self
            .group_offsets
            .lock()
            .unwrap()
            .iter()
            .filter(|(g, _)| g == group)
            .map(|(_, o)| o.clone())
            .collect())
    }
    async fn list_topics(&self) -> Result<Vec<String>, ServiceError> {
        Ok(self.topics.lock().unwrap().keys().cloned().collect())
    }
    async fn describe_topic(&self, topic: &str) -> Result<TopicInfo, ServiceError> {
        let t = self.topics.lock().unwrap();
        let parts = t
            .get(topic)
            .ok_or_else(|| ServiceError::unknown_topic(topic))?;
        Ok(TopicInfo {
            name: topic.into(),
            partitions: (0..parts.len() as i32)
                .map(|p| PartitionInfo {
                    partition: p,
                    leader: 1,
                    replicas: vec![1],
                    isr: vec![1],
                })
                .collect(),
            configs: strata_proto::config::DEFAULTS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .chain(
                    self.configs
                        .lock()
                        .unwrap()
                        .get(topic)
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.clone())),
                )
                .collect(),
        })
    }
    async fn produce(
        &self,
        topic: &str,
        records: Vec<ProduceRecord>,
    ) -> Result<Vec<Result<Produced, ServiceError>>, ServiceError> {
        self.produce_calls.fetch_add(1, Ordering::SeqCst);
        let delay = *self.delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        if let Some(code) = *self.fail.lock().unwrap() {
            return Ok(records
                .iter()
                .map(|_| Err(ServiceError::new(code, "refused")))
                .collect());
        }
        let mut t = self.topics.lock().unwrap();
        let parts = t
            .get_mut(topic)
            .ok_or_else(|| ServiceError::unknown_topic(topic))?;
        Ok(records
            .into_iter()
            .map(|r| {
                let p = r.partition.unwrap_or(0);
                let log = &mut parts[p as usize];
                let offset = log.len() as i64;
                log.push(Record {
                    topic: topic.into(),
                    partition: p,
                    offset,
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                    timestamp: r.timestamp,
                });
                Ok(Produced {
                    partition: p,
                    offset,
                    timestamp: r.timestamp,
                })
            })
            .collect())
    }
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: Option<i64>,
        _max_bytes: usize,
        _max_wait: Duration,
    ) -> Result<ReadResult, ServiceError> {
        let t = self.topics.lock().unwrap();
        let log = &t[topic][partition as usize];
        let from = offset.unwrap_or(0);
        if from > log.len() as i64 {
            return Err(ServiceError::new(
                codes::OFFSET_OUT_OF_RANGE,
                "out of range",
            ));
        }
        Ok(ReadResult {
            records: log[from as usize..].to_vec(),
            high_watermark: log.len() as i64,
            log_start_offset: 0,
        })
    }
    async fn create_topic_with(&self, spec: &NewTopicSpec) -> Result<(), ServiceError> {
        let mut t = self.topics.lock().unwrap();
        if t.contains_key(&spec.name) {
            return Err(ServiceError::new(
                codes::TOPIC_ALREADY_EXISTS,
                format!("Topic '{}' already exists.", spec.name),
            ));
        }
        if spec.partitions == 0 || spec.partitions > 100 {
            return Err(ServiceError::new(
                codes::INVALID_PARTITIONS,
                "the fake cluster takes 1 to 100 partitions",
            ));
        }
        if !spec.validate_only {
            t.insert(
                spec.name.clone(),
                vec![Vec::new(); spec.partitions.max(1) as usize],
            );
            self.configs
                .lock()
                .unwrap()
                .insert(spec.name.clone(), spec.configs.iter().cloned().collect());
        }
        Ok(())
    }
    async fn delete_topic(&self, topic: &str) -> Result<(), ServiceError> {
        self.configs.lock().unwrap().remove(topic);
        match self.topics.lock().unwrap().remove(topic) {
            Some(_) => Ok(()),
            None => Err(ServiceError::unknown_topic(topic)),
        }
    }
    async fn alter_topic_configs(
        &self,
        topic: &str,
        changes: &[ConfigChange],
        validate_only: bool,
    ) -> Result<(), ServiceError> {
        if !self.topics.lock().unwrap().contains_key(topic) {
            return Err(ServiceError::unknown_topic(topic));
        }
        if let Some(c) = changes.iter().find(|c| {
            !strata_proto::config::DEFAULTS
                .iter()
                .any(|(k, _)| *k == c.name)
        }) {
            return Err(ServiceError::new(
                codes::INVALID_CONFIG,
                format!("unknown topic config '{}'", c.name),
            ));
        }
        if !validate_only {
            let mut all = self.configs.lock().unwrap();
            let mine = all.entry(topic.to_string()).or_default();
            for c in changes {
                match &c.value {
                    Some(v) => mine.insert(c.name.clone(), v.clone()),
                    None => mine.remove(&c.name),
                };
            }
        }
        Ok(())
    }
    async fn consumer(
        &self,
        _group: &str,
        _settings: ConsumerSettings,
    ) -> Result<Box<dyn GroupConsumer>, ServiceError> {
        Ok(Box::new(FakeConsumer {
            feed: self.feed.clone(),
            seeks: self.seeks.clone(),
            ..FakeConsumer::default()
        }))
    }
}

#[derive(Default)]
struct FakeConsumer {
    topics: Mutex<Vec<String>>,
    committed: Mutex<Vec<PartitionOffset>>,
    feed: Arc<Mutex<Vec<Record>>>,
    seeks: Arc<Mutex<Vec<PartitionOffset>>>,
}

#[async_trait]
impl GroupConsumer for FakeConsumer {
    async fn subscribe(&self, topics: Vec<String>) -> Result<(), ServiceError> {
        *self.topics.lock().unwrap() = topics;
        Ok(())
    }
    async fn subscribe_pattern(&self, pattern: &str) -> Result<(), ServiceError> {
        *self.topics.lock().unwrap() = vec![format!("^{pattern}$")];
        Ok(())
    }
    async fn unsubscribe(&self) -> Result<(), ServiceError> {
        self.topics.lock().unwrap().clear();
        Ok(())
    }
    async fn subscription(&self) -> Result<Vec<String>, ServiceError> {
        Ok(self.topics.lock().unwrap().clone())
    }
    async fn poll(&self, timeout: Duration, _: usize) -> Result<Vec<Record>, ServiceError> {
        let fed = self.feed.lock().unwrap().clone();
        if !fed.is_empty() {
            return Ok(fed);
        }
        // Nothing arrives, so wait, as a real member does (briefly, to keep tests fast):
        // answering at once made a stream's task spin without yielding and starve a
        // current-thread runtime.
        tokio::time::sleep(timeout.min(Duration::from_millis(10))).await;
        Ok(Vec::new())
    }
    async fn commit(&self, offsets: Option<Vec<PartitionOffset>>) -> Result<(), ServiceError> {
        // "Everything read so far" is recorded as one entry for topic "*".
        let all = PartitionOffset {
            topic: "*".into(),
            partition: -1,
            offset: -1,
        };
        self.committed
            .lock()
            .unwrap()
            .extend(offsets.unwrap_or_else(|| vec![all]));
        Ok(())
    }
    async fn committed(
        &self,
        _: Vec<TopicPartition>,
    ) -> Result<Vec<PartitionOffset>, ServiceError> {
        Ok(self.committed.lock().unwrap().clone())
    }
    async fn seek(&self, offsets: Vec<PartitionOffset>) -> Result<(), ServiceError> {
        self.seeks.lock().unwrap().extend(offsets);
        Ok(())
    }
    async fn seek_to(&self, _: Vec<TopicPartition>, _: End) -> Result<(), ServiceError> {
        Ok(())
    }
    async fn move_past(&self, record: &PartitionOffset) -> Result<(), ServiceError> {
        self.seeks.lock().unwrap().push(PartitionOffset {
            offset: record.offset + 1,
            ..record.clone()
        });
        Ok(())
    }
    async fn hold(&self, record: &PartitionOffset) -> Result<(), ServiceError> {
        self.seeks.lock().unwrap().push(record.clone());
        Ok(())
    }
    async fn assignment(&self) -> Result<Vec<TopicPartition>, ServiceError> {
        Ok(Vec::new())
    }
    async fn close(&self) {}
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// A Confluent error body with this code.
    fn error(&self, status: StatusCode, code: u64) {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        let j = self.json();
        assert_eq!(j["error_code"], code, "{j}");
        assert!(j["message"].is_string(), "{j}");
    }
}

async fn call(app: &axum::Router, req: Request<Body>) -> Answer {
    let r = app.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    let body = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

/// A request with a Content-Length, as clients send a body of known size.
fn post(path: &str, ct: Option<&str>, body: impl Into<String>) -> Request<Body> {
    let body = body.into();
    let mut b = Request::post(path).header(header::CONTENT_LENGTH, body.len());
    if let Some(ct) = ct {
        b = b.header(header::CONTENT_TYPE, ct);
    }
    b.body(Body::from(body)).unwrap()
}

/// A request whose body is a stream of unknown size (chunked).
fn post_stream(path: &str, ct: &str, body: Body) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, ct)
        .body(body)
        .unwrap()
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

const JSON_V2: &str = "application/vnd.kafka.json.v2+json";
const BINARY_V2: &str = "application/vnd.kafka.binary.v2+json";

fn app(fake: &Arc<Fake>, config: GatewayConfig) -> axum::Router {
    router(fake.clone(), config)
}

mod acl;
mod admin;
mod bodies;
mod consumers;
mod strict;

#[tokio::test]
async fn produce_answers_offsets_in_confluents_shape() {
    let fake = Fake::with_topic("t", 2);
    let app = app(&fake, GatewayConfig::default());
    let a = call(
        &app,
        post(
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"key":"k","value":{"a":1}},{"value":[1,2],"partition":1}]}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        a.json(),
        json!({"offsets":[
            {"partition":0,"offset":0,"error_code":null,"error":null},
            {"partition":1,"offset":0,"error_code":null,"error":null}],
            "key_schema_id":null,"value_schema_id":null})
    );
    assert_eq!(
        a.headers[header::CONTENT_TYPE],
        "application/vnd.kafka.v2+json"
    );
    {
        let t = fake.topics.lock().unwrap();
        assert_eq!(t["t"][0][0].key.as_deref(), Some(&b"\"k\""[..]));
        assert_eq!(t["t"][0][0].value.as_deref(), Some(&b"{\"a\":1}"[..]));
    }
    let a = call(
        &app,
        post(
            "/topics/t/partitions/1",
            Some(BINARY_V2),
            r#"{"records":[{"key":"YQ==","value":"aGVsbG8="}]}"#,
        ),
    )
    .await;
    assert_eq!(a.json()["offsets"][0]["partition"], 1);
    assert_eq!(a.json()["offsets"][0]["offset"], 1);
    let t = fake.topics.lock().unwrap();
    assert_eq!(t["t"][1][1].value.as_deref(), Some(&b"hello"[..]));
}

#[tokio::test]
async fn wrong_or_missing_content_type_is_415() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    let body = r#"{"records":[{"value":"x"}]}"#;
    for ct in [
        None,
        Some("text/plain"),
        Some("application/vnd.kafka.avro.v2+json"),
    ] {
        call(&app, post("/topics/t", ct, body))
            .await
            .error(StatusCode::UNSUPPORTED_MEDIA_TYPE, 41501);
    }
    call(
        &app,
        post("/v3/clusters/strata/topics/t/records", Some(JSON_V2), body),
    )
    .await
    .error(StatusCode::UNSUPPORTED_MEDIA_TYPE, 41501);
    assert_eq!(fake.appended("t"), 0);
}

#[tokio::test]
async fn a_bad_record_fails_the_whole_request_and_appends_nothing() {
    let fake = Fake::with_topic("t", 2);
    let app = app(&fake, GatewayConfig::default());
    // The first record is fine, the second is not base64: nothing may be appended.
    call(
        &app,
        post(
            "/topics/t",
            Some(BINARY_V2),
            r#"{"records":[{"value":"aGk="},{"value":"***"}]}"#,
        ),
    )
    .await
    .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
    call(&app, post("/topics/t", Some(JSON_V2), "{not json"))
        .await
        .error(StatusCode::UNPROCESSABLE_ENTITY, 42201);
    call(&app, post("/topics/t", Some(JSON_V2), r#"{"records":[]}"#))
        .await
        .error(StatusCode::UNPROCESSABLE_ENTITY, 42201);
    call(
        &app,
        post(
            "/topics/t",
            Some(JSON_V2),
            r#"{"records":[{"value":1},{"value":2,"partition":7}]}"#,
        ),
    )
    .await
    .error(StatusCode::NOT_FOUND, 40402);
    // v3: a body with several records is validated whole too.
    call(
        &app,
        post(
            "/v3/clusters/strata/topics/t/records",
            Some("application/json"),
            r#"{"value":{"data":1}} {"value":{"type":"BINARY","data":"@@"}}"#,
        ),
    )
    .await
    .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
    assert_eq!(fake.appended("t"), 0);
    assert_eq!(fake.produce_calls.load(Ordering::SeqCst), 0);
}

/// A refusal of a request with a body closes the connection (the body may be unread,
/// so the connection cannot carry another request); a refused GET keeps it.
#[tokio::test]
async fn refusing_a_request_with_a_body_closes_its_connection() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    let a = call(
        &app,
        post(
            "/topics/nope",
            Some(JSON_V2),
            r#"{"records":[{"value":1}]}"#,
        ),
    )
    .await;
    a.error(StatusCode::NOT_FOUND, 40401);
    assert_eq!(a.headers[header::CONNECTION], "close");
    let chunked = Request::post("/topics/nope")
        .header(header::CONTENT_TYPE, JSON_V2)
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(Body::from(r#"{"records":[{"value":1}]}"#))
        .unwrap();
    let a = call(&app, chunked).await;
    a.error(StatusCode::NOT_FOUND, 40401);
    assert_eq!(a.headers[header::CONNECTION], "close");
    let a = call(&app, get("/topics/nope")).await;
    a.error(StatusCode::NOT_FOUND, 40401);
    assert!(a.headers.get(header::CONNECTION).is_none());
    let a = call(
        &app,
        post("/topics/t", Some(JSON_V2), r#"{"records":[{"value":1}]}"#),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.headers.get(header::CONNECTION).is_none());
}

#[tokio::test]
async fn unknown_topic_partition_cluster_are_404() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    call(&app, get("/topics/nope"))
        .await
        .error(StatusCode::NOT_FOUND, 40401);
    call(&app, get("/topics/bad%20name"))
        .await
        .error(StatusCode::NOT_FOUND, 40401);
    call(
        &app,
        post(
            "/topics/nope",
            Some(JSON_V2),
            r#"{"records":[{"value":1}]}"#,
        ),
    )
    .await
    .error(StatusCode::NOT_FOUND, 40401);
    call(&app, get("/topics/t/partitions/3/records"))
        .await
        .error(StatusCode::NOT_FOUND, 40402);
    call(&app, get("/topics/t/partitions/x/records"))
        .await
        .error(StatusCode::NOT_FOUND, 40402);
    call(
        &app,
        post(
            "/v3/clusters/other/topics/t/records",
            Some("application/json"),
            "{}",
        ),
    )
    .await
    .error(StatusCode::NOT_FOUND, 40404);
    call(&app, get("/no/such/route"))
        .await
        .error(StatusCode::NOT_FOUND, 404);
    call(
        &app,
        Request::delete("/topics").body(Body::empty()).unwrap(),
    )
    .await
    .error(StatusCode::METHOD_NOT_ALLOWED, 405);
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let fake = Fake::with_topic("t", 1);
    let app = app(
        &fake,
        GatewayConfig {
            max_body_bytes: 1024,
            ..GatewayConfig::default()
        },
    );
    let big = format!(r#"{{"records":[{{"value":"{}"}}]}}"#, "x".repeat(2000));
    call(&app, post("/topics/t", Some(JSON_V2), big.clone()))
        .await
        .error(StatusCode::PAYLOAD_TOO_LARGE, 41301);
    // Without a Content-Length (a stream of unknown size) the limit still holds.
    let chunks = futures::stream::iter(vec![Ok::<_, std::io::Error>(big.into_bytes())]);
    call(
        &app,
        post_stream("/topics/t", JSON_V2, Body::from_stream(chunks)),
    )
    .await
    .error(StatusCode::PAYLOAD_TOO_LARGE, 41301);
    assert_eq!(fake.appended("t"), 0);
}

#[tokio::test]
async fn broker_errors_map_to_statuses() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    for (code, status, confluent) in [
        (
            codes::NOT_ENOUGH_REPLICAS,
            StatusCode::SERVICE_UNAVAILABLE,
            50301,
        ),
        (
            codes::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            StatusCode::SERVICE_UNAVAILABLE,
            50301,
        ),
        (
            codes::LOCAL_MSG_TIMED_OUT,
            StatusCode::SERVICE_UNAVAILABLE,
            50302,
        ),
        (
            codes::GATEWAY_QUEUE_FULL,
            StatusCode::TOO_MANY_REQUESTS,
            42901,
        ),
        (
            codes::THROTTLING_QUOTA_EXCEEDED,
            StatusCode::TOO_MANY_REQUESTS,
            42901,
        ),
        (
            codes::MESSAGE_TOO_LARGE,
            StatusCode::PAYLOAD_TOO_LARGE,
            41302,
        ),
    ] {
        *fake.fail.lock().unwrap() = Some(code);
        call(
            &app,
            post("/topics/t", Some(JSON_V2), r#"{"records":[{"value":1}]}"#),
        )
        .await
        .error(status, confluent);
        call(
            &app,
            post(
                "/v3/clusters/strata/topics/t/records",
                Some("application/json"),
                r#"{"value":{"data":1}}"#,
            ),
        )
        .await
        .error(status, confluent);
    }
}

#[tokio::test]
async fn idempotency_key_replays_the_first_answer_and_appends_once() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    let req = |key: &str, body: &'static str| {
        Request::post("/topics/t")
            .header(header::CONTENT_TYPE, JSON_V2)
            .header("Idempotency-Key", key)
            .header(header::CONTENT_LENGTH, body.len())
            .body(Body::from(body))
            .unwrap()
    };
    let first = call(&app, req("k1", r#"{"records":[{"value":1},{"value":2}]}"#)).await;
    assert_eq!(first.status, StatusCode::OK);
    let again = call(&app, req("k1", r#"{"records":[{"value":1},{"value":2}]}"#)).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body, first.body, "byte for byte");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(fake.appended("t"), 2);
    // The same key for another request is refused.
    call(&app, req("k1", r#"{"records":[{"value":3}]}"#))
        .await
        .error(StatusCode::UNPROCESSABLE_ENTITY, 42206);
    // A failed first attempt is not kept: the retry runs.
    *fake.fail.lock().unwrap() = Some(codes::NOT_ENOUGH_REPLICAS);
    call(&app, req("k2", r#"{"records":[{"value":4}]}"#))
        .await
        .error(StatusCode::SERVICE_UNAVAILABLE, 50301);
    *fake.fail.lock().unwrap() = None;
    assert_eq!(
        call(&app, req("k2", r#"{"records":[{"value":4}]}"#))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(fake.appended("t"), 3);

    // Concurrent duplicates: one runs, the others wait for its answer.
    *fake.delay.lock().unwrap() = Duration::from_millis(200);
    let calls_before = fake.produce_calls.load(Ordering::SeqCst);
    let answers = futures::future::join_all(
        (0..5).map(|_| call(&app, req("k3", r#"{"records":[{"value":5}]}"#))),
    )
    .await;
    assert_eq!(fake.produce_calls.load(Ordering::SeqCst), calls_before + 1);
    assert!(
        answers
            .iter()
            .all(|a| a.status == StatusCode::OK && a.body == answers[0].body)
    );
    assert_eq!(fake.appended("t"), 4);

    // v3 takes the key too.
    *fake.delay.lock().unwrap() = Duration::ZERO;
    let v3 = |key: &str| {
        Request::post("/v3/clusters/strata/topics/t/records")
            .header(header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", key)
            .header(header::CONTENT_LENGTH, 38)
            .body(Body::from(r#"{"value":{"type":"STRING","data":"s"}}"#))
            .unwrap()
    };
    let a = call(&app, v3("v3")).await;
    let b = call(&app, v3("v3")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body, b.body);
    assert_eq!(fake.appended("t"), 5);
}

#[tokio::test]
async fn authentication_guards_all_but_health_and_the_document() {
    let fake = Fake::with_topic("t", 1);
    for (auth, good, bad) in [
        ("bearer:s3cret", "Bearer s3cret", "Bearer nope"),
        ("basic:alice:pw", "Basic YWxpY2U6cHc=", "Basic YWxpY2U6eHg="),
    ] {
        let app = app(
            &fake,
            GatewayConfig {
                auth: Some(auth.parse().unwrap()),
                ..GatewayConfig::default()
            },
        );
        let a = call(&app, get("/topics")).await;
        a.error(StatusCode::UNAUTHORIZED, 40101);
        assert!(a.headers.contains_key(header::WWW_AUTHENTICATE));
        let with = |v: &str| {
            Request::get("/topics")
                .header(header::AUTHORIZATION, v)
                .body(Body::empty())
                .unwrap()
        };
        call(&app, with(bad))
            .await
            .error(StatusCode::UNAUTHORIZED, 40101);
        assert_eq!(call(&app, with(good)).await.status, StatusCode::OK);
        for open in ["/healthz", "/readyz", "/openapi.json"] {
            assert_eq!(call(&app, get(open)).await.status, StatusCode::OK, "{open}");
        }
    }
    assert!("nope".parse::<crate::Auth>().is_err());
    // The header a client builds from the same credentials is accepted.
    for auth in ["bearer:s3cret", "basic:alice:pw:with:colons"] {
        let auth: crate::Auth = auth.parse().unwrap();
        let mut h = axum::http::HeaderMap::new();
        h.insert(header::AUTHORIZATION, auth.header_value().parse().unwrap());
        assert!(auth.permits(&h), "{auth:?}");
    }
    assert!("basic:only".parse::<crate::Auth>().is_err());
    assert_eq!(
        format!("{:?}", "bearer:x".parse::<crate::Auth>().unwrap()),
        "Bearer(***)"
    );
}

#[tokio::test]
async fn routes_outside_the_gateway_can_require_the_same_credentials() {
    let routes = || axum::Router::new().route("/x", axum::routing::get(|| async { "x" }));
    let open = crate::require_auth(routes(), None, None);
    assert_eq!(call(&open, get("/x")).await.status, StatusCode::OK);
    let guarded = crate::require_auth(routes(), Some("bearer:tok".parse().unwrap()), None);
    let a = call(&guarded, get("/x")).await;
    a.error(StatusCode::UNAUTHORIZED, 40101);
    assert!(a.headers.contains_key(header::WWW_AUTHENTICATE));
    let with = Request::get("/x")
        .header(header::AUTHORIZATION, "Bearer tok")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&guarded, with).await.status, StatusCode::OK);
    // Unknown paths stay the router's 404, not 401 (route_layer guards routes only).
    assert_eq!(
        call(&guarded, get("/y")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn v3_answers_single_batched_and_streamed_records() {
    let fake = Fake::with_topic("t", 2);
    let app = app(&fake, GatewayConfig::default());
    let a = call(
        &app,
        post(
            "/v3/clusters/strata/topics/t/records",
            Some("application/json"),
            r#"{"partition_id":1,"key":{"type":"STRING","data":"k"},"value":{"type":"JSON","data":{"x":1}},"headers":[{"name":"h","value":"aGk="}],"timestamp":"2024-01-02T03:04:05.006Z"}"#,
        ),
    )
    .await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&a.body)
    );
    let j = a.json();
    assert_eq!(j["error_code"], 200);
    assert_eq!(j["cluster_id"], "strata");
    assert_eq!(j["topic_name"], "t");
    assert_eq!(j["partition_id"], 1);
    assert_eq!(j["offset"], 0);
    assert_eq!(j["timestamp"], "2024-01-02T03:04:05.006Z");
    assert_eq!(j["value"], json!({"type":"JSON","size":7}));
    {
        let t = fake.topics.lock().unwrap();
        let r = &t["t"][1][0];
        assert_eq!(r.headers, vec![("h".to_string(), Some(b"hi".to_vec()))]);
        assert_eq!(r.timestamp, Some(1_704_164_645_006));
    }
    // A chunked stream: records answered one by one, a bad one in its place.
    let chunks: Vec<Result<&'static str, std::io::Error>> = vec![
        Ok(r#"{"value":{"data":1}}"#),
        Ok(r#" {"partition_id":5} {"value":"#),
        Ok(r#"{"data":3}}"#),
    ];
    let a = call(
        &app,
        post_stream(
            "/v3/clusters/strata/topics/t/records",
            "application/json",
            Body::from_stream(futures::stream::iter(chunks)),
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    let answers: Vec<Value> = serde_json::Deserializer::from_slice(&a.body)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect();
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(answers[0]["error_code"], 200);
    assert_eq!(answers[1]["error_code"], 404);
    assert_eq!(answers[2]["error_code"], 200);
    assert_eq!(fake.appended("t"), 3);
}

/// Every route the router serves is in the document, and every operation of the
/// document reaches a handler (not the 404/405 fallbacks).
#[tokio::test]
async fn openapi_document_matches_the_routes() {
    let doc = serde_json::to_value(crate::openapi::document()).unwrap();
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch", "head", "options"]
                .contains(&method.as_str())
            {
                documented.insert((method.clone(), path.clone()));
            }
        }
    }
    let served: BTreeSet<(String, String)> = crate::served_routes().into_iter().collect();
    assert_eq!(served, documented, "routes and document differ");

    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    for (method, path) in &documented {
        let concrete = path
            .replace("{topic}", "t")
            .replace("{partition}", "0")
            .replace("{cluster}", "strata")
            .replace("{group}", "g")
            .replace("{instance}", "i")
            .replace("{session}", "s")
            .replace("{name}", "retention.ms");
        let req = Request::builder()
            .method(method.to_uppercase().as_str())
            .uri(&concrete)
            .body(Body::empty())
            .unwrap();
        let r = app.clone().oneshot(req).await.unwrap();
        let status = r.status();
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        let fallback = (status == StatusCode::NOT_FOUND
            || status == StatusCode::METHOD_NOT_ALLOWED)
            && serde_json::from_slice::<Value>(&body)
                .is_ok_and(|j| j["error_code"] == 404 || j["error_code"] == 405);
        assert!(!fallback, "{method} {path} is documented but not routed");
    }
}
