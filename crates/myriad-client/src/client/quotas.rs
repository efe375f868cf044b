//! Directory quotas seen from a client (docs/quotas.md "What clients see"): a quota's
//! usage, summed over the partitions holding parts of its tree, and the capacity a path
//! under a quota has, which `df` shows as CephFS's client does (the limit as the size).

use myriad_placement::{PartitionId, Quota};
use myriad_proto::{FsError, StatFs, ask};

use super::Client;

/// A quota's usage: `Ok((files, bytes))`, or the partitions still counting their part
/// (the quota was just set on a tree that exists).
pub type QuotaCount = Result<(u64, u64), Vec<PartitionId>>;

/// What `statfs` of a path answers: the cluster's capacity, or a quota's where one
/// encloses the path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathStatFs {
    /// Bytes: the cluster's, or the innermost byte quota's (its limit as the total, its
    /// usage as used, free no more than the cluster has).
    pub space: StatFs,
    /// The innermost file quota's limit (`space.files` is then its usage); `None`: no
    /// file quota, `space.files` counts the cluster's files.
    pub max_files: Option<u64>,
}

/// `cluster` as seen under the innermost byte quota and the innermost file quota, given
/// each one's usage (`usage(id)`: `None` while it is being counted: that quota is not
/// shown, the next one out is).
pub(crate) fn under_quotas(
    cluster: StatFs,
    quotas: &[Quota],
    usage: impl Fn(u64) -> Option<(u64, u64)>,
) -> PathStatFs {
    let mut out = PathStatFs {
        space: cluster.clone(),
        max_files: None,
    };
    let innermost = |limited: fn(&Quota) -> u64| {
        quotas
            .iter()
            .rev()
            .filter(|q| limited(q) > 0)
            .find_map(|q| usage(q.id).map(|u| (limited(q), u)))
    };
    if let Some((limit, (_, bytes))) = innermost(|q| q.max_bytes) {
        out.space.total_bytes = limit;
        out.space.used_bytes = bytes;
        out.space.free_bytes = limit.saturating_sub(bytes).min(cluster.free_bytes);
    }
    if let Some((limit, (files, _))) = innermost(|q| q.max_files) {
        out.max_files = Some(limit);
        out.space.files = files;
    }
    out
}

impl Client {
    /// Quota `id`'s usage now: each partition's part of it, asked of all at once.
    pub async fn quota_usage(&self, id: u64) -> Result<QuotaCount, FsError> {
        let mut one = self.quota_usages(&[id]).await?;
        Ok(one.pop().unwrap_or_else(|| Err(Vec::new())))
    }

    /// The usage of each quota of `ids`, in that order: one ask of each partition (which
    /// answers for every quota it counts), all at once.
    pub async fn quota_usages(&self, ids: &[u64]) -> Result<Vec<QuotaCount>, FsError> {
        let parts = self.st().map.partitions.clone();
        let asks = parts
            .iter()
            .map(|p| async move { (p.id, self.ask_partition(p.id, ask::quota_usage()).await) });
        let mut totals = vec![Ok((0u64, 0u64)); ids.len()];
        for (pid, answer) in futures::future::join_all(asks).await {
            let answer = answer?;
            for (id, total) in ids.iter().zip(totals.iter_mut()) {
                match (answer.usage.iter().find(|(q, _, _)| q == id), total) {
                    (Some((_, files, bytes)), Ok(t)) => {
                        t.0 += files;
                        t.1 += bytes;
                    }
                    (Some(_), Err(_)) => {}
                    (None, t @ Ok(_)) => *t = Err(vec![pid]),
                    (None, Err(counting)) => counting.push(pid),
                }
            }
        }
        Ok(totals)
    }

    /// `statfs` of `path`: the cluster's capacity, or, under quotas, the innermost one's
    /// limits and usage (no quota: exactly `statfs`, and no more requests).
    pub async fn statfs_at(&self, path: &str) -> Result<PathStatFs, FsError> {
        let cluster = self.statfs().await?;
        let quotas: Vec<Quota> = {
            let st = self.st();
            st.map.quotas_covering(path).into_iter().cloned().collect()
        };
        if quotas.is_empty() {
            return Ok(under_quotas(cluster, &quotas, |_| None));
        }
        let ids: Vec<u64> = quotas.iter().map(|q| q.id).collect();
        let usage = self.quota_usages(&ids).await?;
        let find = |id| {
            let i = ids.iter().position(|q| *q == id)?;
            usage.get(i)?.as_ref().ok().copied()
        };
        Ok(under_quotas(cluster, &quotas, find))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(id: u64, path: &str, max_bytes: u64, max_files: u64) -> Quota {
        Quota {
            id,
            path: path.into(),
            max_bytes,
            max_files,
        }
    }

    fn cluster() -> StatFs {
        StatFs {
            total_bytes: 1 << 40,
            free_bytes: 1 << 39,
            used_bytes: 1 << 39,
            files: 5_000,
            tiers: Vec::new(),
        }
    }

    #[test]
    fn the_innermost_limit_of_each_kind_is_shown_with_its_usage() {
        let quotas = [
            quota(1, "/lab", 10_000, 100),
            quota(2, "/lab/a", 0, 10),
            quota(3, "/lab/a/b", 4_000, 0),
        ];
        let usage = |id| Some((id * 3, id * 1_000));
        let s = under_quotas(cluster(), &quotas, usage);
        assert_eq!(
            (s.space.total_bytes, s.space.used_bytes, s.space.free_bytes),
            (4_000, 3_000, 1_000)
        );
        assert_eq!((s.max_files, s.space.files), (Some(10), 6));
    }

    #[test]
    fn free_space_is_never_more_than_the_cluster_has_nor_below_zero() {
        let small = StatFs {
            free_bytes: 500,
            ..cluster()
        };
        let quotas = [quota(1, "/lab", 10_000, 0)];
        let s = under_quotas(small, &quotas, |_| Some((0, 2_000)));
        assert_eq!((s.space.total_bytes, s.space.free_bytes), (10_000, 500));
        let over = under_quotas(cluster(), &quotas, |_| Some((0, 12_000)));
        assert_eq!(over.space.free_bytes, 0);
    }

    #[test]
    fn no_quota_or_one_still_counting_leaves_the_cluster_s_figures() {
        assert_eq!(under_quotas(cluster(), &[], |_| None).space, cluster());
        let quotas = [quota(1, "/lab", 10_000, 50), quota(2, "/lab/a", 3_000, 0)];
        let s = under_quotas(cluster(), &quotas, |id| (id == 1).then_some((7, 9_000)));
        assert_eq!((s.space.total_bytes, s.space.used_bytes), (10_000, 9_000));
        assert_eq!((s.max_files, s.space.files), (Some(50), 7));
    }
}
