//! A node: the request handler. Reads are answered directly from the store; mutations go
//! through the applier; operations that span two nodes live in `twophase.rs`.
//!
//! Every request is first checked against placement: a node only serves keys it owns under its
//! map. A request for a key it does not own gets `Redirect(map)`; a request carrying a newer
//! epoch than the node's gets `MapTooOld` so the sender pushes its map.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use myriad_placement::{PartitionId, split_parent};
use myriad_proto::reply::{Ask, Reply};
use myriad_proto::{Caller, Inode, Request, Response, WireError, limits, validate_path};
use myriad_storage::{EntryRecord, Store};
use tokio::sync::watch;

use crate::cluster::MapState;
use crate::commit::Applier;
use crate::commit::Context;
use crate::partition::env::Env;
use crate::partition::made::Made;
use crate::state::mutation::{InodeChange, Mutation, Outcome, storage_err};
use crate::state::perm;

/// One partition's request handler (docs/replication.md: the rest of the server calls a
/// partition a node). Runs on the partition's primary.
pub struct Partition {
    /// The partition id.
    pub(crate) me: PartitionId,
    /// The server running it: map, peers, counters, configuration, sibling partitions.
    pub(crate) env: Arc<dyn Env>,
    pub(crate) store: Store,
    /// The store without the applier's stage (`commit/rounds.rs`): what batches up to its
    /// last number hold, for comparing copies at a batch (anti-entropy, fsck digests).
    pub(crate) committed: Store,
    pub(crate) applier: Applier,
    /// The primary's side of replication: its copies follow the map (`set_backups`).
    pub(crate) replicator: Arc<crate::replication::primary::Replicator>,
    pub(crate) changed: watch::Sender<u64>,
    /// Txids of multi-node operations being driven right now; recovery leaves them alone.
    pub(crate) live: Mutex<BTreeSet<u64>>,
    /// Ancestor metadata replicas, popularity, and the subscriptions this node serves.
    pub(crate) replicas: crate::partition::ancestor_replicas::Replicas,
    /// Directories read far more than changed (`read_mostly.rs`).
    pub(crate) read_mostly: crate::partition::read_mostly::ReadMostly,
    /// The trash's directories this partition made or found made (`trash.rs`).
    pub(crate) trash_dirs: crate::partition::trash_dirs::TrashDirs,
    /// Directories whose mkdir was said committed, marks not yet cleared (`undecided_dirs.rs`).
    pub(crate) confirmed_dirs: crate::partition::confirmed_dirs::ConfirmedDirs,
    /// Shard maps of split directories whose entries this node addresses (rename
    /// destinations, link names, ancestors).
    pub(crate) shard_maps: myriad_placement::ShardCache,
    /// Counts of names added per directory, and the splits running.
    pub(crate) splits: crate::partition::split_state::SplitState,
    /// Directory touches in flight, coalesced per directory (`dirtimes.rs`).
    pub(crate) dir_touches: crate::partition::pending_touches::DirTouches,
    /// The server's directory touches to other partitions, sent together (one for all
    /// partitions of the server).
    pub(crate) touch_sender: Arc<crate::partition::touch_sender::TouchSender>,
    /// Clients' changes running here (`exactly_once.rs`): a retry waits for its first try.
    pub(crate) changes: crate::partition::changes::ChangesInFlight,
    /// Background tasks (recovery, replica bookkeeping), ended by `stop`.
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The last map epoch through which this server has been the partition's primary
    /// without a break, as far as it knows: the epoch it was opened (and caught up) under,
    /// carried forward by the process through each directly following map that keeps it
    /// primary. The partition serves only while this is the server's current epoch
    /// (docs/replication.md, "Primary terms").
    pub(crate) primary_through: AtomicU64,
    /// Set by `depose`: nothing more is done for this partition here.
    pub(crate) deposed: AtomicBool,
    /// This opening of the partition as primary, as changes answered once applied name
    /// it (`Response::Applied`): a barrier for them (`SyncPartition`) vouches for them
    /// only if no other primary opened since.
    pub(crate) incarnation: u64,
    /// The file locks this primary keeps (`lock_table.rs`), for this term only.
    pub(crate) file_locks: crate::partition::lock_table::LockTable,
    /// Whether this term's marker that it grants file locks is written (`file_locks.rs`).
    pub(crate) lock_marked: tokio::sync::Mutex<bool>,
    /// Files clients keep open, for the orphans of unlinked ones (`orphans.rs`).
    pub(crate) open_files: crate::partition::open_files::OpenFiles,
    /// Chunks to code and servers lost (`coding.rs`).
    pub(crate) coding: crate::partition::coding_state::CodingState,
    /// What clients changed since this opening, that a resent change must not overwrite
    /// (`resend_guard.rs`).
    pub(crate) resend_guard: crate::partition::resend_guard::ResendGuard,
    /// As the home of quotas: their grant locks and how often each partition asked
    /// (`quota_grants.rs`).
    pub(crate) quota_homes: crate::partition::quota_homes::QuotaHomes,
    /// As the home of linked files: the removals of their names under way
    /// (`removal_claims.rs`).
    pub(crate) removal_claims: crate::partition::removal_claims::RemovalClaims,
}

/// A number for one opening of partition `pid` as primary on server `server`: never the
/// same for two openings (the time differs; the epoch too after a failover).
pub(crate) fn incarnation(
    server: myriad_placement::NodeId,
    pid: myriad_placement::PartitionId,
    epoch: u64,
    now_ns: i64,
) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&server.0.to_le_bytes());
    h.update(&pid.0.to_le_bytes());
    h.update(&epoch.to_le_bytes());
    h.update(&now_ns.to_le_bytes());
    h.digest()
}

/// `mkdir --shards N`: the split depth for N shards (N rounded up to a power of two).
pub(super) fn shard_depth(shards: u32) -> Result<u8, WireError> {
    if shards > 1 << myriad_placement::SHARD_DEPTH_MAX {
        return Err(WireError::InvalidArgument(format!(
            "at most {} shards per directory",
            1u32 << myriad_placement::SHARD_DEPTH_MAX
        )));
    }
    let depth = shards.max(1).next_power_of_two().trailing_zeros();
    Ok(u8::try_from(depth).unwrap_or(myriad_placement::SHARD_DEPTH_MAX))
}

impl Partition {
    /// The partition's directory leases.
    pub(crate) fn leases(&self) -> Option<Arc<crate::commit::leases::LeaseTable>> {
        self.applier.leases().cloned()
    }

    pub(crate) fn state(&self) -> Arc<MapState> {
        self.env.map()
    }

    /// The last epoch of this partition's unbroken run as primary (see `primary_through`).
    pub(crate) fn primary_through(&self) -> u64 {
        self.primary_through.load(Ordering::Acquire)
    }

    /// Carries the run forward to `epoch` (a map directly following the last one that
    /// keeps this server primary).
    pub(crate) fn extend_primary_through(&self, epoch: u64) {
        let was = self.primary_through.swap(epoch, Ordering::AcqRel);
        debug_assert_eq!(was + 1, epoch, "a run as primary extended across a gap");
    }

    /// This server's run as primary is broken (a map deposed it, or maps it did not see
    /// may have): at once, nothing more is committed, shipped or started here; the process
    /// then retires it and, if it is the primary again, opens it anew (catching up).
    pub(crate) fn depose(&self) {
        self.deposed.store(true, Ordering::Release);
        self.stop();
        self.applier.refuse();
        self.replicator.close();
    }

    pub(super) fn own(&self, st: &MapState, owner: PartitionId) -> Result<(), WireError> {
        if owner == self.me {
            Ok(())
        } else {
            Err(WireError::Redirect(Box::new(st.map.clone())))
        }
    }

    /// The destination's side of a rename's end: the staged entry made visible
    /// (`commit`) or dropped; answered once durable, or with `!durable` once applied.
    /// Part of `client`'s change: its leases are not recalled for it.
    pub(super) async fn rename_target_resolve(
        self: &Arc<Self>,
        txid: u64,
        (commit, durable): (bool, bool),
        client: Option<u64>,
    ) -> Result<Response, WireError> {
        use crate::state::intent::Intent;
        let (staged, kept) = match self
            .store
            .intent(crate::state::mutation::prepare_key(txid))
            .map_err(storage_err)?
            .and_then(|b| Intent::decode(&b))
        {
            Some(Intent::RenameIn { dir, .. } | Intent::ExchangeIn { dir, .. }) => {
                (Some(dir), None)
            }
            Some(Intent::RenameInKeeping { dir, kept, .. }) => {
                (Some(dir), Some(split_parent(&kept).0.to_string()))
            }
            _ => (None, None),
        };
        let target_dir = staged.clone().filter(|_| commit);
        let m = Mutation::RenameTargetResolve {
            txid,
            commit,
            now: self.env.now_ns(),
            staged,
            kept,
        };
        // The destination directory's times are sent while the commit is made durable.
        let exempt = Context::for_client(client);
        let outcome = match target_dir {
            Some(dir) => {
                let made = Made {
                    for_client: client,
                    ..Made::now()
                };
                self.run_touching((m, &made), &dir, durable, |_| true)
                    .await?
                    .0
            }
            None if durable => self.applier.run_in(&exempt, m).await?,
            None => self.applier.run_visible_in(&exempt, m).await?,
        };
        if let Outcome::Renamed(gc, dropped) = outcome {
            if let Some(gc) = gc {
                self.spawn_gc(gc);
            }
            if let Some(old) = dropped {
                self.drop_link(&old).await;
            }
        }
        Ok(Response::Unit)
    }

    /// Validates an entry path (not "/") that this node must own; returns (dir, name).
    pub(super) fn entry_target(
        &self,
        st: &MapState,
        path: &str,
    ) -> Result<(String, String), WireError> {
        validate_path(path)?;
        if path == "/" {
            return Err(WireError::AlreadyExists);
        }
        self.own_entry(st, path)?;
        Ok(split_owned(path))
    }

    pub(super) fn file_target(
        &self,
        st: &MapState,
        path: &str,
    ) -> Result<(String, String), WireError> {
        if path == "/" {
            return Err(WireError::IsADirectory);
        }
        self.entry_target(st, path)
    }

    /// Takes off `inode`'s set-id bits that a write or truncate by `caller` removes
    /// (`perm::setid_bits_killed`; the FUSE mount leaves this to the servers), before the
    /// change itself. `None`: root, who removes nothing.
    pub(crate) async fn kill_setid(
        &self,
        dir: &str,
        name: &str,
        inode: Option<&Inode>,
        (caller, now, ctx): (&Caller, i64, &Context),
    ) -> Result<(), WireError> {
        let Some(inode) = inode else {
            return Ok(());
        };
        let kill = perm::setid_bits_killed(inode, caller);
        if kill == 0 {
            return Ok(());
        }
        let set = myriad_proto::SetAttr {
            mode: Some(inode.mode & 0o7777 & !kill),
            ..myriad_proto::SetAttr::default()
        };
        self.applier
            .run_in(
                ctx,
                Mutation::SetAttr {
                    dir: dir.to_string(),
                    name: name.to_string(),
                    change: InodeChange::Attr(set),
                    now,
                },
            )
            .await?;
        Ok(())
    }

    /// Applies a change of a file's contents or size (copy_range.rs).
    pub(crate) async fn mutate_file(
        &self,
        ctx: &Context,
        m: Mutation,
    ) -> Result<Response, WireError> {
        Ok(Response::Attr(
            self.applier.run_for_in::<Inode>(ctx, m).await?,
        ))
    }

    /// Applies a change of an inode for the change `made`.
    pub(super) async fn mutate_inode(
        &self,
        made: &Made,
        m: Mutation,
    ) -> Result<Response, WireError> {
        self.mutate_file(&made.context(), m).await
    }

    /// The visible inode at `path`, waiting while a multi-node operation holds the entry.
    pub(crate) async fn lookup(&self, path: &str) -> Result<Inode, WireError> {
        if path == "/" {
            let rec = self
                .store
                .dir("/")
                .map_err(storage_err)?
                .ok_or(WireError::NotFound)?;
            return rec.root_attrs.ok_or(WireError::NotFound);
        }
        let (dir, name) = split_parent(path);
        self.lookup_in(dir, name).await
    }

    /// The stored entry `dir/name`; one that fails its checksum is first made intact on
    /// every copy from one that is (repair.rs), as blocks are when read.
    async fn entry_repairing(
        &self,
        dir: &str,
        name: &str,
    ) -> Result<Option<EntryRecord>, WireError> {
        match self.store.entry(dir, name) {
            Err(myriad_storage::StorageError::Corrupt { .. }) => {
                let key = myriad_storage::entry_key(dir, name);
                self.repair_record(myriad_storage::Space::Entries, key)
                    .await?;
                self.store.entry(dir, name).map_err(storage_err)
            }
            r => r.map_err(storage_err),
        }
    }

    pub(crate) async fn lookup_in(&self, dir: &str, name: &str) -> Result<Inode, WireError> {
        // Fast path: most entries are not pending and need no subscription.
        match self.entry_repairing(dir, name).await? {
            Some(EntryRecord {
                pending: None,
                inode: Some(i),
            }) => return Ok(i),
            Some(EntryRecord {
                pending: Some(_), ..
            }) => {}
            _ => {
                self.recheck_shard(dir, name)?;
                return Err(WireError::NotFound);
            }
        }
        let deadline = tokio::time::Instant::now() + self.env.config().pending_wait;
        loop {
            // Subscribe before reading again, so a resolution between the read and the wait
            // is not missed.
            let mut changed = self.changed.subscribe();
            match self.store.entry(dir, name).map_err(storage_err)? {
                Some(EntryRecord {
                    pending: None,
                    inode: Some(i),
                }) => return Ok(i),
                Some(EntryRecord {
                    pending: Some(p), ..
                }) => {
                    if tokio::time::timeout_at(deadline, changed.changed())
                        .await
                        .is_err()
                    {
                        tracing::debug!(
                            partition = %self.me,
                            dir,
                            name,
                            txid = p.txid,
                            "entry still pending after the wait: Busy"
                        );
                        return Err(WireError::Busy);
                    }
                }
                _ => {
                    self.recheck_shard(dir, name)?;
                    return Err(WireError::NotFound);
                }
            }
        }
    }

    /// A page of a frozen directory's entries with the chunk-0 blocks of its files, for a
    /// directory rename. Pages stop after ~2 MiB of data so a reply stays within a frame.
    pub(super) fn dir_export(
        &self,
        path: &str,
        txid: u64,
        after: Option<String>,
    ) -> Result<Response, WireError> {
        let rec = self
            .store
            .dir(path)
            .map_err(storage_err)?
            .ok_or(WireError::NotFound)?;
        if rec.frozen != Some(txid) {
            return Err(WireError::Busy);
        }
        let (entries, next) = self.export_page(path, myriad_proto::Shard::ALL, after.as_deref())?;
        Ok(Response::Exported { entries, next })
    }

    /// Sends `body` to partition `node` (or runs it here if this server serves it).
    /// Refused once this partition is deposed: a task it started (a split, a rename, its
    /// undo) must not act on other partitions for it after its run as primary ended (the
    /// partition opened anew, or the new primary, drives the operation from its intent).
    pub(crate) async fn call_node(
        self: &Arc<Self>,
        node: PartitionId,
        body: Request,
    ) -> Result<Response, WireError> {
        self.not_deposed()?;
        let still_serving = || !self.deposed.load(Ordering::Acquire);
        self.env
            .call_partition(self.me, node, body, &still_serving)
            .await
    }

    /// `call_node` of an ask (`myriad_proto::ask`): the reply it asked for.
    pub(crate) async fn ask_node<R: Reply, Q: Into<Request>>(
        self: &Arc<Self>,
        node: PartitionId,
        ask: Ask<R, Q>,
    ) -> Result<R, WireError> {
        let r = self.call_node(node, ask.request.into()).await?;
        ask.answer.of(r)
    }

    /// `Unavailable` once `depose` ran.
    pub(crate) fn not_deposed(&self) -> Result<(), WireError> {
        if self.deposed.load(Ordering::Acquire) {
            return Err(WireError::Unavailable(
                "the partition is no longer served by this server".into(),
            ));
        }
        Ok(())
    }
}

/// The reply of a change of entries that made `out`'s inode, with the parent's attributes.
pub(super) fn changed_response(
    (out, parent): (Outcome, Option<Inode>),
) -> Result<Response, WireError> {
    match inode_response(out)? {
        Response::Attr(i) => Ok(Response::Changed {
            inode: Some(i),
            parent,
        }),
        other => Ok(other),
    }
}

/// The reply of a mutation that yields an inode.
pub(super) fn inode_response(out: Outcome) -> Result<Response, WireError> {
    let made = crate::state::outcome_kinds::expect::<crate::state::outcome_kinds::NameMade>(out)?;
    Ok(Response::Attr(made.inode()))
}

/// Where the attributes of `path` are kept for `Mutation::SetAttr`: its entry, or for "/"
/// (which has no entry) the root's directory record, named ("/", "").
pub(super) fn attrs_key(path: &str) -> (String, String) {
    if path == "/" {
        ("/".to_string(), String::new())
    } else {
        split_owned(path)
    }
}

pub(crate) fn split_owned(path: &str) -> (String, String) {
    let (d, n) = split_parent(path);
    (d.to_string(), n.to_string())
}

/// (total, free) bytes of the file system holding `dir`.
/// Only the `user.` namespace is stored; others are not supported (as on a file system
/// mounted without ACL or security-label support).
pub(crate) fn check_xattr_name(name: &str) -> Result<(), WireError> {
    if name.len() > limits::XATTR_NAME_BYTES_MAX {
        return Err(WireError::NameTooLong);
    }
    match name.strip_prefix("user.") {
        Some(rest) if !rest.is_empty() && !name.contains('\0') => Ok(()),
        Some(_) => Err(WireError::InvalidArgument(
            "empty or NUL-containing attribute name".into(),
        )),
        None => Err(WireError::NotSupported(format!(
            "extended attribute namespace of {name:?} (only user.* is stored)"
        ))),
    }
}
