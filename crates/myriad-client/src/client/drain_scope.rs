//! What a request waits for in this client's journals of changes answered behind before
//! it is sent (`Client::drain_before`, docs/fuse.md "Write-behind"), and whether a listing
//! would wait now (`Client::listing_waits`).

use myriad_proto::{ClientRequest, FsError};

use super::Client;
use crate::behind_journals::{Journal, PartJournal};
use myriad_placement::split_parent;

/// What a request waits for in this client's journals before it is sent
/// (`Client::drain_before`).
pub(super) struct DrainScope<'a> {
    paths: &'a [String],
    subtree: bool,
    /// A change: after every change journaled in its directories (and below a moved or
    /// removed one).
    changed: Vec<&'a str>,
    below: Vec<String>,
    /// A change of a directory's mode or owner: after the changes journaled in it and
    /// below it, which were answered by its old attributes. Any setattr of a directory:
    /// after its own journal, whose creates and unlinks set its mtime when applied (a
    /// `utime` overtaken by them was lost: tar's, rsync's).
    own_attrs: Option<&'a str>,
    own_times: Option<&'a str>,
    /// A listing: after its directory's journal, and its subdirectories' changes that
    /// move their times. A read of one name: after the changes of that name, and, if it
    /// is a directory, its own names' changes that move its times.
    pub(super) listed: Option<&'a str>,
    pub(super) named: Option<&'a str>,
    /// Anything about a directory whose setattr was answered behind, or about what lies
    /// below it: after that setattr (the servers judge by its mode, and a change of its
    /// names sets its times after it).
    fenced: Vec<myriad_proto::LeaseKey>,
}

impl<'a> DrainScope<'a> {
    pub(super) fn of(
        journal: &Journal,
        inner: &'a ClientRequest,
        paths: &'a [String],
        subtree: bool,
    ) -> DrainScope<'a> {
        let changed = paths.iter().map(|p| split_parent(p).0).collect();
        let below = if subtree {
            paths.iter().map(|p| format!("{p}/")).collect()
        } else {
            Vec::new()
        };
        let (own_attrs, own_times) = match inner {
            ClientRequest::SetAttr { path, set }
                if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() =>
            {
                (Some(path.as_str()), Some(path.as_str()))
            }
            ClientRequest::SetAttr { path, .. } => (None, Some(path.as_str())),
            _ => (None, None),
        };
        let (listed, named) = match inner.read_of() {
            Some(myriad_proto::ReadOf::Listing(d)) => (Some(d), None),
            Some(myriad_proto::ReadOf::Name(n)) => (None, Some(n)),
            None => (None, None),
        };
        let about = paths.iter().map(String::as_str).chain(listed).chain(named);
        let fenced = journal.fenced(about);
        DrainScope {
            paths,
            subtree,
            changed,
            below,
            own_attrs,
            own_times,
            listed,
            named,
            fenced,
        }
    }

    /// Whether the request waits for part `k` of the journals (`part`).
    pub(super) fn selects(&self, k: &myriad_proto::LeaseKey, part: &PartJournal) -> bool {
        let d = k.dir.as_str();
        // Where only a directory's own entry is read (its times and link count: a stat of
        // it, the subdirectories of a listed one), only the changes that move them: not
        // the setattrs of its names waiting for their own subtrees (`tar -x` sets each
        // directory's times once it filled it), which may wait for nearly every change
        // journaled below.
        let times_of = |d: &str| {
            self.named == Some(d)
                || self
                    .listed
                    .is_some_and(|l| d != "/" && d != l && split_parent(d).0 == l)
        };
        self.fenced.contains(k)
            || self.changed.contains(&d)
            || self.below.iter().any(|b| d.starts_with(b.as_str()))
            || (self.subtree && self.paths.iter().any(|p| p == d))
            || self.listed == Some(d)
            || self.named.is_some_and(|n| part.touches(n))
            || self.own_times == Some(d)
            || self.own_attrs.is_some_and(|p| {
                d == p || p == "/" || d.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
            })
            || (times_of(d) && part.times_pending())
    }
}

impl Client {
    /// Before a request about names of a directory part with changes answered behind:
    /// those are sent and answered first, so the servers see this client's changes in
    /// the order it made them (docs/fuse.md "Write-behind").
    pub(super) async fn drain_before(
        &self,
        inner: &ClientRequest,
        paths: &[String],
        subtree: bool,
    ) -> Result<(), FsError> {
        let scope = DrainScope::of(&self.leases.journal, inner, paths, subtree);
        let which = |k: &myriad_proto::LeaseKey, part: &crate::behind_journals::PartJournal| {
            scope.selects(k, part)
        };
        // As long as a request may wait. Past it the request fails: sent anyway, a change
        // would overtake the journal's (an unlink retried later would remove a newer
        // file), a read would miss what this client was told is done. The journal is
        // retried meanwhile.
        let started = std::time::Instant::now();
        let drained = self
            .leases
            .journal
            .drain(&which, Some(self.config.request_timeout))
            .await;
        let waited = started.elapsed();
        if waited > std::time::Duration::from_millis(20) {
            tracing::debug!(
                op = inner.op_name(),
                ?paths,
                listed = ?scope.listed,
                named = ?scope.named,
                ?waited,
                "a request waited for this client's journals"
            );
        }
        if drained {
            Ok(())
        } else {
            Err(FsError::TimedOut(
                "this mount's earlier changes there are not yet taken by their server".into(),
            ))
        }
    }

    /// Whether a listing of `dir` would wait now for changes this client answered behind
    /// (an `opendir` then lists nothing until the first read of it: `find` opens "."
    /// and never lists it, and waited there for a whole `tar -x` to reach the servers).
    pub fn listing_waits(&self, dir: &str) -> bool {
        let journal = &self.leases.journal;
        if !journal.busy() {
            return false;
        }
        let req = ClientRequest::ReadDir {
            path: dir.to_string(),
            from: 0,
            after: None,
            limit: 0,
        };
        let scope = DrainScope::of(journal, &req, &[], false);
        journal.would_wait(&|k, p| scope.selects(k, p))
    }
}
