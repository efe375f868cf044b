//! How a client or a server reaches servers: the connection pool, or a simulated network
//! (the deterministic simulation runs real clients and servers in one process).

use std::time::Duration;

use futures::future::BoxFuture;
use myriad_proto::{Caller, Endpoints, Request, Response, WireError};

use crate::pool::Pool;

pub trait Transport: Send + Sync {
    /// Sends `req` to the server at `addr` (an address of the map) and waits for its answer,
    /// at most `timeout`.
    fn call_with_timeout<'a>(
        &'a self,
        addr: &'a str,
        epoch: u64,
        ends: Endpoints,
        caller: &'a Caller,
        req: &'a Request,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Response, WireError>>;

    /// What this side knows of its link to `addr` (`Link`). The default knows nothing.
    fn link(&self, _addr: &str) -> Link {
        Link::default()
    }
}

/// A link to a server: which connection the next call goes over, and its protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// Connections to that address are counted from 1; a closed one counts as replaced
    /// by the next. A server that restarted is always reached by a new connection, so a
    /// change of this number is the sign a client watches for: answers that came before
    /// it may be lost with the process that gave them. 0: not known.
    pub connection: u64,
    /// The protocol version the live connection speaks (0: none yet).
    pub version: u16,
}

impl Transport for Pool {
    fn call_with_timeout<'a>(
        &'a self,
        addr: &'a str,
        epoch: u64,
        ends: Endpoints,
        caller: &'a Caller,
        req: &'a Request,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Response, WireError>> {
        Box::pin(Pool::call_with_timeout(
            self, addr, epoch, ends, caller, req, timeout,
        ))
    }

    fn link(&self, addr: &str) -> Link {
        Pool::link(self, addr)
    }
}
