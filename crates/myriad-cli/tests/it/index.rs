//! Metadata indexes (issue 20, docs/metadata-index.md): a client with indexes on answers
//! a frozen tree's lookups, stats, missing names, listings, readlinks and small-file
//! reads from the tree's index with no server request (counted), answers exactly what
//! the servers would (I3), and stops using an index once it is dropped, before the tree
//! can change (I1).

use std::collections::BTreeMap;
use std::time::Duration;

use myriad_client::proto::XattrMode;
use myriad_client::{BuildOptions, Caller, Client, ClientConfig, FsError};

use crate::harness::TestCluster;

pub(crate) fn ok<T>(r: Result<T, FsError>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

pub(crate) fn caller(uid: u32) -> Caller {
    Caller {
        uid,
        gid: uid,
        groups: vec![],
    }
}

pub(crate) fn plain(tc: &TestCluster, who: Caller) -> Client {
    tc.client_as(tc.map.clone(), Duration::from_secs(10), who)
}

/// A client answering from indexes (they need leases), keeping them in `cache`.
pub(crate) fn indexed(tc: &TestCluster, who: Caller, cache: &std::path::Path) -> Client {
    let mut cfg = ClientConfig::new(tc.map.clone(), who, tc.keys());
    cfg.request_timeout = Duration::from_secs(10);
    cfg.leases = true;
    cfg.indexes = true;
    cfg.index_cache_dir = Some(cache.to_path_buf());
    Client::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// Requests about names and contents the servers received (all but lease upkeep and
/// the counters' own), by kind.
pub(crate) async fn metadata_requests(c: &Client) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (_, r) in c.all_counters().await {
        for o in ok(r, "counters").client_requests {
            if ![
                "lease_poll",
                "index_candidates",
                "index_readers",
                "lease_renew",
                "get_counters",
                "get_map",
                "statfs",
            ]
            .contains(&o.op.as_ref())
            {
                *out.entry(o.op.to_string()).or_insert(0) += o.count;
            }
        }
    }
    out
}

pub(crate) fn total(m: &BTreeMap<String, u64>) -> u64 {
    m.values().sum()
}

const DIRS: usize = 20;
const FILES: usize = 500;

/// /sw: `DIRS` directories of `FILES` small files, a symlink, a private corner.
async fn software_tree(c: &Client) {
    ok(c.mkdir("/sw", 0o755).await, "mkdir");
    for d in 0..DIRS {
        let dir = format!("/sw/d{d}");
        ok(c.mkdir(&dir, 0o755).await, "mkdir");
        let creates = (0..FILES).map(|f| {
            let path = format!("{dir}/f{f}.py");
            async move {
                let body = format!("# module {path}\n");
                ok(c.create(&path, 0o644, true, body.as_bytes()).await, &path);
            }
        });
        futures::future::join_all(creates).await;
    }
    ok(c.symlink("d0/f0.py", "/sw/link").await, "symlink");
    ok(c.mkdir("/sw/private", 0o700).await, "mkdir");
    ok(
        c.create("/sw/private/key", 0o600, true, b"k").await,
        "create",
    );
    ok(c.create("/sw/mine", 0o600, true, b"m").await, "create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_answers_a_ten_thousand_name_tree_from_its_index_with_no_request() {
    let tc = TestCluster::start(4);
    let root = plain(&tc, Caller::root());
    software_tree(&root).await;
    let report = ok(
        root.build_index("/sw", BuildOptions::default()).await,
        "build",
    );
    assert_eq!(report.frozen_dirs, DIRS + 2);
    assert_eq!(
        report.indexed_dirs,
        DIRS + 1,
        "the private directory is left out"
    );
    assert_eq!(report.inline_files, DIRS * FILES, "public files only");
    assert_eq!(
        root.create("/sw/d0/new", 0o644, true, b"").await.err(),
        Some(FsError::ReadOnly)
    );
    // What the servers answer, before anyone reads from the index.
    let mut listings = BTreeMap::new();
    for d in 0..DIRS {
        let dir = format!("/sw/d{d}");
        listings.insert(dir.clone(), ok(root.readdir(&dir).await, "readdir"));
    }

    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let user = indexed(&tc, caller(1000), cache.path());
    // First use: the registry, the tree's root and the index are read.
    ok(user.stat("/sw/d0/f0.py").await, "stat");
    assert_eq!(user.index_stats().loads, 1);
    let before = metadata_requests(&root).await;
    for (dir, entries) in &listings {
        assert_eq!(&ok(user.readdir(dir).await, dir), entries, "{dir}");
        for e in entries {
            let path = format!("{dir}/{}", e.name);
            assert_eq!(ok(user.stat(&path).await, &path), e.inode, "{path}");
            let (inode, data) = ok(user.lookup_head(&path, 1 << 20).await, &path);
            assert_eq!(inode, e.inode);
            assert_eq!(data, format!("# module {path}\n").into_bytes(), "{path}");
            let missing = format!("{path}c");
            assert_eq!(user.stat(&missing).await.err(), Some(FsError::NotFound));
        }
    }
    assert_eq!(ok(user.readlink("/sw/link").await, "readlink"), "d0/f0.py");
    assert_eq!(
        ok(user.fetch("/sw/d3/f7.py").await, "fetch").1,
        b"# module /sw/d3/f7.py\n"
    );
    assert_eq!(
        user.stat("/sw/nothing").await.err(),
        Some(FsError::NotFound)
    );
    let after = metadata_requests(&root).await;
    let asked = total(&after) - total(&before);
    assert_eq!(
        asked,
        0,
        "{} lookups, stats, missing names and listings: requests before {before:?}, after {after:?}",
        DIRS * FILES * 3
    );
    assert!(user.index_stats().hits >= (DIRS * FILES * 3) as u64);

    // What the index does not hold, or holds but this caller may not see, is asked: the
    // servers' answers, errors included.
    assert_eq!(
        user.stat("/sw/private/key").await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        user.fetch("/sw/mine").await.err(),
        Some(FsError::PermissionDenied)
    );
    assert!(total(&metadata_requests(&root).await) > total(&after));

    // Another client of this machine loads the index from the local cache.
    let second = indexed(&tc, caller(1000), cache.path());
    ok(second.stat("/sw/d1/f1.py").await, "stat");
    assert_eq!(second.index_stats().loads, 1);
    let files = std::fs::read_dir(cache.path())
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(files, 1, "one index file cached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_from_an_index_are_the_servers_answers_for_every_caller() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    ok(root.mkdir_p("/t/open/deep", 0o755).await, "mkdir");
    ok(root.mkdir("/t/shut", 0o700).await, "mkdir");
    ok(root.mkdir("/t/list_only", 0o711).await, "mkdir");
    ok(
        root.create("/t/list_only/x", 0o644, true, b"x").await,
        "create",
    );
    ok(root.create("/t/shut/s", 0o644, true, b"s").await, "create");
    ok(
        root.create("/t/open/deep/f", 0o644, true, b"deep").await,
        "create",
    );
    ok(
        root.create("/t/open/private", 0o600, true, b"p").await,
        "create",
    );
    ok(
        root.create("/t/open/group", 0o640, true, b"g").await,
        "create",
    );
    ok(root.chown("/t/open/group", None, Some(50)).await, "chown");
    // Owner denied what others may: the first matching class decides.
    ok(
        root.create("/t/open/odd", 0o077, true, b"o").await,
        "create",
    );
    ok(root.chown("/t/open/odd", Some(1000), None).await, "chown");
    ok(
        root.create("/t/open/big", 0o644, true, &vec![1u8; 100_000])
            .await,
        "create",
    );
    ok(
        root.create("/t/open/target", 0o644, true, b"t").await,
        "create",
    );
    ok(root.link("/t/open/target", "/t/open/hard").await, "link");
    ok(
        root.create("/t/open/tagged", 0o644, true, b"x").await,
        "create",
    );
    ok(
        root.set_xattr(
            "/t/open/tagged",
            "user.k",
            Some(&b"v"[..]),
            XattrMode::Either,
        )
        .await,
        "xattr",
    );
    ok(root.symlink("deep/f", "/t/open/l").await, "symlink");
    ok(
        root.build_index("/t", BuildOptions::default()).await,
        "build",
    );

    let paths = [
        "/t",
        "/t/open",
        "/t/open/deep",
        "/t/open/deep/f",
        "/t/open/deep/no",
        "/t/open/private",
        "/t/open/group",
        "/t/open/odd",
        "/t/open/big",
        "/t/open/hard",
        "/t/open/target",
        "/t/open/tagged",
        "/t/open/l",
        "/t/open/none",
        "/t/shut",
        "/t/shut/s",
        "/t/shut/none",
        "/t/list_only",
        "/t/list_only/x",
        "/t/list_only/y",
        "/t/open/deep/f/under",
    ];
    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for who in [
        caller(1000),
        caller(2000),
        Caller {
            uid: 3000,
            gid: 3000,
            groups: vec![50],
        },
        Caller::root(),
    ] {
        let servers = plain(&tc, who.clone());
        let index = indexed(&tc, who.clone(), cache.path());
        for p in paths {
            let what = format!("{p} as {}", who.uid);
            assert_eq!(index.stat(p).await, servers.stat(p).await, "stat {what}");
            assert_eq!(index.fetch(p).await, servers.fetch(p).await, "fetch {what}");
            assert_eq!(
                index.readdir(p).await,
                servers.readdir(p).await,
                "readdir {what}"
            );
            assert_eq!(
                index.readlink(p).await,
                servers.readlink(p).await,
                "readlink {what}"
            );
        }
        assert!(
            index.index_stats().hits > 0,
            "the index answered for {}",
            who.uid
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_index_is_not_used_once_the_drop_returns() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    ok(root.mkdir("/sw", 0o755).await, "mkdir");
    ok(root.create("/sw/f", 0o644, true, b"one").await, "create");
    let built = ok(
        root.build_index("/sw", BuildOptions::default()).await,
        "build",
    );
    assert_eq!(
        ok(root.index_registry().await, "registry").trees,
        vec![built.tree.clone()]
    );
    // Nested or repeated builds are refused: one index per tree.
    for again in ["/sw", "/"] {
        assert!(matches!(
            root.build_index(again, BuildOptions::default()).await,
            Err(FsError::InvalidArgument(_))
        ));
    }
    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let reader = indexed(&tc, caller(1000), cache.path());
    assert_eq!(ok(reader.fetch("/sw/f").await, "fetch").1, b"one");
    let hits = reader.index_stats().hits;
    assert!(hits > 0);

    assert_eq!(ok(root.drop_index("/sw").await, "drop"), 1);
    assert!(ok(root.index_registry().await, "registry").trees.is_empty());
    ok(root.unlink("/sw/f").await, "unlink");
    ok(root.create("/sw/f", 0o644, true, b"two").await, "create");
    assert_eq!(ok(reader.fetch("/sw/f").await, "fetch").1, b"two");
    assert_eq!(
        reader.index_stats().hits,
        hits,
        "no answer from the dropped index"
    );

    // Built again: a new version, loaded anew once the registry is leased again (no
    // lease is granted on a directory for a moment after a recall; till then the
    // registry is read at most once a second and no index is trusted).
    let again = ok(
        root.build_index("/sw", BuildOptions::default()).await,
        "build",
    );
    assert!(again.tree.version > built.tree.version);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reader.index_stats().loads < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the new index never loaded"
        );
        assert_eq!(ok(reader.fetch("/sw/f").await, "fetch").1, b"two");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ok(reader.fetch("/sw/f").await, "fetch").1, b"two");
    assert!(reader.index_stats().hits > hits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_answers_an_indexed_tree_and_sees_it_change_once_dropped() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    ok(root.mkdir_p("/sw/lib/pkg", 0o755).await, "mkdir");
    for i in 0..50 {
        let path = format!("/sw/lib/pkg/m{i}.py");
        ok(
            root.create(&path, 0o644, true, format!("x = {i}\n").as_bytes())
                .await,
            &path,
        );
    }
    ok(
        root.create("/sw/lib/pkg/__init__.py", 0o644, true, b"")
            .await,
        "create",
    );
    ok(root.symlink("lib/pkg", "/sw/pkg").await, "symlink");
    ok(
        root.build_index("/sw", BuildOptions::default()).await,
        "build",
    );
    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cache_dir = cache.path().display().to_string();
    let m = crate::mount::Mount::new(&tc, &["--", "--index-cache-dir", &cache_dir]);
    let dir = m.path("");
    // First use loads the index.
    assert_eq!(crate::mount::sh(&dir, "cat sw/lib/pkg/m0.py"), "x = 0\n");
    let before = metadata_requests(&root).await;
    let script = "ls -lR sw > /dev/null && cat sw/lib/pkg/*.py | wc -l && \
        (stat sw/lib/pkg/nope.py 2>&1 || true) | grep -c 'No such file' && \
        PYTHONDONTWRITEBYTECODE=1 python3 -c \"import sys; sys.path.insert(0, 'sw/pkg/..'); \
        sys.path.insert(0, 'sw/nowhere'); import pkg.m7, pkg.m9; print(pkg.m7.x + pkg.m9.x)\"";
    assert_eq!(crate::mount::sh(&dir, script), "50\n1\n16\n");
    let after = metadata_requests(&root).await;
    // The mount's root ("/") and the tree's root ("/sw") live outside the index; their
    // attributes may be asked a few times.
    let asked = total(&after) - total(&before);
    assert!(
        asked <= 4,
        "{asked} requests for a listing, 50 reads, a missing name and an import: before {before:?}, after {after:?}"
    );

    // What the kernel was let keep (attributes, a missing name) goes with the index.
    assert_eq!(
        crate::mount::sh(
            &dir,
            "stat -c %s sw/lib/pkg/m1.py; stat sw/lib/pkg/late.py 2>&1 | grep -c 'No such'"
        ),
        "6\n1\n"
    );
    // Dropped by another client, then changed: the mount sees the change at once.
    ok(root.drop_index("/sw").await, "drop");
    ok(root.unlink("/sw/lib/pkg/m1.py").await, "unlink");
    ok(
        root.create("/sw/lib/pkg/m1.py", 0o644, true, b"x = 1000\n")
            .await,
        "create",
    );
    ok(
        root.create("/sw/lib/pkg/late.py", 0o644, true, b"").await,
        "create",
    );
    assert_eq!(
        crate::mount::sh(&dir, "stat -c %s sw/lib/pkg/m1.py sw/lib/pkg/late.py"),
        "9\n0\n"
    );
    ok(root.unlink("/sw/lib/pkg/m0.py").await, "unlink");
    ok(
        root.create("/sw/lib/pkg/m0.py", 0o644, true, b"x = 100\n")
            .await,
        "create",
    );
    ok(
        root.create("/sw/lib/pkg/new.py", 0o644, true, b"y = 1\n")
            .await,
        "create",
    );
    assert_eq!(
        crate::mount::sh(
            &dir,
            "cat sw/lib/pkg/m0.py sw/lib/pkg/new.py; ls sw/lib/pkg | wc -l"
        ),
        "x = 100\ny = 1\n53\n"
    );
}

/// The servers count reads and know changes per directory: they name the directories
/// read far more than changed (the candidates for automatic indexes), and not one just
/// changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_name_the_directories_read_far_more_than_changed() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    for d in ["/hot", "/warm"] {
        ok(root.mkdir(d, 0o755).await, "mkdir");
        ok(
            root.create(&format!("{d}/f"), 0o644, true, b"x").await,
            "create",
        );
    }
    // Both quiet from here on for a while; then /warm changes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..150 {
        ok(root.stat("/hot/f").await, "stat");
        ok(root.stat("/warm/f").await, "stat");
    }
    ok(root.create("/warm/g", 0o644, true, b"").await, "create");
    let quiet = ok(
        root.index_candidates(100, Duration::from_secs(1)).await,
        "candidates",
    );
    let dirs: Vec<&str> = quiet.iter().map(|d| d.path.as_str()).collect();
    assert!(dirs.contains(&"/hot"), "{quiet:?}");
    assert!(!dirs.contains(&"/warm"), "just changed: {quiet:?}");
    assert!(quiet.iter().all(|d| d.reads >= 100));
    let any = ok(
        root.index_candidates(100, Duration::ZERO).await,
        "candidates",
    );
    assert!(
        any.iter()
            .any(|d| d.path == "/warm" && d.reads >= 150 && d.since_ms.is_some()),
        "{any:?}"
    );
    assert!(
        ok(
            root.index_candidates(1_000_000, Duration::ZERO).await,
            "candidates"
        )
        .is_empty()
    );
}
