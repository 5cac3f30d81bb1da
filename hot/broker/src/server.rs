//! The Kafka listener: connections, framing, ordered responses, housekeeping.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufStream, BufWriter,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::sasl::{SaslSession, Verdict};
use crate::api::{self, Pending};
use crate::broker::Broker;
use crate::limits::{self, ConnectionCounter, HeldBytes, Refused, RequestMemory};
use crate::listener::{ListenerConfig, SecurityProtocol};
use crate::tls::TlsServer;

/// Kafka's connections.max.idle.ms: a connection that sends nothing this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a request's body may take to arrive once its size is read (plus a second
/// per MiB): the bytes it will need are held meanwhile.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// A listener bound before the broker registered (so its advertised port was known).
#[derive(Debug)]
pub struct BoundListener {
    pub config: ListenerConfig,
    pub listener: TcpListener,
    /// The TLS configuration of an SSL or SASL_SSL listener.
    pub tls: Option<Arc<TlsServer>>,
}

/// The running Kafka listeners.
#[derive(Debug)]
pub struct Server {
    /// The first listener's bound address.
    pub local_addr: SocketAddr,
    /// Every listener's bound address.
    pub local_addrs: Vec<(SecurityProtocol, SocketAddr)>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Serves on already bound listeners, with the broker's background duties.
    pub fn start_on(broker: Arc<Broker>, listeners: Vec<BoundListener>) -> Server {
        let local_addrs: Vec<_> = listeners
            .iter()
            .map(|l| {
                (
                    l.config.protocol,
                    l.listener.local_addr().unwrap_or(l.config.bind),
                )
            })
            .collect();
        let local_addr = local_addrs
            .first()
            .map_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)), |(_, a)| *a);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(broker, listeners, shutdown.clone()));
        Server {
            local_addr,
            local_addrs,
            shutdown,
            task,
        }
    }

    /// Stops accepting, closes connections, and waits for the listeners to finish.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

async fn run(broker: Arc<Broker>, listeners: Vec<BoundListener>, shutdown: CancellationToken) {
    let duties = broker.start(&shutdown);
    crate::tls::spawn_reloader(
        listeners.iter().filter_map(|l| l.tls.clone()).collect(),
        TLS_RELOAD_POLL,
        shutdown.clone(),
    );
    let counter = ConnectionCounter::new(&broker.config.limits);
    let memory = RequestMemory::new(&broker.config.limits);
    let ids = Arc::new(AtomicU64::new(0));
    let mut accepting = tokio::task::JoinSet::new();
    for l in listeners {
        accepting.spawn(accept(
            broker.clone(),
            l,
            counter.clone(),
            memory.clone(),
            ids.clone(),
            shutdown.clone(),
        ));
    }
    while accepting.join_next().await.is_some() {}
    for duty in duties {
        let _ = duty.await;
    }
}

/// How often TLS files are looked at for a change (SIGHUP reloads at once).
const TLS_RELOAD_POLL: Duration = Duration::from_secs(5);

/// How long a connection whose authentication failed stays open after the answer
/// (Kafka's connection.failed.authentication.delay.ms default).
const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(100);

/// The socket buffers under a TLS connection.
const TLS_READ_BUFFER: usize = 256 * 1024;
const TLS_WRITE_BUFFER: usize = 64 * 1024;

/// How long a TLS handshake may take before the connection is closed.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One listener's accept loop; its connections end with it.
async fn accept(
    broker: Arc<Broker>,
    bound: BoundListener,
    counter: Arc<ConnectionCounter>,
    memory: RequestMemory,
    ids: Arc<AtomicU64>,
    shutdown: CancellationToken,
) {
    let BoundListener {
        config,
        listener,
        tls,
    } = bound;
    let protocol = config.protocol;
    let mut connections = tokio::task::JoinSet::new();
    let mut last_refusal_log: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = match counter.admit(peer.ip()) {
                        Ok(slot) => slot,
                        Err(why) => {
                            // Closed at once (the client sees a reset and backs off), so
                            // one address cannot hold every slot, nor all of them the
                            // descriptors the partitions need.
                            let (reason, flag) = match why {
                                Refused::Total => ("max_connections", "--max-connections"),
                                Refused::PerIp => ("max_connections_per_ip", "--max-connections-per-ip"),
                            };
                            metrics::counter!("strata_connections_refused_total", "reason" => reason).increment(1);
                            if last_refusal_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                                last_refusal_log = Some(tokio::time::Instant::now());
                                tracing::warn!(%peer, open = counter.open(), "refusing connections: {flag} reached");
                            }
                            drop(stream);
                            continue;
                        }
                    };
                    let id = ids.fetch_add(1, Ordering::Relaxed) + 1;
                    let b = broker.clone();
                    let s = shutdown.clone();
                    let m = memory.clone();
                    let tls = tls.as_ref().map(|t| t.acceptor());
                    connections.spawn(async move {
                        metrics::gauge!("strata_connections").increment(1.0);
                        let r = match stream.set_nodelay(true) {
                            Err(e) => Err(e),
                            Ok(()) => match tls {
                                None => {
                                    let conn = Connection::new(id, peer, protocol, ANONYMOUS);
                                    let (rd, wr) = stream.into_split();
                                    connection(b, conn, rd, wr, m, s).await
                                }
                                Some(acceptor) => match handshake(&b, acceptor, stream, peer, protocol).await {
                                    Some((principal, tls)) => {
                                        let conn = Connection::new(id, peer, protocol, &principal);
                                        let (rd, wr) = tokio::io::split(tls);
                                        connection(b, conn, rd, wr, m, s).await
                                    }
                                    None => Ok(()),
                                },
                            },
                        };
                        if let Err(e) = r {
                            tracing::debug!(%peer, error = %e, "connection closed");
                        }
                        metrics::gauge!("strata_connections").decrement(1.0);
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    if crate::resources::is_out_of_files(&e) {
                        metrics::counter!("strata_connections_refused_total", "reason" => "out_of_files").increment(1);
                        tracing::error!(error = %e, "accept failed: {}", crate::resources::out_of_files_hint());
                    } else {
                        tracing::warn!(error = %e, "accept failed");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// The principal of a connection no one authenticated.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// A TLS handshake, bounded in time. The principal is the client certificate's subject
/// mapped by ssl.principal.mapping.rules on an SSL listener, else `User:ANONYMOUS` (a
/// SASL_SSL connection's principal comes from SASL). A failed handshake (an untrusted
/// certificate, not TLS at all) is an authentication failure: counted and logged.
async fn handshake(
    broker: &Broker,
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    protocol: SecurityProtocol,
) -> Option<(
    String,
    tokio_rustls::server::TlsStream<BufStream<TcpStream>>,
)> {
    // rustls reads the socket 4 KiB at a time and writes a record (16 KiB at most) at a
    // time: buffered underneath, gigabytes of TLS cost a fraction of the syscalls.
    let stream = BufStream::with_capacity(TLS_READ_BUFFER, TLS_WRITE_BUFFER, stream);
    let accept = acceptor.accept(stream).into_fallible();
    let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, accept).await {
        Ok(Ok(tls)) => tls,
        Ok(Err((e, mut io))) => {
            // The alert rustls wrote (an unknown CA, a missing certificate) is in the
            // buffer: send it, so the client reports why.
            let _ = tokio::time::timeout(Duration::from_secs(1), io.flush()).await;
            crate::audit::authentication_failed(peer, protocol, "TLS", None, &e.to_string());
            return None;
        }
        Err(_) => {
            crate::audit::authentication_failed(peer, protocol, "TLS", None, "handshake timed out");
            return None;
        }
    };
    let principal = match (protocol, tls.get_ref().1.peer_certificates()) {
        (SecurityProtocol::Ssl, Some([leaf, ..])) => {
            match broker.config.security.certificate_principal(leaf.as_ref()) {
                Ok(p) => p,
                Err(e) => {
                    crate::audit::authentication_failed(peer, protocol, "TLS", None, &e);
                    return None;
                }
            }
        }
        _ => ANONYMOUS.to_string(),
    };
    Some((principal, tls))
}

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub struct Connection {
    pub id: u64,
    pub peer: SocketAddr,
    pub listener: SecurityProtocol,
    /// `User:NAME`: from the client certificate, SASL, or `User:ANONYMOUS`.
    pub principal: Arc<str>,
    /// Until when its next request waits (a quota's throttle, KIP-219).
    pub mute: Arc<crate::security::quotas::Mute>,
}

impl Connection {
    pub fn new(
        id: u64,
        peer: SocketAddr,
        listener: SecurityProtocol,
        principal: &str,
    ) -> Connection {
        Connection {
            id,
            peer,
            listener,
            principal: Arc::from(principal),
            mute: Arc::default(),
        }
    }
}

async fn connection<R, W>(
    broker: Arc<Broker>,
    conn: Connection,
    rd: R,
    wr: W,
    memory: RequestMemory,
    shutdown: CancellationToken,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut conn = conn;
    let peer = conn.peer;
    let mut sasl = conn.listener.uses_sasl().then(SaslSession::new);
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let (tx, mut rx) =
        mpsc::channel::<(Pending, HeldBytes)>(broker.config.max_in_flight_per_connection.max(1));

    // Writes responses in request order. A response that is not ready yet (a long poll)
    // is waited for only after what is already written has been flushed.
    let writer = tokio::spawn(async move {
        let mut wr = BufWriter::with_capacity(64 * 1024, wr);
        while let Some((mut pending, held)) = rx.recv().await {
            let frame = match (&mut pending).now_or_never() {
                Some(f) => f,
                None => {
                    wr.flush().await?;
                    pending.await
                }
            };
            if let Some(frame) = frame {
                frame.write_to(&mut wr).await?;
            }
            // The request's bytes are free once its answer is on its way.
            drop(held);
            if rx.is_empty() {
                wr.flush().await?;
            }
        }
        wr.flush().await?;
        wr.shutdown().await
    });

    let max = broker.config.max_request_bytes;
    let budget = RequestMemory::connection_budget(&broker.config.limits);
    let result: std::io::Result<()> = async {
        loop {
            // A connection over its quota is muted: its next request waits (KIP-219).
            let muted = broker.security.mute_remaining(&conn.mute);
            if !muted.is_zero() {
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(muted) => {}
                }
            }
            let len = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                r = tokio::time::timeout(IDLE_TIMEOUT, rd.read_i32()) => match r {
                    Err(_) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "idle connection")),
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                    Ok(r) => r?,
                },
            };
            if len < 2 || len as usize > max {
                refused("invalid_size", peer, &format!("closing connection: invalid request size {len} (at most {max}, --max-request-bytes)"));
                return Ok(());
            }
            let len = len as usize;
            // What the request may cost depends on its API: read the key, then hold
            // its weight before reading (and so allocating) the rest.
            let mut key = [0u8; 2];
            match tokio::time::timeout(BODY_TIMEOUT, rd.read_exact(&mut key)).await {
                Ok(r) => r?,
                Err(_) => {
                    refused("stalled", peer, "closing connection: a request size and no request");
                    return Ok(());
                }
            };
            let weight = limits::decoded_weight(i16::from_be_bytes(key), len);
            let Some(held) = memory.hold(&budget, weight).await else {
                refused("too_heavy", peer, &format!("closing connection: a {len}-byte request weighs {weight} bytes, more than --queued-max-request-bytes"));
                return Ok(());
            };
            // A request that stalls half sent holds its bytes: give it a deadline.
            let deadline = BODY_TIMEOUT + Duration::from_secs((len >> 20) as u64);
            let frame = match tokio::time::timeout(deadline, strata_client::read_frame_after(&mut rd, &key, len)).await {
                Ok(f) => f?,
                Err(_) => {
                    refused("stalled", peer, &format!("closing connection: a {len}-byte request did not arrive in {deadline:?}"));
                    return Ok(());
                }
            };
            let frame = frame.freeze();
            if let Some(session) = sasl.as_mut() {
                let verdict = session.on_request(&broker, &conn, &frame);
                // Authenticated (or re-authenticated): later requests carry the principal.
                if let Some(p) = session.principal()
                    && *conn.principal != *p
                {
                    conn.principal = Arc::from(p);
                }
                match verdict {
                    Verdict::Pass => {}
                    Verdict::Answer(frame) => {
                        if tx.send((api::ready(frame), held)).await.is_err() {
                            return Ok(());
                        }
                        continue;
                    }
                    Verdict::AnswerAndClose(frame) => {
                        let _ = tx.send((api::ready(frame), held)).await;
                        // The client reads why before the connection goes (Kafka's
                        // connection.failed.authentication.delay.ms, KIP-306): closed at
                        // once, some clients see only the reset.
                        tokio::time::sleep(FAILED_AUTHENTICATION_DELAY).await;
                        return Ok(());
                    }
                    Verdict::Close(why) => {
                        refused("sasl", peer, &format!("closing connection: {why}"));
                        return Ok(());
                    }
                }
            }
            match api::dispatch(&broker, &conn, frame) {
                Ok(pending) => {
                    if tx.send((pending, held)).await.is_err() {
                        return Ok(());
                    }
                }
                Err(e) => {
                    refused("malformed", peer, &format!("closing connection: {e}"));
                    return Ok(());
                }
            }
        }
    }
    .await;
    drop(tx);
    // Answer what was already accepted, then close.
    let _ = writer.await;
    result
}

/// Logs why a connection was closed, counted by reason. A hostile client can make this
/// happen thousands of times a second, so at most one warning per ten seconds reaches
/// the log (the rest at debug); the counter has them all.
fn refused(reason: &'static str, peer: SocketAddr, message: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_WARN_SECS: AtomicU64 = AtomicU64::new(0);
    metrics::counter!("strata_connections_closed_total", "reason" => reason).increment(1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST_WARN_SECS.load(Ordering::Relaxed);
    if now >= last + 10
        && LAST_WARN_SECS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(%peer, "{message} (further closings for 10 s at debug level; see strata_connections_closed_total)");
    } else {
        tracing::debug!(%peer, "{message}");
    }
}

/// This broker as a [`strata_client::LocalBroker`]: request frames go to the same
/// dispatch as the listener's, without a socket. What the listener would answer by
/// closing the connection (a malformed frame) is None.
pub struct LocalLink {
    broker: Arc<Broker>,
    connection_id: u64,
}

impl std::fmt::Debug for LocalLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLink")
            .field("node_id", &self.broker.node_id())
            .field("connection_id", &self.connection_id)
            .finish()
    }
}

impl LocalLink {
    pub fn new(broker: Arc<Broker>) -> LocalLink {
        // Apart from the listener's ids (counted up from 1).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 62);
        LocalLink {
            broker,
            connection_id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl strata_client::LocalBroker for LocalLink {
    fn call(
        &self,
        frame: bytes::Bytes,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<bytes::Bytes>> + Send>> {
        let conn = Connection::new(
            self.connection_id,
            std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            SecurityProtocol::Plaintext,
            crate::security::INTERNAL,
        );
        let broker = self.broker.clone();
        // On a task of its own, as the listener handles each connection on its own task:
        // dispatch appends before it returns, and the caller may have several requests
        // in flight to different partitions.
        let task = tokio::spawn(async move {
            match api::dispatch(&broker, &conn, frame) {
                Ok(pending) => pending.await.map(api::Frame::into_bytes),
                Err(e) => {
                    tracing::warn!(error = %e, "in-process request refused");
                    None
                }
            }
        });
        Box::pin(async move { task.await.ok().flatten() })
    }
}
