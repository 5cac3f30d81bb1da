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
