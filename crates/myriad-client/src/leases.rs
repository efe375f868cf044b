//! Directory leases, the client's side (docs/fuse.md "Directory leases"): what this client
//! may answer without asking, and the poll through which servers take leases back.
//!
//! An entry (a name's attributes and first bytes, or that the name does not exist) is
//! kept only under a valid lease on its directory's part, by this client's clock from
//! when the read that brought it was sent. A recall, a lost poll, or this client's own
//! change of the name drops it. An answer is kept only if nothing dropped anything of its
//! directory while it was on its way (a generation per directory, striped), so an answer
//! that crossed a recall or one of this client's changes on the wire is never kept.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use myriad_proto::{Caller, FileKind, Inode, LeaseGrant, LeaseKey, PartitionId};
use tokio::time::Instant;

/// Generation stripes: a directory's generation is shared with the others of its stripe
/// (a false share only costs a cached answer).
const STRIPES: usize = 1024;
/// A lease is trusted for this share of its period (clock rates differ a little).
const TRUST_NUM: u32 = 9;
const TRUST_DEN: u32 = 10;

/// Why a lease was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Something may have changed: a recall, a lost poll (recalls may be lost with it), a
    /// refused renewal (a change is under way, or the server lost the lease).
    Changed,
    /// It ended with nothing known to have changed: let go while idle, or not renewed in
    /// time. What was told of it for no longer than its trusted end has expired by now.
    Ended,
}

/// Told of every directory whose cached names were dropped: `(dir, names, why)`. Runs
/// before the lease is given back (a mount drops the kernel's copies here).
pub type RecallHook = Arc<dyn Fn(&str, &[String], Dropped) + Send + Sync>;

/// A name's cached answer, as the servers gave it to one caller (their permission checks
/// differ by caller: another caller's read is sent).
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) caller: Caller,
    pub(crate) cached: Cached,
}

impl Entry {
    /// Attributes alone (an answer to a change, or a listing's entry).
    pub(crate) fn attrs(caller: Caller, inode: Inode) -> Entry {
        Entry {
            caller,
            cached: Cached::Found {
                inode,
                data: Vec::new(),
                asked: 0,
            },
        }
    }

    /// Whether it may be kept: a file with several names may change through another
    /// directory, whose lease this one's holders do not hold.
    fn keepable(&self) -> bool {
        !matches!(&self.cached, Cached::Found { inode, .. }
            if inode.kind != FileKind::Directory && inode.nlink > 1)
    }
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
    /// The trusted end, by this client's clock.
    until: Instant,
    /// The lease's period as granted (a renewal extends by as much).
    period: Duration,
    /// Last answered from or added to: an idle lease is let go, not renewed.
    used: Instant,
    addr: String,
    names: BTreeMap<String, Entry>,
    /// Set when `names` is every name of this part (a whole listing came with the lease),
    /// for the caller who listed it: a name not in `names` nor in `changing` is missing.
    complete: Option<Caller>,
    /// Names this client is changing, whose state it does not know until answered.
    changing: BTreeSet<String>,
    /// An exclusive lease: the directory's attributes as its grant found them (this
    /// client may answer its own changes here and send them behind: `Leases::behind`).
    exclusive: Option<Inode>,
    /// A birth lease (`Leases::put_born`): its server grants it only once the mkdir
    /// answered behind reaches it, so a renewal refused while the mkdir is on its way
    /// (its fence) does not drop it (`upkeep.rs` `extend`).
    born: bool,
    /// A birth lease whose mkdir this client has not sent yet: no server can grant it,
    /// nor know the directory, before that, so nothing can change it. Trusted meanwhile
    /// as if renewed at each upkeep round (not asked to renew); once the mkdir is taken
    /// to be sent, from that moment, as a grant is (the servers grant it no earlier).
    unsent: bool,
}

#[derive(Default)]
struct Inner {
    dirs: BTreeMap<String, Vec<Part>>,
    /// Servers whose poll and renewals run, by the run's number (a run ends when it finds
    /// another number: at most one run per server).
    polling: BTreeMap<String, u64>,
    runs: u64,
    /// Directories whose own mode or owner this client is changing (`pause_behind`), one
    /// entry per change under way: nothing in them or below them is answered behind
    /// meanwhile.
    attrs_changing: Vec<String>,
    /// Exclusive leases dropped (a failed or late renewal, a lost poll, idleness) while
    /// changes answered behind under them may still be unsent, by the server that granted
    /// them: renewed until their journal is sent (`upkeep.rs`), though nothing is cached
    /// or answered under them any more. So the servers keep them, and a change by another
    /// client waits for those changes, instead of applying first and having them refused
    /// (a loaded machine, whose renewal answers came late).
    draining: BTreeMap<LeaseKey, String>,
    /// Directories whose mkdir answered behind was taken to be sent before the mount
    /// held the new directory from its birth (`Leases::born_sent`, `put_born`).
    sent_before_born: BTreeSet<String>,
}

impl Inner {
    /// The poll and renewals to start at `addr`, a server a lease was just kept from:
    /// none if a run goes on there already (at most one run per server).
    fn start_run(&mut self, addr: String) -> Option<(String, u64)> {
        if self.polling.contains_key(&addr) {
            return None;
        }
        self.runs += 1;
        let run = self.runs;
        self.polling.insert(addr.clone(), run);
        Some((addr, run))
    }

    /// The directories held at `top` or below it.
    fn at_or_below(&self, top: &str) -> Vec<String> {
        let below = format!("{top}/");
        self.dirs
            .keys()
            .filter(|d| *d == top || d.starts_with(&below))
            .cloned()
            .collect()
    }

    /// Whether `dir` is, or is below, a directory whose attributes this client is
    /// changing.
    fn attrs_changing(&self, dir: &str) -> bool {
        self.attrs_changing.iter().any(|p| {
            dir == p || (dir.starts_with(p.as_str()) && dir[p.len()..].starts_with('/')) || p == "/"
        })
    }
}

/// Held while this client changes a directory's mode or owner (`Leases::pause_behind`).
pub(crate) struct PausedBehind<'a> {
    leases: &'a Leases,
    dir: String,
}

impl Drop for PausedBehind<'_> {
    fn drop(&mut self) {
        let mut g = self.leases.lock();
        if let Some(i) = g.attrs_changing.iter().position(|d| *d == self.dir) {
            g.attrs_changing.swap_remove(i);
        }
    }
}

pub(crate) struct Leases {
    pub(crate) holder: u64,
    inner: Mutex<Inner>,
    /// Bumped by every drop and by this client's own changes: an answer is kept only if
    /// its directory's did not move while it was on the wire.
    gens: Box<[AtomicU64]>,
    /// Bumped by drops only (recalls, lost polls, failed renewals, idleness): what a
    /// mount checks before it lets the kernel keep an answer past the moment.
    drops: Box<[AtomicU64]>,
    hook: RwLock<Option<RecallHook>>,
    /// Changes answered behind under exclusive leases, waiting to be sent: a recalled
    /// lease goes back once its part's are (`upkeep.rs`).
    pub(crate) journal: crate::behind_journals::Journal,
}

/// What `put_own` needs to know of the moment before this client's own change was sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnChange {
    mark: LeaseMark,
    held: bool,
}

/// A directory's drop count, read before a request about one of its names is sent
/// (`Leases::covers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseMark {
    drops: u64,
    /// What the client had read of the index registry then (`Indexes::epoch`; 0 from
    /// `Leases::mark`).
    pub(crate) index_epoch: u64,
}

impl Part {
    /// Whether `caller`'s changes here may be answered behind now (`Leases::behind`): the
    /// part of `partition`, held exclusively, listed whole by `caller` (the servers
    /// checked that caller may create there when they granted it), `BEHIND_MARGIN` left.
    fn answers_behind(&self, partition: PartitionId, caller: &Caller, now: Instant) -> bool {
        self.partition == partition
            && self.exclusive.is_some()
            && self.complete.as_ref() == Some(caller)
            && self.until > now + BEHIND_MARGIN
    }

    /// Whether this part, held as `answers_behind` asks, shows no name at all (this
    /// client's removals answered behind taken into account): its directory is empty at
    /// its servers once its journal is sent (an rmdir answered behind).
    fn shows_empty(&self, caller: &Caller, now: Instant) -> bool {
        self.answers_behind(self.partition, caller, now)
            && self.changing.is_empty()
            && self
                .names
                .values()
                .all(|e| matches!(e.cached, Cached::Missing))
    }

    /// Whether this part, valid now, answers `caller`'s whole listing of its directory:
    /// listed whole by `caller`, nothing of it on its way to a server. (A complete part
    /// is the whole, unsplit directory: callers check it is the only one.)
    fn lists_whole_for(&self, caller: &Caller, now: Instant) -> bool {
        self.until > now && self.complete.as_ref() == Some(caller) && self.changing.is_empty()
    }

    /// Whether this part, listed whole, shows `name` missing.
    fn knows_missing(&self, name: &str) -> bool {
        self.complete.is_some() && !self.names.contains_key(name) && !self.changing.contains(name)
    }
}

/// A directory's times as kept already, when newer than an answer's (the answer left
/// before a change this client answered behind moved them: `Leases::behind`).
fn keep_newer_times(kept: Option<&Entry>, new: &mut Entry) {
    if let (
        Some(Entry {
            cached: Cached::Found { inode: old, .. },
            ..
        }),
        Entry {
            cached: Cached::Found { inode, .. },
            ..
        },
    ) = (kept, new)
        && old.ino == inode.ino
        && inode.kind == FileKind::Directory
    {
        inode.mtime_ns = inode.mtime_ns.max(old.mtime_ns);
        inode.ctime_ns = inode.ctime_ns.max(old.ctime_ns);
    }
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
            drops: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            hook: RwLock::new(None),
            journal: crate::behind_journals::Journal::default(),
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

    /// `dir`'s drop count now: read before a request about one of its names is sent.
    pub(crate) fn mark(&self, dir: &str) -> LeaseMark {
        LeaseMark {
            drops: self.drops[stripe(dir)].load(Ordering::Acquire),
            index_epoch: 0,
        }
    }

    /// Whether what this client answered about `dir/name` since `mark` was read is
    /// still covered by a lease: the name is kept under a valid lease, and no lease on
    /// `dir` was dropped since (so no other client's change of `dir` was applied since
    /// the answer was made). A mount lets the kernel keep such an answer until the
    /// lease is dropped.
    pub(crate) fn covers(&self, dir: &str, name: &str, mark: LeaseMark) -> bool {
        let g = self.lock();
        // Read under the lock: a drop bumps it under the lock.
        if self.mark(dir).drops != mark.drops {
            return false;
        }
        let now = Instant::now();
        g.dirs.get(dir).is_some_and(|parts| {
            parts
                .iter()
                .any(|p| p.until > now && (p.names.contains_key(name) || p.knows_missing(name)))
        })
    }

    /// Whether the whole listing of `dir` that `caller` was answered since `mark` was
    /// read is still covered by a valid lease (as `listing` answers it, and no lease on
    /// `dir` dropped since): a mount then lets the kernel keep the listing until the
    /// lease is dropped.
    pub(crate) fn covers_listing(&self, dir: &str, caller: &Caller, mark: LeaseMark) -> bool {
        let g = self.lock();
        if self.mark(dir).drops != mark.drops {
            return false;
        }
        let now = Instant::now();
        g.dirs.get(dir).is_some_and(
            |parts| matches!(parts.as_slice(), [part] if part.lists_whole_for(caller, now)),
        )
    }

    /// Taken before this client sends a change of a name in `dir` (`put_own`).
    pub(crate) fn before_own_change(&self, dir: &str) -> OwnChange {
        let g = self.lock();
        let now = Instant::now();
        OwnChange {
            mark: self.mark(dir),
            held: g
                .dirs
                .get(dir)
                .is_some_and(|parts| parts.iter().any(|p| p.until > now)),
        }
    }

    /// Keeps what this client's own change of `dir/name` left (`inode`, as the servers
    /// answered it), under the lease of `partition` (the one holding the name), if that
    /// lease was held from before the change was sent until now with no drop between: a
    /// change by anyone else since would have recalled it. The kernel may then keep a
    /// name this mount just made (a stat after a create costs nothing).
    pub(crate) fn put_own(
        &self,
        (dir, name): (&str, &str),
        partition: PartitionId,
        entry: Entry,
        own: OwnChange,
    ) {
        if !own.held {
            tracing::trace!(
                holder = self.holder,
                dir,
                name,
                "own change not kept: no lease held before it"
            );
            return;
        }
        if !entry.keepable() {
            return;
        }
        let mut g = self.lock();
        if self.mark(dir) != own.mark {
            tracing::trace!(
                holder = self.holder,
                dir,
                name,
                "own change not kept: a lease was dropped meanwhile"
            );
            return;
        }
        let now = Instant::now();
        match g
            .dirs
            .get_mut(dir)
            .and_then(|parts| parts.iter_mut().find(|p| p.partition == partition))
            .filter(|p| p.until > now)
        {
            Some(p) => {
                p.used = now;
                p.changing.remove(name);
                p.names.insert(name.to_string(), entry);
                tracing::trace!(holder = self.holder, dir, name, "own change kept");
            }
            None => {
                tracing::trace!(holder = self.holder, dir, name, %partition, "own change not kept: no lease of its partition");
            }
        }
    }

    /// The cached answer for `dir/name` as `caller` got it, if a valid lease covers it.
    pub(crate) fn get(&self, dir: &str, name: &str, caller: &Caller) -> Option<Cached> {
        let now = Instant::now();
        let mut g = self.lock();
        let parts = g.dirs.get_mut(dir)?;
        if let Some(part) = parts
            .iter_mut()
            .filter(|p| p.until > now)
            .find(|p| p.names.get(name).is_some_and(|e| e.caller == *caller))
        {
            part.used = now;
            return part.names.get(name).map(|e| e.cached.clone());
        }
        // Not among the names of a whole listing: missing.
        let part = parts.iter_mut().find(|p| {
            p.until > now && p.complete.as_ref() == Some(caller) && p.knows_missing(name)
        })?;
        part.used = now;
        Some(Cached::Missing)
    }

    /// Every name of `dir` with its attributes, when a valid lease covers the whole
    /// directory listed by `caller` (a whole listing kept, nothing of it being changed by
    /// a request on its way): a listing answered with no request (`readdir_page`).
    pub(crate) fn listing(&self, dir: &str, caller: &Caller) -> Option<Vec<(String, Inode)>> {
        let now = Instant::now();
        let mut g = self.lock();
        let parts = g.dirs.get_mut(dir)?;
        // A complete part is the whole (unsplit) directory: the only one.
        let [part] = parts.as_mut_slice() else {
            return None;
        };
        if !part.lists_whole_for(caller, now) {
            return None;
        }
        part.used = now;
        Some(
            part.names
                .iter()
                .filter_map(|(n, e)| match &e.cached {
                    // "" is the root's own attributes, kept under the lease on "/".
                    Cached::Found { inode, .. } if !n.is_empty() => {
                        Some((n.clone(), inode.clone()))
                    }
                    _ => None,
                })
                .collect(),
        )
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

    #[cfg(test)]
    /// Keeps `cached` for `dir/name` under `grant`, if `dir`'s generation is still `gen`
    /// (read before the request was sent at `sent`). Returns the server whose poll and
    /// renewals must start (none runs there yet), with the run's number.
    pub(crate) fn put(
        &self,
        dir: &str,
        name: &str,
        cached: Entry,
        grant: &LeaseGrant,
        sent: (Instant, u64),
        addr: String,
    ) -> Option<(String, u64)> {
        self.put_many(
            dir,
            vec![(name.to_string(), cached)],
            None,
            grant,
            sent,
            addr,
        )
    }

    /// `put` of many names of `dir` at once; with `complete` (the caller whose listing it
    /// was), they are every name the lease's part of `dir` holds, so a name not among
    /// them is missing (for that caller) until this client changes it.
    pub(crate) fn put_many(
        &self,
        dir: &str,
        answers: Vec<(String, Entry)>,
        complete: Option<Caller>,
        grant: &LeaseGrant,
        (sent, seen): (Instant, u64),
        addr: String,
    ) -> Option<(String, u64)> {
        if grant.key.dir != dir {
            return None;
        }
        let period = Duration::from_millis(grant.valid_ms);
        let until = sent + period * TRUST_NUM / TRUST_DEN;
        let mut g = self.lock();
        let now = Instant::now();
        // Checked under the lock: a drop takes the lock before it bumps.
        if self.generation(dir) != seen || until <= now {
            return None;
        }
        tracing::trace!(holder = self.holder, dir, names = answers.len(), partition = %grant.key.partition, exclusive = grant.exclusive.is_some(), "kept under a lease");
        let parts = g.dirs.entry(dir.to_string()).or_default();
        // A lease of this part that ended, or came from another server (a failover), is
        // left to its upkeep to drop and tell of (the kernel may keep its names): until
        // then nothing new is kept for the part.
        let part = match parts
            .iter()
            .position(|p| p.partition == grant.key.partition)
        {
            Some(i) if parts[i].addr != addr || parts[i].until <= now => return None,
            Some(i) => {
                let p = &mut parts[i];
                p.until = p.until.max(until);
                p.used = now;
                p
            }
            None => {
                parts.push(Part {
                    partition: grant.key.partition,
                    until,
                    period,
                    used: now,
                    addr: addr.clone(),
                    names: BTreeMap::new(),
                    complete: None,
                    changing: BTreeSet::new(),
                    exclusive: None,
                    born: false,
                    unsent: false,
                });
                parts.last_mut()?
            }
        };
        // The server never makes an exclusive lease shared without a recall (which drops
        // the part): a grant without the attributes leaves it as it was.
        if grant.exclusive.is_some() {
            part.exclusive.clone_from(&grant.exclusive);
        }
        let mut whole = complete.is_some();
        for (name, mut cached) in answers {
            if !cached.keepable() {
                whole = false;
                continue;
            }
            part.changing.remove(&name);
            keep_newer_times(part.names.get(&name), &mut cached);
            part.names.insert(name, cached);
        }
        if whole {
            part.complete = complete;
            part.changing.clear();
        }
        g.start_run(addr)
    }

    /// Directory `dir`, whose mkdir this client answered behind (its partition
    /// `partition`, at `addr`), held exclusively from its birth, listed whole and empty by
    /// `caller`, with the attributes answered (`attrs`), trusted for `period`'s share from
    /// `answered` (before its server grants it: docs/fuse.md "mkdir behind"). Returns
    /// the server whose poll and renewals must start, as `put_many`.
    pub(crate) fn put_born(
        &self,
        (dir, partition, addr): (&str, PartitionId, String),
        caller: &Caller,
        attrs: Inode,
        (answered, period): (Instant, Duration),
    ) -> Option<(String, u64)> {
        let until = answered + period * TRUST_NUM / TRUST_DEN;
        let mut g = self.lock();
        let sent = g.sent_before_born.remove(dir);
        let now = Instant::now();
        if until <= now {
            return None;
        }
        if g.dirs.contains_key(dir) {
            // Something is held of an earlier directory of that name (given up as that
            // one went): the new one is not held; its changes go after its mkdir.
            return None;
        }
        self.bump(dir);
        let parts = g.dirs.entry(dir.to_string()).or_default();
        parts.push(Part {
            partition,
            until,
            period,
            used: now,
            addr: addr.clone(),
            names: BTreeMap::new(),
            complete: Some(caller.clone()),
            changing: BTreeSet::new(),
            exclusive: Some(attrs),
            born: true,
            unsent: !sent,
        });
        tracing::trace!(holder = self.holder, dir, %partition, "held from its birth");
        g.start_run(addr)
    }

    /// The mkdir of directory `dir` answered behind is taken to be sent (at `taken`): its
    /// birth lease is trusted from then as a grant sent then would be (the servers grant
    /// it when the mkdir reaches them, no earlier). Noted for `put_born` if the mount
    /// does not hold it yet (the sender may take the mkdir before it does).
    pub(crate) fn born_sent(&self, dir: &str, taken: Instant) {
        let mut g = self.lock();
        let unsent = g
            .dirs
            .get_mut(dir)
            .and_then(|parts| parts.iter_mut().find(|p| p.born && p.unsent));
        match unsent {
            Some(p) => {
                p.unsent = false;
                // Not a part whose trust ran out already: left to its upkeep to drop.
                if p.until > Instant::now() {
                    p.until = p.until.max(taken + p.period * TRUST_NUM / TRUST_DEN);
                }
            }
            None => {
                g.sent_before_born.insert(dir.to_string());
            }
        }
    }

    /// `dir`'s mkdir was answered behind but the mount does not hold it from its birth:
    /// forgets its `born_sent` note.
    pub(crate) fn not_born(&self, dir: &str) {
        self.lock().sent_before_born.remove(dir);
    }

    /// Whether `caller` holds directory `dir` whole and exclusively, its changes answered
    /// behind (a listing meant to claim it for changes would bring nothing new).
    pub(crate) fn holds_for_changes(&self, dir: &str, caller: &Caller) -> bool {
        let now = Instant::now();
        let g = self.lock();
        !g.attrs_changing(dir)
            && matches!(g.dirs.get(dir).map(Vec::as_slice),
                Some([p]) if p.answers_behind(p.partition, caller, now))
    }

    /// This client changed directory `dir`'s own attributes (its mode or owner) to
    /// `inode`'s: exclusive parts of it answer changes behind by these from now on (the
    /// servers keep them with the lease too, `DirAttrsChanged`).
    pub(crate) fn refresh_exclusive(&self, dir: &str, inode: &Inode) {
        let mut g = self.lock();
        for p in g.dirs.get_mut(dir).into_iter().flatten() {
            if p.exclusive.is_some() {
                p.exclusive = Some(inode.clone());
            }
        }
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
                if p.complete.is_some() {
                    p.changing.insert(name.to_string());
                }
            }
        }
    }

    /// Drops the leases `keys` (recalled): the names they covered, by directory.
    fn drop_keys(&self, keys: &[LeaseKey]) -> Vec<(String, Vec<String>)> {
        let mut guard = self.lock();
        let g = &mut *guard;
        let mut out = Vec::new();
        for k in keys {
            self.bump(&k.dir);
            self.drops[stripe(&k.dir)].fetch_add(1, Ordering::AcqRel);
            if let Some(parts) = g.dirs.get_mut(&k.dir) {
                let mut names = Vec::new();
                let draining = &mut g.draining;
                parts.retain_mut(|p| {
                    if p.partition == k.partition {
                        names.extend(std::mem::take(&mut p.names).into_keys());
                        if p.exclusive.is_some() {
                            draining.insert(k.clone(), p.addr.clone());
                        }
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
}

mod upkeep;

/// An exclusive lease is answered behind only while this much of it is left: a change
/// answered now reaches the journal, and the journal its server, before the lease ends.
const BEHIND_MARGIN: Duration = Duration::from_millis(150);

/// How a change answered behind moves its directory's own entry, as its servers' touch
/// of it will (`Leases::behind`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Touch {
    /// The directory's new mtime and ctime.
    pub(crate) at: i64,
    /// A subdirectory came (a mkdir: 1) or went (an rmdir: -1): its link count moves so.
    pub(crate) subdirs: i8,
}

/// A part of a directory held exclusively, as `Leases::behind` lends it.
pub(crate) struct Held<'a> {
    part: &'a mut Part,
    caller: &'a Caller,
}

impl Held<'_> {
    /// The directory's attributes as the exclusive grant found them.
    pub(crate) fn dir_attrs(&self) -> Option<&Inode> {
        self.part.exclusive.as_ref()
    }

    /// The lease's period as its server granted it.
    pub(crate) fn period(&self) -> Duration {
        self.part.period
    }

    /// What the lease knows of `name`: `Some(Some(attrs))` it exists, `Some(None)` it
    /// does not, `None` unknown (not kept, or being changed by a request on its way).
    pub(crate) fn lookup(&self, name: &str) -> Option<Option<Inode>> {
        if self.part.changing.contains(name) {
            return None;
        }
        match self.part.names.get(name).map(|e| &e.cached) {
            Some(Cached::Found { inode, .. }) => Some(Some(inode.clone())),
            Some(Cached::Missing) => Some(None),
            None if self.part.knows_missing(name) => Some(None),
            None => None,
        }
    }

    /// Records what a change answered behind left of `name`: its attributes, or that it
    /// is gone.
    pub(crate) fn set(&mut self, name: &str, inode: Option<Inode>) {
        self.part.changing.remove(name);
        match inode {
            Some(i) => {
                self.part
                    .names
                    .insert(name.to_string(), Entry::attrs(self.caller.clone(), i));
            }
            None if self.part.complete.is_some() => {
                self.part.names.remove(name);
            }
            None => {
                self.part.names.insert(
                    name.to_string(),
                    Entry {
                        caller: self.caller.clone(),
                        cached: Cached::Missing,
                    },
                );
            }
        }
    }
}

impl Leases {
    /// Runs `f` on the part of `dir` that `partition` holds, if this client holds it
    /// exclusively with at least `BEHIND_MARGIN` left, under the lock that drops leases:
    /// so a change `f` answers and journals is either journaled before a recall drops the
    /// lease (and the recall sends it before giving the lease back) or not answered.
    /// Answers on their way for `dir` are not kept once `f` answered something.
    ///
    /// With `emptied` (an rmdir of that directory of `dir`): only if that directory too is
    /// held so and shows no name (`Part::shows_empty`, its only part); once `f` answered
    /// a change (`touched`), its parts are given up here, kept at their server until their
    /// journal is sent (`draining`).
    pub(crate) fn behind<R>(
        &self,
        (dir, emptied): (&str, Option<&str>),
        partition: PartitionId,
        caller: &Caller,
        f: impl FnOnce(Held<'_>) -> Option<(R, Option<Touch>)>,
    ) -> Option<R> {
        let mut g = self.lock();
        let now = Instant::now();
        if g.attrs_changing(dir) {
            return None;
        }
        if let Some(child) = emptied {
            let empty = match g.dirs.get(child).map(Vec::as_slice) {
                Some([only]) => only.shows_empty(caller, now),
                _ => false,
            };
            if !empty || g.attrs_changing(child) {
                return None;
            }
        }
        let part = g
            .dirs
            .get_mut(dir)?
            .iter_mut()
            .find(|p| p.answers_behind(partition, caller, now))?;
        part.used = now;
        let (r, touched) = f(Held { part, caller })?;
        // A change of the directory's names moves its times (as the servers' touch of its
        // entry will): what is kept of its entry says so.
        // (The root's own entry is ("/", ""), kept under the lease on "/" itself.)
        if let (Some(child), Some(_)) = (emptied, touched) {
            self.give_up_removed(&mut g, child);
        }
        if let Some(Touch { at, subdirs }) = touched {
            let (up, name) = myriad_placement::split_parent(dir);
            // (Answers on their way about the directory's entry may hold the old times:
            // `put_many` never takes a directory's times back.)
            if let Some(parts) = g.dirs.get_mut(up) {
                for p in parts {
                    if let Some(Entry {
                        cached: Cached::Found { inode, .. },
                        ..
                    }) = p.names.get_mut(name)
                    {
                        inode.mtime_ns = at;
                        inode.ctime_ns = at;
                        // 2 + subdirectories, or 1 where nobody counts (a split one).
                        if subdirs < 0 && inode.nlink > 2 {
                            inode.nlink -= 1;
                        } else if subdirs > 0 && inode.nlink >= 2 {
                            inode.nlink += 1;
                        }
                    }
                }
            }
        }
        self.bump(dir);
        Some(r)
    }

    /// Directory `child`, removed by a change answered behind: what is held of it and
    /// below it goes; its exclusive part stays at its server until its journal is sent.
    fn give_up_removed(&self, g: &mut Inner, child: &str) {
        for d in g.at_or_below(child) {
            self.bump(&d);
            self.drops[stripe(&d)].fetch_add(1, Ordering::AcqRel);
            for p in g.dirs.remove(&d).into_iter().flatten() {
                if p.exclusive.is_some() {
                    let key = LeaseKey {
                        partition: p.partition,
                        dir: d.clone(),
                    };
                    g.draining.insert(key, p.addr);
                }
            }
        }
    }

    /// Whether changes of `caller` in `dir`'s part in `partition` are answered behind now
    /// (`behind` would lend the part).
    pub(crate) fn answers_behind(
        &self,
        dir: &str,
        partition: PartitionId,
        caller: &Caller,
    ) -> bool {
        let now = Instant::now();
        let g = self.lock();
        !g.attrs_changing(dir)
            && g.dirs.get(dir).is_some_and(|parts| {
                parts
                    .iter()
                    .any(|p| p.answers_behind(partition, caller, now))
            })
    }

    /// This client is about to change directory `dir`'s mode or owner: until the guard
    /// goes, nothing in `dir` or below it is answered behind (what was is sent first:
    /// `Client::drain_before`), so no change answered by the old attributes reaches the
    /// servers after the new ones, which could refuse it (issue 47: another user's
    /// unlink, answered, then refused once root had made the directory 0555).
    pub(crate) fn pause_behind(&self, dir: &str) -> PausedBehind<'_> {
        self.lock().attrs_changing.push(dir.to_string());
        PausedBehind {
            leases: self,
            dir: dir.to_string(),
        }
    }
}

#[cfg(test)]
mod tests;

/// What a change of this client makes stale (`Leases::forget_change`).
#[derive(Default)]
pub(crate) struct Stale {
    /// The entries it changes.
    pub(crate) paths: Vec<String>,
    /// It may move or remove a directory: everything cached beneath the first path.
    pub(crate) subtree: bool,
    /// It may move its directories' times or link counts (their own entries). A change
    /// of one name's attributes or contents does not: a directory's times follow its
    /// names, not their attributes. (Forgetting the directory's entry anyway sent the
    /// kernel's next look at it to a server: one request per directory of an untar.)
    pub(crate) dirs: bool,
}

/// What a change of this client makes stale.
pub(crate) fn changed_paths(req: &myriad_proto::ClientRequest) -> Stale {
    match req.change() {
        Some(c) => Stale {
            paths: c.names().map(str::to_string).collect(),
            subtree: c.subtree,
            dirs: c.alters_listing || c.served_dir.is_none(),
        },
        None => Stale::default(),
    }
}

impl Leases {
    /// Forgets what a change of this client is about to make stale (and makes answers on
    /// their way for those directories unkept): each changed name, with `dirs` its
    /// directory's own entry (times, link count), and with `subtree` everything below the
    /// first path.
    pub(crate) fn forget_change(&self, stale: &Stale) {
        let Stale {
            paths,
            subtree,
            dirs,
        } = stale;
        for p in paths {
            if p == "/" {
                continue;
            }
            let (dir, name) = myriad_placement::split_parent(p);
            self.forget_name(dir, name);
            if *dirs && dir != "/" {
                let (up, dname) = myriad_placement::split_parent(dir);
                self.forget_name(up, dname);
            }
        }
        if *subtree && let Some(top) = paths.first() {
            let mut g = self.lock();
            for d in g.at_or_below(top) {
                self.bump(&d);
                g.dirs.remove(&d);
            }
        }
    }
}
