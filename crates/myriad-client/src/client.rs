use std::sync::{Arc, RwLock};
use std::time::Duration;

use myriad_net::{Pool, PoolConfig};

use myriad_net::Transport;
use myriad_placement::{
    ClusterMap, NodeId, PartitionId, Ring, ShardCache, ShardMap, name_hash, parent_of, split_parent,
};
use myriad_proto::InodeId;
use myriad_proto::auth::Keyring;
use myriad_proto::{AdminRequest, ClientRequest, OnceId, ServerRequest};
use myriad_proto::{
    Caller, CounterSnapshot, Endpoints, FileKind, FsError, Inode, PeerKind, RenameFlags, Request,
    Response, SetAttr, StatFs, XattrMode, limits, validate_path,
};

/// Retries after redirects or `MapTooOld` before giving up (each one means the map changed).
const MAP_RETRIES_MAX: u32 = 5;
/// Page size for readdir: large pages make `ls -l` of N entries cost N / 1024 requests.
pub const READDIR_PAGE: u32 = 1024;
/// Waits between tries of a request answered `Busy` (or `WrongShard`): short at first (a
/// pending entry usually resolves within a round trip), doubling to this cap.
const BUSY_BACKOFF_FIRST: Duration = Duration::from_millis(1);
const BUSY_BACKOFF_MAX: Duration = Duration::from_millis(100);
/// At least this long before asking a server that redirected without a newer map again (it
/// is behind a map change it will learn through the Raft group).
const REDIRECT_WAIT_MIN: Duration = Duration::from_millis(10);
/// Waits between tries of a partition that is unavailable (its server dead, a failover
/// under way, typically seconds): doubling to the cap, within the request's deadline.
/// A request unanswered this long makes the client ask the other servers whether its
/// partition has another primary now (`primary_moved`): a host that died without closing
/// its connections is otherwise waited for until the request's deadline. A failover takes
/// 2-3 s (the leader's `DOWN_AFTER`), so this adds at most half a second to it.
const STALL_ASK_AFTER: Duration = Duration::from_millis(500);
const DOWN_BACKOFF_FIRST: Duration = Duration::from_millis(50);
const DOWN_BACKOFF_MAX: Duration = Duration::from_millis(200);
/// How long a request to a partition no copy of which is up in the client's map keeps
/// asking for a newer map (a paused server is marked up again within a second of its
/// return) before it fails.
const NO_COPY_WAIT: Duration = Duration::from_secs(2);
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

tokio::task_local! {
    /// Inside `Client::in_known_directory`: the parent of every path is known to be a
    /// directory, so a `NotFound` needs no refining (`refine`).
    static PARENT_IS_DIR: ();
    /// The identity of the requests made inside `Client::as_caller` (a FUSE mount acts for
    /// whichever user made each system call).
    static CALLER: Caller;
    /// Inside `as_caller`: the parent directory's attributes the last change of entries
    /// made in this task brought back (`take_parent_attrs`), cleared by every other
    /// change of entries, so nothing older than the task's last change is ever taken.
    static PARENT: std::cell::RefCell<Option<(String, Inode)>>;
    /// Inside `Client::to_write_in`: listings ask for exclusive leases.
    static EXCLUSIVE: ();
}

pub struct Client {
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
    pub(crate) indexes: Arc<crate::indexes::Indexes>,
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
        Ok(Client {
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
        })
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

    /// Runs `fut` knowing that the parents of the paths it names are directories (a FUSE
    /// lookup: the kernel looks names up only in directories), so that a name not found
    /// costs no requests to tell ENOENT from ENOTDIR (one per missing name: every
    /// `open(O_CREAT)` and `mkdir` looks its name up first).
    pub async fn in_known_directory<F: std::future::Future>(fut: F) -> F::Output {
        PARENT_IS_DIR.scope((), fut).await
    }

    /// Runs `fut` (a listing of a directory about to be filled: a mount lists each one
    /// it makes) asking for exclusive leases, under which this client's changes of the
    /// directory are answered at once and sent behind (docs/fuse.md "Write-behind").
    pub async fn to_write_in<F: std::future::Future>(fut: F) -> F::Output {
        EXCLUSIVE.scope((), fut).await
    }

    pub(crate) fn wants_exclusive() -> bool {
        EXCLUSIVE.try_with(|()| ()).is_ok()
    }

    /// Runs `fut` with every request it makes carrying `caller` instead of the configured one.
    pub async fn as_caller<F: std::future::Future>(caller: Caller, fut: F) -> F::Output {
        CALLER
            .scope(caller, PARENT.scope(std::cell::RefCell::new(None), fut))
            .await
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
    ) -> Result<(String, Endpoints), FsError> {
        match route {
            Route::Server(n) => st
                .map
                .node(*n)
                .map(|info| (info.addr.clone(), Endpoints::SERVER))
                .ok_or_else(|| {
                    FsError::Unavailable(format!("server {n} is not in the cluster map"))
                }),
            Route::Copy(n, p) => st
                .map
                .node(*n)
                .map(|info| (info.addr.clone(), Endpoints::to(*p)))
                .ok_or_else(|| {
                    FsError::Unavailable(format!("server {n} is not in the cluster map"))
                }),
            _ => st
                .map
                .partition_addr(target)
                .map(|a| (a.to_string(), Endpoints::to(target)))
                .ok_or_else(|| {
                    FsError::Unavailable(format!("partition {target} is not in the cluster map"))
                }),
        }
    }

    /// Sends `req` to the node `route` names under the current map, following redirects,
    /// pushing our map to nodes that are behind, and retrying `Busy` until the deadline.
    pub(crate) async fn call(&self, route: Route, req: Request) -> Result<Response, FsError> {
        // A change gets its number once; every retry below sends that same number.
        let (paths, subtree) = match &req {
            Request::Client(c) if self.config.leases => crate::leases::changed_paths(c),
            _ => (Vec::new(), false),
        };
        if self.leases.journal.busy()
            && let Request::Client(c) = &req
        {
            self.drain_before(c, &paths, subtree).await?;
        }
        // This client's reads name it: they pass its own exclusive leases.
        let req = match req {
            Request::Client(c) if self.config.leases && c.read_dir().is_some() => {
                Request::Client(ClientRequest::ReadAs {
                    holder: self.leases.holder,
                    request: Box::new(c),
                })
            }
            other => other,
        };
        // What this client changes is not answered from its leases, before or after.
        let forget = || {
            if !paths.is_empty() {
                self.leases.forget_change(&paths, subtree);
            }
        };
        forget();
        self.recent_changes.note(&paths);
        // A change of one name whose answer is the name's new attributes: kept under
        // the directory's lease if it lasted through the change (`Leases::put_own`).
        let own = match (&req, paths.as_slice()) {
            (Request::Client(c), [path]) if !subtree && answers_attributes(c) => {
                let dir = split_parent(path).0;
                Some((path.clone(), self.leases.before_own_change(dir)))
            }
            _ => None,
        };
        let (req, _waiting) = match req {
            Request::Client(c) if c.is_change() => {
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
                let once = ClientRequest::Once {
                    id,
                    request: Box::new(c),
                    visible,
                };
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
        // errnos and the three "try again" errors: `FsError::kind`).
        let answer = self.route(route, req).await.map_err(|e| {
            if e.is_routing() {
                FsError::Unavailable(format!("the cluster's routing did not settle: {e}"))
            } else {
                e
            }
        });
        forget();
        if let (
            Some((path, own)),
            Ok(Response::Attr(i) | Response::Changed { inode: Some(i), .. }),
        ) = (own, &answer)
        {
            let caller = self.task_caller();
            let entry = crate::leases::Entry::attrs(caller, i.clone());
            let partition = self.entry_partition(&path);
            self.leases
                .put_own(split_parent(&path), partition, entry, own);
        }
        answer
    }

    /// Before a request about names of a directory part with changes answered behind:
    /// those are sent and answered first, so the servers see this client's changes in
    /// the order it made them (docs/fuse.md "Write-behind").
    async fn drain_before(
        &self,
        c: &ClientRequest,
        paths: &[String],
        subtree: bool,
    ) -> Result<(), FsError> {
        let inner = match c {
            ClientRequest::Leased { request, .. } | ClientRequest::ReadAs { request, .. } => {
                request
            }
            other => other,
        };
        // A change: after every change journaled in its directories (and below a moved
        // or removed one).
        let changed: Vec<&str> = paths.iter().map(|p| split_parent(p).0).collect();
        let below: Vec<String> = if subtree {
            paths.iter().map(|p| format!("{p}/")).collect()
        } else {
            Vec::new()
        };
        // A listing: after its directory's journal, and its subdirectories' (their
        // times). A read of one name: after the changes of that name, and of its own
        // names if it is a directory (its times).
        // A change of a directory's mode or owner: after the changes journaled in it and
        // below it, which were answered by its old attributes.
        let own_attrs = match inner {
            ClientRequest::SetAttr { path, set }
                if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() =>
            {
                Some(path.as_str())
            }
            _ => None,
        };
        let (listed, named) = match inner.read_of() {
            Some(myriad_proto::ReadOf::Listing(d)) => (Some(d), None),
            Some(myriad_proto::ReadOf::Name(n)) => (None, Some(n)),
            None => (None, None),
        };
        let which = |k: &myriad_proto::LeaseKey, part: &crate::behind::PartJournal| {
            let d = k.dir.as_str();
            changed.contains(&d)
                || below.iter().any(|b| d.starts_with(b.as_str()))
                || (subtree && paths.iter().any(|p| p == d))
                || listed.is_some_and(|l| d == l || (d != "/" && split_parent(d).0 == l))
                || named.is_some_and(|n| d == n || part.touches(n))
                || own_attrs.is_some_and(|p| {
                    d == p || p == "/" || d.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
                })
        };
        // As long as a request may wait. Past it the request fails: sent anyway, a change
        // would overtake the journal's (an unlink retried later would remove a newer
        // file), a read would miss what this client was told is done. The journal is
        // retried meanwhile.
        if self
            .leases
            .journal
            .drain(&which, Some(self.config.request_timeout))
            .await
        {
            Ok(())
        } else {
            Err(FsError::TimedOut(
                "this mount's earlier changes there are not yet taken by their server".into(),
            ))
        }
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

    pub(crate) async fn route(&self, route: Route, req: Request) -> Result<Response, FsError> {
        self.route_with(route, req, true).await
    }

    /// `route` for the requests that recover a partition's held changes (`held.rs`): they
    /// must not wait for that recovery themselves.
    pub(crate) async fn route_unheld(
        &self,
        route: Route,
        req: Request,
    ) -> Result<Response, FsError> {
        // Boxed: this runs inside another request's future (debug builds overflowed the
        // stack with both inline).
        Box::pin(self.route_with(route, req, false)).await
    }

    async fn route_with(
        &self,
        route: Route,
        req: Request,
        check_held: bool,
    ) -> Result<Response, FsError> {
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        let mut map_retries = 0;
        let mut backoff = BUSY_BACKOFF_FIRST;
        let mut down_backoff = DOWN_BACKOFF_FIRST;
        let mut busy_rounds = 0u32;
        let mut refreshed_for_no_copy = false;
        let mut no_copy_since: Option<tokio::time::Instant> = None;
        loop {
            let st = self.st();
            let pid = self.partition_for(&st, &route);
            // Changes of this partition held until durable, answered by a primary that may
            // be gone: sent again before this request (`held.rs`).
            // Any partition's: a change here may depend on one held there.
            let held_route = check_held
                && !matches!(route, Route::Server(_))
                && !crate::held_state::in_recovery();
            let link = Self::address(&st, &route, pid)
                .map(|(a, _)| self.transport.link(&a).connection)
                .unwrap_or(0);
            let stale = if held_route {
                self.held_to_recover(pid)
            } else {
                Vec::new()
            };
            if !stale.is_empty() {
                // Boxed: a recovery routes requests of its own.
                let recovered = Box::pin(self.recover_before(pid, stale));
                if let Err(e) = recovered.await {
                    if tokio::time::Instant::now() + down_backoff >= deadline {
                        return Err(e);
                    }
                    tracing::debug!(partition = %pid, "held changes not recovered yet ({e}); retrying");
                    tokio::time::sleep(down_backoff).await;
                    down_backoff = (down_backoff * 2).min(DOWN_BACKOFF_MAX);
                    self.refresh_map(pid).await;
                }
                continue;
            }
            let result = match Self::address(&st, &route, pid) {
                Ok((addr, ends)) => {
                    let caller = self.task_caller();
                    let call = self.transport.call_with_timeout(
                        &addr,
                        st.map.epoch,
                        ends,
                        &caller,
                        &req,
                        self.config.request_timeout,
                    );
                    // A server that died without closing its connections (a host gone)
                    // never answers: once its partition has another primary, the request
                    // goes there (a change carries its `OnceId`: applied once).
                    let moved = async {
                        match route {
                            Route::Server(_) | Route::Copy(..) => std::future::pending().await,
                            _ => self.primary_moved(pid, &addr).await,
                        }
                    };
                    tokio::select! {
                        r = call => r.map_err(|e| (e, Some(addr))),
                        () = moved => Err((
                            FsError::Unavailable(format!(
                                "{addr} did not answer and partition {pid} has another primary now"
                            )),
                            Some(addr),
                        )),
                    }
                }
                Err(e) => Err((e, None)),
            };
            let result = match result {
                // Answered over another connection than the one the checks above saw (the
                // server restarted as the request went): asked again after a recovery.
                Ok(_)
                    if held_route
                        && tokio::time::Instant::now() < deadline
                        && crate::held_state::asks_again_safely(&req)
                        && self.held_needs_recovery_after(pid, &st, &route, link) =>
                {
                    self.held_suspect(pid);
                    continue;
                }
                Ok(r) => Ok(r),
                // The partition's server is unreachable or may not serve (no lease, or no
                // copy is up): a failover gives it a new primary within seconds. Learn the
                // newer map from any server and try again until the deadline.
                Err((FsError::Unavailable(why), _))
                    if !matches!(route, Route::Server(_) | Route::Copy(..))
                        && st.map.partition(pid).is_some_and(|p| p.replicas.len() > 1)
                        && tokio::time::Instant::now() + down_backoff < deadline =>
                {
                    tracing::debug!(partition = %pid, "unavailable ({why}); refreshing the map and retrying");
                    tokio::time::sleep(down_backoff).await;
                    down_backoff = (down_backoff * 2).min(DOWN_BACKOFF_MAX);
                    self.refresh_map(pid).await;
                    continue;
                }
                // No copy of the partition is up in our map. A server that was down and is
                // back is up in a newer map we have not seen (nothing else would tell us:
                // no request reaches a server): ask for it, again after each pause, for
                // `NO_COPY_WAIT`. (Without this a client that saw a single-copy partition's
                // server marked down failed every request to it for good; asking only once
                // failed requests made while a paused server was being marked up again.)
                // A server down for longer fails requests to it in that time, not at the
                // request's deadline.
                Err((FsError::Unavailable(_), None)) => {
                    let before = st.map.epoch;
                    let no_copy_until =
                        *no_copy_since.get_or_insert_with(tokio::time::Instant::now) + NO_COPY_WAIT;
                    if refreshed_for_no_copy {
                        let next = tokio::time::Instant::now() + down_backoff;
                        if next >= deadline || next >= no_copy_until {
                            return Err(FsError::Unavailable(format!(
                                "no copy of partition {pid} is up (cluster map epoch {before})"
                            )));
                        }
                        tokio::time::sleep(down_backoff).await;
                        down_backoff = (down_backoff * 2).min(DOWN_BACKOFF_MAX);
                    }
                    refreshed_for_no_copy = true;
                    self.refresh_map(pid).await;
                    continue;
                }
                Err((e, None)) => return Err(e),
                Err((e, Some(_))) => Err(e),
            };
            let addr = Self::address(&st, &route, pid)
                .map(|(a, _)| a)
                .unwrap_or_default();
            match result {
                Err(FsError::Redirect(map)) => {
                    map_retries += 1;
                    if map_retries > MAP_RETRIES_MAX {
                        return Err(FsError::Protocol(format!(
                            "partition {pid} redirected but offered no newer map"
                        )));
                    }
                    if !self.adopt(*map) {
                        // Same cluster map: our shard map of the directory sent us there.
                        // Else the server is behind a map change we know of (it catches up
                        // through the Raft group): try again shortly.
                        match route_dir(&route) {
                            Some(dir) => self.shards.forget(dir),
                            None if tokio::time::Instant::now() + backoff < deadline => {
                                tokio::time::sleep(backoff.max(REDIRECT_WAIT_MIN)).await;
                                backoff = (backoff * 2).min(BUSY_BACKOFF_MAX);
                            }
                            None => {
                                return Err(FsError::Protocol(format!(
                                    "partition {pid} redirected but offered no newer map"
                                )));
                            }
                        }
                    }
                }
                // Asking the directory's home for its shard map is what `WrongShard` leads
                // to: a home answering that with `WrongShard` again is retried as `Busy`,
                // not followed (that would recurse without end).
                Err(FsError::WrongShard { .. })
                    if matches!(req, Request::Client(ClientRequest::GetShardMap { .. })) =>
                {
                    if tokio::time::Instant::now() + backoff >= deadline {
                        return Err(FsError::Busy);
                    }
                    tokio::time::sleep(backoff.max(REDIRECT_WAIT_MIN)).await;
                    backoff = (backoff * 2).min(BUSY_BACKOFF_MAX);
                }
                Err(FsError::WrongShard { dir, map }) => {
                    // A split moved the name, or our map of the directory is stale. Retried
                    // like `Busy`: during a split's last steps the map may be a step ahead.
                    self.learn_shard_map(&dir, map.map(|m| *m)).await;
                    if tokio::time::Instant::now() + backoff >= deadline {
                        return Err(FsError::Busy);
                    }
                    if map_retries > 0 {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(BUSY_BACKOFF_MAX);
                    }
                    map_retries = 1;
                }
                Err(FsError::MapTooOld(_)) => {
                    // The server answers the push once it follows the map, but its
                    // partitions take the map up a moment later (a reconcile, slow on a
                    // loaded host): after the first push, retried like `Busy` until the
                    // deadline (five retries at once once ran out on a loaded machine).
                    map_retries += 1;
                    if tokio::time::Instant::now() + backoff >= deadline {
                        return Err(FsError::Protocol(format!(
                            "partition {pid} keeps an old cluster map"
                        )));
                    }
                    if map_retries > 1 {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(BUSY_BACKOFF_MAX);
                    }
                    let push = ServerRequest::InstallMap(Box::new(st.map.clone()));
                    self.transport
                        .call_with_timeout(
                            &addr,
                            st.map.epoch,
                            Endpoints::SERVER,
                            &self.config.caller,
                            &myriad_proto::Request::Server(push),
                            self.config.request_timeout,
                        )
                        .await?;
                }
                // A server that holds the partition as a copy, not (yet) as its primary,
                // asked as if it were one (a map newer than that server's, or a copy
                // about to open it after a failover): as `Busy`, with the map looked at.
                Err(FsError::AskPrimary)
                    if !matches!(route, Route::Copy(..))
                        && tokio::time::Instant::now() + backoff < deadline =>
                {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BUSY_BACKOFF_MAX);
                    self.refresh_map(pid).await;
                }
                Err(FsError::Busy) if tokio::time::Instant::now() + backoff < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BUSY_BACKOFF_MAX);
                    busy_rounds += 1;
                    // A server that keeps saying Busy may have lost its lease and been
                    // replaced (it answers Busy until it learns the new map): look.
                    if busy_rounds.is_multiple_of(10) {
                        self.refresh_map(pid).await;
                    }
                }
                Ok(answer @ Response::Applied { .. }) => {
                    return Ok(self.keep_applied((pid, &route), (&addr, link), req, answer));
                }
                other => return other,
            }
        }
    }

    /// Asks every server of our map for its map, adopts the newest, and returns it (the map
    /// a tool started with may be behind failovers).
    pub async fn newest_map(&self) -> ClusterMap {
        for n in self.map().nodes {
            if let Ok(m) = self.get_map(n.id).await {
                self.adopt(m);
            }
        }
        self.map()
    }

    /// Returns once partition `pid` has a primary other than `addr` in the map another
    /// server has: one other server asked after `STALL_ASK_AFTER` of waiting, then the
    /// next one every as long. Never returns while the primary stays there.
    async fn primary_moved(&self, pid: PartitionId, addr: &str) {
        for turn in 0usize.. {
            tokio::time::sleep(STALL_ASK_AFTER).await;
            let st = self.st();
            let others: Vec<&str> = Self::map_askers(&st.map)
                .into_iter()
                .filter(|a| *a != addr)
                .collect();
            let Some(&asked) = others.get(turn % others.len().max(1)) else {
                continue;
            };
            if let Some(m) = self.ask_map(asked, st.map.epoch).await {
                self.adopt(m);
            }
            // Another primary (not none: a partition with no copy up waits for its
            // server, and its request for its deadline, as before).
            if self.st().map.partition_addr(pid).is_some_and(|a| a != addr) {
                return;
            }
        }
    }

    /// Server `addr`'s cluster map (we hold `epoch`), if it answers within `MAP_ASK_TIMEOUT`,
    /// connecting included (a host gone answers no SYN: the connect alone took the whole
    /// connect timeout, and a write after a failover waited 4 s on it).
    async fn ask_map(&self, addr: &str, epoch: u64) -> Option<ClusterMap> {
        let req = myriad_proto::Request::Server(ServerRequest::GetMap);
        let call = self.transport.call_with_timeout(
            addr,
            epoch,
            Endpoints::SERVER,
            &self.config.caller,
            &req,
            MAP_ASK_TIMEOUT,
        );
        match tokio::time::timeout(MAP_ASK_TIMEOUT, call).await {
            Ok(Ok(Response::Map(m))) => Some(*m),
            _ => None,
        }
    }

    /// The addresses of `map`'s servers to ask for a newer map: those up first, then those
    /// down (a server marked down is likely gone: asked last).
    fn map_askers(map: &ClusterMap) -> Vec<&str> {
        let (up, down): (Vec<_>, Vec<_>) = map.nodes.iter().partition(|n| map.is_up(n.id));
        up.iter().chain(&down).map(|n| n.addr.as_str()).collect()
    }

    /// Asks the servers of our map (but `skip`, unreachable) for theirs and adopts the newest.
    async fn refresh_map(&self, skip: PartitionId) {
        let st = self.st();
        let avoid = st
            .map
            .primary_of(skip)
            .and_then(|id| st.map.node(id))
            .map(|n| n.addr.as_str());
        for addr in Self::map_askers(&st.map) {
            if Some(addr) == avoid {
                continue;
            }
            if let Some(m) = self.ask_map(addr, st.map.epoch).await {
                if m.epoch > st.map.epoch {
                    self.adopt(m);
                }
                return;
            }
        }
    }

    /// Adopts `map` (only a directory's home sends one) or asks the home of `dir` for it.
    pub(crate) async fn learn_shard_map(&self, dir: &str, map: Option<ShardMap>) {
        let map = match map {
            Some(m) => Some(m),
            None => {
                let home = self.st().ring.owner_of_dir(dir);
                let req = ClientRequest::GetShardMap {
                    dir: dir.to_string(),
                };
                match Box::pin(
                    self.call(Route::Partition(home), myriad_proto::Request::Client(req)),
                )
                .await
                {
                    Ok(Response::ShardMap(m)) => Some(*m),
                    _ => None,
                }
            }
        };
        match map {
            Some(m) => self.shards.adopt(dir, m, true),
            None => self.shards.forget(dir),
        }
    }

    /// Turns a `NotFound` into `NotADirectory` when an ancestor is not a directory, as POSIX
    /// requires. Costs extra requests only on the error path.
    pub(crate) async fn refine(&self, path: &str, err: FsError) -> FsError {
        if err != FsError::NotFound || PARENT_IS_DIR.try_with(|()| ()).is_ok() {
            return err;
        }
        let mut p = parent_of(path).to_string();
        while p != "/" {
            match self
                .call(
                    Route::Entry(p.clone()),
                    myriad_proto::Request::Client(ClientRequest::Stat { path: p.clone() }),
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

    pub(crate) async fn entry_op(&self, path: &str, req: Request) -> Result<Response, FsError> {
        validate_path(path)?;
        match self.call(Route::Entry(path.to_string()), req).await {
            Err(e) => Err(self.refine(path, e).await),
            Ok(r) => {
                self.note_parent(path, &r);
                Ok(r)
            }
        }
    }

    /// Keeps the parent's attributes a change of entries brought back, for this task
    /// (`as_caller`); any other answer clears what was kept.
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
        let _ = PARENT.try_with(|slot| *slot.borrow_mut() = kept);
    }

    /// Inside `as_caller`: the attributes of directory `dir` as the servers sent them back
    /// with this task's last change of entries, if that change was in `dir` (create,
    /// symlink, mknod, mkdir, unlink, rmdir): its new times and link count, with no
    /// request. Taken once.
    pub fn take_parent_attrs(&self, dir: &str) -> Option<Inode> {
        PARENT
            .try_with(|slot| {
                let mut slot = slot.borrow_mut();
                match slot.take() {
                    Some((d, attrs)) if d == dir => Some(attrs),
                    _ => None,
                }
            })
            .ok()
            .flatten()
    }

    // ---- metadata ----

    pub async fn stat(&self, path: &str) -> Result<Inode, FsError> {
        if let Some(r) = self.indexed(path, false).await {
            return r.map(|i| i.inode);
        }
        self.stat_servers(path).await
    }

    /// `stat` as the servers (or a lease) answer it, no index.
    pub(crate) async fn stat_servers(&self, path: &str) -> Result<Inode, FsError> {
        let req = ClientRequest::Stat {
            path: path.to_string(),
        };
        if self.config.leases {
            return match self.leased_entry(path, req, 0).await? {
                Response::Fetched { inode, .. } => Ok(inode),
                other => expect_attr(other),
            };
        }
        if let Some(r) = self.entry_nearest(path, &req).await {
            return expect_attr(r?);
        }
        expect_attr(
            self.entry_op(path, myriad_proto::Request::Client(req))
                .await?,
        )
    }

    /// Sets the function told of names dropped from the lease cache by a recall (a
    /// mount invalidates the kernel's copies there).
    pub fn set_recall_hook(&self, hook: crate::leases::RecallHook) {
        // The registry's lease covers every loaded index: what the kernel was told from
        // them goes with it.
        let indexes = Arc::downgrade(&self.indexes);
        self.leases.set_hook(Arc::new(move |dir, names, why| {
            hook(dir, names, why);
            if (dir == myriad_proto::tree_index::TREES_DIR
                || dir == myriad_proto::tree_index::INDEX_DIR)
                && let Some(indexes) = indexes.upgrade()
            {
                for d in indexes.loaded_dirs() {
                    hook(&d, &[], crate::Dropped::Changed);
                }
            }
        }));
    }

    /// When the lease covering `dir` ends (`None`: not held), by this client's clock.
    #[must_use]
    pub fn lease_until(&self, dir: &str) -> Option<tokio::time::Instant> {
        if !self.config.leases {
            return None;
        }
        self.leases
            .holds(dir)
            .or_else(|| self.index_lease_until(dir))
    }

    /// `path`'s attributes as a lease keeps them for `caller`, with no request (`None`:
    /// not kept; ask with `stat`). For a mount's answer to the kernel without a thread
    /// switch.
    #[must_use]
    pub fn cached_attr(&self, path: &str, caller: &Caller) -> Option<Inode> {
        if !self.config.leases || path == "/" {
            return None;
        }
        if let Some(r) = self.indexed_now(path, caller) {
            return r.ok().map(|i| i.inode);
        }
        let (dir, name) = split_parent(path);
        match self.leases.get(dir, name, caller)? {
            crate::leases::Cached::Found { inode, .. } => Some(inode),
            crate::leases::Cached::Missing => None,
        }
    }

    /// `dir`'s lease mark, read before a request about one of its names (`None`: no
    /// leases).
    #[must_use]
    pub fn lease_mark(&self, dir: &str) -> Option<crate::LeaseMark> {
        self.config.leases.then(|| {
            let mut mark = self.leases.mark(dir);
            mark.index_epoch = self.index_epoch();
            mark
        })
    }

    /// Whether what this client answered about `path` since `mark` is still covered by
    /// a lease on its directory: then it stays true until the lease is dropped, and the
    /// recall hook is told of the directory (a mount lets the kernel keep it that long).
    #[must_use]
    pub fn lease_covers(&self, path: &str, mark: Option<crate::LeaseMark>) -> bool {
        let Some(mark) = mark else { return false };
        if path == "/" {
            return false;
        }
        // Only if the registry read then is the one read now: an answer sent before an
        // index of a tree being frozen was registered may predate the freeze.
        if mark.index_epoch == self.index_epoch() && self.index_covers(path) {
            return true;
        }
        let (dir, name) = split_parent(path);
        self.leases.covers(dir, name, mark)
    }

    /// A read of `path`'s entry (`Stat`, or `Fetch` of `asked` bytes) answered from the
    /// lease cache when it covers it, else sent with a lease asked for, the answer kept
    /// under it (docs/fuse.md "Directory leases").
    async fn leased_entry(
        &self,
        path: &str,
        read: ClientRequest,
        asked: u64,
    ) -> Result<Response, FsError> {
        use crate::leases::{Cached, Entry};
        validate_path(path)?;
        let (dir, name) = split_parent(path);
        let caller = self.task_caller();
        match self.leases.get(dir, name, &caller) {
            Some(Cached::Missing) if path != "/" => {
                self.count_answer(&self.answered_by_lease);
                return Err(FsError::NotFound);
            }
            Some(Cached::Found {
                inode,
                data,
                asked: had,
            }) if had >= asked
                || (inode.kind == FileKind::File && data.len() as u64 >= inode.size) =>
            {
                self.count_answer(&self.answered_by_lease);
                let mut data = data;
                data.truncate(usize::try_from(asked).unwrap_or(usize::MAX));
                tracing::trace!(client = self.config.id, path, "answered from a lease");
                return Ok(Response::Fetched { inode, data });
            }
            _ => {}
        }
        // Not the client's own changes answered behind: those are at the primary only.
        if !self.leases.journal.busy()
            && let Some(r) = self.entry_nearest(path, &read).await
        {
            return r;
        }
        let generation = (tokio::time::Instant::now(), self.leases.generation(dir));
        let req = myriad_proto::Request::Client(ClientRequest::Leased {
            holder: self.leases.holder,
            request: Box::new(read),
            exclusive: false,
        });
        let (answer, lease) = match self.call(Route::Entry(path.to_string()), req).await {
            Ok(Response::Leased { answer, lease }) => (answer, lease),
            Ok(other) => return Err(unexpected(&other)),
            Err(e) => return Err(self.refine(path, e).await),
        };
        let (cached, result) = match answer {
            Ok(r) => {
                let cached = match &*r {
                    Response::Attr(inode) => Some(Cached::Found {
                        inode: inode.clone(),
                        data: Vec::new(),
                        asked: 0,
                    }),
                    Response::Fetched { inode, data } => Some(Cached::Found {
                        inode: inode.clone(),
                        data: data.clone(),
                        asked,
                    }),
                    _ => None,
                };
                self.note_parent(path, &r);
                (cached, Ok(*r))
            }
            Err(e) => {
                let e = self.refine(path, e).await;
                ((e == FsError::NotFound).then_some(Cached::Missing), Err(e))
            }
        };
        if let (Some(grant), Some(cached)) = (lease, cached) {
            let answers = vec![(name.to_string(), Entry { caller, cached })];
            self.keep_leased(dir, answers, None, &grant, generation);
        }
        result
    }

    /// Keeps answers about names of `dir` under `grant` (`Leases::put_many`, `generation`
    /// read before the request was sent; `complete`: they are a whole listing by that
    /// caller), starting the lease's poll and renewals at its server if none run there.
    pub(crate) fn keep_leased(
        &self,
        dir: &str,
        answers: Vec<(String, crate::leases::Entry)>,
        complete: Option<Caller>,
        grant: &myriad_proto::LeaseGrant,
        generation: (tokio::time::Instant, u64),
    ) {
        let Some(addr) = self
            .st()
            .map
            .partition_addr(grant.key.partition)
            .map(str::to_string)
        else {
            return;
        };
        if grant.exclusive.is_some() && self.leases.journal.enabled() {
            // Numbers for the creates about to be answered behind.
            let started = self.leases.journal.refill_ids(grant.key.partition);
            self.leases.journal.start(started);
        }
        if let Some(start) = self
            .leases
            .put_many(dir, answers, complete, grant, generation, addr)
        {
            tokio::spawn(self.leases.clone().poll(
                self.transport.clone(),
                start.clone(),
                self.config.caller.clone(),
                self.config.request_timeout,
            ));
            tokio::spawn(self.leases.clone().renew(
                self.transport.clone(),
                start,
                self.config.caller.clone(),
            ));
        }
    }

    /// Gives every directory lease back (a mount going away: others need not wait for
    /// them to expire).
    pub async fn release_leases(&self) {
        self.leases
            .release_all(&self.transport, &self.config.caller)
            .await;
    }

    /// The caller this task acts for (`as_caller`), else the client's own.
    pub(crate) fn task_caller(&self) -> Caller {
        CALLER
            .try_with(|c| c.clone())
            .unwrap_or_else(|_| self.config.caller.clone())
    }

    fn count_answer(&self, counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Lookups and fetches answered with no request since the client started: (from a
    /// directory lease, from a metadata index).
    pub fn answered_locally(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.answered_by_lease.load(Relaxed),
            self.answered_by_index.load(Relaxed),
        )
    }

    /// Attributes of many names in one directory, in one round trip per 4096 names.
    pub async fn stat_many(
        &self,
        dir: &str,
        names: &[String],
    ) -> Result<Vec<Result<Inode, FsError>>, FsError> {
        validate_path(dir)?;
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(limits::STAT_MANY_MAX) {
            out.extend(self.stat_many_sharded(dir, chunk).await?);
        }
        Ok(out)
    }

    /// Attributes of any node plus, for a regular file, its first `max_bytes` bytes: always
    /// exactly one request (a FUSE lookup or open of a small file is served by this).
    /// Answered from a metadata index with no request: then the contents come only if
    /// the index holds them (a file bigger than its inline limit, or not readable by
    /// everyone, comes with none: its reader reads them, as `fetch` does).
    pub async fn fetch_head(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Result<(Inode, Vec<u8>), FsError> {
        if let Some(r) = self.indexed(path, true).await {
            self.count_answer(&self.answered_by_index);
            let i = r?;
            if !i.readable {
                return Err(FsError::PermissionDenied);
            }
            let mut data = i.contents.unwrap_or_default();
            data.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
            return Ok((i.inode, data));
        }
        self.fetch_head_servers(path, max_bytes).await
    }

    /// `fetch_head` as the servers (or a lease) answer it, no index.
    pub(crate) async fn fetch_head_servers(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Result<(Inode, Vec<u8>), FsError> {
        let req = ClientRequest::Fetch {
            path: path.to_string(),
            max_bytes,
        };
        let answer = if self.config.leases {
            self.leased_entry(path, req, max_bytes).await?
        } else if let Some(r) = self.entry_nearest(path, &req).await {
            r?
        } else {
            self.entry_op(path, myriad_proto::Request::Client(req))
                .await?
        };
        match answer {
            Response::Fetched { inode, data } => Ok((inode, data)),
            other => Err(unexpected(&other)),
        }
    }

    /// What a lookup needs: the entry's attributes, with up to `max_bytes` of its contents
    /// when they come at no cost. A name a lease holds is answered from it even without
    /// its contents (a listing keeps attributes only): the contents are asked for by
    /// whoever reads them (an open for reading fetches them then), so this costs no more
    /// requests than `fetch_head`, and a lookup before an unlink or a stat none at all.
    pub async fn lookup_head(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Result<(Inode, Vec<u8>), FsError> {
        if let Some(r) = self.indexed(path, true).await {
            self.count_answer(&self.answered_by_index);
            let i = r?;
            // (Contents come only for a caller who may read them.)
            let mut data = i.contents.unwrap_or_default();
            data.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
            return Ok((i.inode, data));
        }
        if self.config.leases && path != "/" {
            let (dir, name) = split_parent(path);
            match self.leases.get(dir, name, &self.task_caller()) {
                Some(crate::leases::Cached::Missing) => {
                    self.count_answer(&self.answered_by_lease);
                    return Err(FsError::NotFound);
                }
                Some(crate::leases::Cached::Found {
                    inode, mut data, ..
                }) => {
                    self.count_answer(&self.answered_by_lease);
                    if (data.len() as u64) < inode.size.min(max_bytes) {
                        data.clear();
                    }
                    data.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
                    return Ok((inode, data));
                }
                None => {}
            }
        }
        // The index was asked above.
        self.fetch_head_servers(path, max_bytes).await
    }

    /// Attributes and contents of a file in one round trip to one node when it fits in chunk
    /// 0 (every inline file does); bigger files continue with chunk reads.
    pub async fn fetch(&self, path: &str) -> Result<(Inode, Vec<u8>), FsError> {
        // Ask for up to a whole chunk: any file of up to 4 MiB comes back in this one request
        // (inline files always do).
        let max_bytes = self.st().map.chunk_size_bytes.min(limits::IO_BYTES_MAX);
        let (inode, mut data) = self.fetch_head(path, max_bytes).await?;
        if inode.kind == FileKind::Directory {
            return Err(FsError::IsADirectory);
        }
        if inode.kind == FileKind::File && (data.len() as u64) < inode.size {
            let handle = crate::FileHandle {
                path: path.to_string(),
                inode: inode.clone(),
                opened: false,
            };
            let rest = self
                .read(&handle, data.len() as u64, inode.size - data.len() as u64)
                .await?;
            data.extend_from_slice(&rest);
        }
        Ok((inode, data))
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<Inode, FsError> {
        expect_attr(
            self.entry_op(
                path,
                myriad_proto::Request::Client(ClientRequest::Mkdir {
                    path: path.to_string(),
                    mode,
                    shards: 1,
                }),
            )
            .await?,
        )
    }

    /// Creates `path` and any missing ancestors; existing directories are fine. Each
    /// directory is looked up before it is made: a mkdir of an existing name is still a
    /// change attempt at its parent, which recalls every other client's lease there (for
    /// "/", every client's way to every path) for nothing.
    pub async fn mkdir_p(&self, path: &str, mode: u32) -> Result<(), FsError> {
        validate_path(path)?;
        if path == "/" {
            return Ok(());
        }
        match self.stat(path).await {
            Ok(i) if i.kind == FileKind::Directory => return Ok(()),
            Ok(_) => return Err(FsError::NotADirectory),
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let mut cur = String::new();
        // Below the first missing directory every one is missing: no lookup needed.
        let mut missing = false;
        for name in path[1..].split('/') {
            cur.push('/');
            cur.push_str(name);
            if !missing {
                match self.stat(&cur).await {
                    Ok(i) if i.kind == FileKind::Directory => continue,
                    Ok(_) => return Err(FsError::NotADirectory),
                    Err(FsError::NotFound) => missing = true,
                    Err(e) => return Err(e),
                }
            }
            match self.mkdir(&cur, mode).await {
                Ok(_) => {}
                Err(FsError::AlreadyExists) => {
                    if self.stat(&cur).await?.kind != FileKind::Directory {
                        return Err(FsError::NotADirectory);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub async fn rmdir(&self, path: &str) -> Result<(), FsError> {
        self.entry_op(
            path,
            myriad_proto::Request::Client(ClientRequest::Rmdir {
                path: path.to_string(),
            }),
        )
        .await
        .map(|_| ())
    }

    pub async fn unlink(&self, path: &str) -> Result<(), FsError> {
        if let Some(r) = self.unlink_behind(path) {
            return r;
        }
        if self.claim_for_change(path).await
            && let Some(r) = self.unlink_behind(path)
        {
            return r;
        }
        self.entry_op(
            path,
            myriad_proto::Request::Client(ClientRequest::Unlink {
                path: path.to_string(),
            }),
        )
        .await
        .map(|_| ())
    }

    pub async fn symlink(&self, target: &str, path: &str) -> Result<Inode, FsError> {
        expect_attr(
            self.entry_op(
                path,
                myriad_proto::Request::Client(ClientRequest::Symlink {
                    path: path.to_string(),
                    target: target.to_string(),
                }),
            )
            .await?,
        )
    }

    /// Gives the regular file at `from` a second name `to` (a hard link); returns its inode
    /// with the new link count.
    pub async fn link(&self, from: &str, to: &str) -> Result<Inode, FsError> {
        validate_path(to)?;
        expect_attr(
            self.entry_op(
                from,
                myriad_proto::Request::Client(ClientRequest::Link {
                    from: from.to_string(),
                    to: to.to_string(),
                }),
            )
            .await?,
        )
    }

    /// Creates a FIFO, socket or (as root) device node: metadata only; `rdev` names the
    /// device of a `CharDevice` or `BlockDevice` and is 0 otherwise.
    pub async fn mknod(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Inode, FsError> {
        expect_attr(
            self.entry_op(
                path,
                myriad_proto::Request::Client(ClientRequest::Mknod {
                    path: path.to_string(),
                    kind,
                    mode,
                    rdev,
                }),
            )
            .await?,
        )
    }

    /// Sets (`Some`) or removes (`None`) a `user.` extended attribute. Reading them needs no
    /// call of its own: they come with the inode (`stat`, `readdir`, `fetch`).
    pub async fn set_xattr(
        &self,
        path: &str,
        name: &str,
        value: Option<&[u8]>,
        mode: XattrMode,
    ) -> Result<Inode, FsError> {
        expect_attr(
            self.entry_op(
                path,
                myriad_proto::Request::Client(ClientRequest::SetXattr {
                    path: path.to_string(),
                    name: name.to_string(),
                    value: value.map(|v| serde_bytes::ByteBuf::from(v.to_vec())),
                    mode,
                }),
            )
            .await?,
        )
    }

    pub async fn readlink(&self, path: &str) -> Result<String, FsError> {
        if let Some(r) = self.indexed(path, false).await {
            // Not a link: the servers say how it is refused.
            if let Some(t) = r?.inode.symlink_target {
                return Ok(t);
            }
        }
        match self
            .entry_op(
                path,
                myriad_proto::Request::Client(ClientRequest::Readlink {
                    path: path.to_string(),
                }),
            )
            .await?
        {
            Response::Link(t) => Ok(t),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn setattr(&self, path: &str, set: SetAttr) -> Result<Inode, FsError> {
        if let Some(r) = self.setattr_behind(path, &set) {
            return r;
        }
        let access = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        // A directory's own attributes: what changes in it (and below it) answered behind
        // were answered by (a file's path names no directory lease: no cost).
        let _paused = access.then(|| self.leases.pause_behind(path));
        let inode = expect_attr(
            self.entry_op(
                path,
                myriad_proto::Request::Client(ClientRequest::SetAttr {
                    path: path.to_string(),
                    set,
                }),
            )
            .await?,
        )?;
        // A directory's own attributes: what its exclusive lease answers creates by
        // (nsx seed 1 step 531: a set-group-id bit taken away still gave new files the
        // directory's group).
        if access && inode.kind == FileKind::Directory {
            self.leases.refresh_exclusive(path, &inode);
        }
        Ok(inode)
    }

    pub async fn chmod(&self, path: &str, mode: u32) -> Result<Inode, FsError> {
        self.setattr(
            path,
            SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            },
        )
        .await
    }

    pub async fn chown(
        &self,
        path: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Inode, FsError> {
        self.setattr(
            path,
            SetAttr {
                uid,
                gid,
                ..SetAttr::default()
            },
        )
        .await
    }

    pub async fn utimens(
        &self,
        path: &str,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
    ) -> Result<Inode, FsError> {
        self.setattr(
            path,
            SetAttr {
                atime_ns,
                mtime_ns,
                ..SetAttr::default()
            },
        )
        .await
    }

    pub async fn rename(&self, from: &str, to: &str, flags: RenameFlags) -> Result<(), FsError> {
        validate_path(to)?;
        self.entry_op(
            from,
            myriad_proto::Request::Client(ClientRequest::Rename {
                from: from.to_string(),
                to: to.to_string(),
                flags,
            }),
        )
        .await
        .map(|_| ())
    }

    // ---- cluster ----

    /// Capacity and usage summed over every server (tiers summed by name).
    pub async fn statfs(&self) -> Result<StatFs, FsError> {
        let mut total = StatFs::default();
        for n in self.st().map.nodes.clone() {
            let s = self.server_statfs(n.id).await?;
            total.total_bytes += s.total_bytes;
            total.free_bytes += s.free_bytes;
            total.used_bytes += s.used_bytes;
            total.files += s.files;
            for t in s.tiers {
                match total.tiers.iter_mut().find(|x| x.name == t.name) {
                    Some(x) => {
                        x.total_bytes += t.total_bytes;
                        x.free_bytes += t.free_bytes;
                        x.used_bytes += t.used_bytes;
                        x.overflowing |= t.overflowing;
                        x.overflowed_blocks += t.overflowed_blocks;
                        x.moved_back_blocks += t.moved_back_blocks;
                    }
                    None => total.tiers.push(t),
                }
            }
        }
        Ok(total)
    }

    /// One server's disks and tiers.
    pub async fn server_statfs(&self, node: NodeId) -> Result<StatFs, FsError> {
        match self
            .call(
                Route::Server(node),
                myriad_proto::Request::Server(ServerRequest::StatFs),
            )
            .await?
        {
            Response::StatFs(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn counters(&self, node: NodeId) -> Result<CounterSnapshot, FsError> {
        match self
            .call(
                Route::Server(node),
                myriad_proto::Request::Server(ServerRequest::GetCounters),
            )
            .await?
        {
            Response::Counters(c) => Ok(c),
            other => Err(unexpected(&other)),
        }
    }

    /// Counters of every node in the map, in map order.
    pub async fn all_counters(&self) -> Vec<(NodeId, Result<CounterSnapshot, FsError>)> {
        let nodes = self.st().map.nodes.clone();
        let futs = nodes
            .iter()
            .map(|n| async move { (n.id, self.counters(n.id).await) });
        futures::future::join_all(futs).await
    }

    /// Resets every server's counters but those the map marks down (they count nothing).
    pub async fn reset_counters(&self) -> Result<(), FsError> {
        for n in self.st().map.nodes.clone() {
            if n.state == myriad_placement::NodeState::Down {
                continue;
            }
            self.call(
                Route::Server(n.id),
                myriad_proto::Request::Admin(AdminRequest::ResetCounters),
            )
            .await?;
        }
        Ok(())
    }

    pub async fn get_map(&self, node: NodeId) -> Result<ClusterMap, FsError> {
        match self
            .call(
                Route::Server(node),
                myriad_proto::Request::Server(ServerRequest::GetMap),
            )
            .await?
        {
            Response::Map(m) => Ok(*m),
            other => Err(unexpected(&other)),
        }
    }

    /// Proposes `map` (an administrator's change, committed through the cluster-map Raft
    /// group) or, from anyone else, waits until a server follows it. Answered once the
    /// server follows at least its epoch; `MapTooOld` if another change was committed at
    /// that epoch first (read the newest map and make the change again). This client then
    /// adopts what that server follows, never the proposal itself: a proposal that lost
    /// is no map.
    pub async fn install_map(&self, map: ClusterMap) -> Result<(), FsError> {
        map.validate()
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
        let install =
            myriad_proto::Request::Server(ServerRequest::InstallMap(Box::new(map.clone())));
        // Any server of the current map commits it through the Raft group and answers once
        // it follows it; the others follow within moments.
        let current = self.map();
        let mut last = FsError::Unavailable("the map lists no server that is up".into());
        for n in current.nodes.iter().filter(|n| current.is_up(n.id)) {
            match self
                .transport
                .call_with_timeout(
                    &n.addr,
                    current.epoch,
                    Endpoints::SERVER,
                    &self.config.caller,
                    &install,
                    self.config.request_timeout,
                )
                .await
            {
                Ok(_) => {
                    if let Ok(now) = self.get_map(n.id).await {
                        self.adopt(now);
                    }
                    return Ok(());
                }
                Err(
                    e @ (FsError::PermissionDenied
                    | FsError::InvalidArgument(_)
                    | FsError::MapTooOld(_)),
                ) => {
                    return Err(e);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Sends one request to partition `pid` as it is (admin tools such as fsck).
    pub async fn request(&self, pid: PartitionId, req: Request) -> Result<Response, FsError> {
        self.call(Route::Partition(pid), req).await
    }

    /// The copy of partition `pid` on server `node`: (last applied batch, keys, digest),
    /// the blocks and the metadata records (space code, key) that fail their checksum there;
    /// the batch is None while the copy is being filled. Needs the cluster secret (fsck).
    #[allow(clippy::type_complexity)]
    pub async fn replica_digest(
        &self,
        node: NodeId,
        pid: PartitionId,
    ) -> Result<
        (
            (Option<u64>, u64, u64),
            Vec<(InodeId, u64)>,
            Vec<(u8, Vec<u8>)>,
        ),
        FsError,
    > {
        match self
            .call(
                Route::Copy(node, pid),
                myriad_proto::Request::Admin(AdminRequest::FsckReplica),
            )
            .await?
        {
            Response::ReplicaDigest {
                seq,
                keys,
                digest,
                corrupt,
                corrupt_records,
            } => Ok((
                (seq, keys, digest),
                corrupt,
                corrupt_records
                    .into_iter()
                    .map(|(s, k)| (s, k.into_vec()))
                    .collect(),
            )),
            other => Err(unexpected(&other)),
        }
    }

    /// Raw round trip to server `node`: the transport floor for benchmarks.
    /// Sends `req` to server `node` itself (not to a partition): fsck's look at the
    /// fragments a server keeps.
    pub async fn server_request(&self, node: NodeId, req: Request) -> Result<Response, FsError> {
        self.call(Route::Server(node), req).await
    }

    pub async fn echo(&self, node: NodeId, payload: Vec<u8>) -> Result<Vec<u8>, FsError> {
        match self
            .call(
                Route::Server(node),
                myriad_proto::Request::Client(ClientRequest::Echo(payload)),
            )
            .await?
        {
            Response::Echo(p) => Ok(p),
            other => Err(unexpected(&other)),
        }
    }

    /// Which partition holds the entry of `path` (the ring's answer; `primary_of` in the map
    /// says which server serves it).
    #[must_use]
    pub fn owner_of_entry(&self, path: &str) -> PartitionId {
        self.st().ring.owner_of_entry(path)
    }

    pub fn chunk_size(&self) -> u64 {
        self.st().map.chunk_size_bytes
    }

    #[must_use]
    pub fn inline_max(&self) -> u64 {
        self.st().map.inline_max_bytes
    }
}

/// Whether `c` changes one name and is answered with its new attributes (so the answer
/// may be kept under a lease).
fn answers_attributes(c: &ClientRequest) -> bool {
    matches!(
        c,
        ClientRequest::Create { .. }
            | ClientRequest::Write { .. }
            | ClientRequest::SetAttr { .. }
            | ClientRequest::Truncate { .. }
            | ClientRequest::ExtendSize { .. }
            | ClientRequest::Symlink { .. }
            | ClientRequest::Mknod { .. }
    )
}

pub(crate) fn expect_attr(r: Response) -> Result<Inode, FsError> {
    match r {
        Response::Attr(i) | Response::Changed { inode: Some(i), .. } => Ok(i),
        other => Err(unexpected(&other)),
    }
}

pub(crate) fn unexpected(r: &Response) -> FsError {
    FsError::Protocol(format!(
        "unexpected response {:?}",
        std::mem::discriminant(r)
    ))
}

/// The directory whose shard map routed `route`, if any.
fn route_dir(route: &Route) -> Option<&str> {
    match route {
        Route::Entry(p) if p != "/" => Some(parent_of(p)),
        Route::Shard(dir, _) => Some(dir),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
