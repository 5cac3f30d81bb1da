//! The accept loop: one task per connection, requests answered in order.

use std::future::Future;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Io;
use super::frame::{encode, read_frame, write_frame};
use crate::rpc::{ClientReply, RpcRequest, RpcResponse};

/// Answers requests.
pub(crate) trait RpcHandler: Send + Sync + 'static {
    fn handle(&self, req: RpcRequest) -> impl Future<Output = RpcResponse> + Send;
}

/// Serves `listener` until `stop` is cancelled; connection tasks are tracked by `tasks`
/// and stop with it too.
pub(crate) async fn serve<H: RpcHandler>(
    listener: TcpListener,
    handler: Arc<H>,
    stop: CancellationToken,
    tasks: TaskTracker,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((conn, peer)) => {
                let handler = handler.clone();
                let stop = stop.clone();
                let tls = tls.clone();
                tasks.spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        r = secured(conn, tls, handler) => {
                            if let Err(e) = r {
                                tracing::debug!(%peer, error = %e, "controller connection closed");
                            }
                        }
                    }
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                tracing::warn!(error = %e, "controller accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// A connection after its TLS handshake (if the port has TLS): a peer without a
/// certificate the cluster's CA signed fails here, before any request is read.
async fn secured<H: RpcHandler>(
    conn: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: Arc<H>,
) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    match tls {
        None => connection(Box::new(conn), handler).await,
        Some(config) => {
            let accept = tokio_rustls::TlsAcceptor::from(config).accept(conn);
            match tokio::time::timeout(std::time::Duration::from_secs(10), accept).await {
                Ok(Ok(s)) => connection(Box::new(s), handler).await,
                Ok(Err(e)) => {
                    metrics::counter!("strata_controller_rpc_refused_total").increment(1);
                    tracing::warn!(target: "strata::audit", event = "authentication_failed", listener = "controller", error = %e, "controller RPC: TLS handshake refused");
                    Ok(())
                }
                Err(_) => Ok(()),
            }
        }
    }
}

async fn connection<H: RpcHandler>(mut conn: Box<dyn Io>, handler: Arc<H>) -> std::io::Result<()> {
    while let Some(req) = read_frame::<_, RpcRequest>(&mut conn).await? {
        let resp = handler.handle(req).await;
        let frame = encode(&resp)?;
        // What metadata costs on the wire: the whole of it, or a delta.
        let kind = match &resp {
            RpcResponse::Client(Ok(ClientReply::Metadata(Some(_)))) => Some("full"),
            RpcResponse::Client(Ok(ClientReply::MetadataDelta(_))) => Some("delta"),
            _ => None,
        };
        if let Some(kind) = kind {
            metrics::counter!("strata_controller_metadata_reply_bytes_total", "kind" => kind)
                .increment(frame.len() as u64);
        }
        write_frame(&mut conn, &frame).await?;
    }
    Ok(())
}
