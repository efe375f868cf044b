//! `Client`: the native client's state (maps, shard maps, connections, leases, changes in
//! flight) and the one path every request takes: `call` wraps changes to be sent exactly
//! once and keeps lease bookkeeping, `route_with` picks the partition and retries
//! redirects, stale maps and busy servers. Its calls by family are in `client/`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use myriad_net::{Pool, PoolConfig};

use myriad_net::Transport;
use myriad_placement::{
    ClusterMap, NodeId, PartitionId, Ring, ShardCache, name_hash, parent_of, split_parent,
};
use myriad_proto::InodeId;
use myriad_proto::auth::Keyring;
use myriad_proto::reply::{Ask, Reply};
use myriad_proto::{
    Caller, Endpoints, FileKind, FsError, Inode, PeerKind, Request, Response, WireError,
    validate_path,
};
use myriad_proto::{ClientRequest, Envelope, OnceId, SentOnce};

/// Page size for readdir: large pages make `ls -l` of N entries cost N / 1024 requests.
pub const READDIR_PAGE: u32 = 1024;
/// A request unanswered this long makes the client ask the other servers whether its
/// partition has another primary now (`primary_moved`): a host that died without closing
/// its connections is otherwise waited for until the request's deadline. A failover takes
/// 2-3 s (the leader's `DOWN_AFTER`), so this adds at most half a second to it.
const STALL_ASK_AFTER: Duration = Duration::from_millis(500);
/// How long one server may take to tell its map when looking for a newer one.
const MAP_ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// `ClientConfig` defaults: a request's whole budget (retries included; long enough to ride
/// out a failover) and the time to connect to one server.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub map: ClusterMap,
    pub caller: Caller,
    /// The cluster's client key or secret (SECURITY.md): proven to every server.
    pub keys: Arc<Keyring>,
    /// Deadline of one request; also bounds retries of a busy entry.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// This client's id in the outcomes servers keep of changes (`OnceId::client`):
    /// random, so that two clients never share one (a simulation sets its own).
    pub id: u64,
    /// Changes are answered once durable on every copy (true, the default), or once
    /// applied on their primary, durable at the next `sync_changes` (a mount: durability
    /// at fsync, docs/fuse.md "Durability").
    pub durable_changes: bool,
    /// Keep names and attributes under directory leases, answering from them while the
    /// servers have not recalled them (docs/fuse.md "Directory leases"). Off by default.
    pub leases: bool,
    /// Answer from the metadata indexes of frozen trees (docs/metadata-index.md); only
    /// with `leases`. Off by default.
    pub indexes: bool,
    /// Where loaded indexes are kept on local disk for the next client (`None`: not).
    pub index_cache_dir: Option<std::path::PathBuf>,
    /// The zone this client is in (docs/zones.md; `""`: not known): told to servers for
    /// their traffic counters, and reads go to a copy in it when one is in sync.
    pub zone: String,
}

impl ClientConfig {
    #[must_use]
    pub fn new(map: ClusterMap, caller: Caller, keys: Keyring) -> ClientConfig {
        ClientConfig {
            map,
            caller,
            keys: Arc::new(keys),
            // Long enough to ride out a failover (a dead server is marked down after 5 s).
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            id: rand::random::<u64>().max(1),
            durable_changes: true,
            leases: false,
            indexes: false,
            index_cache_dir: None,
            zone: String::new(),
        }
    }
}

pub(crate) struct MapState {
    pub(crate) map: ClusterMap,
    ring: Ring,
}

pub(crate) use crate::route::Route;

/// What a caller knows of the parents of the path it names, for the answer to a name not
/// found (`Client::refine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parents {
    /// Nothing: a `NotFound` is checked for an ancestor that is not a directory
    /// (`NotADirectory`, as POSIX requires; extra requests on that error path only).
    Checked,
    /// They are directories (a FUSE lookup: the kernel looks names up only in
    /// directories): `NotFound` stands, at no cost (every `open(O_CREAT)` and `mkdir`
    /// looks its name up first).
    Directories,
}

/// A client: a handle on the state all its callers share (`Shared`, reached through
/// `Deref`) acting for one caller, whose identity its requests carry. `Client::new` acts
/// for the configured caller; `for_caller` makes a handle acting for another, sharing all
/// the rest (a FUSE mount makes one per kernel request, the S3 gateway one per signed
/// request). The caller is a value of the handle, not of the task that uses it.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    /// `None`: the configured caller (`config.caller`).
    caller: Option<Caller>,
    /// A handle of `for_caller`: the parent directory's attributes the last change of
    /// entries made through it brought back (`take_parent_attrs`), cleared by every other
    /// change of entries, so nothing older than its last change is ever taken.
    parent: Option<Arc<ParentSlot>>,
}

/// The parent directory's attributes a handle's last change of entries brought back: the
/// directory's path and its attributes.
type ParentSlot = std::sync::Mutex<Option<(String, Inode)>>;

impl std::ops::Deref for Client {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// What every caller of one client shares: maps, connections, leases, changes in flight.
pub struct Shared {
    state: RwLock<Arc<MapState>>,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) config: ClientConfig,
    /// Shard maps of the split directories met (docs/huge-dirs.md).
    pub(crate) shards: ShardCache,
    /// Capabilities for the chunks of files read or written (`file.rs`).
    pub(crate) caps: crate::caps::Caps,
    /// Numbers of this client's changes (`OnceId`): the next one, and those still waiting
    /// for an answer.
    changes: std::sync::Mutex<Changes>,
    /// Changes of this client answered once applied and not yet known durable
    /// (`durable_changes` off), kept to be sent again if their primary dies (`held.rs`).
    pub(crate) held: crate::held_state::Held,
    /// Directory leases and what they cover (`config.leases`).
    pub(crate) leases: Arc<crate::leases::Leases>,
    /// The file locks this client holds (`file_locks.rs`).
    pub(crate) held_locks: crate::held_locks::HeldLocks,
    /// The metadata indexes met (`index.rs`).
    pub(crate) indexes: Arc<crate::index_state::Indexes>,
    /// Reads of coded chunks that had to decode (a fragment failed): `fragments.rs`.
    pub(crate) degraded_reads: std::sync::atomic::AtomicU64,
    /// Entries answered with no request (`answered_locally`): from a lease, from an index.
    pub(crate) answered_by_lease: std::sync::atomic::AtomicU64,
    pub(crate) answered_by_index: std::sync::atomic::AtomicU64,
    /// When this client last changed each directory (`changed_lately`).
    pub(crate) recent_changes: crate::recent_changes::RecentChanges,
    /// Copies that did not answer a nearest read (`nearest.rs`), until when reads skip them.
    pub(crate) copies_avoided:
        std::sync::Mutex<std::collections::BTreeMap<NodeId, tokio::time::Instant>>,
}

#[derive(Default)]
struct Changes {
    next: u64,
    waiting: std::collections::BTreeSet<u64>,
    /// Changes held until durable (`held.rs`): their outcomes must stay on the servers
    /// (a resend of one that survived is answered by it), so they hold `low` down too.
    held: std::collections::BTreeSet<u64>,
}

/// A change's place among those waiting (`Client::once`), given up when its call ends.
pub(crate) struct Waiting<'a> {
    client: &'a Client,
    seq: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut g = match self.client.changes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.waiting.remove(&self.seq);
    }
}

impl Client {
    pub fn new(config: ClientConfig) -> Result<Client, FsError> {
        let pool = Pool::new(PoolConfig {
            me: PeerKind::Client,
            zone: config.zone.clone(),
            keys: config.keys.clone(),
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
        });
        Client::with_transport(config, Arc::new(pool))
    }

    /// A client that reaches servers through `transport` (a simulated network, for one).
    pub fn with_transport(
        config: ClientConfig,
        transport: Arc<dyn Transport>,
    ) -> Result<Client, FsError> {
        config
            .map
            .validate()
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
        let ring = config.map.ring();
        let shared = Shared {
            state: RwLock::new(Arc::new(MapState {
                map: config.map.clone(),
                ring,
            })),
            transport,
            shards: ShardCache::default(),
            caps: crate::caps::Caps::default(),
            changes: std::sync::Mutex::new(Changes {
                next: 1,
                waiting: std::collections::BTreeSet::new(),
                held: std::collections::BTreeSet::new(),
            }),
            held: crate::held_state::Held::default(),
            leases: Arc::new(crate::leases::Leases::new(config.id)),
            held_locks: crate::held_locks::HeldLocks::default(),
            indexes: Arc::default(),
            degraded_reads: std::sync::atomic::AtomicU64::new(0),
            answered_by_lease: std::sync::atomic::AtomicU64::new(0),
            answered_by_index: std::sync::atomic::AtomicU64::new(0),
            recent_changes: crate::recent_changes::RecentChanges::default(),
            copies_avoided: std::sync::Mutex::default(),
            config,
        };
        Ok(Client {
            shared: Arc::new(shared),
            caller: None,
            parent: None,
        })
    }

    /// A handle on this client acting for `caller`: every request made through it
    /// carries that identity, and leases and indexes answer it by that identity's
    /// permissions.
    #[must_use]
    pub fn for_caller(&self, caller: Caller) -> Client {
        Client {
            shared: self.shared.clone(),
            caller: Some(caller),
            parent: Some(Arc::default()),
        }
    }

    /// A handle on this client acting for its configured caller (`config.caller`), for
    /// what the client does for itself whoever asked (reading an index's registry).
    #[must_use]
    pub fn as_itself(&self) -> Client {
        Client {
            shared: self.shared.clone(),
            caller: None,
            parent: None,
        }
    }

    /// The caller this handle acts for (`for_caller`), else the configured one.
    pub(crate) fn acting_caller(&self) -> &Caller {
        self.caller.as_ref().unwrap_or(&self.config.caller)
    }

    /// The partition holding the entry `path` under the current map.
    pub(crate) fn entry_partition(&self, path: &str) -> PartitionId {
        let st = self.st();
        self.partition_for(&st, &Route::Entry(path.to_string()))
    }

    /// The partition keeping the file locks of `ino` under the current map.
    pub(crate) fn locks_partition(&self, ino: InodeId) -> PartitionId {
        self.st().ring.owner_of_locks(ino)
    }

    /// The home partition of directory `path` under the current map.
    pub(crate) fn dir_home(&self, path: &str) -> PartitionId {
        self.st().ring.owner_of_dir(path)
    }

    pub(crate) fn st(&self) -> Arc<MapState> {
        match self.state.read() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    #[must_use]
    pub fn map(&self) -> ClusterMap {
        self.st().map.clone()
    }

    #[must_use]
    pub fn caller(&self) -> &Caller {
        &self.config.caller
    }

    pub(crate) fn adopt(&self, map: ClusterMap) -> bool {
        if map.validate().is_err() {
            return false;
        }
        let Ok(mut g) = self.state.write() else {
            return false;
        };
        if map.epoch <= g.map.epoch {
            return false;
        }
        tracing::debug!(epoch = map.epoch, "client adopted newer cluster map");
        let ring = map.ring();
        *g = Arc::new(MapState { map, ring });
        true
    }

    /// The partition a request along `route` is for (`SERVER` for the server itself).
    pub(crate) fn partition_for(&self, st: &MapState, route: &Route) -> PartitionId {
        match route {
            Route::Entry(p) if p == "/" => st.ring.owner_of_dir(p),
            Route::Entry(p) => {
                let (dir, name) = split_parent(p);
                st.ring
                    .owner_of_shard(dir, self.shards.leaf_for(dir, name_hash(name)))
            }
            Route::Shard(dir, hash) => st
                .ring
                .owner_of_shard(dir, self.shards.leaf_for(dir, *hash)),
            Route::Chunk(ino, c) => st.ring.owner_of_chunk(*ino, *c),
            Route::Locks(ino) => st.ring.owner_of_locks(*ino),
            Route::Partition(p) | Route::Copy(_, p) => *p,
            Route::Server(_) => PartitionId::SERVER,
        }
    }

    /// The address of the server a request along `route` goes to under `st`.
    pub(crate) fn address_of(st: &MapState, route: &Route, target: PartitionId) -> Option<String> {
        Self::address(st, route, target).ok().map(|(a, _)| a)
    }

    /// The address and endpoints of a request along `route` under `st`.
    fn address(
        st: &MapState,
        route: &Route,
        target: PartitionId,
    ) -> Result<(String, Endpoints), WireError> {
        match route {
            Route::Server(n) => st
                .map
                .node(*n)
                .map(|info| (info.addr.clone(), Endpoints::SERVER))
                .ok_or_else(|| {
                    WireError::Unavailable(format!("server {n} is not in the cluster map"))
                }),
            Route::Copy(n, p) => st
                .map
                .node(*n)
                .map(|info| (info.addr.clone(), Endpoints::to(*p)))
                .ok_or_else(|| {
                    WireError::Unavailable(format!("server {n} is not in the cluster map"))
                }),
            _ => st
                .map
                .partition_addr(target)
                .map(|a| (a.to_string(), Endpoints::to(target)))
                .ok_or_else(|| {
                    WireError::Unavailable(format!("partition {target} is not in the cluster map"))
                }),
        }
    }

    /// Sends `req` to the node `route` names under the current map, following redirects,
    /// pushing our map to nodes that are behind, and retrying `Busy` until the deadline.
    pub(crate) async fn call(&self, route: Route, req: Request) -> Result<Response, FsError> {
        // A change gets its number once; every retry below sends that same number.
        let stale = match &req {
            Request::Client(Envelope::Alone(c)) if self.config.leases => {
                crate::leases::changed_paths(c)
            }
            _ => crate::leases::Stale::default(),
        };
        let (paths, subtree) = (&stale.paths, stale.subtree);
        if self.leases.journal.busy()
            && let Request::Client(
                Envelope::Alone(c)
                | Envelope::Leased { request: c, .. }
                | Envelope::ReadAs { request: c, .. },
            ) = &req
        {
            self.drain_before(c, paths, subtree).await?;
        }
        // This client's reads name it: they pass its own exclusive leases.
        let req = match req {
            Request::Client(Envelope::Alone(c)) if self.config.leases && c.read_dir().is_some() => {
                Request::Client(Envelope::ReadAs {
                    holder: self.leases.holder,
                    request: c,
                })
            }
            other => other,
        };
        // What this client changes is not answered from its leases, before or after.
        let forget = || {
            if !paths.is_empty() {
                self.leases.forget_change(&stale);
            }
        };
        forget();
        self.recent_changes.note(paths);
        // A change of one name whose answer is the name's new attributes: kept under
        // the directory's lease if it lasted through the change (`Leases::put_own`).
        let own = match (&req, paths.as_slice()) {
            (Request::Client(Envelope::Alone(c)), [path])
                if !subtree && c.change().is_some_and(|c| c.answers_attributes) =>
            {
                let dir = split_parent(path).0;
                Some((path.clone(), self.leases.before_own_change(dir)))
            }
            _ => None,
        };
        let (req, _waiting) = match req {
            Request::Client(Envelope::Alone(c)) if c.is_change() => {
                let (id, waiting) = self.once();
                // Reserved inode numbers are used behind the client's back: they must
                // outlive a failover.
                let visible =
                    !self.config.durable_changes && !matches!(c, ClientRequest::ReserveIds { .. });
                if visible {
                    // Back-pressure: at their bound, held changes are made durable first.
                    let deadline = tokio::time::Instant::now() + self.config.request_timeout;
                    self.make_room(deadline).await?;
                }
                let once = Envelope::Once(SentOnce {
                    id,
                    request: c,
                    visible,
                });
                (Request::Client(once), Some(waiting))
            }
            other => {
                if matches!(other, Request::Client(_)) {
                    let sent = &self.indexes.server_reads;
                    sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                (other, None)
            }
        };
        // Routing signals are the client library's business, never its callers' (they see
        // errnos and the three "try again" errors: `FsError`, not `WireError`).
        let answer = self.route(route, req).await.map_err(FsError::from);
        forget();
        if let (
            Some((path, own)),
            Ok(Response::Attr(i) | Response::Changed { inode: Some(i), .. }),
        ) = (own, &answer)
        {
            let entry = crate::leases::Entry::attrs(self.acting_caller().clone(), i.clone());
            let partition = self.entry_partition(&path);
            self.leases
                .put_own(split_parent(&path), partition, entry, own);
        }
        answer
    }

    /// Whether this client changed entries of a directory at or below `root` within
    /// `within` (sent, or answered behind): a mount does not index such a tree
    /// automatically while it writes there itself.
    pub fn changed_lately(&self, root: &str, within: std::time::Duration) -> bool {
        self.recent_changes.below(root, within)
    }

    /// The id of a new change, which waits (holding `low` down) until its guard drops.
    pub(crate) fn once(&self) -> (OnceId, Waiting<'_>) {
        let mut g = match self.changes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let seq = g.next;
        g.next += 1;
        g.waiting.insert(seq);
        let low = match (g.waiting.first(), g.held.first()) {
            (Some(&w), Some(&h)) => w.min(h),
            (Some(&l), None) | (None, Some(&l)) => l,
            (None, None) => seq,
        };
        let id = OnceId {
            client: self.config.id,
            seq,
            low,
        };
        (id, Waiting { client: self, seq })
    }

    /// Change `seq` is held until durable: its outcome must stay on the servers.
    pub(crate) fn keep_low(&self, seq: u64) {
        let mut g = match self.changes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.held.insert(seq);
    }

    /// Change `seq` is durable (or given up): its outcome may be forgotten.
    pub(crate) fn release_low(&self, seq: u64) {
        let mut g = match self.changes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.held.remove(&seq);
    }

    /// Turns a `NotFound` into `NotADirectory` when an ancestor is not a directory, as POSIX
    /// requires. Costs extra requests only on the error path.
    pub(crate) async fn refine(&self, path: &str, err: FsError) -> FsError {
        self.refine_under(path, err, Parents::Checked).await
    }

    /// `refine`, knowing what `parents` says of the path's parents.
    pub(crate) async fn refine_under(&self, path: &str, err: FsError, parents: Parents) -> FsError {
        if err != FsError::NotFound || parents == Parents::Directories {
            return err;
        }
        let mut p = parent_of(path).to_string();
        while p != "/" {
            match self
                .call(
                    Route::Entry(p.clone()),
                    myriad_proto::Request::from(ClientRequest::Stat { path: p.clone() }),
                )
                .await
            {
                Ok(Response::Attr(i)) if i.kind != FileKind::Directory => {
                    return FsError::NotADirectory;
                }
                Ok(_) => return FsError::NotFound,
                Err(_) => p = parent_of(&p).to_string(),
            }
        }
        FsError::NotFound
    }

    /// `call` of an ask (`myriad_proto::ask`): the reply it asked for.
    pub(crate) async fn ask<R: Reply, Q: Into<Request>>(
        &self,
        route: Route,
        ask: Ask<R, Q>,
    ) -> Result<R, FsError> {
        let r = self.call(route, ask.request.into()).await?;
        ask.answer.of(r)
    }

    /// `entry_op` of an ask: the reply it asked for.
    pub(crate) async fn entry_ask<R: Reply>(&self, path: &str, ask: Ask<R>) -> Result<R, FsError> {
        let r = self.entry_op(path, Request::from(ask.request)).await?;
        ask.answer.of(r)
    }

    pub(crate) async fn entry_op(&self, path: &str, req: Request) -> Result<Response, FsError> {
        self.entry_op_under(path, req, Parents::Checked).await
    }

    /// `entry_op`, knowing what `parents` says of the path's parents.
    pub(crate) async fn entry_op_under(
        &self,
        path: &str,
        req: Request,
        parents: Parents,
    ) -> Result<Response, FsError> {
        validate_path(path)?;
        match self.call(Route::Entry(path.to_string()), req).await {
            Err(e) => Err(self.refine_under(path, e, parents).await),
            Ok(r) => {
                self.note_parent(path, &r);
                Ok(r)
            }
        }
    }

    /// Keeps the parent's attributes a change of entries brought back, in this handle
    /// (`for_caller`); any other answer clears what was kept.
    pub(crate) fn note_parent(&self, path: &str, r: &Response) {
        let kept = match r {
            Response::Changed {
                parent: Some(p), ..
            } => Some((
                myriad_placement::split_parent(path).0.to_string(),
                p.clone(),
            )),
            _ => None,
        };
        if let Some(slot) = &self.parent {
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = kept;
        }
    }

    /// The attributes of directory `dir` as the servers sent them back with the last
    /// change of entries made through this handle (`for_caller`), if that change was in
    /// `dir` (create, symlink, mknod, mkdir, unlink, rmdir): its new times and link count,
    /// with no request. Taken once.
    pub fn take_parent_attrs(&self, dir: &str) -> Option<Inode> {
        let slot = self.parent.as_ref()?;
        let mut slot = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.take() {
            Some((d, attrs)) if d == dir => Some(attrs),
            _ => None,
        }
    }
}

pub(crate) mod cluster;
mod drain_scope;
mod leased;
mod maps;
mod namespace;
mod pacing;
pub(crate) mod quotas;
mod recorded;
mod routing;
mod tries;

pub(crate) use tries::Tries;
#[cfg(test)]
mod tests;
