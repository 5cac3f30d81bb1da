//! The REST gateway of a `strata serve` child, for tests that call it over HTTP: a
//! broker started with its gateway ready, a real HTTP client (reqwest), Confluent error
//! bodies checked by status and code, and server-sent events over a plain socket.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use base64::Engine;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use reqwest::blocking::{Client, Response};
use serde_json::Value;

use super::Broker;
use super::kafka::client_config;

pub const JSON_V2: &str = "application/vnd.kafka.json.v2+json";
pub const BINARY_V2: &str = "application/vnd.kafka.binary.v2+json";
pub const V2: &str = "application/vnd.kafka.v2+json";

/// A broker with its gateway ready (it reaches the broker's Kafka listener).
pub struct Gw {
    pub b: Broker,
    pub http: Client,
    _dir: tempfile::TempDir,
}

impl Gw {
    pub fn start(extra: &[&str]) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        let b = Broker::start(dir.path(), extra);
        let http = Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let gw = Gw { b, http, _dir: dir };
        let t0 = Instant::now();
        while gw.get("/readyz").status() != 200 {
            assert!(t0.elapsed() < Duration::from_secs(30), "never ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        gw
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.b.http)
    }

    pub fn get(&self, path: &str) -> Response {
        self.http.get(self.url(path)).send().unwrap()
    }

    pub fn delete(&self, path: &str) -> Response {
        self.http.delete(self.url(path)).send().unwrap()
    }

    pub fn post(&self, path: &str, ct: &str, body: impl Into<String>) -> Response {
        self.http
            .post(self.url(path))
            .header("Content-Type", ct)
            .body(body.into())
            .send()
            .unwrap()
    }

    /// One poll of a binary-format consumer instance at `base` (up to 500 ms): its
    /// records.
    pub fn poll_binary(&self, base: &str) -> Vec<Value> {
        let r = self
            .http
            .get(self.url(&format!("{base}/records?timeout=500")))
            .header("Accept", BINARY_V2)
            .send()
            .unwrap();
        let (s, j) = answer(r);
        assert_eq!(s, 200, "{j}");
        j.as_array().unwrap().clone()
    }

    pub fn cluster_id(&self) -> String {
        let (_, j) = answer(self.get("/v3/clusters"));
        j["data"][0]["cluster_id"].as_str().unwrap().to_string()
    }
}

/// The status, and the body as JSON.
pub fn answer(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().unwrap();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

/// Asserts a Confluent error: status and error_code.
pub fn expect_error(r: Response, status: u16, code: u64) -> Value {
    let (s, j) = answer(r);
    assert_eq!((s, j["error_code"].as_u64()), (status, Some(code)), "{j}");
    assert!(j["message"].is_string(), "{j}");
    j
}

/// Server-sent events over a plain socket, so the test can close the connection.
pub struct Sse {
    pub events: std::sync::mpsc::Receiver<(String, String, String)>,
    socket: std::net::TcpStream,
}

impl Sse {
    pub fn open(gw: &Gw, path: &str) -> Sse {
        use std::io::Write;
        let mut socket = std::net::TcpStream::connect(&gw.b.http).unwrap();
        write!(
            socket,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
            gw.b.http
        )
        .unwrap();
        let mut lines = BufReader::new(socket.try_clone().unwrap()).lines();
        let status = lines.next().unwrap().unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line.is_empty() {
                break;
            }
            if line.to_ascii_lowercase().starts_with("content-type:") {
                assert!(line.contains("text/event-stream"), "{line}");
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // The body is chunked: chunk-size lines match no field and are skipped.
            let (mut event, mut id, mut data) = (String::new(), String::new(), String::new());
            for line in lines {
                let Ok(line) = line else { return };
                if line.is_empty() {
                    if !data.is_empty()
                        && tx
                            .send((
                                std::mem::take(&mut event),
                                std::mem::take(&mut id),
                                std::mem::take(&mut data),
                            ))
                            .is_err()
                    {
                        return;
                    }
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
        });
        Sse { events: rx, socket }
    }

    pub fn next(&self) -> (String, String, Value) {
        let (e, id, data) = self
            .events
            .recv_timeout(Duration::from_secs(30))
            .expect("an event");
        (
            e,
            id,
            serde_json::from_str(&data).unwrap_or(Value::String(data)),
        )
    }

    pub fn close(self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}

pub fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

pub fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// A record as every side compares it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rec {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

pub fn rec_of(m: &rdkafka::message::BorrowedMessage<'_>) -> Rec {
    Rec {
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
    }
}

/// A v2 consumer record (binary format) as a Rec.
pub fn rec_of_json(j: &Value) -> Rec {
    let bytes = |v: &Value| v.as_str().map(unb64);
    Rec {
        partition: j["partition"].as_i64().unwrap() as i32,
        offset: j["offset"].as_i64().unwrap(),
        key: bytes(&j["key"]),
        value: bytes(&j["value"]),
        headers: j["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["name"].as_str().unwrap().to_string(), bytes(&h["value"])))
            .collect(),
    }
}

/// Reads `n` records of every partition from the beginning with a Kafka consumer.
pub fn kafka_read_all(bootstrap: &str, topic: &str, partitions: i32, n: usize) -> Vec<Rec> {
    let c: BaseConsumer = client_config(
        bootstrap,
        &[("group.id", "verify"), ("enable.auto.commit", "false")],
    )
    .create()
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let t0 = Instant::now();
    while out.len() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "read {} of {n}",
            out.len()
        );
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            out.push(rec_of(&m.unwrap()));
        }
    }
    assert!(
        c.poll(Duration::from_millis(300)).is_none(),
        "more than {n} records"
    );
    out.sort();
    out
}
