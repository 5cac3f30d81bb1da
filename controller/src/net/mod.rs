//! The controller's RPC layer: one TCP port per voter carrying raft's RPCs and the client
//! RPCs.
//!
//! A frame is a big-endian `u32` length and that many bytes of JSON. A connection carries
//! one request at a time, answered in order; callers keep idle connections in a small
//! per-address pool and reuse them. Every call has a timeout; a connection whose call
//! failed or timed out is dropped (its stream may hold half a frame).

pub(crate) mod frame;
pub(crate) mod peer;
pub(crate) mod raft_net;
pub(crate) mod server;

/// A connection's byte stream: TCP, or TLS over TCP.
pub(crate) trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Mutual TLS on the voters' RPC port: only a process holding a certificate the
/// cluster's CA signed may vote, append, or call the controller (register a broker,
/// create topics, read the metadata).
#[derive(Clone)]
pub struct RpcTls {
    /// What the port accepts: client certificates required, verified against the CA.
    pub server: std::sync::Arc<rustls::ServerConfig>,
    /// What this process presents when it calls a voter.
    pub client: std::sync::Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for RpcTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RpcTls")
    }
}

/// Configurations compare as the same when they are the same object.
impl PartialEq for RpcTls {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.server, &other.server)
            && std::sync::Arc::ptr_eq(&self.client, &other.client)
    }
}
impl Eq for RpcTls {}

/// The client half of [`RpcTls`] (brokers and tools that call the controller).
#[derive(Clone)]
pub struct ClientTls(pub std::sync::Arc<rustls::ClientConfig>);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

impl PartialEq for ClientTls {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for ClientTls {}
