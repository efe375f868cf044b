//! The trash (docs/trash.md): with the map's `trash_days` above 0, an unlink of a file or
//! a symbolic link moves it to `/.trash/<date>/<uid>/<bucket>/<original path>` instead of freeing
//! it. The move is the unlink's one change: the rename that exists (`twophase.rs`), run
//! in the unlink's context, so its outcome is recorded with the rename's decision
//! (`exactly_once.rs`: an unlink is completed by an `Unlink` or by a committed rename) and
//! a retry is answered as the unlink was.
//!
//! The trash's directories are made by this server (as root) before the first move into
//! them, and a move goes only into directories whose mkdir this partition saw answered
//! (`trash_dirs.rs`): a directory object exists before its mkdir is decided, and a move into
//! one whose mkdir is then undone would leave it holding files under a name that is gone
//! (simulation seed 186 with `--trash`: a mkdir in doubt after a crash, a retried move
//! into its object, and recovery's undo of the mkdir refused as not empty, forever).

use std::future::Future;
use std::sync::Arc;

use myriad_placement::split_parent;
use myriad_proto::trash::{
    TRASH_DIR_MODE, TRASH_ROOT, TRASH_USER_MODE, date_of, in_trash, kept_path, user_dir,
};
use myriad_proto::{
    ClientRequest, FileKind, Inode, InodeId, REMOVAL_CLAIMS_SINCE, RenameFlags, Response, SetAttr,
    WireError, ask,
};

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::partition::made::Made;

/// How many other buckets a move tries when a kept file stands where a directory of its
/// path goes.
const BUCKET_CONFLICTS_MAX: u32 = 8;

/// Where a removed (or replaced) file is being kept, and what the tries so far learned.
pub(crate) struct KeptSpot {
    date: String,
    uid: u32,
    /// The kept file.
    pub(crate) ino: myriad_proto::InodeId,
    /// The path it had.
    original: String,
    bucket: u32,
    /// The second name (`<path>.<inode>`), once the first was found taken.
    again: Option<myriad_proto::InodeId>,
    /// The trash's directories were made again once (a day purged meanwhile).
    remade: bool,
    /// Buckets given up for a kept file where a directory of the path goes.
    conflicts: u32,
}

impl KeptSpot {
    fn path(&self) -> String {
        kept_path(
            &self.date,
            self.uid,
            self.bucket,
            &self.original,
            self.again,
        )
    }
}

impl Partition {
    /// Whether an unlink of `path` may move it to the trash: the trash is on and the name
    /// is not in the trash already (checked before the name is looked up).
    pub(crate) fn trash_on(st: &MapState, path: &str) -> bool {
        st.map.ext.trash_days > 0 && !in_trash(path)
    }

    /// Whether the trash keeps `inode`: a file or a symbolic link (a hard-linked file's
    /// name goes as before: its data lives on under its other names; docs/trash.md "As
    /// built").
    pub(crate) fn trash_keeps(inode: &Inode) -> bool {
        matches!(inode.kind, FileKind::File | FileKind::Symlink)
    }

    /// What an unlink of a name holding `entry` keeps in the trash, if anything: a file or
    /// a symbolic link; the last name of a hard-linked file (its inode as its home has it:
    /// the owner and the number the trash's names use), which the move takes there as a
    /// name, the inode staying at its home; not a name whose file has others (only the
    /// name goes, the data lives on under them). The home is asked to claim the removal
    /// (`removal_claims.rs`), so that of two last names removed at once one is kept;
    /// below protocol 41 it is only asked the count, and both may go.
    pub(crate) async fn kept_by_trash(
        self: &Arc<Self>,
        entry: Inode,
    ) -> Result<Option<Inode>, WireError> {
        if entry.kind != FileKind::HardLink {
            return Ok(Self::trash_keeps(&entry).then_some(entry));
        }
        let inode = match entry.link_home {
            Some(home) if self.state().map.ext.protocol_floor >= REMOVAL_CLAIMS_SINCE => {
                let inode = self.ask_node(home, ask::claim_removal(entry.ino)).await?;
                if inode.nlink > 1 {
                    // Claimed: this removal's drop ends the claim (`drop_link`).
                    let now = tokio::time::Instant::now();
                    self.removal_claims.claimed_here(entry.ino, now);
                }
                inode
            }
            _ => self.resolve(entry).await?,
        };
        Ok((inode.nlink <= 1).then_some(inode))
    }

    /// Moves `path` (holding `inode`, its owner `inode.uid`) into today's trash, as the
    /// change `made` carries; returns the parent's attributes after.
    pub(crate) async fn move_to_trash(
        self: &Arc<Self>,
        made: &Made,
        path: &str,
        inode: &Inode,
    ) -> Result<Option<Inode>, WireError> {
        let ctx = made.context();
        // Never over a kept file: a second removal of one path on one day is kept
        // beside the first (`<path>.<inode>`).
        let flags = RenameFlags {
            no_replace: true,
            exchange: false,
        };
        let touched = self
            .at_spot(self.kept_spot(path, inode), |(kept, _)| {
                self.rename(&ctx, path.to_string(), kept, flags)
            })
            .await?;
        let from_dir = split_parent(path).0;
        Ok(if touched {
            None
        } else {
            self.touch_after(from_dir, made).await
        })
    }

    /// With the trash on, where a rename to `to` keeps the file it replaces: `None` if it
    /// keeps none (the trash off, `to` in the trash, nothing or a directory there, a name
    /// of a hard-linked file that has others, or no bucket puts the kept name on this
    /// partition, the one holding `to`'s name, which keeps it in the rename's own batch: a
    /// split trash directory; docs/trash.md "Not yet"). What is kept is what an unlink of
    /// the name would keep (`kept_by_trash`): the last name of a hard-linked file too, its
    /// inode staying at its home. Asked by the rename within a partition and by the
    /// destination's prepare of one between two (`peer_rename_prepare`).
    pub(crate) async fn spot_for_replaced(
        self: &Arc<Self>,
        to: &str,
        flags: RenameFlags,
    ) -> Result<Option<KeptSpot>, WireError> {
        if flags.no_replace || flags.exchange || !Self::trash_on(&self.state(), to) {
            return Ok(None);
        }
        let old = match self.lookup(to).await {
            Ok(old) => self.kept_by_trash(old).await?,
            Err(WireError::NotFound) => None,
            Err(e) => return Err(e),
        };
        let Some(old) = old else {
            return Ok(None);
        };
        let spot = self.kept_spot(to, &old);
        Ok((self.entry_node(&spot.path()) == self.me).then_some(spot))
    }

    /// Runs `run`, the change that moves a file into the trash, with `spot`'s kept name
    /// and the file's inode, the trash's directories made first; tried again at the spot
    /// as it changes (`next_spot`). An unlink's move and a rename keeping the file it
    /// replaces (`spot_for_replaced`) go through it.
    pub(crate) async fn at_spot<T, Run, Fut>(
        self: &Arc<Self>,
        mut spot: KeptSpot,
        mut run: Run,
    ) -> Result<T, WireError>
    where
        Run: FnMut((String, InodeId)) -> Fut,
        Fut: Future<Output = Result<T, WireError>>,
    {
        let began = tokio::time::Instant::now();
        loop {
            let tried = match self.ready_spot(&spot, began).await {
                Ok(kept) => run((kept, spot.ino)).await,
                Err(e) => Err(e),
            };
            match tried {
                Ok(out) => return Ok(out),
                Err(e) if self.next_spot(&mut spot, &e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Where today's trash keeps `path` (holding `inode`) at first.
    fn kept_spot(&self, path: &str, inode: &Inode) -> KeptSpot {
        let date = date_of(self.env.now_ns());
        let bucket = self.local_bucket(&date, inode.uid, path, 0);
        KeptSpot {
            date,
            uid: inode.uid,
            ino: inode.ino,
            original: path.to_string(),
            bucket,
            again: None,
            remade: false,
            conflicts: 0,
        }
    }

    /// Makes `spot`'s directories for a change begun at `began`; the kept path. `Busy` if
    /// that held the change up too long to apply it now (`made::in_time`: making them may
    /// take several requests; its client sends it again, and finds them made).
    pub(crate) async fn ready_spot(
        self: &Arc<Self>,
        spot: &KeptSpot,
        began: tokio::time::Instant,
    ) -> Result<String, WireError> {
        let kept = spot.path();
        self.make_trash_dirs(&spot.date, spot.uid, split_parent(&kept).0)
            .await?;
        crate::partition::made::in_time(began)?;
        Ok(kept)
    }

    /// A try of `spot` failed with `e`: whether to try again, at the spot as it changes.
    pub(crate) fn next_spot(&self, spot: &mut KeptSpot, e: &WireError) -> bool {
        match e {
            // A day purged (or the whole trash removed) since this partition made its
            // directories: all made again, once.
            WireError::NotFound if !spot.remade => {
                spot.remade = true;
                self.trash_dirs.forget(TRASH_ROOT);
                true
            }
            // A kept file where a directory of this path goes (`/x` removed, then a
            // directory `/x` made and `/x/y` removed on the same day): another bucket.
            WireError::NotADirectory if spot.conflicts < BUCKET_CONFLICTS_MAX => {
                spot.conflicts += 1;
                spot.bucket =
                    self.local_bucket(&spot.date, spot.uid, &spot.original, spot.bucket + 1);
                true
            }
            WireError::AlreadyExists if spot.again.is_none() => {
                spot.again = Some(spot.ino);
                true
            }
            _ => false,
        }
    }

    /// The first bucket from `from` on whose kept name for `path` lives on this partition
    /// (the move is then one local rename, about an unlink's cost, instead of a rename
    /// between two partitions: `rm -rf` of 10,000 files 23 s -> 3.4 s, BENCHMARKS.md "Stop
    /// 83"), or `from` if none of the next few does (a split trash directory, say). A
    /// replaced file is kept only if one does: with P partitions, 16 P tries miss all of
    /// them with a chance of (1 - 1/P)^(16 P), at most e^-16 (1e-7); 4 P missed 0.8% of
    /// the time with 3 partitions.
    fn local_bucket(&self, date: &str, uid: u32, path: &str, from: u32) -> u32 {
        let tries = 16
            * u32::try_from(self.state().map.partitions.len())
                .unwrap_or(1)
                .max(1);
        (from..from.saturating_add(tries))
            .find(|&b| self.entry_node(&kept_path(date, uid, b, path, None)) == self.me)
            .unwrap_or(from)
    }

    /// Makes the trash's directories down to `dir` (inside `user_dir(date, uid)`) that
    /// this partition has not seen made: `/.trash` and the date's directory root's (mode
    /// 0711), the user's directory and those below it the user's (mode 0700, owner set
    /// after the mkdir). An error is returned: `Busy` for a name whose mkdir is undecided
    /// (the unlink is tried again), `NotADirectory` where a kept file stands (the caller
    /// tries another bucket), `NotFound` under a purged day (the caller makes all again).
    async fn make_trash_dirs(
        self: &Arc<Self>,
        date: &str,
        uid: u32,
        dir: &str,
    ) -> Result<(), WireError> {
        if self.trash_dirs.knows(dir) {
            return Ok(());
        }
        let mine = user_dir(date, uid);
        let mut path = String::new();
        for part in dir.trim_start_matches('/').split('/') {
            path.push('/');
            path.push_str(part);
            if self.trash_dirs.knows(&path) {
                continue;
            }
            let users = path.len() >= mine.len();
            let mode = if users {
                TRASH_USER_MODE
            } else {
                TRASH_DIR_MODE
            };
            let mkdir = ClientRequest::Mkdir {
                path: path.clone(),
                mode,
                shards: 0,
            };
            let owner = match self.call_entry(&path, mkdir.into()).await {
                Ok(_) => 0,
                // Made before (by this partition before it forgot, or by another): it
                // must be a directory whose mkdir is decided (a stat of one undecided
                // waits, then answers `Busy`), and the user's if it is theirs.
                Err(WireError::AlreadyExists) => {
                    let stat = ClientRequest::Stat { path: path.clone() };
                    match self.call_entry(&path, stat.into()).await? {
                        Response::Attr(i) if i.kind == FileKind::Directory => i.uid,
                        _ => return Err(WireError::NotADirectory),
                    }
                }
                Err(e) => {
                    tracing::info!(partition = %self.me, "the trash's directory {path} not made: {e}");
                    return Err(e);
                }
            };
            if users && owner != uid {
                let chown = ClientRequest::SetAttr {
                    path: path.clone(),
                    set: SetAttr {
                        uid: Some(uid),
                        ..SetAttr::default()
                    },
                };
                self.call_entry(&path, chown.into()).await?;
            }
            self.trash_dirs.add(&path);
        }
        Ok(())
    }
}
