//! Openraft's network over [`Peer`] calls.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RPCTypes};

use super::peer::{CallError, Peer, Peers};
use crate::rpc::{RpcRequest, RpcResponse};
use crate::types::{NodeId, TypeConfig};

type RpcErr<E = openraft::error::Infallible> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

/// Makes a [`RaftPeer`] per replication target.
#[derive(Debug, Clone)]
pub(crate) struct NetworkFactory {
    pub(crate) node_id: NodeId,
    pub(crate) peers: Arc<Peers>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = RaftPeer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> RaftPeer {
        RaftPeer {
            node_id: self.node_id,
            target,
            peer: self.peers.get(&node.addr),
        }
    }
}

/// Raft RPCs to one voter.
#[derive(Debug)]
pub(crate) struct RaftPeer {
    node_id: NodeId,
    target: NodeId,
    peer: Arc<Peer>,
}

impl RaftPeer {
    async fn call<E: std::error::Error>(
        &self,
        action: RPCTypes,
        req: RpcRequest,
        ttl: Duration,
    ) -> Result<RpcResponse, RpcErr<E>> {
        self.peer.call(&req, ttl).await.map_err(|e| match e {
            // Openraft backs off from an unreachable peer instead of retrying at once.
            CallError::Connect(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Io(e) => RPCError::Network(NetworkError::new(&e)),
            CallError::TimedOut(timeout) => RPCError::Timeout(Timeout {
                action,
                id: self.node_id,
                target: self.target,
                timeout,
            }),
        })
    }

    fn unexpected<E: std::error::Error>(&self, resp: &RpcResponse) -> RpcErr<E> {
        let e = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} answered with {resp:?}", self.peer.addr()),
        );
        RPCError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for RaftPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        let resp = self
            .call(
                RPCTypes::AppendEntries,
                RpcRequest::AppendEntries(rpc),
                option.hard_ttl(),
            )
            .await?;
        match resp {
            RpcResponse::AppendEntries(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        let resp = self
            .call(
                RPCTypes::InstallSnapshot,
                RpcRequest::InstallSnapshot(rpc),
                option.hard_ttl(),
            )
            .await?;
        match resp {
            RpcResponse::InstallSnapshot(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        let resp = self
            .call(RPCTypes::Vote, RpcRequest::Vote(rpc), option.hard_ttl())
            .await?;
        match resp {
            RpcResponse::Vote(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    fn backoff(&self) -> openraft::network::Backoff {
        // Openraft's default is 500 ms between attempts at an unreachable voter; a
        // restarted voter should rejoin sooner than that.
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(200)))
    }
}
