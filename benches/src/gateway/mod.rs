//! The REST gateway's modes.
//!
//! `http-produce` posts batches of JSON records (`application/vnd.kafka.json.v2+json`)
//! to `POST /topics/{t}` over keep-alive connections; `produce --json-values` sends the
//! same records (the same key and value bytes) through the Kafka protocol, so the two
//! rates compare like with like. `sse-latency` produces at a fixed rate with the send
//! time in every value while a Kafka consumer and the gateway's server-sent-events
//! stream (`GET /consumers/{group}/stream`) read the topic, each in its own group, and
//! reports each one's end-to-end latency.
//!
//! Files: `http_produce` and `sse_latency`, one mode each; `sse_client`, the stream's
//! reader; `receipts`, what each consumer of `sse-latency` received.

mod http_produce;
mod receipts;
mod sse_client;
mod sse_latency;

use std::sync::{Arc, Mutex};

use clap::Args;

pub use self::http_produce::HttpProduceArgs;
pub(crate) use self::http_produce::http_produce;
pub use self::receipts::{EndToEnd, Receipt};
pub use self::sse_latency::SseLatencyArgs;
pub(crate) use self::sse_latency::sse_latency;

/// Where the gateway listens.
#[derive(Args, Debug, Clone)]
pub struct GatewayArgs {
    /// The REST gateway's HOST:PORT (`strata serve --http-addr`).
    #[arg(long, env = "STRATA_HTTP", default_value = "127.0.0.1:8080")]
    pub http: String,
}

pub(crate) type Shared<T> = Arc<Mutex<T>>;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
