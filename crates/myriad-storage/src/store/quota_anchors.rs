//! Where a hard-linked file's bytes are counted (docs/quotas.md "Hard links"). Once a
//! file has a second name its inode lives in an inode object at its home (`//i`), in no
//! directory's tree; its names count as names where they are, and its bytes count once,
//! against the quotas enclosing the directory its first name was in when the second was
//! made: its **anchor**, `quota-anchor \0 <inode object's name>` -> that directory, written
//! in the batch that makes the inode object and deleted in the one that frees it. The
//! anchor stays when names move (as a project quota stays with an XFS inode). Inode
//! objects made before anchors were written have none and count nowhere, in a change and
//! in a count from scratch alike, so the usage stays exact.

use crate::StorageError;
use crate::kv::{Batch, Space};
use crate::store::Store;
use crate::store::kept_stats::INODE_DIR;

const ANCHOR_PREFIX: &[u8] = b"quota-anchor\0";

fn anchor_key(object: &[u8]) -> Vec<u8> {
    let mut k = ANCHOR_PREFIX.to_vec();
    k.extend_from_slice(object);
    k
}

impl Store {
    /// The bytes of the inode object named `object` (its name in `INODE_DIR`) count
    /// against the quotas enclosing directory `dir`.
    pub fn put_quota_anchor(&self, batch: &mut Batch, object: &str, dir: &str) {
        let key = anchor_key(object.as_bytes());
        batch.put(Space::Meta, key, dir.as_bytes().to_vec());
    }

    /// The inode object named `object` is freed: its anchor goes with it.
    pub fn delete_quota_anchor(&self, batch: &mut Batch, object: &str) {
        batch.delete(Space::Meta, anchor_key(object.as_bytes()));
    }

    /// The anchor of the inode object named `object`: as `batch` puts it, else as stored
    /// (a batch that deletes it counts the object's going against the stored one).
    pub(crate) fn anchor_in(
        &self,
        batch: &Batch,
        object: &[u8],
    ) -> Result<Option<String>, StorageError> {
        let key = anchor_key(object);
        let put = batch
            .ops
            .iter()
            .rev()
            .find(|(s, k, v)| *s == Space::Meta && *k == key && v.is_some());
        let value = match put {
            Some((_, _, v)) => v.clone(),
            None => self.kv().get(Space::Meta, &key)?,
        };
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Every inode object here with an anchor: (its anchor, its entry's stored value).
    pub(crate) fn each_anchored(
        &self,
        mut f: impl FnMut(&str, &[u8]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let mut prefix = INODE_DIR.as_bytes().to_vec();
        prefix.push(0);
        self.each_pair(Space::Entries, &prefix, |k, v| {
            let Some(name) = k.get(prefix.len() + crate::keys::HASH_BYTES..) else {
                return Ok(());
            };
            if let Some(anchor) = self.kv().get(Space::Meta, &anchor_key(name))? {
                f(&String::from_utf8_lossy(&anchor), &v)?;
            }
            Ok(())
        })
    }
}
