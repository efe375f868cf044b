//! Zones and policies (docs/zones.md): which zone each server is in, which partition group
//! each pinned tree is placed on, and the rules placement follows with them:
//!
//! * a partition of the default group (0) spreads its copies over as many zones as there
//!   are, so a whole zone can be lost without losing data;
//! * a partition of a policy's group lives only on that policy's zone's servers, with the
//!   policy's number of copies.

use std::collections::BTreeSet;

use crate::map::{ClusterMap, MapError};
use crate::members::{
    DEFAULT_GROUP, NodeId, NodeInfo, NodeState, PartitionInfo, Policy, PolicyState,
};

impl ClusterMap {
    /// The zone of server `id` (`""` for a server the map does not list).
    #[must_use]
    pub fn zone_of(&self, id: NodeId) -> &str {
        self.node(id).map_or("", |n| n.zone.as_str())
    }

    /// The zones of the servers that can take copies (up, not leaving).
    #[must_use]
    pub fn live_zones(&self) -> BTreeSet<&str> {
        self.nodes
            .iter()
            .filter(|n| n.state == NodeState::Up)
            .map(|n| n.zone.as_str())
            .collect()
    }

    /// Every zone the map names, in order.
    #[must_use]
    pub fn zones(&self) -> BTreeSet<&str> {
        self.nodes.iter().map(|n| n.zone.as_str()).collect()
    }

    /// How many zones `servers` cover.
    #[must_use]
    pub fn zone_count<'a>(&self, servers: impl IntoIterator<Item = &'a NodeId>) -> usize {
        servers
            .into_iter()
            .map(|&n| self.zone_of(n))
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// The policy owning partition group `group`.
    #[must_use]
    pub fn policy_of_group(&self, group: u32) -> Option<&Policy> {
        self.policies.iter().find(|p| p.group == group)
    }

    /// The zone partition `p` is pinned to, if its group is a policy's.
    #[must_use]
    pub fn pinned_zone(&self, p: &PartitionInfo) -> Option<&str> {
        self.policy_of_group(p.group).map(|pol| pol.zone.as_str())
    }

    /// Copies a partition of `group` should have.
    #[must_use]
    pub fn group_replication(&self, group: u32) -> u32 {
        self.policy_of_group(group)
            .map_or(self.replication, |p| p.replicas)
    }

    /// May server `node` hold a copy of partition `p`? (Only its zone's servers, if pinned.)
    #[must_use]
    pub fn may_hold(&self, p: &PartitionInfo, node: NodeId) -> bool {
        self.pinned_zone(p).is_none_or(|z| self.zone_of(node) == z)
    }

    /// The most zones partition `p`'s copies could cover with the servers that can take
    /// copies now: 1 for a pinned partition, else `min(copies, live zones)`.
    #[must_use]
    pub fn zones_wanted(&self, p: &PartitionInfo) -> usize {
        if self.pinned_zone(p).is_some() {
            return 1;
        }
        let copies = p.replicas.len() - usize::from(p.moving.is_some());
        copies.min(self.live_zones().len())
    }
}

impl ClusterMap {
    /// The next map (epoch + 1) with `path` pinned to `zone`: a policy with a new partition
    /// group of `per_node` partitions per server of the zone, each with `replicas` copies
    /// (capped by the zone's servers), all on the zone's servers that are up. Ids are new
    /// (never those of a retired group: inode numbers name their partition).
    pub fn with_policy(
        &self,
        path: &str,
        zone: &str,
        replicas: u32,
        per_node: u32,
    ) -> Result<ClusterMap, MapError> {
        self.with_policy_in(path, zone, replicas, per_node, PolicyState::Active)
    }

    /// As `with_policy`, for a tree that exists: the policy is `Arriving` (paths stay
    /// where they are) until the tree has been copied into its group and the move settles
    /// it (`settle_move`).
    pub fn with_policy_arriving(
        &self,
        path: &str,
        zone: &str,
        replicas: u32,
        per_node: u32,
    ) -> Result<ClusterMap, MapError> {
        self.with_policy_in(path, zone, replicas, per_node, PolicyState::Arriving)
    }

    fn with_policy_in(
        &self,
        path: &str,
        zone: &str,
        replicas: u32,
        per_node: u32,
        state: PolicyState,
    ) -> Result<ClusterMap, MapError> {
        if let Some(moving) = self.moving_policy() {
            return Err(MapError::PolicyMoving(moving.path.clone()));
        }
        if self.live_policy(path).is_some() {
            return Err(MapError::PolicyExists(path.to_string()));
        }
        let servers: Vec<NodeInfo> = self
            .nodes
            .iter()
            .filter(|n| n.zone == zone && n.state == NodeState::Up)
            .cloned()
            .collect();
        if servers.is_empty() {
            return Err(MapError::NoSuchZone(zone.to_string()));
        }
        let group = self
            .policies
            .iter()
            .map(|p| p.group)
            .chain(self.partitions.iter().map(|p| p.group))
            .max()
            .unwrap_or(DEFAULT_GROUP)
            + 1;
        let first = self
            .partitions
            .iter()
            .map(|p| p.id.0)
            .chain([self.retired_partitions_max])
            .max()
            .unwrap_or(0)
            + 1;
        let count = per_node
            .max(1)
            .saturating_mul(u32::try_from(servers.len()).unwrap_or(u32::MAX));
        let mut next = self.clone();
        next.epoch = next.epoch.saturating_add(1);
        next.policies.push(Policy {
            group,
            path: path.to_string(),
            zone: zone.to_string(),
            replicas,
            state,
        });
        next.partitions.extend(crate::partition::assign_group(
            &servers, first, count, replicas, group,
        ));
        next.validate()?;
        Ok(next)
    }

    /// The next map (epoch + 1) with the policy on `path` retired: no path is placed by
    /// it; its group's partitions stay (files renamed out of the tree keep their later
    /// chunks there). `None` if there is no active one. (The caller makes sure the tree
    /// holds nothing, or moves it out first: `leaving_policy`.)
    #[must_use]
    pub fn without_policy(&self, path: &str) -> Option<ClusterMap> {
        let pol = self.live_policy(path)?;
        if pol.state != PolicyState::Active {
            return None;
        }
        let group = pol.group;
        Some(self.with_policy_state(group, PolicyState::Retired))
    }

    /// The active (or moving) policy on exactly `path`.
    #[must_use]
    pub fn live_policy(&self, path: &str) -> Option<&Policy> {
        self.policies
            .iter()
            .find(|p| p.path == path && p.state != PolicyState::Retired)
    }

    /// The policy whose tree is moving into or out of its group, if any (at most one).
    #[must_use]
    pub fn moving_policy(&self) -> Option<&Policy> {
        self.policies.iter().find(|p| p.state.is_moving())
    }

    /// The next map (epoch + 1) with the policy of `group` in `state`.
    pub(crate) fn with_policy_state(&self, group: u32, state: PolicyState) -> ClusterMap {
        let mut next = self.clone();
        next.epoch = next.epoch.saturating_add(1);
        for p in next.policies.iter_mut().filter(|p| p.group == group) {
            p.state = state;
        }
        next
    }

    /// The policy whose tree `path` is in (the longest root), if any.
    #[must_use]
    pub fn policy_for(&self, path: &str) -> Option<&Policy> {
        self.policies
            .iter()
            .filter(|p| p.state.places_paths() && crate::path::is_within(path, &p.path))
            .max_by_key(|p| p.path.len())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::members::PartitionId;

    fn zoned(n: usize, zones: &[&str], per_node: u32, r: u32) -> ClusterMap {
        let addrs: Vec<String> = (1..=n).map(|i| format!("127.0.0.1:{i}")).collect();
        let zones: Vec<String> = zones.iter().map(|z| (*z).to_string()).collect();
        ClusterMap::build_in_zones(1, &addrs, &zones, per_node, r)
    }

    fn settle(m: ClusterMap, expired: &BTreeSet<NodeId>) -> (ClusterMap, Vec<(NodeId, NodeId)>) {
        crate::rebalance::settle_moves(m, expired, 8)
    }

    /// Every partition of the default group covers as many zones as it can.
    fn spread_over_zones(m: &ClusterMap) -> Result<(), String> {
        for p in &m.partitions {
            let want = m.zones_wanted(p);
            if m.zone_count(&p.replicas) < want {
                return Err(format!(
                    "partition {} covers fewer than {want} zones: {:?}",
                    p.id, p.replicas
                ));
            }
        }
        Ok(())
    }

    fn copies(m: &ClusterMap) -> BTreeMap<NodeId, usize> {
        let mut out = BTreeMap::new();
        for r in m.partitions.iter().flat_map(|p| &p.replicas) {
            *out.entry(*r).or_default() += 1;
        }
        out
    }

    #[test]
    fn two_zones_of_three_hold_every_partition_in_both() {
        let m = zoned(6, &["a", "b"], 8, 3);
        assert!(m.validate().is_ok());
        spread_over_zones(&m).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.zone_of(NodeId(1)), "a");
        assert_eq!(m.zone_of(NodeId(2)), "b");
        // Losing zone a leaves a copy of everything in zone b, and the other way round.
        for p in &m.partitions {
            assert!(p.replicas.iter().any(|r| m.zone_of(*r) == "a"), "{p:?}");
            assert!(p.replicas.iter().any(|r| m.zone_of(*r) == "b"), "{p:?}");
        }
        // Still balanced: 48 partitions x 3 copies over 6 servers, 24 each.
        assert!(
            copies(&m).values().all(|&c| (23..=25).contains(&c)),
            "{:?}",
            copies(&m)
        );
    }

    #[test]
    fn a_new_zone_gets_a_copy_of_every_partition() {
        let m = zoned(4, &["a", "b"], 4, 3);
        let mut grown = m.clone();
        for id in [5, 6] {
            grown.nodes.push(NodeInfo {
                id: NodeId(id),
                addr: format!("127.0.0.1:{id}"),
                weight: 1,
                state: NodeState::Up,
                zone: "c".into(),
            });
        }
        let (done, made) = settle(grown, &BTreeSet::new());
        spread_over_zones(&done).unwrap_or_else(|e| panic!("{e}"));
        for p in &done.partitions {
            assert_eq!(done.zone_count(&p.replicas), 3, "{p:?}");
        }
        // One copy per partition moved into zone c; nothing else needed to move.
        let into_c = made.iter().filter(|(_, to)| to.0 >= 5).count();
        assert_eq!(into_c, done.partitions.len(), "{made:?}");
        assert!(
            made.len() <= done.partitions.len() + 4,
            "{} moves: {made:?}",
            made.len()
        );
    }

    #[test]
    fn a_pinned_partition_stays_in_its_zone() {
        let mut m = zoned(6, &["a", "b"], 2, 3);
        m.policies.push(Policy {
            group: 1,
            path: "/lab".into(),
            zone: "a".into(),
            replicas: 2,
            state: PolicyState::Active,
        });
        let zone_a: Vec<NodeInfo> = m.nodes.iter().filter(|n| n.zone == "a").cloned().collect();
        let first = m.partitions.len() as u32 + 1;
        m.partitions
            .extend(crate::partition::assign_group(&zone_a, first, 6, 2, 1));
        m.validate().unwrap_or_else(|e| panic!("{e}"));
        let (settled, _) = settle(m, &BTreeSet::new());
        let leaving = settled.nodes.iter().find(|n| n.zone == "a").map(|n| n.id);
        let leaving = leaving.unwrap_or_else(|| panic!("a server in zone a"));
        // Two copies in a zone of three: one server of it may leave, not two.
        let gone = settled
            .mark_leaving(leaving)
            .unwrap_or_else(|| panic!("up"));
        let second = gone
            .nodes
            .iter()
            .find(|n| n.zone == "a" && n.id != leaving)
            .map(|n| n.id)
            .unwrap_or_else(|| panic!("another server in zone a"));
        let (drained, _) = settle(gone, &BTreeSet::new());
        assert!(drained.stranded_by_leaving(second).is_some());
        assert!(drained.mark_leaving(second).is_none());
        let drained = settled
            .mark_leaving(leaving)
            .unwrap_or_else(|| panic!("up"));
        let (done, _) = settle(drained, &BTreeSet::new());
        assert!(done.node(leaving).is_none());
        for p in done.partitions.iter().filter(|p| p.group == 1) {
            assert_eq!(p.replicas.len(), 2, "{p:?}");
            assert!(p.replicas.iter().all(|r| done.zone_of(*r) == "a"), "{p:?}");
        }
        spread_over_zones(&done).unwrap_or_else(|e| panic!("{e}"));
        // A copy of a pinned partition on another zone's server is moved home.
        let mut stray = done.clone();
        let b = stray.nodes.iter().find(|n| n.zone == "b").map(|n| n.id);
        let b = b.unwrap_or_else(|| panic!("a server in zone b"));
        let pinned = stray.partitions.iter_mut().find(|p| p.group == 1);
        let pinned = pinned.unwrap_or_else(|| panic!("a pinned partition"));
        pinned.replicas[1] = b;
        let (home, _) = settle(stray, &BTreeSet::new());
        for p in home.partitions.iter().filter(|p| p.group == 1) {
            assert!(p.replicas.iter().all(|r| home.zone_of(*r) == "a"), "{p:?}");
        }
    }

    #[test]
    fn policies_and_zones_are_validated() {
        let mut m = zoned(4, &["a", "b"], 1, 2);
        assert!(m.validate().is_ok());
        let good = Policy {
            group: 1,
            path: "/x".into(),
            zone: "a".into(),
            replicas: 2,
            state: PolicyState::Active,
        };
        for bad in [
            Policy {
                group: 0,
                ..good.clone()
            },
            Policy {
                path: "/".into(),
                ..good.clone()
            },
            Policy {
                path: "x/y".into(),
                ..good.clone()
            },
            Policy {
                zone: "nowhere".into(),
                ..good.clone()
            },
            Policy {
                replicas: 0,
                ..good.clone()
            },
        ] {
            let mut bad_map = m.clone();
            bad_map.policies.push(bad);
            assert!(matches!(bad_map.validate(), Err(MapError::BadPolicy(_))));
        }
        m.partitions[0].group = 7;
        assert_eq!(m.validate(), Err(MapError::BadGroup(m.partitions[0].id)));
        m.partitions[0].group = 0;
        m.nodes[0].zone = "has space".into();
        assert_eq!(m.validate(), Err(MapError::BadZone(NodeId(1))));
        // A map file written before zones reads as one zone, "".
        let json = zoned(3, &[], 1, 1)
            .to_json()
            .replace(",\n      \"zone\": \"\"", "");
        assert!(!json.contains("zone"));
        let old = ClusterMap::from_json(&json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(old.zones().len(), 1);
    }

    #[test]
    fn a_policy_places_its_tree_on_its_group_and_moves_nothing_else() {
        let m = zoned(6, &["a", "b"], 4, 3);
        let pinned = m
            .with_policy("/lab", "a", 2, 4)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pinned.epoch, m.epoch + 1);
        assert_eq!(
            m.with_policy("/lab", "nowhere", 2, 4),
            Err(MapError::NoSuchZone("nowhere".into()))
        );
        assert_eq!(
            pinned.with_policy("/lab", "b", 2, 4),
            Err(MapError::PolicyExists("/lab".into()))
        );
        let group: BTreeSet<PartitionId> = pinned
            .partitions
            .iter()
            .filter(|p| p.group == 1)
            .map(|p| p.id)
            .collect();
        assert_eq!(group.len(), 12, "4 per server of zone a");
        for p in pinned.partitions.iter().filter(|p| p.group == 1) {
            assert_eq!(p.replicas.len(), 2);
            assert!(p.replicas.iter().all(|r| pinned.zone_of(*r) == "a"));
        }
        let (before, after) = (m.ring(), pinned.ring());
        let raised = |m: &ClusterMap| {
            m.with_protocol_floor(crate::LOCKS_ON_DEFAULT_GROUP_SINCE)
                .unwrap_or_else(|| panic!("floor raised"))
                .ring()
        };
        let (before_41, after_41) = (raised(&m), raised(&pinned));
        for i in 0..500 {
            let inside = format!("/lab/d{i}");
            assert!(group.contains(&after.owner_of_dir(&inside)), "{inside}");
            assert!(group.contains(&after.owner_of_entry(&format!("{inside}/f"))));
            for k in 1..4 {
                let shard = crate::Shard {
                    prefix: k,
                    depth: 2,
                };
                assert!(group.contains(&after.owner_of_shard(&inside, shard)));
            }
            let outside = format!("/labs/d{i}");
            assert_eq!(after.owner_of_dir(&outside), before.owner_of_dir(&outside));
            // A pinned partition's inodes keep their data in the group; others as before.
            let pid = *group.iter().nth(i % group.len()).unwrap_or(&PartitionId(0));
            let ino = crate::InodeId(pid.id_base() | i as u64);
            assert!(group.contains(&after.owner_of_chunk(ino, 3)));
            // Below floor 41 locks are on the group's ring; from it, on the default
            // group's whatever the policies (seed 111009).
            assert!(group.contains(&after.owner_of_locks(ino)));
            assert_eq!(after_41.owner_of_locks(ino), before_41.owner_of_locks(ino));
            assert!(!group.contains(&after_41.owner_of_locks(ino)));
            let other = crate::InodeId((1 << 40) | i as u64);
            assert_eq!(
                after.owner_of_chunk(other, 3),
                before.owner_of_chunk(other, 3)
            );
        }
        // The entry of the root itself is in its parent, outside the tree.
        assert_eq!(after.owner_of_entry("/lab"), before.owner_of_entry("/lab"));
        assert!(group.contains(&after.owner_of_dir("/lab")));
        assert!(after.dir_nodes("/lab/x").iter().all(|p| group.contains(p)));
        assert_eq!(after.dir_nodes("/lab/x").len(), group.len());
        assert_eq!(after.policy_root_of("/lab/x/y"), Some("/lab"));
        assert_eq!(
            pinned.policy_for("/lab/x").map(|p| p.zone.as_str()),
            Some("a")
        );
        assert_eq!(after.policy_root_of("/labx"), None);
        // A nested policy wins inside its own tree.
        let nested = pinned
            .with_policy("/lab/cold", "b", 1, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        let ring = nested.ring();
        assert_eq!(ring.policy_root_of("/lab/cold/x"), Some("/lab/cold"));
        let p = nested.partition(ring.owner_of_dir("/lab/cold/x"));
        assert_eq!(p.map(|p| p.group), Some(2));
        // Cleared: placement is as before the policy.
        let cleared = pinned
            .without_policy("/lab")
            .unwrap_or_else(|| panic!("policy"));
        assert!(cleared.validate().is_ok());
        assert!(cleared.without_policy("/lab").is_none());
        // Retired, its group stays: inodes it numbered still place their chunks there.
        assert_eq!(cleared.partitions, pinned.partitions);
        let pid = *group.iter().next().unwrap_or(&PartitionId(0));
        let ino = crate::InodeId(pid.id_base() | 7);
        assert!(group.contains(&cleared.ring().owner_of_chunk(ino, 2)));
        assert!(cleared.policy_for("/lab/x").is_none());
        assert_eq!(
            cleared.ring().owner_of_dir("/lab/d1"),
            before.owner_of_dir("/lab/d1")
        );
        // A new group never reuses the ids of a retired one.
        let again = cleared
            .with_policy("/lab", "a", 2, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        let new_ids: BTreeSet<PartitionId> = again
            .partitions
            .iter()
            .filter(|p| p.group != 0 && !group.contains(&p.id))
            .map(|p| p.id)
            .collect();
        assert_eq!(new_ids.len(), 3);
        assert!(new_ids.iter().all(|id| id.0 > 36), "{new_ids:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// For random servers, zones, weights and layouts: a new map spreads every
        /// partition over as many zones as it can and has nothing to rebalance; after a
        /// server is added or removed, the settled map still does, and the moves made are
        /// few (those the change needs and a little balance).
        #[test]
        fn copies_cover_every_zone_they_can(
            zone_of in proptest::collection::vec(0usize..4, 2..10),
            weights in proptest::collection::vec(1u32..3, 10),
            per_node in 1u32..6,
            r in 1u32..4,
            added_zone in 0usize..5,
            removed in 0usize..10,
        ) {
            let names = ["a", "b", "c", "d", "e"];
            let n = zone_of.len();
            let addrs: Vec<String> = (1..=n).map(|i| format!("h:{i}")).collect();
            let mut m = ClusterMap::build(1, &addrs, per_node, r);
            for (i, node) in m.nodes.iter_mut().enumerate() {
                node.zone = names[zone_of[i]].to_string();
                node.weight = weights[i];
            }
            m.partitions = crate::partition::assign(&m.nodes, per_node * n as u32, r);
            let (m, _) = settle(m, &BTreeSet::new());
            prop_assert!(spread_over_zones(&m).is_ok(), "{:?}", spread_over_zones(&m));

            let mut grown = m.clone();
            let new = NodeId(n as u32 + 1);
            grown.nodes.push(NodeInfo {
                id: new,
                addr: "h:new".into(),
                weight: 1,
                state: NodeState::Up,
                zone: names[added_zone].to_string(),
            });
            let new_zone = !m.zones().contains(names[added_zone]);
            let (done, made) = settle(grown, &BTreeSet::new());
            prop_assert!(spread_over_zones(&done).is_ok(), "{:?}", spread_over_zones(&done));
            let onto_new = made.iter().filter(|(_, to)| *to == new).count();
            if !new_zone {
                // Every move but a few lands on the new server.
                prop_assert!(made.len() <= onto_new + n, "{} moves, {onto_new} onto the new server", made.len());
            }

            // (A server can leave only if the others can hold every copy.)
            let gone = m.nodes[removed % n].id;
            if let Some(leaving) = m.mark_leaving(gone).filter(|_| n > r as usize) {
                let held = copies(&m).get(&gone).copied().unwrap_or(0);
                let (done, made) = settle(leaving, &BTreeSet::new());
                prop_assert!(done.node(gone).is_none());
                prop_assert!(spread_over_zones(&done).is_ok(), "{:?}", spread_over_zones(&done));
                let off = made.iter().filter(|(from, _)| *from == gone).count();
                prop_assert_eq!(off, held);
                prop_assert!(made.len() <= held + 2 * n, "{} moves for {held} copies", made.len());
            }
        }
    }
}
