//! How a client or a server reaches servers: the connection pool, or a simulated network
//! (the deterministic simulation runs real clients and servers in one process).

use std::time::Duration;

use futures::future::BoxFuture;
use myriad_proto::{Caller, Endpoints, FsError, Request, Response};

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
    ) -> BoxFuture<'a, Result<Response, FsError>>;
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
    ) -> BoxFuture<'a, Result<Response, FsError>> {
        Box::pin(Pool::call_with_timeout(
            self, addr, epoch, ends, caller, req, timeout,
        ))
    }
}
