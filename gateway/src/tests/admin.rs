//! The v3 admin API (topics, partitions, configs, brokers, groups and lag) through the
//! router against the in-memory service.

use super::*;

/// The v3 admin read side in Confluent's shapes: topics, a topic, its partitions and
/// configs, with 404s for another cluster, an unknown topic or partition.
#[tokio::test]
async fn v3_admin_describes_topics_partitions_and_configs() {
    let fake = Fake::with_topic("t", 3);
    let app = app(&fake, GatewayConfig::default());
    let j = call(&app, get("/v3/clusters/strata/topics")).await.json();
    assert_eq!(j["kind"], "KafkaTopicList", "{j}");
    assert_eq!(j["data"][0]["kind"], "KafkaTopic", "{j}");
    assert_eq!(j["data"][0]["topic_name"], "t", "{j}");
    assert_eq!(j["data"][0]["partitions_count"], 3, "{j}");
    assert_eq!(j["data"][0]["replication_factor"], 1, "{j}");
    assert_eq!(j["data"][0]["is_internal"], false, "{j}");
    assert_eq!(
        j["data"][0]["partitions"]["related"], "/v3/clusters/strata/topics/t/partitions",
        "{j}"
    );
    assert_eq!(
        j["data"][0]["metadata"]["resource_name"], "crn:///kafka=strata/topic=t",
        "{j}"
    );
    let j = call(&app, get("/v3/clusters/strata/topics/t")).await.json();
    assert_eq!(
        (j["kind"].as_str(), j["topic_name"].as_str()),
        (Some("KafkaTopic"), Some("t")),
        "{j}"
    );
    let j = call(&app, get("/v3/clusters/strata/topics/t/partitions"))
        .await
        .json();
    assert_eq!(j["data"].as_array().unwrap().len(), 3, "{j}");
    assert_eq!(j["data"][2]["partition_id"], 2, "{j}");
    assert_eq!(
        j["data"][2]["leader"]["related"], "/v3/clusters/strata/topics/t/partitions/2/replicas/1",
        "{j}"
    );
    let j = call(&app, get("/v3/clusters/strata/topics/t/partitions/1"))
        .await
        .json();
    assert_eq!(
        (j["kind"].as_str(), j["partition_id"].as_i64()),
        (Some("KafkaPartition"), Some(1)),
        "{j}"
    );
    let j = call(&app, get("/v3/clusters/strata/topics/t/configs"))
        .await
        .json();
    assert_eq!(j["kind"], "KafkaTopicConfigList", "{j}");
    call(&app, get("/v3/clusters/other/topics"))
        .await
        .error(StatusCode::NOT_FOUND, 40404);
    call(&app, get("/v3/clusters/strata/topics/nope"))
        .await
        .error(StatusCode::NOT_FOUND, 40401);
    call(&app, get("/v3/clusters/strata/topics/t/partitions/3"))
        .await
        .error(StatusCode::NOT_FOUND, 40402);
    call(&app, get("/v3/clusters/strata/topics/t/partitions/x"))
        .await
        .error(StatusCode::NOT_FOUND, 40402);
}

fn request(method: &str, path: &str, ct: Option<&str>, body: &str) -> Request<Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_LENGTH, body.len());
    if let Some(ct) = ct {
        b = b.header(header::CONTENT_TYPE, ct);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

/// The v3 admin write side: create (and validate only) a topic, refusals as 400 with
/// the broker's reason or 422 before the broker, configs set, removed and altered in a
/// batch, and delete.
#[tokio::test]
async fn v3_admin_creates_alters_and_deletes_topics() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    let topics = "/v3/clusters/strata/topics";
    let a = call(
        &app,
        post(
            topics,
            Some("application/json"),
            r#"{"topic_name":"new","partitions_count":3,"configs":[{"name":"retention.ms","value":"60000"}]}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json());
    let j = a.json();
    assert_eq!(
        (
            j["kind"].as_str(),
            j["topic_name"].as_str(),
            j["partitions_count"].as_i64()
        ),
        (Some("KafkaTopic"), Some("new"), Some(3)),
        "{j}"
    );
    let j = call(&app, get(&format!("{topics}/new/configs/retention.ms")))
        .await
        .json();
    assert_eq!(
        (
            j["value"].as_str(),
            j["is_default"].as_bool(),
            j["source"].as_str()
        ),
        (Some("60000"), Some(false), Some("DYNAMIC_TOPIC_CONFIG")),
        "{j}"
    );
    // Validate only: answered as it would be, nothing created.
    let a = call(
        &app,
        post(
            topics,
            Some("application/json"),
            r#"{"topic_name":"dry","partitions_count":2,"validate_only":true}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert!(!fake.topics.lock().unwrap().contains_key("dry"));
    // The broker's refusals are 400 with its reason; a body that is not a topic, 422.
    call(
        &app,
        post(topics, Some("application/json"), r#"{"topic_name":"new"}"#),
    )
    .await
    .error(StatusCode::BAD_REQUEST, 40002);
    call(
        &app,
        post(
            topics,
            Some("application/json"),
            r#"{"topic_name":"big","partitions_count":1000}"#,
        ),
    )
    .await
    .error(StatusCode::BAD_REQUEST, 40002);
    for bad in [
        r#"{"topic_name":"a/b"}"#,
        r#"{"topic_name":"z","partitions_count":0}"#,
        r#"{"topic_name":"z","replication_factor":-1}"#,
        r#"{"topic_name":"z","configs":[{"name":"retention.ms"}]}"#,
    ] {
        call(&app, post(topics, Some("application/json"), bad))
            .await
            .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
    }
    // A field it does not take (explicit assignments) is refused, not ignored.
    for bad in ["{}", r#"{"topic_name":"z","replicas_assignments":[]}"#] {
        call(&app, post(topics, Some("application/json"), bad))
            .await
            .error(StatusCode::UNPROCESSABLE_ENTITY, 42201);
    }
    call(&app, post(topics, Some(JSON_V2), r#"{"topic_name":"z"}"#))
        .await
        .error(StatusCode::UNSUPPORTED_MEDIA_TYPE, 41501);
    assert!(!fake.topics.lock().unwrap().contains_key("z"));

    // One config set, then removed (the default again), then a batch.
    let config = format!("{topics}/new/configs/cleanup.policy");
    let a = call(
        &app,
        request(
            "PUT",
            &config,
            Some("application/json"),
            r#"{"value":"compact"}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    assert_eq!(call(&app, get(&config)).await.json()["value"], "compact");
    let a = call(&app, request("DELETE", &config, None, "")).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let j = call(&app, get(&config)).await.json();
    assert_eq!(
        (j["value"].as_str(), j["is_default"].as_bool()),
        (Some("delete"), Some(true)),
        "{j}"
    );
    let a = call(
        &app,
        post(
            &format!("{topics}/new/configs:alter"),
            Some("application/json"),
            r#"{"data":[{"name":"retention.ms","operation":"DELETE"},{"name":"max.message.bytes","value":"2048"}]}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let mine = fake.configs.lock().unwrap()["new"].clone();
    assert_eq!(
        mine.into_iter().collect::<Vec<_>>(),
        [("max.message.bytes".to_string(), "2048".to_string())]
    );
    call(
        &app,
        post(
            &format!("{topics}/new/configs:alter"),
            Some("application/json"),
            r#"{"data":[{"name":"retention.ms","operation":"APPEND","value":"1"}]}"#,
        ),
    )
    .await
    .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
    call(
        &app,
        request(
            "PUT",
            &format!("{topics}/new/configs/no.such"),
            Some("application/json"),
            r#"{"value":"1"}"#,
        ),
    )
    .await
    .error(StatusCode::BAD_REQUEST, 40002);
    call(&app, get(&format!("{topics}/new/configs/no.such")))
        .await
        .error(StatusCode::NOT_FOUND, 40407);
    call(
        &app,
        request(
            "PUT",
            &format!("{topics}/gone/configs/retention.ms"),
            Some("application/json"),
            r#"{"value":"1"}"#,
        ),
    )
    .await
    .error(StatusCode::NOT_FOUND, 40401);

    // Delete, then it is gone.
    let a = call(&app, request("DELETE", &format!("{topics}/new"), None, "")).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    call(&app, get(&format!("{topics}/new")))
        .await
        .error(StatusCode::NOT_FOUND, 40401);
    call(&app, request("DELETE", &format!("{topics}/new"), None, ""))
        .await
        .error(StatusCode::NOT_FOUND, 40401);
}

/// v3 brokers, groups, members and lag from what the cluster answers.
#[tokio::test]
async fn v3_admin_lists_brokers_groups_members_and_lag() {
    let fake = Fake::with_topic("t", 2);
    fake.groups.lock().unwrap().push(GroupInfo {
        group: "g".into(),
        state: "Stable".into(),
        protocol_type: "consumer".into(),
        protocol: "range".into(),
        members: vec![MemberInfo {
            member_id: "m1".into(),
            client_id: "c1".into(),
            host: "/127.0.0.1".into(),
            assignment: vec![TopicPartition {
                topic: "t".into(),
                partition: 0,
            }],
        }],
    });
    for (p, committed, end) in [(0, 5, 12), (1, 10, 10)] {
        fake.group_offsets.lock().unwrap().push((
            "g".into(),
            GroupOffset {
                topic: "t".into(),
                partition: p,
                committed,
                end,
            },
        ));
    }
    let app = app(&fake, GatewayConfig::default());
    let j = call(&app, get("/v3/clusters/strata/brokers")).await.json();
    assert_eq!(
        (
            j["data"][0]["broker_id"].as_i64(),
            j["data"][0]["port"].as_i64()
        ),
        (Some(1), Some(9092)),
        "{j}"
    );
    let j = call(&app, get("/v3/clusters/strata/consumer-groups"))
        .await
        .json();
    assert_eq!(j["data"][0]["consumer_group_id"], "g", "{j}");
    assert_eq!(j["data"][0]["state"], "STABLE", "{j}");
    assert_eq!(j["data"][0]["is_simple"], false, "{j}");
    assert_eq!(j["data"][0]["partition_assignor"], "range", "{j}");
    let j = call(&app, get("/v3/clusters/strata/consumer-groups/g/consumers"))
        .await
        .json();
    assert_eq!(j["data"][0]["consumer_id"], "m1", "{j}");
    assert_eq!(j["data"][0]["assignments"][0]["topic_name"], "t", "{j}");
    let j = call(&app, get("/v3/clusters/strata/consumer-groups/g/lags"))
        .await
        .json();
    let lags: Vec<(i64, i64, String)> = j["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["partition_id"].as_i64().unwrap(),
                l["lag"].as_i64().unwrap(),
                l["consumer_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        lags,
        [(0, 7, "m1".to_string()), (1, 0, String::new())],
        "{j}"
    );
    let j = call(
        &app,
        get("/v3/clusters/strata/consumer-groups/g/lag-summary"),
    )
    .await
    .json();
    assert_eq!(
        (j["total_lag"].as_i64(), j["max_lag"].as_i64()),
        (Some(7), Some(7)),
        "{j}"
    );
    assert_eq!(
        (
            j["max_lag_partition_id"].as_i64(),
            j["max_lag_consumer_id"].as_str()
        ),
        (Some(0), Some("m1")),
        "{j}"
    );
    call(&app, get("/v3/clusters/strata/consumer-groups/nope"))
        .await
        .error(StatusCode::NOT_FOUND, 40406);
    call(&app, get("/v3/clusters/x/consumer-groups"))
        .await
        .error(StatusCode::NOT_FOUND, 40404);
}
