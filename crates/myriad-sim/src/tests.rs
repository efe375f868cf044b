//! The simulation's parts together: a server on a simulated disk.

use std::sync::Arc;
use std::time::Duration;

use myriad_client::{Caller, Client, ClientConfig, ClusterMap, FsError, Keyring};
use myriad_placement::NodeId;
use myriad_server::ServerConfig;
use myriad_server::embed::EmbeddedServer;

use crate::authority::{Leases, SimAuthority};
use crate::disk::SimDisk;
use crate::net::{CLIENTS, Endpoint, Net, NetFaults};
use crate::rng::SimRng;
use crate::trace::Trace;

const S1: NodeId = NodeId(1);

/// A server whose disk fails an fsync stops (as the process exits): it answers nothing
/// more, so its lease lapses and its partitions fail over.
#[tokio::test(start_paused = true)]
async fn a_server_whose_disk_fails_an_fsync_stops() {
    let keys = Keyring::from_secret(&[7u8; 32]);
    let map = ClusterMap::build(1, &["sim-1".to_string()], 2, 1);
    let net = Net::new(1, NetFaults::none(), SimRng::new(1), Trace::new());
    let disk = Arc::new(SimDisk::default());
    let leases = Arc::new(Leases::default());
    leases.grant(S1, tokio::time::Instant::now() + Duration::from_secs(3600));
    let config = ServerConfig::new(S1, std::env::temp_dir(), map.clone(), keys.clone());
    let server = EmbeddedServer::new(
        config,
        Arc::new(disk.handle()),
        Arc::new(Endpoint::new(net.clone(), S1)),
        Arc::new(SimAuthority {
            me: S1,
            leases,
            proposals: Arc::default(),
        }),
        Duration::from_millis(1),
        tokio::time::Instant::now(),
    )
    .map(Arc::new)
    .unwrap_or_else(|e| panic!("server: {e}"));
    net.set_server(S1, Some(server.clone()));
    server.open().await.unwrap_or_else(|e| panic!("open: {e}"));
    let mut config = ClientConfig::new(map, Caller::root(), keys);
    config.id = 1;
    let client = Client::with_transport(config, Arc::new(Endpoint::new(net.clone(), CLIENTS)))
        .unwrap_or_else(|e| panic!("client: {e}"));
    client
        .mkdir("/a", 0o755)
        .await
        .unwrap_or_else(|e| panic!("mkdir while the disk is well: {e}"));
    assert!(!server.stopped());
    disk.fail_next_sync();
    assert!(
        client.mkdir("/b", 0o755).await.is_err(),
        "a write acknowledged over a failed fsync"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(server.stopped(), "the server goes on after a failed fsync");
    assert!(net.running(S1).is_none(), "a stopped server still answers");
}

/// Three servers on simulated disks, every partition on all three (one each), leases for
/// all.
struct Three {
    net: Arc<Net>,
    disks: Vec<Arc<SimDisk>>,
    leases: Arc<Leases>,
    proposals: Arc<crate::authority::Proposals>,
    keys: Keyring,
    start: tokio::time::Instant,
    min_copies: Option<u32>,
    map: ClusterMap,
    /// The servers' ancestor-replica lease, if not the default.
    replica_lease: Option<Duration>,
}

impl Three {
    async fn new(min_copies: Option<u32>) -> Three {
        Three::with_lease(min_copies, None).await
    }

    /// `replica_lease`: the servers' ancestor-replica lease, if not the default.
    async fn with_lease(min_copies: Option<u32>, replica_lease: Option<Duration>) -> Three {
        let addrs: Vec<String> = (1..=3).map(|i| format!("sim-{i}")).collect();
        let three = Three {
            net: Net::new(3, NetFaults::none(), SimRng::new(1), Trace::new()),
            disks: (0..=3).map(|_| Arc::new(SimDisk::default())).collect(),
            leases: Arc::new(Leases::default()),
            proposals: Arc::default(),
            keys: Keyring::from_secret(&[7u8; 32]),
            start: tokio::time::Instant::now(),
            min_copies,
            map: ClusterMap::build(1, &addrs, 1, 3),
            replica_lease,
        };
        for i in (1..=3).map(NodeId) {
            three.start_server(i, &three.map.clone());
        }
        for i in (1..=3).map(NodeId) {
            if let Some(s) = three.net.server(i) {
                s.open().await.unwrap_or_else(|e| panic!("open {i}: {e}"));
            }
        }
        three
    }

    /// Starts server `i` on its disk under `map` (its partitions not opened yet).
    fn start_server(&self, i: NodeId, map: &ClusterMap) -> Arc<EmbeddedServer> {
        self.leases
            .grant(i, tokio::time::Instant::now() + Duration::from_secs(3600));
        let mut config = ServerConfig::new(i, std::env::temp_dir(), map.clone(), self.keys.clone());
        config.disk_reserve_bytes = 0;
        config.min_copies = self.min_copies;
        if let Some(lease) = self.replica_lease {
            config.replication.lease = lease;
        }
        let server = EmbeddedServer::new(
            config,
            Arc::new(self.disks[i.index()].handle()),
            Arc::new(Endpoint::new(self.net.clone(), i)),
            Arc::new(SimAuthority {
                me: i,
                leases: self.leases.clone(),
                proposals: self.proposals.clone(),
            }),
            Duration::from_millis(1),
            self.start,
        )
        .map(Arc::new)
        .unwrap_or_else(|e| panic!("server {i}: {e}"));
        self.net.set_server(i, Some(server.clone()));
        server
    }

    /// Server `i` crashes: it stops at once and the network no longer reaches it.
    fn crash(&self, i: NodeId) {
        if let Some(s) = self.net.server(i) {
            s.stop();
        }
        self.net.set_server(i, None);
    }

    /// Installs `map` on every server running.
    async fn install(&self, map: &ClusterMap) {
        for i in (1..=3).map(NodeId) {
            if let Some(s) = self.net.server(i) {
                s.install_map(map.clone())
                    .await
                    .unwrap_or_else(|e| panic!("server {i} install: {e}"));
            }
        }
    }

    fn client(&self) -> Client {
        self.client_as(1, true)
    }

    /// Client `id`; `durable`: its changes are answered once durable, else once applied
    /// (as a mount's).
    fn client_as(&self, id: u64, durable: bool) -> Client {
        let mut config = ClientConfig::new(self.map.clone(), Caller::root(), self.keys.clone());
        config.id = id;
        config.durable_changes = durable;
        config.request_timeout = Duration::from_secs(5);
        Client::with_transport(config, Arc::new(Endpoint::new(self.net.clone(), CLIENTS)))
            .unwrap_or_else(|e| panic!("client: {e}"))
    }
}

/// Issue 49: with both other copies of a partition down, a change is not acknowledged on
/// the primary's disk alone (default `--min-copies`: 2 of 3): refused before it is applied,
/// and taken once a copy is back. With `--min-copies 1` it is acknowledged on one disk,
/// the trade that setting makes (that disk's loss then loses it: the copies that return
/// are behind and were never sent it).
#[tokio::test(start_paused = true)]
async fn a_change_is_not_acknowledged_on_fewer_copies_than_min_copies() {
    for (min_copies, one_disk_acknowledges) in [(None, false), (Some(1), true)] {
        let t = Three::new(min_copies).await;
        let root = t.map.ring().owner_of_dir("/");
        let primary = t.map.primary_of(root).unwrap_or(NodeId(1));
        let others: Vec<NodeId> = (1..=3).map(NodeId).filter(|i| *i != primary).collect();
        let client = t.client();
        client
            .mkdir("/a", 0o755)
            .await
            .unwrap_or_else(|e| panic!("mkdir with every copy up: {e}"));
        // Both other copies crash and are marked down.
        let mut down = t.map.clone();
        for &o in &others {
            t.crash(o);
            down = down.mark_down(o).unwrap_or_else(|| panic!("mark {o} down"));
        }
        t.install(&down).await;
        let lone = client.mkdir("/b", 0o755).await;
        assert_eq!(
            lone.is_ok(),
            one_disk_acknowledges,
            "min copies {min_copies:?}: mkdir on the primary's disk alone answered {lone:?}"
        );
        if one_disk_acknowledges {
            continue;
        }
        assert!(
            matches!(&lone, Err(FsError::Unavailable(m)) if m.contains("--min-copies")),
            "the refusal says why: {lone:?}"
        );
        assert_eq!(
            client.stat("/b").await.err(),
            Some(FsError::NotFound),
            "a refused change was applied"
        );
        // One copy returns (behind: it missed nothing acknowledged, but the map cannot
        // know): it is brought level, and the change is taken.
        let back = others[0];
        let up = down
            .mark_up(back)
            .unwrap_or_else(|| panic!("mark {back} up"));
        let s = t.start_server(back, &up);
        t.install(&up).await;
        s.open()
            .await
            .unwrap_or_else(|e| panic!("reopen {back}: {e}"));
        client
            .mkdir("/b", 0o755)
            .await
            .unwrap_or_else(|e| panic!("mkdir with a copy back: {e}"));
    }
}

/// Issue 49: a server whose disk fails an fsync hands its partitions over before it stops:
/// it proposes the map that marks it down (their in-sync copies then lead at once), rather
/// than leaving them to wait out its silence; and a planned stop does the same.
#[tokio::test(start_paused = true)]
async fn a_failed_disk_and_a_planned_stop_hand_their_partitions_over() {
    let t = Three::new(None).await;
    let client = t.client();
    client
        .mkdir("/a", 0o755)
        .await
        .unwrap_or_else(|e| panic!("mkdir while every disk is well: {e}"));
    let root = t.map.ring().owner_of_dir("/");
    let primary = t.map.primary_of(root).unwrap_or(NodeId(1));
    t.disks[primary.index()].fail_next_sync();
    assert!(
        client.mkdir("/b", 0o755).await.is_err(),
        "a write acknowledged over a failed fsync"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let stopped = t.net.server(primary).is_some_and(|s| s.stopped());
    assert!(stopped, "server {primary} goes on after a failed fsync");
    let proposed = t.proposals.take();
    assert!(
        proposed
            .iter()
            .any(|(from, m)| *from == primary && !m.is_up(primary) && m.epoch == t.map.epoch + 1),
        "server {primary} did not propose itself down: {proposed:?}"
    );
    // A planned stop of another server: the same hand-over.
    let other = NodeId(if primary == NodeId(1) { 2 } else { 1 });
    let s = t
        .net
        .server(other)
        .unwrap_or_else(|| panic!("server {other}"));
    assert!(s.stop_planned().await, "no hand-over proposed");
    let proposed = t.proposals.take();
    assert!(
        proposed
            .iter()
            .any(|(from, m)| *from == other && !m.is_up(other)),
        "server {other} did not propose itself down: {proposed:?}"
    );
}

/// Issue 49: a change a client (a mount) was answered once applied, whose primary crashed
/// before its copies had it, is not lost: the client kept it and sends it again to the new
/// primary before anything else of that partition, so it reads back what it wrote and its
/// sync succeeds. Unless another client changed that name meanwhile: then the old change
/// is not applied over the new one, and the sync reports the loss (EIO), once.
#[test]
fn a_change_answered_before_its_primary_crashed_is_sent_again() {
    roomy(changes_are_sent_again);
}

/// Runs `test` on a virtual clock, on a thread with the simulation's roomy stack: the
/// servers' futures are polled inside the client's (an in-process network), and a debug
/// build's futures are large.
fn roomy<F: std::future::Future<Output = ()> + 'static>(test: fn() -> F) {
    let ran = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"))
                .block_on(test());
        })
        .unwrap_or_else(|e| panic!("thread: {e}"))
        .join();
    if let Err(panic) = ran {
        std::panic::resume_unwind(panic);
    }
}

async fn changes_are_sent_again() {
    for other_writes_first in [false, true] {
        let t = Three::new(None).await;
        let setup = t.client_as(9, true);
        setup
            .mkdir("/d", 0o755)
            .await
            .unwrap_or_else(|e| panic!("mkdir: {e}"));
        let pid = setup.owner_of_entry("/d/f");
        let primary = t.map.primary_of(pid).unwrap_or(NodeId(1));
        let others: Vec<NodeId> = (1..=3).map(NodeId).filter(|i| *i != primary).collect();
        let mount = t.client_as(1, false);
        // A first change, synced: the primary knows /d's ancestors (it would otherwise ask
        // the other servers, cut off below).
        mount
            .create_with("/d/first", 0o644, true, b"synced", false)
            .await
            .unwrap_or_else(|e| panic!("create: {e}"));
        mount
            .sync_changes()
            .await
            .unwrap_or_else(|e| panic!("sync: {e}"));
        // The copies do not hear from the primary: what it applies now is on it alone.
        for &o in &others {
            t.net.block(primary, o);
        }
        mount
            .create_with("/d/f", 0o644, true, b"kept by the mount", false)
            .await
            .unwrap_or_else(|e| panic!("create answered once applied: {e}"));
        assert!(mount.has_unsynced_changes(), "nothing held");
        // The primary crashes; the map makes another copy primary.
        t.crash(primary);
        t.net.heal();
        let down = t
            .map
            .mark_down(primary)
            .unwrap_or_else(|| panic!("mark {primary} down"));
        t.install(&down).await;
        let new_primary = down.primary_of(pid).unwrap_or(NodeId(0));
        assert!(others.contains(&new_primary), "{new_primary} leads {pid}");
        assert_eq!(
            setup.stat("/d/f").await.err(),
            Some(FsError::NotFound),
            "the crash did not lose the change: this test tests nothing"
        );
        if other_writes_first {
            setup
                .create("/d/f", 0o644, true, b"another client's")
                .await
                .unwrap_or_else(|e| panic!("another client's create: {e}"));
        }
        let (_, data) = mount
            .fetch("/d/f")
            .await
            .unwrap_or_else(|e| panic!("read back after the failover: {e}"));
        let synced = mount.sync_changes().await;
        if other_writes_first {
            assert_eq!(
                data, b"another client's",
                "the resend overwrote a newer change"
            );
            assert!(
                matches!(&synced, Err(FsError::Io(m)) if m.contains("another client")),
                "the loss is reported: {synced:?}"
            );
            assert_eq!(mount.sync_changes().await, Ok(()), "reported once");
        } else {
            assert_eq!(data, b"kept by the mount", "the change was lost");
            assert_eq!(synced, Ok(()), "nothing was lost");
        }
        assert!(!mount.has_unsynced_changes(), "still held after the sync");
    }
}

/// Issue 49: every in-sync copy of the partitions lost for good (the primary served alone,
/// with `--min-copies 1`, and then its disk died). Nothing is promoted on its own: the
/// copies that return are behind, and the file system stays unavailable rather than lose
/// acknowledged changes silently. An administrator's `declare_lost` (`myriad node lost
/// --accept-loss`) serves them again from a behind copy: what only the lost disk held is
/// gone, everything else reads back, and changes are taken. If the lost server returns
/// after all, its diverged copy is made again from the new primary, never mixed in: once
/// it is the only copy left, it serves the new history, not its own.
#[test]
fn a_lost_in_sync_copy_is_replaced_only_by_an_administrator_accepting_the_loss() {
    roomy(lost_copies_replaced_by_the_administrator);
}

async fn lost_copies_replaced_by_the_administrator() {
    let t = Three::new(Some(1)).await;
    let client = t.client();
    client
        .mkdir("/a", 0o755)
        .await
        .unwrap_or_else(|e| panic!("mkdir with every copy up: {e}"));
    let root = t.map.ring().owner_of_dir("/");
    let lost = t.map.primary_of(root).unwrap_or(NodeId(1));
    let others: Vec<NodeId> = (1..=3).map(NodeId).filter(|i| *i != lost).collect();
    // Both other copies crash: every partition is served by `lost` alone.
    let mut map = t.map.clone();
    for &o in &others {
        t.crash(o);
        map = map.mark_down(o).unwrap_or_else(|| panic!("mark {o} down"));
    }
    t.install(&map).await;
    client
        .mkdir("/b", 0o755)
        .await
        .unwrap_or_else(|e| panic!("mkdir on one disk with --min-copies 1: {e}"));
    // Its disk is lost for good; the others return, behind.
    t.crash(lost);
    map = map
        .mark_down(lost)
        .unwrap_or_else(|| panic!("mark {lost} down"));
    for &o in &others {
        map = map.mark_up(o).unwrap_or_else(|| panic!("mark {o} up"));
    }
    for &o in &others {
        t.start_server(o, &map);
    }
    t.install(&map).await;
    for &o in &others {
        if let Some(s) = t.net.server(o) {
            s.open().await.unwrap_or_else(|e| panic!("reopen {o}: {e}"));
        }
    }
    assert_eq!(map.primary_of(root), None, "a behind copy was promoted");
    assert!(
        client.stat("/a").await.is_err(),
        "served with every in-sync copy gone"
    );
    // The administrator accepts the loss.
    let plan = map
        .declare_lost(&std::collections::BTreeSet::from([lost]))
        .unwrap_or_else(|e| panic!("declare lost: {e}"));
    assert_eq!(plan.forced.len(), map.partitions.len(), "{plan:?}");
    map = plan.next.unwrap_or_else(|| panic!("nothing forced"));
    t.install(&map).await;
    client
        .stat("/a")
        .await
        .unwrap_or_else(|e| panic!("/a, made with every copy up, after the forced promotion: {e}"));
    assert_eq!(
        client.stat("/b").await.err(),
        Some(FsError::NotFound),
        "/b was on the lost disk alone: this test tests nothing"
    );
    client
        .mkdir("/c", 0o755)
        .await
        .unwrap_or_else(|e| panic!("mkdir after the forced promotion: {e}"));
    // The lost server returns with its disk after all: behind everywhere, its copies
    // (which hold /b and lack /c) are made again from the new primaries.
    map = map
        .mark_up(lost)
        .unwrap_or_else(|| panic!("mark {lost} up"));
    let back = t.start_server(lost, &map);
    t.install(&map).await;
    back.open()
        .await
        .unwrap_or_else(|e| panic!("reopen {lost}: {e}"));
    assert!(
        map.partitions.iter().all(|p| p.behind.contains(&lost)),
        "the returning lost copy is not behind"
    );
    let mut level = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let theirs = t.net.server(others[0]).map(|s| s.digests());
        if theirs.is_some_and(|d| d == back.digests()) {
            level = true;
            break;
        }
    }
    assert!(level, "the returned copy was never made level");
    let synced: Vec<_> = map.partitions.iter().map(|p| (p.id, lost)).collect();
    map = map
        .caught_up(&synced)
        .unwrap_or_else(|| panic!("caught up"));
    // Now the other two are lost: the returned copy serves the new history.
    for &o in &others {
        t.crash(o);
        map = map.mark_down(o).unwrap_or_else(|| panic!("mark {o} down"));
    }
    t.install(&map).await;
    assert_eq!(map.primary_of(root), Some(lost));
    client.stat("/c").await.unwrap_or_else(|e| {
        panic!("/c, made after the forced promotion, on the returned copy: {e}")
    });
    assert_eq!(
        client.stat("/b").await.err(),
        Some(FsError::NotFound),
        "the returned copy kept its own history"
    );
}

/// A directory removed by recovery (its rmdir's outcome was unknown to the partition that
/// ran it) takes its replicated permissions with it before its name is free: a directory
/// made again at the path is not judged by the old one's setgid bit and group. Found by
/// chaos_long (nsx seed 49 step 8385: a file made by root in a directory made again had
/// the old directory's group).
#[test]
fn a_directory_removed_by_recovery_takes_its_replicas_with_it() {
    roomy(recovered_rmdir_drops_replicas);
}

async fn recovered_rmdir_drops_replicas() {
    // A lease long enough that a stale replica outlives the whole test.
    let t = Three::with_lease(None, Some(Duration::from_secs(600))).await;
    let root = t.client();
    // A directory whose entries another partition keeps than its own entry: that one
    // resolves its permissions through a replica.
    let ring = t.map.ring();
    let top = ring.owner_of_dir("/");
    let d = (0..100)
        .map(|i| format!("/d{i}"))
        .find(|d| ring.owner_of_dir(d) != top)
        .unwrap_or_else(|| panic!("no directory elsewhere"));
    root.mkdir(&d, 0o777)
        .await
        .unwrap_or_else(|e| panic!("mkdir: {e}"));
    root.chown(&d, None, Some(1000))
        .await
        .unwrap_or_else(|e| panic!("chown: {e}"));
    root.chmod(&d, 0o2777)
        .await
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let x = format!("{d}/x");
    root.create(&x, 0o644, true, b"x")
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
    let gid = root.stat(&x).await.map(|i| i.gid);
    assert_eq!(gid, Ok(1000), "setgid directory: the file takes its group");
    root.unlink(&x)
        .await
        .unwrap_or_else(|e| panic!("unlink: {e}"));
    // The rmdir's removal of the directory object is applied but its answer lost: the
    // partition running it gives up, and recovery finishes it.
    t.net.lose_answers(Some("dirobj_remove"));
    let mut config = ClientConfig::new(t.map.clone(), Caller::root(), t.keys.clone());
    config.id = 7;
    config.request_timeout = Duration::from_secs(3);
    let short = Client::with_transport(config, Arc::new(Endpoint::new(t.net.clone(), CLIENTS)))
        .unwrap_or_else(|e| panic!("client: {e}"));
    let unknown = short.rmdir(&d).await;
    assert!(unknown.is_err(), "rmdir answered: {unknown:?}");
    tokio::time::sleep(Duration::from_secs(20)).await;
    t.net.lose_answers(None);
    let mut gone = false;
    for _ in 0..300 {
        if root.stat(&d).await == Err(FsError::NotFound) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "recovery never finished the rmdir");
    // Made again, without setgid and owned by root's group: a file made there by a user
    // takes that user's group.
    root.mkdir(&d, 0o777)
        .await
        .unwrap_or_else(|e| panic!("mkdir again: {e}"));
    let user = Caller {
        uid: 1001,
        gid: 1001,
        groups: Vec::new(),
    };
    let mut config = ClientConfig::new(t.map.clone(), user, t.keys.clone());
    config.id = 8;
    let c = Client::with_transport(config, Arc::new(Endpoint::new(t.net.clone(), CLIENTS)))
        .unwrap_or_else(|e| panic!("client: {e}"));
    let f = format!("{d}/f");
    c.create(&f, 0o644, true, b"f")
        .await
        .unwrap_or_else(|e| panic!("create as 1001: {e}"));
    let got = root.stat(&f).await.map(|i| (i.uid, i.gid));
    assert_eq!(
        got,
        Ok((1001, 1001)),
        "the new directory was judged by the removed one's setgid and group"
    );
}
