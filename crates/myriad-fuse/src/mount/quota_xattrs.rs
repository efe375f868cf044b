//! Directory quotas as extended attributes of their roots through the mount (docs/quotas.md
//! "What clients see"), as CephFS has `ceph.quota.max_bytes`: `getfattr -n
//! myriad.quota.max_bytes DIR` reads the limit set on DIR (none: ENODATA), `setfattr -n
//! myriad.quota.max_files -v 10000 DIR` sets one, `setfattr -x` (or 0) removes it. Setting
//! is a change of the cluster map: root on a mount that holds the cluster secret only.
//! `myriad.quota.used_bytes` and `used_files` read the quota's usage (read only).

use myriad_client::{Caller, ClusterMap, FsError};
use myriad_placement::map_wire::QUOTAS_SINCE;
use myriad_proto::InodeId;

use crate::mount::Mount;

/// The attributes' common prefix.
const PREFIX: &str = "myriad.quota.";
/// How many times a change that lost a race with another map change is made again.
const TRIES: usize = 10;

#[derive(Clone, Copy)]
enum Limit {
    Bytes,
    Files,
}

fn limit_of(name: &str) -> Option<Limit> {
    match name.strip_prefix(PREFIX)? {
        "max_bytes" => Some(Limit::Bytes),
        "max_files" => Some(Limit::Files),
        _ => None,
    }
}

/// The usage attributes' kind (read only).
fn used_of(name: &str) -> Option<Limit> {
    match name.strip_prefix(PREFIX)? {
        "used_bytes" => Some(Limit::Bytes),
        "used_files" => Some(Limit::Files),
        _ => None,
    }
}

/// Whether `name` is one of the quota attributes (answered here, never stored).
#[must_use]
pub fn is_quota_xattr(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The limits (bytes, names) `map` gives the quota on `path` (none: 0, 0).
fn limits(map: &ClusterMap, path: &str) -> (u64, u64) {
    map.quota_at(path)
        .map_or((0, 0), |q| (q.max_bytes, q.max_files))
}

impl Mount {
    /// `getxattr` of a quota attribute: the limit as a decimal number.
    pub async fn get_quota_xattr(&self, ino: InodeId, name: &str) -> Result<Vec<u8>, FsError> {
        if let Some(used) = used_of(name) {
            return self.quota_used(ino, used).await;
        }
        let limit = limit_of(name).ok_or(FsError::NoData)?;
        let path = self.path(ino)?;
        let (bytes, files) = limits(&self.client.newest_map().await, &path);
        let v = match limit {
            Limit::Bytes => bytes,
            Limit::Files => files,
        };
        if v == 0 {
            return Err(FsError::NoData);
        }
        Ok(v.to_string().into_bytes())
    }

    /// `getxattr` of a usage attribute of the quota set on `ino` (none: ENODATA; usage
    /// still being counted after the quota was set: EAGAIN).
    async fn quota_used(&self, ino: InodeId, used: Limit) -> Result<Vec<u8>, FsError> {
        let path = self.path(ino)?;
        let map = self.client.newest_map().await;
        let id = map.quota_at(&path).ok_or(FsError::NoData)?.id;
        let (files, bytes) = self
            .client
            .quota_usage(id)
            .await?
            .map_err(|_| FsError::Busy)?;
        let v = match used {
            Limit::Bytes => bytes,
            Limit::Files => files,
        };
        Ok(v.to_string().into_bytes())
    }

    /// `setxattr` (`value` some) or `removexattr` of a quota attribute.
    pub async fn set_quota_xattr(
        &self,
        caller: &Caller,
        ino: InodeId,
        name: &str,
        value: Option<&[u8]>,
    ) -> Result<(), FsError> {
        let limit = limit_of(name).ok_or_else(|| {
            FsError::NotSupported(format!(
                "{name}: not a quota limit (max_bytes, max_files; used_* are read only)"
            ))
        })?;
        if caller.uid != 0 {
            return Err(FsError::NotPermitted);
        }
        let n = match value {
            None => 0,
            Some(v) => std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    FsError::InvalidArgument("a quota's limit is a whole number".into())
                })?,
        };
        let path = self.path(ino)?;
        for _ in 0..TRIES {
            let map = self.client.newest_map().await;
            if map.ext.protocol_floor < QUOTAS_SINCE {
                return Err(FsError::NotSupported(format!(
                    "quotas need every server on protocol {QUOTAS_SINCE} or later"
                )));
            }
            let (bytes, files) = limits(&map, &path);
            let want = match limit {
                Limit::Bytes => (n, files),
                Limit::Files => (bytes, n),
            };
            if want == (bytes, files) {
                return Ok(());
            }
            let next = if want == (0, 0) {
                map.without_quota(&path)
            } else {
                map.with_quota(&path, want.0, want.1)
            }
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
            match self.client.install_map(next).await {
                Ok(_) => {}
                // Servers refuse a map from a mount without the cluster secret.
                Err(FsError::PermissionDenied) => return Err(FsError::NotPermitted),
                Err(e) => return Err(e),
            }
            if limits(&self.client.newest_map().await, &path) == want {
                return Ok(());
            }
        }
        Err(FsError::Busy)
    }
}
