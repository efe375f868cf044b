//! Directory quotas' allowances and ledgers (docs/quotas.md "The ledger's protocol"), in the
//! partition's `Meta` space, replicated with it:
//!
//! * `quota-allow \0 id(8)` -> `Allowance`: what this partition may use of quota `id`,
//!   as the quota's home last granted or settled it, with that entry's version;
//! * `quota-ledger \0 id(8) pid(4)` -> `Allowance`: at the quota's home, what it granted
//!   partition `pid` (never less than what that partition holds).
//!
//! A partition adopts an allowance only if its version is newer than the one it holds, so
//! an answer delayed in the network never raises it above what the home's ledger says.

use serde::{Deserialize, Serialize};

use crate::StorageError;
use crate::kv::{Batch, Space};
use crate::store::quota_usage::{QuotaRoot, QuotaUsage};
use crate::store::{Store, decode, encode};

const ALLOW_PREFIX: &[u8] = b"quota-allow\0";
const LEDGER_PREFIX: &[u8] = b"quota-ledger\0";

/// Names and bytes of a quota one partition may use, and the version of that grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowance {
    pub files: u64,
    pub bytes: u64,
    pub version: u64,
}

impl Allowance {
    /// As the wire carries it: (files, bytes, version).
    #[must_use]
    pub fn triple(&self) -> (u64, u64, u64) {
        (self.files, self.bytes, self.version)
    }

    #[must_use]
    pub fn of((files, bytes, version): (u64, u64, u64)) -> Allowance {
        Allowance {
            files,
            bytes,
            version,
        }
    }
}

/// Which limit of `q` a usage passes beyond an allowance, if any: only limited kinds
/// count (a quota of names alone never refuses bytes).
#[must_use]
pub fn short_of(q: &QuotaRoot, usage: &QuotaUsage, allow: &Allowance) -> bool {
    (q.max_files > 0 && usage.files > allow.files) || (q.max_bytes > 0 && usage.bytes > allow.bytes)
}

fn allow_key(id: u64) -> Vec<u8> {
    let mut k = ALLOW_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn ledger_prefix(id: u64) -> Vec<u8> {
    let mut k = LEDGER_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

impl Store {
    /// This partition's allowance of quota `id` (none granted: zero, version 0).
    pub fn quota_allowance(&self, id: u64) -> Result<Allowance, StorageError> {
        match self.kv().get(Space::Meta, &allow_key(id))? {
            Some(v) => decode("meta", &v),
            None => Ok(Allowance::default()),
        }
    }

    pub fn put_quota_allowance(&self, batch: &mut Batch, id: u64, a: &Allowance) {
        batch.put(Space::Meta, allow_key(id), encode(a));
    }

    /// Whether `batch` changes an allowance (a grant adopted, or a settle).
    #[must_use]
    pub fn changes_allowances(batch: &Batch) -> bool {
        batch
            .ops
            .iter()
            .any(|(s, k, _)| *s == Space::Meta && k.starts_with(ALLOW_PREFIX))
    }

    /// At a quota's home: every partition's entry in quota `id`'s ledger.
    pub fn quota_ledger(&self, id: u64) -> Result<Vec<(u32, Allowance)>, StorageError> {
        let prefix = ledger_prefix(id);
        let mut out = Vec::new();
        self.each_pair(Space::Meta, &prefix, |k, v| {
            let pid = k
                .get(prefix.len()..)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes);
            if let Some(pid) = pid {
                out.push((pid, decode("meta", &v)?));
            }
            Ok(())
        })?;
        Ok(out)
    }

    pub fn put_quota_ledger(&self, batch: &mut Batch, id: u64, pid: u32, a: &Allowance) {
        let mut k = ledger_prefix(id);
        k.extend_from_slice(&pid.to_be_bytes());
        batch.put(Space::Meta, k, encode(a));
    }

    /// A batch that makes `granted` this partition's allowance of quota `id` if it is
    /// newer than the one held; returns the allowance held after it.
    pub fn adopt_allowance(
        &self,
        batch: &mut Batch,
        id: u64,
        granted: Allowance,
    ) -> Result<Allowance, StorageError> {
        let held = self.quota_allowance(id)?;
        if granted.version <= held.version {
            return Ok(held);
        }
        self.put_quota_allowance(batch, id, &granted);
        Ok(granted)
    }

    /// A batch that adopts `ledger` if newer, then gives back every unused name and byte
    /// of quota `id` (the allowance becomes the usage), at a version above both; returns
    /// the allowance held after it.
    pub fn settle_allowance(
        &self,
        batch: &mut Batch,
        id: u64,
        ledger: Allowance,
    ) -> Result<Allowance, StorageError> {
        let held = self.quota_allowance(id)?;
        let usage = self.quota_usage(id)?;
        let settled = Allowance {
            files: usage.files,
            bytes: usage.bytes,
            version: held.version.max(ledger.version) + 1,
        };
        self.put_quota_allowance(batch, id, &settled);
        Ok(settled)
    }
}

#[cfg(test)]
mod tests;
