//! Freezing a tree for its metadata index and thawing it (docs/metadata-index.md): every
//! directory object of the tree marked, top down, so the walk misses none.

use myriad_proto::{ClientRequest, FileKind, FsError, ReadOnlyMark, Request, validate_path};

use crate::client::Client;

impl Client {
    /// Marks directory `path`'s object (every part of a split one) as inside frozen tree
    /// `mark`, or unmarks it with `None`. Root only.
    pub async fn mark_read_only(
        &self,
        path: &str,
        mark: Option<ReadOnlyMark>,
    ) -> Result<(), FsError> {
        validate_path(path)?;
        let req = Request::Client(ClientRequest::MarkReadOnly {
            path: path.to_string(),
            mark,
        });
        self.request(self.dir_home(path), req).await.map(|_| ())
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
        let mut dirs = vec![root.to_string()];
        let mut next = 0;
        while let Some(dir) = dirs.get(next).cloned() {
            next += 1;
            self.mark_read_only(&dir, Some(mark)).await?;
            dirs.extend(self.subdirs(&dir).await?);
        }
        Ok(dirs)
    }

    /// Thaws the frozen tree under `root`: its directories (still final while frozen) are
    /// unmarked deepest first, so none can move away marked while its parent is thawed.
    pub async fn thaw_tree(&self, root: &str) -> Result<usize, FsError> {
        let mut dirs = vec![root.to_string()];
        let mut next = 0;
        while let Some(dir) = dirs.get(next).cloned() {
            next += 1;
            dirs.extend(self.subdirs(&dir).await?);
        }
        for dir in dirs.iter().rev() {
            self.mark_read_only(dir, None).await?;
        }
        Ok(dirs.len())
    }

    /// The paths of directory `dir`'s subdirectories.
    async fn subdirs(&self, dir: &str) -> Result<Vec<String>, FsError> {
        Ok(self
            .readdir(dir)
            .await?
            .into_iter()
            .filter(|e| e.inode.kind == FileKind::Directory)
            .map(|e| myriad_placement::join(dir, &e.name))
            .collect())
    }
}
