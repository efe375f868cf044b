//! The file-lock invariant (docs/fuse.md "File locks between mounts"): no two clients
//! believe at once that they hold the same write lock. A client believes it from the
//! answer that granted (or renewed, or reclaimed) it until the end of the lock lease its
//! client library computes (`Client::lock_valid_until`: a lease from the sending of the
//! last request the server answered about it); it stops believing just before it sends
//! its unlock.

use std::collections::BTreeMap;
use std::sync::Mutex;

use myriad_client::InodeId;
use tokio::time::Instant;

/// The inodes the clients lock (numbers no file uses: locks need no file).
pub const LOCKED: [InodeId; 3] = [
    InodeId(0x7f00_0000_0001),
    InodeId(0x7f00_0000_0002),
    InodeId(0x7f00_0000_0003),
];

#[derive(Default)]
pub struct LockCheck {
    /// Inode -> client -> believes until.
    believers: Mutex<BTreeMap<InodeId, BTreeMap<u32, Instant>>>,
}

impl LockCheck {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<InodeId, BTreeMap<u32, Instant>>) -> T) -> T {
        let mut g = match self.believers.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Client `me` believes, at `now`, that it holds `ino`'s write lock until `until`.
    pub fn believe(
        &self,
        me: u32,
        ino: InodeId,
        until: Instant,
        now: Instant,
    ) -> Result<(), String> {
        if until <= now {
            return Ok(());
        }
        self.with(|all| {
            let b = all.entry(ino).or_default();
            b.retain(|_, u| *u > now);
            if let Some((other, u)) = b.iter().find(|(c, _)| **c != me) {
                return Err(format!(
                    "c{me} and c{other} both hold the write lock of inode {:#x} (c{other} until {:?} from now)",
                    ino.0,
                    *u - now
                ));
            }
            b.insert(me, until);
            Ok(())
        })
    }

    /// Client `me` lets go of `ino` (before it sends the unlock).
    pub fn release(&self, me: u32, ino: InodeId) {
        self.with(|all| {
            if let Some(b) = all.get_mut(&ino) {
                b.remove(&me);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn two_believers_at_once_are_caught_and_a_lapsed_one_is_not() {
        let c = LockCheck::default();
        let now = Instant::now();
        let ino = LOCKED[0];
        assert!(c.believe(1, ino, now + Duration::from_secs(6), now).is_ok());
        assert!(
            c.believe(2, ino, now + Duration::from_secs(6), now)
                .is_err()
        );
        // Client 1's belief lapsed: 2 may hold it.
        let later = now + Duration::from_secs(7);
        assert!(
            c.believe(2, ino, later + Duration::from_secs(6), later)
                .is_ok()
        );
        c.release(2, ino);
        assert!(
            c.believe(1, ino, later + Duration::from_secs(6), later)
                .is_ok()
        );
    }
}
