//! The simulated map authority's duties (what the Raft leader does in a real cluster):
//! committing maps, marking silent servers down and returning ones up, completing moves
//! and catch-ups, handing primaries back, moving trees between zones, and the servers the
//! workload adds and removes.

use std::collections::BTreeMap;
use std::sync::Arc;

use myriad_client::{ClusterMap, NodeState};
use myriad_placement::{NodeId, PartitionId, PolicyState};
use myriad_server::embed::{DOWN_AFTER, LEASE, RENEW_EVERY};
use rand::Rng;
use tokio::time::Instant;

use super::{Failure, HANDOVERS_AT_ONCE, MOVES_AT_ONCE, SIM_ZONES, Sim, lock};
use crate::net::CLIENTS;

impl Sim {
    pub(super) fn commit_map(&self, map: ClusterMap, why: &str) {
        let copies: Vec<String> = map
            .partitions
            .iter()
            .map(|p| format!("p{}={:?}", p.id, p.replicas))
            .collect();
        self.trace.event(format_args!(
            "map epoch {}: {why}; copies {}",
            map.epoch,
            copies.join(" ")
        ));
        if self.cfg.zones {
            // Every map keeps a pinned partition's copies in its zone (docs/zones.md).
            let stray = map.partitions.iter().find_map(|p| {
                p.replicas
                    .iter()
                    .find(|r| !map.may_hold(p, **r))
                    .map(|r| (p.id, *r))
            });
            if let Some((pid, r)) = stray {
                self.net.violate(format!(
                    "map epoch {}: pinned partition {pid} has a copy on server {r}, outside its zone ({why})",
                    map.epoch
                ));
            }
            if let Err(e) = map.validate() {
                self.net
                    .violate(format!("map epoch {} is not valid: {e} ({why})", map.epoch));
            }
        }
        *lock(&self.map) = map;
        lock(&self.report).map_changes += 1;
    }

    /// The authority's round (as the Raft leader's): leases for the servers it hears,
    /// down after `DOWN_AFTER` of silence (their partitions fail over), up when heard again,
    /// and the newest map to every server that can hear it.
    pub(super) async fn authority(self: Arc<Self>) {
        let mut heard: BTreeMap<NodeId, Instant> =
            self.ids().map(|i| (i, Instant::now())).collect();
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            let now = Instant::now();
            let map = self.map();
            for id in self.ids() {
                let Some(server) = self.net.running(id) else {
                    continue;
                };
                if !self.net.reachable(id, CLIENTS) {
                    continue;
                }
                heard.insert(id, now);
                // As the Raft leader grants one (`membership::grant_lease`): only to a
                // server up in the map that follows the newest map. Before, a server back
                // from an isolation was granted one while it still held the map it had,
                // and served a partition it no longer led (simulation seed 149 with
                // `--trash`: a listing from the stale primary missed an acknowledged name).
                if server.epoch() >= map.epoch && map.is_up(id) {
                    self.leases.grant(id, now + LEASE);
                }
            }
            let mut nodes: Vec<_> = map.nodes.iter().map(|n| (n.id, n.state)).collect();
            nodes.sort_unstable_by_key(|(id, _)| *id);
            for (id, state) in nodes {
                let silent = now - heard.get(&id).copied().unwrap_or(now);
                let change = match state {
                    NodeState::Up if silent > DOWN_AFTER => map.mark_down(id).map(|m| (m, "down")),
                    NodeState::Down if silent < RENEW_EVERY * 2 => {
                        map.mark_up(id).map(|m| (m, "up"))
                    }
                    _ => None,
                };
                if let Some((next, what)) = change {
                    self.commit_map(next, &format!("server {id} {what}"));
                    break;
                }
            }
            self.commit_proposals();
            if self.cfg.tree_moves && self.map().epoch == map.epoch {
                self.tree_move_step(&map);
            }
            if self.map().epoch == map.epoch {
                self.catch_up_step(&map);
            }
            if self.cfg.moves && self.map().epoch == map.epoch {
                self.move_step(&map);
            }
            if self.map().epoch == map.epoch
                && let Some(next) = map.balance_primaries(HANDOVERS_AT_ONCE)
            {
                // As the Raft leader's round: primaries even again after failovers.
                lock(&self.report).handovers += 1;
                self.commit_map(next, "primaries handed over for balance");
            }
            let map = self.map();
            for id in self.ids() {
                if let Some(s) = self.net.server(id)
                    && self.net.reachable(id, CLIENTS)
                    && s.epoch() < map.epoch
                {
                    let m = map.clone();
                    let trace = self.trace.clone();
                    tokio::spawn(async move {
                        if let Err(e) = s.install_map(m).await {
                            trace.event(format_args!("server {id} install map: {e}"));
                        }
                    });
                }
            }
        }
    }

    /// Commits the maps servers proposed whose proposer reaches the authority and whose
    /// epoch directly follows the current one; drops the others (the proposer sees the
    /// map it follows next and decides again).
    pub(super) fn commit_proposals(&self) {
        for (from, next) in self.proposals.take() {
            let now = self.map().epoch;
            if next.epoch == now + 1 && self.net.reachable(from, CLIENTS) {
                let before = self.map();
                if let Some(moving) = before.moving_policy() {
                    let settled = next.policies.iter().any(|p| {
                        p.group == moving.group
                            && matches!(p.state, PolicyState::Active | PolicyState::Retired)
                    }) && next.moving_policy().is_none();
                    let mut rep = lock(&self.report);
                    if settled {
                        rep.tree_moves_settled += 1;
                    } else if next.moving_policy().is_none() {
                        rep.tree_moves_abandoned += 1;
                    }
                }
                let what: Vec<String> = next
                    .policies
                    .iter()
                    .map(|p| format!("{} {:?}", p.path, p.state))
                    .collect();
                self.commit_map(
                    next,
                    &format!("proposed by server {from}: policies {}", what.join(", ")),
                );
            } else {
                self.trace.event(format_args!(
                    "map epoch {} proposed by server {from} dropped (now {now})",
                    next.epoch
                ));
            }
        }
    }

    /// With `tree_moves`: now and then, when no tree is moving, pins a client tree that
    /// exists to a zone, or clears its policy; its partitions then move it
    /// (docs/zones.md section 3).
    pub(super) fn tree_move_step(&self, map: &ClusterMap) {
        if map.moving_policy().is_some() || !self.rng.with(|r| r.gen_bool(0.2)) {
            return;
        }
        let k = self.rng.with(|r| r.gen_range(0..self.cfg.clients.max(1)));
        let side = self.rng.with(|r| r.gen_range(0..2usize));
        let root = format!("/{}{k}", ["c", "x"][side]);
        // The trees pinned from the start stay as they are.
        if SIM_ZONES.iter().any(|(_, r)| *r == root) {
            return;
        }
        let next = if map.live_policy(&root).is_some() {
            map.with_policy_leaving(&root)
        } else {
            let zone = SIM_ZONES[self.rng.with(|r| r.gen_range(0..SIM_ZONES.len()))].0;
            map.with_policy_arriving(
                &root,
                zone,
                self.cfg.replicas,
                self.cfg.partitions_per_server.min(2),
            )
        };
        match next {
            Ok(next) => {
                lock(&self.report).tree_moves_started += 1;
                self.commit_map(next, &format!("tree move of {root}"));
            }
            Err(e) => self
                .trace
                .event(format_args!("tree move of {root} not started: {e}")),
        }
    }

    /// Copies behind (`PartitionInfo::behind`) that hold what their primary holds are in
    /// sync again (as the Raft leader's round, membership.rs).
    pub(super) fn catch_up_step(&self, map: &ClusterMap) {
        let seq_on = |id: NodeId, pid: PartitionId| {
            self.net.running(id).and_then(|s| {
                s.partition_seqs()
                    .into_iter()
                    .find(|(p, _)| *p == pid)
                    .and_then(|(_, seq)| seq)
            })
        };
        let mut synced = Vec::new();
        for p in map.partitions.iter().filter(|p| !p.behind.is_empty()) {
            let Some(at) = map.primary_of(p.id).and_then(|s| seq_on(s, p.id)) else {
                continue;
            };
            for &b in p.behind.iter().filter(|b| map.is_up(**b)) {
                if seq_on(b, p.id).is_some_and(|seq| seq >= at) {
                    synced.push((p.id, b));
                }
            }
        }
        if let Some(next) = map.caught_up(&synced) {
            self.commit_map(next, &format!("caught up: {synced:?}"));
        }
    }

    /// Moves, one step a round (as the Raft leader's, membership.rs): complete the moves
    /// whose new copy holds what its primary held, else plan more (to balance an added
    /// server, or to drain a leaving one); a leaving server that holds nothing any more is
    /// dropped from the map and stopped for good.
    pub(super) fn move_step(&self, map: &ClusterMap) {
        let done: Vec<PartitionId> = map
            .moves()
            .into_iter()
            .filter(|(pid, m)| {
                let seq_on = |id: NodeId| {
                    self.net.running(id).and_then(|s| {
                        s.partition_seqs()
                            .into_iter()
                            .find(|(p, _)| p == pid)
                            .and_then(|(_, seq)| seq)
                    })
                };
                let primary = map.primary_of(*pid).and_then(seq_on);
                primary.is_some_and(|p| seq_on(m.to).is_some_and(|t| t >= p))
            })
            .map(|(pid, _)| pid)
            .collect();
        // Leaving servers still keeping fragments (or not running now) stay in the map.
        let keeping: std::collections::BTreeSet<NodeId> = map
            .nodes
            .iter()
            .filter(|n| n.state == NodeState::Leaving)
            .filter(|n| self.net.running(n.id).is_none_or(|s| s.keeps_fragments()))
            .map(|n| n.id)
            .collect();
        if let Some(next) = map.complete_moves(&done, &keeping) {
            lock(&self.report).moves_completed += u32::try_from(done.len()).unwrap_or(u32::MAX);
            self.commit_map(next, &format!("moves complete: {done:?}"));
        } else if let Some(next) = map.plan_moves(&std::collections::BTreeSet::new(), MOVES_AT_ONCE)
        {
            let what: Vec<String> = next
                .moves()
                .iter()
                .map(|(p, m)| format!("p{p} {}->{}", m.from, m.to))
                .collect();
            self.commit_map(next, &format!("moving {}", what.join(", ")));
        }
        let gone: Vec<NodeId> = lock(&self.faults)
            .removed
            .iter()
            .copied()
            .filter(|&id| self.map().node(id).is_none() && self.net.server(id).is_some())
            .collect();
        for id in gone {
            self.trace
                .event(format_args!("server {id} left the map: stopped for good"));
            if let Some(s) = self.net.server(id) {
                s.stop();
            }
            self.net.set_server(id, None);
            self.leases.revoke(id);
        }
    }

    /// A server removed from the cluster and out of its map: never started again.
    pub(super) fn gone(&self, id: NodeId) -> bool {
        lock(&self.faults).removed.contains(&id) && self.map().node(id).is_none()
    }

    /// Adds the spare server to the map and starts it (its copies then move to it).
    pub(super) fn add_server(&self) -> Result<(), Failure> {
        let id = NodeId(self.cfg.servers + 1);
        let mut next = self.map();
        next.epoch += 1;
        next.nodes.push(myriad_placement::NodeInfo {
            id,
            addr: format!("sim-{id}"),
            weight: 1,
            state: NodeState::Up,
            // As `build_in_zones` would have placed it (one zone, "", without --zones).
            zone: if self.cfg.zones {
                SIM_ZONES[(id.index() - 1) % SIM_ZONES.len()].0.to_string()
            } else {
                String::new()
            },
        });
        self.commit_map(next, &format!("server {id} added"));
        lock(&self.faults).added = true;
        self.start_server(id)
    }

    /// Marks server `who` leaving (its copies move away, then it leaves the map), if enough
    /// others stay up for every partition's copies.
    pub(super) fn remove_server(&self, who: NodeId) {
        let map = self.map();
        let staying = map
            .nodes
            .iter()
            .filter(|n| n.id != who && n.state == NodeState::Up)
            .count();
        let leaving = map.nodes.iter().any(|n| n.state == NodeState::Leaving);
        if leaving || staying < map.replication as usize || !map.moves().is_empty() {
            return;
        }
        if let Some(next) = map.mark_leaving(who) {
            lock(&self.faults).removed.insert(who);
            self.commit_map(next, &format!("server {who} leaving"));
        }
    }
}
