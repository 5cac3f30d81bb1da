//! v2 consumer instances, stateless reads and SSE streams through the router against
//! the in-memory service.

use super::*;

#[tokio::test]
async fn consumer_instances_are_found_conflict_and_expire() {
    let fake = Fake::with_topic("t", 1);
    let app = app(
        &fake,
        GatewayConfig {
            consumer_idle_timeout: Duration::from_millis(300),
            max_consumers: 2,
            ..GatewayConfig::default()
        },
    );
    let create = |name: &str| {
        post(
            "/consumers/g",
            Some("application/vnd.kafka.v2+json"),
            format!(
                r#"{{"name":"{name}","format":"binary","auto.offset.reset":"earliest","auto.commit.enable":"false"}}"#
            ),
        )
    };
    let a = call(&app, create("c1")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["instance_id"], "c1");
    assert!(
        a.json()["base_uri"]
            .as_str()
            .unwrap()
            .ends_with("/consumers/g/instances/c1")
    );
    call(&app, create("c1"))
        .await
        .error(StatusCode::CONFLICT, 40902);
    call(
        &app,
        post(
            "/consumers/g",
            Some("application/vnd.kafka.v2+json"),
            r#"{"format":"avro"}"#,
        ),
    )
    .await
    .error(StatusCode::UNPROCESSABLE_ENTITY, 42204);
    assert_eq!(call(&app, create("c2")).await.status, StatusCode::OK);
    call(&app, create("c3"))
        .await
        .error(StatusCode::TOO_MANY_REQUESTS, 42902);
    call(&app, get("/consumers/g/instances/zz/records"))
        .await
        .error(StatusCode::NOT_FOUND, 40403);
    let sub = post(
        "/consumers/g/instances/c1/subscription",
        Some("application/vnd.kafka.v2+json"),
        r#"{"topics":["t"]}"#,
    );
    assert_eq!(call(&app, sub).await.status, StatusCode::NO_CONTENT);
    let a = call(&app, get("/consumers/g/instances/c1/subscription")).await;
    assert_eq!(a.json(), json!({"topics":["t"]}));
    // Offsets committed are the record after the one named (Confluent's convention).
    let commit = post(
        "/consumers/g/instances/c1/offsets",
        Some("application/vnd.kafka.v2+json"),
        r#"{"offsets":[{"topic":"t","partition":0,"offset":4}]}"#,
    );
    assert_eq!(call(&app, commit).await.status, StatusCode::NO_CONTENT);
    let a = call(&app, get("/consumers/g/instances/c1/offsets")).await;
    assert_eq!(a.json()["offsets"][0]["offset"], 5);
    // Without offsets in the body (none, `{}`, null or empty): everything read so far,
    // as Confluent's; a body that is not offsets is still refused.
    for (n, body) in ["", "{}", r#"{"offsets":null}"#, r#"{"offsets":[]}"#]
        .into_iter()
        .enumerate()
    {
        let commit = post(
            "/consumers/g/instances/c1/offsets",
            Some("application/vnd.kafka.v2+json"),
            body,
        );
        assert_eq!(
            call(&app, commit).await.status,
            StatusCode::NO_CONTENT,
            "{body:?}"
        );
        let a = call(&app, get("/consumers/g/instances/c1/offsets")).await;
        let all = a.json()["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["topic"] == "*")
            .count();
        assert_eq!(all, n + 1, "{body:?}: everything read is committed");
    }
    for body in [r#"{"offsets":{}}"#, r#"{"offsets":[{"topic":"t"}]}"#, "[]"] {
        let commit = post(
            "/consumers/g/instances/c1/offsets",
            Some("application/vnd.kafka.v2+json"),
            body,
        );
        call(&app, commit)
            .await
            .error(StatusCode::UNPROCESSABLE_ENTITY, 42201);
    }
    let a = call(&app, get("/consumers/g/instances/c1/records")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers[header::CONTENT_TYPE], BINARY_V2);
    let a = call(
        &app,
        Request::get("/consumers/g/instances/c1/records")
            .header(header::ACCEPT, JSON_V2)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    a.error(StatusCode::NOT_ACCEPTABLE, 40601);
    let del = Request::delete("/consumers/g/instances/c2")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&app, del).await.status, StatusCode::NO_CONTENT);
    // Idle instances go; polling until then (the reaper runs every timeout/4).
    let t0 = std::time::Instant::now();
    loop {
        let a = call(&app, get("/consumers/g/instances/c1/assignments")).await;
        if a.status == StatusCode::NOT_FOUND {
            a.error(StatusCode::NOT_FOUND, 40403);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the idle instance never expired"
        );
        // Not touching it: wait past the idle timeout before asking again.
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

#[tokio::test]
async fn stateless_read_returns_records_and_watermarks() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    call(
        &app,
        post(
            "/topics/t",
            Some(BINARY_V2),
            r#"{"records":[{"key":"YQ==","value":"Yg=="},{"value":"Yw=="}]}"#,
        ),
    )
    .await;
    let a = call(&app, get("/topics/t/partitions/0/records?offset=1")).await;
    assert_eq!(a.status, StatusCode::OK);
    let j = a.json();
    assert_eq!(j["records"][0]["value"], "Yw==");
    assert_eq!(j["records"][0]["offset"], 1);
    assert_eq!(j["next_offset"], 2);
    assert_eq!(j["high_watermark"], 2);
    call(&app, get("/topics/t/partitions/0/records?offset=9"))
        .await
        .error(StatusCode::RANGE_NOT_SATISFIABLE, 41601);
    call(&app, get("/topics/t/partitions/0/records?offset=-1"))
        .await
        .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
    call(&app, get("/topics/t/partitions/0/records?offset=abc"))
        .await
        .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
    let a = call(&app, get("/topics/t/partitions/0/records?format=json")).await;
    a.error(StatusCode::UNPROCESSABLE_ENTITY, 42203);
}

#[tokio::test]
async fn the_stream_acks_commit_through_the_member() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    let r = app
        .clone()
        .oneshot(get("/consumers/g/stream?topic=t"))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[header::CONTENT_TYPE], "text/event-stream");
    let session = r.headers()["strata-stream-session"]
        .to_str()
        .unwrap()
        .to_string();
    let ack = |body: &str| {
        post(
            &format!("/consumers/g/stream/{session}/ack"),
            Some("application/json"),
            body.to_string(),
        )
    };
    assert_eq!(
        call(
            &app,
            ack(r#"{"offsets":[{"topic":"t","partition":0,"offset":0}]}"#)
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    call(
        &app,
        ack(r#"{"offsets":[{"topic":"t","partition":-1,"offset":0}]}"#),
    )
    .await
    .error(StatusCode::UNPROCESSABLE_ENTITY, 42202);
    call(
        &app,
        post(
            "/consumers/g/stream/nope/ack",
            Some("application/json"),
            "{}",
        ),
    )
    .await
    .error(StatusCode::NOT_FOUND, 40405);
    call(&app, get("/consumers/g/stream?topic=missing"))
        .await
        .error(StatusCode::NOT_FOUND, 40401);
    // Closing the stream ends the session.
    drop(r);
    let t0 = std::time::Instant::now();
    loop {
        let a = call(
            &app,
            ack(r#"{"offsets":[{"topic":"t","partition":0,"offset":1}]}"#),
        )
        .await;
        if a.status == StatusCode::NOT_FOUND {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the session outlived its stream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
