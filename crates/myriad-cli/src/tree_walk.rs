//! A walk of a Myriad tree through the native client, listings in parallel (`fsstats`,
//! `du`): each directory is listed once, its entries (with their attributes, as the
//! servers' listings carry them) handed to the caller.

use futures::StreamExt;
use myriad_client::{Client, DirEntry, FileKind, FsError, Inode};

/// What the walk met.
pub enum Visit<'a> {
    /// A directory, listed: its path and its entries.
    Dir(&'a str, &'a [DirEntry]),
    /// Something that is not a directory: its directory, name and attributes.
    Other(&'a str, &'a str, &'a Inode),
    /// A directory that could not be listed.
    Unreadable(&'a str, &'a FsError),
}

/// Walks `root` (a directory or not), `parallel` listings at a time.
pub async fn walk(
    client: &Client,
    root: &str,
    parallel: usize,
    mut visit: impl FnMut(Visit<'_>),
) -> Result<(), FsError> {
    let top = client.stat(root).await?;
    if top.kind != FileKind::Directory {
        let (dir, name) = myriad_placement::split_parent(root);
        visit(Visit::Other(dir, name, &top));
        return Ok(());
    }
    let parallel = parallel.max(1);
    let mut frontier = vec![root.to_string()];
    while !frontier.is_empty() {
        let batch: Vec<String> = frontier.drain(..frontier.len().min(parallel * 8)).collect();
        let listed: Vec<(String, Result<Vec<DirEntry>, FsError>)> = futures::stream::iter(batch)
            .map(|d| async move {
                let r = client.readdir(&d).await;
                (d, r)
            })
            .buffer_unordered(parallel)
            .collect()
            .await;
        for (dir, r) in listed {
            let entries = match r {
                Ok(e) => e,
                Err(e) => {
                    visit(Visit::Unreadable(&dir, &e));
                    continue;
                }
            };
            visit(Visit::Dir(&dir, &entries));
            for e in &entries {
                if e.inode.kind == FileKind::Directory {
                    frontier.push(myriad_placement::join(&dir, &e.name));
                } else {
                    visit(Visit::Other(&dir, &e.name, &e.inode));
                }
            }
        }
    }
    Ok(())
}

/// The copies the map keeps of everything (at most one per server).
pub fn copies(client: &Client) -> u64 {
    let map = client.map();
    u64::from(map.replication.max(1)).min(map.nodes.len().max(1) as u64)
}
