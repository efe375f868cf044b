//! Freezing a tree for its metadata index and thawing it (docs/metadata-index.md): every
//! directory object of the tree marked, top down, so the walk misses none.

use myriad_placement::split_parent;
use myriad_proto::{ClientRequest, FileKind, FsError, Inode, ReadOnlyMark, Request, validate_path};

use crate::client::Client;

impl Client {
    /// Marks directory `path`'s object (every part of a split one) as inside frozen tree
    /// `mark`, or unmarks it with `None`. Root only.
    pub async fn mark_read_only(
        &self,
        path: &str,
        mark: Option<ReadOnlyMark>,
    ) -> Result<(), FsError> {
        self.mark_dir(path, mark, false).await
    }

    /// `mark_read_only`, or with `auto` the mark of an automatic index (not frozen: the
    /// first change unregisters the index).
    pub async fn mark_dir(
        &self,
        path: &str,
        mark: Option<ReadOnlyMark>,
        auto: bool,
    ) -> Result<(), FsError> {
        validate_path(path)?;
        let req = Request::from(ClientRequest::MarkReadOnly {
            path: path.to_string(),
            mark,
            auto,
        });
        self.request(self.dir_home(path), req).await.map(|_| ())
    }

    /// `path`'s attributes for an open that will write it: `ReadOnly` if it is in a frozen
    /// tree. Answered from the lease with no request where this caller holds the
    /// directory exclusively (a frozen directory is never held so: the mark recalls
    /// exclusive leases and no new one is granted); otherwise asked.
    pub async fn stat_to_write(&self, path: &str) -> Result<Inode, FsError> {
        let dir = split_parent(path).0;
        if path != "/"
            && self
                .leases
                .answers_behind(dir, self.entry_partition(path), self.acting_caller())
        {
            return self.stat(path).await;
        }
        self.entry_ask(path, myriad_proto::ask::open_write(path))
            .await
    }

    /// Freezes the tree under directory `root` as `mark`: each directory is marked before
    /// it is listed, so its listing is final (no name can be created, removed or renamed
    /// in it any more) and the walk finds every directory below. Returns the tree's
    /// directories, top down. A failure part-way leaves the marked ones marked (thaw them,
    /// or freeze again).
    pub async fn freeze_tree(
        &self,
        root: &str,
        mark: ReadOnlyMark,
    ) -> Result<Vec<String>, FsError> {
        self.mark_tree(root, mark, false).await
    }

    /// `freeze_tree`, or with `auto` marking the tree for an automatic index: each
    /// directory marked before it is listed, so a change after the listing unregisters
    /// the index.
    pub async fn mark_tree(
        &self,
        root: &str,
        mark: ReadOnlyMark,
        auto: bool,
    ) -> Result<Vec<String>, FsError> {
        self.mark_tree_within(root, mark, auto, usize::MAX).await
    }

    /// `mark_tree`, refusing (`InvalidArgument`) a tree of more than `most` directories
    /// once it has found them (what it marked stays marked, as for any failure).
    pub async fn mark_tree_within(
        &self,
        root: &str,
        mark: ReadOnlyMark,
        auto: bool,
        most: usize,
    ) -> Result<Vec<String>, FsError> {
        let mut dirs = vec![root.to_string()];
        let mut next = 0;
        while let Some(dir) = dirs.get(next).cloned() {
            next += 1;
            if next > most {
                return Err(FsError::InvalidArgument(format!(
                    "{root} has more than {most} directories"
                )));
            }
            self.mark_dir(&dir, Some(mark), auto).await?;
            dirs.extend(self.subdirs(&dir).await?);
        }
        Ok(dirs)
    }

    /// Thaws the frozen tree under `root`: its directories (still final while frozen) are
    /// unmarked deepest first, so none can move away marked while its parent is thawed.
    /// A directory gone meanwhile held no mark (a marked one cannot be removed): a tree
    /// frozen only in part (a freeze that failed part-way) thaws too. Returns how many
    /// directories it unmarked.
    pub async fn thaw_tree(&self, root: &str) -> Result<usize, FsError> {
        self.unmark_tree(root, false).await
    }

    /// `thaw_tree`, or with `auto` clearing an automatic index's marks.
    pub async fn unmark_tree(&self, root: &str, auto: bool) -> Result<usize, FsError> {
        let mut dirs = vec![root.to_string()];
        let mut next = 0;
        while let Some(dir) = dirs.get(next).cloned() {
            next += 1;
            match self.subdirs(&dir).await {
                Ok(below) => dirs.extend(below),
                Err(FsError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        let mut thawed = 0;
        for dir in dirs.iter().rev() {
            match self.mark_dir(dir, None, auto).await {
                Ok(()) => thawed += 1,
                Err(FsError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(thawed)
    }

    /// The paths of directory `dir`'s subdirectories.
    async fn subdirs(&self, dir: &str) -> Result<Vec<String>, FsError> {
        // From the servers: a tree being frozen or thawed is never answered from an index.
        Ok(self
            .readdir_servers(dir)
            .await?
            .into_iter()
            .filter(|e| e.inode.kind == FileKind::Directory)
            .map(|e| myriad_placement::join(dir, &e.name))
            .collect())
    }
}
