//! A minimal Kafka client connection (strata-client), for broker-to-broker requests
//! (followers fetching from leaders, transaction markers) and the gateway's produce path:
//! one request at a time, versions chosen by the caller, every call under a deadline.
//!
//! A connection is TCP, or a [`LocalBroker`]: the broker in the same process, handed
//! the same request frames and answering with the same response frames as its
//! listener, minus the socket (the gateway inside `strata serve` reaches partitions
//! this broker leads that way, through `strata_broker::LocalLink`).
//!
//! It is one file, and owns:
//!
//! * [`KafkaConnection`]: connect (TCP, optionally TLS and SASL PLAIN or SCRAM through
//!   strata-auth's client), send a request, read its response under a deadline.
//! * [`ClientSecurity`] and [`SaslLogin`]: how a connection authenticates.
//! * [`LocalBroker`]: the in-process broker a connection may be instead of a socket.
//! * [`read_frame`] and [`read_frame_after`]: size-prefixed frames that grow with the
//!   bytes that arrive (at most 1 MiB reserved before data comes); the broker's listener
//!   reads requests with them too.
//! * [`ClientError`]: why a call failed; every kind is worth a retry after a pause.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
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
    #[error("authentication to {addr} failed: {reason}")]
    Authentication { addr: String, reason: String },
}

/// A broker in this process: takes a request frame (header and body, without the size
/// prefix) and answers with the response frame its listener would write (with the size
/// prefix), or None where the listener would send nothing or close the connection.
pub trait LocalBroker: Send + Sync + 'static {
    fn call(&self, frame: Bytes) -> Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>;
}

/// A byte stream to a broker: TCP, or TLS over TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

enum Link {
    Tcp(Box<dyn Io>),
    Local(Arc<dyn LocalBroker>),
}

/// How connections authenticate to brokers: TLS (with this process's certificate for
/// mutual TLS) and/or SASL. `Default` is plain TCP, nobody.
#[derive(Clone, Default)]
pub struct ClientSecurity {
    /// TLS: the roots that sign brokers' certificates, and this client's certificate.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL PLAIN or SCRAM, after TLS if any.
    pub sasl: Option<SaslLogin>,
}

impl std::fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

/// A SASL identity.
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: strata_auth::Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The largest response frame a connection reads unless told otherwise (the size of
/// Kafka's socket.request.max.bytes, 100 MiB): a peer's size prefix is checked against
/// it before a byte is reserved.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 100 << 20;

/// The first reservation for a frame's body. A size prefix is only a claim: reserving
/// all of it up front would let a peer that sends four bytes make us hold the whole
/// limit. Past this the buffer grows with the bytes that actually arrive. 1 MiB holds
/// a typical produce request (librdkafka's message.max.bytes) without a copy.
const FIRST_RESERVATION: usize = 1 << 20;

/// Reads a `len`-byte frame body (its size prefix already read and checked against a
/// limit by the caller), holding at most about twice the bytes received so far. The
/// broker's listener reads requests with it too.
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    rd: &mut R,
    len: usize,
) -> std::io::Result<BytesMut> {
    read_frame_after(rd, &[], len).await
}

/// [`read_frame`] for a body whose first bytes (`prefix`, at most `len`) were already
/// read: the listener reads the API key first, to know what a request may cost.
pub async fn read_frame_after<R: tokio::io::AsyncRead + Unpin>(
    rd: &mut R,
    prefix: &[u8],
    len: usize,
) -> std::io::Result<BytesMut> {
    let mut frame = BytesMut::with_capacity(len.min(FIRST_RESERVATION).max(prefix.len()));
    frame.extend_from_slice(&prefix[..prefix.len().min(len)]);
    while frame.len() < len {
        if frame.len() == frame.capacity() {
            // Doubling: the copies cost at most once more the frame.
            frame.reserve((len - frame.len()).min(frame.len().max(FIRST_RESERVATION)));
        }
        let want = (len - frame.len()) as u64;
        let n = (&mut *rd).take(want).read_buf(&mut frame).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "frame truncated",
            ));
        }
    }
    Ok(frame)
}

/// One connection to a broker.
pub struct KafkaConnection {
    addr: String,
    link: Link,
    next_correlation: i32,
    client_id: StrBytes,
    max_response_bytes: usize,
}

impl std::fmt::Debug for KafkaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConnection")
            .field("addr", &self.addr)
            .field("local", &matches!(self.link, Link::Local(_)))
            .finish_non_exhaustive()
    }
}

impl KafkaConnection {
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Self::connect_with(addr, client_id, timeout, &ClientSecurity::default()).await
    }

    /// Connects with TLS and/or SASL as `security` says, all within `timeout`.
    pub async fn connect_with(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Self, ClientError> {
        let connect_error = |source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        };
        let timed_out = || {
            connect_error(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            ))
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let stream = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(connect_error)?;
        stream.set_nodelay(true).map_err(connect_error)?;
        let link: Box<dyn Io> = match &security.tls {
            None => Box::new(stream),
            Some(config) => {
                let host = addr
                    .rsplit_once(':')
                    .map_or(addr, |(h, _)| h)
                    .trim_matches(['[', ']'])
                    .to_string();
                let name = rustls::pki_types::ServerName::try_from(host).map_err(|e| {
                    connect_error(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
                })?;
                let tls = tokio_rustls::TlsConnector::from(config.clone());
                let s = tokio::time::timeout_at(deadline, tls.connect(name, stream))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| ClientError::Authentication {
                        addr: addr.to_string(),
                        reason: format!("TLS: {e}"),
                    })?;
                Box::new(s)
            }
        };
        let mut conn = KafkaConnection {
            addr: addr.to_string(),
            link: Link::Tcp(link),
            next_correlation: 1,
            client_id: StrBytes::from_string(client_id.to_string()),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        };
        if let Some(login) = &security.sasl {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            conn.authenticate(login, left).await?;
        }
        Ok(conn)
    }

    /// One SaslAuthenticate round: the server's bytes, or why it failed.
    async fn sasl_step(
        &mut self,
        bytes: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};
        let mut a = SaslAuthenticateRequest::default();
        a.auth_bytes = bytes.into();
        let r: SaslAuthenticateResponse =
            self.call(ApiKey::SaslAuthenticate, 1, &a, timeout).await?;
        if r.error_code != 0 {
            return Err(ClientError::Authentication {
                addr: self.addr.clone(),
                reason: r.error_message.map(|m| m.to_string()).unwrap_or_default(),
            });
        }
        Ok(r.auth_bytes.to_vec())
    }

    /// SaslHandshake v1 and SaslAuthenticate (KIP-152) with PLAIN or SCRAM.
    async fn authenticate(
        &mut self,
        login: &SaslLogin,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
        use strata_auth::Mechanism;
        let failed = |addr: &str, reason: String| ClientError::Authentication {
            addr: addr.to_string(),
            reason,
        };
        let mut hs = SaslHandshakeRequest::default();
        hs.mechanism = StrBytes::from_static_str(login.mechanism.name());
        let r: SaslHandshakeResponse = self.call(ApiKey::SaslHandshake, 1, &hs, timeout).await?;
        if r.error_code != 0 {
            return Err(failed(
                &self.addr,
                format!("the broker does not offer {}", login.mechanism),
            ));
        }
        match login.mechanism {
            Mechanism::Plain => {
                let first = strata_auth::PlainCredentials::encode(&login.username, &login.password);
                self.sasl_step(first, timeout).await?;
            }
            Mechanism::OAuthBearer => {
                return Err(failed(
                    &self.addr,
                    "inter-broker OAUTHBEARER is not offered; use SCRAM or PLAIN".into(),
                ));
            }
            scram => {
                let rng = aws_lc_rs::rand::SystemRandom::new();
                let mut client = strata_auth::ScramClient::with_random_nonce(
                    scram,
                    &login.username,
                    &login.password,
                    &rng,
                )
                .map_err(|e| failed(&self.addr, e.to_string()))?;
                let server_first = self.sasl_step(client.client_first(), timeout).await?;
                let client_final = client
                    .handle_server_first(&server_first)
                    .map_err(|e| failed(&self.addr, e.to_string()))?;
                let server_final = self.sasl_step(client_final, timeout).await?;
                client
                    .handle_server_final(&server_final)
                    .map_err(|e| failed(&self.addr, format!("the broker's signature: {e}")))?;
            }
        }
        Ok(())
    }

    /// Refuse response frames larger than `max` (a replica fetcher sets its fetch size
    /// plus headroom).
    pub fn with_max_response_bytes(mut self, max: usize) -> Self {
        self.max_response_bytes = max;
        self
    }

    /// A connection to the broker in this process; `name` stands for its address in
    /// errors.
    pub fn local(name: &str, broker: Arc<dyn LocalBroker>, client_id: &str) -> Self {
        KafkaConnection {
            addr: name.to_string(),
            link: Link::Local(broker),
            next_correlation: 1,
            client_id: StrBytes::from_string(client_id.to_string()),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
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
        // Sized up front: a Produce request carries its batches, and growing the buffer
        // by doubling would copy them several times.
        let size = req.compute_size(version).unwrap_or(0);
        let mut buf = BytesMut::with_capacity(256 + size);
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
        let mut body = match &mut self.link {
            Link::Tcp(stream) => {
                stream
                    .write_all(&buf)
                    .await
                    .map_err(io("write", &self.addr))?;
                let len = stream.read_i32().await.map_err(io("read", &self.addr))?;
                if len < 0 || len as usize > self.max_response_bytes {
                    return Err(protocol(format!(
                        "response length {len} (at most {} accepted)",
                        self.max_response_bytes
                    )));
                }
                read_frame(stream, len as usize)
                    .await
                    .map_err(io("read", &self.addr))?
                    .freeze()
            }
            Link::Local(broker) => {
                let frame = buf.freeze().slice(4..);
                let Some(mut resp) = broker.call(frame).await else {
                    return Err(ClientError::Io {
                        op: "read",
                        addr: self.addr.clone(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::ConnectionAborted,
                            "the broker closed the connection without an answer",
                        ),
                    });
                };
                if resp.len() < 4 {
                    return Err(protocol(format!("a {}-byte response frame", resp.len())));
                }
                resp.advance(4);
                resp
            }
        };
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
