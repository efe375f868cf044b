//! Permissions enforced by the servers, and popularity-based replication of ancestor
//! permission metadata (TyrFS Algorithm 1): request counts, change propagation, leases.

use std::time::{Duration, Instant};

use myriad_client::{Caller, Client, ClusterMap, FsError, RenameFlags};

use crate::harness::{TestCluster, server_of};

fn ok<T>(r: Result<T, FsError>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn user(uid: u32, gid: u32, groups: &[u32]) -> Caller {
    Caller {
        uid,
        gid,
        groups: groups.to_vec(),
    }
}

fn as_user(tc: &TestCluster, c: Caller) -> Client {
    tc.client_as(tc.map.clone(), Duration::from_secs(10), c)
}

/// Sum over nodes of (client requests, server-to-server requests excluding lease renewals).
async fn totals(c: &Client) -> (u64, u64) {
    let mut client = 0;
    let mut server = 0;
    for (_, r) in c.all_counters().await {
        let s = r.unwrap_or_else(|e| panic!("{e}"));
        client += s.client_total();
        server += s
            .server_requests
            .iter()
            .filter(|o| o.op != "renew_attrs")
            .map(|o| o.count)
            .sum::<u64>();
    }
    (client, server)
}

/// How many of `path`'s ancestors have their entry on another node than `path`'s entry.
fn remote_ancestors(map: &ClusterMap, path: &str) -> u64 {
    let ring = map.ring();
    let serving = ring.owner_of_entry(path);
    let mut dirs = vec!["/".to_string()];
    let parent = myriad_placement_parent(path);
    let mut cur = String::new();
    for name in parent
        .trim_start_matches('/')
        .split('/')
        .filter(|n| !n.is_empty())
    {
        cur.push('/');
        cur.push_str(name);
        dirs.push(cur.clone());
    }
    dirs.iter()
        .filter(|d| ring.owner_of_entry(d) != serving)
        .count() as u64
}

fn myriad_placement_parent(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".into(),
        Some(i) => path[..i].into(),
    }
}

/// A depth-4 directory whose files' ancestors mostly live on other nodes.
fn deep_dir(map: &ClusterMap, min_remote: u64) -> String {
    (0..1000)
        .map(|i| format!("/d1/d2/d3/d4x{i}"))
        .find(|d| remote_ancestors(map, &format!("{d}/f")) >= min_remote)
        .unwrap_or_else(|| panic!("no suitable directory"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_rules_are_enforced_by_the_servers() {
    let tc = TestCluster::start(4);
    let alice = as_user(&tc, user(1000, 1000, &[]));
    let bob = as_user(&tc, user(2000, 2000, &[]));
    let carol = as_user(&tc, user(3000, 3000, &[1000])); // in alice's group
    let root = as_user(&tc, Caller::root());

    ok(alice.mkdir("/home", 0o755).await);
    ok(alice.mkdir("/home/alice", 0o750).await);
    ok(alice
        .create("/home/alice/public", 0o644, true, b"pub")
        .await);
    ok(alice
        .create("/home/alice/secret", 0o600, true, b"sec")
        .await);

    // Search permission on an ancestor: bob (other) cannot traverse 0750.
    assert_eq!(
        bob.stat("/home/alice/public").await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        bob.fetch("/home/alice/public").await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        bob.readdir("/home/alice").await.err(),
        Some(FsError::PermissionDenied)
    );
    // Group class via a supplementary group: carol can traverse and read 0644, not 0600.
    assert_eq!(
        carol
            .fetch("/home/alice/public")
            .await
            .map(|x| x.1)
            .ok()
            .as_deref(),
        Some(&b"pub"[..])
    );
    assert_eq!(
        carol.fetch("/home/alice/secret").await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        carol.readdir("/home/alice").await.map(|v| v.len()).ok(),
        Some(2)
    );
    // Write on the parent for create/unlink/mkdir/rename; write on the file for writes.
    assert_eq!(
        carol
            .create("/home/alice/new", 0o644, true, b"")
            .await
            .err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        carol.mkdir("/home/alice/sub", 0o755).await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        carol.unlink("/home/alice/public").await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        carol
            .rename("/home/alice/public", "/home/p", RenameFlags::default())
            .await
            .err(),
        Some(FsError::PermissionDenied)
    );
    let h = ok(carol.open("/home/alice/public").await);
    assert_eq!(
        carol.write(&h, 0, b"x").await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        carol.truncate(&h, 0).await.err(),
        Some(FsError::PermissionDenied)
    );
    assert_eq!(
        bob.create("/top", 0o644, true, b"").await.err(),
        Some(FsError::PermissionDenied),
        "root dir is alice's 0755"
    );
    // chmod only by the owner (EPERM, as Linux); root may do anything.
    assert_eq!(
        carol.chmod("/home/alice/public", 0o666).await.err(),
        Some(FsError::NotPermitted)
    );
    ok(root.chmod("/home/alice/public", 0o666).await);
    ok(carol.write(&h, 0, b"P").await);
    assert_eq!(
        root.fetch("/home/alice/secret")
            .await
            .map(|x| x.1)
            .ok()
            .as_deref(),
        Some(&b"sec"[..])
    );

    // Sticky directory: everyone may create, only owners may remove, rename away or
    // rename over an entry (EPERM, as Linux).
    ok(root.mkdir("/tmp", 0o1777).await);
    ok(bob.create("/tmp/bobs", 0o644, true, b"").await);
    ok(carol.create("/tmp/carols", 0o644, true, b"").await);
    assert_eq!(
        carol.unlink("/tmp/bobs").await.err(),
        Some(FsError::NotPermitted)
    );
    assert_eq!(
        carol
            .rename("/tmp/bobs", "/tmp/mine", RenameFlags::default())
            .await
            .err(),
        Some(FsError::NotPermitted)
    );
    assert_eq!(
        carol
            .rename("/tmp/carols", "/tmp/bobs", RenameFlags::default())
            .await
            .err(),
        Some(FsError::NotPermitted),
        "renaming over another user's entry"
    );
    ok(bob.unlink("/tmp/bobs").await);
    ok(root.unlink("/tmp/carols").await);
}

/// After warm-up, fetch of 10,000 files at depth 4 costs exactly one client request and no
/// server-to-server request per file: every ancestor is answered from a local replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_fetch_is_one_request_and_no_server_requests() {
    let tc = TestCluster::start(4);
    let c = as_user(&tc, user(1000, 1000, &[]));
    let dir = deep_dir(&tc.map, 3);
    c.mkdir_p(&dir, 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let n = 10_000u64;
    let paths: Vec<String> = (0..n).map(|i| format!("{dir}/f{i}")).collect();
    for chunk in paths.chunks(500) {
        let futs = chunk
            .iter()
            .map(|p| c.create(p, 0o644, true, b"0123456789"));
        for r in futures::future::join_all(futs).await {
            r.unwrap_or_else(|e| panic!("{e}"));
        }
    }
    for p in &paths[..100] {
        c.fetch(p).await.unwrap_or_else(|e| panic!("{e}"));
    }
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    for chunk in paths.chunks(500) {
        for r in futures::future::join_all(chunk.iter().map(|p| c.fetch(p))).await {
            assert_eq!(r.map(|x| x.1).ok().as_deref(), Some(&b"0123456789"[..]));
        }
    }
    let (client, server) = totals(&c).await;
    assert_eq!(client, n, "one client request per file");
    assert_eq!(server, 0, "no server-to-server request per file");
    let owner = server_of(&c.map(), c.owner_of_entry(&paths[0]));
    let snap = c.counters(owner).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(snap.ancestor_checks_remote, 0);
    assert!(snap.replicas_held >= 3, "{snap:?}");
}

/// With replication off the same reads ask the owner of every remote ancestor, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replication_off_every_read_asks_remote_owners() {
    let tc = TestCluster::start_with(4, &["--metadata-replication", "off"]);
    let c = as_user(&tc, user(1000, 1000, &[]));
    let dir = deep_dir(&tc.map, 3);
    c.mkdir_p(&dir, 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let n = 500u64;
    for i in 0..n {
        c.create(&format!("{dir}/f{i}"), 0o644, true, b"x")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    for i in 0..n {
        c.fetch(&format!("{dir}/f{i}"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let (client, server) = totals(&c).await;
    let per_file = remote_ancestors(&tc.map, &format!("{dir}/f0"));
    assert_eq!(client, n);
    assert_eq!(server, n * per_file, "{per_file} remote ancestors per read");
    // Root skips permission checks altogether (it passes them all).
    let root = as_user(&tc, Caller::root());
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    root.fetch(&format!("{dir}/f0"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(totals(&c).await, (1, 0));
}

/// Directories under /shared whose entries (files) are served by each node in turn.
fn one_dir_per_node(map: &ClusterMap) -> Vec<String> {
    let ring = map.ring();
    map.nodes
        .iter()
        .map(|n| {
            (0..1000)
                .map(|i| format!("/shared/s{i}"))
                .find(|d| map.primary_of(ring.owner_of_dir(d)) == Some(n.id))
                .unwrap_or_else(|| panic!("no dir for node {}", n.id))
        })
        .collect()
}

async fn warm(c: &Client, dirs: &[String]) {
    for d in dirs {
        for _ in 0..30 {
            c.fetch(&format!("{d}/f"))
                .await
                .unwrap_or_else(|e| panic!("fetch {d}/f: {e}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chmod_is_visible_on_every_server_before_it_returns() {
    let tc = TestCluster::start(4);
    let alice = as_user(&tc, user(1000, 1000, &[]));
    let bob = as_user(&tc, user(2000, 2000, &[]));
    let dirs = one_dir_per_node(&tc.map);
    for d in &dirs {
        alice
            .mkdir_p(d, 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        alice
            .create(&format!("{d}/f"), 0o644, true, b"hi")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    warm(&bob, &dirs).await;
    let held: u64 = alice
        .all_counters()
        .await
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .map(|s| s.replicas_held)
        .sum();
    assert!(
        held >= 4,
        "/shared is replicated on the nodes that serve its files ({held} replicas)"
    );

    alice
        .chmod("/shared", 0o000)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for d in &dirs {
        assert_eq!(
            alice.fetch(&format!("{d}/f")).await.err(),
            Some(FsError::PermissionDenied),
            "{d}: even the owner needs search permission"
        );
        assert_eq!(
            bob.fetch(&format!("{d}/f")).await.err(),
            Some(FsError::PermissionDenied),
            "{d}"
        );
    }
    let sent: u64 = alice
        .all_counters()
        .await
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .map(|s| s.invalidations_sent)
        .sum();
    assert!(sent >= 3, "subscribers were notified ({sent})");
    alice
        .chmod("/shared", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for d in &dirs {
        assert!(bob.fetch(&format!("{d}/f")).await.is_ok(), "{d}");
    }
    // chown and rmdir propagate the same way.
    let root = as_user(&tc, Caller::root());
    root.chown("/shared", Some(5000), Some(5000))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    root.chmod("/shared", 0o700)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        alice.fetch(&format!("{}/f", dirs[0])).await.err(),
        Some(FsError::PermissionDenied)
    );
}

/// A subscriber that is alive but silent (SIGSTOP) holds a chmod back by at most the lease;
/// once it resumes it no longer trusts its expired replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_subscriber_delays_chmod_by_at_most_the_lease() {
    let lease = Duration::from_millis(2000);
    let tc = TestCluster::start_with(4, &["--lease-ms", "2000"]);
    let alice = as_user(&tc, user(1000, 1000, &[]));
    let bob = as_user(&tc, user(2000, 2000, &[]));
    let dirs = one_dir_per_node(&tc.map);
    for d in &dirs {
        alice
            .mkdir_p(d, 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        alice
            .create(&format!("{d}/f"), 0o644, true, b"hi")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    warm(&bob, &dirs).await;
    // Freeze a node that holds a replica of /shared but does not own its entry.
    let owner = alice.owner_of_entry("/shared");
    let (victim_dir, victim) = dirs
        .iter()
        .map(|d| (d.clone(), tc.map.ring().owner_of_dir(d)))
        .find(|(_, n)| *n != owner)
        .unwrap_or_else(|| panic!("no subscriber"));
    let victim = server_of(&tc.map, victim);
    // The victim must hold a live subscription when it goes silent (renewals keep it alive).
    let mut subscribed = false;
    for _ in 0..50 {
        warm(&bob, std::slice::from_ref(&victim_dir)).await;
        // "/" and "/shared" both have their entry on `owner`: a valid replica on the victim
        // means a live subscription there.
        let held = alice
            .counters(victim)
            .await
            .map(|c| c.replicas_held)
            .unwrap_or(0);
        if held >= 1 {
            subscribed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        subscribed,
        "the victim holds a replica of /shared's ancestors"
    );
    let pid = tc.pid(victim);
    // SAFETY: stopping and continuing a server process this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t = Instant::now();
    let r = alice.chmod("/shared", 0o700).await;
    let took = t.elapsed();
    unsafe { libc::kill(pid, libc::SIGCONT) };
    r.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        took <= lease + Duration::from_millis(1500),
        "chmod took {took:?}, lease is {lease:?}"
    );
    assert!(
        took >= Duration::from_millis(200),
        "chmod waited for the silent subscriber ({took:?})"
    );
    assert_eq!(
        bob.fetch(&format!("{victim_dir}/f")).await.err(),
        Some(FsError::PermissionDenied)
    );

    // A killed subscriber (kill -9) delays a change by at most the lease too.
    alice
        .chmod("/shared", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    warm(&bob, &dirs).await;
    tc.kill9(victim);
    let t = Instant::now();
    alice
        .chmod("/shared", 0o700)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let took = t.elapsed();
    assert!(
        took <= lease + Duration::from_millis(1500),
        "chmod took {took:?} with a dead subscriber"
    );
    for d in dirs.iter().filter(|d| **d != victim_dir) {
        assert_eq!(
            bob.fetch(&format!("{d}/f")).await.err(),
            Some(FsError::PermissionDenied),
            "{d}"
        );
    }
}

/// A regular user renames a directory tree; replicas of the old paths' permissions are
/// dropped and the new paths resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_rename_by_a_user_keeps_permissions_consistent() {
    let tc = TestCluster::start(4);
    let alice = as_user(&tc, user(1000, 1000, &[]));
    ok(alice.mkdir_p("/tree/d0", 0o755).await);
    for i in 0..50 {
        ok(alice
            .create(&format!("/tree/d0/f{i}"), 0o644, true, b"x")
            .await);
    }
    for i in 0..50 {
        ok(alice.fetch(&format!("/tree/d0/f{i}")).await);
    }
    ok(alice
        .rename("/tree", "/moved", RenameFlags::default())
        .await);
    for i in 0..50 {
        let r = alice.fetch(&format!("/moved/d0/f{i}")).await;
        assert!(r.is_ok(), "/moved/d0/f{i}: {r:?}");
    }
    assert_eq!(
        alice.stat("/tree/d0/f0").await.err(),
        Some(FsError::NotFound)
    );
    // A new tree at the old name does not inherit the old replicas.
    ok(alice.mkdir_p("/tree/d0", 0o700).await);
    ok(alice.create("/tree/d0/g", 0o644, true, b"y").await);
    let bob = as_user(&tc, user(2000, 2000, &[]));
    assert_eq!(
        bob.fetch("/tree/d0/g").await.err(),
        Some(FsError::PermissionDenied)
    );
}

/// Chunk capabilities (docs/write-path.md, part 5): the chunks past the first of a file
/// live apart from its entry, addressed by inode id. A user without access gets no
/// capability, and the chunk's server refuses that user's requests without one, with a
/// forged one, and with a read capability used to write; the owner reads and writes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_are_served_only_with_a_capability() {
    use myriad_client::proto::auth::Capability;
    use myriad_client::proto::{ClientRequest, Request, Response};

    let tc = TestCluster::start(3);
    let root = tc.client();
    ok(root.mkdir("/p", 0o777).await);
    let alice = as_user(&tc, user(1000, 1000, &[]));
    let mallory = as_user(&tc, user(2000, 2000, &[]));
    let cs = tc.map.chunk_size_bytes;
    let size = usize::try_from(cs).unwrap_or(0) + 5000;
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let h = ok(alice.create("/p/private", 0o600, true, &data).await);
    let ino = h.inode.ino;
    assert_eq!(
        ok(alice.read_all("/p/private").await),
        data,
        "the owner reads it all"
    );

    // Through the client library: no access, no bytes (chunk 0 is refused at the entry).
    assert_eq!(
        mallory.read_all("/p/private").await.err(),
        Some(FsError::PermissionDenied)
    );
    // No capability granted.
    let grant = |write| ClientRequest::Grant {
        path: "/p/private".into(),
        ino,
        write,
        opened: false,
    };
    let entry = tc.map.ring().owner_of_entry("/p/private");
    for write in [false, true] {
        let r = mallory.request(entry, Request::from(grant(write))).await;
        assert_eq!(
            r.err(),
            Some(FsError::PermissionDenied),
            "granted: write {write}"
        );
    }
    // Straight to the server of chunk 1: without a capability, with a forged one, with
    // the owner's read capability used to write.
    let chunk_of = tc.map.ring().owner_of_chunk(ino, 1);
    let read = |cap| ClientRequest::ReadChunk {
        ino,
        chunk: 1,
        offset: 0,
        len: 100,
        cap,
    };
    let write = |cap| ClientRequest::WriteChunk {
        ino,
        chunk: 1,
        offset: 0,
        data: b"overwritten".to_vec(),
        cap,
    };
    let forged = Capability {
        ino,
        write: true,
        expires_ns: i64::MAX,
        tag: [7; 16],
    };
    let Ok(Response::Granted { cap: alices, .. }) =
        alice.request(entry, Request::from(grant(false))).await
    else {
        panic!("the owner is granted reading");
    };
    assert!(!alices.write);
    for (what, req) in [
        ("read, no capability", read(None)),
        ("write, no capability", write(None)),
        ("read, forged", read(Some(forged))),
        ("write, forged", write(Some(forged))),
        ("write with a read capability", write(Some(alices))),
        (
            "read of another inode",
            ClientRequest::ReadChunk {
                ino: myriad_client::InodeId(ino.0 + 1),
                chunk: 1,
                offset: 0,
                len: 100,
                cap: Some(alices),
            },
        ),
    ] {
        let r = mallory.request(chunk_of, Request::from(req)).await;
        assert_eq!(r.err(), Some(FsError::PermissionDenied), "{what}");
    }
    // The read capability reads (whoever holds it: it is a bearer token, for 2 minutes).
    match mallory
        .request(chunk_of, Request::from(read(Some(alices))))
        .await
    {
        Ok(Response::Data { data: got, .. }) => assert_eq!(got, data[size - 5000..size - 4900]),
        other => panic!("a good capability was refused: {other:?}"),
    }
    // Nothing was overwritten; the owner writes past chunk 0 (granted on the way).
    assert_eq!(ok(alice.read_all("/p/private").await), data);
    ok(alice.write(&h, cs + 10, b"mine").await);
    let after = ok(alice.read_all("/p/private").await);
    assert_eq!(&after[size - 4990..size - 4986], b"mine");
}
