//! The faults the simulation injects while the clients work: crashes and restarts,
//! isolations, disk errors, planned stops, tier shifts.

use std::sync::Arc;
use std::time::Duration;

use myriad_placement::NodeId;
use rand::Rng;
use tokio::time::Instant;

use super::{FAULT_TICK, Sim, lock};

impl Sim {
    pub(super) fn crash(&self, id: NodeId) {
        let server = self.net.server(id);
        self.net.set_server(id, None);
        self.leases.revoke(id);
        if let Some(s) = server {
            s.stop();
        }
        let disk = &self.disks[id.index()];
        let unsynced = disk.unsynced();
        let keep = self.rng.with(|r| r.gen_range(0..=unsynced));
        let mut lost = disk.crash(keep, self.cfg.broken_disk);
        if self.cfg.tiers {
            // The capacity tier's disk keeps its own prefix of what it was not asked to sync.
            if let Some(t) = lock(&self.tiered).remove(&id) {
                lock(&self.report).tier_overflowed_blocks += t.counts().overflowed_blocks;
            }
            let capacity = &self.capacity_disks[id.index()];
            let keep = self.rng.with(|r| r.gen_range(0..=capacity.unsynced()));
            lost += capacity.crash(keep, false);
        }
        let back = self
            .rng
            .with(|r| Duration::from_millis(r.gen_range(2_000..12_000)));
        lock(&self.faults).down.insert(id, Instant::now() + back);
        let mut rep = lock(&self.report);
        rep.crashes += 1;
        rep.lost_unsynced += lost as u64;
        self.trace.event(format_args!(
            "crash server {id}: {lost} of {unsynced} unsynced batches lost; back in {back:?}"
        ));
    }

    /// With `tiers`: the fast tier of `who` starts or stops overflowing, or moves blocks
    /// back (while it does not overflow).
    pub(super) fn shift_tiers(&self, who: NodeId) {
        let Some(t) = lock(&self.tiered).get(&who).cloned() else {
            return;
        };
        if self.rng.with(|r| r.gen_bool(0.5)) {
            let on = !t.overflowing();
            t.set_overflowing(on);
            self.trace
                .event(format_args!("server {who}'s fast tier overflowing: {on}"));
        } else {
            match t.move_back(4) {
                Ok(n) => self.trace.event(format_args!(
                    "server {who}: {n} blocks back to the fast tier"
                )),
                Err(e) => self
                    .trace
                    .event(format_args!("server {who}: moving blocks back: {e}")),
            }
        }
    }

    /// Draws a fault every `FAULT_TICK`: at most one server out (crashed or isolated) at a
    /// time, so every partition keeps a live copy.
    pub(super) async fn inject(self: Arc<Self>) {
        loop {
            tokio::time::sleep(FAULT_TICK).await;
            let now = Instant::now();
            let due: Vec<NodeId> = lock(&self.faults)
                .down
                .iter()
                .filter(|(_, t)| **t <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in due {
                lock(&self.faults).down.remove(&id);
                if self.gone(id) {
                    continue;
                }
                if let Err(e) = self.start_server(id) {
                    self.trace.event(format_args!("{e}"));
                }
            }
            let heal = lock(&self.faults).isolated.is_some_and(|(_, t)| t <= now);
            if heal {
                lock(&self.faults).isolated = None;
                self.net.heal();
                self.trace.event(format_args!("network healed"));
            }
            let out = {
                let f = lock(&self.faults);
                f.down.len() + usize::from(f.isolated.is_some())
            };
            let (draw, who, how_long) = self.rng.with(|r| {
                (
                    r.gen_range(0..1000u32),
                    NodeId(r.gen_range(1..=self.cfg.servers)),
                    Duration::from_millis(r.gen_range(1_000..10_000)),
                )
            });
            if out > 0 {
                continue;
            }
            match draw {
                0..60 => self.crash(who),
                60..110 => {
                    self.net.isolate(who);
                    lock(&self.faults).isolated = Some((who, now + how_long));
                    lock(&self.report).isolations += 1;
                    self.trace
                        .event(format_args!("isolate server {who} for {how_long:?}"));
                }
                110..120 => {
                    // A disk error: the server stops at its next fsync (as the process
                    // exits); its operator restarts it a moment later.
                    self.disks[who.index()].fail_next_sync();
                    lock(&self.faults).sick.insert(who);
                    lock(&self.report).disk_errors += 1;
                    self.trace.event(format_args!("disk error on server {who}"));
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    lock(&self.faults).sick.remove(&who);
                    self.crash(who);
                }
                120..135 if self.cfg.moves && !lock(&self.faults).added => {
                    if let Err(e) = self.add_server() {
                        self.trace.event(format_args!("{e}"));
                    }
                }
                135..150 if self.cfg.moves => self.remove_server(who),
                150..250 if self.cfg.tiers => self.shift_tiers(who),
                250..275 => {
                    // A planned stop (SIGTERM, a rolling restart): the server hands its
                    // partitions over first, then is down until restarted.
                    if let Some(s) = self.net.running(who) {
                        let proposed = s.stop_planned().await;
                        lock(&self.report).planned_stops += 1;
                        self.trace.event(format_args!(
                            "planned stop of server {who} (hand-over proposed: {proposed})"
                        ));
                        self.crash(who);
                    }
                }
                _ => {}
            }
        }
    }
}
