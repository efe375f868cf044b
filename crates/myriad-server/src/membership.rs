//! This server's part in the cluster-map Raft group (docs/replication.md "Cluster map by
//! Raft", "Leases"): the transport for Raft messages, following the committed map, the
//! serving lease, and on the leader the failure detector that marks servers down and up.
//!
//! ```text
//! every server, every RENEW_EVERY:  Lease ──> leader: granted if the leader had a quorum's
//!                                   ack within QUORUM_FRESH and the sender is up at the
//!                                   leader's epoch; the sender serves until sent + LEASE
//! leader, every CHECK_EVERY:        a server silent for DOWN_AFTER -> map.mark_down (its
//!                                   partitions fail over); a down server heard again -> mark_up
//! ```
//! Why no two primaries serve one partition: a server marked down at time D was last heard
//! at some time L <= D - DOWN_AFTER, by this leader, or L = E - LEADER_LEASE for a server
//! this leader (elected at E) never heard. Its last lease from this leader started before L
//! (the sender's clock). A lease from an earlier leader was granted while that leader had a
//! quorum acknowledgement within QUORUM_FRESH, and it had none after E - LEADER_LEASE
//! (`myriad_membership::LEADER_LEASE`: the voters that elected this leader had not heard it
//! for that long), so it was granted before E - LEADER_LEASE + QUORUM_FRESH. Either way it
//! ended by L + LEASE + QUORUM_FRESH < D, before the new primary exists. (Without the credit
//! a dead Raft leader's partitions waited DOWN_AFTER after the election: 5.8-7.4 s.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use myriad_membership::{BoxFuture, Transport};
use myriad_net::Pool;
use myriad_placement::{ClusterMap, NodeId, NodeState, PartitionId};
use myriad_proto::ask;
use myriad_proto::reply::RaftAnswer;
use myriad_proto::{Caller, Endpoints, RaftRpc, Request, Response, WireError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::MapState;
use myriad_proto::PeerRequest;

/// How long a granted lease lets a server serve, counted from when it asked. With
/// `DOWN_AFTER`, what a failover takes (docs/write-path.md, part 6: the first write after a
/// kill -9 within 3 s); six renewals fit in it, so a server slowed by load keeps it.
pub const LEASE: Duration = Duration::from_millis(1500);
/// How often a server asks for its lease.
pub const RENEW_EVERY: Duration = Duration::from_millis(250);
/// The leader grants leases only if a quorum acknowledged it at most this long ago (Raft
/// heartbeats go every 150 ms).
const QUORUM_FRESH: Duration = Duration::from_millis(700);
/// A server not heard from for this long is marked down; must be at least LEASE +
/// QUORUM_FRESH (see the module comment).
pub const DOWN_AFTER: Duration = Duration::from_millis(2300);
/// The most a server shown slow is given before it is marked down (`Patience`): a server
/// whose lease requests came seconds apart while it was alive (a starved host) is not
/// failed over for a silence its own history explains. Marking down later is never less
/// safe (see the module comment), only slower.
pub const DOWN_AFTER_MAX: Duration = Duration::from_secs(8);
/// How long a slow gap between a server's lease requests counts toward its patience.
const SLOW_REMEMBERED: Duration = Duration::from_secs(120);
/// How often the leader looks at who it heard from.
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// Moves in progress at once, cluster-wide: each copies a whole partition, and writes to it
/// wait for the new copy meanwhile, so few at a time keeps the service going.
const MOVES_MAX: usize = 2;
/// Most partitions handed to another copy in one map change (`balance_primaries`): each
/// pauses its requests for a lease while the old primary's lease runs out, and a server's
/// share (8 partitions by default) pauses together rather than one after another.
const HANDOVERS_MAX: usize = 8;
/// Hand-overs wait this long after a server was last marked up: a server that flaps (or
/// a cluster still starting) is not given primaries it may lose again at once, and a
/// returning copy finishes its catch-up from the log first. A hand-over while the old
/// primary holds a batch not yet on the new one costs a whole copy of the partition
/// (the new primary takes the newer history), so fewer, later hand-overs are cheaper
/// (Kafka checks its preferred leaders every 5 minutes for the same reason).
const HANDOVER_SETTLE: Duration = Duration::from_secs(60);
/// A server up in the map but not heard for this long (four renewals missed) is not
/// handed primaries for balance.
const QUIET_AFTER: Duration = Duration::from_secs(1);
/// How long a map change may take to commit.
pub(crate) const PROPOSE_TIMEOUT: Duration = Duration::from_secs(5);

const _: () = assert!(DOWN_AFTER.as_millis() > LEASE.as_millis() + QUORUM_FRESH.as_millis());

/// Raft messages travel as `PeerRequest::Raft` to the peer's server endpoint.
pub(crate) struct PoolTransport {
    pub(crate) pool: Arc<Pool>,
}

impl Transport for PoolTransport {
    fn call(
        &self,
        addr: String,
        rpc: RaftRpc,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        let pool = self.pool.clone();
        Box::pin(async move {
            let message = ask::raft(rpc, payload);
            let answer = tokio::time::timeout(
                timeout,
                pool.call_with_timeout(
                    &addr,
                    0,
                    Endpoints::SERVER,
                    &Caller::root(),
                    &message.request,
                    timeout,
                ),
            )
            .await;
            match answer.map(|r| r.and_then(|r| message.answer.of(r))) {
                Ok(Ok(RaftAnswer(bytes))) => Ok(bytes),
                Ok(Err(e)) => Err(format!("{addr}: {e}")),
                Err(_) => Err(format!("{addr}: no answer within {timeout:?}")),
            }
        })
    }
}

/// Until when this server may serve its partitions.
#[derive(Default)]
pub(crate) struct Lease {
    until: Mutex<Option<Instant>>,
    /// Whether the last renewal round found the lease valid (to log changes once).
    held: std::sync::atomic::AtomicBool,
}

impl Lease {
    pub(crate) fn valid(&self) -> bool {
        let g = crate::unpoisoned::lock(&self.until);
        g.is_some_and(|u| Instant::now() < u)
    }

    fn extend(&self, until: Instant) {
        if let Ok(mut g) = self.until.lock() {
            *g = Some(g.map_or(until, |u| u.max(until)));
        }
    }
}

/// What the leader's round asked each server for its partitions' seqs: `None` if it did
/// not answer (it is not asked again in the round).
type SeqsAsked = BTreeMap<NodeId, Option<BTreeMap<PartitionId, Option<u64>>>>;

/// When the leader last heard from each server (lease requests), and when it first saw each
/// in the map (a server just added gets DOWN_AFTER to make itself heard).
#[derive(Default)]
pub(crate) struct Heard {
    at: Mutex<BTreeMap<NodeId, Instant>>,
    listed: Mutex<BTreeMap<NodeId, Instant>>,
    /// When this leader first saw each server down in its map: only a lease request heard
    /// after that brings it back up (`since_down`).
    down_seen: Mutex<BTreeMap<NodeId, Instant>>,
    /// How slow each server's lease requests have come lately (`Patience`).
    patience: Mutex<BTreeMap<NodeId, Patience>>,
    /// The protocol each server's last lease request came over, and when.
    versions: Mutex<BTreeMap<NodeId, (u16, Instant)>>,
}

/// A server's version counts toward the cluster's floor only if heard this recently (a
/// server restarted onto an older release speaks again within it, at its new version).
const FLOOR_FRESH: Duration = Duration::from_millis(600);

/// How long the leader waits for a server's next lease request before marking it down:
/// `DOWN_AFTER`, or twice the longest gap between two of its requests in the last
/// `SLOW_REMEMBERED` (gaps it survived: one that got it marked down does not count), at
/// most `DOWN_AFTER_MAX`. A dead server's requests stopped after a run of regular ones,
/// so it is marked down after `DOWN_AFTER`; a starved one's came late before they came
/// very late, so it is given time (issue 49: on a 2-core host at load 14-33 servers were
/// marked down 18 times in 30 minutes, each a failover of every partition they led).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Patience {
    /// The longest gap of the current window, and when the window began.
    now: Option<(Instant, Duration)>,
    /// The longest gap of the window before.
    before: Duration,
}

impl Patience {
    /// A gap of `gap` between two requests, the later heard at `at`.
    pub(crate) fn gap(&mut self, at: Instant, gap: Duration) {
        if gap > self.allowed(at) {
            // It was (or should have been) marked down for this silence: not a slow
            // server's gap but an absence (a crash and restart, a cut network).
            return;
        }
        let mut p = self.rolled(at);
        p.now = Some(
            p.now
                .map_or((at, gap), |(began, longest)| (began, longest.max(gap))),
        );
        *self = p;
    }

    /// How long a silence is allowed at `at`.
    pub(crate) fn allowed(&self, at: Instant) -> Duration {
        let p = self.rolled(at);
        let longest = p.now.map_or(Duration::ZERO, |(_, l)| l).max(p.before);
        (longest * 2).clamp(DOWN_AFTER, DOWN_AFTER_MAX)
    }

    /// The windows as they stand at `at`: the current one goes on for `SLOW_REMEMBERED`,
    /// then becomes the one before (a new one begins at `at`); both are forgotten after
    /// twice that.
    fn rolled(self, at: Instant) -> Patience {
        match self.now {
            Some((began, _)) if at.saturating_duration_since(began) < SLOW_REMEMBERED => self,
            Some((began, longest)) if at.saturating_duration_since(began) < SLOW_REMEMBERED * 2 => {
                Patience {
                    now: Some((at, Duration::ZERO)),
                    before: longest,
                }
            }
            _ => Patience::default(),
        }
    }
}

impl Heard {
    /// A new leadership began at `since`: the servers of the map it began with count as
    /// listed then (not as just added: `detect` credits them `LEADER_LEASE`).
    fn begin(&self, map: &ClusterMap, since: Instant) {
        if let Ok(mut g) = self.listed.lock() {
            g.clear();
            for n in &map.nodes {
                g.insert(n.id, since);
            }
        }
    }

    /// When this leader first saw `id` in its map.
    fn listed_since(&self, id: NodeId) -> Instant {
        match self.listed.lock() {
            Ok(mut g) => *g.entry(id).or_insert_with(Instant::now),
            Err(_) => Instant::now(),
        }
    }

    fn note(&self, id: NodeId) {
        let now = Instant::now();
        let before = match self.at.lock() {
            Ok(mut g) => g.insert(id, now),
            Err(_) => return,
        };
        if let (Some(before), Ok(mut p)) = (before, self.patience.lock()) {
            p.entry(id).or_default().gap(now, now - before);
        }
    }

    /// Server `id`'s lease request came over a connection of protocol `version`.
    fn speaks(&self, id: NodeId, version: u16) {
        if let Ok(mut g) = self.versions.lock() {
            g.insert(id, (version, Instant::now()));
        }
    }

    /// The protocol every server of `map` was heard speaking within `FLOOR_FRESH` of
    /// `now` (the oldest of them), if every one was.
    fn floor(&self, map: &ClusterMap, now: Instant) -> Option<u16> {
        let g = self.versions.lock().ok()?;
        map.nodes
            .iter()
            .map(|n| match g.get(&n.id) {
                Some(&(v, at)) if now.saturating_duration_since(at) <= FLOOR_FRESH => Some(v),
                _ => None,
            })
            .collect::<Option<Vec<u16>>>()?
            .into_iter()
            .min()
    }

    /// How long server `id` may be silent at `now` before it is marked down.
    fn allowed(&self, id: NodeId, now: Instant) -> Duration {
        self.patience
            .lock()
            .ok()
            .and_then(|p| p.get(&id).map(|p| p.allowed(now)))
            .unwrap_or(DOWN_AFTER)
    }

    fn last(&self, id: NodeId) -> Option<Instant> {
        self.at.lock().ok().and_then(|g| g.get(&id).copied())
    }

    /// Notes which servers `map` has down (from `now` if newly so), forgetting the others.
    fn saw_down(&self, map: &ClusterMap, now: Instant) {
        if let Ok(mut g) = self.down_seen.lock() {
            g.retain(|id, _| map.node(*id).is_some_and(|n| n.state == NodeState::Down));
            for n in &map.nodes {
                if n.state == NodeState::Down {
                    g.entry(n.id).or_insert(now);
                }
            }
        }
    }

    /// When server `id` was last heard, for the detector: a server seen down counts as
    /// heard only from a request after it was seen down. (A server that marked itself
    /// down to stop, `step_down::hand_over`, was heard just before: without this it was
    /// taken as back at once.)
    fn since_down(&self, id: NodeId) -> Option<Instant> {
        let last = self.last(id)?;
        let down = self.down_seen.lock().ok().and_then(|g| g.get(&id).copied());
        match down {
            Some(d) if last <= d => None,
            _ => Some(last),
        }
    }
}

/// This server's member of the cluster-map group: its lease, and (on the leader) the
/// failure detector and the moves. It reads the map the server serves from a watch channel
/// and reaches other servers (itself included) by requests; it never calls into the server
/// process. Maps the group commits reach the process on the channel given to the group.
pub(crate) struct Membership {
    id: NodeId,
    pub(crate) group: myriad_membership::Group,
    pool: Arc<Pool>,
    lease: Lease,
    heard: Heard,
    /// When this leader last marked a server up: hand-overs wait `HANDOVER_SETTLE` after.
    last_return: std::sync::Mutex<Option<Instant>>,
    /// How long a down server keeps its copies before they move elsewhere.
    down_grace: Duration,
    /// The map this server serves under (published by the process).
    map: watch::Receiver<Arc<MapState>>,
    /// This process's own pauses: the leader then judges silence afresh.
    pauses: Pauses,
    /// Servers this leader marked down (committed), for the metrics.
    marked_down: std::sync::atomic::AtomicU64,
}

impl Membership {
    pub(crate) fn new(
        id: NodeId,
        group: myriad_membership::Group,
        pool: Arc<Pool>,
        down_grace: Duration,
        map: watch::Receiver<Arc<MapState>>,
    ) -> Membership {
        Membership {
            id,
            group,
            pool,
            lease: Lease::default(),
            heard: Heard::default(),
            last_return: std::sync::Mutex::new(None),
            down_grace,
            map,
            pauses: Pauses::default(),
            marked_down: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Servers this server marked down while it led the group.
    pub(crate) fn marked_down(&self) -> u64 {
        self.marked_down.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn state(&self) -> Arc<MapState> {
        self.map.borrow().clone()
    }

    /// Why this server may not serve partition requests now, if it may not: `Busy` (try
    /// again: it is starting, or cut off from the Raft majority and about to be replaced).
    pub(crate) fn lease_error(&self) -> Option<WireError> {
        if self.lease.valid() {
            return None;
        }
        tracing::debug!(
            server = %self.id,
            "refusing a request: no lease from the cluster-map leader"
        );
        Some(WireError::Busy)
    }

    /// Leader side of `PeerRequest::Lease` from server `from` at map `epoch`, over a
    /// connection of protocol `version` (the newest both this leader and it speak).
    pub(crate) fn grant_lease(&self, from: NodeId, epoch: u64, version: u16) -> Response {
        self.heard.note(from);
        self.heard.speaks(from, version);
        let Some(map) = self.group.map() else {
            return Response::Lease {
                granted: false,
                epoch: 0,
            };
        };
        let granted =
            self.group.leads_with_quorum(QUORUM_FRESH) && epoch >= map.epoch && map.is_up(from);
        Response::Lease {
            granted,
            epoch: map.epoch,
        }
    }

    /// Asks the leader for a lease; extends ours if granted.
    async fn renew_lease(&self) {
        let sent = Instant::now();
        let st = self.state();
        let answer = match self.group.leader() {
            None => {
                self.note_lease_change();
                return;
            }
            Some(l) if l == u64::from(self.id) => {
                self.grant_lease(self.id, st.map.epoch, myriad_net::newest_protocol())
            }
            Some(l) => {
                let Some(addr) = u32::try_from(l)
                    .ok()
                    .and_then(|l| st.map.node(NodeId(l)))
                    .map(|n| n.addr.clone())
                else {
                    return;
                };
                match self
                    .pool
                    .call_with_timeout(
                        &addr,
                        st.map.epoch,
                        Endpoints::SERVER,
                        &Caller::root(),
                        &Request::Peer(PeerRequest::Lease),
                        RENEW_EVERY * 2,
                    )
                    .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::debug!("lease request to leader {l} failed: {e}");
                        self.note_lease_change();
                        return;
                    }
                }
            }
        };
        if let Response::Lease { granted: true, .. } = answer {
            self.lease.extend(sent + LEASE);
        }
        self.note_lease_change();
    }

    /// Logs when this server starts or stops being allowed to serve.
    fn note_lease_change(&self) {
        let now = self.lease.valid();
        let before = self
            .lease
            .held
            .swap(now, std::sync::atomic::Ordering::Relaxed);
        if now && !before {
            tracing::info!(server = %self.id, "lease granted: serving");
        } else if before && !now {
            tracing::warn!(
                server = %self.id,
                "lease expired (no grant from a Raft leader with a quorum): not serving"
            );
        }
    }

    /// A map change through the group; `Unavailable` if it cannot commit.
    pub(crate) async fn propose_map(&self, map: ClusterMap) -> Result<(), WireError> {
        let epoch = map.epoch;
        self.group
            .propose(map, PROPOSE_TIMEOUT)
            .await
            .map_err(|e| {
                WireError::Unavailable(format!("cluster map change (epoch {epoch}): {e}"))
            })?;
        Ok(())
    }

    /// The leader's periodic work; `since`: when this server became leader.
    async fn lead(&self, since: Instant) {
        let Some(map) = self.group.map() else {
            // A new group: its first map is the one the servers were started with.
            let first = self.state().map.clone();
            tracing::info!(epoch = first.epoch, "committing the initial cluster map");
            if let Err(e) = self.propose_map(first).await {
                tracing::warn!("{e}");
            }
            return;
        };
        let now = Instant::now();
        self.heard.saw_down(&map, now);
        let heard = |id| self.heard.since_down(id);
        let listed = |id| self.heard.listed_since(id);
        let allowed = |id| self.heard.allowed(id, now);
        if let Some((next, change)) = detect(&map, self.id, (since, now), heard, listed, allowed) {
            match change {
                Change::Down { server, silent } => tracing::warn!(
                    server = %server,
                    silent_ms = silent.as_millis() as u64,
                    allowed_ms = allowed(server).as_millis() as u64,
                    epoch = next.epoch,
                    "server silent for longer than it was allowed (no lease request heard): \
                     marking it down (its partitions fail over)"
                ),
                Change::Up { server } => {
                    if let Ok(mut t) = self.last_return.lock() {
                        *t = Some(now);
                    }
                    tracing::info!(
                        server = %server,
                        "server is back: marking it up (it rejoins as a backup)"
                    );
                }
            }
            match self.propose_map(next).await {
                Ok(()) if matches!(change, Change::Down { .. }) => {
                    self.marked_down
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(()) => {}
                Err(e) => tracing::warn!("{e}"),
            }
            // One change per round: the next one starts from the map this one made.
            return;
        }
        if self.raise_floor(&map, now).await {
            return;
        }
        self.group.sync_members(&map, PROPOSE_TIMEOUT).await;
        // Moves (rebalance.rs): finish those whose new copy caught up, then start more.
        let done = self.caught_up_moves(&map).await;
        // A server leaving that has been silent past the grace period was removed gone
        // for good (`myriad node remove`): nobody can ask it about its fragments, which
        // the coding rounds rebuild elsewhere from the others; it need not be kept.
        let gone = silent_past_grace(
            &map,
            NodeState::Leaving,
            (since, now),
            self.down_grace,
            |id| self.heard.last(id),
        );
        let mut keeping = self.keeping_fragments(&map).await;
        keeping.retain(|id| !gone.contains(id));
        if let Some(next) = map.complete_moves(&done, &keeping) {
            tracing::info!(partitions = ?done, epoch = next.epoch, "moves complete");
            if let Err(e) = self.propose_map(next).await {
                tracing::warn!("{e}");
            }
            return;
        }
        // Copies that fell behind while down: in sync again once they hold what their
        // primary holds.
        let synced = self.caught_up_copies(&map).await;
        if let Some(next) = map.caught_up(&synced) {
            tracing::info!(copies = ?synced, epoch = next.epoch, "copies caught up");
            if let Err(e) = self.propose_map(next).await {
                tracing::warn!("{e}");
            }
            return;
        }
        let expired = past_grace(&map, (since, now), self.down_grace, |id| {
            self.heard.last(id)
        });
        if let Some(next) = map.plan_moves(&expired, MOVES_MAX) {
            for (pid, m) in next.moves() {
                if map.partition(pid).is_some_and(|p| p.moving.is_none()) {
                    if m.adds() {
                        tracing::info!(partition = %pid, to = %m.to, "adding a copy");
                    } else {
                        tracing::info!(
                            partition = %pid,
                            from = %m.from,
                            to = %m.to,
                            down_past_grace = expired.contains(&m.from),
                            "moving a copy"
                        );
                    }
                }
            }
            if let Err(e) = self.propose_map(next).await {
                tracing::warn!("{e}");
            }
            return;
        }
        // Primaries even again (primaries.rs): after failovers and returns, a partition led
        // by a server leading more than its share goes to an in-sync copy on one leading less.
        let last_return = self.last_return.lock().ok().and_then(|t| *t);
        let heard = |id| self.heard.last(id);
        if !may_balance(&map, self.id, (since, now), last_return, heard) {
            return;
        }
        if let Some(next) = map.balance_primaries(HANDOVERS_MAX) {
            let handed: Vec<String> = next
                .partitions
                .iter()
                .zip(&map.partitions)
                .filter(|(a, b)| a.replicas.first() != b.replicas.first())
                .map(|(a, b)| {
                    format!(
                        "{}: {:?} -> {:?}",
                        a.id,
                        b.replicas.first(),
                        a.replicas.first()
                    )
                })
                .collect();
            tracing::info!(handed = ?handed, epoch = next.epoch, "primaries handed over for balance");
            if let Err(e) = self.propose_map(next).await {
                tracing::warn!("{e}");
            }
        }
    }

    /// Every server speaks a newer protocol than the floor: raises it (docs/upgrades.md
    /// "The cluster's protocol floor"); servers below it are refused from then on. Only
    /// a floor the map's extension can be written at: below 35 the Raft log keeps none,
    /// and the same raise would be proposed again every round. Whether it proposed one.
    async fn raise_floor(&self, map: &ClusterMap, now: Instant) -> bool {
        let Some(next) = self
            .heard
            .floor(map, now)
            .filter(|f| *f >= myriad_placement::map_wire::MAP_EXT_SINCE)
            .and_then(|f| map.with_protocol_floor(f))
        else {
            return false;
        };
        tracing::info!(
            floor = next.ext.protocol_floor,
            epoch = next.epoch,
            "every server speaks protocol {} or later: the cluster's protocol floor rises \
             (a server older than that is refused from now on)",
            next.ext.protocol_floor
        );
        if let Err(e) = self.propose_map(next).await {
            tracing::warn!("{e}");
        }
        true
    }

    /// The moves of `map` whose new copy holds at least what its primary held just before
    /// (every later write waits for the new copy too, so it then holds every acknowledged
    /// write).
    async fn caught_up_moves(&self, map: &ClusterMap) -> Vec<PartitionId> {
        let moves = map.moves();
        if moves.is_empty() {
            return Vec::new();
        }
        let mut seqs: SeqsAsked = BTreeMap::new();
        let mut done = Vec::new();
        for (pid, m) in moves {
            let Some(primary) = map.primary_of(pid) else {
                continue;
            };
            // Primary first, then the new copy.
            let Some(p) = self.seq_on(map, primary, pid, &mut seqs).await.flatten() else {
                continue;
            };
            if let Some(Some(b)) = self.seq_on(map, m.to, pid, &mut seqs).await
                && b >= p
            {
                done.push(pid);
            }
        }
        done
    }

    /// The behind copies of `map` (`PartitionInfo::behind`) on servers up that hold at
    /// least what their primary held just before (every later write waits for them too).
    async fn caught_up_copies(&self, map: &ClusterMap) -> Vec<(PartitionId, NodeId)> {
        let mut seqs: SeqsAsked = BTreeMap::new();
        let mut synced = Vec::new();
        for p in map.partitions.iter().filter(|p| !p.behind.is_empty()) {
            let Some(primary) = map.primary_of(p.id) else {
                continue;
            };
            let Some(at) = self.seq_on(map, primary, p.id, &mut seqs).await.flatten() else {
                continue;
            };
            for &b in p.behind.iter().filter(|b| map.is_up(**b)) {
                if let Some(Some(seq)) = self.seq_on(map, b, p.id, &mut seqs).await
                    && seq >= at
                {
                    synced.push((p.id, b));
                }
            }
        }
        synced
    }

    /// The leaving servers that still keep erasure-coded fragments (or do not answer): they
    /// stay in the map until their partitions rebuilt them elsewhere (docs/redundancy.md,
    /// "Leaving").
    async fn keeping_fragments(&self, map: &ClusterMap) -> BTreeSet<NodeId> {
        let mut keeping = BTreeSet::new();
        for n in map.nodes.iter().filter(|n| n.state == NodeState::Leaving) {
            let answer = self
                .ask(&n.addr, map.epoch, PeerRequest::KeepsFragments)
                .await;
            if !matches!(answer, Some(Response::Bool(false))) {
                keeping.insert(n.id);
            }
        }
        keeping
    }

    /// One question of the leader's round to a server: its answer within two renewal
    /// periods, connecting included, or `None`.
    async fn ask(&self, addr: &str, epoch: u64, req: PeerRequest) -> Option<Response> {
        let limit = RENEW_EVERY * 2;
        let (caller, req) = (Caller::root(), Request::Peer(req));
        let call =
            self.pool
                .call_with_timeout(addr, epoch, Endpoints::SERVER, &caller, &req, limit);
        tokio::time::timeout(limit, call).await.ok()?.ok()
    }

    /// Partition `pid`'s seq on `server` (asked once per round per server: one that does
    /// not answer is not asked again for each of its partitions, which made a round with a
    /// silent primary of 16 partitions take 8 s and held up the failure detector).
    async fn seq_on(
        &self,
        map: &ClusterMap,
        server: NodeId,
        pid: PartitionId,
        cache: &mut SeqsAsked,
    ) -> Option<Option<u64>> {
        if let std::collections::btree_map::Entry::Vacant(slot) = cache.entry(server) {
            // This server too is asked by request: membership does not call into the
            // process that runs it.
            let seqs = {
                let addr = map.node(server)?.addr.clone();
                match self.ask(&addr, map.epoch, PeerRequest::PartitionSeqs).await {
                    Some(Response::Seqs(s)) => Some(s.into_iter().collect()),
                    _ => None,
                }
            };
            slot.insert(seqs);
        }
        cache.get(&server)?.as_ref()?.get(&pid).copied()
    }
}

/// Starts the membership tasks: renewing the lease, and the leader's duties.
/// A change of a server's state the leader's failure detector decided.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Down { server: NodeId, silent: Duration },
    Up { server: NodeId },
}

/// The failure detector, one round (pure: times and what was heard come in). `since`: when
/// this leader began leading; a server it has not heard counts as silent from
/// `since - LEADER_LEASE` (no earlier leader granted a lease after that, less QUORUM_FRESH:
/// module comment); `heard(id)`: when the leader last heard server `id`'s lease request;
/// `listed(id)`: when it first saw `id` in its map (a server added after `since` gets
/// `DOWN_AFTER` from then to make itself heard); `allowed(id)`: how long `id` may be silent
/// (`Patience`: `DOWN_AFTER`, longer for a server shown slow). At most one change a round,
/// in server order: a server up but silent for longer than allowed goes down (never the
/// leader itself); a
/// server down that asked for a lease within the last three renewal periods, after this
/// leader began, comes back up.
pub(crate) fn detect(
    map: &ClusterMap,
    me: NodeId,
    (since, now): (Instant, Instant),
    heard: impl Fn(NodeId) -> Option<Instant>,
    listed: impl Fn(NodeId) -> Instant,
    allowed: impl Fn(NodeId) -> Duration,
) -> Option<(ClusterMap, Change)> {
    let mut nodes: Vec<_> = map.nodes.iter().collect();
    nodes.sort_by_key(|n| n.id);
    let credited = since
        .checked_sub(myriad_membership::LEADER_LEASE)
        .unwrap_or(since);
    for n in nodes {
        let last = heard(n.id);
        let listed_at = listed(n.id);
        let floor = if listed_at > since {
            listed_at
        } else {
            credited
        };
        let silent_since = last.map_or(floor, |h| h.max(floor));
        // A server leaving that still holds copies is failed over as any other: left
        // leaving (up, to the map) it would stay primary and backup of its partitions,
        // and their writes would wait for it until the drain ends, which it never would.
        // (Its drain is then over: its copies are made again after the grace period.) One
        // holding nothing leaves the map as it is.
        let watched = match n.state {
            NodeState::Up => true,
            NodeState::Leaving => map.partitions.iter().any(|p| p.replicas.contains(&n.id)),
            NodeState::Down => false,
        };
        match n.state {
            _ if watched && n.id != me && now - silent_since > allowed(n.id) => {
                let next = map.mark_down(n.id)?;
                let silent = now - silent_since;
                return Some((
                    next,
                    Change::Down {
                        server: n.id,
                        silent,
                    },
                ));
            }
            NodeState::Down if last.is_some_and(|h| h > since && now - h < RENEW_EVERY * 3) => {
                let next = map.mark_up(n.id)?;
                return Some((next, Change::Up { server: n.id }));
            }
            _ => {}
        }
    }
    None
}

/// Whether a sleep of `slept` that began at `began` and woke at `woke` woke so late that
/// this process stood still (SIGSTOP, a paused VM, a starved host) for long enough that
/// its own pause, not the others', explains what the leader did not hear: half of
/// `DOWN_AFTER`. The lateness of a bare sleep, never a round's length: a round waits on
/// the network (a silent server's timeouts), and taking a slow round for a pause kept a
/// silent server from ever being marked down (each 8 s round reset the judging).
pub(crate) fn paused(began: Instant, slept: Duration, woke: Instant) -> Option<Duration> {
    let late = woke.saturating_duration_since(began).saturating_sub(slept);
    (late > DOWN_AFTER / 2).then_some(late)
}

/// The pauses of this process, as a task that only sleeps sees them (`paused`).
#[derive(Default)]
pub(crate) struct Pauses {
    /// When the last pause ended, and how long it was.
    last: Mutex<Option<(Instant, Duration)>>,
}

impl Pauses {
    fn note(&self, ended: Instant, long: Duration) {
        if let Ok(mut g) = self.last.lock() {
            *g = Some((ended, long));
        }
    }

    /// The last pause, if it ended after `after`: how long it was.
    pub(crate) fn ended_after(&self, after: Instant) -> Option<Duration> {
        let g = self.last.lock().ok()?;
        g.filter(|(ended, _)| *ended > after).map(|(_, long)| long)
    }

    /// Sleeps `CHECK_EVERY` again and again, noting each wake-up that came too late.
    async fn watch(&self) {
        loop {
            let began = Instant::now();
            tokio::time::sleep(CHECK_EVERY).await;
            let woke = Instant::now();
            if let Some(long) = paused(began, CHECK_EVERY, woke) {
                self.note(woke, long);
            }
        }
    }
}

/// Whether the leader (`me`, leading since `since`) may hand primaries over for balance
/// at `now`. Not within `HANDOVER_SETTLE` of the last return it saw, nor of its own
/// election: a new leader does not know when servers last returned, and a rolling restart
/// makes a new leader at each restart of the old one (new leaders handed primaries over at
/// once, batch after batch, each a lease's pause for its partitions and some a whole copy:
/// writes waited 2.3 s). Nor while a server up in the map has been quiet for
/// `QUIET_AFTER`: it may be failing (one cut off by a network split was handed primaries
/// it could not serve until it was marked down).
pub(crate) fn may_balance(
    map: &ClusterMap,
    me: NodeId,
    (since, now): (Instant, Instant),
    last_return: Option<Instant>,
    heard: impl Fn(NodeId) -> Option<Instant>,
) -> bool {
    let settled = |t: Instant| now.saturating_duration_since(t) >= HANDOVER_SETTLE;
    let quiet = map.nodes.iter().any(|n| {
        n.id != me && map.is_up(n.id) && silent_for(heard(n.id), (since, now)) > QUIET_AFTER
    });
    settled(since) && last_return.is_none_or(settled) && !quiet
}

/// The servers down for longer than `grace` (their copies are then made elsewhere).
pub(crate) fn past_grace(
    map: &ClusterMap,
    (since, now): (Instant, Instant),
    grace: Duration,
    heard: impl Fn(NodeId) -> Option<Instant>,
) -> BTreeSet<NodeId> {
    silent_past_grace(map, NodeState::Down, (since, now), grace, heard)
}

/// How long a server last heard at `heard` has been silent at `now`, as this leader
/// (leading since `since`) counts: from `since` at the earliest.
fn silent_for(heard: Option<Instant>, (since, now): (Instant, Instant)) -> Duration {
    now.saturating_duration_since(heard.map_or(since, |h| h.max(since)))
}

/// The servers in `state` silent past `grace` (by this leader's hearing, counted from
/// `since` at the earliest).
pub(crate) fn silent_past_grace(
    map: &ClusterMap,
    state: NodeState,
    (since, now): (Instant, Instant),
    grace: Duration,
    heard: impl Fn(NodeId) -> Option<Instant>,
) -> BTreeSet<NodeId> {
    map.nodes
        .iter()
        .filter(|n| n.state == state)
        .filter(|n| silent_for(heard(n.id), (since, now)) > grace)
        .map(|n| n.id)
        .collect()
}

pub(crate) fn start_tasks(membership: &Arc<Membership>) -> Vec<JoinHandle<()>> {
    let renewer = {
        let m = membership.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RENEW_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                m.renew_lease().await;
            }
        })
    };
    let leader = {
        let m = membership.clone();
        tokio::spawn(async move {
            let mut since: Option<Instant> = None;
            let mut tick = tokio::time::interval(CHECK_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_round = Instant::now();
            loop {
                tick.tick().await;
                let now = Instant::now();
                if let Some(long) = m.pauses.ended_after(last_round)
                    && since.is_some()
                {
                    // This leader itself stood still (SIGSTOP, a VM paused, a loaded host):
                    // what it heard is as old as the pause, and the lease requests sent
                    // meanwhile are still unread. It judges silence afresh from now, as a
                    // new leader would (only later than before: never less safe), instead
                    // of marking every server down for its own pause.
                    tracing::warn!(
                        paused_ms = long.as_millis() as u64,
                        "this leader was paused: judging who is silent afresh"
                    );
                    since = None;
                }
                last_round = now;
                if m.group.is_leader() {
                    let s = match since {
                        Some(s) => s,
                        None => {
                            let s = Instant::now();
                            if let Some(map) = m.group.map() {
                                m.heard.begin(&map, s);
                            }
                            *since.insert(s)
                        }
                    };
                    m.lead(s).await;
                } else {
                    since = None;
                }
            }
        })
    };
    let pauses = {
        let m = membership.clone();
        tokio::spawn(async move { m.pauses.watch().await })
    };
    vec![renewer, leader, pauses]
}

#[cfg(test)]
mod tests;
