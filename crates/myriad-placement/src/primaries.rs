//! Keeping primaries even over the servers (docs/replication.md "Primaries back in balance").
//!
//! Every request of a partition goes to its primary, so a server's share of the requests is
//! its share of the primaries. A new map leads each server's fair share, but a failover
//! moves a primary to a backup and a server that returns rejoins as a backup of each
//! partition: after a restart (or a slow start) some servers lead more than their share and
//! the returned one leads nothing. `balance_primaries` hands a partition's lead from the
//! server that leads most to a copy of it on the server that leads least: no data moves
//! (that copy already holds every acknowledged write: it is up, in sync and no move's new
//! copy), only the order of its replica list changes. Servers handle it as any change of
//! primary between live servers: the old one stops at once, the new one waits out the old
//! one's lease first (host.rs, `handed_over`).
//!
//! Balance is per partition group: a huge directory's shards spread over one group's
//! partitions (ring.rs), so each group's primaries must be even on their own.

use std::collections::{BTreeMap, BTreeSet};

use crate::map::ClusterMap;
use crate::members::{NodeId, NodeState};

/// Per server: (primaries of the group, weight).
type Led = BTreeMap<NodeId, (u64, u32)>;

/// `a` per `wa` against `b` per `wb`, exactly.
fn per_weight(a: u64, wa: u32, b: u64, wb: u32) -> std::cmp::Ordering {
    (u128::from(a) * u128::from(wb)).cmp(&(u128::from(b) * u128::from(wa)))
}

impl ClusterMap {
    /// The next map with up to `max` partitions led by another of their copies, each from
    /// a server leading more of its group's partitions than another by at least two (per
    /// weight) to a copy on that other one; `None` if no such hand-over exists. Only
    /// between servers up (not leaving), only to copies not behind, never for a partition
    /// with a move in progress.
    #[must_use]
    pub fn balance_primaries(&self, max: usize) -> Option<ClusterMap> {
        let mut next = self.clone();
        let mut budget = max;
        let groups: BTreeSet<u32> = self.partitions.iter().map(|p| p.group).collect();
        for group in groups {
            let mut led = self.led_in_group(group);
            while let Some(chain) = next.best_chain(group, &led) {
                if chain.len() > budget {
                    break;
                }
                // Along the chain each server hands one partition to the next: the first
                // leads one fewer, the last one more, the others as many as before.
                let first = next.partitions[chain[0].0].replicas[0];
                for &(i, to) in &chain {
                    let p = &mut next.partitions[i];
                    p.replicas.retain(|&r| r != to);
                    p.replicas.insert(0, to);
                }
                let last = chain[chain.len() - 1].1;
                for (id, more) in [(first, false), (last, true)] {
                    if let Some(l) = led.get_mut(&id) {
                        l.0 = if more { l.0 + 1 } else { l.0.saturating_sub(1) };
                    }
                }
                budget -= chain.len();
            }
        }
        (budget < max).then(|| {
            // Cannot overflow for a map that passed `validate` (EPOCH_MAX); saturating all the same.
            next.epoch = next.epoch.saturating_add(1);
            next
        })
    }

    /// Primaries of `group` per server up that holds a copy of one of its partitions.
    fn led_in_group(&self, group: u32) -> Led {
        let mut led: Led = BTreeMap::new();
        for p in self.partitions.iter().filter(|p| p.group == group) {
            for (k, r) in p.replicas.iter().enumerate() {
                let Some(n) = self.node(*r).filter(|n| n.state == NodeState::Up) else {
                    continue;
                };
                led.entry(*r).or_insert((0, n.weight)).0 += u64::from(k == 0);
            }
        }
        led
    }

    /// The shortest chain of hand-overs from a server leading most to one leading at
    /// least two fewer (per weight): each step a partition led by one server handed to its
    /// copy (up, in sync) on the next. A direct hand-over is a chain of one; a longer one
    /// passes through servers whose count it leaves as it was, for when no partition of
    /// the busiest has a copy on the idlest. `(partition index, new primary)` per step.
    fn best_chain(&self, group: u32, led: &Led) -> Option<Vec<(usize, NodeId)>> {
        // Edges: server -> (partition index, copy's server) for each partition it leads.
        let mut edges: BTreeMap<NodeId, Vec<(usize, NodeId)>> = BTreeMap::new();
        for (i, p) in self.partitions.iter().enumerate() {
            if p.group != group || p.moving.is_some() {
                continue;
            }
            let Some(&from) = p.replicas.first().filter(|r| led.contains_key(r)) else {
                continue;
            };
            for &to in &p.replicas[1..] {
                if led.contains_key(&to) && !p.is_behind(to) {
                    edges.entry(from).or_default().push((i, to));
                }
            }
        }
        let mut sources: Vec<(NodeId, (u64, u32))> = led.iter().map(|(k, v)| (*k, *v)).collect();
        sources.sort_by(|a, b| per_weight(b.1.0, b.1.1, a.1.0, a.1.1).then(a.0.cmp(&b.0)));
        for (h, hl) in sources {
            // Breadth first from h: the first server reached that leads two fewer.
            let mut came: BTreeMap<NodeId, (usize, NodeId)> = BTreeMap::new();
            let mut seen = BTreeSet::from([h]);
            let mut frontier = vec![h];
            while !frontier.is_empty() {
                let mut wave = Vec::new();
                for u in frontier {
                    for &(i, v) in edges.get(&u).map_or(&[][..], Vec::as_slice) {
                        if !seen.insert(v) {
                            continue;
                        }
                        came.insert(v, (i, u));
                        let vl = led[&v];
                        if per_weight(hl.0.saturating_sub(1), hl.1, vl.0 + 1, vl.1).is_ge() {
                            let mut chain = vec![(i, v)];
                            let mut at = u;
                            while at != h {
                                let (j, prev) = came[&at];
                                chain.push((j, at));
                                at = prev;
                            }
                            chain.reverse();
                            return Some(chain);
                        }
                        wave.push(v);
                    }
                }
                frontier = wave;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn addrs(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect()
    }

    /// Primaries per server that is up, in the default group.
    fn spread(map: &ClusterMap) -> (u64, u64) {
        let led = map.led_in_group(crate::DEFAULT_GROUP);
        let most = led.values().map(|l| l.0).max().unwrap_or(0);
        let least = led.values().map(|l| l.0).min().unwrap_or(0);
        (most, least)
    }

    fn settle(mut map: ClusterMap) -> ClusterMap {
        for _ in 0..1000 {
            match map.balance_primaries(4) {
                Some(next) => {
                    assert!(next.validate().is_ok());
                    assert_eq!(next.epoch, map.epoch + 1);
                    map = next;
                }
                None => return map,
            }
        }
        panic!("hand-overs never end");
    }

    #[test]
    fn a_new_map_is_already_even() {
        for n in [1, 2, 3, 4, 8, 16, 32] {
            let map = ClusterMap::build(1, &addrs(n), 8, 3);
            assert!(map.balance_primaries(usize::MAX).is_none(), "{n} servers");
        }
    }

    #[test]
    fn a_returned_server_leads_its_share_again() {
        let map = ClusterMap::build(1, &addrs(8), 8, 3);
        let down = map.mark_down(NodeId(3)).and_then(|m| m.mark_up(NodeId(3)));
        let Some(back) = down else {
            panic!("mark down and up");
        };
        assert!(back.primaries_of(NodeId(3)).is_empty());
        // Behind (it missed writes): nothing is handed to it yet (the failover's new
        // primaries may be evened out among the others meanwhile).
        let behind: Vec<_> = back
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&NodeId(3)))
            .map(|p| (p.id, NodeId(3)))
            .collect();
        assert!(settle(back.clone()).primaries_of(NodeId(3)).is_empty());
        let Some(synced) = back.caught_up(&behind) else {
            panic!("caught up");
        };
        let even = settle(synced);
        assert_eq!(even.primaries_of(NodeId(3)).len(), 8);
        assert_eq!(spread(&even), (8, 8));
        // Only the order of replica lists changed.
        for (a, b) in even.partitions.iter().zip(&map.partitions) {
            let (mut x, mut y) = (a.replicas.clone(), b.replicas.clone());
            x.sort_unstable();
            y.sort_unstable();
            assert_eq!(x, y);
        }
    }

    proptest! {
        /// Whatever failovers happened, hand-overs end with every server up within one
        /// primary of every other (when its copies allow: copies are balanced, R = 3).
        #[test]
        fn hand_overs_even_out_primaries(n in 3usize..20, downs in proptest::collection::vec(1u32..20, 0..6)) {
            let mut map = ClusterMap::build(1, &addrs(n), 8, 3);
            for d in downs {
                if let Some(m) = map.mark_down(NodeId(d)) {
                    map = m;
                }
            }
            let ups: Vec<NodeId> = map.nodes.iter().map(|n| n.id).collect();
            for id in ups {
                if let Some(m) = map.mark_up(id) {
                    map = m;
                }
            }
            let all: Vec<_> = map
                .partitions
                .iter()
                .flat_map(|p| p.behind.iter().map(move |b| (p.id, *b)))
                .collect();
            if let Some(m) = map.caught_up(&all) {
                map = m;
            }
            let even = settle(map);
            let (most, least) = spread(&even);
            prop_assert!(most - least <= 1, "{most} vs {least}");
            for p in &even.partitions {
                let mut r = p.replicas.clone();
                r.sort_unstable();
                r.dedup();
                prop_assert_eq!(r.len(), p.replicas.len());
            }
        }
    }
}
