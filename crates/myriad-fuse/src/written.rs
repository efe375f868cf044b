//! Copies of files this mount wrote whole, from their first byte on, in order (docs/fuse.md
//! "Files this mount wrote"): a later read-only open of the file, while the servers show
//! the size and mtime this mount's last write left, reads from the copy instead of the
//! servers. `git clone` writes its pack in unaligned pieces, which leaves the kernel's
//! pages of it invalid, then maps it to check out every file: each page fault was a read
//! at the servers (686 for a 12 MiB pack).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use myriad_proto::{Inode, InodeId};

/// The largest file kept.
pub const FILE_MAX: usize = 64 << 20;
/// All copies together at most this many bytes: the oldest go first.
pub const TOTAL_MAX: usize = 128 << 20;

struct Copy {
    data: Arc<Vec<u8>>,
    /// Size and mtime the servers answered this mount's last write of it with.
    stamp: (u64, i64),
}

#[derive(Default)]
struct Inner {
    copies: HashMap<InodeId, Copy>,
    /// Sends of each inode under way (`begin`..`end`), and the inodes two of whose sends
    /// overlapped: their replies may come in another order than the servers applied
    /// them, so no copy is kept until they are all done.
    sending: HashMap<InodeId, u32>,
    spoiled: std::collections::HashSet<InodeId>,
    /// Oldest first (an inode may appear more than once: only its latest counts).
    order: VecDeque<InodeId>,
    bytes: usize,
}

#[derive(Default)]
pub struct WrittenCopies {
    inner: Mutex<Inner>,
}

impl WrittenCopies {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// This mount's write of `data` at `offset` was acknowledged, leaving `after`. Kept
    /// when it starts the file or continues the copy at its end and the copy is then the
    /// whole file; anything else drops the copy. A whole file of at most `inline` bytes
    /// sent at once is not kept: its contents come with its open anyway.
    pub fn wrote(&self, offset: u64, data: &[u8], after: &Inode, inline: u64) {
        let ino = after.ino;
        let mut g = self.lock();
        let old = g.copies.remove(&ino);
        if let Some(c) = &old {
            g.bytes -= c.data.len();
        }
        if g.spoiled.contains(&ino)
            || (offset == 0 && after.size == data.len() as u64 && after.size <= inline)
        {
            return;
        }
        let mut copy = match old {
            _ if offset == 0 => Vec::new(),
            // Not while a reader's handle holds it (that would copy it whole per write).
            Some(c) if c.data.len() as u64 == offset => match Arc::try_unwrap(c.data) {
                Ok(data) => data,
                Err(_) => return,
            },
            _ => return,
        };
        if copy.len() + data.len() > FILE_MAX {
            return;
        }
        copy.extend_from_slice(data);
        if copy.len() as u64 != after.size {
            return;
        }
        g.bytes += copy.len();
        g.copies.insert(
            ino,
            Copy {
                data: Arc::new(copy),
                stamp: (after.size, after.mtime_ns),
            },
        );
        g.order.push_back(ino);
        while g.bytes > TOTAL_MAX {
            let Some(oldest) = g.order.pop_front() else {
                break;
            };
            if !g.order.contains(&oldest)
                && let Some(c) = g.copies.remove(&oldest)
            {
                g.bytes -= c.data.len();
            }
        }
        if g.order.len() > 4 * g.copies.len() + 64 {
            let Inner { copies, order, .. } = &mut *g;
            let mut seen = std::collections::HashSet::new();
            let kept: VecDeque<InodeId> = order
                .iter()
                .rev()
                .filter(|i| copies.contains_key(i) && seen.insert(**i))
                .copied()
                .collect();
            *order = kept.into_iter().rev().collect();
        }
    }

    /// The copy of `now`'s file, if the servers' size and mtime (`now`, read at the open)
    /// are still those this mount's last write of it left.
    pub fn of(&self, now: &Inode) -> Option<Arc<Vec<u8>>> {
        let g = self.lock();
        let c = g.copies.get(&now.ino)?;
        (c.stamp == (now.size, now.mtime_ns) && c.data.len() as u64 == now.size)
            .then(|| c.data.clone())
    }

    /// A send of `ino`'s bytes starts: one already under way spoils the copy until both
    /// are done (their replies may come out of the servers' order).
    pub fn begin(&self, ino: InodeId) {
        let mut g = self.lock();
        let n = g.sending.entry(ino).or_insert(0);
        *n += 1;
        if *n > 1 {
            g.spoiled.insert(ino);
            if let Some(c) = g.copies.remove(&ino) {
                g.bytes -= c.data.len();
            }
        }
    }

    /// A send `begin` counted is done (after `wrote`, or after a failure: `drop_ino`).
    pub fn end(&self, ino: InodeId) {
        let mut g = self.lock();
        let left = g.sending.get_mut(&ino).map(|n| {
            *n -= 1;
            *n
        });
        if left == Some(0) {
            g.sending.remove(&ino);
            g.spoiled.remove(&ino);
        }
    }

    /// Drops `ino`'s copy (a change of it this mount made some other way).
    pub fn drop_ino(&self, ino: InodeId) {
        let mut g = self.lock();
        if let Some(c) = g.copies.remove(&ino) {
            g.bytes -= c.data.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_proto::FileKind;

    fn after(size: u64, mtime: i64) -> Inode {
        let mut i = Inode::new(InodeId(7), FileKind::File, 0o644, (0, 0), mtime);
        i.size = size;
        i.mtime_ns = mtime;
        i
    }

    #[test]
    fn a_file_written_in_order_from_its_start_is_kept_while_its_size_and_mtime_hold() {
        let w = WrittenCopies::default();
        w.wrote(0, b"hello ", &after(6, 10), 0);
        w.wrote(6, b"world", &after(11, 11), 0);
        let got = w.of(&after(11, 11));
        assert_eq!(got.as_deref().map(Vec::as_slice), Some(&b"hello world"[..]));
        assert!(w.of(&after(11, 12)).is_none(), "another mtime: changed");
        assert!(w.of(&after(12, 11)).is_none(), "another size: changed");
    }

    #[test]
    fn a_write_elsewhere_or_a_file_larger_than_the_copy_drops_it() {
        let w = WrittenCopies::default();
        w.wrote(0, b"abc", &after(3, 1), 0);
        w.wrote(1, b"X", &after(3, 2), 0);
        assert!(w.of(&after(3, 2)).is_none(), "a write inside: dropped");
        // The file had bytes past what this mount wrote.
        w.wrote(0, b"abc", &after(10, 3), 0);
        assert!(w.of(&after(10, 3)).is_none());
        // A small file sent whole at once: its open brings its contents.
        w.wrote(0, b"abc", &after(3, 4), 3);
        assert!(w.of(&after(3, 4)).is_none(), "small: not kept");
        w.wrote(0, b"abc", &after(3, 4), 0);
        w.drop_ino(InodeId(7));
        assert!(w.of(&after(3, 4)).is_none(), "dropped");
    }

    #[test]
    fn two_sends_of_one_file_at_once_keep_no_copy_until_both_are_done() {
        let w = WrittenCopies::default();
        let ino = InodeId(7);
        w.begin(ino);
        w.begin(ino);
        w.wrote(0, b"ab", &after(2, 1), 0);
        w.end(ino);
        w.wrote(0, b"cd", &after(2, 2), 0);
        w.end(ino);
        assert!(w.of(&after(2, 2)).is_none(), "overlapping sends: no copy");
        w.begin(ino);
        w.wrote(0, b"ef", &after(2, 3), 0);
        w.end(ino);
        assert!(w.of(&after(2, 3)).is_some(), "one at a time again: kept");
    }

    #[test]
    fn copies_are_bounded_oldest_first() {
        let w = WrittenCopies::default();
        let chunk = vec![1u8; FILE_MAX];
        let n = TOTAL_MAX / FILE_MAX + 1;
        for i in 0..n {
            let mut a = after(FILE_MAX as u64, 1);
            a.ino = InodeId(100 + i as u64);
            w.wrote(0, &chunk, &a, 0);
        }
        let mut first = after(FILE_MAX as u64, 1);
        first.ino = InodeId(100);
        assert!(w.of(&first).is_none(), "the oldest went");
        let mut last = first.clone();
        last.ino = InodeId(100 + n as u64 - 1);
        assert!(w.of(&last).is_some());
        assert!(w.lock().bytes <= TOTAL_MAX);
    }
}
