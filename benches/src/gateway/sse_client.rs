//! The event stream's client of `sse-latency`: reads `GET /consumers/{group}/stream`,
//! records each record's receipt, and acknowledges as a real client would.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use super::receipts::{Receipts, Stamp};
use super::{Shared, lock};

/// A record event of the stream (format json).
#[derive(Debug, Deserialize)]
struct SseRecord {
    topic: String,
    partition: i32,
    offset: i64,
    value: serde_json::Value,
}

pub(super) struct SseClient {
    pub(super) http: String,
    pub(super) group: String,
    pub(super) topic: String,
    pub(super) sse: Shared<Receipts>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) acks: Arc<AtomicU64>,
    pub(super) ack_errors: Arc<AtomicU64>,
    pub(super) ack_every: u64,
    pub(super) ack_interval: Duration,
    pub(super) timeout: Duration,
    pub(super) now_us: Box<dyn Fn() -> u64 + Send>,
}

/// Reads the stream until told to stop, acknowledging every `ack_every` records or
/// `ack_interval`, whichever comes first, as a real client would: the acknowledgement
/// is posted from its own task, so reading never waits for it.
pub(super) async fn sse_client(c: SseClient) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(c.timeout)
        .build()
        .context("cannot build the HTTP client")?;
    let base = format!("http://{}", c.http);
    let url = format!(
        "{base}/consumers/{}/stream?topic={}&format=json&auto.offset.reset=latest",
        c.group, c.topic
    );
    let mut resp = client
        .get(&url)
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        bail!("GET {url}: {status} {body}");
    }
    // Offsets to acknowledge, the last record per partition; a notification when
    // ack_every records wait.
    let pending: Shared<BTreeMap<(String, i32), i64>> = Arc::default();
    let due = Arc::new(tokio::sync::Notify::new());
    let mut acker: Option<tokio::task::JoinHandle<()>> = None;
    let mut buf: Vec<u8> = Vec::new();
    let mut unacked = 0u64;
    while !c.stop.load(Ordering::Relaxed) {
        let chunk = tokio::select! {
            chunk = resp.chunk() => chunk.context("reading the stream")?,
            _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
        };
        let Some(chunk) = chunk else {
            bail!("the gateway ended the stream");
        };
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let (mut name, mut data) = ("message", Vec::new());
            for line in event.split(|b| *b == b'\n') {
                if let Some(v) = line.strip_prefix(b"event:") {
                    name = match v.trim_ascii() {
                        b"session" => "session",
                        b"record" => "record",
                        b"error" => "error",
                        _ => "other",
                    };
                } else if let Some(v) = line.strip_prefix(b"data:") {
                    data.extend_from_slice(v.strip_prefix(b" ").unwrap_or(v));
                }
            }
            match name {
                "session" => {
                    let s: serde_json::Value =
                        serde_json::from_slice(&data).context("the session event")?;
                    let uri = s["ack_uri"]
                        .as_str()
                        .context("the session event has no ack_uri")?;
                    if acker.is_none() {
                        acker = Some(tokio::spawn(ack_loop(
                            client.clone(),
                            format!("{base}{uri}"),
                            pending.clone(),
                            due.clone(),
                            c.ack_interval,
                            c.acks.clone(),
                            c.ack_errors.clone(),
                        )));
                    }
                }
                "record" => {
                    let Ok(r) = serde_json::from_slice::<SseRecord>(&data) else {
                        continue;
                    };
                    let stamp = serde_json::from_value::<Stamp>(r.value).ok();
                    let now = (c.now_us)();
                    if let Some(s) = stamp {
                        lock(&c.sse).record(&s, now);
                    }
                    lock(&pending).insert((r.topic, r.partition), r.offset);
                    unacked += 1;
                    if unacked >= c.ack_every {
                        unacked = 0;
                        due.notify_one();
                    }
                }
                "error" => eprintln!("warning: stream error: {}", String::from_utf8_lossy(&data)),
                _ => {}
            }
        }
    }
    if let Some(a) = acker {
        a.abort();
    }
    Ok(())
}

async fn ack_loop(
    client: reqwest::Client,
    uri: String,
    pending: Shared<BTreeMap<(String, i32), i64>>,
    due: Arc<tokio::sync::Notify>,
    interval: Duration,
    acks: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) {
    loop {
        tokio::select! {
            _ = due.notified() => {}
            _ = tokio::time::sleep(interval) => {}
        }
        let offsets = std::mem::take(&mut *lock(&pending));
        if offsets.is_empty() {
            continue;
        }
        let body = serde_json::json!({
            "offsets": offsets
                .iter()
                .map(|((t, p), o)| serde_json::json!({"topic": t, "partition": p, "offset": o}))
                .collect::<Vec<_>>()
        });
        let ok = match client
            .post(&uri)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
        {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        };
        acks.fetch_add(1, Ordering::Relaxed);
        if !ok {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}
