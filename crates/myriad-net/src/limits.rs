//! Limits a server puts on every connection: each a named default with its reason, and all
//! of them configurable (`myriad server --help`).

use std::time::Duration;

/// Requests one connection may have in flight; more wait in the socket (backpressure). A
/// FUSE mount or a benchmark keeps up to a few hundred in flight on one connection.
pub const IN_FLIGHT_PER_CONN_MAX: usize = 1024;
/// Connections from one IP address. A client process keeps one connection per server, a
/// server one per peer; 1,024 leaves room for hundreds of client processes on one host
/// while stopping one host from exhausting the server's file descriptors.
pub const CONNS_PER_ADDR_MAX: usize = 1024;
/// A peer must finish the handshake within this time, or it holds a task and a socket for
/// nothing.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A frame, once its first byte arrived, must arrive whole within this time: a client that
/// trickles bytes (slow loris) cannot hold a connection's buffers. 4 MiB at 1 MiB/s fits.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection with no request in flight and no byte received for this long is closed;
/// clients reconnect on their next call.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// A peer must take our replies: a writer that cannot flush for this long (the peer stopped
/// reading) closes the connection, releasing up to `IN_FLIGHT_PER_CONN_MAX` buffered replies.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    pub in_flight_per_conn: usize,
    pub conns_per_addr: usize,
    pub handshake_timeout: Duration,
    pub frame_timeout: Duration,
    pub idle_timeout: Duration,
    pub write_stall_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            in_flight_per_conn: IN_FLIGHT_PER_CONN_MAX,
            conns_per_addr: CONNS_PER_ADDR_MAX,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            frame_timeout: FRAME_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            write_stall_timeout: WRITE_STALL_TIMEOUT,
        }
    }
}
