//! An administrator's last resort (issue 49, docs/replication.md "Servers lost for good"):
//! servers declared lost for good, so that a partition whose every in-sync copy was on
//! them is served again from a copy that was behind, accepting that the changes only the
//! lost copies held are gone. The leader never does this on its own (no unclean
//! election, as Kafka's default): only `myriad node lost --accept-loss` does.

use std::collections::BTreeSet;

use crate::map::ClusterMap;
use crate::members::{NodeId, NodeState, PartitionId};

/// A partition the declaration makes serve again from a copy that was behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forced {
    pub partition: PartitionId,
    /// The copy that becomes in sync and primary (when it opens it first takes the newest
    /// history among the other copies up, by term and batch, as any new primary does).
    pub primary: NodeId,
    /// The lost servers that held the partition's in-sync copies: listed behind from now
    /// on, so that if one returns after all its copy is made again from the new primary.
    pub lost: Vec<NodeId>,
}

/// What declaring servers lost would do.
#[derive(Clone, Debug, Default)]
pub struct LossPlan {
    /// The next map (epoch + 1), `None` if no partition needs a copy forced.
    pub next: Option<ClusterMap>,
    pub forced: Vec<Forced>,
    /// Partitions whose in-sync copies are all lost but whose other copies are all down
    /// too: nothing can serve them until one of those returns (then declare again).
    pub no_copy_up: Vec<(PartitionId, Vec<NodeId>)>,
    /// Partitions with no primary now that still have an in-sync copy on a server not
    /// declared lost (down): they serve again, losing nothing, once it returns.
    pub waiting: Vec<(PartitionId, Vec<NodeId>)>,
}

/// Why servers cannot be declared lost.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LostError {
    #[error("server {0} is not in the cluster map")]
    NotListed(NodeId),
    #[error(
        "server {0} is not marked down: a server the cluster hears is not lost (stop it, wait until `myriad node list` shows it down, then declare it)"
    )]
    NotDown(NodeId),
}

impl ClusterMap {
    /// What declaring servers `lost` (each marked down) lost for good would do: every
    /// partition whose in-sync copies are all on them gets its first copy up (not on a lost
    /// server, not a move's copy still being made) in sync and primary, and the lost copies
    /// behind. Partitions with an in-sync copy elsewhere are left as they are, whether it is
    /// up or not: waiting for it loses nothing.
    pub fn declare_lost(&self, lost: &BTreeSet<NodeId>) -> Result<LossPlan, LostError> {
        for &id in lost {
            match self.node(id) {
                None => return Err(LostError::NotListed(id)),
                Some(n) if n.state != NodeState::Down => return Err(LostError::NotDown(id)),
                Some(_) => {}
            }
        }
        let mut next = self.clone();
        let mut plan = LossPlan::default();
        for p in &mut next.partitions {
            let in_sync: Vec<NodeId> = p
                .replicas
                .iter()
                .copied()
                .filter(|r| !p.is_behind(*r))
                .collect();
            if in_sync.iter().any(|r| !lost.contains(r)) {
                if self.primary_of(p.id).is_none() {
                    let kept = in_sync.into_iter().filter(|r| !lost.contains(r)).collect();
                    plan.waiting.push((p.id, kept));
                }
                continue;
            }
            let being_made = p.moving.map(|m| m.to);
            let candidate = p
                .replicas
                .iter()
                .copied()
                .find(|r| !lost.contains(r) && self.is_up(*r) && being_made != Some(*r));
            let Some(primary) = candidate else {
                let others = p
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| !lost.contains(r))
                    .collect();
                plan.no_copy_up.push((p.id, others));
                continue;
            };
            p.behind.retain(|b| *b != primary);
            for &r in &in_sync {
                if !p.behind.contains(&r) {
                    p.behind.push(r);
                }
            }
            // The new primary first, then as `mark_down` orders: in sync, up, in their
            // previous order.
            let key = |r: &NodeId| (*r != primary, p.is_behind(*r), !self.is_up(*r));
            let mut order = p.replicas.clone();
            order.sort_by_key(key);
            p.replicas = order;
            plan.forced.push(Forced {
                partition: p.id,
                primary,
                lost: in_sync,
            });
        }
        if !plan.forced.is_empty() {
            next.epoch = next.epoch.saturating_add(1);
            plan.next = Some(next);
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three servers, partition 1 on all three: its primary served alone (its two copies behind),
    /// then it is lost.
    fn lone_primary_lost() -> (ClusterMap, NodeId, Vec<NodeId>) {
        let addrs: Vec<String> = (1..=3).map(|i| format!("127.0.0.1:{i}")).collect();
        let map = ClusterMap::build(1, &addrs, 1, 3);
        let pid = map.partitions[0].id;
        let primary = map.primary_of(pid).unwrap_or(NodeId(1));
        let others: Vec<NodeId> = map.partitions[0].replicas[1..].to_vec();
        let mut m = map;
        for &o in &others {
            m = m.mark_down(o).unwrap_or_else(|| panic!("down {o}"));
        }
        m = m.mark_down(primary).unwrap_or_else(|| panic!("down"));
        for &o in &others {
            m = m.mark_up(o).unwrap_or_else(|| panic!("up {o}"));
        }
        // The order the marks left them in: the first is the one forced.
        let others = m.partitions[0]
            .replicas
            .iter()
            .copied()
            .filter(|r| *r != primary)
            .collect();
        (m, primary, others)
    }

    #[test]
    fn a_partition_whose_in_sync_copies_are_lost_serves_from_a_behind_copy() {
        let (m, lost, others) = lone_primary_lost();
        let pid = m.partitions[0].id;
        assert_eq!(m.primary_of(pid), None, "a behind copy serves unforced");
        let plan = m
            .declare_lost(&BTreeSet::from([lost]))
            .unwrap_or_else(|e| panic!("{e}"));
        let next = plan.next.unwrap_or_else(|| panic!("nothing forced"));
        assert_eq!(next.epoch, m.epoch + 1);
        next.validate()
            .unwrap_or_else(|e| panic!("invalid map: {e}"));
        assert_eq!(next.primary_of(pid), Some(others[0]));
        let p = next.partition(pid).unwrap_or_else(|| panic!("partition"));
        assert!(p.is_behind(lost), "the lost copy is not behind");
        assert!(
            p.is_behind(others[1]),
            "the other behind copy was made in sync"
        );
        assert_eq!(
            plan.forced.iter().find(|f| f.partition == pid),
            Some(&Forced {
                partition: pid,
                primary: others[0],
                lost: vec![lost],
            })
        );
        // Declared again on the new map: nothing more to do.
        let again = next
            .declare_lost(&BTreeSet::from([lost]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(again.next.is_none() && again.forced.is_empty());
        // The lost server returns after all: it stays behind, never primary until caught up.
        let back = next.mark_up(lost).unwrap_or_else(|| panic!("up"));
        assert_eq!(back.primary_of(pid), Some(others[0]));
        assert!(back.behind_of(pid).contains(&lost));
    }

    #[test]
    fn only_a_server_marked_down_is_declared_lost_and_an_in_sync_copy_is_waited_for() {
        let (m, lost, others) = lone_primary_lost();
        assert_eq!(
            m.declare_lost(&BTreeSet::from([others[0]])).err(),
            Some(LostError::NotDown(others[0]))
        );
        assert_eq!(
            m.declare_lost(&BTreeSet::from([NodeId(9)])).err(),
            Some(LostError::NotListed(NodeId(9)))
        );
        // Every copy down, the primary in sync: declaring a behind one lost forces nothing.
        let pid = m.partitions[0].id;
        let all_down = others
            .iter()
            .try_fold(m.clone(), |m, o| m.mark_down(*o))
            .unwrap_or_else(|| panic!("down"));
        let plan = all_down
            .declare_lost(&BTreeSet::from([others[1]]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(plan.next.is_none());
        assert!(
            plan.waiting.contains(&(pid, vec![lost])),
            "{:?}",
            plan.waiting
        );
        // The in-sync one declared lost too, but no other copy is up: nothing to serve from.
        let plan = all_down
            .declare_lost(&BTreeSet::from([lost]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(plan.next.is_none());
        let mut sorted = others.clone();
        sorted.sort();
        assert!(
            plan.no_copy_up.iter().any(|(p, o)| {
                let mut o = o.clone();
                o.sort();
                *p == pid && o == sorted
            }),
            "{:?}",
            plan.no_copy_up
        );
    }
}
