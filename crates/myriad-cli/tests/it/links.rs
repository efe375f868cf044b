//! Hard links through the native client, across servers, and under kill -9.

use myriad_client::NodeId;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{TestCluster, dir_on_node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_across_servers_share_one_inode_until_the_last_name_goes() {
    let tc = TestCluster::start(4);
    let c = tc.client();
    // One directory per node, so names live on four different servers.
    let dirs: Vec<String> = (1..=4)
        .map(|n| dir_on_node(&c, &tc.map, NodeId(n), &format!("n{n}")))
        .collect();
    for d in &dirs {
        c.mkdir(d, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let first = format!("{}/f", dirs[0]);
    let h = c
        .create(&first, 0o644, true, b"linked")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut names = vec![first.clone()];
    for d in &dirs[1..] {
        let to = format!("{d}/l");
        let i = c.link(names.last().map_or("", String::as_str), &to).await;
        let i = i.unwrap_or_else(|e| panic!("link to {to}: {e}"));
        assert_eq!(i.ino, h.inode.ino);
        names.push(to);
    }
    for n in &names {
        let i = c.stat(n).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((i.ino, i.nlink, i.size), (h.inode.ino, 4, 6), "{n}");
        assert_eq!(c.read_all(n).await.unwrap_or_default(), b"linked", "{n}");
    }
    // A listing shows the real inode, never the reference.
    let listed = c.readdir(&dirs[2]).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].inode.ino, h.inode.ino);
    assert_eq!(listed[0].inode.kind, myriad_client::FileKind::File);
    // Writes through one name (and a big one, into other chunks) show through all.
    let f3 = c.open(&names[3]).await.unwrap_or_else(|e| panic!("{e}"));
    let big = vec![7u8; 5 << 20];
    c.write(&f3, 0, &big)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.read_all(&names[1]).await.unwrap_or_default(), big);
    // Remove names one by one: the others keep working, the count follows.
    for (k, n) in names.iter().enumerate().take(3) {
        c.unlink(n).await.unwrap_or_else(|e| panic!("{e}"));
        let left = &names[3];
        let i = c.stat(left).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i.nlink as usize, 3 - k);
        assert_eq!(c.read_all(left).await.unwrap_or_default(), big);
    }
    c.unlink(&names[3]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(c.stat(&names[3]).await.is_err());
    // Directories cannot be linked; an existing target is refused.
    assert!(c.link(&dirs[0], "/dl").await.is_err());
    c.create("/x", 0o644, true, b"x")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.create("/y", 0o644, true, b"y")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.link("/x", "/y").await.map(|_| ()),
        Err(myriad_client::FsError::AlreadyExists)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_links_leaves_no_name_without_its_inode() {
    let tc = TestCluster::start(4);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(3)));
    let dirs: Vec<String> = (1..=4)
        .map(|n| dir_on_node(&c, &tc.map, NodeId(n), &format!("k{n}")))
        .collect();
    for d in &dirs {
        c.mkdir(d, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    }
    for f in 0..32 {
        let p = format!("{}/f{f}", dirs[f % 4]);
        c.create(&p, 0o644, true, format!("file {f}").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let worker = {
        let c = c.clone();
        let dirs = dirs.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let mut k = 0usize;
            while start.elapsed() < Duration::from_millis(1500) {
                let futs = (0..16).map(|j| {
                    let c = c.clone();
                    let f = (k + j) % 32;
                    let from = format!("{}/f{f}", dirs[f % 4]);
                    let to = format!("{}/l{}", dirs[(f + 1 + j) % 4], k + j);
                    async move {
                        if c.link(&from, &to).await.is_ok() && (k + j).is_multiple_of(2) {
                            let _ = c.unlink(&to).await;
                        }
                    }
                });
                futures::future::join_all(futs).await;
                k += 16;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.kill9(NodeId(3));
    worker.await.unwrap_or_else(|e| panic!("{e}"));
    tc.restart(NodeId(3));
    tc.wait_up(&c, NodeId(3)).await;
    // Every name present resolves to a file whose contents are intact, and each inode's
    // link count is at least the number of names found (one too high is the allowed
    // crash outcome; too low would lose data).
    let mut names_per_ino = std::collections::HashMap::<u64, (u32, u32)>::new();
    for d in &dirs {
        let entries = c.readdir(d).await.unwrap_or_else(|e| panic!("{d}: {e}"));
        for e in entries {
            let p = format!("{d}/{}", e.name);
            let data = c
                .read_all(&p)
                .await
                .unwrap_or_else(|er| panic!("{p}: {er}"));
            assert!(data.starts_with(b"file "), "{p}: {data:?}");
            let slot = names_per_ino
                .entry(e.inode.ino.0)
                .or_insert((0, e.inode.nlink));
            slot.0 += 1;
        }
    }
    assert!(
        names_per_ino.len() >= 28,
        "files lost: {}",
        names_per_ino.len()
    );
    for (ino, (names, nlink)) in names_per_ino {
        assert!(
            nlink >= names,
            "inode {ino:x}: {names} names but nlink {nlink}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_never_writes_into_the_inode_that_replaced_its_name() {
    let tc = TestCluster::start(2);
    let c = tc.client();
    let hx = c
        .create("/x", 0o644, true, b"xxxx")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.create("/y", 0o644, true, b"yyyy")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.link("/y", "/x.tmp")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.rename("/x.tmp", "/x", myriad_client::RenameFlags::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // /x is now a name of /y's inode; the old handle must not reach it.
    assert_eq!(
        c.write(&hx, 0, b"ZZ").await.map(|_| ()),
        Err(myriad_client::FsError::Stale)
    );
    assert_eq!(
        c.truncate(&hx, 0).await.map(|_| ()),
        Err(myriad_client::FsError::Stale)
    );
    assert_eq!(c.read_all("/y").await.unwrap_or_default(), b"yyyy");
    assert_eq!(c.read_all("/x").await.unwrap_or_default(), b"yyyy");
}
