//! Round trips counted by the servers themselves.

use crate::harness::{TestCluster, server_of};
use myriad_client::NodeId;

async fn per_node(c: &myriad_client::Client) -> Vec<(NodeId, u64, u64)> {
    c.all_counters()
        .await
        .into_iter()
        .map(|(id, r)| {
            let s = r.unwrap_or_else(|e| panic!("{e}"));
            (id, s.client_total(), s.server_total())
        })
        .collect()
}

/// DESIGN.md: reading a small file by path through fetch costs exactly one client-to-server
/// round trip and touches exactly one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_of_an_inline_file_is_one_request_to_one_server() {
    let tc = TestCluster::start(4);
    let c = tc.client();
    c.mkdir_p("/p/q/r", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let data = vec![5u8; 32 * 1024];
    c.create("/p/q/r/file", 0o644, true, &data)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..3 {
        c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
        let (inode, got) = c
            .fetch("/p/q/r/file")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((inode.size, got), (32 * 1024, data.clone()));
        let counts = per_node(&c).await;
        let touched: Vec<_> = counts.iter().filter(|(_, cl, sv)| cl + sv > 0).collect();
        assert_eq!(touched.len(), 1, "exactly one server touched: {counts:?}");
        assert_eq!(
            (touched[0].1, touched[0].2),
            (1, 0),
            "one client request, no server-to-server: {counts:?}"
        );
        assert_eq!(
            touched[0].0,
            server_of(&c.map(), c.owner_of_entry("/p/q/r/file"))
        );
    }
}

/// DESIGN.md: creating a small file in a directory is one atomic write on one server,
/// once the directory's ancestors are popular there (a cold node first asks their owners
/// for the permissions it must check; the first creates make them popular and
/// replicated). Then that server sends the directory's new times (its mtime and ctime
/// change, POSIX) to the server holding the directory's own entry: one `dir_touches`, and
/// nothing else, unless both are the same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_data_is_one_request_to_one_server() {
    let tc = TestCluster::start(4);
    let c = tc.client();
    c.mkdir("/c", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    for i in 0..20 {
        c.create(&format!("/c/warm{i}"), 0o644, true, b"w")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    c.create("/c/new", 0o644, true, &[1u8; 4096])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let entry = server_of(&c.map(), c.owner_of_entry("/c/new"));
    let dir_entry = server_of(&c.map(), c.owner_of_entry("/c"));
    for (id, r) in c.all_counters().await {
        let s = r.unwrap_or_else(|e| panic!("{e}"));
        let want_client = u64::from(id == entry);
        let want_touch = u64::from(id == dir_entry && dir_entry != entry);
        assert_eq!(
            (s.client_total(), s.server_total()),
            (want_client, want_touch),
            "server {id} (entry on {entry}, directory's entry on {dir_entry}): {s:?}"
        );
        let touches: u64 = s
            .server_requests
            .iter()
            .filter(|o| o.op == "dir_touches")
            .map(|o| o.count)
            .sum();
        assert_eq!(touches, want_touch, "server {id}: {s:?}");
    }
}

/// Creates in many directories whose entries live on one partition: every directory's
/// times move, and the touches share requests (`DirTouches`) instead of one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_of_many_directories_share_requests() {
    use futures::StreamExt;
    let tc = TestCluster::start(4);
    let c = std::sync::Arc::new(tc.client());
    const DIRS: usize = 32;
    const FILES: usize = 640;
    c.mkdir("/t", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    for d in 0..DIRS {
        c.mkdir(&format!("/t/d{d}"), 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // Warm: the ancestors become popular where the files go.
        c.create(&format!("/t/d{d}/warm"), 0o644, true, b"w")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    let mut s = futures::stream::iter((0..FILES).map(|i| {
        let c = c.clone();
        async move {
            c.create(&format!("/t/d{}/f{i}", i % DIRS), 0o644, true, &[7u8; 512])
                .await
        }
    }))
    .buffer_unordered(64);
    while let Some(r) = s.next().await {
        r.unwrap_or_else(|e| panic!("{e}"));
    }
    let mut touch_requests = 0;
    for (_, r) in c.all_counters().await {
        let s = r.unwrap_or_else(|e| panic!("{e}"));
        touch_requests += s
            .server_requests
            .iter()
            .filter(|o| o.op == "dir_touches" || o.op == "dir_touch")
            .map(|o| o.count)
            .sum::<u64>();
    }
    for d in 0..DIRS {
        let i = c
            .stat(&format!("/t/d{d}"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            i.mtime_ns >= before && i.ctime_ns >= before,
            "/t/d{d}: times not moved by its creates: {i:?}"
        );
        assert_eq!(i.nlink, 2, "/t/d{d}");
    }
    assert!(
        touch_requests < (FILES / 2) as u64,
        "{touch_requests} touch requests for {FILES} creates: touches are not shared"
    );
}
