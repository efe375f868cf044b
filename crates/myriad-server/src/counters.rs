//! Request counters by operation: what benchmarks and tests use to count round trips.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use myriad_proto::{OpCount, TrafficKind, ZoneTraffic};

/// Per kind (`TrafficKind::ALL` order): requests, bytes in, bytes out.
type KindCounts = [(u64, u64, u64); TrafficKind::ALL.len()];

#[derive(Default)]
pub struct Counters {
    client: Mutex<BTreeMap<&'static str, u64>>,
    server: Mutex<BTreeMap<&'static str, u64>>,
    /// Requests served, by the sender's zone (docs/zones.md "Counters").
    zones: Mutex<BTreeMap<String, KindCounts>>,
    pub sent_to_servers: AtomicU64,
    /// Replicated batches received by this server's copies (bundled or not).
    pub batches_received: AtomicU64,
    /// Directory shards split off by this server since it started (never reset).
    pub splits: AtomicU64,
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

    /// A request of `kind` from a peer in `zone` was served.
    pub fn traffic(&self, zone: &str, kind: TrafficKind, bytes_in: usize, bytes_out: usize) {
        let Ok(mut zones) = self.zones.lock() else {
            return;
        };
        let counts = match zones.get_mut(zone) {
            Some(c) => c,
            None => zones.entry(zone.to_string()).or_default(),
        };
        let c = &mut counts[kind as usize];
        c.0 += 1;
        c.1 += bytes_in as u64;
        c.2 += bytes_out as u64;
    }

    /// Every (zone, kind) that saw a request, in zone order then kind order.
    pub fn zone_traffic(&self) -> Vec<ZoneTraffic> {
        let Ok(zones) = self.zones.lock() else {
            return Vec::new();
        };
        zones
            .iter()
            .flat_map(|(zone, counts)| {
                TrafficKind::ALL
                    .iter()
                    .zip(counts)
                    .filter(|(_, c)| c.0 > 0)
                    .map(|(kind, c)| ZoneTraffic {
                        zone: zone.clone(),
                        kind: *kind,
                        requests: c.0,
                        bytes_in: c.1,
                        bytes_out: c.2,
                    })
            })
            .collect()
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
        if let Ok(mut z) = self.zones.lock() {
            z.clear();
        }
        self.sent_to_servers.store(0, Ordering::Relaxed);
        self.batches_received.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_is_kept_by_zone_and_kind() {
        let c = Counters::default();
        c.traffic("b", TrafficKind::File, 100, 20);
        c.traffic("b", TrafficKind::File, 50, 5);
        c.traffic("a", TrafficKind::Membership, 7, 3);
        let t = c.zone_traffic();
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].zone.as_str(), t[0].kind),
            ("a", TrafficKind::Membership)
        );
        assert_eq!((t[1].requests, t[1].bytes_in, t[1].bytes_out), (2, 150, 25));
        assert_eq!(t[1].bytes(), 175);
        c.reset();
        assert!(c.zone_traffic().is_empty());
    }
}
