//! Transport: length-delimited frames of postcard messages over TCP, with many requests in
//! flight per connection and batched flushes; every connection authenticated (handshake.rs)
//! and every frame after the handshake tagged (frame.rs).
//!
//! * `RpcConn` is one multiplexed client connection; `Pool` keeps one per address and
//!   reconnects lazily. Every call has a deadline: a dead peer is an error, never a hang.
//! * `accept_loop` / `serve_connection` are the server side: limits (limits.rs), handshake,
//!   then one task per request.
//!
//! Shared by the server (for server-to-server calls) and the client, so that neither depends
//! on the other. Must not depend on: storage, placement logic, server, client.

mod conn;
mod frame;
mod handshake;
pub mod http;
pub mod limits;
mod pool;
mod serve;
mod transport;

pub use conn::RpcConn;
pub use frame::{FrameCodec, frame_codec};
pub use handshake::{Peer, newest as newest_protocol};
pub use limits::ServeLimits;
pub use pool::{Pool, PoolConfig};
pub use serve::{Handler, SQUASHED_ID, ServeConfig, accept_loop, serve_connection};
pub use transport::{Link, Transport};
