//! Directory leases (docs/fuse.md "Directory leases"): a client answers names and
//! attributes from its cache while it holds a lease, and another client's change recalls
//! the lease before it is applied.

use std::time::{Duration, Instant};

use crate::harness::TestCluster;
use myriad_client::proto::{ClientRequest, Request, Response};
use myriad_client::{Caller, Client, ClientConfig, FsError};

fn client(tc: &TestCluster, leases: bool) -> Client {
    let mut cfg = ClientConfig::new(tc.map.clone(), Caller::root(), tc.keys());
    cfg.request_timeout = Duration::from_secs(10);
    cfg.leases = leases;
    Client::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn ok<T>(r: Result<T, FsError>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn io(r: std::io::Result<()>) {
    r.unwrap_or_else(|e| panic!("{e}"));
}

/// A file's permission bits, through a mount.
fn mode(p: std::path::PathBuf) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Requests clients send in the background, whatever the test does.
const BACKGROUND_OPS: [&str; 4] = [
    "lease_poll",
    "lease_renew",
    "index_candidates",
    "index_readers",
];

/// Client requests the servers received by kind, but for background work: lease upkeep
/// and the mounts' automatic indexing rounds.
pub(crate) async fn received_by_op(c: &Client) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for (_, r) in c.all_counters().await {
        for o in r.unwrap_or_else(|e| panic!("{e}")).client_requests {
            if !BACKGROUND_OPS.contains(&o.op.as_ref()) {
                *out.entry(o.op.to_string()).or_insert(0) += o.count;
            }
        }
    }
    out
}

/// Client requests the servers received, background work aside.
async fn reads_received(c: &Client) -> u64 {
    c.all_counters()
        .await
        .into_iter()
        .map(|(_, r)| {
            r.unwrap_or_else(|e| panic!("{e}"))
                .client_requests
                .iter()
                .filter(|o| !BACKGROUND_OPS.contains(&o.op.as_ref()))
                .map(|o| o.count)
                .sum::<u64>()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_name_is_answered_locally_until_another_client_changes_it() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let (a, b) = (client(&tc, true), client(&tc, false));
    ok(b.mkdir("/d", 0o755).await);
    ok(b.create("/d/f", 0o644, true, b"one").await);

    // A reads a name and a missing one: both kept under A's lease on /d.
    let (_, data) = ok(a.fetch_head("/d/f", 4096).await);
    assert_eq!(data, b"one");
    assert_eq!(a.stat("/d/gone").await, Err(FsError::NotFound));
    assert!(a.lease_until("/d").is_some(), "a lease on /d was granted");
    let before = reads_received(&a).await;
    for _ in 0..3 {
        assert_eq!(ok(a.stat("/d/f").await).size, 3);
        assert_eq!(ok(a.fetch_head("/d/f", 4096).await).1, b"one");
        assert_eq!(a.stat("/d/gone").await, Err(FsError::NotFound));
    }
    assert_eq!(
        reads_received(&a).await,
        before,
        "answered from the lease: no request reached a server"
    );

    // B changes both: A's lease is recalled before each change applies, and A sees the
    // changes at once.
    let t = Instant::now();
    ok(b.create("/d/gone", 0o644, true, b"new").await);
    assert!(
        t.elapsed() < Duration::from_millis(600),
        "A gave its lease back when asked, B did not wait it out: {:?}",
        t.elapsed()
    );
    ok(b.chmod("/d/f", 0o600).await);
    assert_eq!(ok(a.fetch_head("/d/gone", 4096).await).1, b"new");
    assert_eq!(ok(a.stat("/d/f").await).mode & 0o777, 0o600);
    ok(b.unlink("/d/gone").await);
    assert_eq!(a.stat("/d/gone").await, Err(FsError::NotFound));

    // A's own changes never wait for its own lease, and what it changed is not answered
    // from the cache.
    let (_, _) = ok(a.fetch_head("/d/f", 4096).await);
    let t = Instant::now();
    ok(a.chmod("/d/f", 0o640).await);
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "a client's change does not recall its own lease: {:?}",
        t.elapsed()
    );
    assert_eq!(ok(a.stat("/d/f").await).mode & 0o777, 0o640);
}

/// A stat with a lease for a holder that never polls.
fn leased_stat(path: &str) -> Request {
    Request::Client(myriad_proto::Envelope::Leased {
        holder: 0x5eed,
        request: ClientRequest::Stat { path: path.into() },
        exclusive: false,
    })
}

/// A holder that never answers recalls (here: one with no poll at all) holds a change
/// back for at most the lease period (0.8 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_lease_holder_holds_changes_back_at_most_a_lease_period() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let b = client(&tc, false);
    ok(b.mkdir("/d", 0o755).await);
    ok(b.create("/d/f", 0o644, true, b"x").await);
    let pid = b.owner_of_entry("/d/f");
    match ok(b.request(pid, leased_stat("/d/f")).await) {
        Response::Leased {
            answer: Ok(_),
            lease: Some(_),
        } => {}
        other => panic!("expected a granted lease: {other:?}"),
    }
    let t = Instant::now();
    ok(b.chmod("/d/f", 0o600).await);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "the change waited for the silent holder's lease: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "and no longer than about its period: {waited:?}"
    );
    // One change alone does not make the directory contended: leased again at once.
    match ok(b.request(pid, leased_stat("/d/f")).await) {
        Response::Leased {
            answer: Ok(r),
            lease: Some(_),
        } => assert!(matches!(*r, Response::Attr(ref i) if i.mode & 0o777 == 0o600)),
        other => panic!("expected an answer with a lease: {other:?}"),
    }
    // A second change recalling it within the window does: no lease for a while, the
    // read is still answered.
    ok(b.chmod("/d/f", 0o640).await);
    match ok(b.request(pid, leased_stat("/d/f")).await) {
        Response::Leased {
            answer: Ok(r),
            lease: None,
        } => assert!(matches!(*r, Response::Attr(ref i) if i.mode & 0o777 == 0o640)),
        other => panic!("expected an answer without a lease: {other:?}"),
    }
}

/// Two mounts with `--leases`: what one changes, the other sees at once, well inside the
/// kernel's 1 s attribute and entry TTLs: the recall drops the other mount's cached names
/// and the kernel's copies before the change applies, and a name answered without a lease
/// is not kept by the kernel at all. (Without `--leases` it fails at the chmod.)
#[test]
fn two_mounts_with_leases_see_each_others_changes_at_once() {
    use crate::mount::Mount;
    use std::os::unix::fs::PermissionsExt;
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let a = Mount::new(&tc, &["--", "--leases"]);
    let b = Mount::new(&tc, &["--", "--leases"]);
    io(std::fs::create_dir(a.path("d")));
    io(std::fs::write(a.path("d/f"), b"one"));
    // B reads a name and a missing one: both cached (by B and its kernel).
    assert_eq!(std::fs::read(b.path("d/f")).ok(), Some(b"one".to_vec()));
    assert!(!b.path("d/new").exists());
    assert_eq!(mode(b.path("d/f")), 0o644);
    // A changes them; B sees every change at once.
    io(std::fs::set_permissions(
        a.path("d/f"),
        std::fs::Permissions::from_mode(0o600),
    ));
    assert_eq!(mode(b.path("d/f")), 0o600, "chmod seen at once");
    io(std::fs::write(a.path("d/new"), b"new"));
    assert_eq!(
        std::fs::read(b.path("d/new")).ok(),
        Some(b"new".to_vec()),
        "create seen at once"
    );
    io(std::fs::rename(a.path("d/new"), a.path("d/moved")));
    assert!(!b.path("d/new").exists(), "rename seen at once (old name)");
    assert_eq!(std::fs::read(b.path("d/moved")).ok(), Some(b"new".to_vec()));
    io(std::fs::remove_file(a.path("d/f")));
    assert!(!b.path("d/f").exists(), "unlink seen at once");
}

/// With `--leases` the kernel keeps names, missing names and attributes for as long as
/// their lease lasts, which renewals make as long as the directory is used: past the
/// lease period nothing reaches a server. Every way a lease ends takes the kernel's
/// copies back: a recall (another mount's change), idleness (a lease let go, so a later
/// change recalls nothing), and this mount moving the directory (the kernel keeps the
/// names under the new path). Each check fails if the kernel kept its copy.
#[test]
fn a_mount_keeps_leased_names_past_the_period_and_drops_them_with_the_lease() {
    use crate::mount::Mount;
    use std::os::unix::fs::PermissionsExt;
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let a = Mount::new(&tc, &["--", "--leases"]);
    let b = Mount::new(&tc, &["--", "--leases"]);
    let counters = client(&tc, false);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let chmod = |p: std::path::PathBuf, m: u32| {
        io(std::fs::set_permissions(
            p,
            std::fs::Permissions::from_mode(m),
        ))
    };
    io(std::fs::create_dir_all(a.path("d/sub")));
    io(std::fs::write(a.path("d/f"), b"one"));
    io(std::fs::write(a.path("d/sub/x"), b"x"));
    // Past the time a directory is held contended after a recall (the multi-step mkdir
    // recalls its own client's leases too).
    std::thread::sleep(Duration::from_millis(2200));

    // B caches a name and a missing one, and keeps using them for twice the period.
    assert_eq!(mode(b.path("d/f")), 0o644);
    assert!(!b.path("d/missing").exists());
    let start = Instant::now();
    let before = rt.block_on(reads_received(&counters));
    let ops_before = rt.block_on(received_by_op(&counters));
    while start.elapsed() < Duration::from_millis(1600) {
        assert_eq!(mode(b.path("d/f")), 0o644);
        assert!(!b.path("d/missing").exists());
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = rt.block_on(reads_received(&counters));
    assert!(
        after - before <= 4,
        "answered by B's kernel past the lease period: {} server requests ({:?} then {:?})",
        after - before,
        ops_before,
        rt.block_on(received_by_op(&counters))
    );
    // A recall takes them back at once.
    chmod(a.path("d/f"), 0o600);
    assert_eq!(mode(b.path("d/f")), 0o600, "chmod seen at once");
    io(std::fs::write(a.path("d/missing"), b"here"));
    assert!(b.path("d/missing").exists(), "create seen at once");

    // Idle: the lease is let go and the kernel's copy with it. (Cached again once the
    // directory is no longer held contended after the recalls.)
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(mode(b.path("d/f")), 0o600);
    std::thread::sleep(Duration::from_secs(7));
    chmod(a.path("d/f"), 0o640);
    assert_eq!(mode(b.path("d/f")), 0o640, "seen after an idle lease went");

    // B moves a directory whose names its kernel keeps: they are dropped, so a change
    // under the new path is seen at once.
    assert_eq!(mode(b.path("d/sub/x")), 0o644);
    io(std::fs::rename(b.path("d/sub"), b.path("d/sub2")));
    assert_eq!(mode(b.path("d/sub2/x")), 0o644);
    chmod(a.path("d/sub2/x"), 0o600);
    assert_eq!(mode(b.path("d/sub2/x")), 0o600, "seen under the new path");
}

/// A listing comes with a lease: its entries answer the stats that follow (`ls -l`,
/// `find | xargs stat`) with no request, until another client's change recalls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_listing_answers_the_stats_that_follow() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let (a, b) = (client(&tc, true), client(&tc, false));
    ok(b.mkdir("/l", 0o755).await);
    for i in 0..20 {
        ok(b.create(&format!("/l/f{i}"), 0o644, true, b"x").await);
    }
    let listed = ok(a.readdir("/l").await);
    assert_eq!(listed.len(), 20);
    let before = reads_received(&a).await;
    for i in 0..20 {
        assert_eq!(ok(a.stat(&format!("/l/f{i}")).await).size, 1);
    }
    assert_eq!(
        reads_received(&a).await,
        before,
        "answered from the listing's lease"
    );
    ok(b.chmod("/l/f3", 0o600).await);
    assert_eq!(
        ok(a.stat("/l/f3").await).mode & 0o777,
        0o600,
        "seen at once"
    );
}

/// The root's own attributes are kept under the lease on "/" (its record is the entry
/// ("/", "")): answered with no request, and recalled by every change of "/" by another
/// client (its mode, a name added, a directory made in it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roots_attributes_are_leased_and_recalled_by_changes_of_the_root() {
    let tc = TestCluster::start(3);
    let (a, b) = (client(&tc, true), client(&tc, false));
    let first = ok(a.stat("/").await);
    let before = reads_received(&b).await;
    assert_eq!(ok(a.stat("/").await), first);
    assert_eq!(
        reads_received(&b).await - before,
        0,
        "answered from the lease"
    );
    let mode = first.mode ^ 0o001;
    ok(b.chmod("/", mode).await);
    assert_eq!(ok(a.stat("/").await).mode, mode);
    let nlink = ok(a.stat("/").await).nlink;
    ok(b.mkdir("/d", 0o755).await);
    let after = ok(a.stat("/").await);
    assert_eq!(after.nlink, nlink + 1);
    let mtime = after.mtime_ns;
    tokio::time::sleep(Duration::from_millis(5)).await;
    ok(b.create("/f", 0o644, true, b"").await);
    assert!(ok(a.stat("/").await).mtime_ns > mtime);
}

/// A directory a mount holds whole under a lease is listed again by its kernel with no
/// request (`FOPEN_CACHE_DIR`), and every way its contents change takes that copy back:
/// another mount's create, unlink and rename (a recall), and this mount's own changes
/// (the kernel's). Fails without the kept listing (the count) and if a recall left the
/// kernel's copy (a listing that misses another mount's change).
#[test]
fn a_held_listing_is_kept_by_the_kernel_until_the_lease_is_dropped() {
    use crate::mount_metrics::{mount_with_metrics, scrape, value};
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let (a, addr) = mount_with_metrics(&tc, &[]);
    let b = crate::mount::Mount::new(&tc, &[]);
    let listed = |p: std::path::PathBuf| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|e| {
                e.unwrap_or_else(|e| panic!("{e}"))
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        v.sort();
        v
    };
    let listings = || {
        let m = scrape(&addr);
        value(&m, "myriad_mount_kernel_requests_total{op=\"readdirplus\"}")
            + value(&m, "myriad_mount_kernel_requests_total{op=\"readdir\"}")
    };
    io(std::fs::create_dir(a.path("d")));
    // Past the time a directory is held contended after a recall (the mkdir's own).
    std::thread::sleep(Duration::from_millis(2200));
    for n in ["f1", "f2", "f3"] {
        io(std::fs::write(a.path(&format!("d/{n}")), n.as_bytes()));
    }
    assert_eq!(listed(a.path("d")), ["f1", "f2", "f3"]);
    let before = listings();
    for _ in 0..5 {
        assert_eq!(listed(a.path("d")), ["f1", "f2", "f3"]);
    }
    assert_eq!(listings(), before, "listed again by the kernel alone");
    // This mount's own change: the kernel drops its copy.
    io(std::fs::write(a.path("d/f4"), b"4"));
    assert_eq!(listed(a.path("d")), ["f1", "f2", "f3", "f4"]);
    // The kernel's entries of the names go (its listing stays, the directory held open),
    // so only the listing's own invalidation takes it back at the recall (as root); and
    // the directory is listed again once this mount may hold it again, when an open that
    // did not keep the listing would not drop the kernel's copy.
    let _held_open = std::fs::File::open(a.path("d")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed(a.path("d")), ["f1", "f2", "f3", "f4"]);
    let _ = std::fs::write("/proc/sys/vm/drop_caches", b"2");
    let mtime = std::fs::metadata(a.path("d")).and_then(|m| m.modified());
    let mtime = mtime.unwrap_or_else(|e| panic!("{e}"));
    io(std::fs::write(b.path("d/g"), b"g"));
    // As `tar -x` does: the directory's time set back, so the kernel cannot tell by it.
    let d = std::fs::File::open(b.path("d")).unwrap_or_else(|e| panic!("{e}"));
    io(d.set_modified(mtime));
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(listed(a.path("d")), ["f1", "f2", "f3", "f4", "g"], "create");
    // Each other change seen at the next listing.
    io(std::fs::remove_file(b.path("d/f1")));
    assert_eq!(listed(a.path("d")), ["f2", "f3", "f4", "g"], "unlink");
    io(std::fs::rename(b.path("d/f2"), b.path("d/h")));
    assert_eq!(listed(a.path("d")), ["f3", "f4", "g", "h"], "rename");
    // Held again (past the contended time): kept again, and again dropped by a recall.
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(listed(a.path("d")), ["f3", "f4", "g", "h"]);
    assert_eq!(listed(a.path("d")), ["f3", "f4", "g", "h"]);
    let before = listings();
    assert_eq!(listed(a.path("d")), ["f3", "f4", "g", "h"]);
    assert_eq!(listings(), before, "kept again once held again");
    io(std::fs::create_dir(b.path("d/sub")));
    assert_eq!(listed(a.path("d")), ["f3", "f4", "g", "h", "sub"], "mkdir");
}
