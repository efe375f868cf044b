//! Directory leases, the client's side (docs/fuse.md "Directory leases"): what this client
//! may answer without asking, and the poll through which servers take leases back.
//!
//! An entry (a name's attributes and first bytes, or that the name does not exist) is
//! kept only under a valid lease on its directory's part, by this client's clock from
//! when the read that brought it was sent. A recall, a lost poll, or this client's own
//! change of the name drops it. An answer is kept only if nothing dropped anything of its
//! directory while it was on its way (a generation per directory, striped), so an answer
//! that crossed a recall or one of this client's changes on the wire is never kept.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use myriad_net::Transport;
use myriad_proto::{
    Caller, Endpoints, FileKind, Inode, LeaseGrant, LeaseKey, PartitionId, Request, Response,
    ServerRequest,
};
use tokio::time::Instant;

/// Generation stripes: a directory's generation is shared with the others of its stripe
/// (a false share only costs a cached answer).
const STRIPES: usize = 1024;
/// How long a poll waits at its server for a recall.
const POLL_WAIT: Duration = Duration::from_secs(4);
/// After a failed poll: the pause before the next.
const POLL_RETRY: Duration = Duration::from_millis(200);
/// A lease is trusted for this share of its period (clock rates differ a little).
const TRUST_NUM: u32 = 9;
const TRUST_DEN: u32 = 10;

/// Told of every directory whose cached names were dropped (a recall or a lost poll):
/// `(dir, names)`. Runs before the lease is given back (a mount drops the kernel's copies
/// here).
pub type RecallHook = Arc<dyn Fn(&str, &[String]) + Send + Sync>;

/// A name's cached answer, as the servers gave it to one caller (their permission checks
/// differ by caller: another caller's read is sent).
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) caller: Caller,
    pub(crate) cached: Cached,
}

/// What the servers answered for a name.
#[derive(Clone, Debug)]
pub(crate) enum Cached {
    /// Attributes and the first bytes, as a fetch of `asked` bytes returned them.
    Found {
        inode: Inode,
        data: Vec<u8>,
        asked: u64,
    },
    Missing,
}

struct Part {
    partition: PartitionId,
    until: Instant,
    addr: String,
    names: HashMap<String, Entry>,
}

#[derive(Default)]
struct Inner {
    dirs: HashMap<String, Vec<Part>>,
    /// Servers a poll runs at.
    polling: HashSet<String>,
    puts: u64,
}

pub(crate) struct Leases {
    pub(crate) holder: u64,
    inner: Mutex<Inner>,
    gens: Box<[AtomicU64]>,
    hook: RwLock<Option<RecallHook>>,
}

fn stripe(dir: &str) -> usize {
    (myriad_proto::name_hash(dir) % STRIPES as u64) as usize
}

impl Leases {
    pub(crate) fn new(holder: u64) -> Leases {
        Leases {
            holder,
            inner: Mutex::new(Inner::default()),
            gens: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            hook: RwLock::new(None),
        }
    }

    pub(crate) fn set_hook(&self, hook: RecallHook) {
        if let Ok(mut h) = self.hook.write() {
            *h = Some(hook);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The generation of `dir`: read before a leased read is sent.
    pub(crate) fn generation(&self, dir: &str) -> u64 {
        self.gens[stripe(dir)].load(Ordering::Acquire)
    }

    fn bump(&self, dir: &str) {
        self.gens[stripe(dir)].fetch_add(1, Ordering::AcqRel);
    }

    /// The cached answer for `dir/name` as `caller` got it, if a valid lease covers it.
    pub(crate) fn get(&self, dir: &str, name: &str, caller: &Caller) -> Option<Cached> {
        let now = Instant::now();
        let g = self.lock();
        g.dirs
            .get(dir)?
            .iter()
            .filter(|p| p.until > now)
            .find_map(|p| p.names.get(name))
            .filter(|e| e.caller == *caller)
            .map(|e| e.cached.clone())
    }

    /// Whether `dir` is covered by a valid lease at all (its names' absence is known only
    /// through `get`).
    pub(crate) fn holds(&self, dir: &str) -> Option<Instant> {
        let now = Instant::now();
        let g = self.lock();
        g.dirs
            .get(dir)?
            .iter()
            .map(|p| p.until)
            .filter(|u| *u > now)
            .min()
    }

    /// Keeps `cached` for `dir/name` under `grant`, if `dir`'s generation is still `gen`
    /// (read before the request was sent at `sent`). Returns the address a poll must
    /// start at, if none runs there yet.
    pub(crate) fn put(
        &self,
        dir: &str,
        name: &str,
        cached: Entry,
        grant: &LeaseGrant,
        (sent, seen): (Instant, u64),
        addr: String,
    ) -> Option<String> {
        if grant.key.dir != dir {
            return None;
        }
        // A file with several names may change through another directory: not kept.
        if let Cached::Found { inode, .. } = &cached.cached
            && inode.kind != FileKind::Directory
            && inode.nlink > 1
        {
            return None;
        }
        let until = sent + Duration::from_millis(grant.valid_ms) * TRUST_NUM / TRUST_DEN;
        let mut g = self.lock();
        // Checked under the lock: a drop takes the lock before it bumps.
        if self.generation(dir) != seen || until <= Instant::now() {
            return None;
        }
        tracing::trace!(holder = self.holder, dir, name, partition = %grant.key.partition, "kept under a lease");
        g.puts += 1;
        if g.puts.is_multiple_of(4096) {
            let now = Instant::now();
            g.dirs.retain(|_, parts| {
                parts.retain(|p| p.until > now);
                !parts.is_empty()
            });
        }
        let parts = g.dirs.entry(dir.to_string()).or_default();
        match parts
            .iter_mut()
            .find(|p| p.partition == grant.key.partition)
        {
            Some(p) if p.addr == addr => {
                if p.until <= Instant::now() {
                    p.names.clear();
                }
                p.until = p.until.max(until);
                p.names.insert(name.to_string(), cached);
            }
            _ => {
                parts.retain(|p| p.partition != grant.key.partition);
                parts.push(Part {
                    partition: grant.key.partition,
                    until,
                    addr: addr.clone(),
                    names: HashMap::from([(name.to_string(), cached)]),
                });
            }
        }
        g.polling.insert(addr.clone()).then_some(addr)
    }

    /// This client changes `dir/name`: what it cached of the name goes, and answers on
    /// their way for `dir` are not kept. Called before the change is sent and once it
    /// is answered.
    pub(crate) fn forget_name(&self, dir: &str, name: &str) {
        let mut g = self.lock();
        self.bump(dir);
        if let Some(parts) = g.dirs.get_mut(dir) {
            for p in parts {
                p.names.remove(name);
            }
        }
    }

    /// Drops the leases `keys` (recalled): the names they covered, by directory.
    fn drop_keys(&self, keys: &[LeaseKey]) -> Vec<(String, Vec<String>)> {
        let mut g = self.lock();
        let mut out = Vec::new();
        for k in keys {
            self.bump(&k.dir);
            if let Some(parts) = g.dirs.get_mut(&k.dir) {
                let mut names = Vec::new();
                parts.retain_mut(|p| {
                    if p.partition == k.partition {
                        names.extend(p.names.drain().map(|(n, _)| n));
                        false
                    } else {
                        true
                    }
                });
                if parts.is_empty() {
                    g.dirs.remove(&k.dir);
                }
                out.push((k.dir.clone(), names));
            }
        }
        out
    }

    /// Drops every lease granted through `addr` (its poll failed: recalls may be lost).
    fn drop_addr(&self, addr: &str) -> Vec<(String, Vec<String>)> {
        let keys: Vec<LeaseKey> = {
            let g = self.lock();
            g.dirs
                .iter()
                .flat_map(|(dir, parts)| {
                    parts.iter().filter(|p| p.addr == addr).map(|p| LeaseKey {
                        partition: p.partition,
                        dir: dir.clone(),
                    })
                })
                .collect()
        };
        self.drop_keys(&keys)
    }

    /// Stops the poll at `addr` if no lease from there is held (true: stopped).
    fn stop_polling_if_idle(&self, addr: &str) -> bool {
        let now = Instant::now();
        let mut g = self.lock();
        let held = g
            .dirs
            .values()
            .flatten()
            .any(|p| p.addr == addr && p.until > now);
        if !held {
            g.polling.remove(addr);
        }
        !held
    }

    fn tell(&self, dropped: &[(String, Vec<String>)]) {
        let hook = self.hook.read().ok().and_then(|h| h.clone());
        if let Some(hook) = hook {
            for (dir, names) in dropped {
                hook(dir, names);
            }
        }
    }

    /// The poll at server `addr`: takes recalls, drops what they cover, tells the hook,
    /// and gives the leases back with the next poll. Ends when no lease from `addr` is
    /// held any more.
    pub(crate) async fn poll(
        self: Arc<Self>,
        transport: Arc<dyn Transport>,
        addr: String,
        caller: Caller,
        timeout: Duration,
    ) {
        let mut released: Vec<LeaseKey> = Vec::new();
        loop {
            if released.is_empty() && self.stop_polling_if_idle(&addr) {
                return;
            }
            let req = Request::Server(ServerRequest::LeasePoll {
                holder: self.holder,
                released: std::mem::take(&mut released),
                wait_ms: POLL_WAIT.as_millis() as u64,
            });
            let answer = transport
                .call_with_timeout(
                    &addr,
                    0,
                    Endpoints::SERVER,
                    &caller,
                    &req,
                    timeout.max(POLL_WAIT * 2),
                )
                .await;
            match answer {
                Ok(Response::Recalls(keys)) => {
                    let dropped = self.drop_keys(&keys);
                    self.tell(&dropped);
                    released = keys;
                }
                other => {
                    tracing::debug!(server = %addr, "lease poll failed, leases dropped: {other:?}");
                    let dropped = self.drop_addr(&addr);
                    self.tell(&dropped);
                    tokio::time::sleep(POLL_RETRY).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// The entries a change of this client touches (its paths), and whether it may move or
/// remove a directory (then everything cached beneath the first path goes too).
pub(crate) fn changed_paths(req: &myriad_proto::ClientRequest) -> (Vec<String>, bool) {
    use myriad_proto::ClientRequest as C;
    let (paths, subtree): (Vec<&str>, bool) = match req {
        C::Create { path, .. }
        | C::Mkdir { path, .. }
        | C::Unlink { path }
        | C::Symlink { path, .. }
        | C::SetAttr { path, .. }
        | C::Write { path, .. }
        | C::Truncate { path, .. }
        | C::ExtendSize { path, .. }
        | C::Mknod { path, .. }
        | C::SetXattr { path, .. } => (vec![path.as_str()], false),
        C::Rmdir { path } => (vec![path.as_str()], true),
        C::Rename { from, to, .. } => (vec![from.as_str(), to.as_str()], true),
        C::Link { from, to } => (vec![from.as_str(), to.as_str()], false),
        C::CopyRange(c) => (vec![c.dst.as_str()], false),
        _ => (Vec::new(), false),
    };
    (paths.into_iter().map(str::to_string).collect(), subtree)
}

impl Leases {
    /// Forgets what a change of this client is about to make stale (and makes answers on
    /// their way for those directories unkept): each changed name, its directory's own
    /// entry (times, link count), and with `subtree` everything below the first path.
    pub(crate) fn forget_change(&self, paths: &[String], subtree: bool) {
        for p in paths {
            if p == "/" {
                continue;
            }
            let (dir, name) = myriad_placement::split_parent(p);
            self.forget_name(dir, name);
            if dir != "/" {
                let (up, dname) = myriad_placement::split_parent(dir);
                self.forget_name(up, dname);
            }
        }
        if subtree && let Some(top) = paths.first() {
            let mut g = self.lock();
            let below = format!("{top}/");
            let gone: Vec<String> = g
                .dirs
                .keys()
                .filter(|d| *d == top || d.starts_with(&below))
                .cloned()
                .collect();
            for d in gone {
                self.bump(&d);
                g.dirs.remove(&d);
            }
        }
    }
}
