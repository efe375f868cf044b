//! Following symbolic links, for callers that name files by path without a kernel in
//! between (the Python package, the CLI, the S3 gateway). Servers never follow a link: a
//! path names exactly the entry it spells, and `stat`/`fetch` of a link answer the link
//! itself (as `lstat` does). These verbs follow links where `stat(2)` and `open(2)` do:
//! in every component, the last one too, as the kernel's path walk does.
//!
//! Cost: nothing extra for a path with no link in it (one try of the operation itself).
//! When the try meets a link at its end, or fails as a link inside the path would make
//! it fail (ENOENT, ENOTDIR), the path is walked one component at a time, one `stat`
//! (usually leased or cached) each.

use std::collections::VecDeque;

use myriad_placement::{join, split_parent};
use myriad_proto::{DirEntry, FileKind, FsError, Inode};

use crate::client::Client;

/// Most symbolic links followed while resolving one path (Linux MAXSYMLINKS); past it,
/// ELOOP.
pub const SYMLINK_HOPS_MAX: usize = 40;

impl Client {
    /// `path` with every symbolic link in it followed, and the attributes of what it
    /// names (never a link). ENOENT for a dangling link, ELOOP past 40 links.
    pub async fn resolve(&self, path: &str) -> Result<(String, Inode), FsError> {
        match self.stat(path).await {
            Ok(i) if i.kind != FileKind::Symlink => Ok((path.to_string(), i)),
            Ok(_) | Err(FsError::NotFound | FsError::NotADirectory) => {
                self.follow_links(path).await
            }
            Err(e) => Err(e),
        }
    }

    /// `stat` following symbolic links (`stat(2)`; `stat` is `lstat(2)`).
    pub async fn stat_follow(&self, path: &str) -> Result<Inode, FsError> {
        self.resolve(path).await.map(|(_, i)| i)
    }

    /// `fetch` following symbolic links: the contents of the file a link names.
    pub async fn fetch_follow(&self, path: &str) -> Result<(Inode, Vec<u8>), FsError> {
        match self.fetch(path).await {
            Ok((i, _)) if i.kind == FileKind::Symlink => {
                let (real, _) = self.follow_links(path).await?;
                self.fetch(&real).await
            }
            Err(e @ (FsError::NotFound | FsError::NotADirectory)) => {
                match self.follow_links(path).await {
                    Ok((real, _)) if real != path => self.fetch(&real).await,
                    // No link on the way: the first answer stands.
                    Ok(_) => Err(e),
                    Err(e) => Err(e),
                }
            }
            other => other,
        }
    }

    /// `open` following symbolic links: the regular file a link names, by its real path.
    pub async fn open_follow(&self, path: &str) -> Result<crate::FileHandle, FsError> {
        let (real, inode) = self.resolve(path).await?;
        match inode.kind {
            FileKind::File => Ok(crate::FileHandle {
                path: real,
                inode,
                opened: false,
            }),
            FileKind::Directory => Err(FsError::IsADirectory),
            _ => Err(FsError::InvalidArgument("not a regular file".into())),
        }
    }

    /// `readdir` following symbolic links: the entries of the directory a link names (the
    /// entries' own links are listed as links).
    pub async fn readdir_follow(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        match self.readdir(path).await {
            Err(e @ (FsError::NotFound | FsError::NotADirectory)) => {
                match self.resolve(path).await {
                    Ok((real, i)) if real != path && i.kind == FileKind::Directory => {
                        self.readdir(&real).await
                    }
                    Ok((_, i)) if i.kind != FileKind::Directory => Err(FsError::NotADirectory),
                    Ok(_) => Err(e),
                    Err(e) => Err(e),
                }
            }
            other => other,
        }
    }

    /// The path walk: component by component from the root, a link's target put in
    /// front of what is left (from the root if absolute, else from the link's
    /// directory), `..` taken after the links before it are followed.
    async fn follow_links(&self, path: &str) -> Result<(String, Inode), FsError> {
        let mut left: VecDeque<String> = components(path).collect();
        let mut at = "/".to_string();
        let mut inode: Option<Inode> = None;
        let mut hops = 0;
        while let Some(name) = left.pop_front() {
            if name == ".." {
                at = split_parent(&at).0.to_string();
                inode = None;
                continue;
            }
            let next = join(&at, &name);
            let i = self.stat(&next).await?;
            if i.kind == FileKind::Symlink {
                hops += 1;
                if hops > SYMLINK_HOPS_MAX {
                    return Err(FsError::TooManyLinks);
                }
                let target = i.symlink_target.unwrap_or_default();
                if target.is_empty() {
                    return Err(FsError::NotFound);
                }
                if target.starts_with('/') {
                    at = "/".to_string();
                }
                for c in components(&target).collect::<Vec<_>>().into_iter().rev() {
                    left.push_front(c);
                }
                inode = None;
                continue;
            }
            if i.kind != FileKind::Directory && !left.is_empty() {
                return Err(FsError::NotADirectory);
            }
            at = next;
            inode = Some(i);
        }
        let inode = match inode {
            Some(i) => i,
            None => self.stat(&at).await?,
        };
        Ok((at, inode))
    }
}

/// The components of a path or link target, without empty ones and `.` (`..` kept: what
/// it means depends on the links before it).
fn components(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::components;

    #[test]
    fn components_drop_empty_and_dot_and_keep_dotdot() {
        let c: Vec<String> = components("/a//./b/../c/").collect();
        assert_eq!(c, ["a", "b", "..", "c"]);
        assert_eq!(components("x").collect::<Vec<_>>(), ["x"]);
        assert_eq!(components("/").count(), 0);
    }
}
