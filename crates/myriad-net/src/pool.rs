//! One connection per peer address, made on first use and remade after a failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use myriad_proto::auth::Keyring;
use myriad_proto::{Caller, Endpoints, PeerKind, Request, Response, WireError};

use crate::RpcConn;

#[derive(Clone, Debug)]
pub struct PoolConfig {
    pub me: PeerKind,
    /// The zone this side is in (told to every server it connects to; `""`: not known).
    pub zone: String,
    /// The keys to connect with (the first) and to expect servers to prove.
    pub keys: Arc<Keyring>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

/// A connection unused this long may have been closed by its server's idle timeout.
const STALE_AFTER: Duration = Duration::from_secs(1);

type Slot = Arc<tokio::sync::Mutex<Option<Arc<RpcConn>>>>;

pub struct Pool {
    config: PoolConfig,
    slots: Mutex<HashMap<String, Slot>>,
    /// Per address: connections made so far, and the last one (`Pool::link`).
    made: Mutex<HashMap<String, (u64, Arc<RpcConn>)>>,
}

impl Pool {
    #[must_use]
    pub fn new(config: PoolConfig) -> Pool {
        Pool {
            config,
            slots: Mutex::new(HashMap::new()),
            made: Mutex::new(HashMap::new()),
        }
    }

    #[must_use]
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The live connection to `addr`, connecting if needed.
    pub async fn conn(&self, addr: &str) -> Result<Arc<RpcConn>, WireError> {
        let slot = {
            let mut slots = self
                .slots
                .lock()
                .map_err(|_| WireError::Io("pool lock poisoned".into()))?;
            slots.entry(addr.to_string()).or_default().clone()
        };
        let mut guard = slot.lock().await;
        if let Some(c) = guard.as_ref()
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let conn = Arc::new(
            RpcConn::connect(
                addr,
                self.config.me.clone(),
                &self.config.zone,
                &self.config.keys,
                self.config.connect_timeout,
            )
            .await?,
        );
        *guard = Some(conn.clone());
        if let Ok(mut made) = self.made.lock() {
            let e = made.entry(addr.to_string()).or_insert((0, conn.clone()));
            e.0 += 1;
            e.1 = conn.clone();
        }
        Ok(conn)
    }

    /// Which connection to `addr` the next call goes over (a closed one is replaced by
    /// the next), and the protocol of the live one.
    #[must_use]
    pub fn link(&self, addr: &str) -> crate::Link {
        let made = match self.made.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match made.get(addr) {
            None => crate::Link {
                connection: 1,
                version: 0,
            },
            Some((n, c)) if c.is_closed() => crate::Link {
                connection: n + 1,
                version: 0,
            },
            Some((n, c)) => crate::Link {
                connection: *n,
                version: c.version,
            },
        }
    }

    pub async fn call(
        &self,
        addr: &str,
        epoch: u64,
        ends: Endpoints,
        caller: &Caller,
        body: &Request,
    ) -> Result<Response, WireError> {
        self.call_with_timeout(addr, epoch, ends, caller, body, self.config.request_timeout)
            .await
    }

    pub async fn call_with_timeout(
        &self,
        addr: &str,
        epoch: u64,
        ends: Endpoints,
        caller: &Caller,
        body: &Request,
        timeout: Duration,
    ) -> Result<Response, WireError> {
        let conn = self.conn(addr).await?;
        let stale = conn.idle_for() >= STALE_AFTER;
        match conn.call(epoch, ends, caller, body, timeout).await {
            // The server may have closed this idle connection (its idle timeout) as the call
            // went out: the request was not read, so sending it again on a new connection is
            // safe. Once only: a second failure is a real one.
            Err(WireError::Unavailable(_)) if stale => {
                let conn = self.conn(addr).await?;
                conn.call(epoch, ends, caller, body, timeout).await
            }
            r => r,
        }
    }
}
