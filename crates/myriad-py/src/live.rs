//! The native client of this process and the runtime it runs on, and how one is made:
//! what `Client` and every open `Handle` call through.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use myriad_client::{Caller, Client, ClientConfig, ClusterMap, FsError, Keyring};
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::{os_error, setup_error};

/// What a client is made from; kept so a forked child can make its own.
pub(crate) struct Setup {
    pub(crate) keys: Keyring,
    pub(crate) caller: Caller,
    pub(crate) zone: String,
    pub(crate) timeout: Duration,
}

/// The native client of this process and the runtime it runs on.
#[derive(Clone)]
pub(crate) struct Live {
    pub(crate) pid: u32,
    pub(crate) rt: Arc<Runtime>,
    pub(crate) client: Arc<Client>,
}

impl Live {
    /// Runs `f` on the runtime with the GIL released; an error names `path`.
    pub(crate) fn call<T, Fut>(
        &self,
        py: Python<'_>,
        path: &str,
        f: impl FnOnce(Arc<Client>) -> Fut + Send,
    ) -> PyResult<T>
    where
        T: Send,
        Fut: Future<Output = Result<T, FsError>>,
    {
        let (rt, client) = (self.rt.clone(), self.client.clone());
        py.detach(move || rt.block_on(f(client)))
            .map_err(|e| os_error(&e, path))
    }
}

/// A native client of `map` for this process.
pub(crate) fn start(setup: &Setup, map: ClusterMap) -> PyResult<Live> {
    let (pid, rt) =
        crate::runtime::runtime().map_err(|e| setup_error(format!("cannot start: {e}")))?;
    let mut cfg = ClientConfig::new(map, setup.caller.clone(), setup.keys.clone());
    cfg.request_timeout = setup.timeout;
    cfg.zone = setup.zone.clone();
    let _in_runtime = rt.enter();
    let client = Client::new(cfg).map_err(|e| setup_error(format!("cannot start: {e}")))?;
    Ok(Live {
        pid,
        rt,
        client: Arc::new(client),
    })
}
