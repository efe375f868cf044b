//! Clients' changes being applied on a partition right now, by (client, seq): a retry
//! that arrives while its first try still runs waits for it (`exactly_once.rs`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::watch;

#[derive(Default)]
pub(crate) struct ChangesInFlight {
    running: Mutex<BTreeMap<(u64, u64), watch::Receiver<()>>>,
}

/// A change's place in `ChangesInFlight`, held while it runs; dropping it lets waiting
/// retries go on.
pub(crate) struct Running<'a> {
    changes: &'a ChangesInFlight,
    key: (u64, u64),
    _done: watch::Sender<()>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        crate::unpoisoned::lock(&self.changes.running).remove(&self.key);
    }
}

impl ChangesInFlight {
    /// Takes the place of change `key`, waiting first for a try of it that is running.
    pub(crate) async fn run(&self, key: (u64, u64)) -> Running<'_> {
        loop {
            let waiting = {
                let mut g = crate::unpoisoned::lock(&self.running);
                match g.get(&key) {
                    Some(rx) => rx.clone(),
                    None => {
                        let (tx, rx) = watch::channel(());
                        g.insert(key, rx);
                        return Running {
                            changes: self,
                            key,
                            _done: tx,
                        };
                    }
                }
            };
            let mut waiting = waiting;
            // Resolves (with an error) when the running try drops its sender.
            let _ = waiting.changed().await;
        }
    }
}
