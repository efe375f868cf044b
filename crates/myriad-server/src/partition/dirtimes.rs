//! Directory times and link counts follow their entries.
//!
//! A directory's attributes live in its parent's entry (on the partition of the parent's
//! directory object), while its entries live in its own directory object, usually on
//! another partition. The partition that adds or removes an entry keeps the directory's
//! subdirectory count in the same batch (`DirRecord::subdirs`, so the count is exact), and
//! then, before answering the request, tells the partition holding the directory's entry:
//! `DirTouch { mtime = ctime = now, nlink = 2 + subdirs }` (`nlink` 1 once the directory is
//! split over several partitions: each holds only its own count, and 1 is what tools read
//! as "not counted", as on file systems that keep no count). So a `stat` after a create,
//! unlink, mkdir, rmdir, rename or link, from anyone, shows the new times and count.
//!
//! Touches of one directory from one partition are coalesced: while one is in flight, the
//! changes that follow wait for the next, which covers all of them (values are absolute,
//! read when the touch is sent), so a burst of creates in one directory costs a few
//! touches, not one each. A touch whose target is unavailable (failing over: `passing`)
//! is sent again for up to `TOUCH_RETRY_FOR` before the change is answered: a parent's
//! link count left behind misleads tools that count subdirectories by it (`find`), and
//! nsx under kill -9 met one (issue 49: an `rmdir` answered while its parent's entry was
//! failing over left the parent's `nlink` and times as before). A crash of this
//! partition's primary between a change and its touch is covered when the change is
//! retried (`touch_again`: its caller waits) or finished by recovery (mkdir, rmdir); a
//! target down for longer than that, or a change answered before its touch and never
//! retried (a write-behind batch's), still leaves them behind.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use myriad_proto::{DirTouchItem, Inode, Request, Response, WireError};

use crate::commit::Context;
use crate::partition::core::Partition;
use crate::partition::made::{BatchTouches, Made};
use crate::partition::touch_sender::TOUCH_TIMEOUT;
use crate::state::mutation::{Mutation, Outcome, storage_err};
use crate::unpoisoned::lock;
use myriad_proto::PeerRequest;

/// How long a change waits for its directory's touch to get through a failover of the
/// partition holding the directory's entry (detection and promotion take a few seconds).
const TOUCH_RETRY_FOR: Duration = Duration::from_secs(15);
const TOUCH_PAUSE_FIRST: Duration = Duration::from_millis(50);
const TOUCH_PAUSE_MAX: Duration = Duration::from_secs(1);

/// A touch failing so is at a target failing over, and gets through once it has a new
/// primary: unreachable (a dead server's connection refused), busy, not yet primary, or
/// a map change. Not a touch that timed out: a target cut off by the network may stay so,
/// and a change would wait for it while its own partition works (the simulation's
/// `a_change_answered_before_its_primary_crashed_is_sent_again` cuts a primary off).
fn passing(e: &WireError) -> bool {
    matches!(
        e,
        WireError::Unavailable(_) | WireError::Busy | WireError::AskPrimary
    ) || e.is_routing()
}

/// A client's time for its change is taken within this of the server's clock.
const CLIENT_TIME_SLACK_NS: i64 = 60 * 1_000_000_000;

impl Partition {
    /// The time a change applied now is made at: its client's (`made.at`), for a change
    /// answered behind (`Envelope::Batch::times`), else this server's clock.
    pub(crate) fn time_of(&self, made: &Made) -> i64 {
        self.client_time(made.at)
    }

    /// A time a client says it made a change at (`at`), if within `CLIENT_TIME_SLACK_NS`
    /// of this server's clock; else (or if none) this server's clock.
    pub(crate) fn client_time(&self, at: Option<i64>) -> i64 {
        let now = self.env.now_ns();
        at.filter(|t| t.abs_diff(now) <= CLIENT_TIME_SLACK_NS.unsigned_abs())
            .unwrap_or(now)
    }

    /// Runs `serve` (the changes of one `Envelope::Batch`, each made with the
    /// `BatchTouches` it is given) touching each directory they change once, after the
    /// last of them, instead of after each: a batch of creates in one directory costs one
    /// touch. Nobody else sees the directory meanwhile (a batch is a write-behind
    /// journal's, under an exclusive lease: docs/fuse.md "Write-behind"); a crash before
    /// the touch leaves the times behind, as any crash between a change and its touch
    /// does. The touches report `client`'s change (its own lease on the parent stays);
    /// each directory's is made at the time of the last change of it, as its client
    /// answered it (`BatchTouches`).
    pub(crate) async fn batched<F: std::future::Future>(
        self: &Arc<Self>,
        (client, serving): (Option<u64>, Option<u64>),
        serve: impl FnOnce(BatchTouches) -> F,
    ) -> F::Output {
        let touches = BatchTouches::default();
        let out = serve(touches.clone()).await;
        let dirs = std::mem::take(&mut *lock(&touches.0));
        for (dir, at) in dirs {
            let made = Made {
                at,
                for_client: client,
                serving,
                ..Made::now()
            };
            self.touch_dir(&dir, &made).await;
        }
        out
    }

    /// Applies `m`, a change of entries in `dir` (here), and returns once `dir`'s times
    /// are sent and, if `durable`, once the change is on disk everywhere: the touch
    /// overlaps the group commit and the backups' acknowledgements. `changed` says from
    /// the outcome whether entries changed at all (a create may find the name taken).
    pub(crate) async fn run_touching(
        self: &Arc<Self>,
        (m, made): (Mutation, &Made),
        dir: &str,
        durable: bool,
        changed: impl Fn(&Outcome) -> bool,
    ) -> Result<(Outcome, Option<Inode>), WireError> {
        // Part of another partition's change for `made.for_client`: not recalled for it.
        let ctx = made.context();
        // A change answered once applied waits for its touch, not its durability.
        let durable = durable && !ctx.visible_completion(&m);
        // Only a durable change waits for the fsync (a round nobody waits on stays open
        // for the batch it is part of: `commit/rounds.rs`).
        let (out, synced) = if durable {
            let (out, synced) = self.applier.run_staged_in(&ctx, m).await?;
            (out, Some(synced))
        } else {
            (self.applier.run_visible_in(&ctx, m).await?, None)
        };
        // In a batch the directory is touched once, after its last change (`batched`).
        let deferred = changed(&out)
            && made.batch.as_ref().is_some_and(|t| {
                t.note(dir, made.at);
                true
            });
        let touch = async {
            if changed(&out) && !deferred {
                self.touch_dir(dir, made).await
            } else {
                None
            }
        };
        let parent = if let Some(synced) = synced {
            let (parent, synced) = tokio::join!(touch, synced.wait());
            synced?;
            parent
        } else {
            touch.await
        };
        Ok((out, parent))
    }

    /// Touches `dir` after a change of its entries made as `made` says, or, in a batch,
    /// notes it for the batch's one touch after its last change (`batched`): a touch made
    /// at once there would be overwritten by the batch's, at an earlier change's time
    /// (nsx seed 7 through the mount: an unlink and a mkdir behind of one name in one
    /// batch left the directory with the unlink's time).
    pub(crate) async fn touch_after(self: &Arc<Self>, dir: &str, made: &Made) -> Option<Inode> {
        match &made.batch {
            Some(t) => {
                t.note(dir, made.at);
                None
            }
            None => self.touch_dir(dir, made).await,
        }
    }

    /// A change of entries in `dir` answered again from its recorded outcome: a retry,
    /// whose first try may have died between the change and its touch (or recovery
    /// finished it), so `dir` is touched again, values read now, while its caller still
    /// waits. Not in a batch: a write-behind journal's changes were answered to their
    /// callers long ago, at their client's times, and a touch now could set the
    /// directory's times back over a later change's.
    pub(crate) async fn touch_again(self: &Arc<Self>, dir: &str, made: &Made) {
        if made.batch.is_none() {
            self.touch_dir(dir, made).await;
        }
    }

    /// Entries of directory `dir` (its object is here) changed: bring its times and link
    /// count up to date where its entry lives, before the change is acknowledged. Returns
    /// the directory's attributes after it, when that partition sent them back.
    pub(crate) async fn touch_dir(self: &Arc<Self>, dir: &str, made: &Made) -> Option<Inode> {
        let slot = self.dir_touches.slot(dir);
        let mine = slot.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let attrs = {
            let _sending = slot.send.lock().await;
            if slot.covered.load(Ordering::SeqCst) < mine {
                // Everything requested so far is covered by what is read now.
                let upto = slot.requested.load(Ordering::SeqCst);
                let sent = self.send_touch_through(dir, made).await;
                *lock(&slot.last) = sent;
                slot.covered.fetch_max(upto, Ordering::SeqCst);
            }
            lock(&slot.last).clone()
        };
        self.dir_touches.release(dir, &slot);
        attrs
    }

    /// `send_touch`, sent again while its target fails over, for up to `TOUCH_RETRY_FOR`,
    /// with the time of the first try (the directory's slot is held meanwhile, so no later
    /// touch of it overtakes this one). Given up past that: a touch arriving later, out of
    /// order, would set the directory's times back.
    async fn send_touch_through(self: &Arc<Self>, dir: &str, made: &Made) -> Option<Inode> {
        let deadline = Instant::now() + TOUCH_RETRY_FOR;
        let mut pause = TOUCH_PAUSE_FIRST;
        let at = self.time_of(made);
        loop {
            match self.send_touch(dir, at, made.client()).await {
                Ok(attrs) => return attrs,
                Err(e) if passing(&e) && self.env.serves(self.me) => {
                    if Instant::now() + pause >= deadline {
                        tracing::warn!(partition = %self.me, dir, "directory times and link count left behind: its entry's partition did not take them for {} s ({e})", TOUCH_RETRY_FOR.as_secs());
                        return None;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(TOUCH_PAUSE_MAX);
                }
                Err(e) => {
                    tracing::debug!(dir, "directory times not updated: {e}");
                    return None;
                }
            }
        }
    }

    /// Sends `dir`'s times (`now`) and link count to the partition holding its entry,
    /// reporting the change of `client` (its leases on `dir` are not recalled).
    pub(super) async fn send_touch(
        self: &Arc<Self>,
        dir: &str,
        now: i64,
        client: Option<u64>,
    ) -> Result<Option<Inode>, WireError> {
        let Some(rec) = self.store.dir(dir).map_err(storage_err)? else {
            return Ok(None);
        };
        let nlink = if rec.is_whole() {
            rec.subdirs.saturating_add(2)
        } else {
            1
        };
        if dir == "/" && rec.root_attrs.is_some() {
            let ctx = Context::for_client(client);
            let out = self
                .applier
                .run_visible_in(
                    &ctx,
                    Mutation::DirTouch {
                        dir: "/".into(),
                        name: String::new(),
                        ino: rec.ino,
                        now,
                        nlink: Some(nlink),
                    },
                )
                .await?;
            return Ok(match out {
                Outcome::Inode(i) => Some(i),
                _ => None,
            });
        }
        let item = DirTouchItem {
            path: dir.to_string(),
            ino: rec.ino,
            now_ns: now,
            nlink: Some(nlink),
            client,
        };
        self.not_deposed()?;
        let target = self.entry_node(dir);
        match self
            .touch_sender
            .touch(&self.env, self.me, target, item.clone())
            .await
        {
            // The entry moved with a split, or our map of the parent's shards is stale: alone,
            // as `call_entry` sends it (it learns the shard map).
            Err(WireError::WrongShard { .. } | WireError::Redirect(_)) if dir != "/" => {
                let req = PeerRequest::DirTouch {
                    path: item.path,
                    ino: item.ino,
                    now_ns: item.now_ns,
                    nlink: item.nlink,
                    client: item.client,
                };
                match tokio::time::timeout(TOUCH_TIMEOUT, self.call_entry(dir, Request::Peer(req)))
                    .await
                {
                    Ok(Ok(Response::Attr(i))) => Ok(Some(i)),
                    Ok(r) => r.map(|_| None),
                    Err(_) => Err(WireError::TimedOut("directory touch".into())),
                }
            }
            other => other,
        }
    }
}
