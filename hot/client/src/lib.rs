//! A minimal Kafka client connection, for broker-to-broker requests (followers fetching
//! from leaders) and the gateway's produce path: one request at a time, versions chosen
//! by the caller, every call under a deadline.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a broker-to-broker call failed; every kind is worth retrying after a pause (the
/// peer may be restarting or partitioned away).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{op} with {addr}: {source}")]
    Io {
        op: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("{api:?} to {addr} timed out after {after:?}")]
    Timeout {
        api: ApiKey,
        addr: String,
        after: Duration,
    },
    #[error("bad response from {addr}: {reason}")]
    Protocol { addr: String, reason: String },
}

/// One connection to a broker.
#[derive(Debug)]
pub struct KafkaConnection {
    addr: String,
    stream: TcpStream,
    next_correlation: i32,
    client_id: StrBytes,
}

impl KafkaConnection {
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Connect {
                addr: addr.to_string(),
                source: std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
            })?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        stream
            .set_nodelay(true)
            .map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        Ok(KafkaConnection {
            addr: addr.to_string(),
            stream,
            next_correlation: 1,
            client_id: StrBytes::from_string(client_id.to_string()),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `req` as `api` at `version` and waits for its response, up to `timeout`.
    pub async fn call<Req, Resp>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, ClientError>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        match tokio::time::timeout(timeout, self.call_inner(api, version, req)).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout {
                api,
                addr: self.addr.clone(),
                after: timeout,
            }),
        }
    }

    async fn call_inner<Req, Resp>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, ClientError>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        let correlation = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = version;
        header.correlation_id = correlation;
        header.client_id = Some(self.client_id.clone());
        let protocol = |reason: String| ClientError::Protocol {
            addr: self.addr.clone(),
            reason,
        };
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        header
            .encode(&mut buf, Req::header_version(version))
            .map_err(|e| protocol(format!("encode header: {e}")))?;
        req.encode(&mut buf, version)
            .map_err(|e| protocol(format!("encode {api:?}: {e}")))?;
        let len = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&len.to_be_bytes());
        let io = |op: &'static str, addr: &str| {
            let addr = addr.to_string();
            move |source| ClientError::Io { op, addr, source }
        };
        self.stream
            .write_all(&buf)
            .await
            .map_err(io("write", &self.addr))?;
        let len = self
            .stream
            .read_i32()
            .await
            .map_err(io("read", &self.addr))?;
        if len < 0 {
            return Err(protocol(format!("negative response length {len}")));
        }
        let mut body = vec![0u8; len as usize];
        self.stream
            .read_exact(&mut body)
            .await
            .map_err(io("read", &self.addr))?;
        let mut body = Bytes::from(body);
        let h = ResponseHeader::decode(&mut body, Resp::header_version(version))
            .map_err(|e| protocol(format!("decode header: {e}")))?;
        if h.correlation_id != correlation {
            return Err(protocol(format!(
                "correlation id {} for request {correlation}",
                h.correlation_id
            )));
        }
        let resp = Resp::decode(&mut body, version)
            .map_err(|e| protocol(format!("decode {api:?}: {e}")))?;
        if body.has_remaining() {
            return Err(protocol(format!(
                "{} bytes after the {api:?} response",
                body.remaining()
            )));
        }
        Ok(resp)
    }
}
