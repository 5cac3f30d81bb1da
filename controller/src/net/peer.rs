//! Calls to one address over pooled connections.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;

use super::Io;
use super::frame::{encode, read_frame, write_frame};
use crate::rpc::{RpcRequest, RpcResponse};

/// Idle connections kept per address. Long polls hold one each while they wait, so a
/// broker typically has two in use: the poll and its heartbeats.
const MAX_IDLE: usize = 4;

/// Why a call got no response.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// No connection could be made: nothing listens there, or it is down.
    #[error("cannot connect: {0}")]
    Connect(#[source] io::Error),
    /// The connection failed after the request may have been sent.
    #[error("connection failed: {0}")]
    Io(#[source] io::Error),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

impl CallError {
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            CallError::Connect(e) | CallError::Io(e) => e,
            CallError::TimedOut(d) => {
                io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {d:?}"))
            }
        }
    }
}

/// Connections to every address this process talks to.
#[derive(Default)]
pub(crate) struct Peers {
    map: Mutex<HashMap<String, Arc<Peer>>>,
    /// TLS for every connection (the voters' RPC port requires it when configured).
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Peers {
    pub(crate) fn new(tls: Option<Arc<rustls::ClientConfig>>) -> Peers {
        Peers {
            map: Mutex::default(),
            tls,
        }
    }

    pub(crate) fn get(&self, addr: &str) -> Arc<Peer> {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(addr.to_string())
            .or_insert_with(|| {
                Arc::new(Peer {
                    addr: addr.to_string(),
                    idle: Mutex::new(Vec::new()),
                    tls: self.tls.clone(),
                })
            })
            .clone()
    }
}

/// One address and its idle connections.
pub(crate) struct Peer {
    addr: String,
    idle: Mutex<Vec<Box<dyn Io>>>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Peer {
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    fn take_idle(&self) -> Option<Box<dyn Io>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn put_idle(&self, conn: Box<dyn Io>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Sends `req` and waits for its response, for at most `timeout` in all.
    pub(crate) async fn call(
        &self,
        req: &RpcRequest,
        timeout: Duration,
    ) -> Result<RpcResponse, CallError> {
        let frame = encode(req).map_err(CallError::Io)?;
        match tokio::time::timeout(timeout, self.call_inner(&frame)).await {
            Ok(r) => r,
            Err(_) => Err(CallError::TimedOut(timeout)),
        }
    }

    async fn call_inner(&self, frame: &[u8]) -> Result<RpcResponse, CallError> {
        if let Some(conn) = self.take_idle() {
            match exchange(conn, frame).await {
                Ok((conn, resp)) => {
                    self.put_idle(conn);
                    return Ok(resp);
                }
                // A pooled connection the peer has closed (it restarted, or dropped an
                // idle connection): try once on a fresh one. Every request is safe to
                // repeat: raft's are idempotent, and the client's are built to be.
                Err(e) => {
                    tracing::debug!(addr = %self.addr, error = %e, "pooled connection failed")
                }
            }
        }
        let conn = TcpStream::connect(&self.addr)
            .await
            .map_err(CallError::Connect)?;
        // Small request/response frames: do not let Nagle hold them back.
        conn.set_nodelay(true).map_err(CallError::Connect)?;
        let conn: Box<dyn Io> = match &self.tls {
            None => Box::new(conn),
            Some(config) => {
                let host = self
                    .addr
                    .rsplit_once(':')
                    .map_or(self.addr.as_str(), |(h, _)| h)
                    .trim_matches(['[', ']'])
                    .to_string();
                let name = rustls::pki_types::ServerName::try_from(host).map_err(|e| {
                    CallError::Connect(io::Error::new(io::ErrorKind::InvalidInput, e))
                })?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, conn)
                    .await
                    .map_err(CallError::Connect)?;
                Box::new(tls)
            }
        };
        let (conn, resp) = exchange(conn, frame).await.map_err(CallError::Io)?;
        self.put_idle(conn);
        Ok(resp)
    }
}

async fn exchange(mut conn: Box<dyn Io>, frame: &[u8]) -> io::Result<(Box<dyn Io>, RpcResponse)> {
    write_frame(&mut conn, frame).await?;
    match read_frame::<_, RpcResponse>(&mut conn).await? {
        Some(resp) => Ok((conn, resp)),
        None => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before the response",
        )),
    }
}
