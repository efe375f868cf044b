//! What the client answers from its directory leases without a round trip: the cached
//! attributes, the hooks a mount is told of recalls through, the counts of local answers.

use std::sync::Arc;

use myriad_placement::split_parent;
use myriad_proto::{Caller, ClientRequest, FileKind, FsError, Inode, Response, validate_path};

use myriad_proto::reply::Leased;

use super::{Client, Parents, Route};

impl Client {
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
        if let Some(r) = self.indexed_now(path, caller, false) {
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

    /// Whether the whole listing of directory `dir` this client's caller was answered
    /// since `mark` is still covered by a lease: then it stays true until the lease is
    /// dropped, and the recall hook is told of `dir` (a mount lets the kernel keep the
    /// listing that long). Not for listings answered from an index.
    #[must_use]
    pub fn listing_covered(&self, dir: &str, mark: Option<crate::LeaseMark>) -> bool {
        mark.is_some_and(|mark| self.leases.covers_listing(dir, self.acting_caller(), mark))
    }

    /// What `lookup_head(path, max_bytes)` answers with no request and no wait, from a
    /// loaded index or the lease cache (`None`: it would ask, or wait for, a server). For
    /// a mount's lookup of a name it holds, answered without a thread switch.
    #[must_use]
    pub fn lookup_head_now(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Option<Result<(Inode, Vec<u8>), FsError>> {
        self.held_now(path, max_bytes, true)
    }

    /// `lookup_head_now` (`lookup`: contents only for a caller who may read them, and no
    /// read permission needed) or `fetch_head_now` (the file read, or refused).
    fn held_now(
        &self,
        path: &str,
        max_bytes: u64,
        lookup: bool,
    ) -> Option<Result<(Inode, Vec<u8>), FsError>> {
        if !self.config.leases || validate_path(path).is_err() {
            return None;
        }
        if let Some(r) = self.indexed_now(path, self.acting_caller(), true) {
            self.count_answer(&self.answered_by_index);
            return Some(r.and_then(|i| {
                if lookup {
                    Ok(i.looked_up(max_bytes))
                } else {
                    i.head(max_bytes)
                }
            }));
        }
        if lookup {
            self.lease_lookup(path, max_bytes)
        } else {
            self.lease_answer(path, max_bytes)
        }
    }

    /// A lookup of `path` (attributes, and up to `max_bytes` of contents if the lease
    /// holds them all) answered from the lease cache, if it covers the name.
    pub(super) fn lease_lookup(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Option<Result<(Inode, Vec<u8>), FsError>> {
        use crate::leases::Cached;
        if !self.config.leases || path == "/" {
            return None;
        }
        let (dir, name) = split_parent(path);
        let found = self.leases.get(dir, name, self.acting_caller())?;
        self.count_answer(&self.answered_by_lease);
        Some(match found {
            Cached::Missing => Err(FsError::NotFound),
            Cached::Found {
                inode, mut data, ..
            } => {
                if (data.len() as u64) < inode.size.min(max_bytes) {
                    data.clear();
                }
                data.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
                Ok((inode, data))
            }
        })
    }

    /// What `fetch_head(path, max_bytes)` answers with no request and no wait, from a
    /// loaded index or the lease cache (`None`: it would ask, or wait for, a server). For
    /// a mount's open of a file it holds, answered without a thread switch.
    #[must_use]
    pub fn fetch_head_now(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Option<Result<(Inode, Vec<u8>), FsError>> {
        self.held_now(path, max_bytes, false)
    }

    /// A read of `path`'s entry asking for `asked` bytes, answered from the lease cache
    /// when it covers the name and holds that much (or the whole file).
    fn lease_answer(&self, path: &str, asked: u64) -> Option<Result<(Inode, Vec<u8>), FsError>> {
        use crate::leases::Cached;
        let (dir, name) = split_parent(path);
        match self.leases.get(dir, name, self.acting_caller())? {
            Cached::Missing if path != "/" => {
                self.count_answer(&self.answered_by_lease);
                Some(Err(FsError::NotFound))
            }
            Cached::Found {
                inode,
                data,
                asked: had,
            } if had >= asked
                || (inode.kind == FileKind::File && data.len() as u64 >= inode.size) =>
            {
                self.count_answer(&self.answered_by_lease);
                let mut data = data;
                data.truncate(usize::try_from(asked).unwrap_or(usize::MAX));
                tracing::trace!(client = self.config.id, path, "answered from a lease");
                Some(Ok((inode, data)))
            }
            _ => None,
        }
    }

    /// A read of `path`'s entry (`Stat`, or `Fetch` of `asked` bytes) answered from the
    /// lease cache when it covers it, else sent with a lease asked for, the answer kept
    /// under it (docs/fuse.md "Directory leases").
    pub(super) async fn leased_entry(
        &self,
        path: &str,
        read: ClientRequest,
        asked: u64,
        parents: Parents,
    ) -> Result<Response, FsError> {
        use crate::leases::{Cached, Entry};
        validate_path(path)?;
        let (dir, name) = split_parent(path);
        let caller = self.acting_caller();
        if let Some(r) = self.lease_answer(path, asked) {
            return r.map(|(inode, data)| Response::Fetched { inode, data });
        }
        // Not the client's own changes answered behind: those are at the primary only.
        if !self.leases.journal.busy()
            && let Some(r) = self.entry_nearest(path, &read, parents).await
        {
            return r;
        }
        let generation = (tokio::time::Instant::now(), self.leases.generation(dir));
        let leased = myriad_proto::ask::leased(self.leases.holder, read, false);
        let Leased { answer, lease } = match self.ask(Route::Entry(path.to_string()), leased).await
        {
            Ok(l) => l,
            Err(e) => return Err(self.refine_under(path, e, parents).await),
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
                let e = self.refine_under(path, e.into(), parents).await;
                ((e == FsError::NotFound).then_some(Cached::Missing), Err(e))
            }
        };
        if let (Some(grant), Some(cached)) = (lease, cached) {
            let answers = vec![(
                name.to_string(),
                Entry {
                    caller: caller.clone(),
                    cached,
                },
            )];
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
            self.start_upkeep(start);
        }
    }

    /// Holds directory `path`, whose mkdir this client answered behind as `inode`, from
    /// its birth (`Leases::put_born`; `lease`: when it was answered, and the period of the
    /// parent's lease), and reserves numbers for the creates to be answered in it.
    pub(crate) fn keep_born(
        &self,
        path: &str,
        inode: &Inode,
        lease: (tokio::time::Instant, std::time::Duration),
    ) {
        // Its home: a new directory is unsplit (a shard map kept of an earlier directory
        // of that name would say otherwise).
        let partition = self.dir_home(path);
        let Some(addr) = self.st().map.partition_addr(partition).map(str::to_string) else {
            self.leases.not_born(path);
            return;
        };
        let started = self.leases.journal.refill_ids(partition);
        self.leases.journal.start(started);
        let caller = self.acting_caller();
        let held = (path, partition, addr);
        if let Some(start) = self.leases.put_born(held, caller, inode.clone(), lease) {
            self.start_upkeep(start);
        }
    }

    /// Starts the poll and renewals of leases at a server (`start`: its address and run).
    fn start_upkeep(&self, start: (String, u64)) {
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

    /// Gives every directory lease back (a mount going away: others need not wait for
    /// them to expire).
    pub async fn release_leases(&self) {
        self.leases
            .release_all(&self.transport, &self.config.caller)
            .await;
    }

    pub(super) fn count_answer(&self, counter: &std::sync::atomic::AtomicU64) {
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

    /// Batches of changes answered behind that went before a directory's setattr still
    /// waiting for the directory's own changes (docs/fuse.md "A directory's entry from
    /// two journals"), since the client started.
    pub fn behind_passes(&self) -> u64 {
        self.leases.journal.passes()
    }

    /// Setattrs answered behind that were sent inside the create before them (one change
    /// for the servers: `requests::Create::then`), since the client started.
    pub fn setattrs_in_creates(&self) -> u64 {
        self.leases.journal.folded_setattrs()
    }
}
