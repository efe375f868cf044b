//! Directory quotas' allowances between partitions (docs/quotas.md "The ledger's
//! protocol"): a partition whose change would pass its allowance asks the quota's home
//! for more (`get_allowance`) and applies the change again; the home grants from its
//! ledger under the quota's grant lock, settling other partitions (giving back what they
//! do not use) when not enough is free, and answers `QuotaExceeded` only after that.

use std::collections::BTreeMap;
use std::sync::Arc;

use myriad_placement::{PartitionId, Quota};
use myriad_proto::{Response, WireError, ask};
use myriad_storage::Allowance;

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::state::mutation::{Mutation, storage_err};
use crate::state::outcome_kinds::Held;

/// The first slice granted beyond what is asked (names, bytes); each later ask of the
/// same partition doubles it, up to `SLICE_DOUBLINGS_MAX` times.
const SLICE_FIRST: (u64, u64) = (64, 16 << 20);
const SLICE_DOUBLINGS_MAX: u32 = 10;
/// How many times a change is applied again after its partition got more allowance.
pub(crate) const SHORT_RETRIES_MAX: usize = 4;
/// How many times a change is applied again with an allowance another change's ask got.
pub(crate) const SHORT_WAITS_MAX: usize = 32;

/// The partition that grants quota `q`'s allowances: that of its root's directory object.
fn home_of(st: &MapState, q: &Quota) -> PartitionId {
    st.ring.owner_of_dir(&q.path)
}

fn quota_of(st: &MapState, id: u64) -> Result<Quota, WireError> {
    st.map
        .ext
        .quotas
        .iter()
        .find(|q| q.id == id)
        .cloned()
        .ok_or(WireError::Busy)
}

impl Partition {
    /// A change here needs an allowance of `need` (names, bytes) of quota `quota`: asks
    /// its home and adopts the answer (`Ok(true)`). `QuotaExceeded` if the limit leaves no
    /// room. One ask of a quota at a time from here: a change short while another's ask
    /// was out tries again with what that one got (`Ok(false)`, nothing asked), so a
    /// burst of changes short at once sends one ask, not one each (`bench create
    /// --quota`: 232 asks for 20,000 creates before).
    pub(crate) async fn get_allowance(
        self: &Arc<Self>,
        quota: u64,
        need: (u64, u64),
    ) -> Result<bool, WireError> {
        let seen = self
            .store
            .quota_allowance(quota)
            .map_err(storage_err)?
            .version;
        let lock = self.quota_homes.ask_lock(quota);
        let _one = lock.lock().await;
        let held = self.store.quota_allowance(quota).map_err(storage_err)?;
        if held.version > seen {
            return Ok(false);
        }
        let st = self.state();
        let home = home_of(&st, &quota_of(&st, quota)?);
        let granted = self
            .ask_node(home, ask::quota_ask(quota, need, held.version))
            .await?;
        self.applier
            .run(Mutation::QuotaAllow {
                quota,
                granted: Allowance::of(granted.0),
            })
            .await?;
        Ok(true)
    }

    /// `PeerRequest::QuotaAsk` and `QuotaSettle`, from partition `from`.
    pub(super) async fn peer_quota(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        from: Option<PartitionId>,
        req: myriad_proto::PeerRequest,
    ) -> Result<Response, WireError> {
        match req {
            myriad_proto::PeerRequest::QuotaAsk {
                quota,
                files,
                bytes,
                held,
            } => {
                let from = from.ok_or(WireError::PermissionDenied)?;
                self.peer_quota_ask(st, from, quota, (files, bytes), held)
                    .await
            }
            myriad_proto::PeerRequest::QuotaSettle { quota, ledger } => {
                self.peer_quota_settle(quota, ledger).await
            }
            myriad_proto::PeerRequest::QuotaReport { quota } => {
                let u = self.store.quota_usage(quota).map_err(storage_err)?;
                Ok(Response::QuotaLedger((u.files, u.bytes, 0)))
            }
            _ => Err(WireError::InvalidArgument("not a quota request".into())),
        }
    }

    /// `PeerRequest::QuotaSettle`: give back what this partition does not use of `quota`.
    async fn peer_quota_settle(
        &self,
        quota: u64,
        ledger: (u64, u64, u64),
    ) -> Result<Response, WireError> {
        let Held(held) = self
            .applier
            .run_for(Mutation::QuotaSettle {
                quota,
                ledger: Allowance::of(ledger),
            })
            .await?;
        Ok(Response::QuotaLedger(held.triple()))
    }

    /// `PeerRequest::QuotaAsk` at the quota's home: partition `from` needs an allowance of
    /// `need` and holds one of version `held`.
    async fn peer_quota_ask(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        from: PartitionId,
        quota: u64,
        need: (u64, u64),
        held: u64,
    ) -> Result<Response, WireError> {
        let q = quota_of(st, quota)?;
        if home_of(st, &q) != self.me {
            // The map moved the quota's root: the asker retries with its next map.
            return Err(WireError::Busy);
        }
        let lock = self.quota_homes.grant_lock(quota);
        let _one = lock.lock().await;
        let mut ledger: BTreeMap<u32, Allowance> = self
            .store
            .quota_ledger(quota)
            .map_err(storage_err)?
            .into_iter()
            .collect();
        let mut changed: BTreeMap<u32, Allowance> = BTreeMap::new();
        // A partition never heard from may hold part of the tree (it had it when the
        // quota was set): its usage goes in the ledger first.
        let unheard = st
            .map
            .partitions
            .iter()
            .filter(|p| !ledger.contains_key(&p.id.0));
        let settles = unheard.map(|p| async move {
            Ok::<_, WireError>((p.id, self.settle(p.id, quota, Allowance::default()).await?))
        });
        for (pid, a) in futures::future::try_join_all(settles).await? {
            ledger.insert(pid.0, a);
            changed.insert(pid.0, a);
        }
        let asks = self.quota_homes.asked(quota, from.0);
        // What each other partition holds now may be more than its entry (entries moved
        // in by a split or a tree move): reserved too, read before each grant.
        let mut reserved = self.reserved(st, quota, from, &ledger).await?;
        self.settle_past_free(&q, from, [&mut ledger, &mut changed, &mut reserved])
            .await?;
        let mut granted = grant(&q, &reserved, from.0, need, held, asks);
        if granted.is_none() {
            // Not enough free: every other partition gives back what it does not use.
            for (&pid, a) in ledger.clone().iter().filter(|(p, _)| **p != from.0) {
                let settled = self.settle(PartitionId(pid), quota, *a).await?;
                ledger.insert(pid, settled);
                changed.insert(pid, settled);
            }
            let mut reserved = self.reserved(st, quota, from, &ledger).await?;
            self.settle_past_free(&q, from, [&mut ledger, &mut changed, &mut reserved])
                .await?;
            granted = grant(&q, &reserved, from.0, need, held, asks);
        }
        if let Some(g) = granted {
            changed.insert(from.0, g);
        }
        if !changed.is_empty() {
            self.applier
                .run(Mutation::QuotaLedger {
                    quota,
                    entries: changed.into_iter().collect(),
                })
                .await?;
        }
        match granted {
            Some(g) => Ok(Response::QuotaLedger(g.triple())),
            None => Err(WireError::QuotaExceeded),
        }
    }

    /// When the asker `from`'s entry is more than the others' reserved entries leave it
    /// (it gave part of it up with entries it moved out, which the others report holding
    /// now), it gives back what it does not use first, so that its entry is what it
    /// holds: written into each of `maps` (the ledger, the entries changed, the reserved).
    async fn settle_past_free(
        self: &Arc<Self>,
        q: &Quota,
        from: PartitionId,
        maps: [&mut BTreeMap<u32, Allowance>; 3],
    ) -> Result<(), WireError> {
        let [ledger, changed, reserved] = maps;
        if !entry_past_free(q, reserved, from.0) {
            return Ok(());
        }
        let had = ledger.get(&from.0).copied().unwrap_or_default();
        let settled = self.settle(from, q.id, had).await?;
        for l in [ledger, changed, reserved] {
            l.insert(from.0, settled);
        }
        Ok(())
    }

    /// The ledger with each other partition's entry raised to what it reports holding.
    async fn reserved(
        self: &Arc<Self>,
        st: &MapState,
        quota: u64,
        from: PartitionId,
        ledger: &BTreeMap<u32, Allowance>,
    ) -> Result<BTreeMap<u32, Allowance>, WireError> {
        let mut out = ledger.clone();
        // All asked at once: a grant waits for one round trip, not one per partition.
        let asks = st
            .map
            .partitions
            .iter()
            .filter(|p| p.id != from)
            .map(|p| async move {
                let held = self.ask_node(p.id, ask::quota_report(quota)).await?;
                Ok::<_, WireError>((p.id, held.0))
            });
        for (pid, (files, bytes, _)) in futures::future::try_join_all(asks).await? {
            let e = out.entry(pid.0).or_default();
            e.files = e.files.max(files);
            e.bytes = e.bytes.max(bytes);
        }
        Ok(out)
    }

    /// Settles partition `pid` (this one too) for `quota`, sending it its ledger entry.
    async fn settle(
        self: &Arc<Self>,
        pid: PartitionId,
        quota: u64,
        ledger: Allowance,
    ) -> Result<Allowance, WireError> {
        let held = self
            .ask_node(pid, ask::quota_settle(quota, ledger.triple()))
            .await?;
        Ok(Allowance::of(held.0))
    }
}

/// The limited quotas whose trees hold `path`.
fn limited_over(st: &MapState, path: &str) -> Vec<u64> {
    st.map
        .quotas_enclosing(path)
        .iter()
        .filter(|q| q.max_files > 0 || q.max_bytes > 0)
        .map(|q| q.id)
        .collect()
}

/// Whether a rename may go between the quotas of `from` and `to`. A file's rename into a
/// tree is counted where its new name is prepared, and refused there past an allowance;
/// what an exchange brings to the source's name, and a directory's whole tree, arrive in
/// steps that are not checked yet (docs/quotas.md "Not built yet"), so those are refused
/// across the boundary of a limited quota with `CrossDevice` (EXDEV), as XFS refuses
/// renames across project quotas: `mv` then copies and removes, each step checked.
pub(crate) fn rename_allowed(
    st: &MapState,
    from: &str,
    to: &str,
    flags: myriad_proto::RenameFlags,
    moved: Option<&myriad_proto::Inode>,
) -> Result<(), WireError> {
    let is_dir = moved.is_some_and(|i| i.kind == myriad_proto::FileKind::Directory);
    if !(flags.exchange || is_dir) || st.map.ext.quotas.is_empty() {
        return Ok(());
    }
    if limited_over(st, from) == limited_over(st, to) {
        return Ok(());
    }
    Err(WireError::CrossDevice(
        "a directory's rename, or an exchange, across the boundary of a directory quota \
         (copy it, then remove it: `mv` does)"
            .into(),
    ))
}

/// What the limit leaves partition `from` beside the others' entries (names, bytes;
/// `u64::MAX`: no limit).
fn free_for(q: &Quota, ledger: &BTreeMap<u32, Allowance>, from: u32) -> (u64, u64) {
    let others = ledger
        .iter()
        .filter(|(p, _)| **p != from)
        .fold((0u64, 0u64), |(f, b), (_, a)| {
            (f.saturating_add(a.files), b.saturating_add(a.bytes))
        });
    let free = |limit: u64, other: u64| {
        if limit == 0 {
            u64::MAX
        } else {
            limit.saturating_sub(other)
        }
    };
    (free(q.max_files, others.0), free(q.max_bytes, others.1))
}

/// Whether partition `from`'s entry is more than the limit leaves it beside the others'
/// (what it gave up moving entries out, and the others report holding since).
fn entry_past_free(q: &Quota, ledger: &BTreeMap<u32, Allowance>, from: u32) -> bool {
    let had = ledger.get(&from).copied().unwrap_or_default();
    let (files, bytes) = free_for(q, ledger, from);
    had.files > files || had.bytes > bytes
}

/// Partition `from`'s new ledger entry if the limit leaves room for `need`: what it had,
/// raised to `need` and a slice (doubling with each ask, or a fair share of what is free
/// if that is more; cut to what is free), at a
/// version above both its entry's and the one it holds (`held`). `None`: no room.
fn grant(
    q: &Quota,
    ledger: &BTreeMap<u32, Allowance>,
    from: u32,
    need: (u64, u64),
    held: u64,
    asks: u32,
) -> Option<Allowance> {
    let had = ledger.get(&from).copied().unwrap_or_default();
    let free = free_for(q, ledger, from);
    let shift = asks.min(SLICE_DOUBLINGS_MAX);
    // A limit far above what is used: a slice of a fair share of what is free (a quarter
    // of it split among the partitions), so that a tree filling from many partitions
    // asks once each, not once per doubling (`bench create --quota`, 32 partitions).
    let sharers = 4 * u64::try_from(ledger.len().max(1)).unwrap_or(u64::MAX);
    // What it had is never lowered (it may use it), nor granted past what is free.
    let one = |limit: u64, free: u64, had: u64, need: u64, slice: u64| -> Option<u64> {
        if limit == 0 {
            return Some(had.max(need.saturating_add(slice << shift)));
        }
        let want = need.saturating_add((slice << shift).max(free / sharers));
        (need <= free && had <= free).then(|| had.max(want.min(free)))
    };
    Some(Allowance {
        files: one(q.max_files, free.0, had.files, need.0, SLICE_FIRST.0)?,
        bytes: one(q.max_bytes, free.1, had.bytes, need.1, SLICE_FIRST.1)?,
        version: had.version.max(held) + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(max_files: u64, max_bytes: u64) -> Quota {
        Quota {
            id: 1,
            path: "/q".into(),
            max_files,
            max_bytes,
        }
    }

    fn ledger(entries: &[(u32, u64, u64, u64)]) -> BTreeMap<u32, Allowance> {
        entries
            .iter()
            .map(|&(p, f, b, v)| (p, Allowance::of((f, b, v))))
            .collect()
    }

    #[test]
    fn a_grant_never_lets_the_ledger_pass_the_limit() {
        let l = ledger(&[(1, 10, 0, 3), (2, 80, 0, 1)]);
        // 100 names: 10 free for partition 1 beyond the others' 80.
        let g = grant(&quota(100, 0), &l, 1, (15, 0), 0, 0);
        assert_eq!(
            g,
            Some(Allowance::of((20, 16 << 20, 4))),
            "the slice cut to what is free"
        );
        assert_eq!(grant(&quota(100, 0), &l, 1, (21, 0), 0, 0), None, "no room");
        // Exactly at the limit.
        assert_eq!(
            grant(&quota(100, 0), &l, 1, (20, 0), 0, 0).map(|a| a.files),
            Some(20)
        );
    }

    #[test]
    fn a_grant_outranks_what_the_asker_holds_and_never_lowers_its_entry() {
        let l = ledger(&[(1, 50, 0, 3)]);
        let g = grant(&quota(1000, 0), &l, 1, (5, 0), 9, 0);
        // 5 needed and a fair share: a quarter of the 1,000 free (one partition).
        assert_eq!(g.map(|a| (a.files, a.version)), Some((255, 10)));
        let g = grant(&quota(60, 0), &l, 1, (5, 0), 0, 0);
        assert_eq!(g.map(|a| a.files), Some(60));
        let g = grant(&quota(0, 0), &l, 1, (5, 0), 0, 3);
        assert_eq!(
            g.map(|a| a.files),
            Some(5 + (64 << 3)),
            "no limit: the doubled slice"
        );
    }

    #[test]
    fn an_entry_the_others_have_grown_into_is_not_granted_again() {
        // Partition 1 held 2 of 10 names, moved them out (giving them up where it is),
        // and the others now report 9: its stale entry of 2 would take the tree to 11
        // (simulation seed 8005, --quotas --dir-moves --moves).
        let l = ledger(&[(1, 2, 0, 5), (2, 4, 0, 1), (3, 5, 0, 1)]);
        assert!(entry_past_free(&quota(10, 0), &l, 1));
        assert_eq!(grant(&quota(10, 0), &l, 1, (1, 0), 0, 0), None);
        // Once it gave back what it does not use, it gets what is free.
        let l = ledger(&[(1, 0, 0, 6), (2, 4, 0, 1), (3, 5, 0, 1)]);
        assert!(!entry_past_free(&quota(10, 0), &l, 1));
        assert_eq!(
            grant(&quota(10, 0), &l, 1, (1, 0), 0, 0).map(|a| a.files),
            Some(1)
        );
        assert!(
            !entry_past_free(&quota(0, 0), &l, 1),
            "no limit, nothing past it"
        );
    }

    #[test]
    fn bytes_and_names_are_each_held_to_their_own_limit() {
        let l = ledger(&[(2, 0, 900, 1)]);
        assert_eq!(grant(&quota(0, 1000), &l, 1, (1000, 101), 0, 0), None);
        let g = grant(&quota(0, 1000), &l, 1, (1000, 100), 0, 0);
        assert_eq!(g.map(|a| a.bytes), Some(100));
    }

    #[test]
    fn a_limit_far_above_the_usage_is_shared_in_one_grant_per_partition() {
        let l = ledger(&[(1, 0, 0, 1), (2, 0, 0, 1), (3, 0, 0, 1), (4, 0, 0, 1)]);
        let g = grant(&quota(1_600, 0), &l, 1, (1, 0), 0, 0);
        assert_eq!(g.map(|a| a.files), Some(101), "1 needed + 1,600 / (4 x 4)");
        // A tight limit keeps the doubling slice: the share would be smaller.
        let g = grant(&quota(400, 0), &l, 1, (1, 0), 0, 0);
        assert_eq!(g.map(|a| a.files), Some(65));
    }
}
