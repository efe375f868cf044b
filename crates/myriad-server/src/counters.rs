//! Request counters by operation: what benchmarks and tests use to count round trips.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use myriad_proto::OpCount;

#[derive(Default)]
pub struct Counters {
    client: Mutex<BTreeMap<&'static str, u64>>,
    server: Mutex<BTreeMap<&'static str, u64>>,
    pub sent_to_servers: AtomicU64,
    /// Replicated batches received by this server's copies (bundled or not).
    pub batches_received: AtomicU64,
}

impl Counters {
    pub fn count(&self, op: &'static str, from_server: bool) {
        let map = if from_server {
            &self.server
        } else {
            &self.client
        };
        if let Ok(mut m) = map.lock() {
            *m.entry(op).or_default() += 1;
        }
    }

    pub fn snapshot(&self) -> (Vec<OpCount>, Vec<OpCount>) {
        let take = |m: &Mutex<BTreeMap<&'static str, u64>>| {
            m.lock()
                .map(|m| {
                    m.iter()
                        .map(|(op, count)| OpCount {
                            op: (*op).to_string(),
                            count: *count,
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        (take(&self.client), take(&self.server))
    }

    pub fn reset(&self) {
        for m in [&self.client, &self.server] {
            if let Ok(mut m) = m.lock() {
                m.clear();
            }
        }
        self.sent_to_servers.store(0, Ordering::Relaxed);
        self.batches_received.store(0, Ordering::Relaxed);
    }
}
