//! Moving copies of partitions between servers (docs/replication.md "Moves"): pure map
//! transformations the Raft leader proposes, one step at a time.
//!
//! A move of partition p from server `from` to server `to` is two map changes:
//! 1. `plan_moves`: `to` is appended to p's replicas (a backup: its primary copies the
//!    partition to it, then every write waits for it too) and `moving = {from, to}`.
//! 2. `complete_moves`, once `to` has caught up (the leader checked its seq): `from` leaves
//!    the list; if it was the primary, `to` takes its place.
//!
//! Reasons to move, in order: a copy on a server down past the grace period (restore R
//! copies), a copy on a leaving server (remove-node), a copy missing (a partition with
//! fewer than R copies in a cluster that grew: a move from `NO_SERVER` adds one), and
//! balance (add-node, or after the first ones): a server with more copies than another by
//! more than one gives one up.

use std::collections::{BTreeMap, BTreeSet};

use crate::map::ClusterMap;
use crate::members::{Move, NO_SERVER, NodeId, NodeState, PartitionId, PartitionInfo};

/// Copies held by each server that can take more (up, not leaving), in copies per weight.
fn loads(map: &ClusterMap) -> Loads {
    let mut out: Loads = map
        .nodes
        .iter()
        .filter(|n| n.state == NodeState::Up)
        .map(|n| (n.id, (0, 0, n.weight)))
        .collect();
    for p in &map.partitions {
        for (i, r) in p.replicas.iter().enumerate() {
            if let Some(l) = out.get_mut(r) {
                l.0 += 1;
                if i == 0 {
                    l.1 += 1;
                }
            }
        }
    }
    out
}

/// Per server that can take copies: (copies, primaries, weight).
type Loads = BTreeMap<NodeId, (u64, u64, u32)>;

/// Starts moving a copy of `p` from `from` to `to` (appended to its replicas), and counts it.
fn start_move(p: &mut PartitionInfo, load: &mut Loads, from: NodeId, to: NodeId) {
    let led = p.replicas.first() == Some(&from);
    p.replicas.push(to);
    p.moving = Some(Move { from, to });
    if let Some(x) = load.get_mut(&from) {
        x.0 = x.0.saturating_sub(1);
        if led {
            x.1 = x.1.saturating_sub(1);
        }
    }
    if let Some(x) = load.get_mut(&to) {
        x.0 += 1;
        if led {
            x.1 += 1;
        }
    }
}

/// `a` copies per `wa` against `b` per `wb`.
fn lighter(a: u64, wa: u32, b: u64, wb: u32) -> std::cmp::Ordering {
    (u128::from(a) * u128::from(wb)).cmp(&(u128::from(b) * u128::from(wa)))
}

impl ClusterMap {
    /// The next map with server `id` leaving (remove-node): it keeps serving while its
    /// copies move away; once it holds none it is dropped from the map. `None` if it is
    /// not listed, already leaving, the only server, or a copy of it could go nowhere
    /// (`stranded_by_leaving`).
    #[must_use]
    pub fn mark_leaving(&self, id: NodeId) -> Option<ClusterMap> {
        let n = self.node(id)?;
        if n.state == NodeState::Leaving
            || self.nodes.len() < 2
            || self.stranded_by_leaving(id).is_some()
        {
            return None;
        }
        Some(self.with_state(id, NodeState::Leaving))
    }

    /// A partition with a copy on `id` that no other server up and staying may take (one
    /// pinned to a zone whose other servers all hold it already, say): draining `id`
    /// would never end. A move under way counts as done: its source is free to take a
    /// copy (so a partition moving a copy onto `id` is not stranded, and one moving its
    /// copy off `id` needs nothing more).
    #[must_use]
    pub fn stranded_by_leaving(&self, id: NodeId) -> Option<PartitionId> {
        self.partitions
            .iter()
            .find(|p| {
                let after: Vec<NodeId> = p
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| p.moving.is_none_or(|m| m.from != *r))
                    .collect();
                after.contains(&id)
                    && !self.nodes.iter().any(|n| {
                        n.id != id
                            && n.state == NodeState::Up
                            && !after.contains(&n.id)
                            && self.may_hold(p, n.id)
                    })
            })
            .map(|p| p.id)
    }

    /// Partitions with a move in progress.
    #[must_use]
    pub fn moves(&self) -> Vec<(PartitionId, Move)> {
        self.partitions
            .iter()
            .filter_map(|p| p.moving.map(|m| (p.id, m)))
            .collect()
    }

    /// The next map with up to `max_new` more moves started (at most one per partition, at
    /// most `max_new` in progress in all), or `None` if nothing needs to move. `expired`:
    /// servers down past the grace period, whose copies are replaced.
    #[must_use]
    pub fn plan_moves(&self, expired: &BTreeSet<NodeId>, max_new: usize) -> Option<ClusterMap> {
        let in_progress = self.moves().len();
        let mut budget = max_new.saturating_sub(in_progress);
        if budget == 0 {
            return None;
        }
        let mut next = self.clone();
        let mut load = loads(self);
        let leaving: BTreeSet<NodeId> = self
            .nodes
            .iter()
            .filter(|n| n.state == NodeState::Leaving)
            .map(|n| n.id)
            .collect();
        let mut changed = false;
        // 1-2: copies that must go (and copies outside the zone their partition is pinned to).
        for i in 0..next.partitions.len() {
            if budget == 0 {
                break;
            }
            let p = &next.partitions[i];
            if p.moving.is_some() {
                continue;
            }
            let Some(from) =
                p.replicas.iter().copied().find(|&r| {
                    expired.contains(&r) || leaving.contains(&r) || !self.may_hold(p, r)
                })
            else {
                continue;
            };
            // Prefer a zone the copies that stay do not cover.
            let staying: Vec<NodeId> = p
                .replicas
                .iter()
                .copied()
                .filter(|r| *r != from && !expired.contains(r) && !leaving.contains(r))
                .collect();
            let Some(to) = self.lightest_target(p, &load, &staying) else {
                continue;
            };
            start_move(&mut next.partitions[i], &mut load, from, to);
            budget -= 1;
            changed = true;
        }
        // 2b: copies missing: a partition with fewer copies than its group wants, in a
        // cluster that grew from fewer servers (`server --init` makes one, which holds the
        // only copy of each partition), gets one more on the server that would take it.
        for i in 0..next.partitions.len() {
            if budget == 0 {
                break;
            }
            let p = &next.partitions[i];
            if p.moving.is_some() || p.replicas.len() >= self.group_replication(p.group) as usize {
                continue;
            }
            let Some(to) = self.lightest_target(p, &load, &p.replicas) else {
                continue;
            };
            start_move(&mut next.partitions[i], &mut load, NO_SERVER, to);
            budget -= 1;
            changed = true;
        }
        // 3: copies spread over too few zones (zones added, or a copy placed while a zone
        // was down): a copy in a zone that holds two moves to a zone that holds none.
        for i in 0..next.partitions.len() {
            if budget == 0 {
                break;
            }
            let p = &next.partitions[i];
            if p.moving.is_some() || self.zone_count(&p.replicas) >= self.zones_wanted(p) {
                continue;
            }
            let Some(to) = self.lightest_target(p, &load, &p.replicas) else {
                continue;
            };
            if self.zone_count(p.replicas.iter().chain([&to])) == self.zone_count(&p.replicas) {
                continue;
            }
            // A backup before the primary, the fullest server first.
            let doubled = p.replicas.iter().enumerate().filter(|(_, r)| {
                p.replicas
                    .iter()
                    .filter(|o| self.zone_of(**o) == self.zone_of(**r))
                    .count()
                    > 1
            });
            let Some(from) = doubled
                .max_by(|(ia, a), (ib, b)| {
                    let la = load.get(a).map_or((0, 0, 1), |l| *l);
                    let lb = load.get(b).map_or((0, 0, 1), |l| *l);
                    (*ia > 0)
                        .cmp(&(*ib > 0))
                        .then(lighter(la.0, la.2, lb.0, lb.2))
                })
                .map(|(_, r)| *r)
            else {
                continue;
            };
            start_move(&mut next.partitions[i], &mut load, from, to);
            budget -= 1;
            changed = true;
        }
        // 4: balance, while a fuller server has two copies more than an emptier one (per
        // weight) and one of its copies may move there without covering fewer zones. A
        // source that also has more primaries than the target gives up a partition it leads
        // (`to` then leads it), else one it backs up.
        while budget > 0 {
            let Some((i, h, l)) = self.balancing_move(&next, &load) else {
                break;
            };
            start_move(&mut next.partitions[i], &mut load, h, l);
            budget -= 1;
            changed = true;
        }
        changed.then(|| {
            // Cannot overflow for a map that passed `validate` (EPOCH_MAX); saturating all the same.
            next.epoch = next.epoch.saturating_add(1);
            next
        })
    }

    /// The server a new copy of `p` goes to: one that may hold it, holds none yet and can
    /// take copies; in a zone `keeping` does not cover if there is one; the emptiest.
    fn lightest_target(
        &self,
        p: &PartitionInfo,
        load: &Loads,
        keeping: &[NodeId],
    ) -> Option<NodeId> {
        let covered: Vec<&str> = keeping.iter().map(|&r| self.zone_of(r)).collect();
        load.iter()
            .filter(|(id, _)| !p.replicas.contains(id) && self.may_hold(p, **id))
            .min_by(|a, b| {
                covered
                    .contains(&self.zone_of(*a.0))
                    .cmp(&covered.contains(&self.zone_of(*b.0)))
                    .then(lighter(a.1.0, a.1.2, b.1.0, b.1.2))
                    .then(lighter(a.1.1, a.1.2, b.1.1, b.1.2))
                    .then(a.0.cmp(b.0))
            })
            .map(|(id, _)| *id)
    }

    /// A copy to move for balance: `(partition index, from, to)`. Pairs are tried from the
    /// fullest and the emptiest server inwards; a pair qualifies if moving one copy leaves
    /// them closer, and a copy qualifies if `to` may hold it, holds none, and the partition
    /// covers no fewer zones after.
    fn balancing_move(&self, next: &ClusterMap, load: &Loads) -> Option<(usize, NodeId, NodeId)> {
        let mut by_load: Vec<(NodeId, (u64, u64, u32))> =
            load.iter().map(|(id, l)| (*id, *l)).collect();
        by_load.sort_by(|a, b| lighter(a.1.0, a.1.2, b.1.0, b.1.2).then(a.0.cmp(&b.0)));
        let zoned = self.zones().len() > 1;
        for &(h, hl) in by_load.iter().rev() {
            for &(l, ll) in &by_load {
                // Would moving one copy leave them at least as far apart the other way?
                if h == l || lighter(hl.0.saturating_sub(1), hl.2, ll.0 + 1, ll.2).is_lt() {
                    break;
                }
                let want_primary = lighter(hl.1, hl.2, ll.1 + 1, ll.2).is_gt();
                let mut pick = None;
                for (i, p) in next.partitions.iter().enumerate() {
                    if p.moving.is_some()
                        || !p.replicas.contains(&h)
                        || p.replicas.contains(&l)
                        || !self.may_hold(p, l)
                    {
                        continue;
                    }
                    let after = p.replicas.iter().filter(|r| **r != h).chain([&l]);
                    if zoned && self.zone_count(after) < self.zone_count(&p.replicas) {
                        continue;
                    }
                    if (p.replicas.first() == Some(&h)) == want_primary {
                        pick = Some(i);
                        break;
                    }
                    pick.get_or_insert(i);
                }
                if let Some(i) = pick {
                    return Some((i, h, l));
                }
            }
        }
        None
    }

    /// The next map with the moves of `pids` complete: `from` leaves each list, and `to`
    /// takes the first place if `from` had it. Servers leaving that hold no copy any more
    /// and are not in `keeping` (those still keeping erasure-coded fragments) are dropped
    /// from the map.
    #[must_use]
    pub fn complete_moves(
        &self,
        pids: &[PartitionId],
        keeping: &BTreeSet<NodeId>,
    ) -> Option<ClusterMap> {
        let mut next = self.clone();
        let mut changed = false;
        for p in &mut next.partitions {
            let Some(m) = p.moving else { continue };
            if !pids.contains(&p.id) {
                continue;
            }
            let led = p.replicas.first() == Some(&m.from);
            p.replicas.retain(|&r| r != m.from && r != m.to);
            if led {
                p.replicas.insert(0, m.to);
            } else {
                p.replicas.push(m.to);
            }
            p.moving = None;
            let replicas = p.replicas.clone();
            p.behind.retain(|b| replicas.contains(b));
            changed = true;
        }
        let held: BTreeSet<NodeId> = next
            .partitions
            .iter()
            .flat_map(|p| p.replicas.iter().copied())
            .collect();
        let before = next.nodes.len();
        next.nodes.retain(|n| {
            n.state != NodeState::Leaving || held.contains(&n.id) || keeping.contains(&n.id)
        });
        changed |= next.nodes.len() != before;
        changed.then(|| {
            // Cannot overflow for a map that passed `validate` (EPOCH_MAX); saturating all the same.
            next.epoch = next.epoch.saturating_add(1);
            next
        })
    }
}

/// Plans (`per_round` at a time) and completes moves until nothing moves, checking every
/// map on the way: the settled map and the moves made, (from, to) each.
#[cfg(test)]
pub(crate) fn settle_moves(
    mut m: ClusterMap,
    expired: &BTreeSet<NodeId>,
    per_round: usize,
) -> (ClusterMap, Vec<(NodeId, NodeId)>) {
    let mut made = Vec::new();
    for _ in 0..10_000 {
        let Some(planned) = m.plan_moves(expired, per_round) else {
            return (m, made);
        };
        planned
            .validate()
            .unwrap_or_else(|e| panic!("planned map invalid: {e}"));
        let moves = planned.moves();
        made.extend(moves.iter().map(|(_, mv)| (mv.from, mv.to)));
        let pids: Vec<PartitionId> = moves.iter().map(|(p, _)| *p).collect();
        m = planned
            .complete_moves(&pids, &BTreeSet::new())
            .unwrap_or_else(|| panic!("moves complete"));
        m.validate()
            .unwrap_or_else(|e| panic!("completed map invalid: {e}"));
    }
    panic!("moves never settled");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::members::NodeInfo;

    fn map(n: usize) -> ClusterMap {
        let addrs: Vec<String> = (1..=n).map(|i| format!("127.0.0.1:{i}")).collect();
        ClusterMap::build(1, &addrs, 8, 3)
    }

    /// Plans and completes moves until nothing moves; checks every intermediate map.
    fn settle(m: ClusterMap, expired: &BTreeSet<NodeId>) -> ClusterMap {
        settle_moves(m, expired, 4).0
    }

    fn copies(m: &ClusterMap) -> BTreeMap<NodeId, (usize, usize)> {
        let mut out: BTreeMap<NodeId, (usize, usize)> = BTreeMap::new();
        for p in &m.partitions {
            for (i, r) in p.replicas.iter().enumerate() {
                let e = out.entry(*r).or_default();
                e.0 += 1;
                if i == 0 {
                    e.1 += 1;
                }
            }
        }
        out
    }

    #[test]
    fn an_added_server_gets_its_share_of_copies_and_primaries() {
        let mut m = map(4);
        assert!(
            m.plan_moves(&BTreeSet::new(), 4).is_none(),
            "balanced already"
        );
        m.nodes.push(NodeInfo {
            id: NodeId(5),
            addr: "127.0.0.1:5".into(),
            weight: 1,
            state: NodeState::Up,
            zone: String::new(),
        });
        let done = settle(m, &BTreeSet::new());
        let c = copies(&done);
        // 32 partitions x 3 copies over 5 servers: 19 or 20 each; 32 primaries: 6 or 7.
        for (id, (all, primaries)) in &c {
            assert!((19..=20).contains(all), "server {id}: {all} copies ({c:?})");
            assert!(
                (5..=7).contains(primaries),
                "server {id}: {primaries} primaries ({c:?})"
            );
        }
        for p in &done.partitions {
            let distinct: BTreeSet<_> = p.replicas.iter().collect();
            assert_eq!(distinct.len(), 3, "{p:?}");
        }
    }

    /// `server --init` makes a one-server map of 32 partitions with one copy each (3
    /// wanted); servers that join one at a time get copies added until every partition
    /// has 3, on distinct servers, and copies and primaries even out.
    #[test]
    fn a_cluster_grown_from_one_server_gets_every_copy_it_wants() {
        let one = ClusterMap::build(1, &["10.0.0.1:7401".to_string()], 32, 3);
        assert!(one.partitions.iter().all(|p| p.replicas.len() == 1));
        assert!(
            one.plan_moves(&BTreeSet::new(), 4).is_none(),
            "nowhere to put copies"
        );
        let mut m = one;
        let mut adds = 0;
        for id in 2..=5u32 {
            m.nodes.push(NodeInfo {
                id: NodeId(id),
                addr: format!("10.0.0.{id}:7401"),
                weight: 1,
                state: NodeState::Up,
                zone: String::new(),
            });
            m.validate().unwrap_or_else(|e| panic!("{e}"));
            let (done, made) = settle_moves(m, &BTreeSet::new(), 4);
            adds += made.iter().filter(|(from, _)| *from == NO_SERVER).count();
            m = done;
            let want = (id as usize).min(3);
            for p in &m.partitions {
                let distinct: BTreeSet<_> = p.replicas.iter().collect();
                assert_eq!(distinct.len(), want, "{id} servers: {p:?}");
            }
        }
        // Copies are added only to reach 3: 32 partitions x 2.
        assert_eq!(adds, 64);
        // Primaries even out as the leader hands them over (primaries.rs).
        while let Some(next) = m.balance_primaries(4) {
            m = next;
        }
        let c = copies(&m);
        for (id, (all, primaries)) in &c {
            assert!((19..=20).contains(all), "server {id}: {all} copies ({c:?})");
            assert!(
                (5..=8).contains(primaries),
                "server {id}: {primaries} ({c:?})"
            );
        }
    }

    #[test]
    fn copies_on_a_server_down_past_grace_are_replaced() {
        let m = map(5).mark_down(NodeId(3)).unwrap_or_else(|| panic!("up"));
        // Not expired yet: nothing moves off it (balance ignores down servers' copies).
        let expired = BTreeSet::from([NodeId(3)]);
        let done = settle(m, &expired);
        assert_eq!(
            copies(&done).get(&NodeId(3)),
            None,
            "no copy left on server 3"
        );
        for p in &done.partitions {
            assert_eq!(p.replicas.len(), 3);
            assert!(p.replicas.iter().all(|r| done.is_up(*r)));
        }
        let c = copies(&done);
        for (id, (all, _)) in &c {
            // 40 partitions x 3 copies over the 4 left.
            assert_eq!(*all, 30, "server {id}: {all} ({c:?})");
        }
    }

    #[test]
    fn a_leaving_server_is_drained_then_dropped() {
        let m = map(5)
            .mark_leaving(NodeId(2))
            .unwrap_or_else(|| panic!("up"));
        assert!(m.mark_leaving(NodeId(2)).is_none());
        // While moves run, it still serves: the planned map keeps it in every list it was in.
        let planned = m
            .plan_moves(&BTreeSet::new(), 2)
            .unwrap_or_else(|| panic!("moves"));
        assert_eq!(planned.moves().len(), 2);
        for (pid, mv) in planned.moves() {
            assert_eq!(mv.from, NodeId(2));
            let p = planned.partition(pid).unwrap_or_else(|| panic!("p"));
            assert_eq!(p.replicas.len(), 4);
            assert_eq!(p.replicas.last(), Some(&mv.to));
        }
        let done = settle(m, &BTreeSet::new());
        assert!(
            done.node(NodeId(2)).is_none(),
            "drained server dropped from the map"
        );
        assert!(
            done.partitions
                .iter()
                .all(|p| !p.replicas.contains(&NodeId(2)))
        );
        assert!(done.primaries_of(NodeId(2)).is_empty());
    }

    /// Found by running docs/deploy.md: `node drain` of a server that had just joined
    /// was refused ("no other server that may take one") because a move onto it was
    /// under way, its partition then listing every server. A move counts as done.
    #[test]
    fn a_server_may_leave_while_moves_onto_or_off_it_are_under_way() {
        let mut m = map(4);
        let four = NodeId(4);
        let onto = m
            .partitions
            .iter()
            .position(|p| !p.replicas.contains(&four))
            .unwrap_or_else(|| panic!("a partition without server 4"));
        let off = m
            .partitions
            .iter()
            .position(|p| p.replicas.contains(&four))
            .unwrap_or_else(|| panic!("a partition on server 4"));
        let mut load = loads(&m);
        let from = m.partitions[onto].replicas[1];
        start_move(&mut m.partitions[onto], &mut load, from, four);
        let to = m
            .nodes
            .iter()
            .map(|n| n.id)
            .find(|n| !m.partitions[off].replicas.contains(n))
            .unwrap_or_else(|| panic!("a server without it"));
        start_move(&mut m.partitions[off], &mut load, four, to);
        assert_eq!(m.partitions[onto].replicas.len(), 4, "every server listed");
        assert_eq!(m.stranded_by_leaving(four), None);
        let leaving = m.mark_leaving(four).unwrap_or_else(|| panic!("may leave"));
        let done = settle(leaving, &BTreeSet::new());
        assert!(done.node(four).is_none(), "drained and dropped");
        assert!(done.partitions.iter().all(|p| p.replicas.len() == 3));
        // Still refused when no server could take a copy: 3 servers, 3 copies.
        assert!(map(3).stranded_by_leaving(NodeId(3)).is_some());
    }

    /// A drained server that still keeps erasure-coded fragments stays in the map (its
    /// partitions' primaries rebuild them elsewhere first), and goes once it keeps none.
    #[test]
    fn a_leaving_server_keeping_fragments_stays_until_it_keeps_none() {
        let mut m = map(5)
            .mark_leaving(NodeId(2))
            .unwrap_or_else(|| panic!("up"));
        let keeping: BTreeSet<NodeId> = [NodeId(2)].into();
        while let Some(planned) = m.plan_moves(&BTreeSet::new(), 4) {
            let pids: Vec<PartitionId> = planned.moves().iter().map(|(p, _)| *p).collect();
            m = planned
                .complete_moves(&pids, &keeping)
                .unwrap_or_else(|| panic!("moves complete"));
        }
        assert!(
            m.partitions
                .iter()
                .all(|p| !p.replicas.contains(&NodeId(2)))
        );
        assert!(
            m.node(NodeId(2)).is_some(),
            "dropped while keeping fragments"
        );
        assert!(m.complete_moves(&[], &keeping).is_none());
        let done = m
            .complete_moves(&[], &BTreeSet::new())
            .unwrap_or_else(|| panic!("dropped once it keeps none"));
        assert!(done.node(NodeId(2)).is_none());
        assert_eq!(done.epoch, m.epoch + 1);
    }

    #[test]
    fn completing_a_move_of_a_primary_makes_the_new_copy_primary() {
        let m = map(3);
        let mut planned = m.clone();
        let p = &mut planned.partitions[0];
        let old = p.replicas.clone();
        p.moving = Some(Move {
            from: old[0],
            to: NodeId(9),
        });
        p.replicas.push(NodeId(9));
        planned.nodes.push(NodeInfo {
            id: NodeId(9),
            addr: "x:9".into(),
            weight: 1,
            state: NodeState::Up,
            zone: String::new(),
        });
        let pid = planned.partitions[0].id;
        // Before completion the old primary still leads.
        assert_eq!(planned.primary_of(pid), Some(old[0]));
        let done = planned
            .complete_moves(&[pid], &BTreeSet::new())
            .unwrap_or_else(|| panic!("done"));
        assert_eq!(done.partitions[0].replicas, vec![NodeId(9), old[1], old[2]]);
        assert!(done.partitions[0].moving.is_none());
    }
}
