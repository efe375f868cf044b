//! Automatic indexes (issue 20, docs/metadata-index.md "Automatic indexes"): the tree
//! stays writable, and its first change unregisters the index (every client stops
//! answering from it first), so the next read anywhere sees the change.

use std::time::{Duration, Instant};

use myriad_client::{BuildOptions, Caller};

use crate::harness::TestCluster;
use crate::index::{caller, indexed, metadata_requests, ok, plain, total};

/// Mount flags: automatic indexing every second, of directories read 20 times and quiet
/// for a second.
const AUTO_FAST: [&str; 7] = [
    "--",
    "--auto-index-every",
    "1",
    "--auto-index-min-reads",
    "20",
    "--auto-index-quiet-secs",
    "1",
];

/// A client reading through directory leases: its reads name it, so the servers count it
/// as one reader of what it reads (`HotDir::readers`).
fn leased(tc: &TestCluster, who: Caller) -> myriad_client::Client {
    let mut cfg = myriad_client::ClientConfig::new(tc.map.clone(), who, tc.keys());
    cfg.request_timeout = Duration::from_secs(10);
    cfg.leases = true;
    myriad_client::Client::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// Reads every module of /sw/lib/pkg (`n` of them) and the directories above, once
/// each: about `n` reads of /sw/lib/pkg reaching the servers.
async fn read_package(c: &myriad_client::Client, n: usize) {
    for i in 0..n {
        for path in ["/sw/lib", "/sw/lib/pkg", &format!("/sw/lib/pkg/m{i}.py")] {
            ok(c.stat(path).await, path);
        }
    }
}

/// The automatic index the mounts build of `/sw` within 30 s (`what`: who should have).
async fn wait_for_auto_index_of_sw(root: &myriad_client::Client, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reg = ok(root.index_registry().await, "registry");
        if let Some(t) = reg.trees.first() {
            assert!(t.auto && t.root == "/sw", "{t:?}");
            return;
        }
        assert!(Instant::now() < deadline, "no index of /sw: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// /sw/lib/pkg with `n` small modules.
async fn package(c: &myriad_client::Client, n: usize) {
    ok(c.mkdir_p("/sw/lib/pkg", 0o755).await, "mkdir");
    for i in 0..n {
        let path = format!("/sw/lib/pkg/m{i}.py");
        let body = format!("x = {i}\n");
        ok(c.create(&path, 0o644, true, body.as_bytes()).await, &path);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_index_is_dropped_by_every_holder_at_its_trees_first_change() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    package(&root, 20).await;
    ok(root.mkdir("/sw/share", 0o755).await, "mkdir");
    let opts = BuildOptions {
        auto: true,
        ..BuildOptions::default()
    };
    let built = ok(root.build_index("/sw", opts).await, "build");
    assert!(built.tree.auto);
    assert_eq!(built.frozen_dirs, 4, "every directory marked");
    let registry = ok(root.index_registry().await, "registry");
    assert_eq!(registry.trees, vec![built.tree.clone()]);

    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let reader = indexed(&tc, caller(1000), cache.path());
    assert_eq!(
        ok(reader.fetch("/sw/lib/pkg/m1.py").await, "fetch").1,
        b"x = 1\n"
    );
    let before = metadata_requests(&root).await;
    for i in 0..20 {
        ok(reader.stat(&format!("/sw/lib/pkg/m{i}.py")).await, "stat");
    }
    assert!(matches!(
        reader.stat("/sw/lib/pkg/none.py").await,
        Err(myriad_client::FsError::NotFound)
    ));
    let asked = total(&metadata_requests(&root).await) - total(&before);
    assert!(
        asked <= 2,
        "{asked} requests for 21 stats answered from the index"
    );
    let hits = reader.index_stats().hits;
    assert!(hits >= 21, "{hits}");
    // Per index, as mounts report them for `myriad index status`.
    let mine = reader.index_hits();
    assert_eq!(mine.get(&built.tree.file), Some(&hits), "{mine:?}");
    ok(root.report_index_hits(7, &mine).await, "report");
    ok(root.report_index_hits(8, &mine).await, "report");
    let all = ok(root.index_hit_counts().await, "hit counts");
    assert_eq!(all.get(&built.tree.file), Some(&(2 * hits)), "{all:?}");
    // A report replaces the reporter's last one.
    let more = [(built.tree.file.clone(), hits + 1000)]
        .into_iter()
        .collect();
    ok(root.report_index_hits(8, &more).await, "report");
    let all = ok(root.index_hit_counts().await, "hit counts");
    assert_eq!(
        all.get(&built.tree.file),
        Some(&(2 * hits + 1000)),
        "{all:?}"
    );

    // Not frozen: the change applies (after the servers unregistered the index).
    ok(root.unlink("/sw/lib/pkg/m1.py").await, "unlink");
    ok(
        root.create("/sw/lib/pkg/m1.py", 0o644, true, b"x = 1000\n")
            .await,
        "create",
    );
    assert!(
        ok(root.index_registry().await, "registry").trees.is_empty(),
        "the change unregistered the index"
    );
    assert_eq!(
        ok(reader.fetch("/sw/lib/pkg/m1.py").await, "fetch").1,
        b"x = 1000\n"
    );
    assert_eq!(
        reader.index_stats().hits,
        hits,
        "no answer from the old index"
    );
    // Other directories of the tree change freely too (their marks go at their first
    // change); the tree can be indexed again, and that index is used.
    ok(
        root.create("/sw/share/new", 0o644, true, b"n").await,
        "create",
    );
    ok(
        root.rename("/sw/share", "/sw/shared", Default::default())
            .await,
        "rename",
    );
    let again = ok(root.build_index("/sw", opts).await, "build again");
    assert!(again.tree.version > built.tree.version);
    let deadline = Instant::now() + Duration::from_secs(10);
    while reader.index_stats().loads < 2 {
        assert!(Instant::now() < deadline, "the new index never loaded");
        assert_eq!(ok(reader.fetch("/sw/shared/new").await, "fetch").1, b"n");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        ok(reader.fetch("/sw/lib/pkg/m1.py").await, "fetch").1,
        b"x = 1000\n"
    );
    // The index files of builds no longer registered are swept by the next build.
    let files: Vec<String> = ok(root.readdir("/.myriad/index").await, "readdir")
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.contains('.'))
        .collect();
    assert_eq!(files, vec![again.tree.file.clone()]);
}

/// Two mounts build an automatic index by themselves once a tree is read far more than
/// changed; a change through one is seen by the other's next read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_index_a_read_mostly_tree_by_themselves_and_see_its_change() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    package(&root, 30).await;
    let auto = AUTO_FAST;
    let a = crate::mount::Mount::new(&tc, &auto);
    let b = crate::mount::Mount::new(&tc, &auto);
    let (da, db) = (a.path(""), b.path(""));
    // Read by two clients (each read of a new name reaches the servers: a stat of a name
    // is a read of its directory), quiet after.
    for who in [1000, 1001] {
        read_package(&leased(&tc, caller(who)), 30).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let tree = loop {
        let reg = ok(root.index_registry().await, "registry");
        if let Some(t) = reg.trees.into_iter().next() {
            break t;
        }
        assert!(Instant::now() < deadline, "no mount indexed /sw");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(tree.auto && tree.root == "/sw", "{tree:?}");
    assert_eq!(crate::mount::sh(&db, "cat sw/lib/pkg/m1.py"), "x = 1\n");
    let before = metadata_requests(&root).await;
    assert_eq!(
        crate::mount::sh(&db, "cat sw/lib/pkg/m*.py | wc -l; ls sw/lib/pkg | wc -l"),
        "30\n30\n"
    );
    let asked = total(&metadata_requests(&root).await) - total(&before);
    assert!(asked <= 4, "{asked} requests for 30 reads and a listing");

    crate::mount::sh(
        &da,
        "echo 'x = 1000' > sw/lib/pkg/m1.py; echo new > sw/lib/pkg/late.py",
    );
    assert_eq!(
        crate::mount::sh(
            &db,
            "cat sw/lib/pkg/m1.py sw/lib/pkg/late.py; ls sw/lib/pkg | wc -l"
        ),
        "x = 1000\nnew\n31\n"
    );
    // The change unregistered the index (the tree, quiet again, may be indexed anew by
    // then: a new version, built after the change).
    let now = ok(root.index_registry().await, "registry").trees;
    assert!(
        now.iter().all(|t| t.version > tree.version),
        "{now:?} after {tree:?}"
    );
}

/// A mount started after an automatic index was built answers from it as from a manual
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_mount_answers_from_an_automatic_index() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    package(&root, 30).await;
    let opts = BuildOptions {
        auto: true,
        ..BuildOptions::default()
    };
    ok(root.build_index("/sw", opts).await, "build");
    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cache_dir = cache.path().display().to_string();
    let m = crate::mount::Mount::new(&tc, &["--", "--index-cache-dir", &cache_dir]);
    let dir = m.path("");
    assert_eq!(crate::mount::sh(&dir, "cat sw/lib/pkg/m0.py"), "x = 0\n");
    let before = metadata_requests(&root).await;
    assert_eq!(
        crate::mount::sh(
            &dir,
            "cat sw/lib/pkg/m*.py | wc -l; ls -l sw/lib/pkg | wc -l"
        ),
        "30\n31\n"
    );
    let asked = total(&metadata_requests(&root).await) - total(&before);
    assert!(asked <= 4, "{asked} requests for 30 reads and a listing");
}

/// A mount does not index a tree it wrote itself lately (issue 51 item 5: one mount
/// indexed every crate directory of a tree it had just unpacked, read, and was about to
/// remove), however hard the tree is read meanwhile; a mount that did not write it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_does_not_index_a_tree_it_wrote_lately() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    let auto = AUTO_FAST;
    let writer = crate::mount::Mount::new(&tc, &auto);
    crate::mount::sh(
        &writer.path(""),
        "mkdir -p sw/lib/pkg && for i in $(seq 0 29); do echo \"x = $i\" > sw/lib/pkg/m$i.py; done",
    );
    // Read hard by one client without leases (each of its reads reaches the servers,
    // and none names it: 90 reads of /sw/lib/pkg, past `alone` times `min_reads`),
    // quiet after.
    let reader = plain(&tc, caller(1000));
    let hot = || async {
        for _ in 0..3 {
            read_package(&reader, 30).await;
        }
    };
    hot().await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let reg = ok(root.index_registry().await, "registry");
    assert!(
        reg.trees.is_empty(),
        "the mount that wrote /sw indexed it: {:?}",
        reg.trees
    );
    // Another mount, which wrote nothing there, indexes it.
    let other = crate::mount::Mount::new(&tc, &auto);
    hot().await;
    wait_for_auto_index_of_sw(&root, "the other mount should have").await;
    drop(other);
    drop(writer);
}

/// A tree read by one client no harder than `min_reads` is not indexed; read so by a
/// second client too, it is (issue 51 item 5: evidence of reads from several clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_read_lightly_is_indexed_once_a_second_client_reads_it() {
    let tc = TestCluster::start(3);
    let root = plain(&tc, Caller::root());
    package(&root, 30).await;
    let m = crate::mount::Mount::new(&tc, &AUTO_FAST);
    // One reader: about 60 reads of /sw/lib/pkg (62 when written), past `min_reads`
    // (20), short of `alone` times it (80).
    read_package(&leased(&tc, caller(1000)), 30).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let reg = ok(root.index_registry().await, "registry");
    assert!(
        reg.trees.is_empty(),
        "a tree read by one client at min_reads was indexed: {:?}",
        reg.trees
    );
    let hot = ok(root.index_candidates(1, Duration::ZERO).await, "candidates");
    let pkg = hot.iter().find(|d| d.path == "/sw/lib/pkg");
    assert!(
        pkg.is_some_and(|d| d.readers == 1 && d.reads >= 20),
        "{pkg:?} in {hot:?}"
    );
    // A second reader: two readers of a hot directory.
    read_package(&leased(&tc, caller(1001)), 30).await;
    wait_for_auto_index_of_sw(&root, "two clients read it").await;
    drop(m);
}
