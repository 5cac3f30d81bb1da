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

/// A plain or TLS stream.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stream::Plain(_) => "Plain",
            Stream::Tls(_) => "Tls",
        })
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// One connection to one broker.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    addr: String,
    correlation: i32,
    /// api key -> (min, max) version, from the broker's ApiVersions.
    versions: BTreeMap<i16, (i16, i16)>,
}

impl Conn {
    /// Connects to the first broker of `bootstrap` (HOST:PORT, comma-separated) that
    /// answers, as --command-config says (TLS, SASL), and asks for its API versions;
    /// every read and write waits at most --timeout.
    pub fn open(bootstrap: &str, c: &super::client::ClientArgs) -> anyhow::Result<Conn> {
        let mut errors = Vec::new();
        for addr in bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            match Self::connect_with(addr, c.timeout, &c.properties()) {
                Ok(conn) => return Ok(conn),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
        match errors.len() {
            0 => bail!("--bootstrap names no broker"),
            1 => bail!("{}", errors.remove(0)),
            _ => bail!("no broker of {bootstrap} answers: {}", errors.join("; ")),
        }
    }

    /// Connects with these client properties: `security.protocol` PLAINTEXT, SSL,
    /// SASL_PLAINTEXT or SASL_SSL; `ssl.ca.location` (and a client certificate with
    /// `ssl.certificate.location`/`ssl.key.location`); `sasl.mechanisms` PLAIN,
    /// SCRAM-SHA-256 or SCRAM-SHA-512 with `sasl.username`/`sasl.password`.
    pub fn connect_with(
        addr: &str,
        timeout: Duration,
        props: &super::client::Properties,
    ) -> anyhow::Result<Conn> {
        let protocol = props
            .get("security.protocol")
            .unwrap_or("plaintext")
            .to_ascii_uppercase();
        let (tls, sasl) = match protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => bail!(
                "--command-config: security.protocol {other} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
            ),
        };
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
                    let stream = if tls {
                        Stream::Tls(Box::new(tls_stream(addr, stream, props)?))
                    } else {
                        Stream::Plain(stream)
                    };
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
                    if sasl {
                        conn.authenticate(props)?;
                    }
                    return Ok(conn);
                }
                Err(e) => errors.push(format!("{a}: {e}")),
            }
        }
        bail!("cannot connect to {addr}: {}", errors.join("; "))
    }

    /// SaslHandshake v1 then SaslAuthenticate (KIP-152) with PLAIN or SCRAM.
    fn authenticate(&mut self, props: &super::client::Properties) -> anyhow::Result<()> {
        use kafka_protocol::messages::{
            SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
            SaslHandshakeResponse,
        };
        let mechanism: strata_auth::Mechanism = props
            .get("sasl.mechanisms")
            .unwrap_or("PLAIN")
            .parse()
            .map_err(|e| anyhow::anyhow!("--command-config sasl.mechanism: {e}"))?;
        let user = props
            .get("sasl.username")
            .context("--command-config: SASL needs sasl.username")?;
        let password = props
            .get("sasl.password")
            .context("--command-config: SASL needs sasl.password")?;
        let mut hs = SaslHandshakeRequest::default();
        hs.mechanism = StrBytes::from_static_str(mechanism.name());
        let r: SaslHandshakeResponse = self.call(ApiKey::SaslHandshake, 1, &hs)?;
        if r.error_code != 0 {
            bail!(
                "{}: the broker does not offer SASL mechanism {} (it offers {:?})",
                self.addr,
                mechanism.name(),
                r.mechanisms
                    .iter()
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
            );
        }
        let version = self.version(ApiKey::SaslAuthenticate, 0..=2).unwrap_or(0);
        let step = |conn: &mut Conn, bytes: Vec<u8>| -> anyhow::Result<Vec<u8>> {
            let mut a = SaslAuthenticateRequest::default();
            a.auth_bytes = bytes.into();
            let r: SaslAuthenticateResponse = conn.call(ApiKey::SaslAuthenticate, version, &a)?;
            if r.error_code != 0 {
                bail!(
                    "{}: authentication as {user} failed: {}",
                    conn.addr,
                    r.error_message.map(|m| m.to_string()).unwrap_or_default()
                );
            }
            Ok(r.auth_bytes.to_vec())
        };
        match mechanism {
            strata_auth::Mechanism::Plain => {
                step(self, strata_auth::PlainCredentials::encode(user, password))?;
            }
            strata_auth::Mechanism::OAuthBearer => {
                bail!("--command-config: use PLAIN or SCRAM for strata's own commands")
            }
            scram => {
                let rng = aws_lc_rs::rand::SystemRandom::new();
                let mut client =
                    strata_auth::ScramClient::with_random_nonce(scram, user, password, &rng)
                        .map_err(|e| anyhow::anyhow!("SCRAM: {e}"))?;
                let server_first = step(self, client.client_first())?;
                let client_final = client
                    .handle_server_first(&server_first)
                    .map_err(|e| anyhow::anyhow!("SCRAM: {e}"))?;
                let server_final = step(self, client_final)?;
                client
                    .handle_server_final(&server_final)
                    .map_err(|e| anyhow::anyhow!("SCRAM: the broker's signature: {e}"))?;
            }
        }
        Ok(())
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

/// A TLS client stream trusting `ssl.ca.location`, with a client certificate when
/// `ssl.certificate.location` and `ssl.key.location` are given.
fn tls_stream(
    addr: &str,
    stream: TcpStream,
    props: &super::client::Properties,
) -> anyhow::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    use rustls::pki_types::ServerName;
    use strata_broker::tls::{provider, read_certs, read_key, read_roots};
    let ca = props.get("ssl.ca.location").context(
        "--command-config: TLS needs ssl.ca.location, the CA that signs the broker's certificate",
    )?;
    let roots = read_roots("ssl.ca.location", std::path::Path::new(ca))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match (
        props.get("ssl.certificate.location"),
        props.get("ssl.key.location"),
    ) {
        (Some(cert), Some(key)) => {
            let chain = read_certs("ssl.certificate.location", std::path::Path::new(cert))?;
            let key = read_key("ssl.key.location", std::path::Path::new(key))?;
            builder.with_client_auth_cert(chain, key)?
        }
        _ => builder.with_no_client_auth(),
    };
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_matches(['[', ']'])
        .to_string();
    let name = ServerName::try_from(host).with_context(|| format!("{addr}: not a host name"))?;
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)?;
    Ok(rustls::StreamOwned::new(conn, stream))
}
