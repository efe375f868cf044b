//! Directory quotas' usage as each partition keeps it (docs/quotas.md "Usage: kept per
//! partition, in the same batch"), in the partition's `Meta` space, written in the batch
//! of the change itself (replicated and copied with the partition, as every record):
//!
//! * `quota-set` -> (map epoch, the quotas this partition counts): changed only by
//!   `sync_quotas`, from a newer map. Every primary of the partition counts what this
//!   record lists, whatever map it holds, so the usage stays exact across failovers;
//! * `quota-usage \0 id(8, big endian)` -> `QuotaUsage`: the names and bytes of the
//!   quota's tree held by this partition's entries.
//!
//! What counts (the same rule for a change and for a count from scratch): every entry of a
//! directory inside the tree is one name, visible or pending (an mkdir's or a rename's
//! name waiting for its decision: counted from the step that can still be undone); a
//! regular file's entry adds its size, the larger of what it is and what a pending change
//! makes it (a file renamed in from another partition counts from the rename's prepare). A hard link's names count as names; its
//! inode, at its home (`//i`), counts its bytes where its anchor says (`quota_anchors.rs`).
//!
//! The trash (`/.trash`, its own name in `/` too) is in no quota but those set in it,
//! once the partition counts by that rule (`quota-trash-apart`, written by the sync of a
//! map whose floor has it, which counts the quotas it changes afresh): every primary of a
//! partition counts by the one rule its store names, so none counts a quota on `/` one
//! way and the next the other.

use std::collections::BTreeMap;

use myriad_proto::FileKind;
use myriad_proto::trash::{TRASH_NAME, in_trash};
use serde::{Deserialize, Serialize};

use crate::StorageError;
use crate::keys::entry_key;
use crate::kv::{Batch, Space};
use crate::records::EntryRecord;
use crate::store::kept_stats::{INODE_DIR, entry_parts};
use crate::store::{Store, decode, encode};

const SET_KEY: &[u8] = b"quota-set";
const USAGE_PREFIX: &[u8] = b"quota-usage\0";
/// Present: the quotas counted here leave the trash out (`QuotaRoot::trash_apart`).
const TRASH_APART_KEY: &[u8] = b"quota-trash-apart";

/// A quota as a partition counts it: its id (never reused), its tree's root, and its
/// limits (0: none of that kind; what is limited is enforced, `quota_ledger.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaRoot {
    pub id: u64,
    pub path: String,
    pub max_files: u64,
    pub max_bytes: u64,
    /// The trash is out of this quota's tree unless the quota is set in it (maps whose
    /// floor is `QUOTAS_LEAVE_TRASH_SINCE`). Stored once for the set (`quota-trash-apart`), not
    /// with each root, so the set's record reads the same at every release.
    #[serde(skip)]
    pub trash_apart: bool,
}

impl QuotaRoot {
    /// Whether the trash's rule changes this quota's tree: only a quota on `/` encloses
    /// the trash without being set in it.
    fn encloses_trash(&self) -> bool {
        self.path == "/"
    }

    /// Whether the entry of `dir` whose key is `key` is in this quota's tree: its
    /// directory is, and it is not the trash's own name in `/` left out with the trash.
    fn holds_entry(&self, dir: &str, key: &[u8]) -> bool {
        self.holds_entries_of(dir)
            && !(dir == "/"
                && self.trash_apart
                && self.encloses_trash()
                && key == entry_key("/", TRASH_NAME))
    }

    /// Whether the entries of `dir` are in this quota's tree (`dir` and the root are
    /// normalized paths; reserved directories `//...` are in none).
    #[must_use]
    pub fn holds_entries_of(&self, dir: &str) -> bool {
        if dir.starts_with("//") || (self.trash_apart && in_trash(dir) && !in_trash(&self.path)) {
            return false;
        }
        self.path == "/"
            || dir
                .strip_prefix(self.path.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
}

/// One partition's part of a quota's usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaUsage {
    pub files: u64,
    pub bytes: u64,
}

impl QuotaUsage {
    fn change(&mut self, by: Counted, sign: bool) {
        let step = |v: u64, d: u64| if sign { v + d } else { v.saturating_sub(d) };
        self.files = step(self.files, by.names);
        self.bytes = step(self.bytes, by.bytes);
    }
}

/// What one entry adds to a quota: one name (none for an inode object, which is no
/// name), and its bytes if it is a regular file.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Counted {
    names: u64,
    bytes: u64,
}

/// What the entry stored as `bytes` adds, with `names` names.
fn counted_as(bytes: &[u8], names: u64) -> Option<Counted> {
    counted(bytes).map(|c| Counted { names, ..c })
}

fn counted(bytes: &[u8]) -> Option<Counted> {
    let rec = decode::<EntryRecord>("entries", bytes).ok()?;
    let file_bytes = |i: &myriad_proto::Inode| if i.kind == FileKind::File { i.size } else { 0 };
    let after = rec
        .pending
        .as_ref()
        .map(|p| p.after.as_ref().map_or(0, file_bytes));
    match (&rec.inode, after) {
        (None, None) => None,
        // Waiting for a decision: the larger of what it is and what it may become.
        (now, after) => Some(Counted {
            names: 1,
            bytes: now.as_ref().map_or(0, file_bytes).max(after.unwrap_or(0)),
        }),
    }
}

fn usage_key(id: u64) -> Vec<u8> {
    let mut k = USAGE_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The quotas a partition counts, as `quota-set` holds them: (map epoch, roots).
pub type QuotaSet = (u64, Vec<QuotaRoot>);

impl Store {
    /// The quotas this partition counts (none before a map with quotas reached it).
    pub fn quota_set(&self) -> Result<QuotaSet, StorageError> {
        let (epoch, mut roots): QuotaSet = match self.kv().get(Space::Meta, SET_KEY)? {
            Some(v) => decode("meta", &v)?,
            None => return Ok((0, Vec::new())),
        };
        let apart = self.kv().get(Space::Meta, TRASH_APART_KEY)?.is_some();
        for r in &mut roots {
            r.trash_apart = apart;
        }
        Ok((epoch, roots))
    }

    /// This partition's usage of quota `id` (zero when it holds nothing of its tree).
    pub fn quota_usage(&self, id: u64) -> Result<QuotaUsage, StorageError> {
        match self.kv().get(Space::Meta, &usage_key(id))? {
            Some(v) => decode("meta", &v),
            None => Ok(QuotaUsage::default()),
        }
    }

    pub fn put_quota_usage(&self, batch: &mut Batch, id: u64, usage: &QuotaUsage) {
        batch.put(Space::Meta, usage_key(id), encode(usage));
    }

    /// A batch that makes this partition count `roots`, the quotas of the map of `epoch`:
    /// a quota new here is counted from scratch, one gone has its usage dropped. Empty
    /// when the partition already counts these, or has counted a newer map's.
    pub fn sync_quotas(&self, epoch: u64, roots: &[QuotaRoot]) -> Result<Batch, StorageError> {
        let mut b = Batch::new();
        let (had_epoch, had) = self.quota_set()?;
        if had_epoch >= epoch || had == roots {
            return Ok(b);
        }
        for gone in had.iter().filter(|q| !roots.iter().any(|r| r.id == q.id)) {
            b.delete(Space::Meta, usage_key(gone.id));
        }
        // A quota new here, or one the trash's rule changes the tree of: from scratch.
        let counted_alike = |r: &QuotaRoot| {
            had.iter()
                .any(|q| q.id == r.id && (q.trash_apart == r.trash_apart || !r.encloses_trash()))
        };
        for new in roots.iter().filter(|r| !counted_alike(r)) {
            let usage = self.count_quota(new)?;
            self.put_quota_usage(&mut b, new.id, &usage);
        }
        b.put(
            Space::Meta,
            SET_KEY.to_vec(),
            encode(&(epoch, roots.to_vec())),
        );
        if roots.iter().any(|r| r.trash_apart) {
            b.put(Space::Meta, TRASH_APART_KEY.to_vec(), encode(&true));
        } else if had.iter().any(|r| r.trash_apart) {
            b.delete(Space::Meta, TRASH_APART_KEY.to_vec());
        }
        Ok(b)
    }

    /// The quotas `batch` makes the partition count, if it changes them (a sync).
    pub fn quota_set_in(batch: &Batch) -> Result<Option<Vec<QuotaRoot>>, StorageError> {
        let last = |key: &[u8]| {
            batch
                .ops
                .iter()
                .rev()
                .find(|(s, k, _)| *s == Space::Meta && k.as_slice() == key)
        };
        let mut roots = match last(SET_KEY) {
            Some((_, _, Some(v))) => decode::<QuotaSet>("meta", v)?.1,
            Some((_, _, None)) => Vec::new(),
            None => return Ok(None),
        };
        // A sync writes the rule with the set whenever the set has it.
        let apart = matches!(last(TRASH_APART_KEY), Some((_, _, Some(_))));
        for r in &mut roots {
            r.trash_apart = apart;
        }
        Ok(Some(roots))
    }

    /// Whether `batch` writes quota `id`'s usage itself (a sync that counted it afresh).
    #[must_use]
    pub fn writes_quota_usage(batch: &Batch, id: u64) -> bool {
        let key = usage_key(id);
        batch
            .ops
            .iter()
            .any(|(s, k, _)| *s == Space::Meta && *k == key)
    }

    /// Changes `usage` (read from the store where it has no value yet) by what `batch`'s
    /// entry changes do to the quotas of `set`; returns the ids it changed. The caller
    /// writes them back (`put_quota_usage`) in the batch or a later one of the same commit.
    pub fn account_quotas(
        &self,
        batch: &Batch,
        set: &[QuotaRoot],
        usage: &mut BTreeMap<u64, QuotaUsage>,
    ) -> Result<Vec<u64>, StorageError> {
        let mut changed = Vec::new();
        if set.is_empty() {
            return Ok(changed);
        }
        // The batch's own earlier ops come before its later ones on the same key.
        let mut seen: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
        for (space, key, value) in &batch.ops {
            if *space != Space::Entries {
                continue;
            }
            let Some((dir, name_len)) = entry_parts(key) else {
                continue;
            };
            // An inode object counts its bytes, no name, where its anchor is.
            let (enclosing, names): (Vec<&QuotaRoot>, u64) = if dir == INODE_DIR {
                let object = &key[key.len() - name_len..];
                let Some(anchor) = self.anchor_in(batch, object)? else {
                    continue;
                };
                let held = set.iter().filter(|q| q.holds_entries_of(&anchor));
                (held.collect(), 0)
            } else {
                (set.iter().filter(|q| q.holds_entry(&dir, key)).collect(), 1)
            };
            if enclosing.is_empty() {
                continue;
            }
            let before = match seen.get(key.as_slice()) {
                Some(v) => v.map(<[u8]>::to_vec),
                None => self.kv().get(Space::Entries, key)?,
            };
            seen.insert(key, value.as_deref());
            let old = before.as_deref().and_then(|v| counted_as(v, names));
            let new = value.as_deref().and_then(|v| counted_as(v, names));
            if old == new {
                continue;
            }
            for q in enclosing {
                let u = match usage.entry(q.id) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(self.quota_usage(q.id)?)
                    }
                };
                if let Some(c) = old {
                    u.change(c, false);
                }
                if let Some(c) = new {
                    u.change(c, true);
                }
                if !changed.contains(&q.id) {
                    changed.push(q.id);
                }
            }
        }
        Ok(changed)
    }

    /// Quota `q`'s usage here counted from scratch: every entry of its tree this
    /// partition holds.
    pub fn count_quota(&self, q: &QuotaRoot) -> Result<QuotaUsage, StorageError> {
        let mut usage = QuotaUsage::default();
        let prefix = if q.path == "/" { "/" } else { q.path.as_str() };
        self.each_pair(Space::Entries, prefix.as_bytes(), |k, v| {
            if let Some((dir, _)) = entry_parts(&k)
                && q.holds_entry(&dir, &k)
                && let Some(c) = counted(&v)
            {
                usage.change(c, true);
            }
            Ok(())
        })?;
        self.each_anchored(|anchor, v| {
            if q.holds_entries_of(anchor)
                && let Some(c) = counted_as(v, 0)
            {
                usage.change(c, true);
            }
            Ok(())
        })?;
        Ok(usage)
    }

    /// What the kept usage differs in from a count from scratch, per quota counted here
    /// (None: nothing). For checks: the simulation runs it on every primary.
    pub fn quota_drift(&self) -> Result<Option<String>, StorageError> {
        let (_, set) = self.quota_set()?;
        let mut drift = Vec::new();
        for q in &set {
            let kept = self.quota_usage(q.id)?;
            let fresh = self.count_quota(q)?;
            if kept != fresh {
                drift.push(format!(
                    "quota {} on {}: kept {kept:?}, counted {fresh:?}",
                    q.id, q.path
                ));
            }
        }
        Ok((!drift.is_empty()).then(|| drift.join("; ")))
    }
}

#[cfg(test)]
mod tests;
