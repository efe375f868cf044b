//! Keeping leases (docs/fuse.md "Directory leases"): per server, a poll that takes its
//! recalls, and renewals of the leases in use. A lease is dropped (its names forgotten,
//! the hook told) when recalled, when its poll or renewal fails, when it went unused for
//! `IDLE_AFTER`, and in any case `DROP_AHEAD` before its trusted end: a mount lets the
//! kernel keep names for as long as their lease lasts, and the hook's invalidations need
//! that moment to reach the kernel before the servers stop counting on the lease.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use myriad_net::Transport;
use myriad_proto::{Caller, Endpoints, LeaseKey, Request, Response, ServerRequest};
use tokio::time::Instant;

use super::{Dropped, Leases, TRUST_DEN, TRUST_NUM};

/// How long a recall waits for the changes answered behind under it to be sent: as long
/// as the server keeps a recalled lease for a holder still sending them (its
/// `RECALLED_DRAIN_MAX`). Giving the lease back earlier let the change that recalled it
/// apply first, and a change answered behind was then refused (a loaded machine).
const RECALL_DRAIN_MAX: Duration = Duration::from_secs(5);
/// How long a poll waits at its server for a recall.
const POLL_WAIT: Duration = Duration::from_secs(4);
/// After a failed poll: the pause before the next.
const POLL_RETRY: Duration = Duration::from_millis(200);
/// Leases in use are renewed this often: a quarter of the 0.8 s period, so one lost
/// renewal costs nothing.
pub(crate) const RENEW_EVERY: Duration = Duration::from_millis(200);
/// A lease nothing was answered from for this long is let go instead of renewed (a
/// directory the kernel answers for itself is looked up again after this).
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(5);
/// Dropped this long before its trusted end when no renewal extended it.
const DROP_AHEAD: Duration = Duration::from_millis(300);
/// At most this many leases renewed per server and round (the most recently used).
const RENEW_MAX: usize = 4096;

/// One server's leases, as `upkeep` sees them in a round.
#[derive(Default)]
pub(super) struct Round {
    pub(super) renew: Vec<LeaseKey>,
    pub(super) let_go: Vec<LeaseKey>,
}

impl Leases {
    /// Drops every lease granted through `addr` (its poll failed: recalls may be lost).
    pub(super) fn drop_addr(&self, addr: &str) -> Vec<(String, Vec<String>)> {
        let keys: Vec<LeaseKey> = {
            let g = self.lock();
            g.dirs
                .iter()
                .flat_map(|(dir, parts)| {
                    parts.iter().filter(|p| p.addr == addr).map(|p| LeaseKey {
                        partition: p.partition,
                        dir: dir.clone(),
                    })
                })
                .collect()
        };
        self.drop_keys(&keys)
    }

    /// Whether run `run` at `addr` is to go on: it is still the run there and a lease from
    /// `addr` is held (or draining). When none is, the run ends (and a later lease starts
    /// another).
    pub(super) fn run_goes_on(&self, addr: &str, run: u64) -> bool {
        let now = Instant::now();
        let mut g = self.lock();
        if g.polling.get(addr) != Some(&run) {
            return false;
        }
        let held = g
            .dirs
            .values()
            .flatten()
            .any(|p| p.addr == addr && p.until > now);
        let draining = self.still_draining(&mut g.draining).any(|(_, a)| a == addr);
        if !held && !draining {
            g.polling.remove(addr);
        }
        held || draining
    }

    /// The dropped exclusive leases whose journals still hold changes, or whose
    /// directory's rmdir answered behind is not yet applied (others forgotten): until
    /// then another client's change there must recall this client, which sends the
    /// rmdir first (`Leases::poll`), or it would apply in a directory this client was
    /// told is gone.
    fn still_draining<'a>(
        &self,
        draining: &'a mut BTreeMap<LeaseKey, String>,
    ) -> impl Iterator<Item = (&'a LeaseKey, &'a String)> {
        draining
            .retain(|k, _| self.journal.pending_for(k) || self.journal.fence_of(&k.dir).is_some());
        draining.iter()
    }

    pub(super) fn tell(&self, dropped: &[(String, Vec<String>)], why: Dropped) {
        let hook = self.hook.read().ok().and_then(|h| h.clone());
        if let Some(hook) = hook {
            for (dir, names) in dropped {
                hook(dir, names, why);
            }
        }
    }

    /// A change answered behind under `key` was refused when applied: what this client
    /// shows of the directory holds the change as made, which it is not. Dropped, so the
    /// servers are asked again (simulation seed 618 with --behind --dir-moves --trash: an
    /// unlink refused after a peer's timeout, then the same name's second unlink answered
    /// "no such file" from the lease while the file was still there).
    pub(crate) fn drop_refused(&self, key: &LeaseKey) {
        self.drop_and_tell(
            std::slice::from_ref(key),
            Dropped::Changed,
            "a change answered behind was refused",
        );
    }

    fn drop_and_tell(&self, keys: &[LeaseKey], why: Dropped, what: &str) {
        if !keys.is_empty() {
            tracing::debug!(holder = self.holder, ?keys, "leases dropped: {what}");
            let dropped = self.drop_keys(keys);
            self.tell(&dropped, why);
        }
    }

    /// The poll at server `addr`: takes recalls, drops what they cover, tells the hook,
    /// and gives the leases back with the next poll. Ends with its run.
    pub(crate) async fn poll(
        self: Arc<Self>,
        transport: Arc<dyn Transport>,
        (addr, run): (String, u64),
        caller: Caller,
        timeout: Duration,
    ) {
        let mut released: Vec<LeaseKey> = Vec::new();
        loop {
            if released.is_empty() && !self.run_goes_on(&addr, run) {
                return;
            }
            let req = Request::Server(ServerRequest::LeasePoll {
                holder: self.holder,
                released: std::mem::take(&mut released),
                wait_ms: POLL_WAIT.as_millis() as u64,
            });
            let answer = transport
                .call_with_timeout(
                    &addr,
                    0,
                    Endpoints::SERVER,
                    &caller,
                    &req,
                    timeout.max(POLL_WAIT * 2),
                )
                .await;
            match answer {
                Ok(Response::Recalls(keys)) => {
                    self.drop_and_tell(&keys, Dropped::Changed, "recalled");
                    // Changes answered behind under them go first: the reader or changer
                    // waiting at the server must find them (docs/fuse.md "Write-behind").
                    // Past the lease period the server has stopped waiting anyway.
                    // And the parents' journals holding an rmdir or setattr of a
                    // recalled directory: a create there by another client must find
                    // it removed, as this client answered.
                    let fenced: Vec<LeaseKey> = keys
                        .iter()
                        .filter_map(|k| self.journal.fence_of(&k.dir))
                        .collect();
                    let which = |k: &LeaseKey, _: &_| keys.contains(k) || fenced.contains(k);
                    let _sent = self.journal.drain(&which, Some(RECALL_DRAIN_MAX)).await;
                    {
                        let mut g = self.lock();
                        for k in &keys {
                            g.draining.remove(k);
                        }
                    }
                    released = keys;
                }
                other => {
                    tracing::debug!(server = %addr, "lease poll failed, leases dropped: {other:?}");
                    let dropped = self.drop_addr(&addr);
                    self.tell(&dropped, Dropped::Changed);
                    tokio::time::sleep(POLL_RETRY).await;
                }
            }
        }
    }

    /// Gives every lease back (a mount going away): dropped here, told to the hook, and
    /// released at each server at once, so that nobody else's read or change waits for
    /// them to expire.
    pub(crate) async fn release_all(&self, transport: &Arc<dyn Transport>, caller: &Caller) {
        let by_addr: BTreeMap<String, Vec<LeaseKey>> = {
            let g = self.lock();
            let mut m: BTreeMap<String, Vec<LeaseKey>> = BTreeMap::new();
            for (dir, parts) in &g.dirs {
                for p in parts {
                    m.entry(p.addr.clone()).or_default().push(LeaseKey {
                        partition: p.partition,
                        dir: dir.clone(),
                    });
                }
            }
            m
        };
        for (addr, keys) in by_addr {
            // Not told to the hook: the mount is going, and the kernel's copies with it.
            self.drop_keys(&keys);
            let req = Request::Server(ServerRequest::LeasePoll {
                holder: self.holder,
                released: keys,
                wait_ms: 0,
            });
            let _ = transport
                .call_with_timeout(&addr, 0, Endpoints::SERVER, caller, &req, RENEW_EVERY)
                .await;
        }
    }

    /// Renewals at server `addr`, every `RENEW_EVERY` while its run goes on.
    pub(crate) async fn renew(
        self: Arc<Self>,
        transport: Arc<dyn Transport>,
        (addr, run): (String, u64),
        caller: Caller,
    ) {
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            if !self.run_goes_on(&addr, run) {
                return;
            }
            let round = self.round(&addr);
            self.drop_and_tell(&round.let_go, Dropped::Ended, "idle");
            if !round.renew.is_empty() {
                let sent = Instant::now();
                let req = Request::Server(ServerRequest::LeaseRenew {
                    holder: self.holder,
                    keys: round.renew.clone(),
                });
                // An answer later than a renewal period is no use: the next round asks again.
                let answer = transport
                    .call_with_timeout(&addr, 0, Endpoints::SERVER, &caller, &req, RENEW_EVERY)
                    .await;
                let refused = match answer {
                    Ok(Response::Renewed(oks)) if oks.len() == round.renew.len() => {
                        self.extend(&round.renew, &oks, sent)
                    }
                    other => {
                        tracing::debug!(server = %addr, "lease renewal failed, leases dropped: {other:?}");
                        round.renew
                    }
                };
                self.drop_and_tell(&refused, Dropped::Changed, "renewal refused");
            }
            let ending = self.ending(&addr);
            self.drop_and_tell(&ending, Dropped::Ended, "ending");
        }
    }

    /// Which of `addr`'s held leases to renew this round and which to let go (idle, or
    /// beyond `RENEW_MAX`).
    pub(super) fn round(&self, addr: &str) -> Round {
        let now = Instant::now();
        let mut g = self.lock();
        // Birth leases whose mkdir is not sent yet: no server knows them, so they are
        // not asked for, and are trusted as if renewed now, but only while this client
        // holds their parent exclusively, and no longer than it does. Only that lease
        // keeps another client from making the same name meanwhile: a recalled parent
        // whose journal does not reach the mkdir in time is given up, and the other
        // client's mkdir applied (review of stop 91).
        let bumps: Vec<(String, Instant)> = g
            .dirs
            .iter()
            .filter(|(_, parts)| parts.iter().any(|p| p.addr == addr && p.born && p.unsent))
            .filter_map(|(dir, parts)| {
                let parent = g.dirs.get(myriad_placement::split_parent(dir).0)?;
                let held = !parent.is_empty()
                    && parent
                        .iter()
                        .all(|q| q.exclusive.is_some() && q.until > now);
                let cap = parent.iter().map(|q| q.until).min()?;
                let period = parts.first()?.period;
                held.then(|| (dir.clone(), cap.min(now + period * TRUST_NUM / TRUST_DEN)))
            })
            .collect();
        for (dir, until) in bumps {
            for p in g.dirs.get_mut(&dir).into_iter().flatten() {
                if p.addr == addr && p.born && p.unsent {
                    p.until = p.until.max(until);
                }
            }
        }
        let draining: Vec<LeaseKey> = self
            .still_draining(&mut g.draining)
            .filter(|(_, a)| a.as_str() == addr)
            .map(|(k, _)| k.clone())
            .collect();
        let mut held: Vec<(Instant, LeaseKey)> = g
            .dirs
            .iter()
            .flat_map(|(dir, parts)| {
                parts
                    .iter()
                    .filter(|p| p.addr == addr && p.until > now && !p.unsent)
                    .map(|p| {
                        let key = LeaseKey {
                            partition: p.partition,
                            dir: dir.clone(),
                        };
                        (p.used, key)
                    })
            })
            .collect();
        held.sort_by_key(|(used, _)| std::cmp::Reverse(*used));
        let mut round = Round::default();
        for (i, (used, key)) in held.into_iter().enumerate() {
            if i < RENEW_MAX && now.saturating_duration_since(used) < IDLE_AFTER {
                round.renew.push(key);
            } else {
                round.let_go.push(key);
            }
        }
        // Kept at the server until their changes are sent, nothing trusted under them.
        for k in draining {
            if !round.renew.contains(&k) {
                round.renew.push(k);
            }
        }
        round
    }

    /// Extends the leases the server renewed (from `sent`); returns the refused ones. A
    /// birth lease whose mkdir is still on its way (its fence) is refused by a server
    /// that has not made the directory yet: kept as it is, not extended (its server
    /// grants it when the mkdir reaches it; a recall meanwhile comes by the poll).
    pub(super) fn extend(&self, keys: &[LeaseKey], oks: &[bool], sent: Instant) -> Vec<LeaseKey> {
        let mut g = self.lock();
        let mut refused = Vec::new();
        for (k, ok) in keys.iter().zip(oks) {
            if !ok {
                let unborn = g.dirs.get(&k.dir).is_some_and(|parts| {
                    parts.iter().any(|p| p.partition == k.partition && p.born)
                }) && self.journal.fence_of(&k.dir).is_some();
                if !unborn {
                    refused.push(k.clone());
                }
                continue;
            }
            if let Some(p) = g
                .dirs
                .get_mut(&k.dir)
                .and_then(|parts| parts.iter_mut().find(|p| p.partition == k.partition))
            {
                p.until = p.until.max(sent + p.period * TRUST_NUM / TRUST_DEN);
            }
        }
        refused
    }

    /// `addr`'s leases within `DROP_AHEAD` of their trusted end (no renewal came).
    pub(super) fn ending(&self, addr: &str) -> Vec<LeaseKey> {
        let soon = Instant::now() + DROP_AHEAD;
        let g = self.lock();
        g.dirs
            .iter()
            .flat_map(|(dir, parts)| {
                parts
                    .iter()
                    .filter(|p| p.addr == addr && p.until <= soon)
                    .map(|p| LeaseKey {
                        partition: p.partition,
                        dir: dir.clone(),
                    })
            })
            .collect()
    }
}
