//! Write-behind journals (docs/fuse.md "Write-behind"): the changes this client answered
//! itself under an exclusive lease, per directory part, waiting to be sent; the
//! inode numbers reserved for its creates; and the errors of changes a server refused
//! after they were answered, kept until an `fsync` or `close` reports them.
//!
//! Invariant: a part's changes reach its partition in the order they were answered, one
//! batch in flight at a time, each change exactly once (its `OnceId`), but for a setattr
//! waiting for another part's changes, which later changes of other names that leave the
//! part's directory's times alone may pass (`batch_of`); a part with changes queued or in
//! flight always has a sender running (`Task::Send`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use myriad_proto::{Caller, ClientRequest, FsError, InodeId, LeaseKey, PartitionId, limits};
use tokio::sync::Notify;

/// Most changes, and bytes, one part's journal holds: past them a change is sent at once
/// (after the journal: back-pressure).
pub(crate) const JOURNAL_OPS_MAX: usize = 4096;
pub(crate) const JOURNAL_BYTES_MAX: usize = 16 << 20;
/// Most bytes of writes in one batch (a frame holds 8 MiB).
const BATCH_BYTES_MAX: usize = 4 << 20;
/// What a journaled change counts for besides its bytes (`Op::bytes`).
const OP_BYTES: usize = 128;
/// Inode numbers reserved at a time, and how few left start the next reservation. A
/// partition keeps two ranges per client: the third replaces the first, by then used but
/// for creates still waiting in a journal while 3,840 later ones were answered (refused
/// then, and reported: docs/fuse.md "Write-behind").
pub(crate) const RESERVE: u32 = limits::RESERVE_IDS_MAX;
const RESERVE_LOW: u64 = 256;

/// Work the client needs run on a task of its own (`Client::set_behind_spawner`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BehindTask {
    /// Send the journal of this part until it is empty.
    Send(LeaseKey),
    /// Reserve inode numbers in this partition.
    Reserve(PartitionId),
}

/// Runs a `BehindTask` (a mount spawns `Client::run_behind` on its runtime).
pub type BehindSpawner = Arc<dyn Fn(BehindTask) + Send + Sync>;

/// A change answered behind.
#[derive(Clone, Debug)]
pub(crate) struct Op {
    /// When it was answered (its servers apply it as made then: `Batch::times`).
    pub(crate) at_ns: i64,
    pub(crate) caller: Caller,
    pub(crate) path: String,
    /// The file it is about, for its error.
    pub(crate) ino: Option<InodeId>,
    pub(crate) request: ClientRequest,
    /// Its number among every change this client journaled (set when it is journaled).
    seq: u64,
    /// Changes of other parts it is sent after (`After`).
    after: Vec<After>,
    /// A setattr, rmdir or mkdir of directory `path`, ordered with the changes of the
    /// directory's own parts (its entry lives in its parent's part, its times are also
    /// moved by the creates and unlinks of its own parts, and it is empty at its servers
    /// only once its unlinks are applied).
    directory: bool,
    /// A setattr that may fold into the create before it (`Create::then`): every server
    /// takes that (the map's floor is `SETATTR_IN_CREATE_SINCE`).
    into_create: bool,
}

/// Every change of part `key` numbered `seq` or lower (or, if `only`, the change numbered
/// `seq` itself) is sent and answered before the change that carries this. A directory's
/// entry is changed from two journals: its parent's part (a setattr of it) and its own
/// parts (their creates and unlinks set its mtime when applied). Program order between the
/// two is kept by such barriers, each pointing at changes journaled earlier, so no two
/// senders ever wait for each other.
#[derive(Clone, Debug)]
struct After {
    key: LeaseKey,
    seq: u64,
    /// A fence (a directory's mkdir, setattr or rmdir): what waits for it (the changes
    /// in the directory, requests about it or below it) needs that change itself applied,
    /// not the changes of other names journaled before it in its part (which a batch may
    /// pass over, or send again alone after it: `batch_of`, `send_behind`).
    only: bool,
}

impl Op {
    /// A change of one name answered behind (`at_ns` is set when it is journaled).
    pub(crate) fn new(caller: &Caller, ino: Option<InodeId>, request: ClientRequest) -> Op {
        let path = match &request {
            ClientRequest::Create(myriad_proto::requests::Create { path, .. })
            | ClientRequest::Write(myriad_proto::requests::Write { path, .. })
            | ClientRequest::SetAttr { path, .. }
            | ClientRequest::Unlink { path }
            | ClientRequest::Rmdir { path }
            | ClientRequest::MkdirNumbered { path, .. } => path.clone(),
            // Only those six are answered behind.
            _ => String::new(),
        };
        Op {
            at_ns: 0,
            caller: caller.clone(),
            path,
            ino,
            request,
            seq: 0,
            after: Vec::new(),
            directory: false,
            into_create: false,
        }
    }

    /// This setattr may fold into the create journaled just before it, if every server
    /// takes a create that carries one (`floor`: the map's protocol floor).
    pub(crate) fn into_create_from(mut self, floor: u16) -> Op {
        self.into_create = floor >= myriad_proto::SETATTR_IN_CREATE_SINCE;
        self
    }

    /// This change (a setattr or rmdir of directory `path`) is sent after the changes journaled
    /// in the directory's own parts, and the ones journaled there later after it.
    pub(crate) fn of_directory(mut self) -> Op {
        self.directory = true;
        self
    }

    fn bytes(&self) -> usize {
        match &self.request {
            ClientRequest::Write(myriad_proto::requests::Write { data, .. })
            | ClientRequest::Create(myriad_proto::requests::Create { data, .. }) => {
                data.len() + OP_BYTES
            }
            _ => OP_BYTES,
        }
    }
}

/// One directory part's journal.
#[derive(Default)]
pub(crate) struct PartJournal {
    ops: VecDeque<Op>,
    bytes: usize,
    /// Changes taken by the sender and not yet answered, their paths and numbers (in
    /// the order they were numbered, as `ops` is: `settled` searches both).
    in_flight: usize,
    /// How many of those move the times of the part's directory (`moves_no_parent_time`).
    flight_moving: usize,
    flight: Vec<String>,
    flight_seqs: VecDeque<u64>,
    /// A sender runs for this part.
    sending: bool,
    /// No change folds into one numbered this or lower (a later change ordered after
    /// another part's would be sent before it: `After`).
    fold_floor: u64,
    /// A change of another part waits for this one's (`After`): its sender does not
    /// linger (the next request about the other part would wait for both in turn).
    hurry: bool,
    /// Its sender found nothing it may send yet (`Journal::wait_ready`): a change
    /// journaled here wakes it (one may pass the waiting ones: `batch_of`).
    blocked: bool,
}

#[derive(Default)]
struct Inner {
    parts: BTreeMap<LeaseKey, PartJournal>,
    /// Errors of changes answered before a server refused them, by file.
    errors: BTreeMap<InodeId, FsError>,
    /// Such errors of changes about no file that is still there (an unlink).
    loose: Option<FsError>,
    /// Reserved inode numbers per partition: [next, end) ranges, oldest first.
    ids: BTreeMap<PartitionId, VecDeque<(u64, u64)>>,
    reserving: std::collections::BTreeSet<PartitionId>,
    /// Directories claimed lately (`Client::claim_for_change`), and when.
    claimed: BTreeMap<String, tokio::time::Instant>,
    /// The last number given to a change journaled (`Op::seq`).
    last_seq: u64,
    /// Per directory, the setattr of it answered behind that changes journaled in its own
    /// parts from now on are sent after (until it is answered).
    fences: BTreeMap<String, After>,
}

/// Whether every change `a` waits for is answered.
fn settled(parts: &BTreeMap<LeaseKey, PartJournal>, a: &After) -> bool {
    parts.get(&a.key).is_none_or(|p| {
        if a.only {
            // Both kept in the order the changes were numbered (`batch_of` takes its
            // places in order): a search, not a scan, for every change `batch_of` tries.
            p.flight_seqs.binary_search(&a.seq).is_err()
                && p.ops.binary_search_by_key(&a.seq, |o| o.seq).is_err()
        } else {
            p.oldest().is_none_or(|s| s > a.seq)
        }
    })
}

/// Whether a change that waits for another part's may be passed over by later changes
/// of other names in its part: a setattr (a directory's times set after the directory's
/// own changes, as `tar -x` does after filling it) moves no time of the directory the
/// part is in, so the creates, mkdirs and unlinks after it there go first, and the next
/// directory's subtree is sent while the last one's still is. A change that moves the
/// part's directory's times (an rmdir) is not passed: its parent's mtime would be set
/// back by the one sent after it.
fn may_be_passed(op: &Op) -> bool {
    matches!(op.request, ClientRequest::SetAttr { .. })
}

/// Whether applying `op` leaves the times of the directory its part is in as they are
/// (it changes only its own file's).
fn moves_no_parent_time(op: &Op) -> bool {
    matches!(
        op.request,
        ClientRequest::SetAttr { .. } | ClientRequest::Write(_)
    )
}

/// The places in `part`'s queue of the changes its next batch takes: of one caller, in
/// order, up to the first that waits for another part's, except that a setattr waiting so
/// is passed (`may_be_passed`) along with the later setattrs and writes of its name; a
/// later change of that name that moves the directory's times ends the batch.
fn batch_of(parts: &BTreeMap<LeaseKey, PartJournal>, part: &PartJournal) -> Vec<usize> {
    let mut take = Vec::new();
    let mut passed: Vec<&str> = Vec::new();
    let mut caller = None;
    let mut bytes = 0;
    for (i, op) in part.ops.iter().enumerate() {
        if take.len() >= limits::BATCH_MAX {
            break;
        }
        if passed.contains(&op.path.as_str()) {
            if moves_no_parent_time(op) {
                continue;
            }
            // A later create, mkdir, unlink or rmdir of the passed name moves the
            // directory's times: nothing after it goes before it.
            break;
        }
        if !ready(parts, op) {
            if may_be_passed(op) {
                passed.push(&op.path);
                continue;
            }
            break;
        }
        if caller.is_some_and(|c: &Caller| *c != op.caller)
            || (!take.is_empty() && bytes + op.bytes() > BATCH_BYTES_MAX)
        {
            break;
        }
        caller = Some(&op.caller);
        bytes += op.bytes();
        take.push(i);
    }
    take
}

/// Whether `op` may be sent now.
fn ready(parts: &BTreeMap<LeaseKey, PartJournal>, op: &Op) -> bool {
    op.after.iter().all(|a| settled(parts, a))
}

/// What `Journal::take_batch` found.
pub(crate) enum Taken {
    /// Changes of one caller, in the order they were answered (`batch_of`), now in flight.
    Batch(Caller, Vec<Op>),
    /// Every change that could go next waits for another part's (`Journal::wait_ready`).
    Blocked,
    /// Nothing queued: the sender ends.
    Empty,
}

#[derive(Default)]
pub(crate) struct Journal {
    inner: Mutex<Inner>,
    /// Woken whenever a batch was answered.
    progress: Notify,
    /// Changes queued or in flight, every part.
    pending: AtomicUsize,
    /// Batches that passed over changes waiting for another part's (`batch_of`).
    passes: std::sync::atomic::AtomicU64,
    /// Setattrs folded into the create before them (`fold`).
    folded_setattrs: std::sync::atomic::AtomicU64,
    spawner: RwLock<Option<BehindSpawner>>,
    /// Callers waiting in `drain`: senders do not linger meanwhile.
    draining: AtomicUsize,
    /// Woken when a caller starts waiting in `drain`: lingering senders send at once.
    drain_started: Notify,
}

struct Draining<'a>(&'a AtomicUsize);

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A directory is claimed (`Client::claim_for_change`) at most this often.
const CLAIM_EVERY: Duration = Duration::from_secs(5);

/// How long a sender waits for changes to gather before it takes a batch, unless
/// somebody waits for the journal (`drain`). Longer batches cost the servers less per
/// change (one round, one replicated batch, one directory touch per batch): 2 ms made
/// batches of 4.5 creates, 10 ms of 15, and server CPU per create fell from 380 to 220 us
/// (`docs/fuse.md` "Write-behind").
const LINGER: Duration = Duration::from_millis(10);

/// Makes `first` do what `first` then `then` (of the same file, by the same caller) do,
/// if one change can: a create or write followed by a write just past its end (its bytes
/// appended); a create followed by a setattr (`Create::then`), after which nothing but
/// setattrs folds into it; and setattrs whose combination means the same (`fold_setattr`).
/// The create's time stays its directory's; the writes' is the file's (`Create::data_at`),
/// the setattr's its own. Returns whether it did.
fn fold(first: &mut Op, then: &Op) -> bool {
    use ClientRequest as C;
    let room =
        |data: &Vec<u8>, more: &Vec<u8>| data.len() + more.len() <= limits::IO_BYTES_MAX as usize;
    match (&mut first.request, &then.request) {
        (
            C::Create(c),
            C::Write(myriad_proto::requests::Write {
                offset, data: more, ..
            }),
        ) if c.then.is_none() && *offset == c.data.len() as u64 && room(&c.data, more) => {
            c.data.extend_from_slice(more);
            c.data_at = c.data_at.max(Some(then.at_ns));
            true
        }
        (C::Create(c), C::SetAttr { set, .. }) if then.into_create && c.exclusive => {
            match &mut c.then {
                None => {
                    c.then = Some(myriad_proto::requests::SetAfter {
                        set: set.clone(),
                        at_ns: then.at_ns,
                    });
                    true
                }
                Some(t) => {
                    let folded = fold_setattr(&mut t.set, set);
                    if folded {
                        t.at_ns = t.at_ns.max(then.at_ns);
                    }
                    folded
                }
            }
        }
        (
            C::Write(myriad_proto::requests::Write {
                offset,
                data,
                opened,
                ..
            }),
            C::Write(myriad_proto::requests::Write {
                offset: next,
                data: more,
                opened: opened_then,
                ..
            }),
        ) if *next == *offset + data.len() as u64 && opened == opened_then && room(data, more) => {
            data.extend_from_slice(more);
            first.at_ns = first.at_ns.max(then.at_ns);
            true
        }
        (C::SetAttr { set: a, .. }, C::SetAttr { set: b, .. }) => {
            let folded = fold_setattr(a, b);
            if folded {
                first.at_ns = first.at_ns.max(then.at_ns);
            }
            folded
        }
        _ => false,
    }
}

/// Makes setattr `a` do what `a` then `b` do, if their combination means the same: no
/// owner change after a mode change (which would take set-id bits off), no touch mixed
/// with explicit times, both meant for the same inode. Returns whether it did.
fn fold_setattr(a: &mut myriad_proto::SetAttr, b: &myriad_proto::SetAttr) -> bool {
    let owner_after_mode = a.mode.is_some() && (b.uid.is_some() || b.gid.is_some());
    let times = |s: &myriad_proto::SetAttr| s.atime_ns.is_some() || s.mtime_ns.is_some();
    let mixed_times = (a.touch && times(b)) || (b.touch && times(a));
    if owner_after_mode || mixed_times || a.of != b.of {
        return false;
    }
    *a = myriad_proto::SetAttr {
        of: a.of,
        mode: b.mode.or(a.mode),
        uid: b.uid.or(a.uid),
        gid: b.gid.or(a.gid),
        atime_ns: b.atime_ns.or(a.atime_ns),
        mtime_ns: b.mtime_ns.or(a.mtime_ns),
        touch: a.touch || b.touch,
    };
    true
}

/// The reservation of inode numbers in `partition` to start, if few are left there and
/// none is under way (at most two ranges held: a partition keeps two per client).
fn refill(g: &mut Inner, partition: PartitionId) -> Started {
    let ranges = g.ids.entry(partition).or_default();
    let left: u64 = ranges.iter().map(|(n, e)| e - n).sum();
    let low = left < RESERVE_LOW && ranges.len() < 2;
    if low && g.reserving.insert(partition) {
        Started(vec![BehindTask::Reserve(partition)])
    } else {
        Started(Vec::new())
    }
}

/// What `Journal::push` needs started.
pub(crate) struct Started(Vec<BehindTask>);

/// The barriers of `op`, about to be journaled in `key`'s part (`After`): a setattr or
/// rmdir of a directory goes after the changes queued in the directory's own parts, and
/// becomes the fence that later changes there go after; a change in a directory whose
/// setattr was answered behind and is not yet answered by its server goes after that. Returns
/// whether a part is now asked to send at once (`PartJournal::hurry`).
fn order(g: &mut Inner, key: &LeaseKey, op: &mut Op) -> bool {
    let mut hurried = false;
    if op.directory {
        let dir = op.path.clone();
        let through = op.seq - 1;
        let own: Vec<LeaseKey> = g
            .parts
            .iter()
            .filter(|(k, p)| k.dir == dir && p.pending())
            .map(|(k, _)| k.clone())
            .collect();
        for k in own {
            if let Some(p) = g.parts.get_mut(&k) {
                p.fold_floor = through;
                p.hurry = true;
                hurried = true;
            }
            op.after.push(After {
                key: k,
                seq: through,
                only: false,
            });
        }
        let parts = &g.parts;
        g.fences.retain(|_, a| !settled(parts, a));
        g.fences.insert(
            dir,
            After {
                key: key.clone(),
                seq: op.seq,
                only: true,
            },
        );
    }
    match g.fences.get(&key.dir).cloned() {
        Some(f) if settled(&g.parts, &f) => {
            g.fences.remove(&key.dir);
        }
        Some(f) => {
            // The part holding the fence (a mkdir answered behind, this directory's)
            // sends without lingering: this change waits for it.
            if let Some(p) = g.parts.get_mut(&f.key)
                && !p.hurry
            {
                p.hurry = true;
                hurried = true;
            }
            op.after.push(f);
        }
        None => {}
    }
    hurried
}

impl PartJournal {
    /// Whether a change of `path` is queued or in flight here.
    pub(crate) fn touches(&self, path: &str) -> bool {
        self.ops.iter().any(|o| o.path == path) || self.flight.iter().any(|p| p == path)
    }

    fn pending(&self) -> bool {
        !self.ops.is_empty() || self.in_flight > 0
    }

    /// Whether a change that moves the times of this part's directory is not yet
    /// answered, queued or in flight (`moves_no_parent_time`). Setattrs and writes of its
    /// names waiting for other parts move none: a read of the directory's own entry need
    /// not wait for them.
    pub(crate) fn times_pending(&self) -> bool {
        self.flight_moving > 0 || self.ops.iter().any(|o| !moves_no_parent_time(o))
    }

    /// The number of the oldest change not yet answered: the first in flight or the
    /// first queued, whichever is older (a batch may have passed over queued changes:
    /// `batch_of`).
    fn oldest(&self) -> Option<u64> {
        let flying = self.flight_seqs.front().copied();
        let queued = self.ops.front().map(|o| o.seq);
        match (flying, queued) {
            (Some(f), Some(q)) => Some(f.min(q)),
            (f, q) => f.or(q),
        }
    }
}

/// Which journals a `Journal::drain` waits for.
pub(crate) type Which<'a> = &'a (dyn Fn(&LeaseKey, &PartJournal) -> bool + Sync);

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub(crate) fn set_spawner(&self, s: BehindSpawner) {
        if let Ok(mut g) = self.spawner.write() {
            *g = Some(s);
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.spawner.read().is_ok_and(|g| g.is_some())
    }

    pub(crate) fn start(&self, started: Started) {
        let spawner = self.spawner.read().ok().and_then(|g| g.clone());
        if let Some(s) = spawner {
            for t in started.0 {
                s(t);
            }
        }
    }

    /// Whether `key`'s journal has room for one more change of `bytes`.
    pub(crate) fn has_room(&self, key: &LeaseKey, bytes: usize) -> bool {
        let g = self.lock();
        g.parts
            .get(key)
            .is_none_or(|p| p.ops.len() < JOURNAL_OPS_MAX && p.bytes + bytes <= JOURNAL_BYTES_MAX)
    }

    /// The next reservation of inode numbers in `partition` to start, when few are left
    /// (an exclusive lease there was just granted: creates are about to come).
    pub(crate) fn refill_ids(&self, partition: PartitionId) -> Started {
        refill(&mut self.lock(), partition)
    }

    /// An inode number reserved in `partition`, if one is left (and the next reservation
    /// to start when few are).
    pub(crate) fn take_id(&self, partition: PartitionId) -> (Option<InodeId>, Started) {
        let mut g = self.lock();
        let ranges = g.ids.entry(partition).or_default();
        while ranges.front().is_some_and(|(n, e)| n >= e) {
            ranges.pop_front();
        }
        let id = ranges.front_mut().map(|(n, _)| {
            *n += 1;
            InodeId(*n - 1)
        });
        (id, refill(&mut g, partition))
    }

    /// Whether `dir` may be claimed now (`Client::claim_for_change`): not within
    /// `CLAIM_EVERY` of the last claim.
    pub(crate) fn claim(&self, dir: &str) -> bool {
        let now = tokio::time::Instant::now();
        let mut g = self.lock();
        if g.claimed.len() > 4096 {
            g.claimed
                .retain(|_, at| now.duration_since(*at) < CLAIM_EVERY);
        }
        match g.claimed.get(dir) {
            Some(at) if now.duration_since(*at) < CLAIM_EVERY => false,
            _ => {
                g.claimed.insert(dir.to_string(), now);
                true
            }
        }
    }

    /// Numbers reserved for this client in `partition` (`None`: the reservation failed).
    pub(crate) fn reserved(&self, partition: PartitionId, range: Option<(u64, u32)>) {
        let mut g = self.lock();
        g.reserving.remove(&partition);
        if let Some((first, count)) = range {
            g.ids
                .entry(partition)
                .or_default()
                .push_back((first, first + u64::from(count)));
        }
    }

    /// Appends an answered change to `key`'s journal (called under the leases' lock:
    /// `Leases::behind`), folded into the last one queued when one change does what the
    /// two did (`fold`); returns the sender to start if none runs.
    pub(crate) fn push(&self, key: &LeaseKey, mut op: Op) -> Started {
        let mut g = self.lock();
        g.last_seq += 1;
        op.seq = g.last_seq;
        if order(&mut g, key, &mut op) {
            // The parts it waits for stop lingering (`linger`).
            self.drain_started.notify_waiters();
        }
        let part = g.parts.entry(key.clone()).or_default();
        if let Some(last) = part.ops.back_mut()
            && last.seq > part.fold_floor
            && !op.directory
            && !last.directory
            && last.caller == op.caller
            && last.path == op.path
            && last.ino == op.ino
            && fold(last, &op)
        {
            // What it adds to the change it folded into: its bytes, not a change's.
            part.bytes += op.bytes() - OP_BYTES;
            if matches!(
                (&last.request, &op.request),
                (ClientRequest::Create(_), ClientRequest::SetAttr { .. })
            ) {
                self.folded_setattrs.fetch_add(1, Ordering::Relaxed);
            }
            return Started(Vec::new());
        }
        part.bytes += op.bytes();
        part.ops.push_back(op);
        self.pending.fetch_add(1, Ordering::AcqRel);
        if part.sending {
            if part.blocked {
                self.progress.notify_waiters();
            }
            return Started(Vec::new());
        }
        part.sending = true;
        Started(vec![BehindTask::Send(key.clone())])
    }

    /// The next batch of `key`'s journal (`batch_of`), marked in flight.
    pub(crate) fn take_batch(&self, key: &LeaseKey) -> Taken {
        let mut g = self.lock();
        let Some(part) = g.parts.get(key) else {
            return Taken::Empty;
        };
        let places = batch_of(&g.parts, part);
        let Some(part) = g.parts.get_mut(key) else {
            return Taken::Empty;
        };
        if part.ops.is_empty() {
            part.sending = false;
            if part.in_flight == 0 {
                g.parts.remove(key);
            }
            return Taken::Empty;
        }
        part.blocked = places.is_empty();
        let Some(&first) = places.first() else {
            return Taken::Blocked;
        };
        let caller = part.ops[first].caller.clone();
        if places.last().is_some_and(|&l| l + 1 > places.len()) {
            self.passes.fetch_add(1, Ordering::Relaxed);
        }
        let mut batch: Vec<Op> = places
            .iter()
            .rev()
            .filter_map(|&i| part.ops.remove(i))
            .collect();
        batch.reverse();
        let bytes: usize = batch.iter().map(Op::bytes).sum();
        part.bytes -= bytes;
        part.in_flight = batch.len();
        part.flight_moving = batch.iter().filter(|o| !moves_no_parent_time(o)).count();
        part.flight = batch.iter().map(|o| o.path.clone()).collect();
        part.flight_seqs = batch.iter().map(|o| o.seq).collect();
        Taken::Batch(caller, batch)
    }

    /// The parts holding a setattr or rmdir answered behind, not yet answered by its
    /// server, of one of `paths` or a directory above one (the fences of `order`).
    pub(crate) fn fenced<'a>(&self, paths: impl Iterator<Item = &'a str>) -> Vec<LeaseKey> {
        let g = self.lock();
        if g.fences.is_empty() {
            return Vec::new();
        }
        let mut keys = Vec::new();
        for p in paths {
            let mut d = p;
            while d != "/" {
                if let Some(a) = g.fences.get(d)
                    && !settled(&g.parts, a)
                    && !keys.contains(&a.key)
                {
                    keys.push(a.key.clone());
                }
                d = myriad_placement::split_parent(d).0;
            }
        }
        keys
    }

    /// The part whose journal holds a setattr or rmdir of directory `dir` answered
    /// behind and not yet answered by its server (its fence), if any.
    pub(crate) fn fence_of(&self, dir: &str) -> Option<LeaseKey> {
        let g = self.lock();
        g.fences
            .get(dir)
            .filter(|a| !settled(&g.parts, a))
            .map(|a| a.key.clone())
    }

    /// Returns once `key`'s journal has a batch to send (`batch_of`), or is empty.
    pub(crate) async fn wait_ready(&self, key: &LeaseKey) {
        loop {
            let progressed = self.progress.notified();
            tokio::pin!(progressed);
            progressed.as_mut().enable();
            {
                let g = self.lock();
                let part = g.parts.get(key);
                if part.is_none_or(|p| p.ops.is_empty() || !batch_of(&g.parts, p).is_empty()) {
                    return;
                }
            }
            progressed.await;
        }
    }

    /// `n` changes of `key`'s batch in flight were answered (or given up with an error).
    pub(crate) fn done(&self, key: &LeaseKey, ops: &[&Op]) {
        {
            let mut g = self.lock();
            if let Some(part) = g.parts.get_mut(key) {
                part.in_flight -= ops.len().min(part.in_flight);
                let moving = ops.iter().filter(|o| !moves_no_parent_time(o)).count();
                part.flight_moving -= moving.min(part.flight_moving);
                // Exactly these: one sent again keeps its place, and what waits for it
                // (a mkdir's fence) waits on (a batch's later changes may be answered
                // before an earlier one that is sent again).
                part.flight_seqs
                    .retain(|s| !ops.iter().any(|o| o.seq == *s));
                if part.in_flight == 0 {
                    part.flight_moving = 0;
                    part.flight.clear();
                    part.flight_seqs.clear();
                }
            }
        }
        self.pending.fetch_sub(ops.len(), Ordering::AcqRel);
        self.progress.notify_waiters();
    }

    /// `done` of the first `n` changes of `key`'s batch in flight.
    #[cfg(test)]
    pub(crate) fn done_n(&self, key: &LeaseKey, n: usize) {
        let seqs: Vec<u64> = self
            .lock()
            .parts
            .get(key)
            .map(|p| p.flight_seqs.iter().take(n).copied().collect())
            .unwrap_or_default();
        let ops: Vec<Op> = seqs
            .into_iter()
            .map(|seq| Op {
                seq,
                ..Op::new(
                    &Caller::root(),
                    None,
                    ClientRequest::Sync {
                        path: String::new(),
                        ino: InodeId(0),
                    },
                )
            })
            .collect();
        self.done(key, &ops.iter().collect::<Vec<_>>());
    }

    /// A change answered behind was refused when applied: kept for the next `fsync` or
    /// `close` of its file (or of any file), and logged. It is lost, and kept so that no
    /// caller takes a later success for its: a file's error as it came unless it reads as
    /// "try again" (`Busy`, `Unavailable`, a timeout), and a removal's (no file is left to
    /// report it) always, as `Io`, which `Client::sync_changes` promises for a loss
    /// (simulation seed 80011 with --behind --tree-moves: an unlink refused `Unavailable`
    /// was reported as that, a retried sync succeeded, and the unlink was taken for done).
    pub(crate) fn failed(&self, op: &Op, e: FsError) {
        tracing::warn!(
            path = %op.path,
            op = op.request.op_name(),
            "a change answered behind was refused when applied: {e} (reported by the next fsync or close)"
        );
        let lost = || {
            FsError::Io(format!(
                "a change answered behind was refused when applied: {e}"
            ))
        };
        let mut g = self.lock();
        match op.ino {
            Some(ino) if !matches!(op.request, ClientRequest::Unlink { .. }) => {
                let kept = if e.is_transient() { lost() } else { e.clone() };
                g.errors.entry(ino).or_insert(kept);
            }
            _ => {
                g.loose.get_or_insert_with(lost);
            }
        }
    }

    /// The error kept for `ino`, taken (reported once).
    pub(crate) fn take_error(&self, ino: InodeId) -> Option<FsError> {
        self.lock().errors.remove(&ino)
    }

    pub(crate) fn has_error(&self, ino: InodeId) -> bool {
        self.lock().errors.contains_key(&ino)
    }

    /// The error of a change about no file that is still there (an unlink), taken.
    pub(crate) fn take_loose_error(&self) -> Option<FsError> {
        self.lock().loose.take()
    }

    /// Any error kept, taken.
    pub(crate) fn take_any_error(&self) -> Option<FsError> {
        let mut g = self.lock();
        if let Some(e) = g.loose.take() {
            return Some(e);
        }
        let ino = *g.errors.keys().next()?;
        g.errors.remove(&ino)
    }

    /// Whether any change is queued or in flight.
    pub(crate) fn busy(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// Whether `key`'s journal has changes queued or in flight.
    pub(crate) fn pending_for(&self, key: &LeaseKey) -> bool {
        self.lock().parts.get(key).is_some_and(PartJournal::pending)
    }

    /// Whether any journal `which` selects has changes not yet answered (a `drain` of
    /// them would wait).
    pub(crate) fn would_wait(&self, which: Which<'_>) -> bool {
        self.busy() && self.any_pending(which)
    }

    fn any_pending(&self, which: Which<'_>) -> bool {
        self.lock()
            .parts
            .iter()
            .any(|(k, p)| p.pending() && which(k, p))
    }

    /// Waits a moment before `key`'s sender takes its next batch, for changes to gather
    /// (one batch for a file's create, write and setattrs, or for many files), unless
    /// someone waits for the journals to be sent or another part's change waits for this
    /// one's (`PartJournal::hurry`).
    pub(crate) async fn linger(&self, key: &LeaseKey) {
        let until = tokio::time::Instant::now() + LINGER;
        loop {
            let started = self.drain_started.notified();
            tokio::pin!(started);
            started.as_mut().enable();
            if self.draining.load(Ordering::Acquire) > 0 || self.take_hurry(key) {
                return;
            }
            if tokio::time::timeout_at(until, started).await.is_err() {
                return;
            }
        }
    }

    /// How many batches passed over changes that wait (`batch_of`).
    pub(crate) fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// How many setattrs folded into the create before them (`fold`).
    pub(crate) fn folded_setattrs(&self) -> u64 {
        self.folded_setattrs.load(Ordering::Relaxed)
    }

    /// Whether `key`'s sender was asked to send at once, cleared.
    fn take_hurry(&self, key: &LeaseKey) -> bool {
        self.lock()
            .parts
            .get_mut(key)
            .is_some_and(|p| std::mem::take(&mut p.hurry))
    }

    /// Returns once the journals `which` selects are sent and answered (true), or `wait`
    /// passed (false).
    pub(crate) async fn drain(&self, which: Which<'_>, wait: Option<Duration>) -> bool {
        if !self.busy() {
            return true;
        }
        self.draining.fetch_add(1, Ordering::AcqRel);
        self.drain_started.notify_waiters();
        let _draining = Draining(&self.draining);
        let until = wait.map(|w| tokio::time::Instant::now() + w);
        loop {
            let progressed = self.progress.notified();
            tokio::pin!(progressed);
            progressed.as_mut().enable();
            if !self.busy() || !self.any_pending(which) {
                return true;
            }
            match until {
                Some(u) => {
                    if tokio::time::timeout_at(u, progressed).await.is_err() {
                        return false;
                    }
                }
                None => progressed.await,
            }
        }
    }
}

#[cfg(test)]
mod tests;
