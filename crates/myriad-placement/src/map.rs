//! The cluster map: which servers ("nodes") exist and where they listen, which partitions
//! exist and which servers hold each one, and the layout parameters that every client and
//! server must agree on. It is versioned by `epoch`; a higher epoch always wins.
//!
//! Keys are placed on partitions by the ring (fixed for the cluster's life); partitions are
//! placed on servers by their replica lists (which change with membership). The first
//! replica listed is the partition's primary. docs/replication.md.

use crate::members::{
    DEFAULT_GROUP, NodeId, NodeInfo, NodeState, PARTITION_ID_MAX, PartitionId, PartitionInfo,
    Policy, zone_name_ok,
};

/// Ring points per partition. 256 keeps the busiest of 4 partitions within ~1.1x of the mean
/// (see the balance test) while a ring of 32 partitions stays at 8,192 points.
pub const DEFAULT_VNODES_PER_PARTITION: u32 = 256;
/// Partitions per server when a cluster is created: enough that a dead server's primaries
/// spread over all the others and a new server can take a fair share (docs/replication.md).
pub const DEFAULT_PARTITIONS_PER_NODE: u32 = 8;
/// Copies of every partition (capped by the number of servers).
pub const DEFAULT_REPLICATION: u32 = 3;
/// Default chunk size of big files: the unit of placement for file data beyond chunk 0.
pub const DEFAULT_CHUNK_SIZE_BYTES: u64 = 4 * 1024 * 1024;
/// Files up to this size are "inline": their bytes live with the inode and `fetch` returns them.
pub const DEFAULT_INLINE_MAX_BYTES: u64 = 64 * 1024;
/// Upper bound on weights, so `vnodes * weight` cannot blow up the ring.
pub const WEIGHT_MAX: u32 = 64;
/// Upper bound on the ring size: nodes * vnodes * weight.
pub const RING_POINTS_MAX: u64 = 1 << 22;
/// Upper bound on a map's epoch. Epochs grow by one per map change (`mark_down`, `mark_up`,
/// `mark_leaving`, `plan_moves`, `complete_moves`, the CLI's edits), so a real cluster never
/// comes near it; the bound leaves room so that no increment of a map that passed `validate`
/// can overflow (a hostile or corrupt map file with epoch `u64::MAX` made `mark_down` panic
/// in debug builds and wrap to epoch 0, which loses to every older map, in release builds).
pub const EPOCH_MAX: u64 = u64::MAX / 2;

/// Encoded by `map_wire.rs`: the extension only for peers that know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMap {
    /// Version of this map. Every change increments it; the higher epoch wins.
    pub epoch: u64,
    pub vnodes_per_partition: u32,
    pub chunk_size_bytes: u64,
    pub inline_max_bytes: u64,
    /// Copies each partition should have (`replicas.len()` is at most this).
    pub replication: u32,
    pub nodes: Vec<NodeInfo>,
    pub partitions: Vec<PartitionInfo>,
    /// Trees pinned to a zone, each placed on its own partition group (zones.rs).
    pub policies: Vec<Policy>,
    /// The highest partition id a cleared policy's group used: new ids start above it, so
    /// no partition id (which inode numbers and servers' stores carry) is ever reused.
    pub retired_partitions_max: u32,
    /// Settings added after protocol 34 (quotas, the trash, the protocol floor): sent only
    /// to peers of 35 or later (`map_wire.rs`).
    pub ext: MapExt,
}

/// Settings of the whole cluster added to the map after protocol 34 (`map_wire.rs`
/// writes them only for peers that know them). Fields are only ever appended, each
/// written for the versions that know it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapExt {
    /// The oldest protocol version every member of the map has been seen speaking since
    /// it last started (0: not known yet). It never goes down.
    pub protocol_floor: u16,
    /// Directory quotas, sorted by path (`quotas.rs`; protocol 37).
    pub quotas: Vec<crate::quotas::Quota>,
    /// How many days an unlinked or replaced file is kept in `/.trash` (docs/trash.md;
    /// 0: off, files are freed at once; protocol 38).
    pub trash_days: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    #[error("cluster map has no nodes")]
    Empty,
    #[error("cluster map lists node id {0} twice")]
    DuplicateNode(NodeId),
    #[error("node {0}: weight must be 1..={WEIGHT_MAX}")]
    BadWeight(NodeId),
    #[error("node id 0 is reserved")]
    ZeroNodeId,
    #[error(
        "vnodes_per_partition must be at least 1 and the ring at most {RING_POINTS_MAX} points"
    )]
    BadVnodes,
    #[error("cluster map has no partitions")]
    NoPartitions,
    #[error("partition id {0} is listed twice or outside 1..={PARTITION_ID_MAX}")]
    BadPartitionId(PartitionId),
    #[error("partition {0}: its replicas must be 1..=replication distinct servers of the map")]
    BadReplicas(PartitionId),
    #[error("replication must be at least 1")]
    BadReplication,
    #[error(
        "chunk_size_bytes must be a multiple of 65536 and inline_max_bytes at most the chunk size"
    )]
    BadLayout,
    #[error("epoch {0} is above the limit of {EPOCH_MAX}")]
    BadEpoch(u64),
    #[error(
        "node {0}: a zone name is at most 64 printable characters, without spaces, commas or quotes"
    )]
    BadZone(NodeId),
    #[error(
        "policy on {0}: its group must be unique and not 0, its path absolute and not /, its zone one the map's servers are in, its replicas 1..=5"
    )]
    BadPolicy(String),
    #[error("{0} already has a policy (clear it first)")]
    PolicyExists(String),
    #[error("the tree {0} is moving between zones; wait until its move is done")]
    PolicyMoving(String),
    #[error("{0} has no policy whose tree can move")]
    NoMovablePolicy(String),
    #[error("no server that is up is in zone {0:?}")]
    NoSuchZone(String),
    #[error("partition {0}: its group is neither 0 nor a policy's")]
    BadGroup(PartitionId),
    #[error(
        "quota on {0}: its path must be / or absolute and normalized, set once, with an id of its own"
    )]
    BadQuota(String),
    #[error("{0} has no quota")]
    NoQuota(String),
    #[error("cluster map is not valid JSON: {0}")]
    Parse(String),
}

impl ClusterMap {
    /// A map of `addrs.len()` equally weighted servers with ids 1..=N, one partition per
    /// server (partition i on server i) and one copy of each: the layout of a cluster without
    /// replication, used by tests that reason about placement.
    #[must_use]
    pub fn new(epoch: u64, addrs: &[String]) -> ClusterMap {
        ClusterMap::build(epoch, addrs, 1, 1)
    }

    /// A map of `addrs.len()` equally weighted servers with ids 1..=N, `per_node` partitions
    /// per server and `replication` copies of each (capped by N), assigned by
    /// `partition::assign`.
    #[must_use]
    pub fn build(epoch: u64, addrs: &[String], per_node: u32, replication: u32) -> ClusterMap {
        ClusterMap::build_in_zones(epoch, addrs, &[], per_node, replication)
    }

    /// As `build`, with server i (0-based) in zone `zones[i % zones.len()]` (all in zone
    /// `""` if `zones` is empty): copies then spread over the zones.
    #[must_use]
    pub fn build_in_zones(
        epoch: u64,
        addrs: &[String],
        zones: &[String],
        per_node: u32,
        replication: u32,
    ) -> ClusterMap {
        let nodes: Vec<NodeInfo> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| NodeInfo {
                id: NodeId(u32::try_from(i + 1).unwrap_or(u32::MAX)),
                addr: a.clone(),
                weight: 1,
                state: NodeState::Up,
                zone: zones
                    .get(i.checked_rem(zones.len()).unwrap_or(0))
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect();
        let count = per_node
            .max(1)
            .saturating_mul(u32::try_from(nodes.len()).unwrap_or(u32::MAX));
        let replication = replication.max(1);
        let mut map = ClusterMap {
            epoch,
            vnodes_per_partition: DEFAULT_VNODES_PER_PARTITION,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            inline_max_bytes: DEFAULT_INLINE_MAX_BYTES,
            replication,
            partitions: crate::partition::assign(&nodes, count, replication),
            nodes,
            policies: Vec::new(),
            retired_partitions_max: 0,
            ext: MapExt::default(),
        };
        // The balancer (rebalance.rs) must find nothing to move in a new cluster: apply
        // whatever it would move now, before any data exists.
        let none = std::collections::BTreeSet::new();
        for _ in 0..count.saturating_mul(4) {
            let Some(planned) = map.plan_moves(&none, usize::MAX) else {
                break;
            };
            let pids: Vec<PartitionId> = planned.moves().iter().map(|(p, _)| *p).collect();
            match planned.complete_moves(&pids, &none) {
                Some(done) => map = done,
                None => break,
            }
        }
        map.epoch = epoch;
        map
    }

    /// Checks every rule a map must obey before anyone acts on it.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.epoch > EPOCH_MAX {
            return Err(MapError::BadEpoch(self.epoch));
        }
        if self.nodes.is_empty() {
            return Err(MapError::Empty);
        }
        let mut seen = std::collections::BTreeSet::new();
        for n in &self.nodes {
            if n.id == NodeId(0) {
                return Err(MapError::ZeroNodeId);
            }
            if !seen.insert(n.id) {
                return Err(MapError::DuplicateNode(n.id));
            }
            if n.weight == 0 || n.weight > WEIGHT_MAX {
                return Err(MapError::BadWeight(n.id));
            }
            if !zone_name_ok(&n.zone) {
                return Err(MapError::BadZone(n.id));
            }
        }
        let zones = self.zones();
        let mut groups = std::collections::BTreeSet::new();
        let mut live_paths = std::collections::BTreeSet::new();
        let moving = self.policies.iter().filter(|p| p.state.is_moving()).count();
        for pol in &self.policies {
            let live = pol.state != crate::PolicyState::Retired;
            if pol.group == DEFAULT_GROUP
                || moving > 1
                || (live && !live_paths.insert(pol.path.as_str()))
                || !groups.insert(pol.group)
                || !crate::path::is_normal_below_root(&pol.path)
                || !zones.contains(pol.zone.as_str())
                || !(1..=5).contains(&pol.replicas)
            {
                return Err(MapError::BadPolicy(pol.path.clone()));
            }
        }
        crate::quotas::check(&self.ext.quotas).map_err(MapError::BadQuota)?;
        if self.replication == 0 {
            return Err(MapError::BadReplication);
        }
        if self.partitions.is_empty() {
            return Err(MapError::NoPartitions);
        }
        let mut pids = std::collections::BTreeSet::new();
        for p in &self.partitions {
            if p.id == PartitionId::SERVER || p.id > PARTITION_ID_MAX || !pids.insert(p.id) {
                return Err(MapError::BadPartitionId(p.id));
            }
            if p.group != DEFAULT_GROUP && !groups.contains(&p.group) {
                return Err(MapError::BadGroup(p.id));
            }
            let mut distinct = std::collections::BTreeSet::new();
            let extra = usize::from(p.moving.is_some());
            if p.replicas.is_empty()
                || p.behind.iter().any(|b| !p.replicas.contains(b))
                || p.replicas.iter().all(|r| p.is_behind(*r))
                || p.replicas.len() > self.group_replication(p.group) as usize + extra
                || p.moving.is_some_and(|m| {
                    m.from == m.to
                        || !(m.adds() || p.replicas.contains(&m.from))
                        || !p.replicas.contains(&m.to)
                })
                || !p
                    .replicas
                    .iter()
                    .all(|r| seen.contains(r) && distinct.insert(*r))
            {
                return Err(MapError::BadReplicas(p.id));
            }
        }
        let points = u64::from(self.vnodes_per_partition) * self.partitions.len() as u64;
        if self.vnodes_per_partition == 0 || points > RING_POINTS_MAX {
            return Err(MapError::BadVnodes);
        }
        if self.chunk_size_bytes == 0
            || !self.chunk_size_bytes.is_multiple_of(65536)
            || self.inline_max_bytes > self.chunk_size_bytes
        {
            return Err(MapError::BadLayout);
        }
        Ok(())
    }

    pub fn from_json(text: &str) -> Result<ClusterMap, MapError> {
        let map: ClusterMap =
            serde_json::from_str(text).map_err(|e| MapError::Parse(e.to_string()))?;
        map.validate()?;
        Ok(map)
    }

    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    #[must_use]
    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }

    #[must_use]
    pub fn partition(&self, id: PartitionId) -> Option<&PartitionInfo> {
        self.partitions.iter().find(|p| p.id == id)
    }

    /// True if the map lists server `id` and does not mark it down (a leaving server is up).
    #[must_use]
    pub fn is_up(&self, id: NodeId) -> bool {
        self.node(id).is_some_and(|n| n.state != NodeState::Down)
    }

    /// The server serving partition `id`: its first replica, if that server is up (a
    /// failover moves a down primary to the end of the list, see `mark_down`).
    #[must_use]
    pub fn primary_of(&self, id: PartitionId) -> Option<NodeId> {
        self.partition(id).and_then(|p| self.primary_in(p))
    }

    /// `primary_of` for a partition in hand (no lookup by id: a walk over every partition
    /// stays linear).
    #[must_use]
    pub fn primary_in(&self, p: &PartitionInfo) -> Option<NodeId> {
        p.replicas.first().copied().filter(|&n| self.is_up(n))
    }

    /// The servers keeping a live backup copy of partition `id`: its replicas but the first,
    /// those that are up. Every write waits for all of them.
    #[must_use]
    pub fn backups_of(&self, id: PartitionId) -> Vec<NodeId> {
        self.partition(id)
            .and_then(|p| p.replicas.get(1..))
            .unwrap_or(&[])
            .iter()
            .copied()
            .filter(|&n| self.is_up(n))
            .collect()
    }

    /// The copies of partition `id` the map lists as behind (they lack writes made while
    /// they were down; none is promoted while a copy in sync is up).
    #[must_use]
    pub fn behind_of(&self, id: PartitionId) -> Vec<NodeId> {
        self.partition(id)
            .map(|p| p.behind.clone())
            .unwrap_or_default()
    }

    /// The copies of partition `p` not serving in sync: on a server down, behind (they lack
    /// writes), or a move's new copy still being made.
    #[must_use]
    pub fn copies_not_in_sync(&self, p: &PartitionInfo) -> Vec<NodeId> {
        p.replicas
            .iter()
            .copied()
            .filter(|&r| !self.is_up(r) || p.is_behind(r))
            .collect()
    }

    /// True if partition `p` has fewer copies in sync on up servers than it should have (its
    /// replicas, but a move's new copy, which replaces one of them once made).
    #[must_use]
    pub fn is_under_replicated(&self, p: &PartitionInfo) -> bool {
        let wanted = p.replicas.len() - usize::from(p.moving.is_some());
        p.replicas.len() - self.copies_not_in_sync(p).len() < wanted
    }

    /// The next map with server `id` down: epoch + 1. Every partition it served is served
    /// by its next copy that is up and not behind (the first backup); a copy of `id`'s
    /// becomes behind if such a copy goes on serving without it. Replica lists are ordered
    /// up and in sync first, then down and in sync, then behind: a partition whose only
    /// copies up are behind has no primary (it waits for an in-sync copy to return rather
    /// than lose acknowledged writes). `None` if `id` is not listed or already down.
    #[must_use]
    pub fn mark_down(&self, id: NodeId) -> Option<ClusterMap> {
        if !self.is_up(id) {
            return None;
        }
        let mut next = self.with_state(id, NodeState::Down);
        let up: std::collections::BTreeSet<NodeId> = next
            .nodes
            .iter()
            .filter(|n| n.state != NodeState::Down)
            .map(|n| n.id)
            .collect();
        for p in &mut next.partitions {
            // A copy being made on it will not finish: drop it.
            if p.moving.is_some_and(|m| m.to == id) {
                p.replicas.retain(|&r| r != id);
                p.moving = None;
            }
            // Writes go on without `id` if a copy up and in sync serves: `id` falls behind.
            let serving = p
                .replicas
                .iter()
                .any(|r| *r != id && up.contains(r) && !p.is_behind(*r));
            if serving && p.replicas.contains(&id) && !p.behind.contains(&id) {
                p.behind.push(id);
            }
            // In sync and up, in sync and down, behind: each in their previous order (a
            // stable sort), so the first backup up and in sync becomes the primary.
            let key = |r: &NodeId| (p.is_behind(*r), !up.contains(r));
            let mut order = p.replicas.clone();
            order.sort_by_key(key);
            p.replicas = order;
        }
        Some(next)
    }

    /// The next map with server `id`, down before, up again: epoch + 1. It stays last in the
    /// replica lists: it rejoins as a backup, and primaries copy to it what it missed.
    #[must_use]
    pub fn mark_up(&self, id: NodeId) -> Option<ClusterMap> {
        if self.node(id).is_none_or(|n| n.state != NodeState::Down) {
            return None;
        }
        Some(self.with_state(id, NodeState::Up))
    }

    /// The next map (epoch + 1) with server `id` in `state`.
    /// The next map (epoch + 1) with the cluster's protocol floor at `floor`, if that
    /// raises it: the floor never goes down (docs/upgrades.md).
    #[must_use]
    pub fn with_protocol_floor(&self, floor: u16) -> Option<ClusterMap> {
        if floor <= self.ext.protocol_floor {
            return None;
        }
        let mut next = self.clone();
        next.epoch = next.epoch.saturating_add(1);
        next.ext.protocol_floor = floor;
        Some(next)
    }

    pub(crate) fn with_state(&self, id: NodeId, state: NodeState) -> ClusterMap {
        let mut next = self.clone();
        // Cannot overflow for a map that passed `validate` (EPOCH_MAX); saturating all the same.
        next.epoch = next.epoch.saturating_add(1);
        for n in &mut next.nodes {
            if n.id == id {
                n.state = state;
            }
        }
        next
    }

    /// The next map (epoch + 1) with copies `synced` (partition, server) no longer behind:
    /// the Raft leader saw each hold at least what its primary held (every later write
    /// waits for it too). `None` if none of them was behind.
    #[must_use]
    pub fn caught_up(&self, synced: &[(PartitionId, NodeId)]) -> Option<ClusterMap> {
        let mut next = self.clone();
        let mut changed = false;
        for p in &mut next.partitions {
            let before = p.behind.len();
            p.behind.retain(|b| !synced.contains(&(p.id, *b)));
            changed |= p.behind.len() != before;
        }
        changed.then(|| {
            next.epoch = next.epoch.saturating_add(1);
            next
        })
    }

    /// Where to send a request for partition `id`: its primary's address.
    #[must_use]
    pub fn partition_addr(&self, id: PartitionId) -> Option<&str> {
        self.primary_of(id)
            .and_then(|n| self.node(n))
            .map(|n| n.addr.as_str())
    }

    /// The partitions whose primary is `node`, in id order.
    #[must_use]
    pub fn primaries_of(&self, node: NodeId) -> Vec<PartitionId> {
        self.partitions
            .iter()
            .filter(|p| p.replicas.first() == Some(&node))
            .map(|p| p.id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: NodeId = NodeId(1);
    const S2: NodeId = NodeId(2);

    fn five() -> ClusterMap {
        let addrs: Vec<String> = (1..=5).map(|i| format!("127.0.0.1:{i}")).collect();
        ClusterMap::build(1, &addrs, 4, 3)
    }

    #[test]
    fn mark_down_promotes_the_next_live_replica_of_every_partition() {
        let m = five();
        let down = m.mark_down(S2).unwrap_or_else(|| panic!("server 2 is up"));
        assert_eq!(down.epoch, 2);
        assert!(!down.is_up(S2));
        assert!(down.validate().is_ok());
        assert!(m.mark_down(NodeId(9)).is_none());
        assert!(down.mark_down(S2).is_none(), "already down");
        for (before, after) in m.partitions.iter().zip(&down.partitions) {
            let mut a = after.replicas.clone();
            let mut b = before.replicas.clone();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "the same copies, reordered");
            assert_ne!(down.primary_of(after.id), Some(S2));
            assert!(down.primary_of(after.id).is_some());
            assert!(!down.backups_of(after.id).contains(&S2));
            if before.replicas[0] == S2 {
                // The first backup takes over.
                assert_eq!(down.primary_of(after.id), Some(before.replicas[1]));
                assert_eq!(after.replicas.last(), Some(&S2));
            } else {
                assert_eq!(down.primary_of(after.id), m.primary_of(before.id));
            }
        }
        // A second failure: a partition whose primary and first backup are both down is
        // served by its third copy.
        let second = down.partitions[0].replicas[0];
        let two = down.mark_down(second).unwrap_or_else(|| panic!("up"));
        for p in &two.partitions {
            let primary = two
                .primary_of(p.id)
                .unwrap_or_else(|| panic!("one copy is up"));
            assert!(primary != S2 && primary != second);
            let live = p.replicas.iter().filter(|&&r| two.is_up(r)).count();
            assert_eq!(two.backups_of(p.id).len(), live - 1);
        }
    }

    #[test]
    fn a_new_cluster_has_nothing_to_rebalance() {
        let none = std::collections::BTreeSet::new();
        for n in 1..=8usize {
            let addrs: Vec<String> = (1..=n).map(|i| format!("127.0.0.1:{i}")).collect();
            for ppn in [1, 2, 4, 8] {
                for r in 1..=3 {
                    let m = ClusterMap::build(1, &addrs, ppn, r);
                    assert_eq!(m.epoch, 1);
                    assert!(m.validate().is_ok());
                    assert!(
                        m.plan_moves(&none, usize::MAX).is_none(),
                        "{n} servers, {ppn} per server, {r} copies"
                    );
                }
            }
        }
    }

    #[test]
    fn a_server_marked_up_again_is_a_backup() {
        let m = five();
        let down = m.mark_down(S1).unwrap_or_else(|| panic!("up"));
        let up = down.mark_up(S1).unwrap_or_else(|| panic!("down"));
        assert_eq!(up.epoch, 3);
        assert!(up.is_up(S1));
        assert!(up.mark_up(S1).is_none());
        assert!(up.primaries_of(S1).is_empty(), "it rejoins as a backup");
        for p in up.partitions.iter().filter(|p| p.replicas.contains(&S1)) {
            assert!(up.backups_of(p.id).contains(&S1));
        }
        let json = up.to_json();
        assert_eq!(
            ClusterMap::from_json(&json).unwrap_or_else(|e| panic!("{e}")),
            up
        );
        // A map written before node states existed reads as all up.
        let old = json.replace(",\n      \"state\": \"up\"", "");
        assert!(!old.contains("\"state\""));
        assert_eq!(
            ClusterMap::from_json(&old).unwrap_or_else(|e| panic!("{e}")),
            up
        );
    }

    /// Simulation seed 1027 (`--zones`, a pinned partition with two copies): a copy marked
    /// down while its partner served, back up but not caught up, was promoted when the
    /// partner went down, and a write acknowledged meanwhile was lost. Now it is behind
    /// until the leader sees it caught up, and a behind copy is never promoted.
    #[test]
    fn a_copy_that_fell_behind_is_not_promoted_until_caught_up() {
        let addrs: Vec<String> = (1..=2).map(|i| format!("127.0.0.1:{i}")).collect();
        let m = ClusterMap::build(1, &addrs, 1, 2);
        let pid = m.partitions[0].id;
        let (first, second) = (m.partitions[0].replicas[0], m.partitions[0].replicas[1]);
        // The backup goes down while the primary serves: it falls behind.
        let down = m.mark_down(second).unwrap_or_else(|| panic!("up"));
        assert_eq!(
            down.partition(pid).map(|p| p.behind.clone()),
            Some(vec![second])
        );
        assert_eq!(down.primary_of(pid), Some(first));
        let back = down.mark_up(second).unwrap_or_else(|| panic!("down"));
        assert!(back.validate().is_ok());
        // The primary goes down before the returned copy caught up: no primary at all.
        let lost = back.mark_down(first).unwrap_or_else(|| panic!("up"));
        assert!(lost.validate().is_ok());
        assert_eq!(lost.primary_of(pid), None, "a behind copy was promoted");
        assert_eq!(lost.partition(pid).map(|p| p.replicas[0]), Some(first));
        // It returns: it serves again; the other is still behind.
        let again = lost.mark_up(first).unwrap_or_else(|| panic!("down"));
        assert_eq!(again.primary_of(pid), Some(first));
        // Caught up: no longer behind, and it may take over.
        assert!(again.caught_up(&[(pid, first)]).is_none(), "was not behind");
        let synced = again
            .caught_up(&[(pid, second)])
            .unwrap_or_else(|| panic!("behind"));
        assert!(synced.partition(pid).is_some_and(|p| p.behind.is_empty()));
        let failover = synced.mark_down(first).unwrap_or_else(|| panic!("up"));
        assert_eq!(failover.primary_of(pid), Some(second));
        // A map with every copy behind is refused.
        let mut bad = synced.clone();
        bad.partitions[0].behind = vec![first, second];
        assert_eq!(bad.validate(), Err(MapError::BadReplicas(pid)));
    }

    /// Found by the cluster_map fuzz target: a map file with epoch u64::MAX passed `validate`
    /// and then `mark_down` overflowed the epoch.
    #[test]
    fn an_epoch_with_no_room_to_grow_is_refused() {
        let mut m = five();
        m.epoch = u64::MAX;
        assert_eq!(m.validate(), Err(MapError::BadEpoch(u64::MAX)));
        assert_eq!(
            ClusterMap::from_json(&m.to_json()),
            Err(MapError::BadEpoch(u64::MAX))
        );
        let text = five()
            .to_json()
            .replace("\"epoch\": 1,", "\"epoch\": 18446744073709551615,");
        assert!(text.contains("18446744073709551615"));
        assert_eq!(
            ClusterMap::from_json(&text),
            Err(MapError::BadEpoch(u64::MAX))
        );
        m.epoch = EPOCH_MAX + 1;
        assert_eq!(m.validate(), Err(MapError::BadEpoch(EPOCH_MAX + 1)));
        // The limit itself is a valid epoch, and every step from it still moves forward.
        m.epoch = EPOCH_MAX;
        assert!(m.validate().is_ok());
        let down = m.mark_down(S2).unwrap_or_else(|| panic!("server 2 is up"));
        assert_eq!(down.epoch, EPOCH_MAX + 1);
        // Unvalidated maps saturate instead of overflowing.
        m.epoch = u64::MAX;
        let down = m.mark_down(S2).unwrap_or_else(|| panic!("server 2 is up"));
        assert_eq!(down.epoch, u64::MAX);
    }
}
