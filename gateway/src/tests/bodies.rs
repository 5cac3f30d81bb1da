//! Every request body the gateway parses, fuzzed through the real router against the
//! in-memory service: arbitrary bytes, valid bodies mutated byte by byte, and valid
//! shapes holding arbitrary JSON. Whatever arrives, the answer is a 2xx or a 4xx with a
//! Confluent error body, never a 5xx or a panic (issue 14: no request takes a broker
//! down). cargo-fuzz cannot build this crate (it links librdkafka), hence proptest.
//!
//! The streamed v3 body is fed in arbitrary chunks; its answer is always 200 and each
//! line must be a record's answer or a 4xx error object.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;

/// Cases per property: enough to find the shallow bugs on every CI run, few enough that
/// the whole file runs in seconds.
const CASES: u32 = 384;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        // Shrinking a router call is cheap, but bound it so a failure reports quickly.
        max_shrink_iters: 2048,
        ..ProptestConfig::default()
    }
}

/// A router over a fake with topic `t` (2 partitions), a consumer instance `g/c`, and an
/// open stream session, in a runtime kept for the whole property.
struct Target {
    rt: tokio::runtime::Runtime,
    app: axum::Router,
    session: String,
    // Held: the session lives as long as its stream.
    _stream: axum::response::Response,
}

impl Target {
    fn new() -> Target {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (app, stream) = rt.block_on(async {
            let fake = Fake::with_topic("t", 2);
            let app = app(
                &fake,
                GatewayConfig {
                    max_body_bytes: 64 << 10,
                    ..GatewayConfig::default()
                },
            );
            let a = call(
                &app,
                post(
                    "/consumers/g",
                    Some("application/vnd.kafka.v2+json"),
                    r#"{"name":"c","format":"json"}"#,
                ),
            )
            .await;
            assert_eq!(a.status, StatusCode::OK);
            let stream = app
                .clone()
                .oneshot(get("/consumers/g/stream?topic=t"))
                .await
                .unwrap();
            assert_eq!(stream.status(), StatusCode::OK);
            (app, stream)
        });
        let session = stream.headers()["strata-stream-session"]
            .to_str()
            .unwrap()
            .to_string();
        Target {
            rt,
            app,
            session,
            _stream: stream,
        }
    }

    /// POSTs (or, for a GET with a body, GETs) `body` with a Content-Length.
    fn send(&self, e: &Endpoint, body: &[u8], idempotency: bool) -> Answer {
        let path = e.path.replace("{session}", &self.session);
        let mut b = Request::builder()
            .method(e.method)
            .uri(path)
            .header(header::CONTENT_LENGTH, body.len())
            .header(header::CONTENT_TYPE, e.content_type);
        if idempotency {
            b = b.header("idempotency-key", "k");
        }
        let req = b.body(Body::from(body.to_vec())).unwrap();
        self.rt.block_on(call(&self.app, req))
    }

    /// A chunked v3 produce of `body` cut at `cuts`.
    fn stream(&self, body: &[u8], cuts: &[usize]) -> Answer {
        let mut chunks = Vec::new();
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        for c in cuts.into_iter().chain([body.len()]) {
            if c > at {
                chunks.push(Ok::<_, std::convert::Infallible>(
                    bytes::Bytes::copy_from_slice(&body[at..c]),
                ));
                at = c;
            }
        }
        let req = post_stream(
            "/v3/clusters/strata/topics/t/records",
            "application/json",
            Body::from_stream(futures::stream::iter(chunks)),
        );
        self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), call(&self.app, req))
                .await
                .expect("a streamed produce ended")
        })
    }
}

/// A route that parses a body, and bodies it accepts (seeds for mutation).
#[derive(Debug)]
struct Endpoint {
    method: &'static str,
    path: &'static str,
    content_type: &'static str,
    seeds: &'static [&'static str],
    shape: Shape,
}

/// Which body an endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    V2Produce,
    V3Produce,
    Create,
    Subscribe,
    Offsets,
    Partitions,
}

const V2_PRODUCE: &[&str] = &[
    r#"{"records":[{"key":"k","value":{"a":[1,2.5,null,true]}},{"value":"v","partition":1}]}"#,
    r#"{"records":[{"value":null},{"key":null,"value":[]}]}"#,
];
const V2_PRODUCE_BINARY: &[&str] = &[
    r#"{"records":[{"key":"aGk=","value":"dmFsdWU="},{"value":"","partition":0}]}"#,
    r#"{"records":[{"value":null,"partition":1}]}"#,
];
const V3_PRODUCE: &[&str] = &[
    r#"{"partition_id":1,"headers":[{"name":"h","value":"aGk="},{"name":"n"}],"key":{"type":"STRING","data":"k"},"value":{"type":"JSON","data":{"a":1}},"timestamp":"2024-05-06T07:08:09.123Z"}"#,
    r#"{"value":{"type":"BINARY","data":"aGk="},"timestamp":1700000000000} {"value":{"data":[1,2]}}"#,
    r#"{"key":{"type":"binary","data":null},"value":{"type":"string","data":"x"}}"#,
];
const CREATE: &[&str] = &[
    r#"{"name":"x1","format":"binary","auto.offset.reset":"earliest","auto.commit.enable":"false","fetch.min.bytes":"1","consumer.request.timeout.ms":1000}"#,
    r#"{"format":"json","auto.commit.enable":true}"#,
];
const SUBSCRIBE: &[&str] = &[
    r#"{"topics":["t","u.v-w_x"]}"#,
    r#"{"topic_pattern":"t.*|a(b)+"}"#,
];
const OFFSETS: &[&str] = &[
    r#"{"offsets":[{"topic":"t","partition":0,"offset":4},{"topic":"t","partition":1,"offset":0}]}"#,
];
const PARTITIONS: &[&str] =
    &[r#"{"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":1}]}"#];

const V2_TYPE: &str = "application/vnd.kafka.v2+json";

const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        method: "POST",
        path: "/topics/t",
        content_type: "application/vnd.kafka.json.v2+json",
        seeds: V2_PRODUCE,
        shape: Shape::V2Produce,
    },
    Endpoint {
        method: "POST",
        path: "/topics/t",
        content_type: "application/vnd.kafka.binary.v2+json",
        seeds: V2_PRODUCE_BINARY,
        shape: Shape::V2Produce,
    },
    Endpoint {
        method: "POST",
        path: "/topics/t/partitions/1",
        content_type: "application/vnd.kafka.json.v2+json",
        seeds: V2_PRODUCE,
        shape: Shape::V2Produce,
    },
    Endpoint {
        method: "POST",
        path: "/v3/clusters/strata/topics/t/records",
        content_type: "application/json",
        seeds: V3_PRODUCE,
        shape: Shape::V3Produce,
    },
    Endpoint {
        method: "POST",
        path: "/consumers/g",
        content_type: V2_TYPE,
        seeds: CREATE,
        shape: Shape::Create,
    },
    Endpoint {
        method: "POST",
        path: "/consumers/g/instances/c/subscription",
        content_type: V2_TYPE,
        seeds: SUBSCRIBE,
        shape: Shape::Subscribe,
    },
    Endpoint {
        method: "POST",
        path: "/consumers/g/instances/c/offsets",
        content_type: V2_TYPE,
        seeds: OFFSETS,
        shape: Shape::Offsets,
    },
    Endpoint {
        method: "GET",
        path: "/consumers/g/instances/c/offsets",
        content_type: V2_TYPE,
        seeds: PARTITIONS,
        shape: Shape::Partitions,
    },
    Endpoint {
        method: "POST",
        path: "/consumers/g/instances/c/positions",
        content_type: "application/json",
        seeds: OFFSETS,
        shape: Shape::Offsets,
    },
    Endpoint {
        method: "POST",
        path: "/consumers/g/instances/c/positions/beginning",
        content_type: V2_TYPE,
        seeds: PARTITIONS,
        shape: Shape::Partitions,
    },
    Endpoint {
        method: "POST",
        path: "/consumers/g/instances/c/positions/end",
        content_type: V2_TYPE,
        seeds: PARTITIONS,
        shape: Shape::Partitions,
    },
    Endpoint {
        method: "POST",
        path: "/consumers/g/stream/{session}/ack",
        content_type: "application/json",
        seeds: OFFSETS,
        shape: Shape::Offsets,
    },
];

/// The answer is a success, or a 4xx in Confluent's error shape.
fn check(what: &str, a: &Answer) -> Result<(), TestCaseError> {
    let body = String::from_utf8_lossy(&a.body);
    prop_assert!(
        a.status.is_success() || a.status.is_client_error(),
        "{what}: {} {body}",
        a.status
    );
    if a.status.is_client_error() {
        let j: Value = serde_json::from_slice(&a.body)
            .map_err(|e| TestCaseError::fail(format!("{what}: error not JSON ({e}): {body}")))?;
        prop_assert!(j["error_code"].is_u64(), "{what}: {body}");
        prop_assert!(
            j["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }
    Ok(())
}

/// Every line of a streamed answer is a record's answer (200) or a 4xx error object,
/// and every record of `body` is answered: a body of whole JSON values gets one line
/// per value; any other ends with an error. (A handler that panics in the stream's task
/// ends the answer early, without an error.)
fn check_stream(body: &[u8], a: &Answer) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.status, StatusCode::OK);
    let values: Result<Vec<Value>, _> = serde_json::Deserializer::from_slice(body)
        .into_iter::<Value>()
        .collect();
    let lines: Vec<&[u8]> = a
        .body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let answer = String::from_utf8_lossy(&a.body);
    match values {
        Ok(v) => prop_assert_eq!(v.len(), lines.len(), "{}", answer),
        Err(_) => {
            let last = lines
                .last()
                .and_then(|l| serde_json::from_slice::<Value>(l).ok());
            prop_assert!(
                last.is_some_and(|j| j["error_code"] != 200),
                "a body that is not whole JSON values ended without an error: {answer}"
            );
        }
    }
    for line in lines {
        let text = String::from_utf8_lossy(line);
        let j: Value = serde_json::from_slice(line)
            .map_err(|e| TestCaseError::fail(format!("a line is not JSON ({e}): {text}")))?;
        let code = j["error_code"].as_u64().unwrap_or(0);
        prop_assert!(code == 200 || (400..500).contains(&code), "{text}");
        if code != 200 {
            prop_assert!(j["message"].is_string(), "{text}");
        }
    }
    Ok(())
}

/// Tokens that have broken JSON handlers elsewhere: numbers past every integer type and
/// past f64, lone surrogates, deep nesting, odd base64, times past year 9999.
const TOKENS: &[&str] = &[
    "null",
    "true",
    "-1",
    "0",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1e400",
    "-0.0",
    "1E15",
    "\"\"",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\"====\"",
    "\"a\"",
    "\"9999-12-31T23:59:60Z\"",
    "\"10000-01-01T00:00:00Z\"",
    "\"1969-12-31T23:59:59Z\"",
    "253402300800000",
    "[]",
    "{}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "\"(((((((((((((((((((((((((((((a*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*\"",
];

/// One edit of a body.
#[derive(Debug, Clone)]
enum Edit {
    /// Overwrite the byte at (position mod length).
    Set(usize, u8),
    Insert(usize, u8),
    /// Delete up to `len` bytes from the position.
    Delete(usize, usize),
    /// Cut the body at the position.
    Truncate(usize),
    /// Replace the JSON scalar (or bracket) at the position with a token.
    Token(usize, usize),
    /// Put a token at the position.
    InsertToken(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Set(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Insert(p, b)),
        (any::<usize>(), 1..16usize).prop_map(|(p, n)| Edit::Delete(p, n)),
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), any::<usize>()).prop_map(|(p, t)| Edit::Token(p, t)),
        (any::<usize>(), any::<usize>()).prop_map(|(p, t)| Edit::InsertToken(p, t)),
    ]
}

fn apply(mut body: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let at = |p: usize, len: usize| if len == 0 { 0 } else { p % len };
        let len = body.len();
        match *e {
            Edit::Set(p, b) if len > 0 => body[at(p, len)] = b,
            Edit::Set(..) => {}
            Edit::Insert(p, b) => body.insert(at(p, len + 1), b),
            Edit::Delete(p, n) => {
                let from = at(p, len);
                body.drain(from..(from + n).min(len));
            }
            Edit::Truncate(p) => body.truncate(at(p, len + 1)),
            Edit::Token(p, t) => {
                // The scalar around the position: from after the previous delimiter to
                // before the next one.
                let delim = |b: &u8| matches!(b, b',' | b':' | b'{' | b'}' | b'[' | b']');
                let p = at(p, len);
                let start = body[..p].iter().rposition(delim).map_or(0, |i| i + 1);
                let end = body[p..].iter().position(delim).map_or(len, |i| p + i);
                let token = TOKENS[t % TOKENS.len()].as_bytes();
                body.splice(start..end.max(start), token.iter().copied());
            }
            Edit::InsertToken(p, t) => {
                let token = TOKENS[t % TOKENS.len()].as_bytes();
                let p = at(p, len + 1);
                body.splice(p..p, token.iter().copied());
            }
        }
    }
    body
}

/// Arbitrary JSON, biased to what the handlers look at: base64-valid strings, type
/// names, topic names, numbers at the edges of i32 and i64.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        (-3i64..3).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(vec![
            "",
            "t",
            "BINARY",
            "JSON",
            "STRING",
            "AVRO",
            "binary",
            "json",
            "aGk=",
            "a",
            "====",
            "earliest",
            "latest",
            "none",
            "true",
            "false",
            "2024-05-06T07:08:09Z",
            "9999-12-31T23:59:59.999Z",
            "[a-",
            "(?i)t",
            ".*",
        ])
        .prop_map(|s| Value::String(s.to_string())),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "records",
                        "key",
                        "value",
                        "partition",
                        "partition_id",
                        "headers",
                        "name",
                        "type",
                        "data",
                        "timestamp",
                        "topics",
                        "topic_pattern",
                        "offsets",
                        "partitions",
                        "topic",
                        "offset",
                        "format",
                        "auto.offset.reset",
                        "auto.commit.enable",
                    ]),
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

/// Values for a shape's fields: mostly arbitrary, with fields the handlers check first
/// (partition, type) biased to valid values so that the fields behind them are reached.
#[derive(Debug, Clone)]
struct Fields {
    a: Value,
    b: Value,
    partition: Value,
    kind: Value,
    timestamp: Value,
    /// Where base64 (or null) is expected.
    b64: Value,
}

fn fields() -> impl Strategy<Value = Fields> {
    let partition = prop_oneof![3 => (0..2i64).prop_map(Value::from), 1 => json_value()];
    let kind = prop_oneof![
        6 => prop::sample::select(vec!["BINARY", "JSON", "STRING", "string", "json", "AVRO"])
            .prop_map(|k| Value::String(k.to_string())),
        1 => json_value(),
    ];
    let timestamp = prop_oneof![
        any::<i64>().prop_map(Value::from),
        (0..=i64::MAX).prop_map(Value::from),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|[+-][0-9]{2}:[0-9]{2})?"
            .prop_map(Value::String),
        json_value(),
    ];
    let b64 = prop_oneof![
        6 => prop::sample::select(vec!["aGk=", "", "AA==", "=", "aGk"])
            .prop_map(|k| Value::String(k.to_string())),
        2 => Just(Value::Null),
        1 => json_value(),
    ];
    (json_value(), json_value(), partition, kind, timestamp, b64).prop_map(
        |(a, b, partition, kind, timestamp, b64)| Fields {
            a,
            b,
            partition,
            kind,
            timestamp,
            b64,
        },
    )
}

/// A valid shape for the endpoint with arbitrary values in its fields.
fn shaped(e: &Endpoint, f: Fields) -> Value {
    let Fields {
        a,
        b,
        partition,
        kind,
        timestamp,
        b64,
    } = f;
    match e.shape {
        Shape::V2Produce => {
            json!({"records":[{"key":b64,"value":b,"partition":partition},{"value":a}]})
        }
        Shape::V3Produce => json!({
            "partition_id": partition,
            "headers": [{"name":"h","value":b64}, {"name":"n","value":null}],
            "key": {"type": kind, "data": b64},
            "value": {"type": "JSON", "data": b},
            "timestamp": timestamp,
        }),
        Shape::Create => json!({
            "name": a, "format": b, "auto.offset.reset": timestamp, "auto.commit.enable": kind,
        }),
        Shape::Subscribe => json!({"topics": a, "topic_pattern": b}),
        Shape::Offsets => {
            json!({"offsets":[{"topic":a,"partition":partition,"offset":timestamp}]})
        }
        Shape::Partitions => {
            json!({"partitions":[{"topic":a,"partition":partition}], "extra": b})
        }
    }
}

fn endpoint() -> impl Strategy<Value = &'static Endpoint> {
    (0..ENDPOINTS.len()).prop_map(|i| &ENDPOINTS[i])
}

#[test]
fn arbitrary_bytes_get_a_4xx_never_a_5xx() {
    let t = Target::new();
    proptest!(config(), |(e in endpoint(), body in prop::collection::vec(any::<u8>(), 0..256), idem in any::<bool>())| {
        let a = t.send(e, &body, idem);
        check(&format!("{} {}", e.method, e.path), &a)?;
    });
}

#[test]
fn mutated_valid_bodies_get_a_4xx_never_a_5xx() {
    let t = Target::new();
    // Every seed is accepted as it is: the mutations start from valid bodies.
    for e in ENDPOINTS {
        for s in e.seeds {
            let a = t.send(e, s.as_bytes(), false);
            assert!(
                a.status.is_success(),
                "{} {}: {s}: {} {}",
                e.method,
                e.path,
                a.status,
                String::from_utf8_lossy(&a.body)
            );
        }
    }
    proptest!(config(), |(e in endpoint(), seed in any::<usize>(), edits in prop::collection::vec(edit(), 1..6), idem in any::<bool>())| {
        let body = apply(e.seeds[seed % e.seeds.len()].as_bytes().to_vec(), &edits);
        let a = t.send(e, &body, idem);
        check(&format!("{} {} {}", e.method, e.path, String::from_utf8_lossy(&body)), &a)?;
    });
}

#[test]
fn valid_shapes_with_arbitrary_values_get_a_4xx_never_a_5xx() {
    let t = Target::new();
    proptest!(config(), |(e in endpoint(), f in fields())| {
        let body = shaped(e, f).to_string();
        let r = t.send(e, body.as_bytes(), false);
        check(&format!("{} {} {body}", e.method, e.path), &r)?;
    });
}

#[test]
fn streamed_v3_bodies_answer_every_record_or_a_4xx() {
    let t = Target::new();
    let v3 = &ENDPOINTS[3];
    assert_eq!(v3.shape, Shape::V3Produce);
    proptest!(config(), |(
        seeds in prop::collection::vec(0..V3_PRODUCE.len(), 1..4),
        edits in prop::collection::vec(edit(), 0..4),
        f in fields(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    )| {
        let mut body: Vec<u8> = seeds
            .iter()
            .flat_map(|&i| [V3_PRODUCE[i].as_bytes(), b"\n".as_slice()].concat())
            .collect();
        body.extend_from_slice(shaped(v3, f).to_string().as_bytes());
        let body = apply(body, &edits);
        check_stream(&body, &t.stream(&body, &cuts))?;
    });
}

#[test]
fn the_record_splitter_takes_any_bytes_in_any_chunks() {
    proptest!(config(), |(
        body in prop::collection::vec(prop::sample::select(b"{}[]\"\\ ,:\nax1".to_vec()), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    )| {
        // Fed in chunks as the handler feeds it: every end lies in the buffer, ends
        // increase, and what is taken out is what was put in.
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(body.len());
        let mut s = crate::v3::RecordSplitter::default();
        let (mut buf, mut taken, mut at) = (Vec::new(), Vec::new(), 0);
        for (i, &c) in cuts.iter().enumerate() {
            buf.extend_from_slice(&body[at..c.max(at)]);
            at = c.max(at);
            let ends = s.scan(&buf, i + 1 == cuts.len());
            prop_assert!(ends.windows(2).all(|w| w[0] <= w[1]), "{ends:?}");
            prop_assert!(ends.iter().all(|&e| e <= buf.len()), "{ends:?}");
            let consumed = ends.last().copied().unwrap_or(0);
            taken.extend(buf.drain(..consumed));
            s.consumed(consumed);
        }
        taken.extend_from_slice(&buf);
        prop_assert_eq!(taken, body);
    });
}

/// The timestamps that broke an answer: a record stamped after year 9999 (Kafka takes
/// any non-negative millisecond count) made formatting the answer's RFC 3339 time
/// panic, killing the connection (or the stream's task).
#[tokio::test]
async fn a_timestamp_past_year_9999_is_produced_and_answered() {
    let fake = Fake::with_topic("t", 1);
    let app = app(&fake, GatewayConfig::default());
    for ts in ["253402300800000", "9223372036854775807"] {
        let body = format!(r#"{{"value":{{"data":1}},"timestamp":{ts}}}"#);
        let a = call(
            &app,
            post(
                "/v3/clusters/strata/topics/t/records",
                Some("application/json"),
                body.clone(),
            ),
        )
        .await;
        assert_eq!(
            a.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(a.json()["timestamp"], Value::Null, "{}", a.json());
        let r = call(
            &app,
            post_stream(
                "/v3/clusters/strata/topics/t/records",
                "application/json",
                Body::from(body),
            ),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        let line: Value = serde_json::from_slice(r.body.trim_ascii()).unwrap();
        assert_eq!(line["error_code"], 200, "{line}");
    }
    // Up to year 9999 the time is answered.
    let a = call(
        &app,
        post(
            "/v3/clusters/strata/topics/t/records",
            Some("application/json"),
            r#"{"value":{"data":1},"timestamp":253402300799999}"#,
        ),
    )
    .await;
    assert_eq!(a.json()["timestamp"], "9999-12-31T23:59:59.999Z");
}
