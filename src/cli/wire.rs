//! A blocking Kafka protocol connection, encoded and decoded by the kafka-protocol crate,
//! for the few requests librdkafka's Rust binding does not expose (OffsetFetch for every
//! topic of a group). Versions are negotiated with ApiVersions, so it speaks to any Kafka
//! broker.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::ops::RangeInclusive;
use std::time::Duration;

use anyhow::{Context, bail};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// The largest answer read: a wrong length off the wire must not make the CLI allocate
/// gigabytes.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// One connection to one broker.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    addr: String,
    correlation: i32,
    /// api key -> (min, max) version, from the broker's ApiVersions.
    versions: BTreeMap<i16, (i16, i16)>,
}

impl Conn {
    /// Connects to `addr` (HOST:PORT) and asks for its API versions; every read and write
    /// waits at most `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> anyhow::Result<Conn> {
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .with_context(|| format!("{addr}: cannot resolve the host"))?
            .collect();
        let mut errors = Vec::new();
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout))?;
                    stream.set_write_timeout(Some(timeout))?;
                    let _ = stream.set_nodelay(true);
                    let mut conn = Conn {
                        stream,
                        addr: addr.to_string(),
                        correlation: 0,
                        versions: BTreeMap::new(),
                    };
                    // v0: every broker answers it, whatever it supports.
                    let r: ApiVersionsResponse =
                        conn.call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())?;
                    if r.error_code != 0 {
                        bail!("{addr}: ApiVersions failed with error {}", r.error_code);
                    }
                    conn.versions = r
                        .api_keys
                        .iter()
                        .map(|k| (k.api_key, (k.min_version, k.max_version)))
                        .collect();
                    return Ok(conn);
                }
                Err(e) => errors.push(format!("{a}: {e}")),
            }
        }
        bail!("cannot connect to {addr}: {}", errors.join("; "))
    }

    /// The highest version of `api` both the broker and `ours` support.
    pub fn version(&self, api: ApiKey, ours: RangeInclusive<i16>) -> Option<i16> {
        let &(min, max) = self.versions.get(&(api as i16))?;
        let v = max.min(*ours.end());
        (v >= min && v >= *ours.start()).then_some(v)
    }

    /// Sends one request and reads its answer.
    pub fn call<Req, Resp>(&mut self, api: ApiKey, version: i16, req: &Req) -> anyhow::Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        self.correlation = self.correlation.wrapping_add(1);
        let correlation = self.correlation;
        let mut h = RequestHeader::default();
        h.request_api_key = api as i16;
        h.request_api_version = version;
        h.correlation_id = correlation;
        h.client_id = Some(StrBytes::from_static_str("strata-cli"));
        let mut frame = vec![0u8; 4];
        h.encode(&mut frame, Req::header_version(version))?;
        req.encode(&mut frame, version)?;
        let len = i32::try_from(frame.len() - 4).context("request too large")?;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        let what = || format!("{api:?} v{version} to {}", self.addr);
        self.stream
            .write_all(&frame)
            .with_context(|| format!("sending {}", what()))?;
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .with_context(|| format!("no answer to {}", what()))?;
        let len = i32::from_be_bytes(len);
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= MAX_RESPONSE_BYTES)
            .with_context(|| format!("the answer to {} claims {len} bytes", what()))?;
        let mut body = vec![0u8; len];
        self.stream
            .read_exact(&mut body)
            .with_context(|| format!("a truncated answer to {}", what()))?;
        let mut b: &[u8] = &body;
        let rh = ResponseHeader::decode(&mut b, api.response_header_version(version))
            .with_context(|| format!("a bad answer header to {}", what()))?;
        if rh.correlation_id != correlation {
            bail!(
                "the answer to {} has correlation id {} (expected {correlation})",
                what(),
                rh.correlation_id
            );
        }
        Resp::decode(&mut b, version).with_context(|| format!("a bad answer to {}", what()))
    }
}
