//! Which directories' entries a mutation may change: what a partition recalls directory
//! leases on before applying it (docs/fuse.md "Directory leases"). Pure.

use myriad_placement::parent_of;

use crate::state::ops::{Mutation, ShardMutation};

/// The entries a mutation may change.
#[derive(Debug, PartialEq, Eq)]
pub enum ChangedDirs {
    /// No entry (data past the first chunk, bookkeeping of outcomes and intents).
    None,
    /// Entries of these directories (held by this partition).
    Dirs(Vec<String>),
    /// No entry, but the mark of these directories (held by this partition) as inside
    /// an indexed tree (docs/metadata-index.md): what is answered behind under an
    /// exclusive lease must reach the servers first; shared leases hold nothing the mark
    /// changes, and a mark leaves a tree quiet for automatic indexes.
    Marks(Vec<String>),
    /// Entries this mutation cannot name without reading the store (the steps of
    /// two-partition protocols that name only their intent, repairs): every lease of
    /// the partition is recalled. Rare.
    All,
}

impl ChangedDirs {
    /// The directories named (`Dirs` or `Marks`).
    #[must_use]
    pub fn named(&self) -> &[String] {
        match self {
            ChangedDirs::Dirs(d) | ChangedDirs::Marks(d) => d,
            ChangedDirs::None | ChangedDirs::All => &[],
        }
    }
}

/// What `m` may change.
#[must_use]
pub fn changed_dirs(m: &Mutation) -> ChangedDirs {
    let one = |d: &str| ChangedDirs::Dirs(vec![d.to_string()]);
    match m {
        Mutation::Barrier
        | Mutation::ReserveIds { .. }
        | Mutation::ClaimReserved { .. }
        | Mutation::MoveClaim { .. }
        | Mutation::GiveUpClaimed { .. }
        | Mutation::MarkFileLocks { .. }
        // Orphans have no name anyone can read or lease.
        | Mutation::DropOrphans { .. }
        | Mutation::RecordOnce { .. }
        | Mutation::ForgetOnces { .. }
        | Mutation::Decide { .. }
        | Mutation::DeleteIntent { .. }
        // Intents of a tree move; its directories change by DirFreeze, DirImport, DirFinish.
        | Mutation::TreeMoveBegin { .. }
        | Mutation::TreeMoveRecord { .. }
        // Data past chunk 0 is not covered by leases (close-to-open checks it). Repaired
        // blocks are what the intact copies held, so what any reader saw.
        | Mutation::WriteChunk { .. }
        | Mutation::ChunkTrim { .. }
        | Mutation::ChunkTrimFrom { .. }
        | Mutation::DropBlocks { .. }
        | Mutation::RepairBlock { .. }
        // Counting the partition's files changes none of them.
        | Mutation::RebuildStats
        | Mutation::SyncQuotas { .. }
        | Mutation::QuotaAllow { .. }
        | Mutation::QuotaSettle { .. }
        | Mutation::QuotaLedger { .. }
        // Coding a chunk changes where its bytes are, never what they are.
        | Mutation::CodeChunk { .. }
        | Mutation::UncodeChunk { .. }
        | Mutation::RecodeChunk { .. }
        // Hard-linked inodes (in `//i`) are never cached under a lease: a client does
        // not keep a name whose file has more than one link.
        | Mutation::AdjustLinks { .. }
        // Clearing an automatic index's mark changes no entry (its unregistration, on
        // the registry's partition, recalled what had to be).
        | Mutation::ClearAutoIndex { .. } => ChangedDirs::None,
        Mutation::CreateFile { dir, .. }
        | Mutation::Symlink { dir, .. }
        | Mutation::Mknod { dir, .. }
        | Mutation::Unlink { dir, .. }
        | Mutation::SetAttr { dir, .. }
        | Mutation::DirTouch { dir, .. }
        | Mutation::Write { dir, .. }
        | Mutation::ExtendSize { dir, .. }
        | Mutation::Truncate { dir, .. }
        | Mutation::MkdirBegin { dir, .. }
        | Mutation::RmdirBegin { dir, .. }
        | Mutation::ResolveEntry { dir, .. }
        | Mutation::LinkSource { dir, .. }
        | Mutation::PutLinkRef { dir, .. } => one(dir),
        Mutation::DirTouches(touches) => {
            let mut dirs: Vec<String> = touches.iter().map(|t| t.dir.clone()).collect();
            dirs.sort();
            dirs.dedup();
            ChangedDirs::Dirs(dirs)
        }
        Mutation::RenameLocal { from, to, keep, .. } => {
            let mut dirs = vec![parent_of(from).to_string(), parent_of(to).to_string()];
            dirs.extend(keep.iter().map(|(kept, _)| parent_of(kept).to_string()));
            dirs.dedup();
            ChangedDirs::Dirs(dirs)
        }
        Mutation::RenameSourceBegin { from, to, .. } => {
            let mut dirs = vec![parent_of(from).to_string(), parent_of(to).to_string()];
            dirs.dedup();
            ChangedDirs::Dirs(dirs)
        }
        Mutation::RenamePrepare(p) => one(parent_of(&p.to)),
        Mutation::RenameTargetResolve { staged, kept, .. } => match (staged, kept) {
            (Some(dir), Some(kept)) if kept != dir => {
                ChangedDirs::Dirs(vec![dir.clone(), kept.clone()])
            }
            (Some(dir), _) => one(dir),
            (None, _) => ChangedDirs::None,
        },
        Mutation::MarkReadOnly { path, .. } => ChangedDirs::Marks(vec![path.clone()]),
        Mutation::DirObjectCreate { path, .. }
        | Mutation::DirObjectRemove { path, .. }
        | Mutation::DirFreeze { path, .. }
        | Mutation::DirFinish { path, .. } => one(path),
        Mutation::DirImport(d) => one(&d.path),
        Mutation::Shard(
            ShardMutation::SplitBegin { dir, .. }
            | ShardMutation::Import { dir, .. }
            | ShardMutation::Finish { dir, .. }
            | ShardMutation::MapChange { dir, .. }
            | ShardMutation::Create { dir, .. },
        ) => one(dir),
        // No entry or attribute a reader sees changes: the object holds none yet.
        Mutation::DirObjectConfirm { .. } => ChangedDirs::None,
        Mutation::InitRoot { .. }
        | Mutation::RenameSourceDecide { .. }
        | Mutation::Shard(ShardMutation::SplitCommit { .. } | ShardMutation::SplitAbort { .. })
        | Mutation::RepairRecord { .. }
        | Mutation::Resync { .. } => ChangedDirs::All,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_proto::{InodeId, RenameFlags};

    #[test]
    fn entry_changes_name_their_directories_and_intent_steps_everything() {
        let unlink = Mutation::Unlink {
            dir: "/a".into(),
            name: "f".into(),
            now: 0,
        };
        assert_eq!(changed_dirs(&unlink), ChangedDirs::Dirs(vec!["/a".into()]));
        let rename = Mutation::RenameLocal {
            from: "/a/x".into(),
            to: "/b/y".into(),
            flags: RenameFlags::default(),
            now: 0,
            keep: None,
        };
        assert_eq!(
            changed_dirs(&rename),
            ChangedDirs::Dirs(vec!["/a".into(), "/b".into()])
        );
        let within = Mutation::RenameLocal {
            from: "/a/x".into(),
            to: "/a/y".into(),
            flags: RenameFlags::default(),
            now: 0,
            keep: None,
        };
        assert_eq!(changed_dirs(&within), ChangedDirs::Dirs(vec!["/a".into()]));
        let decide = Mutation::RenameSourceDecide {
            txid: 1,
            commit: true,
            moves: Vec::new(),
            incoming: None,
        };
        assert_eq!(changed_dirs(&decide), ChangedDirs::All);
        // A rename's end at its destination: the directory its prepare staged the entry
        // in, or none at all (an abort of a prepare that failed).
        let resolve = |staged: Option<&str>| Mutation::RenameTargetResolve {
            now: 0,
            txid: 1,
            commit: false,
            staged: staged.map(str::to_string),
            kept: None,
        };
        assert_eq!(
            changed_dirs(&resolve(Some("/b"))),
            ChangedDirs::Dirs(vec!["/b".into()])
        );
        // With the trash on, the trash's directory that a commit keeps the replaced file in.
        let keeping = Mutation::RenameTargetResolve {
            now: 0,
            txid: 1,
            commit: true,
            staged: Some("/b".into()),
            kept: Some("/.trash/d/0/1/b".into()),
        };
        assert_eq!(
            changed_dirs(&keeping),
            ChangedDirs::Dirs(vec!["/b".into(), "/.trash/d/0/1/b".into()])
        );
        assert_eq!(changed_dirs(&resolve(None)), ChangedDirs::None);
        let chunk = Mutation::WriteChunk {
            ino: InodeId(9),
            chunk: 1,
            offset: 0,
            data: vec![1],
        };
        assert_eq!(changed_dirs(&chunk), ChangedDirs::None);
        // A mark of an indexed tree changes no entry: a mark, named as such.
        let mark = Mutation::MarkReadOnly {
            path: "/sw".into(),
            mark: None,
            auto: true,
        };
        assert_eq!(changed_dirs(&mark), ChangedDirs::Marks(vec!["/sw".into()]));
        assert_eq!(changed_dirs(&mark).named(), ["/sw".to_string()]);
    }
}
