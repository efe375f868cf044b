//! Transport: length-delimited frames of postcard messages over TCP, with many requests in
//! flight per connection and batched flushes.
//!
//! * `RpcConn` is one multiplexed client connection; `Pool` keeps one per address and
//!   reconnects lazily. Every call has a deadline: a dead peer is an error, never a hang.
//! * `serve_connection` is the server side: handshake, then one task per request.
//!
//! Shared by the server (for server-to-server calls) and the client, so that neither depends
//! on the other. Must not depend on: storage, placement logic, server, client.

mod conn;
mod frame;
mod pool;
mod serve;

pub use conn::RpcConn;
pub use frame::frame_codec;
pub use pool::{Pool, PoolConfig};
pub use serve::{Handler, serve_connection};
