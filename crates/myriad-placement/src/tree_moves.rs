//! A policy set on, or cleared from, a tree that exists (docs/zones.md section 3): the map
//! says the policy is `Arriving` or `Leaving` while the tree is copied to the placement
//! `Ring::target` gives it; one map change settles the move (the decision: from then on
//! paths are placed by the new placement) or abandons it. At most one tree moves at a time.

use crate::map::{ClusterMap, MapError};
use crate::members::PolicyState;

impl ClusterMap {
    /// The next map (epoch + 1) with the active policy on `path` `Leaving`: its tree is
    /// to move back to the placement of the policies above it (or the default group).
    pub fn with_policy_leaving(&self, path: &str) -> Result<ClusterMap, MapError> {
        if let Some(moving) = self.moving_policy() {
            return Err(MapError::PolicyMoving(moving.path.clone()));
        }
        match self.live_policy(path) {
            Some(p) if p.state == PolicyState::Active => {
                Ok(self.with_policy_state(p.group, PolicyState::Leaving))
            }
            _ => Err(MapError::NoMovablePolicy(path.to_string())),
        }
    }

    /// The decision of the move of the tree of `group`'s policy: the next map places its
    /// paths where the tree now is (`Arriving` becomes `Active`, `Leaving` `Retired`).
    /// `None` if that policy is not moving (the move was settled or abandoned already).
    #[must_use]
    pub fn settle_move(&self, group: u32) -> Option<ClusterMap> {
        let pol = self.policies.iter().find(|p| p.group == group)?;
        let state = match pol.state {
            PolicyState::Arriving => PolicyState::Active,
            PolicyState::Leaving => PolicyState::Retired,
            _ => return None,
        };
        Some(self.with_policy_state(group, state))
    }

    /// The next map without the move of `group`'s tree (its copies were dropped first): an
    /// `Arriving` policy goes with its group (nothing was numbered by it: no path was
    /// placed there), a `Leaving` one is `Active` again. `None` if it is not moving.
    #[must_use]
    pub fn abandon_move(&self, group: u32) -> Option<ClusterMap> {
        let pol = self.policies.iter().find(|p| p.group == group)?;
        match pol.state {
            PolicyState::Leaving => Some(self.with_policy_state(group, PolicyState::Active)),
            PolicyState::Arriving => {
                let mut next = self.with_policy_state(group, PolicyState::Retired);
                next.policies.retain(|p| p.group != group);
                let ids = self.partitions.iter().filter(|p| p.group == group);
                next.retired_partitions_max = ids
                    .map(|p| p.id.0)
                    .chain([self.retired_partitions_max])
                    .max()
                    .unwrap_or(0);
                next.partitions.retain(|p| p.group != group);
                Some(next)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PartitionId, Ring};

    fn zoned() -> ClusterMap {
        let addrs: Vec<String> = (1..=6).map(|i| format!("127.0.0.1:{i}")).collect();
        let zones = vec!["a".to_string(), "b".to_string()];
        ClusterMap::build_in_zones(1, &addrs, &zones, 4, 3)
    }

    fn group_of(m: &ClusterMap, path: &str) -> u32 {
        m.live_policy(path).map_or(0, |p| p.group)
    }

    fn in_group(m: &ClusterMap, ring: &Ring, dir: &str) -> u32 {
        let owner: PartitionId = ring.owner_of_dir(dir);
        m.partition(owner).map_or(u32::MAX, |p| p.group)
    }

    #[test]
    fn an_arriving_tree_stays_put_until_its_move_settles() {
        let m = zoned();
        let arriving = m
            .with_policy_arriving("/lab", "a", 2, 2)
            .unwrap_or_else(|e| panic!("{e}"));
        let g = group_of(&arriving, "/lab");
        assert!(g > 0);
        // Paths stay in the default group; the target places them in the new one.
        assert_eq!(in_group(&arriving, &arriving.ring(), "/lab/x"), 0);
        assert_eq!(in_group(&arriving, &Ring::target(&arriving), "/lab/x"), g);
        assert_eq!(in_group(&arriving, &Ring::target(&arriving), "/labx"), 0);
        assert!(arriving.policy_for("/lab/x").is_none());
        // One move at a time; no second policy on the path.
        assert_eq!(
            arriving.with_policy("/other", "b", 2, 1),
            Err(MapError::PolicyMoving("/lab".into()))
        );
        assert!(arriving.with_policy_leaving("/lab").is_err());
        assert!(arriving.without_policy("/lab").is_none());
        let settled = arriving.settle_move(g).unwrap_or_else(|| panic!("moving"));
        assert!(settled.validate().is_ok());
        assert_eq!(in_group(&settled, &settled.ring(), "/lab/x"), g);
        assert!(settled.settle_move(g).is_none(), "decided once");
        assert!(settled.abandon_move(g).is_none(), "and never undone");
        // Abandoned instead: the group goes and its ids are never used again.
        let abandoned = arriving.abandon_move(g).unwrap_or_else(|| panic!("moving"));
        assert!(abandoned.validate().is_ok());
        assert_eq!(abandoned.partitions, m.partitions);
        assert!(abandoned.policies.is_empty());
        let max = arriving.partitions.iter().map(|p| p.id.0).max();
        assert_eq!(Some(abandoned.retired_partitions_max), max);
    }

    #[test]
    fn a_leaving_tree_is_placed_by_its_group_until_its_move_settles() {
        let pinned = zoned()
            .with_policy("/lab", "a", 2, 2)
            .unwrap_or_else(|e| panic!("{e}"));
        let g = group_of(&pinned, "/lab");
        let leaving = pinned
            .with_policy_leaving("/lab")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(in_group(&leaving, &leaving.ring(), "/lab/x"), g);
        assert_eq!(in_group(&leaving, &Ring::target(&leaving), "/lab/x"), 0);
        let back = leaving.abandon_move(g).unwrap_or_else(|| panic!("moving"));
        assert_eq!(back.policies, pinned.policies);
        let settled = leaving.settle_move(g).unwrap_or_else(|| panic!("moving"));
        assert_eq!(in_group(&settled, &settled.ring(), "/lab/x"), 0);
        // Retired: its partitions stay for the chunks of inodes they numbered; the path
        // can be pinned again, by a new group.
        assert_eq!(settled.partitions, pinned.partitions);
        let again = settled
            .with_policy("/lab", "b", 2, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(again.validate().is_ok());
        assert!(group_of(&again, "/lab") > g);
        // Two live policies on one path, or two moves, are not a map.
        let mut twice = pinned.clone();
        let mut dup = twice.policies[0].clone();
        dup.group += 1;
        twice.policies.push(dup);
        assert!(twice.validate().is_err());
    }
}
