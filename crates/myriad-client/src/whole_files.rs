//! Whole-file verbs for callers that think in files, not descriptors (the Python package,
//! the S3 gateway, `myriad put`): write a file's whole contents, fetch many files at once.

use futures::StreamExt;
use myriad_proto::{FsError, Inode};

use crate::client::Client;

/// Fetches `fetch_many` keeps in flight when the caller does not say.
pub const FETCH_MANY_PARALLEL: usize = 64;

impl Client {
    /// Attributes and contents of every path, in the order given, each as `fetch_follow`
    /// answers it (a symbolic link gives its file's contents), with up to `parallel`
    /// fetches in flight (each is one request for a small file, to the server its path
    /// lives on).
    pub async fn fetch_many(
        &self,
        paths: &[String],
        parallel: usize,
    ) -> Vec<Result<(Inode, Vec<u8>), FsError>> {
        futures::stream::iter(paths.iter().map(|p| self.fetch_follow(p)))
            .buffered(parallel.max(1))
            .collect()
            .await
    }

    /// `write_file` of every `(path, data)`, in the order given, with up to `parallel`
    /// in flight; each result in its item's place.
    pub async fn write_many(
        &self,
        items: &[(String, Vec<u8>)],
        mode: u32,
        parallel: usize,
    ) -> Vec<Result<Inode, FsError>> {
        futures::stream::iter(items.iter().map(|(p, d)| self.write_file(p, mode, d)))
            .buffered(parallel.max(1))
            .collect()
            .await
    }

    /// Makes `path` a regular file holding exactly `data`: a new file in one request (up to
    /// a chunk), an existing one truncated and written in place (its inode, links and
    /// open handles stay, as with `open(path, "w")`).
    pub async fn write_file(&self, path: &str, mode: u32, data: &[u8]) -> Result<Inode, FsError> {
        match self.create(path, mode, true, data).await {
            Ok(h) => Ok(h.inode),
            Err(FsError::AlreadyExists) => {
                let h = self.open(path).await?;
                let mut inode = self.truncate(&h, 0).await?;
                if !data.is_empty() {
                    inode = self.write(&h, 0, data).await?;
                }
                Ok(inode)
            }
            Err(e) => Err(e),
        }
    }
}
