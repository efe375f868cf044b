//! Huge directories (docs/huge-dirs.md): online splits under concurrent clients, pre-split
//! directories, listing cursors across splits, renaming and removing split directories.
//! Four real server processes with a low split threshold, so splits happen within seconds.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use myriad_client::{Client, FsError, RenameFlags};

use crate::harness::TestCluster;

/// Low enough that a few thousand files split a directory across all four nodes.
const THRESHOLD: &str = "--dir-split-entries=256";

fn must<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

async fn names(c: &Client, dir: &str) -> Vec<String> {
    must(c.readdir(dir).await)
        .into_iter()
        .map(|e| e.name)
        .collect()
}

/// Waits until the directory's shard map (learned through listings) has `leaves` leaves.
async fn wait_for_leaves(c: &Client, dir: &str, leaves: usize) {
    for _ in 0..200 {
        let _ = c.readdir(dir).await;
        if c.shard_map(dir).is_some_and(|m| m.leaves.len() >= leaves) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!(
        "{dir} never reached {leaves} shards: {:?}",
        c.shard_map(dir)
    );
}

/// Three writers create (and one of them unlinks some of) 3,000 files in one directory
/// while a reader lists it over and over; the directory splits to four shards meanwhile.
/// Every listing has no duplicates and holds every file created before it began and not
/// removed; at the end the directory holds exactly what it should, spread over 4 nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_under_concurrent_create_readdir_unlink() {
    let tc = TestCluster::start_with(4, &[THRESHOLD]);
    let setup = tc.client();
    must(setup.mkdir("/big", 0o755).await);
    // Names committed (created and not removed) so far, and names being removed.
    let present = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let removing = Arc::new(Mutex::new(HashSet::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..3 {
        let (present, removing, c) = (present.clone(), removing.clone(), tc.client());
        writers.push(tokio::spawn(async move {
            for i in 0..1000 {
                let name = format!("w{w}-{i}");
                must(
                    c.create(&format!("/big/{name}"), 0o644, true, name.as_bytes())
                        .await,
                );
                must(present.lock()).insert(name.clone());
                if w == 0 && i % 10 == 9 {
                    let victim = format!("w0-{}", i - 5);
                    must(removing.lock()).insert(victim.clone());
                    must(present.lock()).remove(&victim);
                    must(c.unlink(&format!("/big/{victim}")).await);
                }
            }
        }));
    }
    let reader = {
        let (present, removing, stop, c) =
            (present.clone(), removing.clone(), stop.clone(), tc.client());
        tokio::spawn(async move {
            let mut listings = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let before: BTreeSet<String> = must(present.lock()).clone();
                let listed = names(&c, "/big").await;
                let unique: HashSet<&String> = listed.iter().collect();
                assert_eq!(unique.len(), listed.len(), "a name listed twice");
                let gone = must(removing.lock()).clone();
                for n in before.iter().filter(|n| !gone.contains(*n)) {
                    assert!(
                        unique.contains(n),
                        "{n} existed throughout but was not listed"
                    );
                }
                listings += 1;
            }
            listings
        })
    };
    for w in writers {
        must(w.await);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let listings = must(reader.await);
    assert!(
        listings > 2,
        "the reader listed the directory {listings} times"
    );
    let want: BTreeSet<String> = must(present.lock()).clone();
    assert_eq!(want.len(), 3000 - 100);
    wait_for_leaves(&setup, "/big", 4).await;
    let got: BTreeSet<String> = names(&setup, "/big").await.into_iter().collect();
    assert_eq!(got, want);
    // Every file is readable by path with its own contents.
    for n in want.iter().step_by(37) {
        let (_, data) = must(setup.fetch(&format!("/big/{n}")).await);
        assert_eq!(data, n.as_bytes());
    }
    // Four shards on four distinct nodes.
    let map = setup
        .shard_map("/big")
        .unwrap_or_else(|| panic!("no shard map"));
    let ring = tc.map.ring();
    let nodes: HashSet<myriad_client::PartitionId> = map
        .leaves
        .iter()
        .map(|s| ring.owner_of_shard("/big", *s))
        .collect();
    assert_eq!(nodes.len(), 4, "{map:?}");
    // Batched stats find names in every shard.
    let ask: Vec<String> = want.iter().take(500).cloned().collect();
    let attrs = must(setup.stat_many("/big", &ask).await);
    assert!(attrs.iter().all(Result::is_ok));
}

/// `mkdir --shards 4` spreads a directory from the start; it works like any directory and
/// goes away with rmdir once empty (and not before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presplit_directory_works_and_is_removed_whole() {
    // A threshold over the 1,500 names of /q below: it must stay unsplit over two pages.
    let tc = TestCluster::start_with(4, &["--dir-split-entries=4096"]);
    let c = tc.client();
    must(c.mkdir_sharded("/p", 0o755, 4).await);
    for i in 0..200 {
        must(c.create(&format!("/p/f{i}"), 0o644, true, b"x").await);
    }
    let fresh = tc.client();
    assert_eq!(names(&fresh, "/p").await.len(), 200);
    let map = fresh.shard_map("/p").unwrap_or_else(|| panic!("not split"));
    assert_eq!(map.leaves.len(), 4);
    assert_eq!(c.rmdir("/p").await, Err(FsError::NotEmpty));
    assert_eq!(
        names(&c, "/p").await.len(),
        200,
        "a refused rmdir keeps everything"
    );
    for i in 0..200 {
        must(c.unlink(&format!("/p/f{i}")).await);
    }
    must(c.rmdir("/p").await);
    assert_eq!(c.stat("/p").await.err(), Some(FsError::NotFound));
    // The name is free again, for an ordinary directory.
    must(c.mkdir("/p", 0o755).await);
    must(c.create("/p/again", 0o644, true, b"y").await);
    assert_eq!(names(&fresh, "/p").await, vec!["again".to_string()]);
    // A client still holding the map of a split directory that was replaced by an unsplit
    // one lists the new one correctly, even over several pages.
    let stale = tc.client();
    must(c.mkdir_sharded("/q", 0o755, 4).await);
    let _ = names(&stale, "/q").await;
    assert_eq!(stale.shard_map("/q").map(|m| m.leaves.len()), Some(4));
    must(c.rmdir("/q").await);
    must(c.mkdir("/q", 0o755).await);
    for i in 0..1500 {
        must(c.create(&format!("/q/n{i}"), 0o644, true, b"").await);
    }
    let listed = names(&stale, "/q").await;
    let unique: HashSet<&String> = listed.iter().collect();
    assert_eq!((listed.len(), unique.len()), (1500, 1500));
    assert!(
        stale.shard_map("/q").is_none(),
        "the home said it is unsplit"
    );
    // The CLI makes one too.
    let out = tc.cli(&["mkdir", "--shards", "8", "/cli"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = names(&fresh, "/cli").await;
    assert_eq!(fresh.shard_map("/cli").map(|m| m.leaves.len()), Some(8));
}

/// A listing paged with a name cursor goes on correctly after the directory split between
/// two pages: nothing twice, nothing that existed throughout missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_cursor_stays_valid_across_a_split() {
    let tc = TestCluster::start_with(4, &[THRESHOLD]);
    let c = tc.client();
    must(c.mkdir("/c", 0o755).await);
    for i in 0..200 {
        must(c.create(&format!("/c/old{i}"), 0o644, true, b"").await);
    }
    let (first, cursor) = must(c.readdir_page("/c", None, 50).await);
    assert_eq!(first.len(), 50);
    let mut seen: Vec<String> = first.into_iter().map(|e| e.name).collect();
    for i in 0..2000 {
        must(c.create(&format!("/c/new{i}"), 0o644, true, b"").await);
    }
    let other = tc.client();
    wait_for_leaves(&other, "/c", 4).await;
    let mut cursor = cursor;
    while let Some(after) = cursor {
        let (page, next) = must(c.readdir_page("/c", Some(after), 50).await);
        seen.extend(page.into_iter().map(|e| e.name));
        cursor = next;
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a name listed twice");
    for i in 0..200 {
        assert!(unique.contains(&format!("old{i}")), "old{i} missing");
    }
}

/// A split directory renamed (with a subdirectory) keeps every entry and its shards under
/// the new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_directory_renames_whole() {
    let tc = TestCluster::start_with(4, &[THRESHOLD]);
    let c = tc.client();
    must(c.mkdir_p("/r/sub", 0o755).await);
    must(c.create("/r/sub/deep", 0o644, true, b"deep").await);
    for i in 0..1500 {
        must(
            c.create(&format!("/r/f{i}"), 0o644, true, format!("{i}").as_bytes())
                .await,
        );
    }
    wait_for_leaves(&c, "/r", 4).await;
    must(c.rename("/r", "/moved", RenameFlags::default()).await);
    assert_eq!(c.stat("/r").await.err(), Some(FsError::NotFound));
    let fresh = tc.client();
    assert_eq!(names(&fresh, "/moved").await.len(), 1501);
    // It keeps its shards, each on the node of that shard under the new name.
    let map = fresh
        .shard_map("/moved")
        .unwrap_or_else(|| panic!("arrived unsplit"));
    assert_eq!(map.leaves.len(), 4);
    let ring = tc.map.ring();
    let nodes: HashSet<myriad_client::PartitionId> = map
        .leaves
        .iter()
        .map(|s| ring.owner_of_shard("/moved", *s))
        .collect();
    assert_eq!(nodes.len(), 4);
    // Nothing left behind: no part of /r anywhere, no orphan data, no misplaced entry.
    let out = tc.cli(&["fsck"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for i in (0..1500).step_by(97) {
        let (_, d) = must(fresh.fetch(&format!("/moved/f{i}")).await);
        assert_eq!(d, format!("{i}").as_bytes());
    }
    let (_, d) = must(fresh.fetch("/moved/sub/deep").await);
    assert_eq!(d, b"deep");
    // It keeps growing (and splits again) under its new name.
    for i in 0..400 {
        must(
            fresh
                .create(&format!("/moved/g{i}"), 0o644, true, b"")
                .await,
        );
    }
    assert_eq!(names(&c, "/moved").await.len(), 1901);
}

/// A tree of 10,000 files in 40 directories renamed while readers stat files and list a
/// directory of it: a file is never under neither name, a listing always holds all 250
/// entries of a directory, and afterwards fsck is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_of_a_10000_file_tree_under_concurrent_readers() {
    let tc = TestCluster::start(4);
    let c = Arc::new(tc.client_with(tc.map.clone(), std::time::Duration::from_secs(30)));
    for d in 0..40 {
        must(c.mkdir_p(&format!("/t/d{d}"), 0o755).await);
    }
    let files: Vec<String> = (0..10_000).map(|i| format!("d{}/f{i}", i % 40)).collect();
    let mut s = futures::stream::iter(files.iter().map(|f| {
        let c = c.clone();
        let path = format!("/t/{f}");
        async move { c.create(&path, 0o644, true, b"x").await.map(|_| ()) }
    }))
    .buffer_unordered(64);
    while let Some(r) = s.next().await {
        must(r);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checks = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut readers = Vec::new();
    for r in 0..3usize {
        let (c, stop, checks, files) = (c.clone(), stop.clone(), checks.clone(), files.clone());
        readers.push(tokio::spawn(async move {
            let mut i = r * 997;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let f = &files[i % files.len()];
                i += 7919;
                let old = c.stat(&format!("/t/{f}")).await;
                let new = c.stat(&format!("/moved/{f}")).await;
                assert!(
                    old.is_ok() || new.is_ok(),
                    "{f} under neither name: {old:?} {new:?}"
                );
                checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    let lister = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut lists = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let a = c.readdir("/t/d7").await.map(|v| v.len());
                let b = c.readdir("/moved/d7").await.map(|v| v.len());
                assert!(
                    a == Ok(250) || b == Ok(250),
                    "a listing of d7 under either name must be whole: {a:?} {b:?}"
                );
                lists += 1;
            }
            lists
        })
    };
    while checks.load(std::sync::atomic::Ordering::Relaxed) < 20 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let t = std::time::Instant::now();
    must(c.rename("/t", "/moved", RenameFlags::default()).await);
    let took = t.elapsed();
    let at_rename = checks.load(std::sync::atomic::Ordering::Relaxed);
    while checks.load(std::sync::atomic::Ordering::Relaxed) < at_rename + 20 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        must(r.await);
    }
    assert!(must(lister.await) > 0);
    eprintln!("renamed a 10,000-file tree in {took:?}");
    let fresh = tc.client();
    for d in (0..40).step_by(13) {
        assert_eq!(names(&fresh, &format!("/moved/d{d}")).await.len(), 250);
    }
    assert_eq!(fresh.stat("/t").await.err(), Some(FsError::NotFound));
    let out = tc.cli(&["fsck"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Through a FUSE mount: a directory that splits while a shell fills it lists every name
/// once, sorted by `ls`, with attributes.
#[test]
fn a_splitting_directory_through_the_mount() {
    let tc = TestCluster::start_with(4, &[THRESHOLD]);
    let m = crate::mount::Mount::new(&tc, &[]);
    let big = m.dir.path().join("big");
    must(std::fs::create_dir(&big));
    for i in 0..1500 {
        must(std::fs::write(big.join(format!("n{i:04}")), b"z"));
    }
    let mut listed: Vec<String> = must(std::fs::read_dir(&big))
        .map(|e| must(e).file_name().to_string_lossy().into_owned())
        .collect();
    // A name lost here was a create answered behind and then refused: its reserved inode
    // number came from the partition of the directory before it split (fixed by
    // `PeerRequest::ClaimReserved`).
    let mut seen = listed.clone();
    seen.sort();
    let missing: Vec<String> = (0..1500)
        .map(|i| format!("n{i:04}"))
        .filter(|n| seen.binary_search(n).is_err())
        .collect();
    assert!(
        missing.is_empty(),
        "names lost: {missing:?}\n{}",
        m.log_text()
    );
    assert_eq!(listed.len(), 1500);
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), 1500, "no name twice");
    let out = must(
        std::process::Command::new("ls")
            .arg("-l")
            .arg(&big)
            .output(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().filter(|l| l.starts_with("-rw")).count(), 1500);
    let rt = must(tokio::runtime::Runtime::new());
    let c = rt.block_on(async { tc.client() });
    let _ = rt.block_on(c.readdir("/big"));
    assert!(
        c.shard_map("/big").is_some_and(|m| m.leaves.len() == 4),
        "{:?}",
        c.shard_map("/big")
    );
}

/// Servers remember the shard maps of directories they route through (here for permission
/// checks of a non-root user); a directory removed and made again unsplit must not leave
/// them sending requests to nodes that no longer hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_directory_is_not_routed_by_its_old_shard_map() {
    let tc = TestCluster::start_with(4, &[THRESHOLD]);
    let root = tc.client_as(
        tc.map.clone(),
        std::time::Duration::from_secs(10),
        myriad_client::Caller::root(),
    );
    let user = tc.client();
    must(user.mkdir("/big", 0o755).await);
    let names_made: Vec<String> = (0..1200).map(|i| format!("d{i}")).collect();
    for n in &names_made {
        must(user.mkdir(&format!("/big/{n}"), 0o755).await);
    }
    wait_for_leaves(&user, "/big", 4).await;
    // Every subdirectory's permissions are looked up through /big's shards by the servers.
    for n in names_made.iter().step_by(50) {
        must(user.create(&format!("/big/{n}/f"), 0o644, true, b"").await);
        must(user.unlink(&format!("/big/{n}/f")).await);
    }
    for n in &names_made {
        must(root.rmdir(&format!("/big/{n}")).await);
    }
    must(root.rmdir("/big").await);
    must(user.mkdir("/big", 0o755).await);
    for n in names_made.iter().step_by(50) {
        must(user.mkdir(&format!("/big/{n}"), 0o755).await);
        must(
            user.create(&format!("/big/{n}/g"), 0o644, true, b"ok")
                .await,
        );
        let (_, d) = must(user.fetch(&format!("/big/{n}/g")).await);
        assert_eq!(d, b"ok");
    }
}
