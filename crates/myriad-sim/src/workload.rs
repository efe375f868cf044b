//! The clients: real `myriad_client::Client`s over the simulated network, each the only
//! writer of the files in its own two directories (`/c<N>/f<k>` and `/x<N>/f<k>`: puts,
//! two-chunk puts, deletes, renames within one directory and across the two) and of its
//! subdirectories (`/c<N>/d<k>`), and one of the creators in the shared directory `/big`
//! (which splits under them); any client reads any file and lists `/big`. Every outcome
//! goes to the history, every read and listing is checked against it at once.

use std::sync::Arc;
use std::time::Duration;

use myriad_client::proto::locks::{LOCK_RENEW_EVERY, LockAnswer, LockKind};
use myriad_client::{Client, FsError, InodeId, ListFor};
use rand::Rng;
use tokio::time::Instant;

use crate::history::{History, Removal};
use crate::lock_check::{LOCKED, LockCheck};
use crate::rng::SimRng;
use crate::trace::Trace;

mod shared;
mod trees;

/// Files per client directory.
pub const FILES: u32 = 6;
/// The shared directory that splits.
pub const BIG: &str = "/big";
/// Each client's two directories of files, `/c<N>` and `/x<N>`: usually on two
/// partitions, so a rename between them is a two-partition rename.
pub const SIDES: [&str; 2] = ["c", "x"];
/// The simulation's chunk size (the smallest a map allows): a file's bytes past it live
/// on the partition of its chunk 1, apart from its entry.
pub const CHUNK_BYTES: u64 = 65_536;
/// Where a two-chunk put writes its second piece (in chunk 1).
pub const PIECE_OFFSET: u64 = CHUNK_BYTES + 100;

/// The history's name for the second piece of `path` (a register of its own: a small put
/// leaves it as it was, a two-chunk put writes it, a delete removes it, a rename moves it).
#[must_use]
pub fn piece(path: &str) -> String {
    format!("{path}#chunk1")
}

/// The bytes of `path` at `version`: the path is in them, so a read that returns another
/// file's bytes is caught too.
#[must_use]
pub fn contents(path: &str, version: u64) -> Vec<u8> {
    format!("{path}@v{version:08}").into_bytes()
}

/// The token a read of a file returns: its contents up to the first zero byte (they name
/// the path and version they were written as, so a read that returns another file's
/// bytes, or a rename's, is checked).
fn token_of(data: &[u8]) -> String {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

/// What a read of a whole file says of its two registers: its first piece, and its second
/// (`None`: the file ends before it; `Some("")`: zeros there, i.e. the chunk read found
/// nothing, as a read of a file replaced since its attributes were fetched does).
fn pieces(data: &[u8]) -> (String, Option<String>) {
    let second = usize::try_from(PIECE_OFFSET)
        .ok()
        .and_then(|o| data.get(o..))
        .map(token_of);
    (token_of(data), second)
}

/// What a read of a directory returns.
const DIR: &str = "dir";

pub struct ClientRun {
    pub id: u32,
    pub clients: u32,
    pub client: Arc<Client>,
    pub rng: SimRng,
    pub history: Arc<History>,
    pub trace: Trace,
    pub ops: u32,
    /// The client's changes are answered once applied (`ClientConfig::durable_changes`
    /// off, as a mount's): they count as acknowledged only once a sync vouched for them.
    pub visible: bool,
    /// With `visible`: what the next good sync acknowledges.
    pub deferred: std::sync::Mutex<Vec<Deferred>>,
    /// The client reads through directory leases: every read and directory stat is
    /// done twice, so that the second is usually answered from the lease.
    pub leases: bool,
    /// The client writes behind (`SimConfig::behind`): it lists the directories it puts
    /// files in asking exclusive leases, and creates without data, then writes.
    pub behind: bool,
    /// Also take and give back file locks, checked here (`--locks`).
    pub locks: Option<Arc<LockCheck>>,
    /// Also move a directory tree over an empty directory and read others' (`--dir-moves`).
    pub dir_moves: bool,
    /// Also freeze a tree of its own, write into it and thaw it (`--freeze`): what this
    /// client knows of its tree's state.
    pub freeze: Option<std::sync::Mutex<Frozen>>,
    /// Freeze by building the tree's metadata index, thaw by dropping it (`--indexes`).
    pub indexes: bool,
    /// ...automatic indexes instead: nothing frozen, every write taken (`--auto-indexes`).
    pub auto_indexes: bool,
    /// Where the run adds, as it ends, what its client answered itself (from a lease,
    /// from an index: `Report::answered_by_lease`) and its journal's batches that passed
    /// a waiting setattr (`Report::behind_passes`) and its setattrs folded into creates
    /// (`Report::setattrs_in_creates`).
    pub answered: Arc<std::sync::Mutex<[u64; 4]>>,
}

/// What a client knows of its frozen tree (`--freeze`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frozen {
    /// Thawed (or never frozen), acknowledged.
    No,
    /// Frozen, acknowledged.
    Yes,
    /// A freeze or thaw under way or in doubt.
    Unknown,
}

/// The lock owner the simulated clients lock as.
const OWNER: u64 = 1;

/// A client's background renewal (as a mount's): every grant it keeps is checked, except
/// those being given back.
async fn renew_forever(
    client: Arc<Client>,
    me: u32,
    check: Arc<LockCheck>,
    releasing: Arc<std::sync::Mutex<std::collections::BTreeSet<InodeId>>>,
    trace: Trace,
) -> Verdict {
    loop {
        tokio::time::sleep(LOCK_RENEW_EVERY).await;
        if !client.holds_any_lock() {
            continue;
        }
        let lost = client.renew_locks().await;
        if !lost.is_empty() {
            trace.event(format_args!("c{me} renewer: lost {lost:?}"));
        }
        for ino in LOCKED {
            let skip = releasing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(&ino);
            if !skip
                && client.holds_locks(ino, OWNER)
                && let Some(until) = client.lock_valid_until(ino)
            {
                // Traced when it happens: the verdict is read only when the client ends.
                if let Err(e) = check.believe(me, ino, until, Instant::now()) {
                    trace.event(format_args!("VIOLATION (renewer of c{me}): {e}"));
                    return Err(e);
                }
            }
        }
    }
}

/// A client's file lock in the lock steps.
enum Holding {
    None,
    Held(InodeId),
    /// Its unlock failed: tried again, never believed held again.
    Releasing(InodeId),
}

/// An acknowledgement held until a sync vouches for the change.
pub enum Deferred {
    Version(String, u64),
    Listed(String),
    Unlisted(String),
    /// A create in the shared directory (its number): only then is it live.
    Made(u32),
}

/// A visible client syncs every this many operations.
const SYNC_EVERY_OPS: u32 = 4;

/// What one client run ended with: the first violation it saw, if any.
pub type Verdict = Result<(), String>;

impl ClientRun {
    fn path(&self, client: u32, side: usize, k: u32) -> String {
        format!("/{}{client}/f{k}", SIDES[side % SIDES.len()])
    }

    pub(super) fn dir(&self, client: u32, k: u32) -> String {
        format!("/c{client}/d{k}")
    }

    /// Records an acknowledgement, or holds it until the next good sync.
    fn defer_or(&self, d: Deferred) -> Option<Deferred> {
        if !self.visible {
            return Some(d);
        }
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(d);
        None
    }

    fn ack(&self, path: &str, v: u64) {
        if self.visible {
            // Answered as a mount's change: kept by the client until durable, so its own
            // reads see it from now on, crashes or not (docs/fuse.md "Keeping answered
            // changes until they are durable").
            self.history.ack_writer(path, v, self.id);
        }
        if self
            .defer_or(Deferred::Version(path.to_string(), v))
            .is_some()
        {
            self.history.ack(path, v);
        }
    }

    fn ack_listed(&self, name: &str) {
        if self.defer_or(Deferred::Listed(name.to_string())).is_some() {
            self.history.ack_listed(name);
        }
    }

    fn ack_unlisted(&self, name: &str) {
        if self
            .defer_or(Deferred::Unlisted(name.to_string()))
            .is_some()
        {
            self.history.ack_unlisted(name);
        }
    }

    /// A visible client's sync: a good one acknowledges what it held; `Io` (a primary
    /// changed since it answered) leaves those changes in doubt for good; other errors keep
    /// them for the next sync.
    async fn sync(&self, live: &mut std::collections::BTreeSet<u32>) {
        if !self.visible {
            return;
        }
        let held: Vec<Deferred> = std::mem::take(
            &mut *self
                .deferred
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let synced = match self.client.sync_changes().await {
            // A change answered behind and refused when applied: what it covered is in
            // doubt (the mount reports it to the file's next fsync or close).
            Ok(()) => match self.client.take_any_behind_error() {
                Some(e) => Err(FsError::Io(format!(
                    "a change sent behind was refused: {e}"
                ))),
                None => Ok(()),
            },
            Err(e) => Err(e),
        };
        match synced {
            Ok(()) => {
                for d in held {
                    match d {
                        Deferred::Version(p, v) => self.history.ack(&p, v),
                        Deferred::Listed(n) => self.history.ack_listed(&n),
                        Deferred::Unlisted(n) => self.history.ack_unlisted(&n),
                        Deferred::Made(n) => {
                            live.insert(n);
                        }
                    }
                }
                self.trace.event(format_args!("c{} sync: ok", self.id));
            }
            Err(FsError::Io(e)) => {
                self.trace.event(format_args!(
                    "c{} sync: {} changes in doubt ({e})",
                    self.id,
                    held.len()
                ));
                for d in &held {
                    if let Deferred::Version(p, v) = d {
                        self.history.unack_writer(p, *v);
                    }
                }
            }
            Err(e) => {
                self.trace
                    .event(format_args!("c{} sync: {e}; retried later", self.id));
                let mut g = self
                    .deferred
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let newer = std::mem::take(&mut *g);
                *g = held;
                g.extend(newer);
            }
        }
    }

    /// Checks a read of `path` by this client (`History::check_read_by`): what it was
    /// answered as a writer counts too, unless it holds a loss not yet reported (a change
    /// it kept could not be sent again: its next sync reports it).
    fn check_own_read(&self, path: &str, invoked: Instant, seen: Option<&str>) -> Verdict {
        self.history.check_read(path, invoked, seen)?;
        match self
            .history
            .check_read_by(path, invoked, seen, Some(self.id))
        {
            Err(e) if self.client.has_lost_changes() => {
                self.trace.event(format_args!(
                    "c{} read {path}: its own change missing, reported lost: {e}",
                    self.id
                ));
                Ok(())
            }
            Err(e) => Err(format!(
                "c{} did not read back its own change: {e}",
                self.id
            )),
            Ok(()) => Ok(()),
        }
    }

    pub async fn run(self) -> Verdict {
        // This client's names in `BIG` whose create it saw succeed (a visible client: and
        // a sync vouch for) and whose removal it has not tried: a removal of one that finds
        // nothing broke exactly-once.
        let mut live = std::collections::BTreeSet::new();
        let mut holding = Holding::None;
        // As a mount does: renew every LOCK_RENEW_EVERY, checked like any other grant.
        let releasing: Arc<std::sync::Mutex<std::collections::BTreeSet<InodeId>>> = Arc::default();
        let renewer = self.locks.clone().map(|check| {
            tokio::spawn(renew_forever(
                self.client.clone(),
                self.id,
                check,
                releasing.clone(),
                self.trace.clone(),
            ))
        });
        let verdict = self.ops_loop(&mut live, &mut holding, &releasing).await;
        let (lease, index) = self.client.answered_locally();
        let passes = self.client.behind_passes();
        let folded = self.client.setattrs_in_creates();
        if let Ok(mut a) = self.answered.lock() {
            for (sum, n) in a.iter_mut().zip([lease, index, passes, folded]) {
                *sum += n;
            }
        }
        if self.indexes {
            // What the indexes answered: a run whose reads never met one tested nothing.
            let s = self.client.index_stats();
            self.trace.event(format_args!(
                "c{} index answers {} loads {}",
                self.id, s.hits, s.loads
            ));
        }
        if let Some(r) = renewer {
            let violation = if r.is_finished() {
                r.await
                    .unwrap_or_else(|e| Err(format!("renewer panicked: {e}")))
            } else {
                r.abort();
                Ok(())
            };
            verdict.clone()?;
            violation?;
        }
        verdict
    }

    async fn ops_loop(
        &self,
        live: &mut std::collections::BTreeSet<u32>,
        holding: &mut Holding,
        releasing: &std::sync::Mutex<std::collections::BTreeSet<InodeId>>,
    ) -> Verdict {
        let mut created = 0u32;
        for op_no in 0..self.ops {
            if op_no % SYNC_EVERY_OPS == SYNC_EVERY_OPS - 1 {
                self.sync(live).await;
            }
            if let Some(check) = &self.locks {
                // Drawn only with locks on: runs without them keep their seeds' draws.
                let (lock_step, which, wait) = self.rng.with(|r| {
                    (
                        r.gen_range(0..100u32),
                        r.gen_range(0..LOCKED.len()),
                        r.gen_range(0..300u64),
                    )
                });
                if lock_step < 25 {
                    let now = std::mem::replace(holding, Holding::None);
                    *holding = self
                        .lock_step(check, now, LOCKED[which], lock_step, wait, releasing)
                        .await?;
                }
            }
            if self.dir_moves {
                // Drawn only with directory moves on: other runs keep their seeds' draws.
                let (step, whose) = self
                    .rng
                    .with(|r| (r.gen_range(0..100u32), r.gen_range(0..self.clients)));
                match step {
                    // Boxed: this loop's future is every client task's, kept small
                    // (inline, the regression seeds overflowed a debug build's stack).
                    0..15 => Box::pin(self.move_step()).await?,
                    15..30 => Box::pin(self.read_moved(whose)).await?,
                    _ => {}
                }
            }
            if self.freeze.is_some() {
                // Drawn only with freezing on: other runs keep their seeds' draws.
                let (step, whose, deep) = self.rng.with(|r| {
                    (
                        r.gen_range(0..100u32),
                        r.gen_range(0..self.clients),
                        r.gen_range(0..2u32) == 0,
                    )
                });
                match step {
                    0..8 => Box::pin(self.freeze_step()).await?,
                    8..25 => Box::pin(self.put_frozen(deep)).await?,
                    25..35 => self.read(&Self::frozen_file(whose, deep)).await?,
                    // With indexes, more reads, each twice: the second is answered from
                    // the index more often (the first may load it).
                    35..60 if self.indexes => {
                        self.read(&Self::frozen_file(whose, deep)).await?;
                        self.read(&Self::frozen_file(whose, !deep)).await?;
                    }
                    _ => {}
                }
            }
            let (think, op, k, other, side, side2) = self.rng.with(|r| {
                (
                    Duration::from_millis(r.gen_range(0..20)),
                    r.gen_range(0..100u32),
                    r.gen_range(0..FILES),
                    r.gen_range(0..self.clients),
                    r.gen_range(0..SIDES.len()),
                    r.gen_range(0..SIDES.len()),
                )
            });
            tokio::time::sleep(think).await;
            let j = (k + 1 + other) % FILES;
            let mine = self.path(self.id, side, k);
            match op {
                0..20 => self.put(&mine, false).await,
                20..27 => self.put(&mine, true).await,
                27..33 => self.delete(&mine).await,
                // A third of them swap the two names instead (RENAME_EXCHANGE).
                33..38 if other % 3 == 0 => {
                    self.exchange(&mine, &self.path(self.id, side2, j)).await;
                }
                33..38 => self.rename(&mine, &self.path(self.id, side2, j)).await,
                38..42 => self.mkdir_filled(k).await?,
                42..45 => {
                    let d = self.dir(self.id, k);
                    if self.behind && k % 2 == 1 {
                        self.delete(&format!("{d}/f")).await;
                    }
                    self.rmdir(&d).await?;
                }
                45..62 => {
                    let path = self.path(other, side, k);
                    if self.leases && k % 2 == 0 {
                        // A whole listing first: the name, or its absence, may then be
                        // answered from it (docs/fuse.md "Directory leases").
                        let _ = self
                            .client
                            .readdir(myriad_placement::parent_of(&path))
                            .await;
                    }
                    self.read(&path).await?;
                    if self.leases {
                        self.read(&path).await?;
                    }
                    // A file in another client's directory, named whole (docs/fuse.md
                    // "mkdir behind": its directory may still be in that client's journal).
                    if self.behind && k % 2 == 1 {
                        self.read(&format!("{}/f", self.dir(other, k))).await?;
                    }
                }
                62..70 => {
                    let dir = self.dir(other, k);
                    self.stat_dir(&dir).await?;
                    if self.leases {
                        self.stat_dir(&dir).await?;
                    }
                }
                70..85 => {
                    created += 1;
                    let path = format!("{BIG}/c{}-{created}", self.id);
                    if self.create_shared(&path).await?
                        && let Some(Deferred::Made(n)) = self.defer_or(Deferred::Made(created))
                    {
                        live.insert(n);
                    }
                }
                85..90 if created > 0 => {
                    let n = self.rng.with(|r| r.gen_range(1..=created));
                    let path = format!("{BIG}/c{}-{n}", self.id);
                    // A create not yet vouched for is not live once its removal is tried.
                    self.deferred
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .retain(|d| !matches!(d, Deferred::Made(m) if *m == n));
                    self.remove_shared(&path, live.remove(&n)).await?;
                }
                _ => self.list().await?,
            }
        }
        self.sync(live).await;
        Ok(())
    }

    /// One step with file locks: take one (waiting up to `wait_ms`), renew the one held, or
    /// give it back; every grant and renewal is checked against the other clients'.
    async fn lock_step(
        &self,
        check: &LockCheck,
        holding: Holding,
        want: InodeId,
        draw: u32,
        wait_ms: u64,
        releasing: &std::sync::Mutex<std::collections::BTreeSet<InodeId>>,
    ) -> Result<Holding, String> {
        let me = self.id;
        let set = |ino, kind, wait| {
            self.client.set_lock(
                ino,
                OWNER,
                0,
                u64::MAX,
                kind,
                me,
                Duration::from_millis(wait),
            )
        };
        let believe = |ino| match self.client.lock_valid_until(ino) {
            Some(until) => check.believe(me, ino, until, Instant::now()),
            None => Ok(()),
        };
        Ok(match holding {
            Holding::None => match set(want, LockKind::Write, wait_ms).await {
                Ok(LockAnswer::Done { .. }) => {
                    self.trace.event(format_args!("c{me} locked {:#x}", want.0));
                    believe(want)?;
                    Holding::Held(want)
                }
                other => {
                    self.trace
                        .event(format_args!("c{me} lock {:#x}: {other:?}", want.0));
                    Holding::None
                }
            },
            Holding::Held(ino) if draw.is_multiple_of(2) => {
                let lost = self.client.renew_locks().await;
                if !lost.is_empty() {
                    self.trace.event(format_args!("c{me} lost {lost:?}"));
                }
                if self.client.holds_locks(ino, OWNER) {
                    believe(ino)?;
                    Holding::Held(ino)
                } else {
                    Holding::None
                }
            }
            Holding::Held(ino) | Holding::Releasing(ino) => {
                releasing
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(ino);
                check.release(me, ino);
                match set(ino, LockKind::Unlock, 0).await {
                    Ok(LockAnswer::Done { .. }) => {
                        self.trace
                            .event(format_args!("c{me} unlocked {:#x}", ino.0));
                        releasing
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .remove(&ino);
                        Holding::None
                    }
                    other => {
                        self.trace
                            .event(format_args!("c{me} unlock {:#x}: {other:?}", ino.0));
                        Holding::Releasing(ino)
                    }
                }
            }
        })
    }

    /// Writes the next version of `path` at offset 0 (a file that exists keeps its inode)
    /// and, if `two_chunks`, again past its first chunk.
    pub(super) async fn put(&self, path: &str, two_chunks: bool) {
        // Written behind, a new file is made empty and then written (as through a mount:
        // open(O_CREAT), write); the two may reach the servers in two batches, and a
        // reader between them sees the empty file.
        let empty = self
            .behind
            .then(|| self.history.begin(path, Some(String::new())));
        let v = self.history.next_version(path);
        let data = contents(path, v);
        let token = token_of(&data);
        self.history.begin(path, Some(token.clone()));
        let vp = two_chunks.then(|| self.history.begin(&piece(path), Some(token)));
        let result = async {
            let h = if self.behind {
                if self.rng.with(|r| r.gen_range(0..2u32)) == 0 {
                    // A whole listing with an exclusive lease: the changes that follow
                    // may be answered behind.
                    let dir = myriad_placement::parent_of(path).to_string();
                    let _ = self.client.readdir_for(&dir, ListFor::Filling).await;
                }
                self.client
                    .create_with(path, 0o644, false, &[], false)
                    .await?
            } else {
                self.client.create(path, 0o644, false, &data).await?
            };
            self.client.write(&h, 0, &data).await?;
            if two_chunks {
                self.client.write(&h, PIECE_OFFSET, &data).await?;
            }
            Ok::<(), FsError>(())
        }
        .await;
        match result {
            Ok(()) => {
                if let Some(ve) = empty {
                    self.ack(path, ve);
                }
                self.ack(path, v);
                if let Some(vp) = vp {
                    self.ack(&piece(path), vp);
                }
            }
            Err(e) => self
                .trace
                .event(format_args!("c{} put {path} v{v}: in doubt ({e})", self.id)),
        }
        let what = if two_chunks { "put2" } else { "put" };
        self.trace
            .event(format_args!("c{} {what} {path} v{v} done", self.id));
    }

    async fn delete(&self, path: &str) {
        let v = self.history.begin(path, None);
        let vp = self.history.begin(&piece(path), None);
        let removal = match self.client.unlink(path).await {
            r @ (Ok(()) | Err(FsError::NotFound)) => {
                self.ack(path, v);
                self.ack(&piece(path), vp);
                if r.is_ok() {
                    Removal::Removed
                } else {
                    Removal::NotFound
                }
            }
            Err(e) => {
                self.trace.event(format_args!(
                    "c{} delete {path} v{v}: in doubt ({e})",
                    self.id
                ));
                Removal::InDoubt
            }
        };
        self.history.note_removal(path, v, removal);
        self.trace
            .event(format_args!("c{} delete {path} v{v} done", self.id));
    }

    async fn read(&self, path: &str) -> Verdict {
        let invoked = Instant::now();
        let (first, second) = match self.client.fetch(path).await {
            Ok((_, data)) => {
                let (first, second) = pieces(&data);
                (Some(first), second)
            }
            Err(FsError::NotFound) => (None, None),
            // Unavailable past the client's deadline: no observation.
            Err(e) => {
                self.trace
                    .event(format_args!("c{} read {path}: {e}", self.id));
                return Ok(());
            }
        };
        self.trace.event(format_args!(
            "c{} read {path}: {first:?} / {second:?}",
            self.id
        ));
        self.check_own_read(path, invoked, first.as_deref())?;
        match second.as_deref() {
            // The second piece is read after the fetch, from the inode the fetch found. By
            // then a rename may have given that inode another name and its writer written
            // it through that name (a read through an open file sees those writes, as on
            // POSIX), or replaced it (its chunks dropped: zeros). Neither says anything of
            // this name: no observation. The final reads, with nothing running, check both
            // pieces strictly.
            Some("") => Ok(()),
            Some(t) if !t.starts_with(&format!("{path}@")) => Ok(()),
            seen => self.check_own_read(&piece(path), invoked, seen),
        }
    }

    /// Moves `from` (an acknowledged file) over `to`: `to` then holds `from`'s contents
    /// (both pieces), `from` is gone; all at once, or nothing.
    async fn rename(&self, from: &str, to: &str) {
        // A rename onto itself changes nothing (POSIX); the model below is for two names.
        if from == to {
            return;
        }
        let (Some(token), Some(second)) = (
            self.history.settled_token(from),
            self.history.settled(&piece(from)),
        ) else {
            return;
        };
        let vt = self.history.begin(to, Some(token));
        let vtp = self.history.begin(&piece(to), second);
        let vf = self.history.begin(from, None);
        let vfp = self.history.begin(&piece(from), None);
        match self
            .client
            .rename(from, to, myriad_client::RenameFlags::default())
            .await
        {
            Ok(()) => {
                self.ack(to, vt);
                self.ack(&piece(to), vtp);
                self.ack(from, vf);
                self.ack(&piece(from), vfp);
            }
            Err(e) => self.trace.event(format_args!(
                "c{} rename {from} -> {to}: in doubt ({e})",
                self.id
            )),
        }
        // With the trash on, a file the rename replaced may be kept (it is, within a
        // partition or between two, unless no bucket puts its kept name on the
        // destination's partition, as in a split trash directory: docs/trash.md "Not
        // yet"): at most one per rename.
        self.history.note_removal(to, vt, Removal::InDoubt);
        self.trace
            .event(format_args!("c{} rename {from} -> {to} done", self.id));
    }

    /// Swaps two of this client's files (RENAME_EXCHANGE), if both are known to exist:
    /// each name then reads as the other file did, both pieces included.
    async fn exchange(&self, a: &str, b: &str) {
        if a == b {
            return;
        }
        let (Some(ta), Some(pa), Some(tb), Some(pb)) = (
            self.history.settled_token(a),
            self.history.settled(&piece(a)),
            self.history.settled_token(b),
            self.history.settled(&piece(b)),
        ) else {
            return;
        };
        let va = self.history.begin(a, Some(tb));
        let vpa = self.history.begin(&piece(a), pb);
        let vb = self.history.begin(b, Some(ta));
        let vpb = self.history.begin(&piece(b), pa);
        let flags = myriad_client::RenameFlags {
            exchange: true,
            ..Default::default()
        };
        match self.client.rename(a, b, flags).await {
            Ok(()) => {
                self.ack(a, va);
                self.ack(&piece(a), vpa);
                self.ack(b, vb);
                self.ack(&piece(b), vpb);
            }
            Err(e) => self.trace.event(format_args!(
                "c{} exchange {a} <-> {b}: in doubt ({e})",
                self.id
            )),
        }
        self.trace
            .event(format_args!("c{} exchange {a} <-> {b} done", self.id));
    }
}

/// After the run: every file reads at least its last acknowledged version, both pieces.
pub async fn final_reads(client: &Client, history: &History) -> Verdict {
    for (path, _) in history.final_floors() {
        if path.ends_with("#chunk1") {
            continue;
        }
        let invoked = Instant::now();
        let is_dir = path.rsplit('/').next().is_some_and(|n| n.starts_with('d'));
        if is_dir {
            let seen = match client.stat(&path).await {
                Ok(_) => Some(DIR.to_string()),
                Err(FsError::NotFound) => None,
                Err(e) => return Err(format!("final stat of {path} failed: {e}")),
            };
            history.check_read(&path, invoked, seen.as_deref())?;
            continue;
        }
        let (first, second) = match client.fetch(&path).await {
            Ok((_, data)) => {
                let (first, second) = pieces(&data);
                (Some(first), second.filter(|s| !s.is_empty()))
            }
            Err(FsError::NotFound) => (None, None),
            Err(e) => return Err(format!("final read of {path} failed: {e}")),
        };
        history.check_read(&path, invoked, first.as_deref())?;
        history.check_read(&piece(&path), invoked, second.as_deref())?;
    }
    Ok(())
}
