//! Directory leases of one partition (docs/fuse.md "Directory leases"): who may cache the
//! entries of which directory, and the gate every mutation passes before it is applied.
//!
//! Invariant: a mutation that changes entries of directory D is applied only once every
//! lease on D held by a client other than the one making the change was given back or has
//! expired; and no lease on D is granted or renewed from the moment such a mutation
//! reaches the gate until it is applied. So a client holding a valid lease never caches
//! an entry older than a change another client was told is done.
//!
//! Exclusive leases (docs/fuse.md "Write-behind"), invariant (E): a read of D by any
//! client but an exclusive holder of D is served only once that exclusive lease was given
//! back or has expired (`before_read`, the read gate), and an exclusive lease is granted
//! only while no other client holds a lease on D. So nobody else reads D while a holder
//! answers its own changes of D locally: what it answered reaches the servers (its journal
//! is sent) before it gives the lease back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use myriad_placement::PartitionId;
use myriad_proto::LeaseKey;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::recalls::Recalls;
use crate::state::changed_dirs::ChangedDirs;

/// How long a lease lasts from its grant or renewal. At most `DOWN_AFTER - LEASE` (0.8 s):
/// then every lease an old primary granted has ended before a new primary of its
/// partition serves, and a failover needs no grace period (docs/fuse.md).
pub const LEASE_PERIOD: Duration = Duration::from_millis(800);
/// A directory whose leases two changes recalled within this long is contended: none is
/// granted on it for this long after the second (two clients changing one directory
/// work without leases instead of recalling each other's at every change). One change
/// alone does not make it contended: its readers lease it again at once (a registry
/// entry added, a file created in a shared directory).
const CONTENDED_FOR: Duration = Duration::from_secs(2);
/// How long a directory whose attributes are being changed gets no exclusive lease at
/// most (`LeaseTable::before_attrs_change`): the change is applied right after the
/// recall it waits for, so this only bounds a change that failed or a partition that died.
const ATTRS_CHANGE_MAX: Duration = Duration::from_secs(5);
/// A recalled holder still sending the changes it answered behind under its lease (its
/// journal, docs/fuse.md "Write-behind") keeps it, for whoever waits on the recall, until
/// a lease period after its latest change, but no longer than this after the recall
/// (`DirLeases::draining`). Only a holder silent for a lease period is waited out: a busy
/// or slow one (a journal of thousands of changes, a loaded machine) is waited for, so its
/// changes apply before the change that recalled them and are not refused after it.
/// The holder trusts nothing under a recalled lease (it stops caching and answering at
/// the recall), so the extension never outlives a failover's guarantee.
const RECALLED_DRAIN_MAX: Duration = Duration::from_secs(5);
/// Expired leases are swept out every this many grants.
const SWEEP_EVERY: u64 = 4096;

/// The client whose change a mutation is part of when it is not the change sent once the
/// mutation's context carries (`Context::once`), per directory or for all: its leases on
/// the directories the mutation changes are not recalled for it (the client forgets what
/// its change makes stale itself).
///
/// - A directory touch sent by the partition that applied a client's create reports that
///   client's change (else a client creating in a directory would recall its own lease on
///   the parent at every create). A directory touched for several clients in one batch
///   exempts none (`of`).
/// - Another partition's side of a client's change (a rename's target, a link's new name,
///   the directory object of an rmdir; the peer request names the client) exempts it in
///   every directory it changes (`client`). Recalling them made a cross-directory rename
///   wait for the client's own recall, twice, on every rename (issue 47).
#[derive(Clone, Debug, Default)]
pub struct Exempt {
    dirs: BTreeMap<String, u64>,
    all: Option<u64>,
}

impl Exempt {
    #[must_use]
    pub fn of(touches: impl IntoIterator<Item = (String, Option<u64>)>) -> Exempt {
        let mut dirs: BTreeMap<String, Option<u64>> = BTreeMap::new();
        for (dir, client) in touches {
            dirs.entry(dir)
                .and_modify(|c| {
                    if *c != client {
                        *c = None;
                    }
                })
                .or_insert(client);
        }
        Exempt {
            dirs: dirs
                .into_iter()
                .filter_map(|(d, c)| c.map(|c| (d, c)))
                .collect(),
            all: None,
        }
    }

    /// `client` (if any) exempt in every directory.
    #[must_use]
    pub fn client(client: Option<u64>) -> Exempt {
        Exempt {
            dirs: BTreeMap::new(),
            all: client,
        }
    }

    /// The client exempt from recalls of `dir`, if any.
    fn client_of(&self, dir: &str) -> Option<u64> {
        self.dirs.get(dir).copied().or(self.all)
    }
}

/// A lease granted (`LeaseTable::grant`).
#[derive(Clone, Debug)]
pub struct Granted {
    pub key: LeaseKey,
    pub exclusive: bool,
    /// With an exclusive lease: the directory's attributes, once known (`set_attrs`).
    pub attrs: Option<myriad_proto::Inode>,
}

pub struct LeaseTable {
    me: PartitionId,
    recalls: Arc<Recalls>,
    inner: Mutex<Inner>,
    /// Woken by every release.
    released: Notify,
}

#[derive(Default)]
struct Inner {
    dirs: BTreeMap<String, DirLeases>,
    /// Exclusive leases granted and not yet seen given back or expired: while none is,
    /// reads pass the read gate without looking.
    exclusive: usize,
    /// Mutations at the gate that may change any directory (`ChangedDirs::All`).
    all_pending: usize,
    grants: u64,
    /// When directories last changed here.
    changes: ChangeLog,
    /// Reads are lent to copies until then (`lend_reads`): no exclusive lease meanwhile.
    lent_until: Option<Instant>,
    /// No reads lent until then: a birth lease waits for the loan to end (`grant_born`).
    no_loans_until: Option<Instant>,
}

impl Inner {
    /// Drops the leases that ended by `now` and the directories left without any.
    fn sweep(&mut self, now: Instant) {
        let mut ended = 0;
        self.dirs.retain(|_, l| {
            l.sweep(now, &mut ended);
            l.recalled.expire(now);
            !l.idle()
        });
        self.exclusive -= ended;
    }
}

/// The most directories whose last change is kept: past it, every directory counts as
/// changed at that moment (never quieter than it was).
const CHANGE_LOG_MAX: usize = 4096;

/// When each directory last changed (for the candidates of automatic metadata indexes,
/// docs/metadata-index.md): bounded, and conservative past its bound.
#[derive(Default)]
struct ChangeLog {
    at: std::collections::HashMap<String, Instant>,
    /// Every directory changed at this moment or later.
    floor: Option<Instant>,
}

impl ChangeLog {
    fn note(&mut self, dir: &str, now: Instant) {
        if self.at.len() >= CHANGE_LOG_MAX && !self.at.contains_key(dir) {
            self.at.clear();
            self.floor = Some(now);
        }
        // Every mutation passes here: no new key for a directory already known.
        match self.at.get_mut(dir) {
            Some(at) => *at = now,
            None => {
                self.at.insert(dir.to_string(), now);
            }
        }
    }

    fn all(&mut self, now: Instant) {
        self.at.clear();
        self.floor = Some(now);
    }

    fn last(&self, dir: &str) -> Option<Instant> {
        self.at.get(dir).copied().max(self.floor)
    }
}

#[derive(Default)]
struct DirLeases {
    /// Holder -> when its lease ends.
    holders: BTreeMap<u64, Instant>,
    /// The holder whose lease is exclusive, if one is (it is then the only holder), and
    /// the directory's attributes its grant found (`set_attrs`), told with every grant
    /// to it.
    exclusive: Option<u64>,
    exclusive_attrs: Option<myriad_proto::Inode>,
    /// Mutations of this directory past the gate and not yet applied, by the client whose
    /// change each is (`None`: unknown). Only that client's lease may be granted or
    /// renewed meanwhile: its own change does not recall it.
    pending: BTreeMap<Option<u64>, usize>,
    recalled: Recalled,
    /// The directory's own attributes (mode, owner) are being changed on its parent's
    /// partition (`before_attrs_change`): no exclusive lease is granted until they are
    /// (`refresh_attrs`), or this passes.
    attrs_changing_until: Option<Instant>,
    /// Recalled holders -> the latest their lease may be kept to by the changes they
    /// still send (`RECALLED_DRAIN_MAX`). Only holders still in `holders`.
    draining: BTreeMap<u64, Instant>,
}

/// The recalls of one directory's leases, as far as contention goes (`CONTENDED_FOR`).
#[derive(Default)]
struct Recalled {
    /// The last change that recalled a lease here, within `CONTENDED_FOR`.
    last: Option<Instant>,
    /// No grant until then: two changes recalled leases here within `CONTENDED_FOR`.
    contended_until: Option<Instant>,
}

impl Recalled {
    fn note(&mut self, now: Instant) {
        if self.last.is_some_and(|t| now - t < CONTENDED_FOR) {
            self.contended_until = Some(now + CONTENDED_FOR);
        }
        self.last = Some(now);
    }

    fn contended(&self, now: Instant) -> bool {
        self.contended_until.is_some_and(|t| now < t)
    }

    /// Forgets what no longer counts.
    fn expire(&mut self, now: Instant) {
        if self.last.is_some_and(|t| now - t >= CONTENDED_FOR) {
            self.last = None;
        }
        if self.contended_until.is_some_and(|t| now >= t) {
            self.contended_until = None;
        }
    }

    fn quiet(&self) -> bool {
        self.last.is_none() && self.contended_until.is_none()
    }
}

impl DirLeases {
    fn idle(&self) -> bool {
        self.holders.is_empty()
            && self.pending.is_empty()
            && self.recalled.quiet()
            && self.attrs_changing_until.is_none()
    }

    /// Whether the directory's attributes are being changed (`attrs_changing_until`);
    /// forgets a hold that ran out.
    fn attrs_changing(&mut self, now: Instant) -> bool {
        if self.attrs_changing_until.is_some_and(|t| t <= now) {
            self.attrs_changing_until = None;
        }
        self.attrs_changing_until.is_some()
    }

    /// Forgets expired holders (and an exclusive lease among them: `ended` counts it).
    fn sweep(&mut self, now: Instant, ended: &mut usize) {
        self.holders.retain(|_, end| *end > now);
        let holders = &self.holders;
        self.draining.retain(|h, _| holders.contains_key(h));
        self.attrs_changing(now);
        if self
            .exclusive
            .is_some_and(|h| !self.holders.contains_key(&h))
        {
            self.exclusive = None;
            *ended += 1;
        }
    }

    /// `holder`'s lease was recalled: its own changes keep it from now on (`draining`).
    fn recalled_from(&mut self, holder: u64, now: Instant) {
        self.draining
            .entry(holder)
            .or_insert(now + RECALLED_DRAIN_MAX);
    }

    /// A change (or a renewal) by `client` here: if its lease is recalled and still held,
    /// it is sending what it answered behind, so whoever waits for the recall waits a
    /// lease period more (up to its bound). Wakes no one: waiters look again at the old
    /// end.
    fn holder_sent(&mut self, client: u64, now: Instant) {
        if let (Some(bound), Some(end)) =
            (self.draining.get(&client), self.holders.get_mut(&client))
            && *end > now
        {
            let kept = (now + LEASE_PERIOD).min(*bound);
            if kept > *end {
                *end = kept;
            }
        }
    }

    /// Whether a change of the directory by a client other than `holder` is under way.
    fn changing_for(&self, holder: u64) -> bool {
        self.pending.keys().any(|r| *r != Some(holder))
    }
}

/// Held while a mutation that passed the gate is applied.
pub struct ChangeGuard {
    table: Arc<LeaseTable>,
    changed: ChangedDirs,
    /// Per directory of `changed`, the client whose change it is.
    requesters: Vec<Option<u64>>,
}

impl Drop for ChangeGuard {
    fn drop(&mut self) {
        let Ok(mut inner) = self.table.inner.lock() else {
            return;
        };
        match &self.changed {
            ChangedDirs::None => {}
            ChangedDirs::All => inner.all_pending -= 1,
            ChangedDirs::Dirs(dirs) | ChangedDirs::Marks(dirs) => {
                let now = Instant::now();
                for (d, r) in dirs.iter().zip(&self.requesters) {
                    if let Some(l) = inner.dirs.get_mut(d) {
                        if let Some(n) = l.pending.get_mut(r) {
                            *n -= 1;
                            if *n == 0 {
                                l.pending.remove(r);
                            }
                        }
                        // Every directory a change passes gets an entry: it goes once
                        // nothing is held on it (the map stays as small as the leases).
                        l.recalled.expire(now);
                        let mut ended = 0;
                        l.sweep(now, &mut ended);
                        let idle = l.idle();
                        inner.exclusive -= ended;
                        if idle {
                            inner.dirs.remove(d);
                        }
                    }
                }
            }
        }
    }
}

/// How long no reads are lent to copies once a birth lease waited for a loan to end (a
/// loan lasts at most a couple of seconds).
const BORN_WAITS_FOR_LOANS: Duration = Duration::from_secs(5);

impl LeaseTable {
    #[must_use]
    pub fn new(me: PartitionId, recalls: Arc<Recalls>) -> LeaseTable {
        LeaseTable {
            me,
            recalls,
            inner: Mutex::new(Inner::default()),
            released: Notify::new(),
        }
    }

    fn key(&self, dir: &str) -> LeaseKey {
        LeaseKey {
            partition: self.me,
            dir: dir.to_string(),
        }
    }

    /// Lends reads to copies until `until` (docs/zones.md "Nearest copy"). A copy answers
    /// without this table, so no exclusive lease (a client's creates not sent yet, which a
    /// read here would recall first) may exist meanwhile: false, and nothing lent, while
    /// one does; none is granted until `until`.
    pub fn lend_reads(&self, until: Instant) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        if inner.no_loans_until.is_some_and(|u| u > Instant::now()) {
            return false;
        }
        if inner.exclusive > 0 {
            inner.sweep(Instant::now());
            if inner.exclusive > 0 {
                return false;
            }
        }
        inner.lent_until = Some(inner.lent_until.map_or(until, |u| u.max(until)));
        true
    }

    /// A lease on `dir` for `holder`, unless a change of it is under way or it was
    /// contended lately: exclusive if `exclusive` is asked and no other client holds one.
    /// Recorded before the read it comes with runs. A shared grant to a holder of an
    /// exclusive lease leaves it exclusive (and tells the attributes kept with it).
    pub fn grant(&self, dir: &str, holder: u64, exclusive: bool) -> Option<Granted> {
        let mut inner = self.inner.lock().ok()?;
        let now = Instant::now();
        inner.grants += 1;
        if inner.grants.is_multiple_of(SWEEP_EVERY) {
            inner.sweep(now);
        }
        if inner.all_pending > 0 {
            return None;
        }
        let mut ended = 0;
        let lent = inner.lent_until.is_some_and(|u| u > now);
        let l = inner.dirs.entry(dir.to_string()).or_default();
        l.sweep(now, &mut ended);
        let mut newly = 0;
        let granted = if l.changing_for(holder)
            || l.recalled.contended(now)
            || l.exclusive.is_some_and(|h| h != holder)
        {
            None
        } else {
            let alone = l.holders.keys().all(|h| *h == holder);
            l.holders.insert(holder, now + LEASE_PERIOD);
            if exclusive && alone && l.exclusive.is_none() && !lent && !l.attrs_changing(now) {
                l.exclusive = Some(holder);
                l.exclusive_attrs = None;
                newly = 1;
            }
            let mine = l.exclusive == Some(holder);
            Some(Granted {
                key: self.key(dir),
                exclusive: mine,
                attrs: if mine {
                    l.exclusive_attrs.clone()
                } else {
                    None
                },
            })
        };
        inner.exclusive = inner.exclusive + newly - ended;
        granted
    }

    /// An exclusive lease on directory `dir`, about to be made for `holder`, whose mkdir
    /// that client answered behind (docs/fuse.md "mkdir behind"), keeping `attrs` (the
    /// new directory's): granted before the object exists, so that no read of the new
    /// directory passes the holder's changes there. False if it cannot be granted now
    /// (a lease another client still holds on that path, reads lent to copies, another's
    /// change under way): the mkdir is then refused `Busy`, and sent again.
    pub fn grant_born(&self, dir: &str, holder: u64, attrs: myriad_proto::Inode) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        let now = Instant::now();
        if inner.lent_until.is_some_and(|u| u > now) {
            // The loan is not renewed: the mkdir sent again finds it ended.
            inner.no_loans_until = Some(now + BORN_WAITS_FOR_LOANS);
            return false;
        }
        if inner.all_pending > 0 {
            return false;
        }
        let mut ended = 0;
        let l = inner.dirs.entry(dir.to_string()).or_default();
        l.sweep(now, &mut ended);
        // What makes an exclusive lease safe, not what keeps one from ping-ponging (a
        // path contended lately, an earlier directory's attributes changing): the maker
        // answered already, and a refusal costs its mkdir a round.
        let alone = l.holders.keys().all(|h| *h == holder);
        let granted = alone && !l.changing_for(holder) && l.exclusive.is_none_or(|h| h == holder);
        let mut newly = 0;
        if granted {
            l.holders.insert(holder, now + LEASE_PERIOD);
            if l.exclusive.is_none() {
                l.exclusive = Some(holder);
                newly = 1;
            }
            l.exclusive_attrs = Some(attrs);
        }
        inner.exclusive = inner.exclusive + newly - ended;
        granted
    }

    /// The directory's attributes an exclusive grant to `holder` found (told with its
    /// later grants).
    pub fn set_attrs(&self, dir: &str, holder: u64, attrs: myriad_proto::Inode) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(l) = inner.dirs.get_mut(dir)
            && l.exclusive == Some(holder)
        {
            l.exclusive_attrs = Some(attrs);
        }
    }

    /// The directory's attributes changed (its mode or owner, on its parent's partition):
    /// an exclusive lease's kept attributes become these, and exclusive leases may be
    /// granted again (`before_attrs_change`).
    pub fn refresh_attrs(&self, dir: &str, attrs: myriad_proto::Inode) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(l) = inner.dirs.get_mut(dir)
        {
            l.attrs_changing_until = None;
            if l.exclusive.is_some() {
                l.exclusive_attrs = Some(attrs);
            }
        }
    }

    /// Directory `dir`'s own attributes (its mode or owner, kept on its parent's
    /// partition) are about to change, by client `changer`: no exclusive lease on it is
    /// granted until `refresh_attrs` says they did (or `ATTRS_CHANGE_MAX` passed: the
    /// change failed or its partition died), and every other client's exclusive lease is
    /// recalled and waited for. So what a holder answered behind by the old attributes
    /// reaches the servers before the new ones apply, and nothing is answered behind by
    /// them after (a change answered and then refused when applied, issue 47).
    pub async fn before_attrs_change(self: &Arc<Self>, dir: &str, changer: Option<u64>) {
        if let Ok(mut inner) = self.inner.lock() {
            let l = inner.dirs.entry(dir.to_string()).or_default();
            l.attrs_changing_until = Some(Instant::now() + ATTRS_CHANGE_MAX);
        }
        self.before_read(dir, changer).await;
    }

    /// An exclusive grant the read it came with found the holder may not use (it may not
    /// create names in the directory): made shared.
    pub fn share(&self, dir: &str, holder: u64) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(l) = inner.dirs.get_mut(dir)
            && l.exclusive == Some(holder)
        {
            l.exclusive = None;
            inner.exclusive -= 1;
        }
    }

    /// The read gate: before a read of `dir` by `reader` (`None`: a client that did not
    /// say who it is), recalls another client's exclusive lease on it and returns once it
    /// was given back or expired. Renewals and grants to that holder wait meanwhile.
    pub async fn before_read(self: &Arc<Self>, dir: &str, reader: Option<u64>) {
        let holder = {
            let Ok(mut inner) = self.inner.lock() else {
                return;
            };
            if inner.exclusive == 0 {
                return;
            }
            let now = Instant::now();
            let mut ended = 0;
            let Some(l) = inner.dirs.get_mut(dir) else {
                return;
            };
            l.sweep(now, &mut ended);
            let holder = l.exclusive.filter(|h| Some(*h) != reader);
            if let Some(h) = holder {
                // Counted as a change by the reader: the holder's renewals are refused.
                *l.pending.entry(reader).or_default() += 1;
                l.recalled_from(h, now);
            }
            inner.exclusive -= ended;
            holder
        };
        let Some(holder) = holder else { return };
        // Counted until the read goes on, or is dropped while it waits.
        let _reading = ChangeGuard {
            table: self.clone(),
            changed: ChangedDirs::Dirs(vec![dir.to_string()]),
            requesters: vec![reader],
        };
        tracing::debug!(partition = %self.me, dir, holder, ?reader, "read recalls an exclusive lease");
        self.recalls.push(holder, self.key(dir));
        let mut waiting = vec![(dir.to_string(), holder)];
        self.wait_released(&mut waiting).await;
    }

    /// Extends `holder`'s lease on `dir` by a lease period, if it still holds one and no
    /// change of the directory is under way.
    pub fn renew(&self, dir: &str, holder: u64) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        let now = Instant::now();
        let all_pending = inner.all_pending;
        let Some(l) = inner.dirs.get_mut(dir) else {
            return false;
        };
        let changing = all_pending > 0 || l.changing_for(holder);
        if changing && l.exclusive == Some(holder) {
            // A recalled exclusive holder renews while it sends its journal (the client
            // keeps renewing a dropped lease whose changes are unsent): alive and working,
            // so whoever waits for the recall waits on, up to the bound. Still refused: it
            // trusts nothing under the lease any more. (Only the journal's own changes kept
            // it before; a client starved of CPU sent none within a lease period, and the
            // chmod it waited for applied first.)
            l.holder_sent(holder, now);
        }
        match l.holders.get_mut(&holder) {
            Some(end) if *end > now && !changing => {
                *end = now + LEASE_PERIOD;
                true
            }
            _ => false,
        }
    }

    /// `holder` gave its lease on `dir` back (it no longer caches the directory).
    pub fn release(&self, dir: &str, holder: u64) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(l) = inner.dirs.get_mut(dir)
        {
            l.holders.remove(&holder);
            l.draining.remove(&holder);
            if l.exclusive == Some(holder) {
                l.exclusive = None;
                inner.exclusive -= 1;
            }
        }
        self.released.notify_waiters();
    }

    /// The gate: recalls the leases a mutation changing `changed` breaks (every holder's
    /// but `requester`'s, or per directory the client `exempt` names: a directory touch
    /// reporting that client's change) and returns once
    /// each was given back or expired. New grants and renewals of those directories, but
    /// to that client, wait until the guard is dropped (after the mutation applied).
    /// Marks (`ChangedDirs::Marks`) recall only exclusive leases (recalling shared ones
    /// left every client of a tree just indexed without leases for a while, asking the
    /// servers for every name) and are not changes for `last_change`.
    pub async fn before(
        self: &Arc<Self>,
        changed: ChangedDirs,
        requester: Option<u64>,
        exempt: &Exempt,
    ) -> ChangeGuard {
        let mut waiting: Vec<(String, u64)> = Vec::new();
        let requester_of = |dir: &str| requester.or_else(|| exempt.client_of(dir));
        let requesters: Vec<Option<u64>> =
            changed.named().iter().map(|d| requester_of(d)).collect();
        let marks = matches!(changed, ChangedDirs::Marks(_));
        if let Ok(mut inner) = self.inner.lock() {
            let now = Instant::now();
            let mut recall = |dir: &String, l: &mut DirLeases| {
                let requester = requester_of(dir);
                let mut any = false;
                let mut recalled = Vec::new();
                for (h, end) in &l.holders {
                    if marks && l.exclusive != Some(*h) {
                        continue;
                    }
                    if Some(*h) != requester && *end > now {
                        recalled.push(*h);
                    }
                }
                for h in recalled {
                    l.recalled_from(h, now);
                    waiting.push((dir.clone(), h));
                    any = true;
                }
                if any {
                    l.recalled.note(now);
                }
            };
            match &changed {
                ChangedDirs::None => {}
                ChangedDirs::All => {
                    inner.changes.all(now);
                    inner.all_pending += 1;
                    for (d, l) in &mut inner.dirs {
                        recall(d, l);
                    }
                }
                ChangedDirs::Dirs(dirs) | ChangedDirs::Marks(dirs) => {
                    for (d, r) in dirs.iter().zip(&requesters) {
                        if !marks {
                            inner.changes.note(d, now);
                        }
                        let l = inner.dirs.entry(d.clone()).or_default();
                        *l.pending.entry(*r).or_default() += 1;
                        if let Some(client) = r {
                            l.holder_sent(*client, now);
                        }
                        if !l.holders.is_empty() {
                            recall(d, l);
                        }
                    }
                }
            }
        }
        for (dir, holder) in &waiting {
            self.recalls.push(*holder, self.key(dir));
        }
        self.wait_released(&mut waiting).await;
        ChangeGuard {
            table: self.clone(),
            changed,
            requesters,
        }
    }

    /// Whether a client other than `reader` holds `dir` exclusively (its changes there may
    /// be in its journal: a read gives way to it first).
    pub fn held_by_another(&self, dir: &str, reader: Option<u64>) -> bool {
        let Ok(inner) = self.inner.lock() else {
            return false;
        };
        inner.exclusive > 0
            && inner
                .dirs
                .get(dir)
                .and_then(|l| l.exclusive)
                .is_some_and(|h| Some(h) != reader)
    }

    /// When `dir` last changed here, as far as this table knows (`None`: not since it
    /// was made).
    pub fn last_change(&self, dir: &str) -> Option<Instant> {
        self.inner.lock().ok().and_then(|i| i.changes.last(dir))
    }

    /// Waits until each of `waiting`'s (directory, holder) leases was given back or expired.
    async fn wait_released(&self, waiting: &mut Vec<(String, u64)>) {
        while !waiting.is_empty() {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let next_end = {
                let Ok(mut inner) = self.inner.lock() else {
                    break;
                };
                let now = Instant::now();
                let mut next_end: Option<Instant> = None;
                let mut ended = 0;
                waiting.retain(|(dir, holder)| {
                    let Some(l) = inner.dirs.get_mut(dir) else {
                        return false;
                    };
                    match l.holders.get(holder) {
                        Some(end) if *end > now => {
                            next_end = Some(next_end.map_or(*end, |n| n.min(*end)));
                            true
                        }
                        Some(_) => {
                            l.holders.remove(holder);
                            if l.exclusive == Some(*holder) {
                                // Not given back: what the holder answered behind and has
                                // not sent yet (a client stalled past its lease, or this
                                // server too long without taking its renewals) applies
                                // after the change or read that waited. Said, so that a
                                // reader's surprise can be traced here.
                                tracing::info!(partition = %self.me, dir, holder, "an exclusive lease ended while recalled, not given back");
                                l.exclusive = None;
                                ended += 1;
                            }
                            false
                        }
                        None => false,
                    }
                });
                inner.exclusive -= ended;
                next_end
            };
            let Some(end) = next_end else { break };
            tokio::select! {
                () = &mut released => {}
                () = tokio::time::sleep_until(end) => {}
            }
        }
    }
}

#[cfg(test)]
impl LeaseTable {
    fn dirs_kept(&self) -> usize {
        self.inner.lock().map(|i| i.dirs.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
