//! Directory listings and batched stats across the shards of split directories
//! (docs/huge-dirs.md "Listings"). A listing walks the hash space in order; a cursor is the
//! last name returned, valid however the shards split in between.

use myriad_placement::{Shard, name_hash};
use myriad_proto::{DirEntry, FileKind, FsError, Inode, Response, WireError, validate_path};

use crate::client::{Client, READDIR_PAGE, Route};
use myriad_proto::ClientRequest;
use myriad_proto::ask;
use myriad_proto::reply::{Attrs, DirPage, Leased};

/// Rounds of re-sending names whose shard moved during a `stat_many`.
const REGROUP_ROUNDS_MAX: u32 = 8;

/// What a listing is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListFor {
    /// Reading: from an index or a lease where one covers the directory.
    Reading,
    /// Filling the directory next (a mount lists each directory it makes, tar and cp fill
    /// them): always from the servers, and a whole first page asks for an exclusive lease,
    /// under which this client's changes there are answered at once and sent behind
    /// (docs/fuse.md "Write-behind").
    Filling,
}

/// One page of a walk through the hash range `[.., end)`.
struct Page {
    entries: Vec<DirEntry>,
    /// Where the walk goes on: after this name, or (name `None`) at this hash.
    resume: Option<(u64, Option<String>)>,
}

impl Client {
    /// A page of `path`'s entries after name `after` (from the start if `None`), and the
    /// cursor for the next page (`None` at the end). Pages follow the hash order of names.
    pub async fn readdir_page(
        &self,
        path: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<(Vec<DirEntry>, Option<String>), FsError> {
        self.readdir_page_for(path, (after, limit), ListFor::Reading)
            .await
    }

    /// `readdir_page` for what the listing is `to` do.
    pub async fn readdir_page_for(
        &self,
        path: &str,
        (after, limit): (Option<String>, u32),
        to: ListFor,
    ) -> Result<(Vec<DirEntry>, Option<String>), FsError> {
        validate_path(path)?;
        if to == ListFor::Reading {
            if let Some(page) = self.indexed_page(path, after.as_deref(), limit).await {
                return Ok(page);
            }
            if let Some(page) = self.leased_listing(path, after.as_deref(), limit) {
                return Ok(page);
            }
        }
        // Claimed for changes already (a directory made behind is, from its birth).
        if to == ListFor::Filling
            && self.leases.holds_for_changes(path, self.acting_caller())
            && let Some(page) = self.leased_listing(path, after.as_deref(), limit)
        {
            return Ok(page);
        }
        let mut position = (after.as_deref().map_or(0, name_hash), after);
        loop {
            let page = self.list_page(path, position, None, (limit, to)).await?;
            match page.resume {
                // Nothing to show yet (the shard ended, or the page held only entries still
                // being created): go on unless there is already something to return.
                Some(p) if page.entries.is_empty() => position = p,
                Some(_) => {
                    let next = page.entries.last().map(|e| e.name.clone());
                    return match next {
                        Some(n) => Ok((page.entries, Some(n))),
                        None => Err(FsError::Protocol("empty page with more to come".into())),
                    };
                }
                None => return Ok((page.entries, None)),
            }
        }
    }

    /// A page of `path`'s entries from what a lease covers, when it covers the whole
    /// directory as this caller listed it (`Leases::listing`): in the servers' order
    /// (name hash, then name), after `after`, at most `limit`, with the next cursor.
    fn leased_listing(
        &self,
        path: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Option<(Vec<DirEntry>, Option<String>)> {
        if !self.config.leases {
            return None;
        }
        let mut names = self.leases.listing(path, self.acting_caller())?;
        names.sort_by_cached_key(|(n, _)| (name_hash(n), n.clone()));
        let all = names
            .into_iter()
            .map(|(name, inode)| DirEntry { name, inode })
            .collect();
        let page = page_of(all, after, limit);
        tracing::trace!(
            client = self.config.id,
            path,
            entries = page.0.len(),
            "listed from a lease"
        );
        Some(page)
    }

    /// Every entry of a directory with attributes (readdirplus). A split directory is listed
    /// from all its shards at once, each in pages of 1,024; results come in hash order.
    pub async fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        self.readdir_for(path, ListFor::Reading).await
    }

    /// `readdir` for what the listing is `to` do.
    pub async fn readdir_for(&self, path: &str, to: ListFor) -> Result<Vec<DirEntry>, FsError> {
        validate_path(path)?;
        if to == ListFor::Reading
            && let Some(all) = self.indexed_page(path, None, u32::MAX).await
        {
            return Ok(all.0);
        }
        self.readdir_servers_for(path, to).await
    }

    /// `readdir` as the servers (or a lease) answer it, no index.
    pub(crate) async fn readdir_servers(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        self.readdir_servers_for(path, ListFor::Reading).await
    }

    async fn readdir_servers_for(&self, path: &str, to: ListFor) -> Result<Vec<DirEntry>, FsError> {
        // The first page comes from the home, which says whether the directory is split.
        let first = self
            .list_page(path, (0, None), None, (READDIR_PAGE, to))
            .await?;
        let Some(resume) = first.resume else {
            return Ok(first.entries);
        };
        // Where the first walk stopped, as a hash: the leaves before it are done.
        let reached = resume
            .1
            .as_deref()
            .map_or(resume.0, name_hash)
            .max(resume.0);
        let leaves = self
            .shards
            .get(path)
            .map_or_else(|| vec![Shard::ALL], |m| m.leaves.clone());
        // One walk per known shard from where the first page stopped; each follows splits
        // inside its own range.
        let mut walks = Vec::new();
        for leaf in leaves {
            let end = leaf.end();
            if end.is_some_and(|e| e <= reached) {
                continue;
            }
            let start = if leaf.contains(reached) {
                resume.clone()
            } else {
                (leaf.start(), None)
            };
            walks.push(self.walk(path, (start, end), to));
        }
        let mut out = first.entries;
        for part in futures::future::try_join_all(walks).await? {
            out.extend(part);
        }
        Ok(out)
    }

    /// Lists the hash range from `start` to `end` (`None`: the end of the space).
    async fn walk(
        &self,
        path: &str,
        (mut position, end): ((u64, Option<String>), Option<u64>),
        to: ListFor,
    ) -> Result<Vec<DirEntry>, FsError> {
        let mut out = Vec::new();
        loop {
            let page = self
                .list_page(path, position, end, (READDIR_PAGE, to))
                .await?;
            out.extend(page.entries);
            match page.resume {
                Some(p) => position = p,
                None => return Ok(out),
            }
        }
    }

    /// A `ReadDir` sent with a lease on the directory asked for: the entries are kept
    /// under it, as lookups' answers are (docs/fuse.md "Directory leases"), so that a
    /// listing followed by stats (`ls -l`, `find | xargs stat`, `du`) asks nobody again.
    async fn leased_page(
        &self,
        path: &str,
        route: Route,
        req: ClientRequest,
        to: ListFor,
    ) -> Result<Response, FsError> {
        let whole_from_start = matches!(
            &req,
            ClientRequest::ReadDir {
                from: 0,
                after: None,
                ..
            }
        );
        let generation = (tokio::time::Instant::now(), self.leases.generation(path));
        let leased = ask::leased(
            self.leases.holder,
            req,
            to == ListFor::Filling && whole_from_start,
        );
        let Leased { answer, lease } = self.ask(route, leased).await?;
        let page = *answer?;
        if let (
            Some(grant),
            Response::DirPage {
                entries,
                next,
                shard_end,
                hidden,
                ..
            },
        ) = (lease, &page)
        {
            let caller = self.acting_caller();
            // The whole directory in one page, nothing left out: a name not in it is
            // missing.
            let whole = whole_from_start && next.is_none() && shard_end.is_none() && !hidden;
            let complete = whole.then(|| caller.clone());
            let answers = entries
                .iter()
                .map(|e| {
                    let entry = crate::leases::Entry::attrs(caller.clone(), e.inode.clone());
                    (e.name.clone(), entry)
                })
                .collect();
            self.keep_leased(path, answers, complete, &grant, generation);
        }
        Ok(page)
    }

    /// One `ReadDir` at `position`, sent to the node of the shard holding it; `resume` is
    /// `None` once the walk reaches `end`.
    async fn list_page(
        &self,
        path: &str,
        position: (u64, Option<String>),
        end: Option<u64>,
        (limit, to): (u32, ListFor),
    ) -> Result<Page, FsError> {
        let (from, after) = position;
        let at = after.as_deref().map_or(from, name_hash).max(from);
        let ask = ask::read_dir(path, (from, after), limit);
        let req = ask.request;
        let route = Route::Shard(path.to_string(), at);
        // From a copy in this zone if the primary is elsewhere (not the client's own
        // changes answered behind: those are at the primary only).
        let nearest = if self.leases.journal.busy() {
            None
        } else {
            self.read_nearest(&route, &req).await
        };
        let answer = match nearest {
            Some(r) => r,
            None if self.config.leases => self.leased_page(path, route, req, to).await,
            None => self.call(route, myriad_proto::Request::from(req)).await,
        };
        match answer.and_then(|r| ask.answer.of(r)) {
            Ok(DirPage {
                mut entries,
                next,
                shard_end,
                map,
                ..
            }) => {
                if let Some(m) = map {
                    self.shards.adopt(path, *m, true);
                }
                // A stale map can make a walk ask a node whose shard reaches past the walk's
                // range: what lies beyond belongs to the next walk.
                let before = entries.len();
                if let Some(end) = end {
                    entries.retain(|e| name_hash(&e.name) < end);
                }
                let resume = match (next, shard_end) {
                    _ if entries.len() < before => None,
                    (Some(name), _) => Some((from, Some(name))),
                    (None, Some(e)) if end.is_none_or(|end| e < end) => Some((e, None)),
                    (None, _) => None,
                };
                Ok(Page { entries, resume })
            }
            Err(FsError::NotFound) => Err(match self.stat_servers(path).await {
                Ok(i) if i.kind != FileKind::Directory => FsError::NotADirectory,
                Ok(_) => FsError::NotFound,
                Err(e) => e,
            }),
            Err(e) => Err(e),
        }
    }

    /// `StatMany` of `names` (at most `STAT_MANY_MAX`), one request per shard holding some,
    /// in parallel; names whose shard moved meanwhile are asked again where they went.
    pub(crate) async fn stat_many_sharded(
        &self,
        dir: &str,
        names: &[String],
    ) -> Result<Vec<Result<Inode, FsError>>, FsError> {
        let mut out: Vec<Option<Result<Inode, FsError>>> = vec![None; names.len()];
        let mut todo: Vec<usize> = (0..names.len()).collect();
        for _ in 0..REGROUP_ROUNDS_MAX {
            let mut groups: std::collections::BTreeMap<Shard, Vec<usize>> = Default::default();
            for &i in &todo {
                let leaf = self.shards.leaf_for(dir, name_hash(&names[i]));
                groups.entry(leaf).or_default().push(i);
            }
            let sends = groups.into_iter().map(|(leaf, idx)| {
                let stat = ask::stat_many(dir, idx.iter().map(|&i| names[i].clone()).collect());
                async move {
                    let r = self
                        .ask(Route::Shard(dir.to_string(), leaf.start()), stat)
                        .await;
                    (idx, r)
                }
            });
            todo.clear();
            let mut moved = None;
            for (idx, r) in futures::future::join_all(sends).await {
                let Attrs(attrs) = r?;
                if attrs.len() != idx.len() {
                    return Err(FsError::Protocol(format!(
                        "{} attributes for {} names",
                        attrs.len(),
                        idx.len()
                    )));
                }
                for (i, a) in idx.into_iter().zip(attrs) {
                    match a {
                        Err(WireError::WrongShard { map, .. }) => {
                            moved = Some(map);
                            todo.push(i);
                        }
                        a => out[i] = Some(a.map_err(FsError::from)),
                    }
                }
            }
            match moved {
                None => break,
                Some(map) => self.learn_shard_map(dir, map.map(|m| *m)).await,
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or(Err(FsError::Busy)))
            .collect())
    }

    /// Creates directory `path` split into `shards` shards from the start (rounded up to a
    /// power of two, at most 256): for directories known to become huge.
    pub async fn mkdir_sharded(
        &self,
        path: &str,
        mode: u32,
        shards: u32,
    ) -> Result<Inode, FsError> {
        validate_path(path)?;
        let mkdir = ask::mkdir(path, mode, shards);
        match self
            .call(
                Route::Entry(path.to_string()),
                myriad_proto::Request::from(mkdir.request),
            )
            .await
        {
            Ok(r) => {
                self.note_parent(path, &r);
                mkdir.answer.of(r)
            }
            Err(e) => Err(self.refine(path, e).await),
        }
    }

    /// The shard map this client holds for `dir` (`None`: taken as unsplit).
    #[must_use]
    pub fn shard_map(&self, dir: &str) -> Option<myriad_placement::ShardMap> {
        self.shards.get(dir).map(|m| (*m).clone())
    }
}

/// The page of a whole listing `all` (in the servers' order: name hash, then name) after
/// `after`, at most `limit` entries, with the cursor of the next page.
fn page_of(
    mut all: Vec<DirEntry>,
    after: Option<&str>,
    limit: u32,
) -> (Vec<DirEntry>, Option<String>) {
    let (from, to) = page_bounds(all.len(), |i| &all[i].name, after, limit);
    let more = to < all.len();
    all.truncate(to);
    let page = all.split_off(from);
    let next = more.then(|| page.last().map(|e| e.name.clone())).flatten();
    (page, next)
}

/// The positions `from..to` of the page after `after` (at most `limit` entries) in a
/// listing of `len` names in the servers' order, `name_at(i)` the `i`-th.
pub(crate) fn page_bounds<'a>(
    len: usize,
    name_at: impl Fn(usize) -> &'a str,
    after: Option<&str>,
    limit: u32,
) -> (usize, usize) {
    let from = after.map_or(0, |a| {
        let key = (name_hash(a), a);
        // The first position past `after`.
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let n = name_at(mid);
            if (name_hash(n), n) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    });
    let limit = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
    (from, from.saturating_add(limit).min(len))
}
