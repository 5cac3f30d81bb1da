//! `--http-auth` identities and their principals, and the authorizer asked on every
//! route: 403 with Confluent's 40301 where a Kafka client would be refused, listings
//! that leave out what the principal may not describe, consumer instances and stream
//! sessions that only their principal may use.

use strata_authz::{Operation, ResourceType};

use super::*;
use crate::{Access, Auth, Authorizer, Credentials, Identity};

const ALICE: &str = "Basic YWxpY2U6YWxpY2UtcHc="; // alice:alice-pw
const BOB: &str = "Basic Ym9iOmJvYi1wdw=="; // bob:bob-pw

fn headers(authorization: &str) -> axum::http::HeaderMap {
    let mut h = axum::http::HeaderMap::new();
    h.insert(header::AUTHORIZATION, authorization.parse().unwrap());
    h
}

#[test]
fn identities_parse_with_their_principals() {
    let a: Auth = "basic:alice:alice-pw,basic:bob:bob-pw".parse().unwrap();
    assert_eq!(
        a.identities()
            .iter()
            .map(|i| i.principal.as_str())
            .collect::<Vec<_>>(),
        ["User:alice", "User:bob"]
    );
    assert_eq!(
        a.principal_of(&headers(ALICE)).as_deref(),
        Some("User:alice")
    );
    assert_eq!(a.principal_of(&headers(BOB)).as_deref(), Some("User:bob"));
    // alice's password for bob, a password prefix, a wrong scheme: nobody.
    for wrong in [
        "Basic Ym9iOmFsaWNlLXB3",      // bob:alice-pw
        "Basic YWxpY2U6YWxpY2U=",      // alice:alice
        "Bearer alice-pw",             // the password as a token
        "Basic YWxpY2VhbGljZS1wdw==",  // no colon
        "Basic not base64!",           // garbage
        "Digest YWxpY2U6YWxpY2UtcHc=", // another scheme
    ] {
        assert_eq!(a.principal_of(&headers(wrong)), None, "{wrong}");
    }

    let a: Auth = " bearer:t0k=User:svc , basic:ann:p=w:x=User:CN=ann , bearer:other"
        .parse()
        .unwrap();
    assert_eq!(
        a,
        Auth::Identities(vec![
            Identity {
                credentials: Credentials::Bearer("t0k".into()),
                principal: "User:svc".into(),
            },
            Identity {
                credentials: Credentials::Basic {
                    user: "ann".into(),
                    password: "p=w:x".into(),
                },
                principal: "User:CN=ann".into(),
            },
            Identity {
                credentials: Credentials::Bearer("other".into()),
                principal: crate::BEARER_PRINCIPAL.into(),
            },
        ])
    );
    assert_eq!(
        a.principal_of(&headers("Bearer t0k")).as_deref(),
        Some("User:svc")
    );
    assert_eq!(
        a.principal_of(&headers("bearer other")).as_deref(),
        Some("User:http")
    );
    // The client side sends the first identity.
    assert_eq!(a.header_value(), "Bearer t0k");
    // Nothing secret in Debug.
    let shown = format!("{a:?}");
    assert!(!shown.contains("t0k") && !shown.contains("p=w"), "{shown}");

    // One entry without a principal stays the old form.
    assert_eq!(
        "basic:ann:pw".parse::<Auth>().unwrap(),
        Auth::Basic {
            user: "ann".into(),
            password: "pw".into()
        }
    );
    assert_eq!(
        "bearer:x".parse::<Auth>().unwrap(),
        Auth::Bearer("x".into())
    );
    assert_eq!(
        "basic:ann:pw=User:root"
            .parse::<Auth>()
            .unwrap()
            .identities()[0]
            .principal,
        "User:root"
    );

    // Errors name the entry, never its secret.
    for (bad, want) in [
        ("basic:alice:s3cret,", "entry 2 is empty"),
        ("basic:alice:s3cret,token-s3cret", "entry 2: expected"),
        (
            "basic:alice:s3cret,basic:alice:s3cret2",
            "entry 'basic:alice:***': given twice",
        ),
        (
            "bearer:s3cret,bearer:s3cret",
            "entry 'bearer:***': given twice",
        ),
        ("bearer:s3cret=User:", "entry 'bearer:***': the principal"),
        (
            "basic:alice:s3cret=User:*",
            "entry 'basic:alice:***': the principal",
        ),
        ("basic:alice=User:x", "entry 'basic:***': basic: needs"),
        ("basic:s3cret", "entry 'basic:***': basic: needs"),
        ("bearer:", "entry 'bearer:***': bearer: needs a token"),
    ] {
        let e = bad.parse::<Auth>().unwrap_err();
        assert!(e.contains(want), "{bad}: {e}");
        assert!(!e.contains("s3cret"), "{bad}: {e}");
    }
}

/// ACLs in memory: (principal, operation, resource type, name); Read, Write and
/// DescribeConfigs imply Describe, as Kafka's. Every question is recorded.
#[derive(Default)]
struct Acls {
    allow: Mutex<BTreeSet<(String, Operation, ResourceType, String)>>,
    asked: Mutex<Vec<(String, Operation, String, bool)>>,
}

impl Acls {
    fn allow(&self, principal: &str, op: Operation, rt: ResourceType, name: &str) {
        self.allow
            .lock()
            .unwrap()
            .insert((principal.into(), op, rt, name.into()));
    }

    fn revoke(&self, principal: &str, op: Operation, rt: ResourceType, name: &str) {
        self.allow
            .lock()
            .unwrap()
            .remove(&(principal.into(), op, rt, name.into()));
    }

    fn decide(&self, a: &Access<'_>) -> bool {
        self.asked
            .lock()
            .unwrap()
            .push((a.principal.into(), a.operation, a.name.into(), a.audit));
        let allow = self.allow.lock().unwrap();
        let has = |op: Operation| {
            allow.contains(&(a.principal.into(), op, a.resource_type, a.name.into()))
        };
        has(a.operation)
            || (a.operation == Operation::Describe
                && [Operation::Read, Operation::Write].into_iter().any(has))
    }
}

fn secured(fake: &Arc<Fake>, acls: &Arc<Acls>) -> axum::Router {
    let a = acls.clone();
    app(
        fake,
        GatewayConfig {
            auth: Some("basic:alice:alice-pw,basic:bob:bob-pw".parse().unwrap()),
            authorizer: Some(Authorizer::new(move |x| a.decide(x))),
            ..GatewayConfig::default()
        },
    )
}

fn with(mut req: Request<Body>, who: &str) -> Request<Body> {
    req.headers_mut()
        .insert(header::AUTHORIZATION, who.parse().unwrap());
    req
}

fn produce(topic: &str) -> Request<Body> {
    post(
        &format!("/topics/{topic}"),
        Some(JSON_V2),
        r#"{"records":[{"value":1}]}"#,
    )
}

#[tokio::test]
async fn produce_and_read_need_write_and_read_on_the_topic() {
    let fake = Fake::with_topic("orders", 2);
    fake.topics
        .lock()
        .unwrap()
        .insert("payroll".into(), vec![Vec::new()]);
    let acls = Arc::new(Acls::default());
    acls.allow(
        "User:alice",
        Operation::Write,
        ResourceType::Topic,
        "orders",
    );
    let app = secured(&fake, &acls);

    // v2 (topic and partition), v3 whole and streamed: allowed on orders only.
    assert_eq!(
        call(&app, with(produce("orders"), ALICE)).await.status,
        StatusCode::OK
    );
    let p1 = post(
        "/topics/orders/partitions/1",
        Some(JSON_V2),
        r#"{"records":[{"value":2}]}"#,
    );
    assert_eq!(call(&app, with(p1, ALICE)).await.status, StatusCode::OK);
    for (who, topic) in [(ALICE, "payroll"), (BOB, "orders"), (ALICE, "missing")] {
        let a = call(&app, with(produce(topic), who)).await;
        a.error(StatusCode::FORBIDDEN, 40301);
        assert!(
            a.json()["message"].as_str().unwrap().contains(topic),
            "{}",
            a.json()
        );
        let p = post(
            &format!("/topics/{topic}/partitions/0"),
            Some(JSON_V2),
            r#"{"records":[{"value":2}]}"#,
        );
        call(&app, with(p, who))
            .await
            .error(StatusCode::FORBIDDEN, 40301);
        let v3 = post(
            &format!("/v3/clusters/strata/topics/{topic}/records"),
            Some("application/json"),
            r#"{"value":{"type":"JSON","data":1}}"#,
        );
        call(&app, with(v3, who))
            .await
            .error(StatusCode::FORBIDDEN, 40301);
        let streamed = post_stream(
            &format!("/v3/clusters/strata/topics/{topic}/records"),
            "application/json",
            Body::from(r#"{"value":{"type":"JSON","data":1}}"#),
        );
        call(&app, with(streamed, who))
            .await
            .error(StatusCode::FORBIDDEN, 40301);
    }
    // A wrong cluster stays 404 (its id is public); an authorized v3 produce works.
    let v3 = post(
        "/v3/clusters/strata/topics/orders/records",
        Some("application/json"),
        r#"{"value":{"type":"JSON","data":1}}"#,
    );
    assert_eq!(call(&app, with(v3, ALICE)).await.status, StatusCode::OK);
    assert_eq!(fake.appended("orders"), 3);
    assert_eq!(fake.appended("payroll"), 0);

    // An Idempotency-Key replay is refused too once the ACL is gone, and another
    // principal's identical key is its own request.
    let keyed = |who: &str| {
        let mut r = with(produce("orders"), who);
        r.headers_mut()
            .insert("idempotency-key", "k1".parse().unwrap());
        r
    };
    assert_eq!(call(&app, keyed(ALICE)).await.status, StatusCode::OK);
    acls.allow("User:bob", Operation::Write, ResourceType::Topic, "orders");
    let b = call(&app, keyed(BOB)).await;
    assert_eq!(b.status, StatusCode::OK);
    assert!(!b.headers.contains_key("idempotent-replayed"));
    assert_eq!(fake.appended("orders"), 5);
    acls.revoke(
        "User:alice",
        Operation::Write,
        ResourceType::Topic,
        "orders",
    );
    call(&app, keyed(ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);

    // Stateless reads: Read on the topic, asked before the topic's existence.
    let read = |t: &str| get(&format!("/topics/{t}/partitions/0/records?offset=0"));
    call(&app, with(read("orders"), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    call(&app, with(read("missing"), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow("User:alice", Operation::Read, ResourceType::Topic, "orders");
    let a = call(&app, with(read("orders"), ALICE)).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["records"].as_array().unwrap().len(), 4);
    // Unauthenticated stays 401 whatever the ACLs.
    call(&app, read("orders"))
        .await
        .error(StatusCode::UNAUTHORIZED, 40101);
}

#[tokio::test]
async fn topics_are_listed_and_described_only_to_who_may_describe_them() {
    let fake = Fake::with_topic("orders", 1);
    for t in ["payroll", "audit"] {
        fake.topics
            .lock()
            .unwrap()
            .insert(t.into(), vec![Vec::new()]);
    }
    let acls = Arc::new(Acls::default());
    acls.allow(
        "User:alice",
        Operation::Write,
        ResourceType::Topic,
        "orders",
    );
    acls.allow(
        "User:alice",
        Operation::Describe,
        ResourceType::Topic,
        "audit",
    );
    acls.allow("User:bob", Operation::Read, ResourceType::Topic, "payroll");
    let app = secured(&fake, &acls);
    let list = |who: &str| {
        let app = app.clone();
        let who = who.to_string();
        async move {
            let a = call(&app, with(get("/topics"), &who)).await;
            assert_eq!(a.status, StatusCode::OK);
            let mut v: Vec<String> = serde_json::from_value(a.json()).unwrap();
            v.sort();
            v
        }
    };
    assert_eq!(list(ALICE).await, ["audit", "orders"]);
    assert_eq!(list(BOB).await, ["payroll"]);
    // Filtering a listing is not a refusal: asked unaudited.
    assert!(
        acls.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, op, _, _)| *op == Operation::Describe)
            .all(|(_, _, _, audit)| !audit)
    );

    assert_eq!(
        call(&app, with(get("/topics/orders"), ALICE)).await.status,
        StatusCode::OK
    );
    call(&app, with(get("/topics/payroll"), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    // Not describable answers 403 whether the topic exists or not; describable and
    // missing is 404.
    call(&app, with(get("/topics/nope"), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow(
        "User:alice",
        Operation::Describe,
        ResourceType::Topic,
        "nope",
    );
    call(&app, with(get("/topics/nope"), ALICE))
        .await
        .error(StatusCode::NOT_FOUND, 40401);
    // The cluster's id is every caller's.
    assert_eq!(
        call(&app, with(get("/v3/clusters"), BOB)).await.status,
        StatusCode::OK
    );
    // v3 admin: the same listing and refusals; configs need DescribeConfigs.
    let a = call(&app, with(get("/v3/clusters/strata/topics"), ALICE)).await;
    let names: Vec<String> = a.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topic_name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["audit", "orders"]);
    for path in [
        "/v3/clusters/strata/topics/payroll",
        "/v3/clusters/strata/topics/payroll/partitions",
        "/v3/clusters/strata/topics/payroll/partitions/0",
        "/v3/clusters/strata/topics/orders/configs",
    ] {
        call(&app, with(get(path), ALICE))
            .await
            .error(StatusCode::FORBIDDEN, 40301);
    }
    acls.allow(
        "User:alice",
        Operation::DescribeConfigs,
        ResourceType::Topic,
        "orders",
    );
    assert_eq!(
        call(
            &app,
            with(get("/v3/clusters/strata/topics/orders/configs"), ALICE)
        )
        .await
        .status,
        StatusCode::OK
    );
}

fn create(group: &str, name: &str) -> Request<Body> {
    post(
        &format!("/consumers/{group}"),
        Some("application/vnd.kafka.v2+json"),
        format!(r#"{{"name":"{name}","format":"json"}}"#),
    )
}

fn subscribe(group: &str, name: &str, topics: &str) -> Request<Body> {
    post(
        &format!("/consumers/{group}/instances/{name}/subscription"),
        Some("application/vnd.kafka.v2+json"),
        format!(r#"{{"topics":{topics}}}"#),
    )
}

fn rec(topic: &str, offset: i64) -> Record {
    Record {
        topic: topic.into(),
        partition: 0,
        offset,
        key: None,
        value: Some(b"1".to_vec()),
        headers: Vec::new(),
        timestamp: None,
    }
}

#[tokio::test]
async fn consumer_instances_need_read_on_the_group_and_topics_and_are_their_principals() {
    let fake = Fake::with_topic("orders", 1);
    fake.topics
        .lock()
        .unwrap()
        .insert("payroll".into(), vec![Vec::new()]);
    let acls = Arc::new(Acls::default());
    let app = secured(&fake, &acls);

    call(&app, with(create("billing", "c1"), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow(
        "User:alice",
        Operation::Read,
        ResourceType::Group,
        "billing",
    );
    assert_eq!(
        call(&app, with(create("billing", "c1"), ALICE))
            .await
            .status,
        StatusCode::OK
    );
    let a = call(
        &app,
        with(subscribe("billing", "c1", r#"["orders"]"#), ALICE),
    )
    .await;
    a.error(StatusCode::FORBIDDEN, 40301);
    assert!(a.json()["message"].as_str().unwrap().contains("orders"));
    acls.allow("User:alice", Operation::Read, ResourceType::Topic, "orders");
    assert_eq!(
        call(
            &app,
            with(subscribe("billing", "c1", r#"["orders"]"#), ALICE)
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    call(
        &app,
        with(subscribe("billing", "c1", r#"["orders","payroll"]"#), ALICE),
    )
    .await
    .error(StatusCode::FORBIDDEN, 40301);

    // Another principal's instance does not exist for bob, even with Read on the group.
    let base = "/consumers/billing/instances/c1";
    call(&app, with(get(&format!("{base}/records")), BOB))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow("User:bob", Operation::Read, ResourceType::Group, "billing");
    for req in [
        get(&format!("{base}/records")),
        get(&format!("{base}/subscription")),
        get(&format!("{base}/assignments")),
        post(&format!("{base}/offsets"), Some("application/json"), ""),
        Request::delete(base).body(Body::empty()).unwrap(),
    ] {
        call(&app, with(req, BOB))
            .await
            .error(StatusCode::NOT_FOUND, 40403);
    }

    // Records of a topic alice may read come through.
    *fake.feed.lock().unwrap() = vec![rec("orders", 0), rec("orders", 1)];
    let a = call(&app, with(get(&format!("{base}/records")), ALICE)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json());
    assert_eq!(a.json().as_array().unwrap().len(), 2);
    // Records of one she may not (a pattern matched it, an ACL went): none is
    // answered, every partition is given back, 403 names what she may describe.
    *fake.feed.lock().unwrap() = vec![rec("orders", 2), rec("payroll", 7), rec("payroll", 8)];
    let a = call(&app, with(get(&format!("{base}/records")), ALICE)).await;
    a.error(StatusCode::FORBIDDEN, 40301);
    assert!(!a.json()["message"].as_str().unwrap().contains("payroll"));
    let mut seeks = fake.seeks.lock().unwrap().clone();
    seeks.sort();
    assert_eq!(
        seeks,
        [
            PartitionOffset {
                topic: "orders".into(),
                partition: 0,
                offset: 2
            },
            PartitionOffset {
                topic: "payroll".into(),
                partition: 0,
                offset: 7
            },
        ]
    );
    acls.allow(
        "User:alice",
        Operation::Describe,
        ResourceType::Topic,
        "payroll",
    );
    let a = call(&app, with(get(&format!("{base}/records")), ALICE)).await;
    a.error(StatusCode::FORBIDDEN, 40301);
    assert!(a.json()["message"].as_str().unwrap().contains("payroll"));
    fake.feed.lock().unwrap().clear();

    // Commits, committed offsets and seeks name topics: Read (Describe to look).
    let offsets =
        |t: &str| format!(r#"{{"offsets":[{{"topic":"{t}","partition":0,"offset":0}}]}}"#);
    let partitions = |t: &str| format!(r#"{{"partitions":[{{"topic":"{t}","partition":0}}]}}"#);
    for (path, body, method) in [
        ("offsets", offsets("secret"), "POST"),
        ("positions", offsets("secret"), "POST"),
        ("positions/beginning", partitions("secret"), "POST"),
        ("positions/end", partitions("secret"), "POST"),
        ("offsets", partitions("secret"), "GET"),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(format!("{base}/{path}"))
            .header(header::CONTENT_TYPE, "application/vnd.kafka.v2+json")
            .body(Body::from(body))
            .unwrap();
        call(&app, with(req, ALICE))
            .await
            .error(StatusCode::FORBIDDEN, 40301);
    }
    let ok = post(
        &format!("{base}/offsets"),
        Some("application/vnd.kafka.v2+json"),
        offsets("orders"),
    );
    assert_eq!(
        call(&app, with(ok, ALICE)).await.status,
        StatusCode::NO_CONTENT
    );

    // Losing Read on the group stops the instance.
    acls.revoke(
        "User:alice",
        Operation::Read,
        ResourceType::Group,
        "billing",
    );
    call(&app, with(get(&format!("{base}/records")), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow(
        "User:alice",
        Operation::Read,
        ResourceType::Group,
        "billing",
    );
    assert_eq!(
        call(
            &app,
            with(Request::delete(base).body(Body::empty()).unwrap(), ALICE)
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn streams_need_read_and_only_their_principal_acks() {
    let fake = Fake::with_topic("orders", 1);
    let acls = Arc::new(Acls::default());
    let app = secured(&fake, &acls);
    let open = |who: &str| with(get("/consumers/g/stream?topic=orders"), who);
    call(&app, open(ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow("User:alice", Operation::Read, ResourceType::Group, "g");
    call(&app, open(ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow("User:alice", Operation::Read, ResourceType::Topic, "orders");
    let r = app.clone().oneshot(open(ALICE)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let session = r.headers()["strata-stream-session"]
        .to_str()
        .unwrap()
        .to_string();
    let ack = |who: &str| {
        with(
            post(
                &format!("/consumers/g/stream/{session}/ack"),
                Some("application/json"),
                r#"{"offsets":[{"topic":"orders","partition":0,"offset":0}]}"#,
            ),
            who,
        )
    };
    acls.allow("User:bob", Operation::Read, ResourceType::Group, "g");
    acls.allow("User:bob", Operation::Read, ResourceType::Topic, "orders");
    call(&app, ack(BOB))
        .await
        .error(StatusCode::NOT_FOUND, 40405);
    assert_eq!(call(&app, ack(ALICE)).await.status, StatusCode::NO_CONTENT);
    drop(r);
}

#[tokio::test]
async fn without_an_authorizer_everything_is_allowed_as_anonymous_or_the_identity() {
    // No --http-auth: every call is User:ANONYMOUS; the authorizer sees it.
    let fake = Fake::with_topic("orders", 1);
    let acls = Arc::new(Acls::default());
    let a = acls.clone();
    let app = app(
        &fake,
        GatewayConfig {
            authorizer: Some(Authorizer::new(move |x| a.decide(x))),
            ..GatewayConfig::default()
        },
    );
    call(&app, produce("orders"))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow(
        crate::ANONYMOUS,
        Operation::Write,
        ResourceType::Topic,
        "orders",
    );
    assert_eq!(call(&app, produce("orders")).await.status, StatusCode::OK);
    assert!(
        acls.asked
            .lock()
            .unwrap()
            .iter()
            .all(|(p, ..)| p == crate::ANONYMOUS)
    );
    // No authorizer: identities authenticate, nothing more.
    let app = app_open(&fake);
    assert_eq!(
        call(&app, with(produce("orders"), BOB)).await.status,
        StatusCode::OK
    );
}

fn app_open(fake: &Arc<Fake>) -> axum::Router {
    app(
        fake,
        GatewayConfig {
            auth: Some("basic:alice:alice-pw,basic:bob:bob-pw".parse().unwrap()),
            ..GatewayConfig::default()
        },
    )
}

#[tokio::test]
async fn routes_outside_the_gateway_can_require_an_operation() {
    let acls = Arc::new(Acls::default());
    let a = acls.clone();
    let routes = axum::Router::new().route("/x", axum::routing::get(|| async { "x" }));
    let guarded = crate::require_auth(
        crate::require_access(
            routes,
            Some(Authorizer::new(move |x| a.decide(x))),
            Operation::Describe,
            ResourceType::Cluster,
            strata_authz::CLUSTER_NAME,
        ),
        Some("basic:alice:alice-pw,basic:bob:bob-pw".parse().unwrap()),
        None,
    );
    call(&guarded, get("/x"))
        .await
        .error(StatusCode::UNAUTHORIZED, 40101);
    call(&guarded, with(get("/x"), BOB))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow(
        "User:bob",
        Operation::Describe,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
    );
    assert_eq!(
        call(&guarded, with(get("/x"), BOB)).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn groups_are_listed_and_described_only_to_who_may_describe_them() {
    let fake = Fake::with_topic("orders", 1);
    for g in ["billing", "audit"] {
        fake.groups.lock().unwrap().push(GroupInfo {
            group: g.into(),
            state: "Empty".into(),
            ..GroupInfo::default()
        });
    }
    let acls = Arc::new(Acls::default());
    acls.allow(
        "User:alice",
        Operation::Describe,
        ResourceType::Group,
        "billing",
    );
    let app = secured(&fake, &acls);
    let a = call(
        &app,
        with(get("/v3/clusters/strata/consumer-groups"), ALICE),
    )
    .await;
    let names: Vec<String> = a.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["consumer_group_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["billing"]);
    for path in [
        "/v3/clusters/strata/consumer-groups/audit",
        "/v3/clusters/strata/consumer-groups/audit/consumers",
        "/v3/clusters/strata/consumer-groups/audit/lags",
        "/v3/clusters/strata/consumer-groups/audit/lag-summary",
    ] {
        call(&app, with(get(path), ALICE))
            .await
            .error(StatusCode::FORBIDDEN, 40301);
    }
    let a = call(
        &app,
        with(
            get("/v3/clusters/strata/consumer-groups/billing/lags"),
            ALICE,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
}

/// v3 topic creation needs Create on the cluster or the topic, deletion Delete, and
/// config changes AlterConfigs on the topic; reading one config DescribeConfigs.
#[tokio::test]
async fn v3_topic_writes_need_create_delete_and_alter_configs() {
    let fake = Fake::with_topic("orders", 1);
    let acls = Arc::new(Acls::default());
    acls.allow("User:alice", Operation::Create, ResourceType::Topic, "mine");
    let app = secured(&fake, &acls);
    let create = |name: &str| {
        post(
            "/v3/clusters/strata/topics",
            Some("application/json"),
            format!(r#"{{"topic_name":"{name}","partitions_count":1}}"#),
        )
    };
    assert_eq!(
        call(&app, with(create("mine"), ALICE)).await.status,
        StatusCode::CREATED
    );
    call(&app, with(create("other"), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    call(&app, with(create("other"), BOB))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    acls.allow(
        "User:bob",
        Operation::Create,
        ResourceType::Cluster,
        strata_authz::CLUSTER_NAME,
    );
    assert_eq!(
        call(&app, with(create("other"), BOB)).await.status,
        StatusCode::CREATED
    );

    let put = || {
        let mut r = post(
            "/v3/clusters/strata/topics/orders/configs/retention.ms",
            Some("application/json"),
            r#"{"value":"1000"}"#,
        );
        *r.method_mut() = axum::http::Method::PUT;
        r
    };
    call(&app, with(put(), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    call(
        &app,
        with(
            get("/v3/clusters/strata/topics/orders/configs/retention.ms"),
            ALICE,
        ),
    )
    .await
    .error(StatusCode::FORBIDDEN, 40301);
    acls.allow(
        "User:alice",
        Operation::AlterConfigs,
        ResourceType::Topic,
        "orders",
    );
    assert_eq!(
        call(&app, with(put(), ALICE)).await.status,
        StatusCode::NO_CONTENT
    );

    let delete = |name: &str| {
        Request::delete(format!("/v3/clusters/strata/topics/{name}"))
            .body(Body::empty())
            .unwrap()
    };
    call(&app, with(delete("orders"), ALICE))
        .await
        .error(StatusCode::FORBIDDEN, 40301);
    assert!(fake.topics.lock().unwrap().contains_key("orders"));
    acls.allow(
        "User:alice",
        Operation::Delete,
        ResourceType::Topic,
        "orders",
    );
    assert_eq!(
        call(&app, with(delete("orders"), ALICE)).await.status,
        StatusCode::NO_CONTENT
    );
    assert!(!fake.topics.lock().unwrap().contains_key("orders"));
}
